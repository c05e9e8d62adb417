//! # Deterministic simulator
//!
//! **Problem.** Concurrency bugs in a commit protocol show up under rare
//! message orders and clock skews. We need to explore many of them and, when
//! one fails, replay it exactly.
//!
//! **Design** (after FoundationDB's and TigerBeetle's simulators). Every
//! engine of a real cluster (participants, the clock master, clients'
//! clock sync and coordinators) runs on one thread, driven by a single event
//! queue ordered by simulated true time. All randomness comes from one
//! seeded RNG. The network delays each message by a random amount in
//! `[min_delay_ns, max_delay_ns]`, so messages are reordered, also between
//! the same pair of endpoints. Every process has its own clock,
//! `local = offset + true × (1 + drift)`, with drift inside the configured
//! bound relative to the clock master (whose clock is global time). A seed
//! fully determines a run: `run(&SimConfig { seed, .. })` twice gives the
//! same history, and a failing seed is printed so it can be replayed.
//!
//! Clients run checked workloads ([`meridian_workload::bank`]): every value
//! carries a unique write id, the simulator records each transaction's reads
//! and writes into a [`meridian_checker::History`] and the checker searches
//! it for strict-serializability and opacity violations. Engines'
//! `check_invariants` run after every event. At the end the simulator lets
//! truncations drain and checks that every backup holds exactly what its
//! primary holds.
//!
//! Crashes and partitions arrive with the fault-tolerance work; the event
//! queue already carries per-endpoint delivery, so they are new event kinds.

use meridian_checker::{History, Outcome, TxnRecord};
use meridian_config::{Configuration, Limits, RegionMap};
use meridian_time::{ClockSync, SyncSample};
use meridian_txn::{CommitStep, GetStep, Participant, Transaction, TxnError, TxnOptions};
use meridian_wire::{ConfigId, NodeId, Request, Response, Timestamp, TxId, Value};
use meridian_workload::bank::{self, BankConfig, RegisterConfig, WriteIds};
use meridian_workload::ops::{Program, Step};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;

/// Which checked workload the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimWorkload {
    /// Bank transfers and audits.
    Bank(BankConfig),
    /// Contended registers (reads plus blind writes).
    Register(RegisterConfig),
}

/// Parameters of one simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed; determines everything.
    pub seed: u64,
    /// Number of nodes (node 0 is clock master).
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
    /// Longest one-way message delay, ns.
    pub max_delay_ns: u64,
    /// Drift bound, ppm; simulated clocks drift within ±45% of it each.
    pub drift_ppm: u64,
    /// Clock sync period, ns.
    pub sync_interval_ns: u64,
    /// Time-window GC, ms (small, to exercise too-old aborts).
    pub gc_window_ms: u64,
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
            sync_interval_ns: 1_000_000,
            gc_window_ms: 5,
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
}

/// Outcome of one simulation.
#[derive(Debug)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Recorded history.
    pub history: History,
    /// Committed transactions.
    pub committed: u64,
    /// Aborted transactions.
    pub aborted: u64,
    /// Workload invariant failures (e.g. wrong audit totals).
    pub workload_failures: Vec<String>,
    /// Messages delivered.
    pub messages: u64,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Mean uncertainty of the timestamps taken, ns.
    pub mean_uncertainty_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Addr {
    Node(u32),
    Client(u32),
}

#[derive(Debug)]
enum Event {
    Deliver {
        to: Addr,
        from: Addr,
        rpc: u64,
        truncate: Vec<TxId>,
        msg: Msg,
    },
    Sync(u32),
    NodeTick(u32),
    TsReady(u32),
    FlushTruncates(u32),
    Start(u32),
}

#[derive(Debug)]
enum Msg {
    Req(Request),
    Resp(Response),
}

/// A simulated clock: `local = offset + true × (1 + drift_ppm / 1e6)`.
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

#[derive(Debug)]
enum Pending {
    Read { key: Vec<u8> },
    Commit,
    PostCommit(u64),
    Sync { send_local: u64 },
}

struct ClientState {
    clock: SimClock,
    sync: ClockSync,
    ids: WriteIds,
    done: u32,
    txn: Option<Transaction>,
    program: Option<Box<dyn ProgramDyn>>,
    record: Option<TxnRecord>,
    awaiting_ts: Option<(Timestamp, bool)>, // (ts, is_write_ts)
    pending_truncates: BTreeMap<NodeId, Vec<TxId>>,
    /// Transactions whose COMMIT-PRIMARY acks are still arriving.
    finishing: HashMap<u64, Transaction>,
    next_local: u64,
}

trait ProgramDyn: Program {}
impl<T: Program> ProgramDyn for T {}

/// The simulator.
pub struct Sim {
    cfg: SimConfig,
    rng: StdRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: HashMap<usize, Event>,
    next_event: usize,
    nodes: Vec<(Participant, SimClock, ClockSync)>,
    clients: Vec<ClientState>,
    map: Arc<RegionMap>,
    limits: Arc<Limits>,
    pending: HashMap<(u32, u64), Pending>,
    next_rpc: u64,
    history: History,
    committed: u64,
    aborted: u64,
    workload_failures: Vec<String>,
    messages: u64,
    uncertainty_sum: u128,
    uncertainty_n: u64,
}

impl Sim {
    /// Build a simulation from its parameters.
    pub fn new(cfg: SimConfig) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let mut conf = Configuration::local(
            cfg.nodes,
            7000,
            cfg.replication,
            cfg.regions,
            std::path::Path::new("/nonexistent"),
        );
        conf.clock.drift_ppm = cfg.drift_ppm;
        conf.limits.gc_window_ms = cfg.gc_window_ms;
        conf.limits.max_versions_per_object = 8;
        let map = Arc::new(RegionMap::new(&conf));
        let limits = Arc::new(conf.limits.clone());
        let bound_ppb = (cfg.drift_ppm as i64) * 1000 * 45 / 100;
        let clock = |rng: &mut StdRng| SimClock {
            offset_ns: rng.gen_range(0..1_000_000_000),
            drift_ppb: rng.gen_range(-bound_ppb..=bound_ppb),
        };
        let nodes: Vec<_> = (0..cfg.nodes)
            .map(|i| {
                let sync = if i == 0 {
                    ClockSync::master()
                } else {
                    ClockSync::new(cfg.drift_ppm)
                };
                (Participant::new(NodeId(i), &conf), clock(&mut rng), sync)
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|c| ClientState {
                clock: clock(&mut rng),
                sync: ClockSync::new(cfg.drift_ppm),
                ids: WriteIds::new(c as u64 + 1),
                done: 0,
                txn: None,
                program: None,
                record: None,
                awaiting_ts: None,
                pending_truncates: BTreeMap::new(),
                finishing: HashMap::new(),
                next_local: 0,
            })
            .collect();
        let mut sim = Sim {
            cfg,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            next_event: 0,
            nodes,
            clients,
            map,
            limits,
            pending: HashMap::new(),
            next_rpc: 1,
            history: History::default(),
            committed: 0,
            aborted: 0,
            workload_failures: Vec::new(),
            messages: 0,
            uncertainty_sum: 0,
            uncertainty_n: 0,
        };
        sim.load_initial();
        for n in 1..sim.cfg.nodes {
            sim.schedule(0, Event::Sync(1000 + n));
        }
        for n in 0..sim.cfg.nodes {
            sim.schedule(1_000_000, Event::NodeTick(n));
        }
        for c in 0..sim.cfg.clients {
            sim.schedule(0, Event::Sync(c));
            let start = sim.rng.gen_range(0..2_000_000);
            sim.schedule(start + 3_000_000, Event::Start(c));
            sim.schedule(5_000_000, Event::FlushTruncates(c));
        }
        sim
    }

    /// Install the workload's initial rows on every replica at timestamp 1.
    fn load_initial(&mut self) {
        let rows = match self.cfg.workload {
            SimWorkload::Bank(b) => b.population(),
            SimWorkload::Register(_) => Vec::new(),
        };
        let tx = TxId {
            config: ConfigId(1),
            coordinator: 0,
            thread: 0,
            local: 0,
        };
        if !rows.is_empty() {
            self.history.push(TxnRecord {
                process: u64::MAX,
                invoke_ns: 0,
                complete_ns: 0,
                reads: Vec::new(),
                writes: rows
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), bank::write_id(v)?)))
                    .collect(),
                outcome: Outcome::Committed,
                read_ts: Some(0),
                write_ts: Some(1),
            });
        }
        for (i, (k, v)) in rows.into_iter().enumerate() {
            // One transaction per row: a truncated id is finished for good.
            let tx = TxId {
                local: i as u64,
                ..tx
            };
            let r = self.map.region_of(&k).clone();
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
            for (node, _, _) in self.nodes.iter_mut() {
                if node.node() == r.primary {
                    let _ = node.handle(&[], &Request::Lock(lock.clone()));
                    let _ = node.handle(
                        &[],
                        &Request::CommitPrimary {
                            tx,
                            write_ts: Timestamp(1),
                        },
                    );
                    let _ = node.handle(&[tx], &Request::Ping);
                } else if r.backups.contains(&node.node()) {
                    let _ = node.handle(
                        &[],
                        &Request::CommitBackup {
                            record: lock.clone(),
                            write_ts: Timestamp(1),
                        },
                    );
                    let _ = node.handle(&[tx], &Request::Ping);
                }
            }
        }
    }

    fn schedule(&mut self, at: u64, e: Event) {
        let id = self.next_event;
        self.next_event += 1;
        self.seq += 1;
        self.events.insert(id, e);
        self.queue.push(Reverse((at, self.seq, id)));
    }

    fn send(&mut self, from: Addr, to: Addr, rpc: u64, truncate: Vec<TxId>, msg: Msg) {
        let mut d = self
            .rng
            .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns);
        // Every third client is "far" from the clock master: its clock
        // synchronisations take 10x longer, so its uncertainty is much larger
        // than its peers' (the setting of FaRMv2 §7.3's counterexamples).
        let far = |a: Addr| matches!(a, Addr::Client(c) if c < 1000 && c % 3 == 0);
        let is_sync = matches!(
            &msg,
            Msg::Req(Request::ClockSync) | Msg::Resp(Response::MasterTime { .. })
        );
        if is_sync && (far(from) || far(to)) {
            d *= 10;
        }
        self.schedule(
            self.now + d,
            Event::Deliver {
                to,
                from,
                rpc,
                truncate,
                msg,
            },
        );
    }

    fn client_request(&mut self, c: u32, node: NodeId, req: Request, pending: Option<Pending>) {
        let truncate = self.clients[c as usize]
            .pending_truncates
            .remove(&node)
            .unwrap_or_default();
        let rpc = match pending {
            Some(p) => {
                let id = self.next_rpc;
                self.next_rpc += 1;
                self.pending.insert((c, id), p);
                id
            }
            None => 0,
        };
        self.send(
            Addr::Client(c),
            Addr::Node(node.0),
            rpc,
            truncate,
            Msg::Req(req),
        );
    }

    /// Run to completion and return the report.
    pub fn run(mut self) -> SimReport {
        let limit_ns = 60_000_000_000u64;
        while let Some(Reverse((at, _, id))) = self.queue.pop() {
            let Some(ev) = self.events.remove(&id) else {
                continue;
            };
            self.now = at;
            if at > limit_ns {
                panic!(
                    "seed {}: simulation did not finish within {} s of simulated time",
                    self.cfg.seed,
                    limit_ns / 1_000_000_000
                );
            }
            self.step(ev);
            for (p, _, _) in &self.nodes {
                p.check_invariants();
            }
            if self.all_done()
                && self
                    .pending
                    .values()
                    .all(|p| matches!(p, Pending::Sync { .. }))
            {
                break;
            }
        }
        self.drain_and_check_replicas();
        let mean = if self.uncertainty_n == 0 {
            0
        } else {
            (self.uncertainty_sum / self.uncertainty_n as u128) as u64
        };
        SimReport {
            seed: self.cfg.seed,
            history: self.history,
            committed: self.committed,
            aborted: self.aborted,
            workload_failures: self.workload_failures,
            messages: self.messages,
            end_ns: self.now,
            mean_uncertainty_ns: mean,
        }
    }

    fn all_done(&self) -> bool {
        self.clients.iter().all(|c| {
            c.done >= self.cfg.txns_per_client && c.txn.is_none() && c.finishing.is_empty()
        })
    }

    /// Deliver every queued truncation directly and compare replicas.
    fn drain_and_check_replicas(&mut self) {
        // Deliver the one-way messages (TRUNCATE, ABORT) still in flight.
        while let Some(Reverse((at, _, id))) = self.queue.pop() {
            let Some(ev) = self.events.remove(&id) else {
                continue;
            };
            if let Event::Deliver {
                to: Addr::Node(n),
                rpc: 0,
                truncate,
                msg: Msg::Req(req),
                ..
            } = ev
            {
                self.now = at;
                let _ = self.nodes[n as usize].0.handle(&truncate, &req);
            }
        }
        let mut all: BTreeMap<NodeId, Vec<TxId>> = BTreeMap::new();
        for c in &mut self.clients {
            for (n, v) in std::mem::take(&mut c.pending_truncates) {
                all.entry(n).or_default().extend(v);
            }
        }
        for (n, txs) in all {
            let _ = self.nodes[n.0 as usize].0.handle(&txs, &Request::Ping);
        }
        for r in self.map.regions() {
            let primary = self.nodes[r.primary.0 as usize].0.store(r.id).map(heads);
            for b in &r.backups {
                let backup = self.nodes[b.0 as usize].0.store(r.id).map(heads);
                assert_eq!(
                    primary, backup,
                    "seed {}: backup {} of {} diverged from its primary",
                    self.cfg.seed, b, r.id
                );
            }
        }
        for (p, _, _) in &self.nodes {
            assert_eq!(
                p.log_len(),
                0,
                "seed {}: {} log not fully truncated",
                self.cfg.seed,
                p.node()
            );
        }
    }

    fn step(&mut self, ev: Event) {
        match ev {
            Event::Deliver {
                to,
                from,
                rpc,
                truncate,
                msg,
            } => {
                self.messages += 1;
                self.deliver(to, from, rpc, truncate, msg)
            }
            Event::Sync(who) => {
                // `who` >= 1000 is node `who - 1000` syncing (its clock feeds GC).
                let clock = if who >= 1000 {
                    self.nodes[(who - 1000) as usize].1
                } else {
                    self.clients[who as usize].clock
                };
                let rpc = self.next_rpc;
                self.next_rpc += 1;
                self.pending.insert(
                    (who, rpc),
                    Pending::Sync {
                        send_local: clock.local(self.now),
                    },
                );
                self.send(
                    Addr::Client(who),
                    Addr::Node(0),
                    rpc,
                    Vec::new(),
                    Msg::Req(Request::ClockSync),
                );
                if !self.all_done() {
                    let next = self.now + self.cfg.sync_interval_ns;
                    self.schedule(next, Event::Sync(who));
                }
            }
            Event::NodeTick(n) => {
                let local = self.nodes[n as usize].1.local(self.now);
                let window = self.cfg.gc_window_ms * 1_000_000;
                if let Ok(iv) = self.nodes[n as usize].2.time(local) {
                    self.nodes[n as usize]
                        .0
                        .gc(Timestamp(iv.lower.saturating_sub(window)));
                }
                if !self.all_done() {
                    self.schedule(self.now + 1_000_000, Event::NodeTick(n));
                }
            }
            Event::Start(c) => self.start_txn(c),
            Event::TsReady(c) => self.ts_ready(c),
            Event::FlushTruncates(c) => {
                let pending = std::mem::take(&mut self.clients[c as usize].pending_truncates);
                for (n, txs) in pending {
                    self.send(
                        Addr::Client(c),
                        Addr::Node(n.0),
                        0,
                        Vec::new(),
                        Msg::Req(Request::Truncate { txs }),
                    );
                }
                if !self.all_done() {
                    self.schedule(self.now + 5_000_000, Event::FlushTruncates(c));
                }
            }
        }
    }

    fn deliver(&mut self, to: Addr, from: Addr, rpc: u64, truncate: Vec<TxId>, msg: Msg) {
        match (to, msg) {
            (Addr::Node(n), Msg::Req(req)) => {
                let resp = match &req {
                    Request::ClockSync => {
                        let local = self.nodes[n as usize].1.local(self.now);
                        Some(Response::MasterTime { master_ns: local })
                    }
                    _ => self.nodes[n as usize].0.handle(&truncate, &req),
                };
                if rpc != 0 {
                    let resp =
                        resp.unwrap_or_else(|| Response::Error("unsupported in simulation".into()));
                    self.send(to, from, rpc, Vec::new(), Msg::Resp(resp));
                }
            }
            (Addr::Client(c), Msg::Resp(resp)) => {
                let from_node = match from {
                    Addr::Node(n) => NodeId(n),
                    Addr::Client(_) => return,
                };
                let Some(p) = self.pending.remove(&(c, rpc)) else {
                    return;
                };
                match p {
                    Pending::Sync { send_local } => {
                        let Response::MasterTime { master_ns } = resp else {
                            return;
                        };
                        let sample = |clock: SimClock, now| SyncSample {
                            send_local_ns: send_local,
                            master_ns,
                            recv_local_ns: clock.local(now),
                        };
                        if c >= 1000 {
                            let n = (c - 1000) as usize;
                            let s = sample(self.nodes[n].1, self.now);
                            if let Err(e) = self.nodes[n].2.on_sync(s) {
                                panic!("seed {}: node clock sync rejected: {e}", self.cfg.seed);
                            }
                        } else {
                            let cl = &mut self.clients[c as usize];
                            let s = sample(cl.clock, self.now);
                            if let Err(e) = cl.sync.on_sync(s) {
                                panic!("seed {}: client clock sync rejected: {e}", self.cfg.seed);
                            }
                            let local = cl.clock.local(self.now);
                            cl.sync.check_invariants(local);
                        }
                    }
                    Pending::Read { key } => self.on_read(c, from_node, key, resp),
                    Pending::Commit => self.on_commit_reply(c, from_node, resp),
                    Pending::PostCommit(local) => {
                        self.on_post_commit_reply(c, local, from_node, resp)
                    }
                }
            }
            _ => {}
        }
    }

    fn start_txn(&mut self, c: u32) {
        let cl = &mut self.clients[c as usize];
        if cl.done >= self.cfg.txns_per_client {
            return;
        }
        let local = cl.clock.local(self.now);
        let ticket = match cl.sync.get_ts(local) {
            Ok(t) => t,
            Err(_) => {
                // Not synchronised yet: try again shortly.
                self.schedule(self.now + 500_000, Event::Start(c));
                return;
            }
        };
        let program: Box<dyn ProgramDyn> = match self.cfg.workload {
            SimWorkload::Bank(b) => Box::new(b.next_txn(&mut cl.ids, &mut self.rng)),
            SimWorkload::Register(r) => Box::new(r.next_txn(&mut cl.ids, &mut self.rng)),
        };
        cl.program = Some(program);
        cl.record = Some(TxnRecord {
            process: c as u64,
            invoke_ns: self.now,
            complete_ns: 0,
            reads: Vec::new(),
            writes: Vec::new(),
            outcome: Outcome::Unknown,
            read_ts: None,
            write_ts: None,
        });
        cl.awaiting_ts = Some((ticket.ts, false));
        self.uncertainty_sum += ticket.uncertainty_ns as u128;
        self.uncertainty_n += 1;
        let at = cl.clock.true_at(ticket.ready_local_ns);
        self.schedule(at.max(self.now), Event::TsReady(c));
    }

    fn ts_ready(&mut self, c: u32) {
        let cl = &mut self.clients[c as usize];
        let Some((ts, is_write)) = cl.awaiting_ts.take() else {
            return;
        };
        // The ticket promised ts is in the past now: check it (Lemma 1).
        let local = cl.clock.local(self.now);
        if let Ok(iv) = cl.sync.time(local) {
            assert!(
                iv.lower > ts.0,
                "seed {}: timestamp {} not in the past after the uncertainty wait",
                self.cfg.seed,
                ts.0
            );
        }
        if is_write {
            let step = match cl.txn.as_mut().map(|t| t.on_write_ts(ts)) {
                Some(Ok(s)) => s,
                Some(Err(e)) => panic!("seed {}: engine error {e}", self.cfg.seed),
                None => return,
            };
            self.commit_step(c, step);
            return;
        }
        let id = TxId {
            config: ConfigId(1),
            coordinator: c as u64 + 1,
            thread: 0,
            local: cl.next_local,
        };
        cl.next_local += 1;
        cl.txn = Some(Transaction::new(
            id,
            ts,
            TxnOptions::default(),
            self.map.clone(),
            self.limits.clone(),
        ));
        if let Some(r) = cl.record.as_mut() {
            r.read_ts = Some(ts.0);
        }
        self.advance(c, None);
    }

    /// Feed the program until it needs a remote read or commits.
    fn advance(&mut self, c: u32, mut last: Option<Option<Value>>) {
        loop {
            let cl = &mut self.clients[c as usize];
            let (Some(program), Some(txn)) = (cl.program.as_mut(), cl.txn.as_mut()) else {
                return;
            };
            match program.next(last.take()) {
                Step::Get(k) => match txn.get(&k) {
                    Ok(GetStep::Local(v)) => last = Some(v),
                    Ok(GetStep::Remote(node, req)) => {
                        self.client_request(c, node, req, Some(Pending::Read { key: k }));
                        return;
                    }
                    Err(e) => return self.finish(c, Err(e)),
                },
                Step::Put(k, v) => {
                    if let Err(e) = txn.put(k, v) {
                        return self.finish(c, Err(e));
                    }
                }
                Step::Abort => {
                    txn.abort();
                    return self.finish(c, Err(TxnError::Aborted(meridian_txn::AbortReason::User)));
                }
                Step::Commit => {
                    let writes: Vec<_> = txn
                        .writes()
                        .iter()
                        .filter_map(|(k, v)| Some((k.clone(), bank::write_id(v.as_ref()?)?)))
                        .collect();
                    if let Some(r) = cl.record.as_mut() {
                        r.writes = writes;
                    }
                    match txn.commit() {
                        Ok(step) => return self.commit_step(c, step),
                        Err(e) => return self.finish(c, Err(e)),
                    }
                }
            }
        }
    }

    fn on_read(&mut self, c: u32, from: NodeId, key: Vec<u8>, resp: Response) {
        let cl = &mut self.clients[c as usize];
        let Some(txn) = cl.txn.as_mut() else { return };
        match txn.on_read_reply(from, &key, resp) {
            Ok(v) => {
                let seen = v.as_ref().and_then(|v| bank::write_id(&v.value));
                if let Some(r) = cl.record.as_mut() {
                    r.reads.push((key, seen));
                }
                self.advance(c, Some(v.map(|v| v.value)));
            }
            Err(e) => self.finish(c, Err(e)),
        }
    }

    fn commit_step(&mut self, c: u32, step: CommitStep) {
        match step {
            CommitStep::Send(msgs) => {
                for (n, req) in msgs {
                    self.client_request(c, n, req, Some(Pending::Commit));
                }
            }
            CommitStep::GetWriteTs => {
                let cl = &mut self.clients[c as usize];
                let local = cl.clock.local(self.now);
                match cl.sync.get_ts(local) {
                    Ok(ticket) => {
                        cl.awaiting_ts = Some((ticket.ts, true));
                        self.uncertainty_sum += ticket.uncertainty_ns as u128;
                        self.uncertainty_n += 1;
                        let at = cl.clock.true_at(ticket.ready_local_ns);
                        self.schedule(at.max(self.now), Event::TsReady(c));
                    }
                    Err(_) => panic!("seed {}: clock lost synchronisation", self.cfg.seed),
                }
            }
            CommitStep::Done(Ok(wts)) => {
                let cl = &mut self.clients[c as usize];
                if let Some(txn) = cl.txn.as_ref() {
                    if !txn.is_read_only() {
                        if let Some(r) = cl.record.as_mut() {
                            r.write_ts = Some(wts.0);
                        }
                    }
                }
                self.finish(c, Ok(()))
            }
            CommitStep::Done(Err(reason)) => self.finish(c, Err(TxnError::Aborted(reason))),
        }
    }

    fn on_commit_reply(&mut self, c: u32, from: NodeId, resp: Response) {
        let cl = &mut self.clients[c as usize];
        let Some(txn) = cl.txn.as_mut() else { return };
        let r = txn.on_reply(from, resp);
        txn.check_invariants();
        match r {
            Ok(Some(step)) => self.commit_step(c, step),
            Ok(None) => {}
            Err(e) => panic!("seed {}: protocol error {e}", self.cfg.seed),
        }
    }

    fn on_post_commit_reply(&mut self, c: u32, k: u64, from: NodeId, resp: Response) {
        let cl = &mut self.clients[c as usize];
        let done = {
            let Some(t) = cl.finishing.get_mut(&k) else {
                return;
            };
            if let Err(e) = t.on_reply(from, resp) {
                panic!("seed {}: protocol error {e}", self.cfg.seed);
            }
            t.is_fully_acknowledged()
        };
        if done {
            if let Some(t) = cl.finishing.remove(&k) {
                for n in t.truncation_targets() {
                    cl.pending_truncates.entry(n).or_default().push(t.id());
                }
            }
        }
    }

    fn finish(&mut self, c: u32, result: Result<(), TxnError>) {
        let now = self.now;
        let cl = &mut self.clients[c as usize];
        let Some(txn) = cl.txn.take() else { return };
        let mut program = cl.program.take();
        let mut record = cl.record.take();
        match &result {
            Ok(()) => {
                self.committed += 1;
                if let Some(r) = record.as_mut() {
                    r.outcome = Outcome::Committed;
                }
                if let Some(p) = program.as_mut() {
                    if let Err(e) = p.on_commit() {
                        self.workload_failures.push(format!("client {c}: {e}"));
                    }
                }
                if !txn.is_read_only() {
                    if txn.is_fully_acknowledged() {
                        for n in txn.truncation_targets() {
                            cl.pending_truncates.entry(n).or_default().push(txn.id());
                        }
                    } else {
                        // Remaining COMMIT-PRIMARY acks arrive later: re-tag them.
                        let local = txn.id().local;
                        for ((client, _), v) in self.pending.iter_mut() {
                            if *client == c && matches!(v, Pending::Commit) {
                                *v = Pending::PostCommit(local);
                            }
                        }
                        cl.finishing.insert(txn.id().local, txn);
                    }
                }
            }
            Err(TxnError::Aborted(_)) => {
                self.aborted += 1;
                if let Some(r) = record.as_mut() {
                    r.outcome = Outcome::Aborted;
                }
                let aborts = txn.abort_messages();
                for (n, req) in aborts {
                    self.client_request(c, n, req, None);
                }
            }
            Err(e) => panic!("seed {}: operational error {e}", self.cfg.seed),
        }
        let cl = &mut self.clients[c as usize];
        if let Some(mut r) = record {
            r.complete_ns = now;
            self.history.push(r);
        }
        cl.done += 1;
        let think = self.rng.gen_range(0..100_000);
        self.schedule(now + think, Event::Start(c));
    }
}

fn heads(s: &meridian_storage_view::Store) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    s.iter()
        .filter_map(|(k, o)| {
            o.versions
                .last()
                .map(|v| (k.clone(), v.ts.0, v.value.clone()))
        })
        .filter(|(_, _, v)| v.is_some())
        .collect()
}

mod meridian_storage_view {
    pub use meridian_storage::RegionStore as Store;
}

/// Run one seed and check its history.
///
/// Returns `Err` with a report (and the seed) on any violation.
pub fn run_and_check(cfg: SimConfig) -> Result<SimReport, String> {
    let seed = cfg.seed;
    let report = Sim::new(cfg).run();
    let check = meridian_checker::check(&report.history);
    if !check.is_ok() || !report.workload_failures.is_empty() {
        return Err(format!(
            "seed {seed} FAILED (replay with this seed)\n{check}\nworkload failures: {:?}",
            report.workload_failures
        ));
    }
    Ok(report)
}
