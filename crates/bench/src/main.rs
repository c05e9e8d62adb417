//! The `meridian-bench` command: Meridian's benchmarks (TATP, YCSB, RMW,
//! TPC-C, null RPC, the checked bank, failover runs and sweeps), against
//! Meridian or a peer (Redis, PostgreSQL, etcd). See `meridian-bench
//! --help`.
//!
//! Without `--cm` a benchmark starts a local cluster whose nodes run from
//! the `meridian` server binary ([`cluster::server_exe`]: `meridian` next
//! to this executable, or `$MERIDIAN_BIN`): build both with `cargo build
//! --release -p meridian-cli -p meridian-bench`.

use clap::{Parser, Subcommand};
use meridian_cli::cluster;
use std::path::PathBuf;
use std::process::ExitCode;

mod failover;
use failover::*;
mod target_meridian;
use target_meridian::bench_meridian;

/// The bench client allocates through mimalloc, as the nodes do: with
/// glibc's allocator, malloc and free were about 11 % of the bench
/// client's CPU under the 4-key RMW (docs/performance.md, thirteenth
/// session).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "meridian-bench",
    version,
    about = "Meridian's benchmarks: a local cluster (or --cm) or a peer, driven by the shared workload code"
)]
struct Cli {
    #[command(subcommand)]
    bench: BenchCmd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match bench_cmd(cli.bench) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Clone)]
struct BenchOpts {
    /// CM address of a running cluster; omitted = start a local 3-node cluster.
    #[arg(long)]
    cm: Option<String>,
    /// Seconds to run (measured).
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Seconds of unmeasured warm-up after the load and before the
    /// measured run, the same for every target (0 = none): the run then
    /// measures the steady state, not what the load left behind.
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Concurrent sessions (each keeps one transaction outstanding).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds of the null-RPC baseline measured in the same run (0 = skip).
    #[arg(long, default_value_t = 10)]
    baseline: u64,
    /// Where to write the JSON results.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory for the local cluster (when --cm is omitted), or of the
    /// running cluster `--cm` names (for `--kill` and timeline markers).
    #[arg(long, default_value = ".meridian/bench")]
    dir: PathBuf,
    /// Nodes of the local cluster (3-way replication, or fewer nodes).
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// `kill -9` these nodes during the run (comma-separated node ids;
    /// `cm` is the CM): FaRM Figure 9's experiment.
    #[arg(long, value_delimiter = ',')]
    kill: Vec<String>,
    /// When to kill, seconds into the run (default: half the duration).
    #[arg(long)]
    kill_at: Option<f64>,
    /// Spare nodes of the local cluster: in its address book, not
    /// members, started at `--join-at` (FaRM §5.2 joins, §5.4 paced
    /// rebalancing onto them).
    #[arg(long, default_value_t = 0)]
    spares: u32,
    /// When to start the spares, seconds into the run (default: at once).
    #[arg(long)]
    join_at: Option<f64>,
    /// The local cluster's lease, ms (default: `[lease] lease_ms`), for
    /// FaRM Figure 16's false-positive measurement: suspicions without a
    /// fault are counted from the nodes' `events.jsonl`.
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Set a limit of the local cluster's nodes, as `[limits] NAME = VALUE`
    /// in its configuration would (repeatable), e.g. `--limit
    /// blind_lock_wait_us=0` for an A/B of that wait. A name that is not a
    /// limit is refused before the cluster starts.
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    limits: Vec<String>,
    /// Set a clock setting of the local cluster, as `[clock] NAME = VALUE`
    /// in its configuration would (repeatable), e.g. `--clock
    /// sync_interval_us=5000`. Refused before the cluster starts if it does
    /// not parse, or if the clock settings it leaves are inconsistent.
    #[arg(long = "clock", value_name = "NAME=VALUE")]
    clock: Vec<String>,
    /// Write the 1 ms throughput timeline here (`.json` and `.png` are
    /// added), with the nodes' reconfiguration milestones as markers.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// The local cluster's durability (default: `[durability] mode`,
    /// disk): `memory` is FaRM's non-volatile DRAM assumption, for the
    /// disk/memory ratio and failover runs that measure the protocol
    /// rather than fsync.
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Run the checked bank workload alongside (TATP, YCSB) with this
    /// many sessions: its checker and audits show that no commit was lost
    /// across a `--kill`.
    #[arg(long, default_value_t = 0)]
    bank_sessions: usize,
    /// Write the bank history (`meridian-bench bank`, or `--bank-sessions`) as
    /// Jepsen EDN here, for outside checkers.
    #[arg(long)]
    edn: Option<PathBuf>,
    /// The system to drive with the same workload code: Meridian, or a
    /// peer started by `scripts/peers.sh`. TATP, YCSB and RMW.
    #[arg(long, value_enum, default_value = "meridian")]
    target: TargetArg,
    /// The peer's address (default: its standard loopback port; for
    /// PostgreSQL a libpq connection string).
    #[arg(long)]
    peer_url: Option<String>,
    /// Worker threads of the bench client's tokio runtime, for every
    /// target alike (1..=64). One is the default: on this 2-core machine a
    /// second worker costs Meridian's client cross-thread wake-ups, and
    /// every peer was measured at both (docs/performance.md, eleventh
    /// session).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    client_threads: u16,
    /// Run the bench client (every thread of it) on these CPUs, in
    /// `taskset -c` syntax (`0`, `0-1`, `0,2`); default: every CPU. With
    /// `--node-cpus`, the client and the servers stop competing for cores,
    /// as on separate machines (`meridian_cli::cpus`).
    #[arg(long, value_name = "LIST")]
    client_cpus: Option<String>,
    /// Start the local cluster's nodes on these CPUs (`taskset -c` syntax);
    /// default: every CPU. Not with `--cm`. For peers, `PEER_CPUS` of
    /// `scripts/peers.sh` does the same.
    #[arg(long, value_name = "LIST")]
    node_cpus: Option<String>,
}

/// The bench client's runtime: `threads` tokio workers (`--client-threads`),
/// the same for Meridian and every peer, on the CPUs of `cpus`
/// (`--client-cpus`; the calling thread is pinned first, and the runtime's
/// threads inherit it).
///
/// Errors: a bad CPU list, a list the kernel refuses, or the runtime
/// cannot be built (threads or the I/O driver).
fn bench_runtime(threads: u16, cpus: Option<&str>) -> Result<tokio::runtime::Runtime, String> {
    if let Some(list) = cpus {
        let cpus = meridian_cli::cpus::parse(list).map_err(|e| format!("--client-cpus: {e}"))?;
        meridian_cli::cpus::pin_process(&cpus)
            .map_err(|e| format!("--client-cpus {list}: cannot run there: {e}"))?;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(threads.max(1)))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the bench runtime: {e}"))
}

/// `--target` of a benchmark.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum TargetArg {
    /// Meridian (a local cluster, or `--cm`).
    Meridian,
    /// Redis with WATCH/MULTI/EXEC transactions, no persistence.
    Redis,
    /// PostgreSQL 15 at SERIALIZABLE, fsync on.
    Postgres,
    /// etcd with Txn compare-and-swap, fsync on.
    Etcd,
}

/// `--durability` for a local bench cluster.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DurabilityArg {
    /// In memory (FaRM's non-volatile DRAM assumption).
    Memory,
    /// Write-ahead log with group-commit fsync, and checkpoints.
    Disk,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// TATP (seven transactions, spec mix).
    Tatp {
        #[command(flatten)]
        opts: BenchOpts,
        /// Subscribers.
        #[arg(long, default_value_t = 100_000)]
        subscribers: u64,
    },
    /// YCSB workloads A, B, C, F.
    Ycsb {
        #[command(flatten)]
        opts: BenchOpts,
        /// Workload (a, b, c, f).
        #[arg(long, default_value = "b")]
        workload: String,
        /// Records.
        #[arg(long, default_value_t = 100_000)]
        records: u64,
        /// Zipfian constant.
        #[arg(long, default_value_t = 0.99)]
        theta: f64,
        /// Value size, bytes.
        #[arg(long, default_value_t = 1000)]
        value_bytes: usize,
    },
    /// A multi-key read-modify-write transaction (read `--keys` counters,
    /// write each back plus one), audited exactly afterwards: the counters
    /// must sum to keys × commits.
    Rmw {
        #[command(flatten)]
        opts: BenchOpts,
        /// Counters.
        #[arg(long, default_value_t = 10_000)]
        records: u32,
        /// Counters per transaction.
        #[arg(long, default_value_t = 4)]
        keys: usize,
        /// Value size, bytes (at least 8).
        #[arg(long, default_value_t = 100)]
        value_bytes: usize,
    },
    /// TPC-C's full mix (NewOrder, Payment, OrderStatus, Delivery,
    /// StockLevel; FaRM §6.3), with the spec's consistency conditions
    /// checked over the whole store afterwards.
    Tpcc {
        #[command(flatten)]
        opts: BenchOpts,
        /// Warehouses (each about 660k rows, 76 MB raw).
        #[arg(long, default_value_t = 2)]
        warehouses: u32,
        /// Skip the consistency check after the run.
        #[arg(long)]
        no_check: bool,
    },
    /// Throughput, p50 and p99 against sessions (1 to 256) for Meridian
    /// and the peers on one workload: JSON and PNG in `--out`. Peers must
    /// be running (`scripts/peers.sh start all`).
    Sweep {
        /// Workload: tatp, ycsb-a, ycsb-b, ycsb-c, ycsb-f or rmw.
        #[arg(long, default_value = "ycsb-b")]
        workload: String,
        /// Targets: meridian-memory, meridian-disk, redis, postgres, etcd.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "meridian-memory,meridian-disk,redis,postgres,etcd"
        )]
        targets: Vec<String>,
        /// Session counts.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1,2,4,8,16,32,64,128,256"
        )]
        sessions: Vec<usize>,
        /// Seconds per point.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Size: YCSB records, TATP subscribers or RMW counters.
        #[arg(long, default_value_t = 100_000)]
        size: u64,
        /// Meridian's nodes (3-way replication).
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// Output directory (`sweep-<workload>.json` and `.png`).
        #[arg(long, default_value = "bench-results")]
        out: PathBuf,
        /// Worker threads of the bench client's runtime, for every target
        /// alike (as the other benchmarks' `--client-threads`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        client_threads: u16,
    },
    /// Closed-loop null RPC round trips (the ceiling).
    Rpc {
        #[command(flatten)]
        opts: BenchOpts,
    },
    /// Bank transfers and audits with history checking.
    Bank {
        #[command(flatten)]
        opts: BenchOpts,
        /// Accounts.
        #[arg(long, default_value_t = 64)]
        accounts: u32,
    },
    /// FaRM Figure 9, repeated: `--runs` TATP runs on a fresh local
    /// cluster per scenario, each with a `kill -9` half-way and the checked
    /// bank alongside; prints the median of each failover figure.
    Failover {
        /// Runs per scenario.
        #[arg(long, default_value_t = 10)]
        runs: u32,
        /// Scenarios (comma-separated): `non-cm` (the last node), `cm`,
        /// `cm+1` (the CM and the last node at once).
        #[arg(long, value_delimiter = ',', default_value = "non-cm,cm,cm+1")]
        scenarios: Vec<String>,
        /// Nodes (3-way replication).
        #[arg(long, default_value_t = 5)]
        nodes: u32,
        /// TATP subscribers.
        #[arg(long, default_value_t = 10_000)]
        subscribers: u64,
        /// Seconds per run (the kill comes half-way).
        #[arg(long, default_value_t = 8)]
        duration: u64,
        /// TATP sessions.
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Bank sessions alongside.
        #[arg(long, default_value_t = 4)]
        bank_sessions: usize,
        /// Durability of the clusters.
        #[arg(long, value_enum, default_value = "memory")]
        durability: DurabilityArg,
        /// Where the runs' JSON, timelines and the summary go.
        #[arg(long, default_value = "bench-results/failover")]
        out: PathBuf,
        /// The clusters' lease, ms (default: `[lease] lease_ms`).
        #[arg(long)]
        lease_ms: Option<u64>,
    },
}

/// The figures `meridian-bench failover` summarises (ms after the kill).
const FAILOVER_FIGURES: [&str; 8] = [
    "recovery_ms",
    "suspect_ms",
    "config_cas_ms",
    "config_commit_ms",
    "regions_active_ms",
    "data_recovered_ms",
    "clock_disabled_ms",
    "client_indeterminate",
];

/// Print a benchmark's result: its throughput and aborts, then the
/// sections its figures call for, and its latencies.
fn print_result(r: &meridian_bench::run::BenchResult) {
    println!(
        "== {} — {} sessions, {:.1} s",
        r.bench, r.clients, r.seconds
    );
    println!(
        "committed: {} ({:.0} tx/s), aborts: {} (abort rate {:.3}%)",
        r.committed,
        r.committed_per_s,
        r.aborts,
        r.abort_rate * 100.0
    );
    if r.aborts > 0 {
        let by: Vec<String> = r
            .aborts_by_cause
            .iter()
            .map(|(kind, causes)| {
                let c: Vec<String> = causes.iter().map(|(c, n)| format!("{c} {n}")).collect();
                format!("{kind}: {}", c.join(", "))
            })
            .collect();
        println!("aborts by cause: {}", by.join("; "));
    }
    if let Some(s) = r.successful_per_s {
        println!("successful (MQTh): {s:.0} tx/s");
    }
    print_cpu(r);
    if let Some(t) = r.extra.get("tpmC") {
        println!(
            "NEW_ORDER: {:.0}/s, tpmC {t:.0} (rolled back NEW_ORDERs included: {})",
            t / 60.0,
            r.extra.get("rollbacks").copied().unwrap_or(0.0)
        );
    }
    let (errors, inconsistent) = (
        r.extra.get("errors").copied().unwrap_or(0.0),
        r.extra.get("inconsistent").copied().unwrap_or(0.0),
    );
    if errors > 0.0 || inconsistent > 0.0 {
        println!("operational errors: {errors}, bodies that found a must-exist row missing: {inconsistent}");
    }
    print_clock(r);
    print_commit_stages(r);
    print_node_reads(r);
    if let (Some(b), Some(q)) = (r.rpc_baseline_per_s, r.ratio_to_rpc) {
        println!("null-RPC baseline (same run): {b:.0} round trips/s; ratio tx/s ÷ rpc/s = {q:.3}");
        if let (Some(c), Some(n)) = (
            r.extra.get("rpc_client_cpu_us_per_rt"),
            r.extra.get("rpc_server_cpu_us_per_rt"),
        ) {
            println!("null-RPC baseline: cpu per round trip: client {c:.2} µs, servers {n:.2} µs");
        }
    }
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>10}",
        "latency (µs)", "count", "p50", "p99", "p99.9"
    );
    for (k, l) in &r.latency {
        println!(
            "{:<26} {:>10} {:>10.0} {:>10.0} {:>10.0}",
            k, l.committed, l.p50_us, l.p99_us, l.p999_us
        );
    }
}

/// The result's figure `k`, 0 if it has none.
fn figure(r: &meridian_bench::run::BenchResult, k: &str) -> f64 {
    r.extra.get(k).copied().unwrap_or(0.0)
}

/// Print the CPU per transaction of the client and the servers, if
/// measured.
fn print_cpu(r: &meridian_bench::run::BenchResult) {
    let Some(c) = r.extra.get("client_cpu_us_per_tx") else {
        return;
    };
    let get = |k: &str| figure(r, k);
    let servers = match r.extra.get("server_cpu_us_per_tx") {
        Some(s) => {
            let n = get("server_processes");
            format!(
                "servers {s:.1} µs ({:.2} cores, {n} process{})",
                get("server_cores"),
                if n == 1.0 { "" } else { "es" }
            )
        }
        None => "servers not measured (none found on this machine)".into(),
    };
    println!(
        "cpu per transaction: client {c:.1} µs ({:.2} cores), {servers}",
        get("client_cores")
    );
}

/// Print the clock's figures: the uncertainty and GET_TS waits, and what
/// the `write_ts` waits left to the nodes cost a commit.
fn print_clock(r: &meridian_bench::run::BenchResult) {
    if r.mean_uncertainty_us > 0.0 {
        println!(
            "clock: mean uncertainty {:.1} µs, mean GET_TS wait {:.1} µs ({:.2}x)",
            r.mean_uncertainty_us,
            r.mean_uncertainty_wait_us,
            r.mean_uncertainty_wait_us / r.mean_uncertainty_us
        );
        if let Some(late) = r.extra.get("ts_late_mean_us") {
            println!(
                "clock: GET_TS waits ended {:.1} µs after their deadline on average ({} over 100 µs)",
                late,
                r.extra.get("ts_late_over_100us").copied().unwrap_or(0.0)
            );
        }
    }
    if let Some(n) = r.extra.get("write_ts_unwaited") {
        let get = |k: &str| figure(r, k);
        let (held, once) = (get("node_write_ts_held"), get("node_write_ts_at_once"));
        let unc = get("write_ts_unwaited_uncertainty_us");
        // What the uncertainty wait cost a commit:
        // every hold summed per commit, an upper bound (a commit's held
        // requests wait side by side, so it waits for the longest only).
        let total = get("node_write_ts_hold_mean_us") * held;
        let per_commit = total / n.max(1.0);
        println!(
            "clock: write_ts left to the nodes in {n} commits (mean uncertainty {unc:.1} µs); \
             {:.1} % of their VALIDATEs/COMMIT-BACKUPs held until it passed (mean {:.1} µs), \
             {} sent back to wait at the client; wait per commit at most {per_commit:.1} µs \
             ({:.2}x the uncertainty)",
            100.0 * held / (held + once).max(1.0),
            get("node_write_ts_hold_mean_us"),
            get("node_write_ts_not_held"),
            per_commit / unc.max(f64::MIN_POSITIVE),
        );
    }
}

/// Print the mean time of a read-write commit in each stage, if timed.
fn print_commit_stages(r: &meridian_bench::run::BenchResult) {
    let Some(n) = r.extra.get("stages_timed") else {
        return;
    };
    let parts: Vec<String> = meridian_bench::run::COMMIT_STAGE_NAMES
        .iter()
        .map(|name| {
            let us = r
                .extra
                .get(&format!("stage_{name}_mean_us"))
                .copied()
                .unwrap_or(0.0);
            format!("{} {us:.0}", name.replace('_', "-"))
        })
        .collect();
    println!(
        "read-write commits, mean µs per stage ({n} commits): {}",
        parts.join(", ")
    );
}

/// Print how the nodes served reads (held until `read_ts` passed, or at
/// once) and, where they waited, the reads and blind LOCKs that met a
/// lock, if the nodes' counters were read.
fn print_node_reads(r: &meridian_bench::run::BenchResult) {
    let (Some(held), Some(once)) = (
        r.extra.get("node_reads_held"),
        r.extra.get("node_reads_at_once"),
    ) else {
        return;
    };
    let get = |k: &str| figure(r, k);
    println!(
        "reads at the nodes: {:.1} % held until read_ts passed (mean {:.1} µs, {} over 0.5 ms), {} refused",
        100.0 * held / (held + once).max(1.0),
        get("node_read_hold_mean_us"),
        get("node_reads_held_long"),
        get("node_reads_refused"),
    );
    // Only when reads waited (`[limits] read_lock_wait_us` > 0).
    if get("node_reads_lock_waited") + get("node_reads_lock_wait_expired") > 0.0 {
        println!(
            "reads that met a lock: {} waited for it to go (mean {:.1} µs), {} still locked at the end of the wait (aborted)",
            get("node_reads_lock_waited"),
            get("node_read_lock_wait_mean_us"),
            get("node_reads_lock_wait_expired"),
        );
    }
    // Only when single blind writes waited (`[limits] blind_lock_wait_us` > 0).
    if get("node_blind_locks_waited") + get("node_blind_lock_wait_expired") > 0.0 {
        println!(
            "blind LOCKs that met a lock: {} waited for it to go (mean {:.1} µs), {} still locked at the end of the wait (aborted)",
            get("node_blind_locks_waited"),
            get("node_blind_lock_wait_mean_us"),
            get("node_blind_lock_wait_expired"),
        );
    }
}

/// Run benchmark command `b`: a sweep, the failover runs, or one
/// benchmark against a peer or against Meridian.
fn bench_cmd(b: BenchCmd) -> Result<(), String> {
    match b {
        BenchCmd::Sweep {
            workload,
            targets,
            sessions,
            duration,
            size,
            nodes,
            out,
            client_threads,
        } => sweep(
            &workload,
            &targets,
            &sessions,
            (duration, size, nodes),
            client_threads,
            &out,
        ),
        BenchCmd::Failover {
            runs,
            scenarios,
            nodes,
            subscribers,
            duration,
            clients,
            bank_sessions,
            durability,
            out,
            lease_ms,
        } => failover(
            runs,
            &scenarios,
            nodes,
            subscribers,
            duration,
            clients,
            bank_sessions,
            durability,
            &out,
            lease_ms,
        ),
        _ => {
            let opts = b
                .opts()
                .cloned()
                .ok_or("sweep and failover are run by bench_cmd")?;
            if opts.target != TargetArg::Meridian {
                return bench_peer(&b, &opts);
            }
            bench_meridian(b, opts)
        }
    }
}

/// The validated YCSB configuration of `meridian-bench ycsb`'s options.
///
/// Errors: an unknown workload letter or out-of-range parameters.
fn ycsb_config(
    workload: &str,
    records: u64,
    theta: f64,
    value_bytes: usize,
) -> Result<meridian_workload::ycsb::YcsbConfig, String> {
    let cfg = meridian_workload::ycsb::YcsbConfig {
        records,
        value_bytes,
        theta,
        workload: meridian_workload::ycsb::YcsbWorkload::parse(workload)?,
    };
    cfg.validate()?;
    Ok(cfg)
}

impl BenchCmd {
    /// The common options, for the workloads that have them.
    fn opts(&self) -> Option<&BenchOpts> {
        match self {
            BenchCmd::Tatp { opts, .. }
            | BenchCmd::Ycsb { opts, .. }
            | BenchCmd::Rmw { opts, .. }
            | BenchCmd::Tpcc { opts, .. }
            | BenchCmd::Rpc { opts }
            | BenchCmd::Bank { opts, .. } => Some(opts),
            BenchCmd::Failover { .. } | BenchCmd::Sweep { .. } => None,
        }
    }
}

/// The resident memory of the local cluster's node processes in `dir`,
/// bytes (`VmRSS` of `/proc/<pid>/status`); `None` if any is unreadable.
fn nodes_rss_bytes(dir: &std::path::Path) -> Option<u64> {
    let nodes = cluster::status(dir).ok()?;
    let mut total = 0u64;
    for (_, _, pid, _) in nodes {
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        total += kb * 1024;
    }
    Some(total)
}

/// The mix and rows of a sweep's workload name at `size`.
///
/// Errors: an unknown workload, or a bad size.
fn sweep_workload(
    workload: &str,
    size: u64,
) -> Result<(std::sync::Arc<meridian_bench::drive::Mix>, Rows, u64), String> {
    use meridian_bench::drive::Mix;
    use meridian_workload::{rmw, tatp, ycsb};
    let (mix, rows, hint): (Mix, Rows, u64) = match workload {
        "tatp" => {
            let cfg = tatp::TatpConfig { subscribers: size };
            cfg.validate()?;
            let hint = tatp::population_count_hint(&cfg);
            (Mix::Tatp(cfg), Box::new(tatp::population(&cfg, 1)), hint)
        }
        "rmw" => {
            let cfg = rmw::RmwConfig {
                records: u32::try_from(size).map_err(|_| "rmw: too many counters")?,
                ..rmw::RmwConfig::default()
            };
            cfg.validate()?;
            (Mix::Rmw(cfg), Box::new(rmw::population(&cfg)), size)
        }
        w => {
            let letter = w
                .strip_prefix("ycsb-")
                .ok_or_else(|| format!("unknown workload {w:?}: tatp, ycsb-a|b|c|f or rmw"))?;
            let cfg = ycsb_config(letter, size, 0.99, 1000)?;
            let rows = Box::new(ycsb::population(&cfg, 1));
            let mix = Mix::Ycsb {
                generator: ycsb::YcsbGenerator::new(&cfg)?,
                value_bytes: cfg.value_bytes,
            };
            (mix, rows, size)
        }
    };
    Ok((std::sync::Arc::new(mix), rows, hint))
}

/// `meridian-bench sweep`: each target loaded once, then run at every session
/// count; the points as JSON and PNG.
///
/// Errors: a bad workload or target, a cluster or peer that fails, or the
/// output files.
fn sweep(
    workload: &str,
    targets: &[String],
    sessions: &[usize],
    (duration, size, nodes): (u64, u64, u32),
    client_threads: u16,
    out: &std::path::Path,
) -> Result<(), String> {
    use meridian_bench::peers::Peer;
    let rt = bench_runtime(client_threads, None)?;
    let mut points = Vec::new();
    for target in targets {
        let (mix, rows, hint) = sweep_workload(workload, size)?;
        eprintln!("== {target}: loading {hint} rows of {workload}");
        let pts = match target.as_str() {
            "meridian-memory" | "meridian-disk" => {
                let dir = std::env::temp_dir()
                    .join(format!("meridian-sweep-{}-{target}", std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                let disk = target == "meridian-disk";
                let cluster = cluster::LocalCluster::start_tuned(
                    &dir,
                    nodes,
                    nodes.clamp(1, 3) as usize,
                    12,
                    |c| {
                        c.durability.mode = if disk {
                            meridian_config::DurabilityMode::Disk
                        } else {
                            meridian_config::DurabilityMode::Memory
                        }
                    },
                )
                .map_err(|e| e.to_string())?;
                let cm = cluster.cm_addr();
                let label = format!("meridian ({})", if disk { "disk" } else { "memory" });
                let r = rt.block_on(async {
                    let client = meridian_client::Client::connect(&cm)
                        .await
                        .map_err(|e| e.to_string())?;
                    meridian_bench::run::load(&client, rows, hint, 64, 8)
                        .await
                        .map_err(|e| e.to_string())?;
                    let servers = meridian_bench::cpu::Servers::ClusterDir(dir.clone());
                    let pts = meridian_bench::sweep::meridian(
                        &client, &label, mix, sessions, duration, &servers,
                    )
                    .await;
                    client.close().await;
                    Ok::<_, String>(pts)
                });
                drop(cluster);
                let _ = std::fs::remove_dir_all(&dir);
                r?
            }
            "redis" | "postgres" | "etcd" => {
                let peer = match target.as_str() {
                    "redis" => Peer::Redis(
                        meridian_bench::peers::RedisPeer::new("redis://127.0.0.1:6379/")
                            .map_err(|e| e.to_string())?,
                    ),
                    "postgres" => Peer::Postgres(meridian_bench::pg::PgPeer::new(
                        meridian_bench::pg::DEFAULT_URL,
                    )),
                    _ => Peer::Etcd(meridian_bench::etcd::EtcdPeer::new(
                        meridian_bench::etcd::DEFAULT_URL,
                    )),
                };
                rt.block_on(async {
                    peer.load(rows, |_| {}).await.map_err(|e| {
                        format!("{target}: {e} (is it running? scripts/peers.sh start {target})")
                    })?;
                    meridian_bench::sweep::peer(&peer, mix, sessions, duration).await
                })?
            }
            t => return Err(format!("unknown target {t:?}")),
        };
        for p in &pts {
            println!(
                "{:<18} {:>4} sessions: {:>9.0} tx/s  p50 {:>8.0} µs  p99 {:>8.0} µs  aborts {:.2}%",
                p.target,
                p.sessions,
                p.tx_per_s,
                p.p50_us,
                p.p99_us,
                p.abort_rate * 100.0
            );
        }
        points.extend(pts);
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let json = out.join(format!("sweep-{workload}.json"));
    let text = serde_json::to_string_pretty(&points).map_err(|e| e.to_string())?;
    std::fs::write(&json, text).map_err(|e| format!("{}: {e}", json.display()))?;
    let png = out.join(format!("sweep-{workload}.png"));
    meridian_bench::sweep::plot_png(
        &points,
        &format!("{workload}: throughput and latency against sessions (one system at a time)"),
        &png,
    )?;
    println!("written {} and {}", json.display(), png.display());
    Ok(())
}

/// Rows to load, with a count for the progress bar.
type Rows = Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + Send>;

/// The workload mix of a `bench` command and its initial rows.
///
/// Errors: invalid workload parameters, or a command with no mix.
fn bench_workload(
    b: &BenchCmd,
) -> Result<(std::sync::Arc<meridian_bench::drive::Mix>, Rows, u64), String> {
    use meridian_bench::drive::Mix;
    use meridian_workload::{rmw, tatp, ycsb};
    let (mix, rows, hint): (Mix, Rows, u64) = match b {
        BenchCmd::Tatp { subscribers, .. } => {
            let cfg = tatp::TatpConfig {
                subscribers: *subscribers,
            };
            cfg.validate()?;
            let hint = tatp::population_count_hint(&cfg);
            (Mix::Tatp(cfg), Box::new(tatp::population(&cfg, 1)), hint)
        }
        BenchCmd::Ycsb {
            workload,
            records,
            theta,
            value_bytes,
            ..
        } => {
            let cfg = ycsb_config(workload, *records, *theta, *value_bytes)?;
            let rows = Box::new(ycsb::population(&cfg, 1));
            let mix = Mix::Ycsb {
                generator: ycsb::YcsbGenerator::new(&cfg)?,
                value_bytes: cfg.value_bytes,
            };
            (mix, rows, *records)
        }
        BenchCmd::Rmw {
            records,
            keys,
            value_bytes,
            ..
        } => {
            let cfg = rmw::RmwConfig {
                records: *records,
                keys: *keys,
                value_bytes: *value_bytes,
            };
            cfg.validate()?;
            (
                Mix::Rmw(cfg),
                Box::new(rmw::population(&cfg)),
                *records as u64,
            )
        }
        BenchCmd::Tpcc { warehouses, .. } => {
            let cfg = meridian_workload::tpcc::TpccConfig {
                warehouses: *warehouses,
            };
            cfg.validate()?;
            let hint = meridian_workload::tpcc::population_count_hint(&cfg);
            (
                Mix::Tpcc(cfg),
                Box::new(meridian_workload::tpcc::population(&cfg, 1)),
                hint,
            )
        }
        _ => return Err("this benchmark runs on Meridian only (no --target)".into()),
    };
    Ok((std::sync::Arc::new(mix), rows, hint))
}

/// The RMW audit's figures; errors if the counters do not sum to keys ×
/// commits (a lost or doubled update).
fn rmw_audit_figures(
    r: &mut meridian_bench::run::BenchResult,
    cfg: &meridian_workload::rmw::RmwConfig,
    sum: u64,
    warmed_commits: u64,
) -> Result<(), String> {
    // The store holds the warm-up's increments too.
    let commits = r.committed + warmed_commits;
    let expected = commits * cfg.keys as u64;
    r.extra.insert("audit_sum".into(), sum as f64);
    r.extra.insert("audit_expected".into(), expected as f64);
    r.extra
        .insert("warmup_committed".into(), warmed_commits as f64);
    println!(
        "rmw audit: the counters sum to {sum}, {} x {commits} commits ({} measured, {warmed_commits} in the warm-up) = {expected}: {}",
        cfg.keys,
        r.committed,
        if sum == expected { "OK" } else { "VIOLATION" }
    );
    if sum != expected {
        print_result(r);
        return Err(format!(
            "rmw audit failed: counters sum to {sum}, expected {expected} (lost or doubled updates)"
        ));
    }
    Ok(())
}

/// Record the TPC-C consistency check's outcome; errors if it failed.
fn tpcc_check_figures(
    r: &mut meridian_bench::run::BenchResult,
    check: Result<u64, String>,
) -> Result<(), String> {
    match check {
        Ok(rows) => {
            println!(
                "tpcc consistency (spec 3.3.2.1-10, 12, and both indexes): OK over {rows} rows"
            );
            r.extra.insert("checked_rows".into(), rows as f64);
            Ok(())
        }
        Err(e) => {
            print_result(r);
            Err(format!("tpcc consistency check failed: {e}"))
        }
    }
}

/// A benchmark against a peer (`--target redis|postgres|etcd`), with the
/// same workload code and closed loop as Meridian's.
///
/// Errors: a bad workload, an unreachable peer, a failed audit, or the
/// results file.
fn bench_peer(b: &BenchCmd, opts: &BenchOpts) -> Result<(), String> {
    use meridian_bench::peers::Peer;
    if opts.node_cpus.is_some() {
        return Err(
            "--node-cpus pins Meridian's nodes; start a peer on given CPUs with PEER_CPUS=LIST scripts/peers.sh start".into(),
        );
    }
    let (mix, rows, hint) = bench_workload(b)?;
    let url = opts.peer_url.clone();
    let peer = match opts.target {
        TargetArg::Redis => Peer::Redis(
            meridian_bench::peers::RedisPeer::new(
                url.as_deref().unwrap_or("redis://127.0.0.1:6379/"),
            )
            .map_err(|e| e.to_string())?,
        ),
        TargetArg::Postgres => Peer::Postgres(meridian_bench::pg::PgPeer::new(
            url.as_deref().unwrap_or(meridian_bench::pg::DEFAULT_URL),
        )),
        TargetArg::Etcd => Peer::Etcd(meridian_bench::etcd::EtcdPeer::new(
            url.as_deref().unwrap_or(meridian_bench::etcd::DEFAULT_URL),
        )),
        TargetArg::Meridian => return Err("not a peer".into()),
    };
    let rt = bench_runtime(opts.client_threads, opts.client_cpus.as_deref())?;
    let name = peer.name();
    let r = rt.block_on(async {
        eprintln!("loading {} into {name}", mix.name());
        let bar = indicatif::ProgressBar::new(hint);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "load [{bar:30}] {pos}/{len} rows {per_sec} eta {eta}",
            )
            .map_err(|e| e.to_string())?,
        );
        let n = peer
            .load(rows, |n| bar.set_position(n))
            .await
            .map_err(|e| format!("{name}: {e} (is it running? scripts/peers.sh start {name})"))?;
        bar.finish_and_clear();
        eprintln!("loaded {n} rows");
        let warmed_commits = peer.warm_up(mix.clone(), opts.clients, opts.warmup).await?;
        let mut ran = peer
            .run(mix.clone(), opts.clients, opts.duration, 0x5eed)
            .await?;
        ran.result
            .extra
            .insert("warmup_s".into(), opts.warmup as f64);
        if let meridian_bench::drive::Mix::Rmw(cfg) = &*mix {
            let sum = peer.audit_rmw(cfg).await?;
            rmw_audit_figures(&mut ran.result, cfg, sum, warmed_commits)?;
        }
        if let (
            meridian_bench::drive::Mix::Tpcc(cfg),
            BenchCmd::Tpcc {
                no_check: false, ..
            },
        ) = (&*mix, b)
        {
            tpcc_check_figures(&mut ran.result, peer.check_tpcc(cfg, |_| {}).await)?;
        }
        Ok::<_, String>(ran)
    })?;
    let r = r.result;
    write_result(&r, opts.json.as_ref(), || {
        PathBuf::from(format!(
            "bench-results/{}.json",
            r.bench.replace([' ', '(', ')'], "_")
        ))
    })
}

/// Print result `r` and write it as JSON to `json`, or without one to
/// `default()` (its directory created).
///
/// Errors: the JSON cannot be written.
fn write_result(
    r: &meridian_bench::run::BenchResult,
    json: Option<&PathBuf>,
    default: impl FnOnce() -> PathBuf,
) -> Result<(), String> {
    print_result(r);
    let path = json.cloned().unwrap_or_else(default);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let text = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("results written to {}", path.display());
    Ok(())
}
