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
//! - one [`meridian_process::node::NodeProcess`] per node (participant,
//!   CM registration, clock master or clock sync, leases,
//!   reconfiguration, recovery, GC), and
//! - one production [`meridian_client::Client`] per client: a
//!   [`meridian_client::Core`] over a [`meridian_process::client::ClientProcess`]
//!   (commit driver, timeouts, abort sending, truncation queue, clock sync),
//!   with a simulated [`meridian_client::Io`]. Workloads are ordinary async
//!   code over [`meridian_client::Session::run_info`] (the real retry
//!   helper) and [`meridian_workload::ops::run_program`], the same code a
//!   real cluster runs.
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
//! symmetric and one-way partitions; node crashes (memory lost, or with
//! `disk` a restart from the write-ahead log and checkpoint) and
//! whole-cluster crashes; client crashes with restarts in a fresh
//! incarnation; client stalls between reading the clock and using it, and
//! node pauses; clock drift anywhere inside the bound. The nodes tolerate
//! them as a real cluster does: leases detect failed nodes and clients,
//! the CM reconfigures, recovery decides the transactions in flight and
//! data recovery refills the replicas lost. Every run ends by the time
//! `time_limit_ns`; one that does not finish by then reports what each
//! client and node waits for ([`SimReport::stuck`]), and one whose crashes
//! took every copy of a region, beyond the fault model, says so
//! ([`SimReport::region_lost`]). The checker judges what completed.
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
//! to its primary and every log truncated. Every executed event feeds the
//! run's digest ([`SimReport::digest`]), so two runs of a seed can be
//! compared step for step.
//!
//! **Layout**, one concern a module, as TigerBeetle's
//! `src/testing/cluster/`: this file holds [`Sim`], its event queue, the
//! run loop and the dispatch of each event to its handler; `config`
//! the parameters and the fault schedule; `network` sending, delivery,
//! partitions and loss; `clocks` the simulated clocks; `executor` the
//! clients' I/O, tasks and the executor that polls them; `nodes` the node
//! slots, their effects, fsyncs, crashes and restarts; `oracles` the time
//! oracle and the served-read checks; `workloads` the transactions the
//! clients draw; `report` the end of a run; `digest` the history digest.

mod clocks;
mod config;
mod digest;
mod executor;
mod network;
mod nodes;
mod oracles;
mod report;
mod scenario;
mod workloads;

pub use config::{Faults, SimConfig, SimWorkload};
pub use report::SimReport;
pub use scenario::{Endpoint, EventView, HoldId, Scenario};

use clocks::ClockDraw;
use executor::{lock, true_now, ClientSlot, World};
use meridian_checker::TxnRecord;
use meridian_config::Configuration;
use meridian_process::node::NodeEvent;
use meridian_wire::{Frame, NodeId};
use network::Addr;
use nodes::NodeSlot;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::{Arc, Mutex};

/// One scheduled event of the simulation, kept in [`Sim`]'s queue.
#[derive(Debug)]
pub(crate) enum Event {
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

/// The simulator.
pub struct Sim {
    pub(crate) cfg: SimConfig,
    /// The configuration the cluster starts in.
    pub(crate) config: Configuration,
    /// The simulator's RNG: network delays and faults, fsync delays, the
    /// fault schedule.
    pub(crate) rng: StdRng,
    pub(crate) world: Arc<Mutex<World>>,
    /// The event queue: (true time, insertion number), the events by
    /// insertion number.
    seq: u64,
    pub(crate) queue: BinaryHeap<Reverse<(u64, u64)>>,
    pub(crate) events: BTreeMap<u64, Event>,
    pub(crate) nodes: Vec<NodeSlot>,
    pub(crate) clients: Vec<ClientSlot>,
    /// Links a partition blocks, with how many partitions block each.
    pub(crate) blocked: BTreeMap<(Addr, Addr), u32>,
    /// The initial load's history record (bank only).
    pub(crate) initial: Option<TxnRecord>,
    /// [`SimReport::messages`], [`SimReport::dropped`],
    /// [`SimReport::crashes`].
    pub(crate) messages: u64,
    pub(crate) dropped: u64,
    pub(crate) crashes: u64,
    /// A crash took the last in-memory copy of a region (memory mode; see
    /// [`Sim::last_copy_crashed`]).
    pub(crate) last_copy_crashed: bool,
    /// The clients' uncertainty (sum, count) and too-old aborts, harvested
    /// once per incarnation (`harvested`: the last incarnation harvested).
    pub(crate) uncertainty: (u128, u64),
    pub(crate) too_old: u64,
    pub(crate) discarded_replicas: u64,
    /// Fenced writes on the replicas let go of ([`SimReport::stale_fill_writes`]).
    pub(crate) discarded_stale_fill_writes: u64,
    /// [`SimReport::copied_recovery_holds`] of crashed node processes.
    pub(crate) crashed_copied_recovery_holds: u64,
    pub(crate) harvested: Vec<u32>,
    /// The coordination service (FaRM §5.2's Zookeeper; a Raft group in
    /// the tokio cluster): one CAS register, answered after a delay.
    pub(crate) coordination: meridian_process::coordination::MemoryService,
    /// Reconfiguration milestones: (true time, node, event).
    pub(crate) node_events: Vec<(u64, u32, NodeEvent)>,
    /// `MERIDIAN_SIM_TRACE` set: print every event to stderr.
    pub(crate) trace: bool,
    /// Global time never goes back (FaRMv2 §4.3), across CM changes and
    /// whole-cluster restarts: the highest master time any node has handed
    /// out (a clock-sync answer), with the node. Every later answer must
    /// be at least that.
    pub(crate) max_master_time: Option<(u64, u32)>,
    /// Violations of that oracle (reported as workload failures).
    pub(crate) time_failures: Vec<String>,
    /// READs and SCANs delivered to a node and not yet answered, by
    /// (node, sender, request id): their `read_ts`.
    pub(crate) reads_in_service: BTreeMap<(u32, u64, u64), u64>,
    /// [`SimReport::latest_reads`].
    pub(crate) latest_reads: u64,
    /// VALIDATEs and COMMIT-BACKUPs sent to be held until their
    /// `write_ts` passed (`TxnRequest::AfterWriteTs`), delivered and not
    /// yet answered, by (node, sender, request id): their `write_ts` and
    /// kind.
    pub(crate) holds_in_service: BTreeMap<(u32, u64, u64), (u64, &'static str)>,
    /// Every executed event, hashed in order ([`SimReport::digest`]).
    pub(crate) digest: digest::Digest,
    /// Events a scenario holds back ([`Scenario::hold`]); none in a
    /// seeded run.
    pub(crate) holds: scenario::Holds,
}

/// What [`Sim::advance`] did.
pub(crate) enum Advance {
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
        let config = cfg.cluster_configuration();
        let clocks = ClockDraw::new(&cfg);
        // Every node's clock is drawn before any client's.
        let nodes = (0..cfg.nodes)
            .map(|n| {
                let clock = clocks.node(&mut rng, n, NodeId(n) == config.cm());
                NodeSlot::new(&cfg, &config, n, clock)
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|c| ClientSlot::new(&cfg, c, clocks.draw(&mut rng, false)))
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

    pub(crate) fn schedule(&mut self, at: u64, e: Event) {
        self.seq += 1;
        self.events.insert(self.seq, e);
        self.queue.push(Reverse((at, self.seq)));
    }

    pub(crate) fn now(&self) -> u64 {
        true_now(&self.world)
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
    /// scenario holds events like it).
    pub(crate) fn advance(&mut self) -> Advance {
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
    pub(crate) fn execute(&mut self, at: u64, ev: Event) -> bool {
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

    /// Execute one event: each kind has its handler in the module of its
    /// concern.
    pub(crate) fn step(&mut self, ev: Event) {
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
            } => self.deliver(to, to_inc, from, from_inc, frame),
            Event::NodeTick(n, inc) => self.node_tick(n, inc),
            Event::ClientTick(c, inc) => self.client_tick(c, inc),
            Event::ClientStart(c) => self.start_client(c),
            Event::CrashNode(n) => self.crash_node(n),
            Event::Fsync(n, inc, seq) => self.fsync(n, inc, seq),
            Event::RestartNode(n) => self.restart_node(n),
            Event::CasReply(n, inc, result, bound) => self.cas_reply(n, inc, result, bound),
            Event::TimeBoundReply(n, inc, bound) => self.time_bound_reply(n, inc, bound),
            Event::CrashClient(c) => self.crash_client(c),
            Event::Block(pairs) => self.block(pairs),
            Event::Heal(pairs) => self.heal(pairs),
            Event::Pause(n, until) => self.pause(n, until),
        }
    }
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
