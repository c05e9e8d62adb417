//! The clients and the executor that runs them: the [`World`] the
//! simulator shares with its clients' simulated I/O ([`SimIo`]), each
//! client's slot and log ([`ClientLog`]), the client tasks (the recorded
//! workloads, thin clients' `Execute`, TATP and YCSB), and the
//! single-threaded executor that polls them in index order and routes
//! what they send.

use crate::clocks::SimClock;
use crate::network::Addr;
use crate::oracles::oracle;
use crate::workloads::{BenchJob, Gen, WorkTxn};
use crate::{Event, Sim, SimConfig, SimWorkload};
use meridian_checker::{Outcome, TxnRecord};
use meridian_client::{Client, CommitInfo, Core, Io, Session, TxnError, TxnFuture, TxnOptions};
use meridian_client::{ClientOp, ExecuteError, ThinError};
use meridian_process::client::ClientProcess;
use meridian_wire::{Frame, NodeId};
use meridian_workload::bank::WriteIds;
use meridian_workload::ops::{run_program, Ending, Program, Replay};
use meridian_workload::{tatp, ycsb};
use rand::rngs::{SmallRng, StdRng};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

/// What client I/O left for the simulator, in order.
pub(crate) enum Out {
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
pub(crate) struct World {
    pub(crate) now_ns: u64,
    pub(crate) outbox: Vec<Out>,
    /// Global time is the first CM's clock until a clock master takes over
    /// (a CM change or a restart: FaRMv2 §4.3 fast-forward and the stored
    /// time bound move it to the new master's clock plus an offset the
    /// simulator does not model): the time oracle checks until then.
    pub(crate) oracle_until_ns: u64,
    /// `clock.reads_wait_at_server`: a `read_ts` need not be in the past
    /// when the transaction begins, only when a node serves a read at it
    /// (checked at the node's reply, [`Sim::check_served_read`]).
    pub(crate) reads_wait_at_server: bool,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

impl SimIo {
    /// Leave `out` for the simulator, unless this incarnation crashed (a
    /// dead client sends nothing and sets no timer).
    fn push(&self, out: Out) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        lock(&self.world).outbox.push(out);
    }
}

impl Io for SimIo {
    fn now_ns(&self) -> u64 {
        self.clock.local(lock(&self.world).now_ns)
    }
    fn send(&self, to: NodeId, frame: Frame) {
        self.push(Out::Send {
            c: self.c,
            inc: self.inc,
            to,
            frame,
        });
    }
    fn wake_at(&self, _core: std::sync::Weak<Core>, at_local_ns: u64) {
        self.push(Out::Wake {
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

/// What one client records, shared between its task and the simulator
/// (which finalises the attempt in flight when the client crashes).
#[derive(Default)]
pub(crate) struct ClientLog {
    /// Transactions finished (committed or given up), across incarnations.
    pub(crate) done: u32,
    /// The attempt in flight, with its program.
    pub(crate) current: Option<(TxnRecord, WorkTxn)>,
    pub(crate) records: Vec<TxnRecord>,
    pub(crate) failures: Vec<String>,
    /// Invoke time of the next attempt (true ns).
    pub(crate) next_invoke_ns: u64,
    /// TATP and YCSB transactions committed (they are not recorded in the
    /// history).
    pub(crate) unrecorded_committed: u64,
    /// Thin-client transactions committed (recorded in the history).
    pub(crate) thin_committed: u64,
}

impl ClientLog {
    pub(crate) fn finish_current(&mut self, outcome: Outcome, now: u64, write_ts: Option<u64>) {
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

/// What a client task is given: its identity and parameters, its
/// client, and the state it shares with the simulator.
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

pub(crate) fn true_now(world: &Arc<Mutex<World>>) -> u64 {
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
            let committed = record_outcome(&cx, r);
            // Audits retry until they commit, so they are checked under load.
            if committed || !audit {
                lock(&cx.log).done += 1;
                break;
            }
        }
    }
    client.close().await;
}

/// Record the outcome of a recorded transaction's last attempt; true if it
/// committed. A commit is also checked against the time oracle.
fn record_outcome(cx: &TaskCtx, r: Result<((), CommitInfo), TxnError>) -> bool {
    let now = true_now(&cx.world);
    let oracle_until = lock(&cx.world).oracle_until_ns;
    let mut l = lock(&cx.log);
    match r {
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
    }
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

/// TATP or YCSB through the retry helper, with the workload crate's own
/// transaction code (`tatp::execute`, `ycsb::execute`), as `meridian-bench`
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

/// One client: its current incarnation's core and task (none while
/// crashed), and what survives its crashes (log, RNG, write ids).
pub(crate) struct ClientSlot {
    pub(crate) core: Option<Arc<Core>>,
    dead: Arc<AtomicBool>,
    pub(crate) inc: u32,
    pub(crate) clock: SimClock,
    pub(crate) log: Arc<Mutex<ClientLog>>,
    task: Option<(Task, Arc<Flag>)>,
    ticks: BTreeSet<u64>,
    rng: StdRng,
    ids: WriteIds,
    pub(crate) finished: bool,
}

impl ClientSlot {
    /// Client `c` before its first start.
    pub(crate) fn new(cfg: &SimConfig, c: u32, clock: SimClock) -> Self {
        ClientSlot {
            core: None,
            dead: Arc::new(AtomicBool::new(false)),
            inc: 0,
            clock,
            log: Arc::default(),
            task: None,
            ticks: BTreeSet::new(),
            rng: StdRng::seed_from_u64(cfg.seed.wrapping_mul(1000).wrapping_add(c as u64)),
            ids: WriteIds::new(c as u64 + 1),
            finished: false,
        }
    }
}

impl Sim {
    /// Deliver a frame from a node to client `c`'s current incarnation.
    pub(crate) fn deliver_to_client(&mut self, c: u32, from: Addr, frame: Frame) {
        let Addr::Node(from_node) = from else { return };
        let Some(core) = self.clients[c as usize].core.clone() else {
            return;
        };
        self.messages += 1;
        core.on_message(NodeId(from_node), frame);
        core.with(|p, _| p.check_invariants());
    }

    /// Client `c`'s (incarnation `inc`) timer fires.
    pub(crate) fn client_tick(&mut self, c: u32, inc: u32) {
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

    /// Carry out what the clients' I/O left in the outbox (sends and
    /// wake-ups), until it stays empty.
    pub(crate) fn route_client_io(&mut self) {
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
    pub(crate) fn start_client(&mut self, c: u32) {
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
    pub(crate) fn crash_client(&mut self, c: u32) {
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
    pub(crate) fn harvest(&mut self, c: usize) {
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
    pub(crate) fn poll_tasks(&mut self) {
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
}
