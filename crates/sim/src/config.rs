//! The parameters of a simulation: [`SimConfig`] with its constructors,
//! the [`Faults`] it injects and the [`SimWorkload`] its clients run; the
//! cluster [`Configuration`] the nodes are given; and the fault schedule
//! (crashes, partitions, pauses) drawn from the seed.

use crate::network::Addr;
use crate::{Event, Sim};
use meridian_config::Configuration;
use meridian_workload::bank::{BankConfig, RegisterConfig};
use meridian_workload::rows::RowsConfig;
use meridian_workload::tatp::TatpConfig;
use meridian_workload::ycsb::{YcsbConfig, YcsbWorkload};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
            // Drawn last: the draws above do not depend on these two.
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
    /// so a run with only client crashes must end clean.
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
    /// the simulator's shell (`AckBeforeFsync`, `LockDurableEarly`,
    /// `InstalledIsAck`, `MasterClockKept`, `ReadsUnwaited`,
    /// `ReadsBeforeInstallDurable`) and of the node processes, which are given
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
    /// fsync, the opt-in early answer, whose known loss is
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

    /// The cluster's configuration: `Configuration::local` with this
    /// run's clock, limits, lease, coordination and durability settings,
    /// scaled to simulated time.
    pub(crate) fn cluster_configuration(&self) -> Configuration {
        let mut config = Configuration::local(
            self.nodes,
            7000,
            self.replication,
            self.regions,
            std::path::Path::new("/nonexistent"),
        );
        config.clock.drift_ppm = self.drift_ppm;
        config.clock.sync_interval_us = self.sync_interval_us;
        config.clock.max_rate_ppm = self.max_rate_ppm;
        // Off: thin clients' lone GETs read at `read_ts` too, as any
        // read-only transaction does.
        config.clock.lock_free_reads = self.single_reads;
        if self.spare_nodes > 0 {
            config.members = (0..self.nodes.saturating_sub(self.spare_nodes)).collect();
        }
        config.clock.rate_window_ms = 500;
        config.limits.gc_window_ms = self.gc_window_ms;
        config.limits.gc_interval_us = 1000;
        config.limits.max_versions_per_object = 8;
        config.limits.rpc_timeout_ms = self.rpc_timeout_ms;
        config.limits.truncate_flush_us = 2000;
        // FaRM's 10 ms lease: failures are detected quickly in simulated
        // time (long delays still cause false suspicions, on purpose).
        config.lease.lease_ms = 10;
        config.lease.probe_timeout_ms = 1;
        // The embedded Raft group runs on simulated time: 1 ms ticks.
        config.coordination.tick_ms = 1;
        // Pinned here, apart from the real cluster's defaults (sized for a
        // VM's stalls), so the swarm's schedules do not move with those: a
        // 10-tick election and a 500 ms time-bound window.
        config.coordination.election_ticks = 10;
        config.clock.time_bound_window_ms = 500;
        config.lease.resend_ms = 1;
        config.durability.mode = if self.faults.disk {
            meridian_config::DurabilityMode::Disk
        } else {
            meridian_config::DurabilityMode::Memory
        };
        // Small, so checkpoints (and restores from them) happen in a run.
        config.durability.checkpoint_records = 200;
        config.durability.report_after_primary_fsync = self.report_after_primary_fsync;
        config
    }
}

impl Sim {
    /// Draw the fault schedule (crashes, partitions, pauses) from the seed.
    pub(crate) fn plan_faults(&mut self) {
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
}
