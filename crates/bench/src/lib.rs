//! # Benchmarks and local clusters
//!
//! - [`cluster`]: start, stop and inspect a local cluster of node processes
//!   (each its own OS process, so `kill -9` is real), each with its own data
//!   directory and log file.
//! - [`netns`]: each node in a network namespace of its own, for real
//!   partitions (`meridian fault partition|heal`; root, iproute2, nftables).
//! - [`drive`]: the one closed loop every target runs (Meridian and the
//!   peers), over workload mixes written against `TxnOps`.
//! - [`peers`], [`pg`], [`etcd`]: the same workloads against Redis,
//!   PostgreSQL and etcd, for side-by-side figures (issue 7).
//! - [`cpu`]: CPU per transaction of the bench client and of the servers,
//!   over the measured window, for every target.
//! - [`run`]: closed-loop drivers for TATP, YCSB, the null-RPC baseline and
//!   the checked bank workload. Each session keeps one transaction
//!   outstanding; latencies go to per-type HDR histograms; results print as a
//!   table and are written as JSON.
//!
//! Benchmark figures are only comparable within one run on this shared
//! machine, so `bench tatp` and `bench ycsb` measure the null-RPC baseline in
//! the same run and report the ratio.

pub mod cluster;
pub mod cpu;
pub mod cpus;
pub mod drive;
pub mod etcd;
pub mod netns;
pub mod peers;
pub mod pg;
pub mod run;
pub mod sweep;
pub mod timeline;
