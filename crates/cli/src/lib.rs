//! # Local clusters of `meridian` node processes
//!
//! The library half of `meridian-cli`, shared by the `meridian` command and
//! by `meridian-bench` (which links it, never the other way round, so the
//! server binary carries none of the bench's peer drivers or plotting):
//!
//! - [`cluster`]: start, stop and inspect a local cluster of node processes
//!   (each its own OS process, so `kill -9` is real), each with its own data
//!   directory and log file.
//! - [`netns`]: each node in a network namespace of its own, for real
//!   partitions (`meridian fault partition|heal`; root, iproute2, nftables).
//! - [`cpus`]: the CPUs a local cluster's nodes (and a bench client) run on.

pub mod cluster;
pub mod cpus;
pub mod netns;
