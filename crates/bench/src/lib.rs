//! # Benchmarks
//!
//! The library behind the `meridian-bench` binary (`src/main.rs`). It
//! carries the peer drivers (redis, tokio-postgres, etcd-client) and the
//! plotting (plotters); the `meridian` server binary links none of it. The
//! local clusters it drives are `meridian_cli::cluster`'s, their nodes
//! processes of the `meridian` binary.
//!
//! - [`drive`]: the one closed loop every target runs (Meridian and the
//!   peers), over workload mixes written against `TxnOps`.
//! - [`peers`], [`pg`], [`etcd`]: the same workloads against Redis,
//!   PostgreSQL and etcd, for side-by-side figures.
//! - [`cpu`]: CPU per transaction of the bench client and of the servers,
//!   over the measured window, for every target.
//! - [`run`]: closed-loop drivers for TATP, YCSB, the null-RPC baseline and
//!   the checked bank workload. Each session keeps one transaction
//!   outstanding; latencies go to per-type HDR histograms; results print as a
//!   table and are written as JSON.
//!
//! Benchmark figures are only comparable within one run on this shared
//! machine, so `meridian-bench tatp` and `meridian-bench ycsb` measure the
//! null-RPC baseline in the same run and report the ratio.

pub mod cpu;
pub mod drive;
pub mod etcd;
pub mod peers;
pub mod pg;
pub mod run;
pub mod sweep;
pub mod timeline;
