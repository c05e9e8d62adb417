//! The nodes: their slots (process, disk, log, held effects, clock),
//! delivery of a frame to a node, routing the effects a node emits (log
//! appends and fsyncs, held replies, the coordination service, wake-ups),
//! and the node events: ticks, crashes, restarts, pauses.

use crate::clocks::SimClock;
use crate::executor::lock;
use crate::network::Addr;
use crate::{Event, Sim, SimConfig};
use meridian_config::Configuration;
use meridian_process::coordination::CoordinationService;
use meridian_process::node::{
    answer_clock_sync, held_asks_fsync, held_waits_for_log, split_held, DurableRecord, NodeEffect,
    NodeEvent, NodeProcess, Peer,
};
#[cfg(feature = "sim-bugs")]
use meridian_wire::TxnResponse;
use meridian_wire::{ClockResponse, Frame, NodeId, Response};
use rand::Rng;
use std::collections::{BTreeSet, VecDeque};

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

/// One node: its process (none while crashed) and what the simulator
/// keeps for it across crashes.
pub(crate) struct NodeSlot {
    pub(crate) process: Option<NodeProcess>,
    /// What the node persisted (its coordination replica's state): it
    /// survives crashes, as a disk would.
    disk: Option<Vec<u8>>,
    /// Disk durability: the last checkpoint (with the last record it
    /// covers) and the write-ahead log after it; they survive crashes.
    /// The checkpoint is kept as the process's snapshot and encoded only
    /// at a restart, as the real shell encodes it on another thread while
    /// the node goes on: a snapshot that changed with the live state
    /// restores a different node.
    pub(crate) checkpoint: Option<(u64, meridian_process::node::NodeSnapshot)>,
    pub(crate) wal: Vec<(u64, meridian_process::node::DurableRecord)>,
    /// Records appended but not yet fsynced: a crash loses them.
    pub(crate) volatile: Vec<(u64, meridian_process::node::DurableRecord)>,
    /// Effects waiting for the log to be durable through their sequence
    /// number ([`split_held`]), in drain order: a crash loses them.
    held: VecDeque<(u64, Vec<NodeEffect>)>,
    /// When the last fsync asked for completes (fsyncs complete in order).
    fsync_at: u64,
    /// The last master clock view the process published (only for
    /// the injected bug `MasterClockKept`).
    kept_clock: Option<meridian_process::lease::MasterClockView>,
    pub(crate) inc: u32,
    pub(crate) clock: SimClock,
    paused_until: u64,
    ticks: BTreeSet<u64>,
}

impl NodeSlot {
    /// The sequence numbers the held effects wait for, in queue order.
    pub(crate) fn held_seqs(&self) -> Vec<u64> {
        self.held.iter().map(|(s, _)| *s).collect()
    }

    /// Node `n` at the start of a run: a member of `config`, or a spare
    /// outside it that joins.
    pub(crate) fn new(cfg: &SimConfig, config: &Configuration, n: u32, clock: SimClock) -> Self {
        NodeSlot {
            process: with_bugs(
                cfg,
                if config.is_member(NodeId(n)) {
                    NodeProcess::new(node_config(cfg, config), NodeId(n), 1).ok()
                } else {
                    // A spare: outside the configuration, it joins.
                    NodeProcess::restarted(node_config(cfg, config), NodeId(n), 1).ok()
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
    }
}

impl Sim {
    /// Carry out node `n`'s effects as the tokio shell does: the log
    /// effects first (records go to the un-fsynced tail of the log, and a
    /// simulated fsync makes them durable after a delay), then what
    /// [`split_held`] frees at once; the rest waits for that fsync. A crash
    /// before it loses both the records and the held effects.
    fn route_node(&mut self, n: u32) {
        #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
        let mut effects = match self.nodes[n as usize].process.as_mut() {
            Some(p) => p.drain_effects(),
            None => return,
        };
        let durable = self.durable_seq(n);
        #[cfg(feature = "sim-bugs")]
        if self
            .cfg
            .bugs
            .on(meridian_bugs::Bug::ReadsBeforeInstallDurable)
        {
            let held_reads = effects.iter().any(
                |e| matches!(e, NodeEffect::HoldReads { through_seq } if *through_seq > durable),
            );
            effects.retain(|e| !matches!(e, NodeEffect::HoldReads { .. }));
            if held_reads {
                self.cfg
                    .bugs
                    .count(meridian_bugs::Bug::ReadsBeforeInstallDurable);
            }
        }
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
        let (mut free, held) = split_held(rest, self.cfg.faults.disk, durable);
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
    /// `InstalledIsAck`, `LockDurableEarly`); returns what stays held.
    #[cfg(feature = "sim-bugs")]
    fn shell_bugs(
        &mut self,
        free: &mut Vec<NodeEffect>,
        mut held: Vec<NodeEffect>,
    ) -> Vec<NodeEffect> {
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
            // A COMMIT-PRIMARY's `Installed` answer goes at once, as its
            // durable ACK, and the real ACK is dropped.
            let early: BTreeSet<(Peer, u64)> = held
                .iter()
                .filter_map(meridian_process::node::installed_reply)
                .collect();
            if !early.is_empty() {
                self.cfg.bugs.count(meridian_bugs::Bug::InstalledIsAck);
                held.retain(|e| {
                    !matches!(e, NodeEffect::Send { to, frame: Frame::Response { id, .. } }
                        if early.contains(&(*to, *id)))
                });
                free.extend(early.into_iter().map(|(to, id)| NodeEffect::Send {
                    to,
                    frame: Frame::Response {
                        id,
                        resp: Response::Txn(TxnResponse::Ack),
                    },
                }));
            }
        }
        if self.cfg.bugs.on(meridian_bugs::Bug::LockDurableEarly) {
            let (early, rest): (Vec<_>, Vec<_>) = held.into_iter().partition(|e| {
                matches!(
                    e,
                    NodeEffect::Send {
                        frame: Frame::Response {
                            resp: Response::Txn(TxnResponse::LockDurable),
                            ..
                        },
                        ..
                    }
                )
            });
            if !early.is_empty() {
                self.cfg.bugs.count(meridian_bugs::Bug::LockDurableEarly);
            }
            free.extend(early);
            held = rest;
        }
        held
    }

    /// The last record of node `n`'s log that is durable (fsynced).
    fn durable_seq(&self, n: u32) -> u64 {
        let slot = &self.nodes[n as usize];
        let logged = slot.wal.last().map_or(0, |(s, _)| *s);
        let checkpointed = slot.checkpoint.as_ref().map_or(0, |(s, _)| *s);
        logged.max(checkpointed)
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

    fn node_effects(&mut self, n: u32, effects: Vec<NodeEffect>) {
        let now = self.now();
        for e in effects {
            match e {
                NodeEffect::Send { to, frame } => {
                    self.check_reply(now, n, to, &frame);
                    self.send_from_node(n, to, frame);
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
                NodeEffect::Event(ev) => self.node_event(now, n, ev),
                // Consumed by `split_held`.
                NodeEffect::HoldReads { .. } => {}
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

    /// Put a frame node `n` sends on the network; a reply to a client
    /// connection of an incarnation that is gone is dropped, as a closed
    /// socket drops it.
    fn send_from_node(&mut self, n: u32, to: Peer, frame: Frame) {
        let to = match to {
            Peer::Node(m) => Addr::Node(m.0),
            Peer::Conn(id) => {
                let (c, inc) = ((id >> 32) as u32, id as u32);
                if (c as usize) >= self.clients.len() || self.clients[c as usize].inc != inc {
                    return;
                }
                Addr::Client(c)
            }
        };
        self.send(Addr::Node(n), to, frame);
    }

    /// Record a reconfiguration milestone of node `n`; a master takeover
    /// ends the time oracle.
    fn node_event(&mut self, now: u64, n: u32, ev: NodeEvent) {
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

    /// Deliver a frame to node `n` (incarnation `to_inc`): held while the
    /// node is paused, dropped while it is down, answered at its lease
    /// desk if it is a CLOCK-SYNC, otherwise handed to the process.
    pub(crate) fn deliver_to_node(
        &mut self,
        now: u64,
        n: u32,
        to_inc: u32,
        from: Addr,
        from_inc: u32,
        frame: Frame,
    ) {
        let to = Addr::Node(n);
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
        if let Some(reply) = answer_clock_sync(&desk, local, &frame) {
            return self.reply_clock_sync(now, n, local, from, from_inc, reply);
        }
        self.note_in_service(n, peer, &frame);
        // Present: checked above, and nothing since crashes a node.
        if let Some(p) = self.nodes[n as usize].process.as_mut() {
            p.on_message(local, peer, frame);
        }
        self.route_node(n);
    }

    /// Send the lease desk's answer to a CLOCK-SYNC node `n` received from
    /// incarnation `from_inc` of `from`.
    fn reply_clock_sync(
        &mut self,
        now: u64,
        n: u32,
        local: u64,
        from: Addr,
        from_inc: u32,
        mut reply: Frame,
    ) {
        let slot = &self.nodes[n as usize];
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
        // The reply goes back to the socket that asked: an asker that
        // restarted since is gone with it, and its successor, whose RPC
        // ids start again, must not take the reply for its own (a
        // long-delayed sync of a previous incarnation, matched to the new
        // incarnation's request of the same id, would put its clock's
        // upper bound below the master's time). The process path already
        // drops replies to a connection of an older incarnation.
        if from_inc != self.inc_of(from) {
            self.dropped += 1;
            return;
        }
        self.send(Addr::Node(n), from, reply);
    }

    /// Node `n`'s (incarnation `inc`) timer fires; a paused node's waits
    /// until the pause ends.
    pub(crate) fn node_tick(&mut self, n: u32, inc: u32) {
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

    /// Node `n` crashes: its process and everything not yet fsynced are
    /// lost; its disk (coordination state, checkpoint, fsynced log) stays.
    pub(crate) fn crash_node(&mut self, n: u32) {
        self.last_copy_crashed |= self.last_copy_crashed(n);
        let slot = &mut self.nodes[n as usize];
        if let Some(p) = slot.process.take() {
            self.crashes += 1;
            self.crashed_copied_recovery_holds += p.participant().stats().copied_recovery_holds;
        }
        // What was not fsynced is gone, and so is what waited for it.
        slot.volatile.clear();
        slot.held.clear();
    }

    /// Node `n`'s (incarnation `inc`) log is durable through `seq`: the
    /// records move to the write-ahead log and the effects held for them
    /// go out.
    pub(crate) fn fsync(&mut self, n: u32, inc: u32, seq: u64) {
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

    /// A crashed node `n` restarts in a new incarnation: from its
    /// checkpoint and write-ahead log with disk durability, empty
    /// otherwise; either way with its coordination state.
    pub(crate) fn restart_node(&mut self, n: u32) {
        let slot = &mut self.nodes[n as usize];
        if slot.process.is_none() {
            slot.inc += 1;
            slot.process = if self.cfg.faults.disk {
                let bytes = slot
                    .checkpoint
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
                NodeProcess::restarted(node_config(&self.cfg, &self.config), NodeId(n), slot.inc)
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

    /// The coordination service answers node `n`'s (incarnation `inc`)
    /// compare-and-swap, with the stored time bound and its CM.
    pub(crate) fn cas_reply(
        &mut self,
        n: u32,
        inc: u32,
        result: Result<(), Box<Configuration>>,
        bound: (u64, NodeId),
    ) {
        self.coordination_reply(n, inc, bound, Some(result));
    }

    /// The coordination service answers node `n`'s (incarnation `inc`)
    /// time-bound raise.
    pub(crate) fn time_bound_reply(&mut self, n: u32, inc: u32, bound: (u64, NodeId)) {
        self.coordination_reply(n, inc, bound, None);
    }

    /// Hand node `n` (incarnation `inc`) the coordination service's stored
    /// time bound and CM, then the result of its compare-and-swap if the
    /// answer is to one.
    fn coordination_reply(
        &mut self,
        n: u32,
        inc: u32,
        (bound_ns, cm): (u64, NodeId),
        cas: Option<Result<(), Box<Configuration>>>,
    ) {
        let now = self.now();
        let slot = &mut self.nodes[n as usize];
        if slot.inc != inc {
            return;
        }
        let local = slot.clock.local(now);
        if let Some(p) = slot.process.as_mut() {
            p.on_time_bound(local, bound_ns, cm);
            if let Some(result) = cas {
                p.on_cas_result(local, result);
            }
            self.route_node(n);
        }
    }

    /// Node `n` processes nothing until `until` (pauses may overlap).
    pub(crate) fn pause(&mut self, n: u32, until: u64) {
        let slot = &mut self.nodes[n as usize];
        slot.paused_until = slot.paused_until.max(until);
    }
}
