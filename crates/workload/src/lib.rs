//! # Meridian workloads
//!
//! Workload code written once and driven two ways: through the async
//! [`ops::TxnOps`] trait, by the real client (`meridian-bench …`) and by the
//! deterministic simulator's TATP and YCSB runs; and through the step-wise
//! [`ops::Program`] interface, by the simulator's bank, register and rows
//! workloads. Nothing here does I/O or reads the
//! clock; randomness comes from a caller-supplied RNG so that a simulator seed
//! reproduces exactly.
//!
//! Key layout: the key space is range-partitioned on the first byte (see
//! `meridian-config`), so every workload key starts with a *shard byte*
//! derived from the row's partitioning id. That spreads each table evenly
//! over the regions while keeping related rows (a subscriber's call
//! forwardings, say) contiguous for scans.

pub mod bank;
pub mod ops;
pub mod rmw;
pub mod rows;
pub mod tatp;
pub mod tpcc;
pub mod ycsb;
