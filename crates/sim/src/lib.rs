//! # Deterministic simulator of the code that ships
//!
//! **Problem.** Concurrency and fault bugs in a commit protocol show up
//! under rare message orders, clock skews, losses and crashes. We need to
//! explore many of them on the *production* code and, when one fails, replay
//! it bit for bit.
//!
//! **Design** (after FoundationDB's and TigerBeetle's simulators). The
//! simulator is a shell, like the tokio node and client: it owns no protocol
//! logic. It runs
//! - one [`NodeProcess`] per node (participant, CM registration, clock
//!   master or clock sync, GC), and
//! - one production [`meridian_client::Client`] per client: a
//!   [`meridian_client::Core`] over a [`meridian_process::client::ClientProcess`]
//!   (commit driver, timeouts, abort sending, truncation queue, clock sync),
//!   with a simulated [`Io`]. Workloads are ordinary async code over
//!   [`Session::run_info`] (the real retry helper) and
//!   [`meridian_workload::ops::run_program`], the same code a real cluster
//!   runs.
//!
//! Everything is driven by one event queue ordered by simulated true time
//! (ties by insertion order). Client tasks are polled by a tiny
//! single-threaded executor in task-index order after every event, so no
//! iteration order depends on hashing, threads or wall time. All randomness
//! comes from the seed: network delays and faults from the simulator's RNG,
//! workload choices from per-client RNGs, retry jitter from each client
//! process's seeded RNG. Every process has its own clock,
//! `local = offset + true × (1 + drift)`, each within *half* the
//! configured bound of true time, so that any two clocks — whichever node
//! is clock master after a CM change — drift apart by less than the bound
//! (Marzullo's assumption, FaRMv2 §4.1: ε bounds the *relative* drift).
//! The first master's clock is true time.
//!
//! **Faults** ([`Faults`], each separately switchable; [`Faults::swarm`]
//! draws a random mix per seed): message loss, duplication and long delay;
//! symmetric and one-way partitions; node and client crashes (memory lost)
//! with restarts in a fresh incarnation; client stalls between reading the
//! clock and using it (review finding 4) and node pauses; clock drift
//! anywhere inside the bound. Fault tolerance is not built yet, so a crash
//! may leave the cluster stuck; the run still ends at `time_limit_ns` and
//! the checker judges what completed.
//!
//! **Checks.** Each transaction attempt becomes a
//! [`meridian_checker::TxnRecord`]: aborted attempts as aborted, the final
//! one as committed, aborted, or unknown (a commit whose outcome was
//! reported indeterminate, or that a client crash cut off). The checker
//! searches the history for strict-serializability and opacity violations;
//! the workload checks its own invariant (the bank audit's total); a global
//! time oracle checks every `read_ts` against the master's clock at invoke
//! (FaRMv2 Lemma 1); every process's `check_invariants` runs after every
//! event. Runs without lossy faults must also end clean: every backup equal
//! to its primary and every log truncated.

mod digest;
mod scenario;

pub use scenario::{Endpoint, EventView, HoldId, Scenario};

use meridian_checker::{History, Outcome, TxnRecord};
use meridian_client::{Client, Core, Io, Session, TxnError, TxnFuture, TxnOptions};
use meridian_client::{ClientOp, ExecuteError, ThinError};
use meridian_config::{Configuration, RegionMap};
use meridian_process::client::ClientProcess;
use meridian_process::coordination::CoordinationService;
use meridian_process::node::{
    answer_clock_sync, held_asks_fsync, held_waits_for_log, split_held,
    DurableRecord, NodeEffect, NodeEvent, NodeProcess, Peer,
};
use meridian_wire::{
    ClockRequest, ClockResponse, ConfigId, Frame, NodeId, Request, Response, Timestamp, TxId,
    TxnRequest, TxnResponse,
};
use meridian_workload::bank::{self, BankConfig, BankTxn, RegisterConfig, RegisterTxn, WriteIds};
use meridian_workload::ops::{run_program, Ending, Program, Replay, Step};
use meridian_workload::rows::{RowsConfig, RowsTxn};
use meridian_workload::tatp::{self, TatpConfig};
use meridian_workload::ycsb::{self, YcsbConfig, YcsbWorkload};
use rand::rngs::{SmallRng, StdRng};
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

/// Which checked workload the clients run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimWorkload {
    /// Bank transfers and audits (audits retried until they commit).
    Bank(BankConfig),
    /// Contended registers (reads plus blind writes).
    Register(RegisterConfig),
    /// Inserts, deletes, delete-then-insert, scans across regions, and long
    /// transactions that outlive the GC window.
    Rows(RowsConfig),
    /// TATP, run unchanged through the client API (`tatp::execute` inside
    /// `Session::run`). Its values carry no write ids, so it is checked by
    /// invariants, liveness and the clean end, not by the history checker.
    Tatp(TatpConfig),
    /// YCSB, run unchanged through the client API (`ycsb::execute` inside
    /// `Session::run`); checked like TATP (its values are random bytes).
    Ycsb(YcsbConfig),
}

/// Which faults a run injects. All probabilities are per mille.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Messages lost, ‰.
    pub loss_permille: u32,
    /// Messages delivered twice, ‰.
    pub duplicate_permille: u32,
    /// Messages delayed 20–100× the normal maximum (past RPC timeouts), ‰.
    pub long_delay_permille: u32,
    /// Symmetric partitions isolating one process for a while.
    pub partitions: bool,
    /// One-way partitions (a → b dropped, b → a delivered).
    pub one_way_partitions: bool,
    /// Node crashes (memory lost) and restarts in a fresh incarnation.
    pub node_crashes: bool,
    /// Client crashes and restarts with a new coordinator id.
    pub client_crashes: bool,
    /// Application calls that stall between reading the clock and using it,
    /// ‰ of calls.
    pub stall_permille: u32,
    /// Nodes that pause (process nothing) for a while.
    pub node_pauses: bool,
    /// Clocks drift anywhere inside the bound against any other clock
    /// (each within ±49% of it from true time; default: ±22%).
    pub wide_drift: bool,
    /// `durability = "disk"`: a crashed node restarts from its write-ahead
    /// log and checkpoint instead of empty.
    pub disk: bool,
    /// Every node crashes at the same instant and restarts from disk (only
    /// with `disk`): no acknowledged commit may be lost.
    pub cluster_crash: bool,
}

impl Faults {
    /// No faults.
    pub fn none() -> Self {
        Faults::default()
    }

    /// A random mix, as FoundationDB's and TigerBeetle's swarm testing do:
    /// each fault is on with probability ½, with a random intensity.
    pub fn swarm(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5157_4152_4d00_0000);
        let mut pick = |max: u32| {
            if rng.gen_bool(0.5) {
                rng.gen_range(1..=max)
            } else {
                0
            }
        };
        let loss_permille = pick(50);
        let duplicate_permille = pick(30);
        let long_delay_permille = pick(30);
        let stall_permille = pick(100);
        Faults {
            loss_permille,
            duplicate_permille,
            long_delay_permille,
            stall_permille,
            partitions: rng.gen_bool(0.5),
            one_way_partitions: rng.gen_bool(0.5),
            node_crashes: rng.gen_bool(0.5),
            client_crashes: rng.gen_bool(0.5),
            node_pauses: rng.gen_bool(0.5),
            wide_drift: rng.gen_bool(0.5),
            // Drawn last, so the faults above are those of earlier stops.
            disk: rng.gen_bool(0.5),
            cluster_crash: rng.gen_bool(0.25),
        }
        .normalised()
    }

    /// `cluster_crash` needs `disk` (a cluster-wide crash in memory mode
    /// loses everything, by definition).
    pub fn normalised(mut self) -> Self {
        self.cluster_crash &= self.disk;
        self
    }

    /// True when a fault can lose a message or a node's memory, so the
    /// end-of-run replica equality and empty-log checks do not apply.
    /// Client crashes are not: the client's lease expires, recovery decides
    /// its transactions the same way at every replica and truncates them,
    /// so a run with only client crashes must end clean (issue 6,
    /// must-show 3).
    pub fn is_lossy(&self) -> bool {
        self.loss_permille > 0
            || self.duplicate_permille > 0
            || self.long_delay_permille > 0
            || self.partitions
            || self.one_way_partitions
            || self.node_crashes
            || self.node_pauses
            || self.cluster_crash
    }

    /// Short description, e.g. `loss=12‰ crash-node stall=40‰`.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        let mut pm = |name: &str, x: u32| {
            if x > 0 {
                v.push(format!("{name}={x}‰"))
            }
        };
        pm("loss", self.loss_permille);
        pm("dup", self.duplicate_permille);
        pm("long-delay", self.long_delay_permille);
        pm("stall", self.stall_permille);
        for (on, name) in [
            (self.partitions, "partition"),
            (self.one_way_partitions, "one-way-partition"),
            (self.node_crashes, "crash-node"),
            (self.client_crashes, "crash-client"),
            (self.node_pauses, "pause-node"),
            (self.wide_drift, "wide-drift"),
            (
                self.disk && (self.node_crashes || self.cluster_crash),
                "disk",
            ),
            (self.cluster_crash, "crash-cluster"),
        ] {
            if on {
                v.push(name.to_string());
            }
        }
        if v.is_empty() {
            "none".into()
        } else {
            v.join(" ")
        }
    }
}

/// Parameters of one simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed; determines everything.
    pub seed: u64,
    /// Number of nodes (node 0 is CM and clock master).
    pub nodes: u32,
    /// Copies of each region.
    pub replication: usize,
    /// Regions.
    pub regions: u32,
    /// Concurrent clients.
    pub clients: u32,
    /// Transactions each client runs.
    pub txns_per_client: u32,
    /// The workload.
    pub workload: SimWorkload,
    /// Shortest one-way message delay, ns.
    pub min_delay_ns: u64,
    /// Longest one-way message delay (without the long-delay fault), ns.
    pub max_delay_ns: u64,
    /// Drift bound, ppm.
    pub drift_ppm: u64,
    /// Clock sync period, µs.
    pub sync_interval_us: u64,
    /// Time-window GC, ms (small, to exercise too-old aborts).
    pub gc_window_ms: u64,
    /// RPC timeout, ms.
    pub rpc_timeout_ms: u64,
    /// Faults injected.
    pub faults: Faults,
    /// The run ends at this simulated time even if clients are stuck, ns.
    pub time_limit_ns: u64,
    /// Percent of register and rows transactions sent as a thin client's
    /// `Execute` to a random node, whose embedded coordinator runs them
    /// (scripts that pause are always run by the client).
    pub thin_percent: u32,
    /// Register and rows transactions that make one read and nothing else run as
    /// single-read transactions (`TxnOptions::single_read`: FaRM §3's
    /// lock-free read, `TxnRequest::ReadLatest`), as the bench's single
    /// reads do; their history records the version they saw as the
    /// read's `read_ts`. Default true, as the client library's
    /// `clock.lock_free_reads`, which it also sets: false makes thin
    /// clients' lone GETs ordinary read-only transactions at the node. A
    /// retried single read is retried as it is (not redrawn).
    pub single_reads: bool,
    /// `clock.max_rate_ppm` (0: rates not checked, the default: simulated
    /// clocks drift anywhere inside ε, far past any rate limit).
    pub max_rate_ppm: u64,
    /// One node whose clock drifts exactly this much (node, ppm); the
    /// others then drift within a quarter of `max_rate_ppm`.
    pub drifting_node: Option<(u32, i64)>,
    /// The last this many nodes start outside the configuration (spares
    /// in the address book): they join, and the CM rebalances onto them.
    pub spare_nodes: u32,
    /// Injected bugs (`meridian_bugs`; feature `sim-bugs` only): rules of
    /// the simulator's shell (`AckBeforeFsync`, `LockBeforeFsync`,
    /// `InstalledIsAck`, `MasterClockKept`, `ReadsUnwaited`,
    /// `ReadsBeforeLogEnd`) and of the node processes, which are given
    /// this set at construction ([`NodeProcess::with_bugs`]). Every clone
    /// shares the hit counters, so after a run `bugs.hits(bug)` tells how
    /// often a broken branch ran.
    #[cfg(feature = "sim-bugs")]
    pub bugs: meridian_bugs::Bugs,
    /// The nodes' `limits.read_lock_wait_us` (reads that meet a lock wait
    /// for it, by default as long as `Limits::default()` says; 0 aborts
    /// them at once as FaRMv2 §4.7 does).
    pub read_lock_wait_us: u64,
    /// The nodes' `durability.report_after_primary_fsync` (default true,
    /// as the nodes'; `false` answers COMMIT-PRIMARY `Installed` before its
    /// fsync, the opt-in early answer, which seed tests found under it
    /// keep, and whose known loss is
    /// `the_early_commit_primary_answer_can_lose_a_commit`).
    pub report_after_primary_fsync: bool,
}

impl SimConfig {
    /// A contended bank run with defaults suited to `cargo test`.
    pub fn bank(seed: u64) -> Self {
        SimConfig {
            seed,
            nodes: 3,
            replication: 3,
            regions: 6,
            clients: 6,
            txns_per_client: 60,
            workload: SimWorkload::Bank(BankConfig {
                accounts: 8,
                initial_balance: 100,
                audit_percent: 25,
            }),
            min_delay_ns: 5_000,
            max_delay_ns: 200_000,
            drift_ppm: 1000,
            sync_interval_us: 1000,
            gc_window_ms: 5,
            rpc_timeout_ms: 20,
            faults: Faults::none(),
            time_limit_ns: 3_000_000_000,
            thin_percent: 20,
            single_reads: true,
            max_rate_ppm: 0,
            drifting_node: None,
            spare_nodes: 0,
            #[cfg(feature = "sim-bugs")]
            bugs: meridian_bugs::Bugs::none(),
            read_lock_wait_us: meridian_config::Limits::default().read_lock_wait_us,
            report_after_primary_fsync: true,
        }
    }

    /// A contended register run.
    pub fn register(seed: u64) -> Self {
        SimConfig {
            workload: SimWorkload::Register(RegisterConfig {
                keys: 5,
                max_reads: 3,
                max_writes: 2,
            }),
            ..Self::bank(seed)
        }
    }

    /// A rows run (inserts, deletes, scans, long transactions). Long
    /// transactions pause 12 ms against a 5 ms GC window.
    pub fn rows(seed: u64) -> Self {
        SimConfig {
            workload: SimWorkload::Rows(RowsConfig {
                keys: 24,
                max_ops: 4,
                max_scan_limit: 4,
                long_percent: 10,
                pause_ns: 12_000_000,
            }),
            ..Self::bank(seed)
        }
    }

    /// A TATP run (100 subscribers) over the production client code.
    pub fn tatp(seed: u64) -> Self {
        SimConfig {
            workload: SimWorkload::Tatp(TatpConfig { subscribers: 100 }),
            txns_per_client: 40,
            ..Self::bank(seed)
        }
    }

    /// A YCSB workload-A run (200 records, 100-byte values, θ = 0.99) over
    /// the production client code.
    pub fn ycsb(seed: u64) -> Self {
        SimConfig {
            workload: SimWorkload::Ycsb(YcsbConfig {
                records: 200,
                value_bytes: 100,
                theta: 0.99,
                workload: YcsbWorkload::A,
            }),
            txns_per_client: 40,
            ..Self::bank(seed)
        }
    }

    /// A swarm run: bank, register or rows (by seed) with [`Faults::swarm`].
    pub fn swarm(seed: u64) -> Self {
        let base = match seed % 3 {
            0 => Self::bank(seed),
            1 => Self::register(seed),
            _ => Self::rows(seed),
        };
        let faults = Faults::swarm(seed);
        SimConfig {
            // Five nodes when nodes crash: two may be down at once and a
            // majority still reconfigures (FaRM §5.2).
            nodes: if faults.node_crashes { 5 } else { base.nodes },
            faults,
            txns_per_client: 30,
            ..base
        }
    }
}

/// Outcome of one simulation.
#[derive(Debug)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// The faults injected.
    pub faults: Faults,
    /// Recorded history.
    pub history: History,
    /// Committed transactions.
    pub committed: u64,
    /// Aborted attempts.
    pub aborted: u64,
    /// Attempts whose outcome is unknown.
    pub unknown: u64,
    /// Attempts aborted with `TooOld` (snapshot below the GC safe point).
    pub too_old: u64,
    /// Workload invariant failures (wrong audit totals, the time oracle).
    pub workload_failures: Vec<String>,
    /// Messages delivered.
    pub messages: u64,
    /// Messages dropped by faults.
    pub dropped: u64,
    /// Crashes injected (nodes + clients).
    pub crashes: u64,
    /// True when the time limit ended the run before every client finished.
    pub timed_out: bool,
    /// A region lost every complete replica (more than f failures at once,
    /// beyond the fault model): liveness is not expected after it.
    pub region_lost: bool,
    /// When timed out: what each unfinished client and each busy node was
    /// waiting for, one line each (to read a liveness failure).
    pub stuck: Vec<String>,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Mean uncertainty of the timestamps taken, ns (live clients).
    pub mean_uncertainty_ns: u64,
    /// Thin-client transactions (`Execute`) committed by the nodes'
    /// embedded coordinators (included in `committed`).
    pub thin_committed: u64,
    /// The newest configuration any node committed (1: no change).
    pub last_config: u64,
    /// Transactions decided by recovery (FaRM §5.3): (committed, aborted).
    pub recovered: (u64, u64),
    /// LOCKs of a single blind write that waited at a primary for another
    /// transaction's lock and then took it (`limits.blind_lock_wait_us`),
    /// summed over the nodes alive at the end (a restart zeroes a node's).
    pub blind_locks_waited: u64,
    /// Region replicas the nodes let go of ([`NodeEffect::Discard`]: a
    /// refilled replica's old copy, a region moved away, a reset).
    pub discarded_replicas: u64,
    /// Single-read transactions' reads delivered to a node
    /// (`TxnRequest::ReadLatest`, [`SimConfig::single_reads`]).
    pub latest_reads: u64,
    /// Writes and copied versions the refill fence dropped
    /// (`RegionStore::merge_chunk`): on replicas let go of, and on those
    /// held by the nodes alive at the end (a restart zeroes a node's).
    pub stale_fill_writes: u64,
    /// Keys held by lock recovery with no object that a copy carried to a
    /// new replica (`ParticipantStats::copied_recovery_holds`), over the
    /// whole run: how often the swarm reaches that path of the fill fence.
    pub copied_recovery_holds: u64,
    /// Reconfiguration milestones: (true time ns, node, event).
    pub node_events: Vec<(u64, u32, NodeEvent)>,
    /// A hash of every event the run executed, in order, with its time
    /// (the `digest` module): equal for two runs exactly when they took
    /// the same steps.
    pub digest: u64,
}

/// A simulated clock: `local = offset + true × (1 + drift_ppb / 1e9)`.
#[derive(Clone, Copy, Debug)]
struct SimClock {
    offset_ns: u64,
    drift_ppb: i64,
}

impl SimClock {
    fn local(&self, true_ns: u64) -> u64 {
        let t = true_ns as i128;
        (self.offset_ns as i128 + t + t * self.drift_ppb as i128 / 1_000_000_000) as u64
    }
    /// Smallest true time at which local >= `local_ns`.
    fn true_at(&self, local_ns: u64) -> u64 {
        let l = local_ns as i128 - self.offset_ns as i128;
        let t = (l * 1_000_000_000)
            .div_euclid(1_000_000_000 + self.drift_ppb as i128)
            .max(0) as u64;
        let mut t = t.saturating_sub(2);
        while self.local(t) < local_ns {
            t += 1;
        }
        t
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Addr {
    Node(u32),
    Client(u32),
}

/// What client I/O left for the simulator, in order.
enum Out {
    Send {
        c: u32,
        inc: u32,
        to: NodeId,
        frame: Frame,
    },
    Wake {
        c: u32,
        inc: u32,
        at_local_ns: u64,
    },
}

/// State shared between the simulator and its clients' [`SimIo`]s.
struct World {
    now_ns: u64,
    outbox: Vec<Out>,
    /// Global time is the first CM's clock until a clock master takes over
    /// (a CM change or a restart: FaRMv2 §4.3 fast-forward and the stored
    /// time bound move it to the new master's clock plus an offset the
    /// simulator does not model): the time oracle checks until then.
    oracle_until_ns: u64,
    /// `clock.reads_wait_at_server`: a `read_ts` need not be in the past
    /// when the transaction begins, only when a node serves a read at it
    /// (checked at the node's reply, [`Sim::check_served_read`]).
    reads_wait_at_server: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The simulated [`Io`] of one client incarnation.
struct SimIo {
    c: u32,
    inc: u32,
    clock: SimClock,
    world: Arc<Mutex<World>>,
    dead: Arc<AtomicBool>,
    stall_permille: u32,
    stall_rng: Mutex<SmallRng>,
}

impl Io for SimIo {
    fn now_ns(&self) -> u64 {
        self.clock.local(lock(&self.world).now_ns)
    }
    fn send(&self, to: NodeId, frame: Frame) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        lock(&self.world).outbox.push(Out::Send {
            c: self.c,
            inc: self.inc,
            to,
            frame,
        });
    }
    fn wake_at(&self, _core: std::sync::Weak<Core>, at_local_ns: u64) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        lock(&self.world).outbox.push(Out::Wake {
            c: self.c,
            inc: self.inc,
            at_local_ns,
        });
    }
    fn stall_ns(&self) -> Option<u64> {
        if self.stall_permille == 0 {
            return None;
        }
        let mut rng = lock(&self.stall_rng);
        if rng.gen_range(0..1000) < self.stall_permille {
            Some(rng.gen_range(1..3_000_000))
        } else {
            None
        }
    }
}

/// A task's waker: sets a flag the executor polls.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One transaction program of the workload (cloned per attempt).
#[derive(Clone, Debug)]
enum WorkTxn {
    Bank(BankTxn),
    Register(RegisterTxn),
    Rows(RowsTxn),
}

impl Program for WorkTxn {
    fn next(&mut self, last: Option<Option<meridian_wire::Value>>) -> Step {
        match self {
            WorkTxn::Bank(t) => t.next(last),
            WorkTxn::Register(t) => t.next(last),
            WorkTxn::Rows(t) => t.next(last),
        }
    }
    fn on_commit(&mut self) -> Result<(), String> {
        match self {
            WorkTxn::Bank(t) => t.on_commit(),
            WorkTxn::Register(t) => t.on_commit(),
            WorkTxn::Rows(t) => t.on_commit(),
        }
    }
    fn rows(&mut self, rows: &[(meridian_wire::Key, meridian_wire::Value)]) {
        if let WorkTxn::Rows(t) = self {
            t.rows(rows)
        }
    }
}

/// What one client records, shared between its task and the simulator
/// (which finalises the attempt in flight when the client crashes).
#[derive(Default)]
struct ClientLog {
    /// Transactions finished (committed or given up), across incarnations.
    done: u32,
    /// The attempt in flight, with its program.
    current: Option<(TxnRecord, WorkTxn)>,
    records: Vec<TxnRecord>,
    failures: Vec<String>,
    /// Invoke time of the next attempt (true ns).
    next_invoke_ns: u64,
    /// TATP and YCSB transactions committed (they are not recorded in the
    /// history).
    unrecorded_committed: u64,
    /// Thin-client transactions committed (recorded in the history).
    thin_committed: u64,
}

impl ClientLog {
    fn finish_current(&mut self, outcome: Outcome, now: u64, write_ts: Option<u64>) {
        if let Some((mut r, _)) = self.current.take() {
            r.outcome = outcome;
            r.complete_ns = now;
            // Committed writers, and unknown ones that took a write_ts
            // (recovery commits them at it or not at all), are placed in
            // the version order.
            if outcome != Outcome::Aborted {
                r.write_ts = write_ts;
            }
            self.records.push(r);
        }
    }
}

struct TaskCtx {
    c: u32,
    inc: u32,
    nodes: u32,
    thin_percent: u32,
    single_reads: bool,
    client: Client,
    log: Arc<Mutex<ClientLog>>,
    world: Arc<Mutex<World>>,
    master: SimClock,
    txns: u32,
    gen: Arc<Mutex<Gen>>,
}

/// Draws a client's transactions. Every attempt writes fresh write ids
/// (the checker needs every write id unique), so a retried transfer is
/// drawn anew; audits write nothing and are retried as they are.
struct Gen {
    workload: SimWorkload,
    rng: StdRng,
    ids: WriteIds,
}

impl Gen {
    fn draw(&mut self) -> WorkTxn {
        match self.workload {
            SimWorkload::Bank(b) => WorkTxn::Bank(b.next_txn(&mut self.ids, &mut self.rng)),
            SimWorkload::Register(r) => WorkTxn::Register(r.next_txn(&mut self.ids, &mut self.rng)),
            SimWorkload::Rows(r) => WorkTxn::Rows(r.next_txn(&mut self.ids, &mut self.rng)),
            // TATP and YCSB run through `unrecorded_main`, not as recorded
            // programs.
            SimWorkload::Tatp(_) | SimWorkload::Ycsb(_) => {
                WorkTxn::Register(meridian_workload::ops::Script::default())
            }
        }
    }

    /// The program for an attempt after the first.
    fn redraw(&mut self, first: &WorkTxn, single_read: bool) -> WorkTxn {
        match first {
            WorkTxn::Bank(b) if b.is_audit() => first.clone(),
            _ if single_read => first.clone(),
            _ => self.draw(),
        }
    }
}

fn true_now(world: &Arc<Mutex<World>>) -> u64 {
    lock(world).now_ns
}

/// The client's program: register, wait for the clock, run the workload
/// through the production retry helper, close. No simulator logic.
async fn client_main(cx: TaskCtx) {
    let client = cx.client.clone();
    loop {
        match client.register().await {
            Ok(_) => break,
            Err(_) => client.sleep(5_000_000).await,
        }
    }
    while !client.core().with(|p, _| p.is_synchronised()) {
        client.sleep(1_000_000).await;
    }
    let mut session: Session = client.session();
    let workload = lock(&cx.gen).workload;
    if matches!(workload, SimWorkload::Tatp(_) | SimWorkload::Ycsb(_)) {
        return unrecorded_main(&cx, &mut session, workload).await;
    }
    let process = ((cx.c as u64) << 16) | cx.inc as u64;
    loop {
        if lock(&cx.log).done >= cx.txns {
            break;
        }
        let (program, thin) = {
            let mut g = lock(&cx.gen);
            let p = g.draw();
            let thin = g.rng.gen_range(0..100) < cx.thin_percent;
            (p, thin)
        };
        if let (true, WorkTxn::Register(script) | WorkTxn::Rows(script)) = (thin, &program) {
            if let Some(ops) = script.client_ops() {
                thin_txn(&cx, process, program.clone(), ops).await;
                lock(&cx.log).done += 1;
                continue;
            }
        }
        let audit = matches!(&program, WorkTxn::Bank(b) if b.is_audit());
        let single_read = cx.single_reads
            && matches!(&program, WorkTxn::Register(s) | WorkTxn::Rows(s) if s.is_single_read());
        let opts = if single_read {
            TxnOptions::single_read()
        } else {
            TxnOptions::default()
        };
        loop {
            lock(&cx.log).next_invoke_ns = true_now(&cx.world);
            let (log, world, master, gen) =
                (cx.log.clone(), cx.world.clone(), cx.master, cx.gen.clone());
            let mut first = Some(program.clone());
            let base = program.clone();
            let r = session
                .run_info(opts, move |tx| {
                    let mut prog = match first.take() {
                        Some(p) => p,
                        None => lock(&gen).redraw(&base, single_read),
                    };
                    let (log, world) = (log.clone(), world.clone());
                    let fut: TxnFuture<'_, ()> = Box::pin(async move {
                        let now = true_now(&world);
                        let invoke = {
                            let mut l = lock(&log);
                            // A previous attempt that got here ended aborted
                            // (its completion time is conservatively late).
                            l.finish_current(Outcome::Aborted, now, None);
                            l.next_invoke_ns
                        };
                        let read_ts = tx.read_ts().0;
                        // A single read has no `read_ts` (it begins without
                        // GET_TS); `check_latest_read` checks the version it
                        // saw instead.
                        if !single_read {
                            oracle(&world, &log, master, invoke, now, read_ts, false);
                        }
                        let mut rec = TxnRecord {
                            read_ts: Some(read_ts),
                            ..TxnRecord::invoked(process, invoke)
                        };
                        let ending = run_program(tx, &mut prog, &mut rec).await;
                        // A single read's snapshot is the version it saw.
                        if let Some(v) = tx.observed_version() {
                            rec.read_ts = Some(v.0);
                        }
                        let mut l = lock(&log);
                        l.current = Some((rec, prog));
                        // A retry begins after this attempt ends, so no
                        // later than its next GET_TS: a safe invoke time.
                        l.next_invoke_ns = true_now(&world);
                        drop(l);
                        match ending? {
                            Ending::Commit => Ok(()),
                            Ending::Abort => {
                                Err(TxnError::Aborted(meridian_client::AbortReason::User))
                            }
                        }
                    });
                    fut
                })
                .await;
            let now = true_now(&cx.world);
            let oracle_until = lock(&cx.world).oracle_until_ns;
            let mut l = lock(&cx.log);
            let committed = match r {
                Ok(((), info)) => {
                    if let Some((_, p)) = l.current.as_mut() {
                        if let Err(e) = p.on_commit() {
                            l.failures.push(format!("client {}: {e}", cx.c));
                        }
                    }
                    // FaRMv2 §4.2: a commit is reported only once global
                    // time has passed its `write_ts` (waited out by the
                    // coordinator, or by the nodes that held its VALIDATEs
                    // or COMMIT-BACKUPs).
                    let global = cx.master.local(now);
                    if info.wrote && now < oracle_until && info.write_ts.0 >= global {
                        l.failures.push(format!(
                            "time oracle: client {} was told {} committed at write_ts {} \
                             before global time {global} passed it",
                            cx.c, info.tx, info.write_ts.0
                        ));
                    }
                    let wts = info.wrote.then_some(info.write_ts.0);
                    l.finish_current(Outcome::Committed, now, wts);
                    true
                }
                Err(TxnError::Indeterminate { write_ts, .. }) => {
                    // Recovery commits it at this write_ts or not at all.
                    l.finish_current(Outcome::Unknown, now, write_ts.map(|t| t.0));
                    false
                }
                Err(_) => {
                    l.finish_current(Outcome::Aborted, now, None);
                    false
                }
            };
            // Audits retry until they commit, so they are checked under load.
            if committed || !audit {
                l.done += 1;
                break;
            }
        }
    }
    client.close().await;
}

/// A script sent as a thin client's `Execute` to a random node, whose
/// embedded coordinator (inside the production `NodeProcess`) runs and
/// commits it. The history record is made by replaying the script over the
/// node's results with the same `run_program` as the client path. Until
/// the reply comes, the attempt is recorded with its writes only: if the
/// client crashes or the reply is lost, the outcome is unknown.
async fn thin_txn(cx: &TaskCtx, process: u64, mut program: WorkTxn, ops: Vec<ClientOp>) {
    let lone_get = matches!(ops[..], [ClientOp::Get(_)]);
    let node = NodeId(lock(&cx.gen).rng.gen_range(0..cx.nodes));
    let invoke = true_now(&cx.world);
    let pending = unknown_record(process, invoke, &program).await;
    lock(&cx.log).current = Some((pending, program.clone()));
    let r = cx.client.execute(node, ops).await;
    let now = true_now(&cx.world);
    let mut l = lock(&cx.log);
    match r {
        Ok(done) => {
            drop(l);
            // A lone GET is a single read at the node (unless
            // `clock.lock_free_reads` is off): its snapshot is the version
            // it saw, which `check_latest_read` checks when it is served.
            if !(cx.single_reads && lone_get) {
                oracle(
                    &cx.world,
                    &cx.log,
                    cx.master,
                    invoke,
                    now,
                    done.read_ts.0,
                    true,
                );
            }
            let mut rec = TxnRecord {
                read_ts: Some(done.read_ts.0),
                ..TxnRecord::invoked(process, invoke)
            };
            let mut replay = Replay::new(done.results);
            let replayed = run_program(&mut replay, &mut program, &mut rec).await;
            let mut l = lock(&cx.log);
            if let Err(e) = replayed {
                l.failures
                    .push(format!("client {}: thin results do not fit: {e}", cx.c));
            }
            if let Err(e) = program.on_commit() {
                l.failures.push(format!("client {}: {e}", cx.c));
            }
            l.current = Some((rec, program));
            l.thin_committed += 1;
            let wrote = done.write_ts != done.read_ts;
            l.finish_current(Outcome::Committed, now, wrote.then_some(done.write_ts.0));
        }
        // Nothing took effect.
        Err(ThinError::Node(
            ExecuteError::Aborted { .. }
            | ExecuteError::Busy { .. }
            | ExecuteError::Invalid(_)
            | ExecuteError::Unavailable(_),
        )) => l.finish_current(Outcome::Aborted, now, None),
        Err(
            ThinError::Node(ExecuteError::Indeterminate { .. })
            | ThinError::NoReply(_)
            | ThinError::Client(_),
        ) => l.finish_current(Outcome::Unknown, now, None),
    }
}

/// The record of an attempt whose outcome is not known yet: its writes and
/// deletes (they may take effect), no reads.
async fn unknown_record(process: u64, invoke: u64, program: &WorkTxn) -> TxnRecord {
    let mut rec = TxnRecord::invoked(process, invoke);
    let mut p = program.clone();
    let mut blind = meridian_workload::ops::Blind;
    // `Blind` never fails: every read is absent, every scan empty.
    let _ = run_program(&mut blind, &mut p, &mut rec).await;
    rec.reads.clear();
    rec.scans.clear();
    rec
}

/// One TATP or YCSB transaction, drawn from the client's generator.
#[derive(Clone)]
enum BenchJob {
    Tatp(tatp::TatpTxn),
    /// The operation, the value size and a seed for the values it writes
    /// (the same on every attempt).
    Ycsb(ycsb::YcsbOp, usize, u64),
}

/// TATP or YCSB through the retry helper, with the workload crate's own
/// transaction code (`tatp::execute`, `ycsb::execute`), as `meridian bench`
/// runs them.
async fn unrecorded_main(cx: &TaskCtx, session: &mut Session, workload: SimWorkload) {
    let ycsb_gen = match workload {
        SimWorkload::Ycsb(cfg) => match ycsb::YcsbGenerator::new(&cfg) {
            Ok(g) => Some((g, cfg.value_bytes)),
            Err(e) => {
                lock(&cx.log).failures.push(format!("ycsb config: {e}"));
                return;
            }
        },
        _ => None,
    };
    loop {
        if lock(&cx.log).done >= cx.txns {
            break;
        }
        let (opts, job) = {
            let mut g = lock(&cx.gen);
            match (&ycsb_gen, workload) {
                (Some((gen, value_bytes)), _) => {
                    let op = gen.next_op(&mut g.rng);
                    let seed = g.rng.gen();
                    let opts = if op.is_read_only() {
                        TxnOptions::single_read()
                    } else {
                        TxnOptions::default()
                    };
                    (opts, BenchJob::Ycsb(op, *value_bytes, seed))
                }
                (None, SimWorkload::Tatp(cfg)) => {
                    let t = tatp::next_txn(&cfg, &mut g.rng);
                    let opts = if t.kind.is_single_read() {
                        TxnOptions::single_read()
                    } else if t.kind.is_read_only() {
                        TxnOptions::read_only()
                    } else {
                        TxnOptions::default()
                    };
                    (opts, BenchJob::Tatp(t))
                }
                (None, _) => return,
            }
        };
        let r = session
            .run(opts, move |tx| {
                let job = job.clone();
                let fut: TxnFuture<'_, ()> = Box::pin(async move {
                    match job {
                        BenchJob::Tatp(t) => tatp::execute(tx, &t).await.map(|_| ()),
                        BenchJob::Ycsb(op, value_bytes, seed) => {
                            let mut rng = SmallRng::seed_from_u64(seed);
                            ycsb::execute(tx, op, value_bytes, &mut rng).await
                        }
                    }
                });
                fut
            })
            .await;
        let mut l = lock(&cx.log);
        l.done += 1;
        if r.is_ok() {
            l.unrecorded_committed += 1;
        }
    }
    cx.client.close().await;
}

/// FaRMv2 Lemma 1 as an oracle: `read_ts` is at least global time (the
/// master's clock) when the transaction was invoked, and in the past by the
/// time it is used: at `now` if `read` (the transaction's reads are done),
/// or, when the coordinator hands it out at once
/// (`clock.reads_wait_at_server`), when each node serves a read at it
/// ([`Sim::check_served_read`]).
fn oracle(
    world: &Mutex<World>,
    log: &Mutex<ClientLog>,
    master: SimClock,
    invoke: u64,
    now: u64,
    read_ts: u64,
    read: bool,
) {
    let (until, at_server) = {
        let w = lock(world);
        (w.oracle_until_ns, w.reads_wait_at_server)
    };
    if now >= until {
        return;
    }
    let (lo, hi) = (master.local(invoke), master.local(now));
    let past_checked = read || !at_server;
    if read_ts < lo || (past_checked && read_ts >= hi) {
        lock(log).failures.push(format!(
            "time oracle: read_ts {read_ts} outside [{lo}, {hi}) of global time"
        ));
    }
}

#[derive(Debug)]
enum Event {
    Deliver {
        to: Addr,
        to_inc: u32,
        from: Addr,
        from_inc: u32,
        frame: Frame,
    },
    NodeTick(u32, u32),
    ClientTick(u32, u32),
    ClientStart(u32),
    CrashNode(u32),
    RestartNode(u32),
    CrashClient(u32),
    Block(Vec<(Addr, Addr)>),
    Heal(Vec<(Addr, Addr)>),
    Pause(u32, u64),
    /// The coordination service's answer to node `.0` (incarnation `.1`).
    /// `.3`: the stored time bound and the CM stored with it.
    CasReply(u32, u32, Result<(), Box<Configuration>>, (u64, NodeId)),
    /// The coordination service's answer to node `.0`'s (incarnation `.1`)
    /// time-bound raise: the stored bound and the CM stored with it.
    TimeBoundReply(u32, u32, (u64, NodeId)),
    /// Node `.0`'s (incarnation `.1`) log is durable through record `.2`.
    Fsync(u32, u32, u64),
}

/// The configuration the nodes run: the cluster's with
/// `SimConfig::read_lock_wait_us`; with the injected bug `ReadsUnwaited`,
/// the nodes serve reads without the `read_ts` wait the clients left to
/// them.
fn node_config(cfg: &SimConfig, config: &Configuration) -> Configuration {
    let mut c = config.clone();
    c.limits.read_lock_wait_us = cfg.read_lock_wait_us;
    if meridian_bugs::bug!(cfg.bugs, ReadsUnwaited, if c.clock.reads_wait_at_server) {
        c.clock.reads_wait_at_server = false;
    }
    c
}

/// A node process given the run's injected bugs (`SimConfig::bugs`).
fn with_bugs(cfg: &SimConfig, p: Option<NodeProcess>) -> Option<NodeProcess> {
    #[cfg(feature = "sim-bugs")]
    let p = p.map(|p| p.with_bugs(cfg.bugs.clone()));
    let _ = cfg;
    p
}

/// A sender as a key (requests in service are matched to their replies).
fn peer_key(p: Peer) -> u64 {
    match p {
        Peer::Node(m) => (1 << 63) | m.0 as u64,
        Peer::Conn(c) => c & !(1 << 63),
    }
}

struct NodeSlot {
    process: Option<NodeProcess>,
    /// What the node persisted (its coordination replica's state): it
    /// survives crashes, as a disk would.
    disk: Option<Vec<u8>>,
    /// Disk durability: the last checkpoint (with the last record it
    /// covers) and the write-ahead log after it; they survive crashes.
    /// The checkpoint is kept as the process's snapshot and encoded only
    /// at a restart, as the real shell encodes it on another thread while
    /// the node goes on: a snapshot that changed with the live state
    /// restores a different node.
    checkpoint: Option<(u64, meridian_process::node::NodeSnapshot)>,
    wal: Vec<(u64, meridian_process::node::DurableRecord)>,
    /// Records appended but not yet fsynced: a crash loses them.
    volatile: Vec<(u64, meridian_process::node::DurableRecord)>,
    /// Effects waiting for the log to be durable through their sequence
    /// number ([`split_held`]), in drain order: a crash loses them.
    held: VecDeque<(u64, Vec<NodeEffect>)>,
    /// When the last fsync asked for completes (fsyncs complete in order).
    fsync_at: u64,
    /// The last master clock view the process published (only for
    /// the injected bug `MasterClockKept`).
    kept_clock: Option<meridian_process::lease::MasterClockView>,
    inc: u32,
    clock: SimClock,
    paused_until: u64,
    ticks: BTreeSet<u64>,
}

struct ClientSlot {
    core: Option<Arc<Core>>,
    dead: Arc<AtomicBool>,
    inc: u32,
    clock: SimClock,
    log: Arc<Mutex<ClientLog>>,
    task: Option<(Task, Arc<Flag>)>,
    ticks: BTreeSet<u64>,
    rng: StdRng,
    ids: WriteIds,
    finished: bool,
}

/// The simulator.
pub struct Sim {
    cfg: SimConfig,
    config: Configuration,
    rng: StdRng,
    world: Arc<Mutex<World>>,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    nodes: Vec<NodeSlot>,
    clients: Vec<ClientSlot>,
    blocked: BTreeMap<(Addr, Addr), u32>,
    initial: Option<TxnRecord>,
    messages: u64,
    dropped: u64,
    crashes: u64,
    /// A crash took the last in-memory copy of a region (memory mode; see
    /// [`Sim::last_copy_crashed`]).
    last_copy_crashed: bool,
    uncertainty: (u128, u64),
    too_old: u64,
    discarded_replicas: u64,
    /// Fenced writes on the replicas let go of ([`SimReport::stale_fill_writes`]).
    discarded_stale_fill_writes: u64,
    /// [`SimReport::copied_recovery_holds`] of crashed node processes.
    crashed_copied_recovery_holds: u64,
    harvested: Vec<u32>,
    /// The coordination service (FaRM §5.2's Zookeeper; a Raft group in
    /// the tokio cluster): one CAS register, answered after a delay.
    coordination: meridian_process::coordination::MemoryService,
    /// Reconfiguration milestones: (true time, node, event).
    node_events: Vec<(u64, u32, NodeEvent)>,
    /// `MERIDIAN_SIM_TRACE` set: print every event to stderr.
    trace: bool,
    /// Global time never goes back (FaRMv2 §4.3), across CM changes and
    /// whole-cluster restarts: the highest master time any node has handed
    /// out (a clock-sync answer), with the node. Every later answer must
    /// be at least that.
    max_master_time: Option<(u64, u32)>,
    /// Violations of that oracle (reported as workload failures).
    time_failures: Vec<String>,
    /// READs and SCANs delivered to a node and not yet answered, by
    /// (node, sender, request id): their `read_ts`.
    reads_in_service: BTreeMap<(u32, u64, u64), u64>,
    /// [`SimReport::latest_reads`].
    latest_reads: u64,
    /// VALIDATEs and COMMIT-BACKUPs sent to be held until their
    /// `write_ts` passed (`TxnRequest::AfterWriteTs`), delivered and not
    /// yet answered, by (node, sender, request id): their `write_ts` and
    /// kind.
    holds_in_service: BTreeMap<(u32, u64, u64), (u64, &'static str)>,
    /// Every executed event, hashed in order ([`SimReport::digest`]).
    digest: digest::Digest,
    /// Events a scenario holds back ([`Scenario::hold`]); none in a
    /// seeded run.
    holds: scenario::Holds,
}

/// What [`Sim::advance`] did.
enum Advance {
    /// Ran or parked one event (or skipped a cancelled one).
    Ran,
    /// Every client finished (or nothing is left to run).
    Finished,
    /// The next event lies past `SimConfig::time_limit_ns`.
    TimeLimit,
}

impl Sim {
    /// Build a simulation from its parameters.
    pub fn new(cfg: SimConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let mut config = Configuration::local(
            cfg.nodes,
            7000,
            cfg.replication,
            cfg.regions,
            std::path::Path::new("/nonexistent"),
        );
        config.clock.drift_ppm = cfg.drift_ppm;
        config.clock.sync_interval_us = cfg.sync_interval_us;
        config.clock.max_rate_ppm = cfg.max_rate_ppm;
        // Off: thin clients' lone GETs read at `read_ts` too, as before
        // single reads (the seeds calibrated then replay as they were).
        config.clock.lock_free_reads = cfg.single_reads;
        if cfg.spare_nodes > 0 {
            config.members = (0..cfg.nodes.saturating_sub(cfg.spare_nodes)).collect();
        }
        config.clock.rate_window_ms = 500;
        config.limits.gc_window_ms = cfg.gc_window_ms;
        config.limits.gc_interval_us = 1000;
        config.limits.max_versions_per_object = 8;
        config.limits.rpc_timeout_ms = cfg.rpc_timeout_ms;
        config.limits.truncate_flush_us = 2000;
        // FaRM's 10 ms lease: failures are detected quickly in simulated
        // time (long delays still cause false suspicions, on purpose).
        config.lease.lease_ms = 10;
        config.lease.probe_timeout_ms = 1;
        // The embedded Raft group runs on simulated time: 1 ms ticks.
        config.coordination.tick_ms = 1;
        // Pinned to the values the swarm's seeds were found with (the
        // real cluster's defaults grew for its VM's stalls): a 10-tick
        // election and a 500 ms time-bound window.
        config.coordination.election_ticks = 10;
        config.clock.time_bound_window_ms = 500;
        config.lease.resend_ms = 1;
        config.durability.mode = if cfg.faults.disk {
            meridian_config::DurabilityMode::Disk
        } else {
            meridian_config::DurabilityMode::Memory
        };
        // Small, so checkpoints (and restores from them) happen in a run.
        config.durability.checkpoint_records = 200;
        config.durability.report_after_primary_fsync = cfg.report_after_primary_fsync;
        // Half the bound each way from true time: any two clocks stay
        // within the bound of each other, whichever becomes master (with
        // the whole bound each way, a new master and a client drifted up
        // to twice it apart, and swarm seeds 281 and 322 stayed stuck).
        let share = if cfg.faults.wide_drift { 49 } else { 22 };
        let bound_ppb = match cfg.drifting_node {
            Some(_) => cfg.max_rate_ppm as i64 * 1000 / 4,
            None => (cfg.drift_ppm as i64) * 1000 * share / 100,
        };
        let clock = |rng: &mut StdRng, master: bool| SimClock {
            offset_ns: rng.gen_range(0..1_000_000_000),
            drift_ppb: if master {
                0
            } else {
                rng.gen_range(-bound_ppb..=bound_ppb)
            },
        };
        let nodes = (0..cfg.nodes)
            .map(|n| {
                let mut clock = clock(&mut rng, NodeId(n) == config.cm());
                if let Some((d, ppm)) = cfg.drifting_node {
                    if d == n {
                        clock.drift_ppb = ppm * 1000;
                    }
                }
                NodeSlot {
                    process: with_bugs(
                        &cfg,
                        if config.is_member(NodeId(n)) {
                            NodeProcess::new(node_config(&cfg, &config), NodeId(n), 1).ok()
                        } else {
                            // A spare: outside the configuration, it joins.
                            NodeProcess::restarted(node_config(&cfg, &config), NodeId(n), 1).ok()
                        },
                    ),
                    disk: None,
                    checkpoint: None,
                    wal: Vec::new(),
                    volatile: Vec::new(),
                    held: VecDeque::new(),
                    kept_clock: None,
                    fsync_at: 0,
                    inc: 1,
                    clock,
                    paused_until: 0,
                    ticks: BTreeSet::new(),
                }
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|c| ClientSlot {
                core: None,
                dead: Arc::new(AtomicBool::new(false)),
                inc: 0,
                clock: clock(&mut rng, false),
                log: Arc::default(),
                task: None,
                ticks: BTreeSet::new(),
                rng: StdRng::seed_from_u64(cfg.seed.wrapping_mul(1000).wrapping_add(c as u64)),
                ids: WriteIds::new(c as u64 + 1),
                finished: false,
            })
            .collect();
        let coordination_seed = config.clone();
        let reads_wait_at_server = config.clock.reads_wait_at_server;
        let mut sim = Sim {
            cfg,
            config,
            rng,
            world: Arc::new(Mutex::new(World {
                now_ns: 0,
                outbox: Vec::new(),
                oracle_until_ns: u64::MAX,
                reads_wait_at_server,
            })),
            coordination: meridian_process::coordination::MemoryService::new(coordination_seed),
            node_events: Vec::new(),
            seq: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            nodes,
            clients,
            blocked: BTreeMap::new(),
            initial: None,
            messages: 0,
            dropped: 0,
            crashes: 0,
            last_copy_crashed: false,
            uncertainty: (0, 0),
            too_old: 0,
            discarded_replicas: 0,
            discarded_stale_fill_writes: 0,
            crashed_copied_recovery_holds: 0,
            max_master_time: None,
            time_failures: Vec::new(),
            reads_in_service: BTreeMap::new(),
            latest_reads: 0,
            holds_in_service: BTreeMap::new(),
            digest: digest::Digest::new(),
            holds: scenario::Holds::default(),
            harvested: Vec::new(),
            trace: std::env::var_os("MERIDIAN_SIM_TRACE").is_some(),
        };
        sim.harvested = vec![0; sim.clients.len()];
        sim.load_initial();
        for n in 0..sim.cfg.nodes {
            sim.schedule(0, Event::NodeTick(n, 1));
        }
        for c in 0..sim.cfg.clients {
            let start = sim.rng.gen_range(0..2_000_000);
            sim.schedule(start, Event::ClientStart(c));
        }
        sim.plan_faults();
        sim
    }

    /// Install the workload's initial rows on every replica at timestamp 1
    /// (a bulk load before the run, one transaction per row).
    fn load_initial(&mut self) {
        let rows = match self.cfg.workload {
            SimWorkload::Bank(b) => b.population(),
            SimWorkload::Tatp(t) => tatp::population(&t, self.cfg.seed).collect(),
            SimWorkload::Ycsb(y) => ycsb::population(&y, self.cfg.seed).collect(),
            SimWorkload::Register(_) | SimWorkload::Rows(_) => Vec::new(),
        };
        if rows.is_empty() {
            return;
        }
        let recorded = matches!(self.cfg.workload, SimWorkload::Bank(_));
        self.initial = recorded.then(|| bank::load_record(&rows, 0, 0, 0, 1));
        let map = RegionMap::new(&self.config);
        for (i, (k, v)) in rows.into_iter().enumerate() {
            let tx = TxId {
                config: ConfigId(1),
                coordinator: 0,
                thread: 0,
                local: i as u64,
            };
            let r = map.region_of(&k).clone();
            let lock = meridian_wire::LockRecord {
                tx,
                read_ts: Timestamp(0),
                regions: vec![r.id],
                writes: vec![meridian_wire::WriteOp {
                    region: r.id,
                    key: k.clone(),
                    value: Some(v),
                }],
            };
            for slot in self.nodes.iter_mut() {
                let Some(node) = slot.process.as_mut() else {
                    continue;
                };
                let id = node.id();
                let p = node.participant_mut();
                let write_ts = Timestamp(1);
                if id == r.primary {
                    let _ = p.handle(&[], &TxnRequest::Lock(lock.clone()));
                    let _ = p.handle(&[], &TxnRequest::CommitPrimary { tx, write_ts });
                    p.truncate_piggybacked(&meridian_wire::Truncation::of(vec![tx]));
                } else if r.backups.contains(&id) {
                    let record = lock.clone();
                    let _ = p.handle(&[], &TxnRequest::CommitBackup { record, write_ts });
                    p.truncate_piggybacked(&meridian_wire::Truncation::of(vec![tx]));
                }
            }
        }
    }

    /// Draw the fault schedule (crashes, partitions, pauses) from the seed.
    fn plan_faults(&mut self) {
        let f = self.cfg.faults;
        let horizon = 200_000_000u64; // faults happen in the first 200 ms
        let n = self.cfg.nodes;
        let c = self.cfg.clients;
        if f.node_crashes {
            // At most f = (n − 1) / 2 distinct nodes crash, so a majority of
            // every configuration survives (FaRM §5.2: a minority cannot
            // reconfigure); each restarts with its memory lost and joins
            // again.
            let mut victims: Vec<u32> = (0..n).collect();
            let most = ((n as usize - 1) / 2).max(1);
            for _ in 0..self.rng.gen_range(1..=most) {
                let at = self.rng.gen_range(5_000_000..horizon);
                let who = victims.remove(self.rng.gen_range(0..victims.len()));
                let down = self.rng.gen_range(1_000_000..50_000_000);
                self.schedule(at, Event::CrashNode(who));
                self.schedule(at + down, Event::RestartNode(who));
            }
        }
        if f.cluster_crash {
            // Every node at once (a power cut); each restarts from disk
            // after its own delay.
            let at = self.rng.gen_range(5_000_000..horizon);
            for who in 0..n {
                let down = self.rng.gen_range(1_000_000..30_000_000);
                self.schedule(at, Event::CrashNode(who));
                self.schedule(at + down, Event::RestartNode(who));
            }
        }
        if f.client_crashes {
            for _ in 0..self.rng.gen_range(1..=3) {
                let at = self.rng.gen_range(3_000_000..horizon);
                let who = self.rng.gen_range(0..c);
                let down = self.rng.gen_range(1_000_000..20_000_000);
                self.schedule(at, Event::CrashClient(who));
                self.schedule(at + down, Event::ClientStart(who));
            }
        }
        let all: Vec<Addr> = (0..n)
            .map(Addr::Node)
            .chain((0..c).map(Addr::Client))
            .collect();
        for (on, one_way) in [(f.partitions, false), (f.one_way_partitions, true)] {
            if !on {
                continue;
            }
            for _ in 0..self.rng.gen_range(1..=3) {
                let at = self.rng.gen_range(3_000_000..horizon);
                let len = self.rng.gen_range(1_000_000..60_000_000);
                let victim = all[self.rng.gen_range(0..all.len())];
                // One-way: only the victim's outgoing (or only its
                // incoming) messages are dropped.
                let outgoing = self.rng.gen_bool(0.5);
                let mut pairs = Vec::new();
                for other in &all {
                    let both_clients =
                        matches!(victim, Addr::Client(_)) && matches!(other, Addr::Client(_));
                    if *other == victim || both_clients {
                        continue;
                    }
                    if !one_way || outgoing {
                        pairs.push((victim, *other));
                    }
                    if !one_way || !outgoing {
                        pairs.push((*other, victim));
                    }
                }
                self.schedule(at, Event::Block(pairs.clone()));
                self.schedule(at + len, Event::Heal(pairs));
            }
        }
        if f.node_pauses {
            for _ in 0..self.rng.gen_range(1..=3) {
                let at = self.rng.gen_range(3_000_000..horizon);
                let who = self.rng.gen_range(0..n);
                let len = self.rng.gen_range(100_000..40_000_000);
                self.schedule(at, Event::Pause(who, at + len));
            }
        }
    }

    fn schedule(&mut self, at: u64, e: Event) {
        self.seq += 1;
        self.events.insert(self.seq, e);
        self.queue.push(Reverse((at, self.seq)));
    }

    fn now(&self) -> u64 {
        true_now(&self.world)
    }

    fn inc_of(&self, a: Addr) -> u32 {
        match a {
            Addr::Node(n) => self.nodes[n as usize].inc,
            Addr::Client(c) => self.clients[c as usize].inc,
        }
    }

    /// Put `frame` on the simulated network (faults permitting).
    fn send(&mut self, from: Addr, to: Addr, frame: Frame) {
        let f = self.cfg.faults;
        if self.blocked.contains_key(&(from, to))
            || (f.loss_permille > 0 && self.rng.gen_range(0..1000) < f.loss_permille)
        {
            self.dropped += 1;
            return;
        }
        // A thin client's Execute is never duplicated: TCP delivers a frame
        // once, and duplicates stand for re-sent requests, which the client
        // never does for Execute (running it twice is not idempotent until
        // RIFL's exactly-once RPCs land).
        let execute = matches!(
            &frame,
            Frame::Request {
                req: Request::Thin(_),
                ..
            }
        );
        let copies = if !execute
            && f.duplicate_permille > 0
            && self.rng.gen_range(0..1000) < f.duplicate_permille
        {
            2
        } else {
            1
        };
        let is_sync = matches!(
            &frame,
            Frame::Request {
                req: Request::Clock(ClockRequest::Sync),
                ..
            } | Frame::Response {
                resp: Response::Clock(ClockResponse::MasterTime { .. }),
                ..
            }
        );
        // Every third client is "far" from the clock master: its clock
        // synchronisations take 10x longer, so its uncertainty is much larger
        // than its peers' (the setting of FaRMv2 §7.3's counterexamples).
        let far = |a: Addr| matches!(a, Addr::Client(c) if c % 3 == 0);
        let (from_inc, to_inc) = (self.inc_of(from), self.inc_of(to));
        for _ in 0..copies {
            let mut d = self
                .rng
                .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns);
            if is_sync && (far(from) || far(to)) {
                d *= 10;
            }
            if f.long_delay_permille > 0 && self.rng.gen_range(0..1000) < f.long_delay_permille {
                d *= self.rng.gen_range(20..100);
            }
            let at = self.now() + d;
            self.schedule(
                at,
                Event::Deliver {
                    to,
                    to_inc,
                    from,
                    from_inc,
                    frame: frame.clone(),
                },
            );
        }
    }

    /// Run to the end and report.
    pub fn run(mut self) -> SimReport {
        let timed_out = loop {
            match self.advance() {
                Advance::Ran => {}
                Advance::Finished => break false,
                Advance::TimeLimit => break true,
            }
        };
        self.report(timed_out)
    }

    /// The report of a run that ended (`timed_out`: by the time limit).
    fn report(self, timed_out: bool) -> SimReport {
        let stuck = if timed_out {
            self.describe_stuck()
        } else {
            Vec::new()
        };
        let mut report = self.finish(timed_out);
        report.stuck = stuck;
        report
    }

    /// Take the next event off the queue and run it (or park it, when a
    /// scenario holds events like it), then let the clients and the
    /// processes react and check every process's invariants.
    fn advance(&mut self) -> Advance {
        let Some(Reverse((at, seq))) = self.queue.pop() else {
            return Advance::Finished;
        };
        let Some(ev) = self.events.remove(&seq) else {
            return Advance::Ran;
        };
        if at > self.cfg.time_limit_ns {
            return Advance::TimeLimit;
        }
        let Some(ev) = self.holds.park(at, ev) else {
            return Advance::Ran;
        };
        if self.execute(at, ev) {
            Advance::Finished
        } else {
            Advance::Ran
        }
    }

    /// Run `ev` at true time `at`, let the clients and the processes
    /// react, and check every process's invariants. True when the run is
    /// done: every client finished and every node's embedded coordinator
    /// has truncated its thin clients' transactions.
    fn execute(&mut self, at: u64, ev: Event) -> bool {
        lock(&self.world).now_ns = at;
        self.digest.event(at, &ev);
        self.step(ev);
        self.poll_tasks();
        self.route_client_io();
        for slot in &self.nodes {
            if let Some(p) = &slot.process {
                p.check_invariants();
            }
        }
        self.clients.iter().all(|c| c.finished)
            && self
                .nodes
                .iter()
                .filter_map(|n| n.process.as_ref())
                .all(|p| p.gateway().is_quiet())
    }

    /// One line per unfinished client and per node whose embedded
    /// coordinator is not quiet or that is reconfiguring or recovering.
    fn describe_stuck(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, c) in self.clients.iter().enumerate() {
            if c.finished {
                continue;
            }
            let detail = match &c.core {
                Some(core) => core.with(|p, _| p.describe_pending()),
                None => "crashed, not restarted".to_string(),
            };
            out.push(format!("client {i} (inc {}): {detail}", c.inc));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match &n.process {
                Some(p) => {
                    out.push(format!(
                        "node {i} (inc {}): member {} config {} (cm {}, members {:?}) recovering {} ({}) gateway {}",
                        n.inc,
                        p.is_member(),
                        p.config().id().0,
                        p.config().cm(),
                        p.config().members(),
                        p.recovering(),
                        p.describe_recovery(),
                        p.gateway().describe_pending()
                    ));
                }
                None => out.push(format!("node {i}: down")),
            }
        }
        let events = &self.node_events;
        for (t, n, e) in &events[events.len().saturating_sub(12)..] {
            out.push(format!("event t={:.3} ms node {n}: {e:?}", *t as f64 / 1e6));
        }
        out
    }

    fn step(&mut self, ev: Event) {
        if self.trace {
            eprintln!("t={} {:?}", self.now(), ev);
        }
        match ev {
            Event::Deliver {
                to,
                to_inc,
                from,
                from_inc,
                frame,
            } => {
                if to_inc != self.inc_of(to) || self.blocked.contains_key(&(from, to)) {
                    self.dropped += 1;
                    return;
                }
                let now = self.now();
                match to {
                    Addr::Node(n) => {
                        let slot = &mut self.nodes[n as usize];
                        if slot.paused_until > now {
                            let until = slot.paused_until;
                            let ev = Event::Deliver {
                                to,
                                to_inc,
                                from,
                                from_inc,
                                frame,
                            };
                            return self.schedule(until, ev);
                        }
                        let local = slot.clock.local(now);
                        let Some(p) = slot.process.as_mut() else {
                            self.dropped += 1;
                            return;
                        };
                        let peer = match from {
                            Addr::Node(m) => Peer::Node(NodeId(m)),
                            Addr::Client(c) => Peer::Conn(((c as u64) << 32) | from_inc as u64),
                        };
                        self.messages += 1;
                        // A CLOCK-SYNC, a client's or a node's own (one
                        // with no piggybacked truncations), goes to the
                        // node's lease thread, as in the tokio shell:
                        // answered from the view the process published,
                        // without the process.
                        let desk = p.lease_desk();
                        if let Some(mut reply) = answer_clock_sync(&desk, local, &frame) {
                            if let (true, Some(v), Frame::Response { id, .. }) = (
                                meridian_bugs::bug!(self.cfg.bugs, MasterClockKept, if slot.kept_clock.is_some()),
                                slot.kept_clock,
                                &reply,
                            ) {
                                let master_ns = (local as i128 + v.offset_ns).max(0) as u64;
                                reply = Frame::Response {
                                    id: *id,
                                    resp: ClockResponse::MasterTime { master_ns }.into(),
                                };
                            }
                            if let Frame::Response {
                                resp: Response::Clock(ClockResponse::MasterTime { master_ns }),
                                ..
                            } = &reply
                            {
                                self.check_master_time(now, n, *master_ns);
                            }
                            // The reply goes back to the socket that asked:
                            // an asker that restarted since is gone with it,
                            // and its successor, whose RPC ids start again,
                            // must not take the reply for its own (swarm
                            // seed 8896: a restarted client matched a
                            // long-delayed sync of its previous incarnation
                            // to its own request of the same id, and its
                            // clock's upper bound fell 258 µs below the
                            // master's time). The process path already
                            // drops replies to a connection of an older
                            // incarnation.
                            if from_inc != self.inc_of(from) {
                                self.dropped += 1;
                                return;
                            }
                            self.send(to, from, reply);
                            return;
                        }
                        if let Frame::Request {
                            id,
                            req:
                                Request::Txn(
                                    TxnRequest::Read { read_ts, .. }
                                    | TxnRequest::Scan { read_ts, .. },
                                ),
                            ..
                        } = &frame
                        {
                            self.reads_in_service
                                .insert((n, peer_key(peer), *id), read_ts.0);
                        }
                        if let Frame::Request {
                            req: Request::Txn(TxnRequest::ReadLatest { .. }),
                            ..
                        } = &frame
                        {
                            self.latest_reads += 1;
                        }
                        if let Frame::Request {
                            id,
                            req: Request::Txn(TxnRequest::AfterWriteTs { write_ts, req }),
                            ..
                        } = &frame
                        {
                            let kind = match **req {
                                TxnRequest::Validate { .. } => "VALIDATE",
                                _ => "COMMIT-BACKUP",
                            };
                            self.holds_in_service
                                .insert((n, peer_key(peer), *id), (write_ts.0, kind));
                        }
                        p.on_message(local, peer, frame);
                        self.route_node(n);
                    }
                    Addr::Client(c) => {
                        let Addr::Node(from_node) = from else { return };
                        let Some(core) = self.clients[c as usize].core.clone() else {
                            return;
                        };
                        self.messages += 1;
                        core.on_message(NodeId(from_node), frame);
                        core.with(|p, _| p.check_invariants());
                    }
                }
            }
            Event::NodeTick(n, inc) => {
                let now = self.now();
                let slot = &mut self.nodes[n as usize];
                slot.ticks.remove(&now);
                if slot.inc != inc {
                    return;
                }
                if slot.paused_until > now {
                    let until = slot.paused_until;
                    return self.schedule(until, Event::NodeTick(n, inc));
                }
                let local = slot.clock.local(now);
                if let Some(p) = slot.process.as_mut() {
                    p.tick(local);
                    self.route_node(n);
                }
            }
            Event::ClientTick(c, inc) => {
                let now = self.now();
                let slot = &mut self.clients[c as usize];
                slot.ticks.remove(&now);
                if slot.inc != inc {
                    return;
                }
                if let Some(core) = slot.core.clone() {
                    core.tick();
                    core.with(|p, _| p.check_invariants());
                }
            }
            Event::ClientStart(c) => self.start_client(c),
            Event::CrashNode(n) => {
                self.last_copy_crashed |= self.last_copy_crashed(n);
                let slot = &mut self.nodes[n as usize];
                if let Some(p) = slot.process.take() {
                    self.crashes += 1;
                    self.crashed_copied_recovery_holds +=
                        p.participant().stats().copied_recovery_holds;
                }
                // What was not fsynced is gone, and so is what waited for it.
                slot.volatile.clear();
                slot.held.clear();
            }
            Event::Fsync(n, inc, seq) => {
                let now = self.now();
                let slot = &mut self.nodes[n as usize];
                if slot.inc != inc || slot.process.is_none() {
                    return;
                }
                // A paused process sends nothing: the disk finishes, the
                // process notices when it runs again.
                if slot.paused_until > now {
                    let until = slot.paused_until;
                    return self.schedule(until, Event::Fsync(n, inc, seq));
                }
                let cut = slot.volatile.partition_point(|(s, _)| *s <= seq);
                slot.wal.extend(slot.volatile.drain(..cut));
                let mut release = Vec::new();
                while slot.held.front().is_some_and(|(s, _)| *s <= seq) {
                    if let Some((_, mut e)) = slot.held.pop_front() {
                        release.append(&mut e);
                    }
                }
                self.node_effects(n, release);
            }
            Event::RestartNode(n) => {
                let slot = &mut self.nodes[n as usize];
                if slot.process.is_none() {
                    slot.inc += 1;
                    slot.process = if self.cfg.faults.disk {
                        let bytes =
                            slot.checkpoint
                                .as_ref()
                                .map(|(s, snapshot)| match snapshot.encode() {
                                    Ok(b) => (*s, b),
                                    Err(e) => panic!("node {n}'s checkpoint does not encode: {e}"),
                                });
                        let cp = bytes.as_ref().map(|(s, b)| (*s, b.as_slice()));
                        match NodeProcess::restore(
                            node_config(&self.cfg, &self.config),
                            NodeId(n),
                            slot.inc,
                            cp,
                            &slot.wal,
                        ) {
                            Ok(p) => Some(p),
                            Err(e) => panic!("node {n} cannot restore from disk: {e}"),
                        }
                    } else {
                        NodeProcess::restarted(
                            node_config(&self.cfg, &self.config),
                            NodeId(n),
                            slot.inc,
                        )
                        .ok()
                    };
                    slot.process = with_bugs(&self.cfg, slot.process.take());
                    if let (Some(p), Some(disk)) = (slot.process.as_mut(), slot.disk.as_ref()) {
                        if let Err(e) = p.restore_coordination(disk) {
                            panic!("node {n} cannot restore its coordination state: {e}");
                        }
                    }
                    let inc = slot.inc;
                    let now = self.now();
                    self.schedule(now, Event::NodeTick(n, inc));
                }
            }
            Event::CasReply(n, inc, result, (bound_ns, cm)) => {
                let now = self.now();
                let slot = &mut self.nodes[n as usize];
                if slot.inc != inc {
                    return;
                }
                let local = slot.clock.local(now);
                if let Some(p) = slot.process.as_mut() {
                    p.on_time_bound(local, bound_ns, cm);
                    p.on_cas_result(local, result);
                    self.route_node(n);
                }
            }
            Event::TimeBoundReply(n, inc, (bound_ns, cm)) => {
                let now = self.now();
                let slot = &mut self.nodes[n as usize];
                if slot.inc != inc {
                    return;
                }
                let local = slot.clock.local(now);
                if let Some(p) = slot.process.as_mut() {
                    p.on_time_bound(local, bound_ns, cm);
                    self.route_node(n);
                }
            }
            Event::CrashClient(c) => self.crash_client(c),
            Event::Block(pairs) => {
                for p in pairs {
                    *self.blocked.entry(p).or_default() += 1;
                }
            }
            Event::Heal(pairs) => {
                for p in pairs {
                    if let Some(k) = self.blocked.get_mut(&p) {
                        *k -= 1;
                        if *k == 0 {
                            self.blocked.remove(&p);
                        }
                    }
                }
            }
            Event::Pause(n, until) => {
                let slot = &mut self.nodes[n as usize];
                slot.paused_until = slot.paused_until.max(until);
            }
        }
    }

    /// Carry out node `n`'s effects as the tokio shell does: the log
    /// effects first (records go to the un-fsynced tail of the log, and a
    /// simulated fsync makes them durable after a delay), then what
    /// [`split_held`] frees at once; the rest waits for that fsync. A crash
    /// before it loses both the records and the held effects.
    fn route_node(&mut self, n: u32) {
        let (effects, lock_free, log_end) = match self.nodes[n as usize].process.as_mut() {
            Some(p) => (
                p.drain_effects(),
                p.lock_replies_skip_fsync()
                    || meridian_bugs::bug!(self.cfg.bugs, LockBeforeFsync),
                if meridian_bugs::bug!(self.cfg.bugs, ReadsBeforeLogEnd, if p.log_end_seq() > 0) {
                    0
                } else {
                    p.log_end_seq()
                },
            ),
            None => return,
        };
        #[cfg(feature = "sim-bugs")]
        if self.cfg.bugs.on(meridian_bugs::Bug::MasterClockKept) {
            let slot = &mut self.nodes[n as usize];
            if let Some(v) = slot.process.as_ref().and_then(|p| p.master_clock_view()) {
                slot.kept_clock = Some(v);
            }
        }
        let mut rest = Vec::with_capacity(effects.len());
        // The drain's last record, and whether it must be fsynced even if
        // no reply waits for it (`DurableRecord::wants_prompt_sync`).
        let mut appended: Option<(u64, bool)> = None;
        for e in effects {
            match e {
                NodeEffect::AppendLog { first_seq, records } => {
                    let last = first_seq + records.len().saturating_sub(1) as u64;
                    let prompt = records.iter().any(DurableRecord::wants_prompt_sync);
                    let slot = &mut self.nodes[n as usize];
                    for (i, r) in records.into_iter().enumerate() {
                        slot.volatile.push((first_seq + i as u64, r));
                    }
                    appended = Some((last, prompt));
                    // Kept without its records, so `split_held` holds
                    // what depends on them.
                    rest.push(NodeEffect::AppendLog {
                        first_seq: last,
                        records: Vec::new(),
                    });
                }
                NodeEffect::Checkpoint { through_seq, state } => {
                    // The shell fsyncs the log before it rotates it.
                    let slot = &mut self.nodes[n as usize];
                    slot.wal.append(&mut slot.volatile);
                    slot.wal.retain(|(s, _)| *s > through_seq);
                    slot.checkpoint = Some((through_seq, state));
                }
                NodeEffect::PersistCoordination(state) => {
                    self.nodes[n as usize].disk = Some(state);
                }
                other => rest.push(other),
            }
        }
        #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
        let (mut free, held) = split_held(rest, self.cfg.faults.disk, lock_free, log_end);
        if let (Some((last, _)), None) = (appended, &held) {
            self.schedule_fsync(n, last);
        }
        if let Some((seq, held)) = held {
            #[cfg(feature = "sim-bugs")]
            let held = self.shell_bugs(&mut free, held);
            // As the shell's log does: an fsync is asked for only when
            // something waits for the records (or a record wants one);
            // otherwise they are fsynced by the idle sync, or by an
            // earlier fsync someone asks for.
            let waits = held_waits_for_log(&held);
            if held_asks_fsync(&free, &held) || appended.is_some_and(|(_, prompt)| prompt) {
                self.schedule_fsync(n, seq);
            } else {
                self.schedule_idle_fsync(n, seq);
            }
            if waits {
                self.nodes[n as usize].held.push_back((seq, held));
            }
        }
        self.node_effects(n, free);
    }

    /// The injected bugs of the simulator's shell that move effects from
    /// `held` (waiting for an fsync) to `free` (`AckBeforeFsync`,
    /// `InstalledIsAck`); returns what stays held.
    #[cfg(feature = "sim-bugs")]
    fn shell_bugs(&mut self, free: &mut Vec<NodeEffect>, mut held: Vec<NodeEffect>) -> Vec<NodeEffect> {
        if self.cfg.bugs.on(meridian_bugs::Bug::AckBeforeFsync) {
            let (acks, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|e| {
                matches!(
                    e,
                    NodeEffect::Send {
                        frame: Frame::Response {
                            resp: Response::Txn(meridian_wire::TxnResponse::Ack),
                            ..
                        },
                        ..
                    }
                )
            });
            if !acks.is_empty() {
                self.cfg.bugs.count(meridian_bugs::Bug::AckBeforeFsync);
            }
            free.extend(acks);
            held = rest;
        }
        if self.cfg.bugs.on(meridian_bugs::Bug::InstalledIsAck) {
            // The durable ACK of a COMMIT-PRIMARY is dropped, and its
            // early `Installed` answer goes as that ACK.
            let mut early: BTreeSet<(Peer, u64)> = BTreeSet::new();
            for e in free.iter_mut() {
                if let Some((to, id)) = meridian_process::node::installed_reply(e) {
                    self.cfg.bugs.count(meridian_bugs::Bug::InstalledIsAck);
                    early.insert((to, id));
                    *e = NodeEffect::Send {
                        to,
                        frame: Frame::Response {
                            id,
                            resp: Response::Txn(TxnResponse::Ack),
                        },
                    };
                }
            }
            held.retain(|e| {
                !matches!(e, NodeEffect::Send { to, frame: Frame::Response { id, .. } }
                    if early.contains(&(*to, *id)))
            });
        }
        held
    }

    /// Node `n`'s records through `seq` that no one waits for are fsynced
    /// `limits.log_idle_sync_us` later unless an fsync asked for covers
    /// them first (the shell's idle sync, `meridian_node::wal`).
    fn schedule_idle_fsync(&mut self, n: u32, seq: u64) {
        let at = self.now() + self.config.limits.log_idle_sync_us * 1000;
        let inc = self.nodes[n as usize].inc;
        self.schedule(at, Event::Fsync(n, inc, seq));
    }

    /// Ask for node `n`'s log to be fsynced through `seq`: done after a
    /// random delay, in order (one writer, group commit).
    fn schedule_fsync(&mut self, n: u32, seq: u64) {
        let now = self.now();
        let delay = self
            .rng
            .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns)
            * 2;
        let slot = &mut self.nodes[n as usize];
        let at = (now + delay).max(slot.fsync_at);
        slot.fsync_at = at;
        let inc = slot.inc;
        self.schedule(at, Event::Fsync(n, inc, seq));
    }

    /// The oracle for "beyond the fault model" in memory mode: true if
    /// crashing node `n` now takes the last copy of a region held in
    /// memory. `n` is a member of its configuration, a replica (complete
    /// or filling) of some region there, and no other replica of that
    /// region is a running member of that configuration or a newer one.
    /// Nodes report a lost region themselves only when they probe
    /// (`NodeEvent::RegionLost`); a configuration of one member whose node
    /// crashes leaves nobody to probe (swarm seed 18876), and the run ended
    /// stuck rather than lost. Filling replicas count as copies, so the
    /// oracle errs towards calling a run stuck (which a sweep reports), not
    /// lost. Disk mode never loses a copy to a crash.
    fn last_copy_crashed(&self, n: u32) -> bool {
        if self.cfg.faults.disk {
            return false;
        }
        let Some(p) = self.nodes[n as usize].process.as_ref() else {
            return false;
        };
        if !p.is_member() {
            return false;
        }
        let c = p.config();
        let holds = |m: NodeId| {
            m != NodeId(n)
                && self.nodes.get(m.0 as usize).is_some_and(|s| {
                    s.process
                        .as_ref()
                        .is_some_and(|q| q.is_member() && q.config().id() >= c.id())
                })
        };
        c.regions().iter().any(|r| {
            let replicas: Vec<NodeId> = std::iter::once(r.primary)
                .chain(r.backups.iter().copied())
                .collect();
            replicas.contains(&NodeId(n)) && !replicas.into_iter().any(holds)
        })
    }

    fn node_effects(&mut self, n: u32, effects: Vec<NodeEffect>) {
        let now = self.now();
        for e in effects {
            match e {
                NodeEffect::Send { to, frame } => {
                    if let Frame::Response {
                        resp: Response::Clock(ClockResponse::MasterTime { master_ns }),
                        ..
                    } = &frame
                    {
                        self.check_master_time(now, n, *master_ns);
                    }
                    if let Frame::Response {
                        id,
                        resp: Response::Txn(r),
                    } = &frame
                    {
                        if let Some((write_ts, kind)) =
                            self.holds_in_service.remove(&(n, peer_key(to), *id))
                        {
                            if matches!(
                                r,
                                TxnResponse::Validate(Ok(()))
                                    | TxnResponse::Ack
                                    | TxnResponse::Installed
                            ) {
                                self.check_held_write(now, n, write_ts, kind);
                            }
                        }
                    }
                    if let Frame::Response {
                        resp: Response::Txn(TxnResponse::ReadLatest(Ok(l))),
                        ..
                    } = &frame
                    {
                        self.check_latest_read(now, n, l.version.0);
                    }
                    if let Frame::Response {
                        id,
                        resp: Response::Txn(r @ (TxnResponse::Read(_) | TxnResponse::Scan(_))),
                    } = &frame
                    {
                        let served =
                            matches!(r, TxnResponse::Read(Ok(_)) | TxnResponse::Scan(Ok(_)));
                        if let Some(read_ts) = self.reads_in_service.remove(&(n, peer_key(to), *id))
                        {
                            if served {
                                self.check_served_read(now, n, read_ts);
                            }
                        }
                    }
                    let to = match to {
                        Peer::Node(m) => Addr::Node(m.0),
                        Peer::Conn(id) => {
                            let (c, inc) = ((id >> 32) as u32, id as u32);
                            if (c as usize) >= self.clients.len()
                                || self.clients[c as usize].inc != inc
                            {
                                continue;
                            }
                            Addr::Client(c)
                        }
                    };
                    self.send(Addr::Node(n), to, frame);
                }
                NodeEffect::Cas { expected, proposed } => {
                    let result = self.coordination.compare_and_swap(expected, *proposed);
                    let delay = self
                        .rng
                        .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns)
                        * 3;
                    let inc = self.nodes[n as usize].inc;
                    let bound = (
                        self.coordination.time_bound_ns(),
                        self.coordination.current().cm(),
                    );
                    self.schedule(now + delay, Event::CasReply(n, inc, result, bound));
                }
                NodeEffect::RaiseTimeBound { to_ns } => {
                    let bound = (
                        self.coordination.raise_time_bound(to_ns),
                        self.coordination.current().cm(),
                    );
                    let delay = self
                        .rng
                        .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns)
                        * 3;
                    let inc = self.nodes[n as usize].inc;
                    self.schedule(now + delay, Event::TimeBoundReply(n, inc, bound));
                }
                // Carried out by `route_node` before the split (an
                // `AppendLog` here is its record-less marker).
                NodeEffect::PersistCoordination(_)
                | NodeEffect::AppendLog { .. }
                | NodeEffect::Checkpoint { .. } => {}
                // Simulated time does not pass while a replica is freed.
                NodeEffect::Discard(d) => {
                    self.discarded_replicas += d.replicas() as u64;
                    self.discarded_stale_fill_writes += d.stale_fill_writes();
                }
                NodeEffect::Event(ev) => {
                    if self.trace {
                        eprintln!("t={now} node {n}: {ev:?}");
                    }
                    // A clock disabled means a master takeover (a CM
                    // change, or a restart), which moves global time off
                    // the first CM's clock: the oracle ends there.
                    let takeover = match ev {
                        NodeEvent::Applied(_) => self.nodes[n as usize]
                            .process
                            .as_ref()
                            .is_some_and(|p| p.config().cm() != self.config.cm()),
                        NodeEvent::ClockDisabled(_) => true,
                        _ => false,
                    };
                    if takeover {
                        let mut w = lock(&self.world);
                        w.oracle_until_ns = w.oracle_until_ns.min(now);
                    }
                    self.node_events.push((now, n, ev));
                }
                NodeEffect::Wake { at_local_ns } => {
                    let slot = &mut self.nodes[n as usize];
                    let at = slot.clock.true_at(at_local_ns).max(now);
                    if slot.ticks.insert(at) {
                        let inc = slot.inc;
                        self.schedule(at, Event::NodeTick(n, inc));
                    }
                }
            }
        }
    }

    fn route_client_io(&mut self) {
        let now = self.now();
        loop {
            let out = std::mem::take(&mut lock(&self.world).outbox);
            if out.is_empty() {
                return;
            }
            for o in out {
                match o {
                    Out::Send { c, inc, to, frame } => {
                        if self.clients[c as usize].inc == inc {
                            self.send(Addr::Client(c), Addr::Node(to.0), frame);
                        }
                    }
                    Out::Wake {
                        c,
                        inc,
                        at_local_ns,
                    } => {
                        let slot = &mut self.clients[c as usize];
                        if slot.inc != inc {
                            continue;
                        }
                        let at = slot.clock.true_at(at_local_ns).max(now);
                        if slot.ticks.insert(at) {
                            self.schedule(at, Event::ClientTick(c, inc));
                        }
                    }
                }
            }
        }
    }

    /// Start (or restart after a crash) client `c` in a new incarnation.
    fn start_client(&mut self, c: u32) {
        let seed = self.cfg.seed;
        let master = self.nodes[self.config.cm().0 as usize].clock;
        let slot = &mut self.clients[c as usize];
        if slot.core.is_some() || slot.finished {
            return;
        }
        slot.inc += 1;
        slot.dead = Arc::new(AtomicBool::new(false));
        let io = SimIo {
            c,
            inc: slot.inc,
            clock: slot.clock,
            world: self.world.clone(),
            dead: slot.dead.clone(),
            stall_permille: self.cfg.faults.stall_permille,
            stall_rng: Mutex::new(SmallRng::seed_from_u64(
                seed ^ ((c as u64) << 40) ^ slot.inc as u64,
            )),
        };
        let process = ClientProcess::new(
            &self.config,
            0,
            seed.wrapping_mul(31)
                .wrapping_add(((c as u64) << 20) | slot.inc as u64),
        );
        let core = Core::new(self.config.clone(), process, Box::new(io));
        let client = Client::over(core.clone());
        slot.core = Some(core.clone());
        let cx = TaskCtx {
            c,
            inc: slot.inc,
            nodes: self.cfg.nodes,
            thin_percent: self.cfg.thin_percent,
            single_reads: self.cfg.single_reads,
            client,
            log: slot.log.clone(),
            world: self.world.clone(),
            master,
            txns: self.cfg.txns_per_client,
            gen: Arc::new(Mutex::new(Gen {
                workload: self.cfg.workload,
                rng: StdRng::seed_from_u64(slot.rng.gen()),
                ids: std::mem::replace(&mut slot.ids, WriteIds::new(0)),
            })),
        };
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        slot.task = Some((Box::pin(client_main(cx)), flag));
        // The first tick starts the clock sync.
        core.tick();
    }

    /// Client `c` crashes: its memory is lost and it sends nothing more. The
    /// attempt in flight has an unknown outcome.
    fn crash_client(&mut self, c: u32) {
        let now = self.now();
        if !self.clients[c as usize].finished {
            self.harvest(c as usize);
        }
        let slot = &mut self.clients[c as usize];
        if slot.core.is_none() || slot.finished {
            return;
        }
        self.crashes += 1;
        slot.dead.store(true, Ordering::Relaxed);
        slot.task = None;
        slot.core = None;
        slot.ticks.clear();
        // Write ids must stay unique across incarnations.
        slot.ids = WriteIds::new(((c as u64 + 1) << 20) | slot.inc as u64);
        let mut log = lock(&slot.log);
        log.finish_current(Outcome::Unknown, now, None);
    }

    /// Add client `c`'s counters to the report's (once per incarnation).
    fn harvest(&mut self, c: usize) {
        if self.harvested[c] == self.clients[c].inc {
            return;
        }
        let Some(core) = self.clients[c].core.take() else {
            return;
        };
        let s = core.with(|p, _| p.stats());
        self.uncertainty.0 += s.uncertainty_ns_sum as u128;
        self.uncertainty.1 += s.ts_count;
        self.too_old += s.aborts_too_old;
        self.clients[c].core = Some(core);
        self.harvested[c] = self.clients[c].inc;
    }

    /// Poll every woken task, in index order, until none is woken.
    fn poll_tasks(&mut self) {
        loop {
            let mut any = false;
            for c in 0..self.clients.len() {
                let slot = &mut self.clients[c];
                let Some((task, flag)) = slot.task.as_mut() else {
                    continue;
                };
                if !flag.0.swap(false, Ordering::AcqRel) {
                    continue;
                }
                any = true;
                let waker = Waker::from(flag.clone());
                let mut cx = Context::from_waker(&waker);
                if task.as_mut().poll(&mut cx).is_ready() {
                    slot.task = None;
                    slot.finished = true;
                    self.harvest(c);
                }
            }
            self.route_client_io();
            if !any {
                return;
            }
        }
    }

    /// The global-time oracle: a master time handed out below one handed
    /// out before (by any node) is a clock-failover bug.
    /// FaRMv2 Lemma 1 at the server: a node serves a read at `read_ts`
    /// only once global time has passed it (the oracle's check, made where
    /// the wait happens with `clock.reads_wait_at_server`).
    fn check_served_read(&mut self, now: u64, node: u32, read_ts: u64) {
        self.check_passed(now, read_ts, |global| {
            format!(
                "time oracle: node {node} served a read at read_ts {read_ts} before global \
                 time {global} passed it"
            )
        });
    }

    /// The time oracle's one check: `ts` must be below global time at
    /// `now` (while the oracle runs); otherwise record `failure(global)`
    /// (at most 8).
    fn check_passed(&mut self, now: u64, ts: u64, failure: impl FnOnce(u64) -> String) {
        if now >= lock(&self.world).oracle_until_ns {
            return;
        }
        let global = self.nodes[self.config.cm().0 as usize].clock.local(now);
        if ts >= global && self.time_failures.len() < 8 {
            self.time_failures.push(failure(global));
        }
    }

    /// The premise of a single read (`TxnRequest::ReadLatest`): the
    /// newest version a primary answers with has a `write_ts` global time
    /// has already passed (no version is installed before that), so the
    /// answer is the key's state at the time it is served.
    fn check_latest_read(&mut self, now: u64, node: u32, version: u64) {
        self.check_passed(now, version, |global| {
            format!(
                "time oracle: node {node} answered a single read with version {version} \
                 before global time {global} passed it"
            )
        });
    }

    /// FaRMv2 §7.3 at the server: a node handles a VALIDATE or
    /// COMMIT-BACKUP sent to be held until its `write_ts` passed
    /// (`clock.writes_wait_at_server`) only once global time has passed it
    /// (checked at its reply, which the node sends when it handles it).
    fn check_held_write(&mut self, now: u64, node: u32, write_ts: u64, kind: &str) {
        self.check_passed(now, write_ts, |global| {
            format!(
                "time oracle: node {node} handled a held {kind} of write_ts {write_ts} before \
                 global time {global} passed it"
            )
        });
    }

    fn check_master_time(&mut self, now: u64, node: u32, master_ns: u64) {
        match self.max_master_time {
            Some((max, by)) if master_ns < max => {
                if self.time_failures.len() < 8 {
                    self.time_failures.push(format!(
                        "global time went back at t={now}: node {node} handed out master \
                         time {master_ns} after node {by} handed out {max}"
                    ));
                }
            }
            _ => self.max_master_time = Some((master_ns, node)),
        }
    }

    fn finish(mut self, timed_out: bool) -> SimReport {
        let now = self.now();
        let mut history = History::default();
        if let Some(r) = self.initial.take() {
            history.push(r);
        }
        let mut failures = std::mem::take(&mut self.time_failures);
        for c in 0..self.clients.len() {
            self.harvest(c);
        }
        for slot in &self.clients {
            let mut log = lock(&slot.log);
            log.finish_current(Outcome::Unknown, now, None);
            history.extend(std::mem::take(&mut log.records));
            failures.append(&mut log.failures);
        }
        if !timed_out && !self.cfg.faults.is_lossy() {
            self.check_clean_end();
        }
        // A COMMIT-RECOVERY after a truncation released a hold on a key
        // whose committed write is not in place at that replica
        // (`ParticipantStats::holds_released_unapplied`; nodes alive at
        // the end, a restart zeroes a node's count).
        for (i, slot) in self.nodes.iter().enumerate() {
            if let Some(p) = slot.process.as_ref() {
                let n = p.participant().stats().holds_released_unapplied;
                if n > 0 {
                    failures.push(format!(
                        "n{i}: {n} lock-recovery holds released by a COMMIT-RECOVERY after a \
                         truncation, on keys whose committed write is not in place there"
                    ));
                }
            }
        }
        let (mut unrecorded_committed, mut thin_committed) = (0, 0);
        for slot in &self.clients {
            let l = lock(&slot.log);
            unrecorded_committed += l.unrecorded_committed;
            thin_committed += l.thin_committed;
        }
        let last_config = self
            .node_events
            .iter()
            .filter_map(|(_, _, e)| match e {
                NodeEvent::Committed(c) => Some(c.0),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        let recovered = self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .map(|p| p.recovery_stats())
            .fold((0, 0), |(c, a), s| (c + s.committed, a + s.aborted));
        let blind_locks_waited = self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .map(|p| p.read_hold_stats().blind_locks_waited)
            .sum();
        let stale_fill_writes = self.discarded_stale_fill_writes
            + self
                .nodes
                .iter()
                .filter_map(|n| n.process.as_ref())
                .map(|p| p.participant().stale_fill_writes())
                .sum::<u64>();
        let copied_recovery_holds = self.crashed_copied_recovery_holds
            + self
                .nodes
                .iter()
                .filter_map(|n| n.process.as_ref())
                .map(|p| p.participant().stats().copied_recovery_holds)
                .sum::<u64>();
        let count = |o: Outcome| history.txns.iter().filter(|t| t.outcome == o).count() as u64;
        let (committed, aborted, unknown) = (
            count(Outcome::Committed) + unrecorded_committed,
            count(Outcome::Aborted),
            count(Outcome::Unknown),
        );
        SimReport {
            seed: self.cfg.seed,
            faults: self.cfg.faults,
            committed,
            aborted,
            unknown,
            history,
            workload_failures: failures,
            too_old: self.too_old,
            messages: self.messages,
            dropped: self.dropped,
            crashes: self.crashes,
            timed_out,
            stuck: Vec::new(),
            region_lost: self.last_copy_crashed
                || self
                    .node_events
                    .iter()
                    .any(|(_, _, e)| matches!(e, NodeEvent::RegionLost(..))),
            end_ns: now,
            mean_uncertainty_ns: (self.uncertainty.0 / self.uncertainty.1.max(1) as u128) as u64,
            thin_committed,
            last_config,
            recovered,
            blind_locks_waited,
            discarded_replicas: self.discarded_replicas,
            latest_reads: self.latest_reads,
            stale_fill_writes,
            copied_recovery_holds,
            node_events: std::mem::take(&mut self.node_events),
            digest: self.digest.value(),
        }
    }

    /// Without lossy faults every client closed (flushing its truncations),
    /// so every backup must hold what its primary holds and no log record
    /// may be left.
    fn check_clean_end(&mut self) {
        // A reconfiguration the last client crash started may still be
        // recovering: let the nodes finish it (their ticks and messages
        // only, for at most a simulated second).
        // A client that crashed near the end may also have left commit
        // records its lease has not yet timed out on: the CM suspects it
        // only when the lease expires, and the next configuration recovers
        // (and truncates) its transactions (FaRM §5.3). Wait for that too.
        let until = lock(&self.world).now_ns.saturating_add(1_000_000_000);
        while self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .any(|p| p.recovering() || (p.is_member() && p.participant().log_len() > 0))
        {
            let Some(Reverse((at, seq))) = self.queue.pop() else {
                break;
            };
            if at > until {
                break;
            }
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            if matches!(
                ev,
                Event::NodeTick(..)
                    | Event::Fsync(..)
                    | Event::CasReply(..)
                    | Event::TimeBoundReply(..)
                    | Event::Deliver {
                        to: Addr::Node(_),
                        ..
                    }
            ) {
                lock(&self.world).now_ns = at;
                self.digest.event(at, &ev);
                self.step(ev);
            }
        }
        // Deliver what is still in flight (one-way messages, acks).
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            if let Event::Deliver {
                to: Addr::Node(_), ..
            } = ev
            {
                lock(&self.world).now_ns = at;
                self.digest.event(at, &ev);
                self.step(ev);
            }
        }
        // The newest configuration any member runs (a fault-free run may
        // still reconfigure: a node removed for its clock rate).
        let newest = self
            .nodes
            .iter()
            .filter_map(|s| s.process.as_ref())
            .filter(|p| p.is_member())
            .map(|p| p.config())
            .max_by_key(|c| c.id())
            .unwrap_or(&self.config);
        let map = RegionMap::new(newest);
        let store = |n: NodeId, r| {
            self.nodes[n.0 as usize]
                .process
                .as_ref()
                .and_then(|p| p.participant().store(r).map(heads))
        };
        for r in map.regions() {
            let primary = store(r.primary, r.id);
            for b in &r.backups {
                assert_eq!(
                    primary,
                    store(*b, r.id),
                    "seed {}: backup {} of {} diverged from its primary",
                    self.cfg.seed,
                    b,
                    r.id
                );
            }
        }
        for slot in &self.nodes {
            if let Some(p) = &slot.process {
                if !newest.is_member(p.id()) {
                    continue; // removed: nobody truncates there any more
                }
                assert_eq!(
                    p.participant().log_len(),
                    0,
                    "seed {}: {} log not fully truncated",
                    self.cfg.seed,
                    p.id()
                );
            }
        }
    }
}

fn heads(s: &meridian_storage::RegionStore) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    s.iter()
        .filter_map(|(k, o)| {
            o.versions
                .last()
                .map(|v| (k.to_vec(), v.ts.0, v.value.clone()))
        })
        .filter(|(_, _, v)| v.is_some())
        .collect()
}

/// Run one simulation and check its history; `Err` carries a replayable
/// report.
///
/// Errors: a checker violation, a workload invariant failure, or a broken
/// invariant assertion (a panic inside the run, caught and reported with
/// its seed).
pub fn run_and_check(cfg: SimConfig) -> Result<SimReport, String> {
    let (seed, faults) = (cfg.seed, cfg.faults.describe());
    checked(seed, &faults, || Sim::new(cfg).run())
}

/// Run `run` (a simulation to its end) and judge its report: a panic (a
/// broken invariant), a checker violation or a workload failure is an
/// error naming `seed` and `faults`.
fn checked(seed: u64, faults: &str, run: impl FnOnce() -> SimReport) -> Result<SimReport, String> {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    let report = match run {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(format!(
                "seed {seed} (faults: {faults}) FAILED (replay with this seed): invariant broken: {msg}"
            ));
        }
    };
    let check = meridian_checker::check(&report.history);
    // `MERIDIAN_SIM_DUMP=12,40`: print those transactions (the checker's
    // T-numbers) to stderr, to read a failure.
    if let Some(list) = std::env::var_os("MERIDIAN_SIM_DUMP") {
        for t in list.to_string_lossy().split(',') {
            if let Some(rec) = t
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(|i| report.history.txns.get(i))
            {
                eprintln!("T{t}: {rec:?}");
            }
        }
    }
    // `MERIDIAN_SIM_DUMP_KEY=85,83,0,0,0,8`: print every transaction that
    // wrote or deleted that key.
    if let Some(k) = std::env::var_os("MERIDIAN_SIM_DUMP_KEY") {
        let key: Vec<u8> = k
            .to_string_lossy()
            .split(',')
            .filter_map(|b| b.trim().parse().ok())
            .collect();
        for (i, t) in report.history.txns.iter().enumerate() {
            if t.writes.iter().chain(&t.deletes).any(|(k, _)| *k == key) {
                eprintln!("T{i}: {t:?}");
            }
        }
    }
    if !check.is_ok() || !report.workload_failures.is_empty() {
        return Err(format!(
            "seed {seed} (faults: {faults}) FAILED (replay with this seed)\n{check}\nworkload failures: {:?}",
            report.workload_failures
        ));
    }
    Ok(report)
}
