//! Closed-loop benchmark drivers.

use crate::cpu::Servers;
use crate::drive::{run_sessions, session_loop, Mix};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use meridian_checker::{History, Outcome, TxnRecord};
use meridian_client::{mono_ns, Client, ClientStats, Txn};
use meridian_txn::{TxnError, TxnOptions};
use meridian_wire::NodeId;
use meridian_workload::bank::{self, BankConfig, WriteIds};
use meridian_workload::ops::Program;
use meridian_workload::{tatp, ycsb};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Latency summary of one transaction type, µs.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    /// Committed transactions of this type.
    pub committed: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
}

/// Result of a benchmark run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// Benchmark name.
    pub bench: String,
    /// Measured seconds.
    pub seconds: f64,
    /// Concurrent sessions.
    pub clients: usize,
    /// Committed transactions.
    pub committed: u64,
    /// Committed transactions per second.
    pub committed_per_s: f64,
    /// Concurrency-control aborts.
    pub aborts: u64,
    /// Aborts / (commits + aborts).
    pub abort_rate: f64,
    /// Aborts by transaction type, then by cause (`read-locked`: a read
    /// met a lock, FaRMv2 §4.7; `lock-locked`, `validate-changed`, …; a
    /// peer's conflicts are `conflict`).
    pub aborts_by_cause: BTreeMap<String, BTreeMap<String, u64>>,
    /// TATP: successful transactions per second (MQTh).
    pub successful_per_s: Option<f64>,
    /// Per-type latencies (and "all").
    pub latency: BTreeMap<String, Latency>,
    /// Mean clock uncertainty at GET_TS, µs.
    pub mean_uncertainty_us: f64,
    /// Mean time spent in GET_TS (the uncertainty wait), µs.
    pub mean_uncertainty_wait_us: f64,
    /// Null-RPC baseline round trips per second, same run.
    pub rpc_baseline_per_s: Option<f64>,
    /// committed_per_s / rpc_baseline_per_s.
    pub ratio_to_rpc: Option<f64>,
    /// Free-form extra figures.
    pub extra: BTreeMap<String, f64>,
}

fn hist() -> Histogram<u64> {
    // 1 µs .. 60 s, 3 significant digits; creation cannot fail for these bounds.
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

/// Per-session accumulators.
#[derive(Default)]
pub(crate) struct Acc {
    pub(crate) committed: u64,
    pub(crate) aborts: u64,
    /// Aborts by (transaction type, cause).
    pub(crate) aborts_by: BTreeMap<(&'static str, &'static str), u64>,
    /// Committed and successful in the workload's sense (TATP's MQTh).
    pub(crate) successful: u64,
    /// Deliberate rollbacks (not conflicts).
    pub(crate) rollbacks: u64,
    /// Bodies that found a must-exist row missing (a failed run).
    pub(crate) inconsistent: u64,
    /// Operational errors (neither commits nor conflict aborts).
    pub(crate) errors: u64,
    lat: BTreeMap<&'static str, Histogram<u64>>,
    /// Completion time of every commit, monotonic ns (the failover
    /// timeline's input; 8 bytes per commit).
    pub(crate) commits_ns: Vec<u64>,
    /// CPU used over the whole measured window, by the client and the
    /// servers (set once by `run_sessions`; not merged).
    pub(crate) cpu: Option<crate::cpu::CpuUse>,
}

impl Acc {
    pub(crate) fn record(&mut self, kind: &'static str, us: u64) {
        self.commits_ns.push(mono_ns());
        let h = self.lat.entry(kind).or_insert_with(hist);
        let _ = h.record(us.max(1));
    }
    /// Count an abort of a `kind` transaction for `cause`.
    pub(crate) fn abort(&mut self, kind: &'static str, cause: &'static str) {
        self.aborts += 1;
        *self.aborts_by.entry((kind, cause)).or_default() += 1;
    }
    pub(crate) fn merge(&mut self, o: Acc) {
        self.committed += o.committed;
        self.aborts += o.aborts;
        for (k, n) in o.aborts_by {
            *self.aborts_by.entry(k).or_default() += n;
        }
        self.successful += o.successful;
        self.rollbacks += o.rollbacks;
        self.inconsistent += o.inconsistent;
        self.errors += o.errors;
        self.commits_ns.extend(o.commits_ns);
        for (k, h) in o.lat {
            let e = self.lat.entry(k).or_insert_with(hist);
            let _ = e.add(h);
        }
    }
}

pub(crate) fn progress(
    label: &str,
    secs: u64,
    counter: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let pb = ProgressBar::new(secs);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len}s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_prefix(label.to_string());
    tokio::spawn(async move {
        let start = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let el = start.elapsed().as_secs_f64();
            pb.set_position(el as u64);
            pb.set_message(format!(
                "{:.0}/s",
                counter.load(Ordering::Relaxed) as f64 / el.max(0.001)
            ));
        }
        pb.finish_and_clear();
    })
}

/// Closed-loop null RPC: `clients` tasks, each with one Ping outstanding,
/// spread over the nodes. Returns round trips per second.
pub async fn rpc(client: &Client, clients: usize, secs: u64, show: bool) -> f64 {
    let nodes: Vec<NodeId> = client.config().nodes.iter().map(|n| NodeId(n.id)).collect();
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let bar = show.then(|| progress("rpc", secs, count.clone(), stop.clone()));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (c, count, nodes) = (client.clone(), count.clone(), nodes.clone());
        tasks.push(tokio::spawn(async move {
            let mut k = i;
            while Instant::now() < deadline {
                let n = nodes[k % nodes.len()];
                k += 1;
                match c.ping(n).await {
                    Ok(()) => {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!("ping {n}: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(b) = bar {
        let _ = b.await;
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// A null-RPC run with the CPU it cost .
#[derive(Clone, Debug, PartialEq)]
pub struct RpcRun {
    /// Round trips per second.
    pub per_s: f64,
    /// CPU of the window (client and servers).
    pub cpu: crate::cpu::CpuUse,
    /// Bench-client CPU per round trip, µs (`None` if none completed).
    pub client_us_per_rt: Option<f64>,
    /// Server CPU per round trip, µs (`None` if none completed or no
    /// server process was measured).
    pub servers_us_per_rt: Option<f64>,
}

/// [`rpc`], with the CPU of this process and of `servers` over the same
/// window, per round trip.
pub async fn rpc_with_cpu(
    client: &Client,
    clients: usize,
    secs: u64,
    show: bool,
    servers: &crate::cpu::Servers,
) -> RpcRun {
    let sample = crate::cpu::CpuSample::take(servers);
    let per_s = rpc(client, clients, secs, show).await;
    let cpu = sample.since(servers);
    let rts = (per_s * cpu.wall_s) as u64;
    RpcRun {
        per_s,
        client_us_per_rt: cpu.client_us_per(rts),
        servers_us_per_rt: cpu.servers_us_per(rts),
        cpu,
    }
}

/// Times a load batch is retried after an error that a reconfiguration
/// explains (each attempt is itself `Session::run`, which retries aborts).
pub const LOAD_ATTEMPTS: u32 = 20;

/// Errors after which an idempotent batch may simply run again.
trait RetryableLoad {
    fn is_retryable_load(&self) -> bool;
}

impl RetryableLoad for TxnError {
    fn is_retryable_load(&self) -> bool {
        self.is_abort()
            || matches!(
                self,
                TxnError::Indeterminate { .. }
                    | TxnError::ClockUnavailable
                    | TxnError::Transport(_)
            )
    }
}

/// Load rows with `loaders` parallel sessions, `batch` rows per transaction.
///
/// Errors: the first operational error (aborts are retried).
pub async fn load<I>(
    client: &Client,
    rows: I,
    total_hint: u64,
    batch: usize,
    loaders: usize,
) -> Result<u64, TxnError>
where
    I: Iterator<Item = (Vec<u8>, Vec<u8>)> + Send + 'static,
{
    let pb = ProgressBar::new(total_hint);
    pb.set_style(
        ProgressStyle::with_template("load [{bar:30}] {pos}/{len} rows {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<(Vec<u8>, Vec<u8>)>>(loaders * 4);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let producer = tokio::task::spawn_blocking(move || {
        let mut rows = rows;
        loop {
            let chunk: Vec<_> = rows.by_ref().take(batch).collect();
            if chunk.is_empty() || tx.blocking_send(chunk).is_err() {
                break;
            }
        }
    });
    let loaded = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..loaders {
        let (c, rx, pb, loaded) = (client.clone(), rx.clone(), pb.clone(), loaded.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = c.session();
            loop {
                let chunk = { rx.lock().await.recv().await };
                let Some(chunk) = chunk else {
                    return Ok::<(), TxnError>(());
                };
                let n = chunk.len() as u64;
                // A batch only puts fixed values, so running it again is
                // harmless: a reconfiguration during the load (a commit
                // whose outcome was lost, a clock disabled while the CM
                // changes, a dead node's connection) is waited out and the
                // batch retried, up to `LOAD_ATTEMPTS` times.
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let r = s
                        .run(TxnOptions::default(), |tx| {
                            let chunk = chunk.clone();
                            Box::pin(async move {
                                for (k, v) in chunk {
                                    tx.put(k, v).await?;
                                }
                                Ok(())
                            })
                        })
                        .await;
                    match r {
                        Ok(()) => break,
                        Err(e) if attempt < LOAD_ATTEMPTS && e.is_retryable_load() => {
                            tracing::warn!("load batch, attempt {attempt}: {e}; retrying");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
                loaded.fetch_add(n, Ordering::Relaxed);
                pb.inc(n);
            }
        }));
    }
    for t in tasks {
        match t.await {
            Ok(r) => r?,
            Err(e) => return Err(TxnError::Transport(format!("loader task failed: {e}"))),
        }
    }
    let _ = producer.await;
    pb.finish_and_clear();
    Ok(loaded.load(Ordering::Relaxed))
}

fn summarize(
    bench: &str,
    secs: f64,
    clients: usize,
    acc: Acc,
    client: &Client,
    base: &ClientStats,
) -> BenchResult {
    let mut r = summarize_core(bench, secs, clients, acc);
    add_client_figures(&mut r, client, base);
    r
}

/// The names of `meridian_txn::CommitStage`'s timed stages, in index
/// order, as the bench's `stage_<name>_mean_us` figures use them.
pub const COMMIT_STAGE_NAMES: [&str; meridian_txn::CommitStage::TIMED] = [
    "execute",
    "lock",
    "write_ts",
    "validate",
    "commit_backup",
    "commit_primary",
];

/// The client's uncertainty figures and operational counters of the
/// measured window (its counters now, less `base`, read when the window
/// began), into `r`. Counts since the client connected would let the load
/// phase weigh in: the loader's GET_TS waits end late under its heavy
/// batches and inflate the run's mean wait.
fn add_client_figures(r: &mut BenchResult, client: &Client, base: &ClientStats) {
    let stats = client.stats().since(base);
    let n = stats.ts_count.max(1);
    r.mean_uncertainty_us = (stats.uncertainty_ns_sum / n) as f64 / 1000.0;
    r.mean_uncertainty_wait_us = (stats.ts_wait_ns_sum / n) as f64 / 1000.0;
    // The client's operational counters: RPCs that failed (timeout, lost
    // connection, refused) and were retried, configurations it moved
    // through, and commits whose outcome it could not learn.
    let extra = &mut r.extra;
    extra.insert(
        "ts_late_mean_us".into(),
        (stats.ts_late_ns_sum / n) as f64 / 1000.0,
    );
    extra.insert("ts_late_over_100us".into(), stats.ts_late_over_100us as f64);
    if stats.write_ts_unwaited > 0 {
        extra.insert("write_ts_unwaited".into(), stats.write_ts_unwaited as f64);
        extra.insert(
            "write_ts_unwaited_uncertainty_us".into(),
            stats.write_ts_unwaited_uncertainty_ns_sum as f64
                / 1000.0
                / stats.write_ts_unwaited as f64,
        );
    }
    // Where a read-write commit's time went, stage by stage
    // (`ClientStats::commit_stage_ns_sum`): the mean over the window's
    // committed read-write transactions, µs.
    if stats.commit_stages_timed > 0 {
        for (name, ns) in COMMIT_STAGE_NAMES.iter().zip(stats.commit_stage_ns_sum) {
            extra.insert(
                format!("stage_{name}_mean_us"),
                ns as f64 / 1000.0 / stats.commit_stages_timed as f64,
            );
        }
        extra.insert("stages_timed".into(), stats.commit_stages_timed as f64);
    }
    extra.insert("client_rpc_failures".into(), stats.rpc_failures as f64);
    extra.insert("client_clock_refused".into(), stats.clock_refused as f64);
    extra.insert("client_clock_rejected".into(), stats.clock_rejected as f64);
    extra.insert("client_clock_parked".into(), stats.clock_parked as f64);
    extra.insert("client_clock_expired".into(), stats.clock_expired as f64);
    extra.insert(
        "client_clock_past_bound".into(),
        stats.clock_past_bound as f64,
    );
    extra.insert(
        "client_clock_not_ready".into(),
        stats.clock_not_ready as f64,
    );
    extra.insert("client_rpc_retries".into(), stats.rpc_retries as f64);
    extra.insert("client_config_changes".into(), stats.config_changes as f64);
    extra.insert("client_indeterminate".into(), stats.indeterminate as f64);
}

/// The CPU figures of a window into `extra`: `client_cpu_us_per_tx`,
/// `client_cores` (CPU seconds per wall-clock second), and, when server
/// processes were measured, `server_cpu_us_per_tx`, `server_cores` and
/// `server_processes` ([`crate::cpu`]).
pub(crate) fn add_cpu_figures(
    extra: &mut BTreeMap<String, f64>,
    cpu: &crate::cpu::CpuUse,
    committed: u64,
) {
    let wall = cpu.wall_s.max(f64::MIN_POSITIVE);
    if let Some(us) = cpu.client_us_per(committed) {
        extra.insert("client_cpu_us_per_tx".into(), us);
    }
    extra.insert("client_cores".into(), cpu.client_s / wall);
    if let Some(us) = cpu.servers_us_per(committed) {
        extra.insert("server_cpu_us_per_tx".into(), us);
        extra.insert("server_cores".into(), cpu.servers_s / wall);
        extra.insert("server_processes".into(), cpu.server_processes as f64);
    }
}

/// Throughput and latency figures of `acc` (any target).
pub(crate) fn summarize_core(bench: &str, secs: f64, clients: usize, acc: Acc) -> BenchResult {
    let mut latency = BTreeMap::new();
    let mut all = hist();
    for (k, h) in &acc.lat {
        let _ = all.add(h);
        latency.insert(
            k.to_string(),
            Latency {
                committed: h.len(),
                p50_us: h.value_at_quantile(0.5) as f64,
                p99_us: h.value_at_quantile(0.99) as f64,
                p999_us: h.value_at_quantile(0.999) as f64,
            },
        );
    }
    latency.insert(
        "all".into(),
        Latency {
            committed: all.len(),
            p50_us: all.value_at_quantile(0.5) as f64,
            p99_us: all.value_at_quantile(0.99) as f64,
            p999_us: all.value_at_quantile(0.999) as f64,
        },
    );
    let mut extra = BTreeMap::new();
    if let Some(cpu) = &acc.cpu {
        add_cpu_figures(&mut extra, cpu, acc.committed);
    }
    extra.insert("rollbacks".into(), acc.rollbacks as f64);
    extra.insert("inconsistent".into(), acc.inconsistent as f64);
    extra.insert("errors".into(), acc.errors as f64);
    BenchResult {
        bench: bench.into(),
        seconds: secs,
        clients,
        committed: acc.committed,
        committed_per_s: acc.committed as f64 / secs,
        aborts: acc.aborts,
        abort_rate: acc.aborts as f64 / (acc.committed + acc.aborts).max(1) as f64,
        aborts_by_cause: acc
            .aborts_by
            .iter()
            .fold(BTreeMap::new(), |mut m, ((k, c), n)| {
                m.entry(k.to_string())
                    .or_insert_with(BTreeMap::new)
                    .insert(c.to_string(), *n);
                m
            }),
        successful_per_s: None,
        latency,
        mean_uncertainty_us: 0.0,
        mean_uncertainty_wait_us: 0.0,
        rpc_baseline_per_s: None,
        ratio_to_rpc: None,
        extra,
    }
}

async fn closed_loop<F, Fut>(
    client: &Client,
    label: &str,
    clients: usize,
    secs: u64,
    body: F,
) -> (Acc, f64)
where
    F: Fn(Client, usize, Instant, Arc<AtomicU64>) -> Fut,
    Fut: std::future::Future<Output = Acc> + Send + 'static,
{
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let bar = progress(label, secs, count.clone(), stop.clone());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|i| tokio::spawn(body(client.clone(), i, deadline, count.clone())))
        .collect();
    let mut acc = Acc::default();
    for t in tasks {
        if let Ok(a) = t.await {
            acc.merge(a);
        }
    }
    let el = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = bar.await;
    (acc, el)
}

/// A closed-loop run: its figures and when each commit completed.
pub struct Ran {
    /// Throughput and latency figures.
    pub result: BenchResult,
    /// Completion time of every commit, monotonic ns (unordered).
    pub commits_ns: Vec<u64>,
    /// When the run started and ended, monotonic ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

/// Run `mix` on Meridian for `secs` with `clients` sessions: the closed
/// loop of [`crate::drive`], the same as the peers'. `label` names the
/// progress bar and the result.
/// `servers` are the nodes whose CPU the result reports per transaction
/// ([`crate::cpu`]).
pub async fn meridian(
    client: &Client,
    label: &str,
    mix: Arc<Mix>,
    clients: usize,
    secs: u64,
    seed: u64,
    servers: &Servers,
) -> Ran {
    let start_ns = mono_ns();
    let base = client.stats();
    let sessions: Vec<_> = (0..clients).map(|_| client.session()).collect();
    let (acc, el) = run_sessions(label, sessions, mix.clone(), seed, secs, servers, |s, c| {
        tokio::spawn(session_loop(s, c))
    })
    .await;
    let mut ran = crate::peers::finish(label, el, clients, acc, &mix, start_ns);
    add_client_figures(&mut ran.result, client, &base);
    ran
}

/// Run `mix` on Meridian for `secs` with `clients` sessions and keep no
/// figures: the warm-up before a measured run, so that the run measures
/// the steady state rather than what the load left behind (in disk mode,
/// the checkpoint the load's last records start runs 2–5 s on a
/// background thread; docs/performance.md). Peers get the same warm-up
/// ([`crate::peers::Peer::warm_up`]). `secs` = 0 does nothing. Returns
/// the transactions it committed (an audit over the whole store, like the
/// RMW's, counts them too).
pub async fn warm_up(client: &Client, mix: Arc<Mix>, clients: usize, secs: u64) -> u64 {
    if secs == 0 {
        return 0;
    }
    let label = format!("{} warm-up", mix.name());
    let sessions: Vec<_> = (0..clients).map(|_| client.session()).collect();
    let none = Servers::Unknown;
    let (acc, _) = run_sessions(&label, sessions, mix, WARM_UP_SEED, secs, &none, |s, c| {
        tokio::spawn(session_loop(s, c))
    })
    .await;
    tracing::info!(
        "{label}: {} committed in {secs} s, not counted",
        acc.committed
    );
    acc.committed
}

/// The warm-up's seed: not a measured run's, so that a run does not replay
/// its warm-up's inputs.
pub(crate) const WARM_UP_SEED: u64 = 0x3a3a_3a3a;

/// The closed-loop mix of a YCSB configuration.
///
/// Errors: the configuration does not validate.
pub fn ycsb_mix(cfg: &ycsb::YcsbConfig) -> Result<Mix, String> {
    Ok(Mix::Ycsb {
        generator: ycsb::YcsbGenerator::new(cfg)?,
        value_bytes: cfg.value_bytes,
    })
}

/// Run the TATP mix for `secs` with `clients` sessions (`servers`: as
/// [`meridian`]).
pub async fn tatp(
    client: &Client,
    cfg: tatp::TatpConfig,
    clients: usize,
    secs: u64,
    servers: &Servers,
) -> Ran {
    meridian(
        client,
        "tatp",
        Arc::new(Mix::Tatp(cfg)),
        clients,
        secs,
        0x7a7b,
        servers,
    )
    .await
}

/// Run a YCSB workload for `secs` with `clients` sessions (`servers`: as
/// [`meridian`]).
///
/// Errors: the configuration does not validate.
pub async fn ycsb(
    client: &Client,
    cfg: ycsb::YcsbConfig,
    clients: usize,
    secs: u64,
    servers: &Servers,
) -> Result<Ran, String> {
    let mix = ycsb_mix(&cfg)?;
    let label = format!("ycsb-{}", cfg.workload.name());
    Ok(meridian(
        client,
        &label,
        Arc::new(mix),
        clients,
        secs,
        0x5c5b,
        servers,
    )
    .await)
}

/// Outcome of the checked bank workload.
pub struct BankOutcome {
    /// Throughput figures.
    pub result: BenchResult,
    /// The recorded history.
    pub history: History,
    /// Audits committed (each checked for the exact total).
    pub audits: u64,
    /// Audit failures (must be empty).
    pub failures: Vec<String>,
}

/// Load the bank and run transfers and audits, recording the history.
///
/// Errors: loading failures.
pub async fn bank(
    client: &Client,
    cfg: BankConfig,
    clients: usize,
    secs: u64,
) -> Result<BankOutcome, TxnError> {
    let mut history = load_bank(client, &cfg).await?;
    let shared: BankShared = Arc::new(std::sync::Mutex::new((
        History::default(),
        0u64,
        Vec::<String>::new(),
    )));
    let sh = shared.clone();
    let base = client.stats();
    let (acc, el) = closed_loop(
        client,
        "bank",
        clients,
        secs,
        move |c, i, deadline, count| bank_session(c, cfg, i, deadline, count, sh.clone()),
    )
    .await;
    let result = summarize("bank", el, clients, acc, client, &base);
    let (h, audits, failures) = match Arc::try_unwrap(shared) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(arc) => {
            let g = arc.lock().unwrap_or_else(|p| p.into_inner());
            (g.0.clone(), g.1, g.2.clone())
        }
    };
    history.merge(h);
    Ok(BankOutcome {
        result,
        history,
        audits,
        failures,
    })
}

/// What the bank's sessions hand back when they end: their histories
/// merged, the audits they committed and their audit failures.
type BankShared = Arc<std::sync::Mutex<(History, u64, Vec<String>)>>;

/// Load the bank's accounts in one transaction, and the history that
/// starts with its record.
///
/// Errors: the load failed (aborts, a reconfiguration during the load
/// among them, are retried with back-off, up to `limits.retry_attempts`).
async fn load_bank(client: &Client, cfg: &BankConfig) -> Result<History, TxnError> {
    let rows = cfg.population();
    let mut s = client.session();
    let start_load = mono_ns();
    let ((), load_info) = s
        .run_info(TxnOptions::default(), |tx| {
            let rows = rows.clone();
            Box::pin(async move {
                for (k, v) in rows {
                    tx.put(k, v).await?;
                }
                Ok(())
            })
        })
        .await?;
    let mut history = History::default();
    history.push(bank::load_record(
        &cfg.population(),
        start_load,
        mono_ns(),
        load_info.read_ts.0,
        load_info.write_ts.0,
    ));
    Ok(history)
}

/// Bank session `i`: transfers and audits until `deadline`, each recorded
/// in the session's history, which joins `shared` at the end with its
/// audit count and failures. `count` counts the commits for the progress
/// bar.
async fn bank_session(
    c: Client,
    cfg: BankConfig,
    i: usize,
    deadline: Instant,
    count: Arc<AtomicU64>,
    shared: BankShared,
) -> Acc {
    let mut s = c.session();
    let mut rng = SmallRng::seed_from_u64(0xba4c ^ i as u64);
    let mut ids = WriteIds::new(i as u64 + 1);
    let mut tally = BankTally::default();
    while Instant::now() < deadline {
        let mut program = match tally.retry.take() {
            Some(p) => p,
            None => cfg.next_txn(&mut ids, &mut rng),
        };
        let fresh = program.clone();
        let t0 = mono_ns();
        let mut rec = TxnRecord::invoked(i as u64, t0);
        let r = run_program(&mut s, &mut program, &mut rec).await;
        rec.complete_ns = mono_ns();
        match r {
            Ok(info) => tally.committed(&mut program, &mut rec, info, t0, &count),
            Err(e) if e.is_abort() => {
                rec.outcome = Outcome::Aborted;
                let kind = if fresh.is_audit() {
                    "audit"
                } else {
                    "transfer"
                };
                tally
                    .acc
                    .abort(kind, crate::drive::Classify::abort_cause(&e));
                if fresh.is_audit() {
                    tally.retry = Some(fresh);
                }
            }
            Err(TxnError::ClockUnavailable) => {
                // Nothing began (the clock is disabled during a
                // CM change, or not synchronised yet): not a
                // transaction, so not recorded; wait a little.
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            Err(e @ TxnError::Indeterminate { write_ts, .. }) => {
                // Outcome unknown to the client: the checker
                // decides, placing its writes at the write_ts
                // recovery would commit them at.
                rec.write_ts = write_ts.map(|t| t.0);
                tracing::error!("bank: {e}");
            }
            Err(e) => {
                // Any other failure came before the commit
                // decision and released the locks: the
                // transaction took no effect.
                tracing::warn!("bank: {e}");
                rec.outcome = Outcome::Aborted;
                if fresh.is_audit() {
                    tally.retry = Some(fresh);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        tally.local.push(rec);
    }
    if let Ok(mut g) = shared.lock() {
        g.0.merge(tally.local);
        g.1 += tally.audits;
        g.2.extend(tally.failures);
    }
    tally.acc
}

/// A bank session's figures, history, audits and audit failures so far,
/// and the audit to retry next.
#[derive(Default)]
struct BankTally {
    /// Commits, aborts and latencies.
    acc: Acc,
    /// The session's history.
    local: History,
    /// Audits committed.
    audits: u64,
    /// Audits whose totals were wrong.
    failures: Vec<String>,
    /// An aborted audit, retried (a fresh copy of the same audit) until it
    /// commits, so that audits are checked under load.
    retry: Option<bank::BankTxn>,
}

impl BankTally {
    /// Record `program`'s commit (`info`, begun at `t0`) in `rec` and the
    /// figures; an audit's totals are checked.
    fn committed(
        &mut self,
        program: &mut bank::BankTxn,
        rec: &mut TxnRecord,
        info: meridian_client::CommitInfo,
        t0: u64,
        count: &AtomicU64,
    ) {
        rec.outcome = Outcome::Committed;
        rec.read_ts = Some(info.read_ts.0);
        if info.wrote {
            rec.write_ts = Some(info.write_ts.0);
        }
        self.acc.committed += 1;
        count.fetch_add(1, Ordering::Relaxed);
        self.acc.record(
            if program.is_audit() {
                "audit"
            } else {
                "transfer"
            },
            (rec.complete_ns - t0) / 1000,
        );
        if program.is_audit() {
            self.audits += 1;
        }
        if let Err(e) = program.on_commit() {
            self.failures.push(e);
        }
    }
}

async fn run_program(
    s: &mut meridian_client::Session,
    program: &mut impl Program,
    rec: &mut TxnRecord,
) -> Result<meridian_client::CommitInfo, TxnError> {
    let mut tx: Txn = s.begin(TxnOptions::default()).await?;
    match meridian_workload::ops::run_program(&mut tx, program, rec).await? {
        meridian_workload::ops::Ending::Commit => tx.commit().await,
        meridian_workload::ops::Ending::Abort => {
            tx.abort();
            Err(TxnError::Aborted(meridian_txn::AbortReason::User))
        }
    }
}

/// A random u64 from the OS-seeded thread RNG (for seeds).
pub fn random_seed() -> u64 {
    rand::thread_rng().gen()
}
