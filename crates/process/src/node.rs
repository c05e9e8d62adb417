//! # The node process: participant, CM duties, clock, GC, thin-client coordinator (FaRM §3–4, FaRMv2 §4.1)
//!
//! **Problem.** A node answers the transaction protocol for the regions it
//! holds, and also plays roles the runtime used to implement on its own:
//! the clock master (node `cm`) answers clock synchronisations with its
//! clock, every other node synchronises with it; the CM hands out
//! coordinator ids; a timer advances the GC safe point; and thin clients
//! (the CLI, later the Python client) ask a node to coordinate a
//! transaction for them. The simulator must run exactly this code.
//!
//! **Algorithm.** [`NodeProcess`] takes frames from *peers* (the shell's
//! connections, or other nodes) and `tick`s, and emits [`NodeEffect`]s.
//! Requests are dispatched by protocol ([`Request`]'s per-protocol enums):
//! - `Txn` goes to the [`Participant`];
//! - `Clock` is answered by the clock master with its clock;
//! - `Cm` (registration) by the CM;
//! - `Admin` (ping, status) by every node;
//! - `Thin` (`Execute`, a thin client's one-shot transaction) runs on the
//!   node's *embedded coordinator*: a [`ClientProcess`], the same object a
//!   client library runs, whose sends go to other nodes as
//!   [`Peer::Node`] (and to this node itself through an internal loopback)
//!   and whose replies come back as responses from those nodes. A small
//!   synchronous driver here runs the operations in order, commits, and
//!   retries aborts with the client process's back-off, up to
//!   `limits.retry_attempts` times (the policy of `Session::run`). At most
//!   `limits.max_concurrent_executes` run at once; more are refused with
//!   [`ExecuteError::Busy`].
//!
//! Every `Frame::Request` gets exactly one `Frame::Response` to the same
//! peer; malformed or misdirected requests get a typed
//! [`Response::Rejected`], never a panic.
//!
//! **Clock.** The node's clock *is* its embedded coordinator's clock: on
//! the clock master it is the master clock ([`ClientProcess::with_master_clock`]);
//! elsewhere the coordinator synchronises it with the master every
//! `clock.sync_interval_us`. GC raises the safe point to
//! `lower − gc_window_ms` every `limits.gc_interval_us`.
//!
//! **Coordinator ids** (review finding 6). Transaction ids embed the
//! coordinator id, and a reused id is mistaken for a duplicate by a node
//! that still holds its records. Ids are `incarnation << 32 | sequence`,
//! where the shell supplies an *incarnation* that is unique across restarts
//! of this node (the tokio node keeps a counter in its data directory,
//! fsynced before use; the simulator counts restarts). The embedded
//! coordinator of node `n` uses [`embedded_coordinator_id`].
//!
//! **Invariants** ([`NodeProcess::check_invariants`]): the participant's
//! and the embedded coordinator's; executes within their bound, each with
//! at most one call outstanding.

use crate::client::{CallResult, ClientProcess, TxnHandle};
use crate::{CallId, Effect};
use meridian_config::Configuration;
use meridian_txn::{Participant, TxnError, TxnOptions};
use meridian_wire::{
    AdminRequest, AdminResponse, ClientOp, ClientOpResult, ClockRequest, ClockResponse, CmRequest,
    CmResponse, ExecuteError, Executed, Frame, NodeId, NodeStatus, Rejection, Request, Response,
    ThinRequest, ThinResponse, Timestamp,
};
use std::collections::{BTreeMap, VecDeque};

/// Who sent a frame to a node: another node, or one of the shell's
/// connections (clients, the CLI). Replies go back to the same peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// A node: the destination of the embedded coordinator's requests, and
    /// the source of their responses.
    Node(NodeId),
    /// A connection of the shell, by the shell's id.
    Conn(u64),
}

/// What a node process asks its shell to do.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeEffect {
    /// Send `frame` to `to`. Frames to [`Peer::Node`] are the embedded
    /// coordinator's requests (responses to them come back through
    /// [`NodeProcess::on_message`] from that node); frames to
    /// [`Peer::Conn`] answer that connection.
    Send {
        /// Destination.
        to: Peer,
        /// The frame.
        frame: Frame,
    },
    /// Call `tick` at or after this local time.
    Wake {
        /// Local clock deadline, ns.
        at_local_ns: u64,
    },
}

/// The coordinator id of the thin-client coordinator embedded in node
/// `node` during incarnation `incarnation`: top bit set, so it never meets a
/// CM-assigned id.
pub fn embedded_coordinator_id(node: NodeId, incarnation: u32) -> u64 {
    (1u64 << 63) | ((node.0 as u64 & 0x7fff_ffff) << 32) | incarnation as u64
}

/// One thin-client transaction being run by the embedded coordinator.
#[derive(Debug)]
struct Exec {
    /// Who asked, and its request id.
    peer: Peer,
    id: u64,
    ops: Vec<ClientOp>,
    /// Attempt number, from 1.
    attempt: u32,
    /// The open transaction of this attempt.
    txn: Option<TxnHandle>,
    /// Results of `ops[..results.len()]` in this attempt.
    results: Vec<ClientOpResult>,
}

/// One node (see the module essay).
#[derive(Debug)]
pub struct NodeProcess {
    id: NodeId,
    config: Configuration,
    participant: Participant,
    gateway: ClientProcess,
    incarnation: u32,
    next_coordinator_seq: u32,
    next_gc_ns: u64,
    armed_ns: Option<u64>,
    /// Thin-client transactions, by the call id of their current call.
    executes: BTreeMap<CallId, Exec>,
    next_call: CallId,
    /// Frames from this node to itself (embedded coordinator ↔ participant).
    loopback: VecDeque<Frame>,
    requests: u64,
    effects: Vec<NodeEffect>,
}

impl NodeProcess {
    /// Node `id` of `config`, in its `incarnation` (unique across restarts
    /// of this node; see the module essay).
    ///
    /// Errors: [`meridian_config::ConfigError`] if `id` is not a member.
    pub fn new(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        config.node(id)?;
        let coordinator = embedded_coordinator_id(id, incarnation);
        // The back-off jitter seed: fixed by node and incarnation, so a
        // simulated run replays exactly.
        let seed = coordinator.rotate_left(17) ^ 0x6d65_7269_6469_616e;
        let mut gateway = ClientProcess::new(&config, coordinator, seed);
        if config.cm() == id {
            gateway = gateway.with_master_clock();
        }
        Ok(NodeProcess {
            id,
            participant: Participant::new(id, &config),
            gateway,
            incarnation,
            next_coordinator_seq: 1,
            next_gc_ns: 0,
            armed_ns: None,
            executes: BTreeMap::new(),
            next_call: 1,
            loopback: VecDeque::new(),
            requests: 0,
            effects: Vec::new(),
            config,
        })
    }

    /// Node `id` restarted with its memory lost (a new `incarnation`): it
    /// answers, syncs its clock and serves the CM role, but holds no region
    /// replicas, so it can never serve a read from an empty store. Giving it
    /// regions again is reconfiguration and data recovery (FaRM §5.2, §5.4).
    ///
    /// Errors: as [`NodeProcess::new`].
    pub fn restarted(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        let mut p = Self::new(config, id, incarnation)?;
        p.participant = Participant::without_regions(id, &p.config);
        Ok(p)
    }

    /// The node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The incarnation.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The participant engine (read access, for status and checks).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The participant engine (write access, for loading test data).
    pub fn participant_mut(&mut self) -> &mut Participant {
        &mut self.participant
    }

    /// The embedded thin-client coordinator (read access, for checks).
    pub fn gateway(&self) -> &ClientProcess {
        &self.gateway
    }

    /// True for the clock master.
    pub fn is_clock_master(&self) -> bool {
        self.config.cm() == self.id
    }

    /// The clock's interval at `now`, if synchronised.
    pub fn clock_time(&mut self, now: u64) -> Option<meridian_time::Interval> {
        self.gateway.clock_time(now)
    }

    /// Clock synchronisations rejected as inconsistent.
    pub fn clock_rejected(&self) -> u64 {
        self.gateway.stats().clock_rejected
    }

    /// Thin-client transactions running now.
    pub fn executing(&self) -> usize {
        self.executes.len()
    }

    /// Take the effects produced so far, in order.
    pub fn drain_effects(&mut self) -> Vec<NodeEffect> {
        std::mem::take(&mut self.effects)
    }

    fn send(&mut self, to: Peer, frame: Frame) {
        if to == Peer::Node(self.id) {
            self.loopback.push_back(frame);
        } else {
            self.effects.push(NodeEffect::Send { to, frame });
        }
    }

    fn reply(&mut self, to: Peer, id: Option<u64>, resp: Response) {
        if let Some(id) = id {
            self.send(to, Frame::Response { id, resp });
        }
    }

    /// A frame from `from`.
    pub fn on_message(&mut self, now: u64, from: Peer, frame: Frame) {
        self.handle(now, from, frame);
        self.pump(now);
    }

    fn handle(&mut self, now: u64, from: Peer, frame: Frame) {
        let (id, truncate, req) = match frame {
            Frame::Request { id, truncate, req } => (Some(id), truncate, req),
            Frame::OneWay { truncate, req } => (None, truncate, req),
            Frame::Response { id, resp } => {
                // Responses are for the embedded coordinator's requests.
                if let Peer::Node(n) = from {
                    self.gateway
                        .on_message(now, n, Frame::Response { id, resp });
                }
                return;
            }
        };
        self.requests += 1;
        // Piggybacked TRUNCATEs ride on frames of any protocol.
        self.participant.truncate_piggybacked(&truncate);
        let resp = match req {
            Request::Txn(r) => self.participant.handle(&[], &r),
            Request::Clock(ClockRequest::Sync) => {
                if self.is_clock_master() {
                    ClockResponse::MasterTime { master_ns: now }.into()
                } else {
                    self.wrong_role("the clock master")
                }
            }
            Request::Cm(CmRequest::RegisterClient) => self.register_client(),
            Request::Admin(AdminRequest::Ping) => AdminResponse::Pong.into(),
            Request::Lease(_) | Request::Reconfig(_) => return,
            Request::Admin(AdminRequest::Status) => self.status(now),
            Request::Thin(ThinRequest::Execute { ops }) => match id {
                Some(id) => return self.start_execute(now, from, id, ops),
                None => return,
            },
        };
        self.reply(from, id, resp)
    }

    fn wrong_role(&self, role: &str) -> Response {
        Response::Rejected(Rejection::WrongRole(format!(
            "{} is not {role} (that is {})",
            self.id,
            self.config.cm()
        )))
    }

    fn register_client(&mut self) -> Response {
        if self.config.cm() != self.id {
            return self.wrong_role("the CM");
        }
        if self.next_coordinator_seq == u32::MAX {
            return Response::Error("coordinator ids of this CM incarnation exhausted".into());
        }
        let coordinator = ((self.incarnation as u64) << 32) | self.next_coordinator_seq as u64;
        match self.config.to_toml() {
            Ok(config_toml) => {
                self.next_coordinator_seq += 1;
                CmResponse::Registered {
                    coordinator,
                    config_toml,
                }
                .into()
            }
            Err(e) => Response::Error(e.to_string()),
        }
    }

    fn status(&mut self, now: u64) -> Response {
        let uncertainty_ns = self
            .gateway
            .clock_time(now)
            .map(|iv| iv.uncertainty_ns())
            .unwrap_or(u64::MAX);
        let p = &self.participant;
        AdminResponse::Status(NodeStatus {
            node: self.id,
            config: self.config.id(),
            uncertainty_ns,
            syncs: self.gateway.clock_stats().syncs,
            primary_regions: p.primary_regions().to_vec(),
            backup_regions: p.backup_regions().to_vec(),
            objects: p.object_count() as u64,
            log_records: p.log_len() as u64,
            requests: self.requests,
        })
        .into()
    }

    // ----- the embedded coordinator ---------------------------------------

    fn start_execute(&mut self, now: u64, peer: Peer, id: u64, ops: Vec<ClientOp>) {
        let max = self.config.limits.max_concurrent_executes;
        if self.executes.len() >= max {
            let resp = ThinResponse::Executed(Err(ExecuteError::Busy { max })).into();
            return self.reply(peer, Some(id), resp);
        }
        let exec = Exec {
            peer,
            id,
            ops,
            attempt: 1,
            txn: None,
            results: Vec::new(),
        };
        self.begin_attempt(now, exec);
    }

    fn new_call(&mut self, exec: Exec) -> CallId {
        let call = self.next_call;
        self.next_call += 1;
        self.executes.insert(call, exec);
        call
    }

    fn begin_attempt(&mut self, now: u64, mut exec: Exec) {
        exec.txn = None;
        exec.results.clear();
        let read_only = !exec
            .ops
            .iter()
            .any(|op| matches!(op, ClientOp::Put(..) | ClientOp::Delete(_)));
        let call = self.new_call(exec);
        self.gateway.begin(now, call, 0, TxnOptions { read_only });
    }

    /// Issue the next operation of `exec` (buffered writes need no call),
    /// or commit when all are done.
    fn next_op(&mut self, now: u64, mut exec: Exec) {
        let Some(txn) = exec.txn else {
            return self.begin_attempt(now, exec);
        };
        while let Some(op) = exec.ops.get(exec.results.len()) {
            let buffered = match op {
                ClientOp::Put(k, v) => self.gateway.put(txn, k.clone(), v.clone()),
                ClientOp::Delete(k) => self.gateway.delete(txn, k.clone()),
                ClientOp::Get(k) => {
                    let k = k.clone();
                    let call = self.new_call(exec);
                    return self.gateway.get(now, call, txn, &k);
                }
                ClientOp::Scan { start, end, limit } => {
                    let (start, end, limit) = (start.clone(), end.clone(), *limit);
                    let call = self.new_call(exec);
                    return self
                        .gateway
                        .scan(now, call, txn, &start, end.as_deref(), limit);
                }
            };
            match buffered {
                Ok(()) => exec.results.push(ClientOpResult::Done),
                Err(e) => {
                    self.gateway.abort(txn);
                    return self.finish_execute(exec, Err(e));
                }
            }
        }
        let call = self.new_call(exec);
        self.gateway.commit(now, call, txn);
    }

    fn on_call_result(&mut self, now: u64, call: CallId, result: CallResult) {
        let Some(mut exec) = self.executes.remove(&call) else {
            return;
        };
        match result {
            CallResult::Began { txn, .. } => {
                exec.txn = Some(txn);
                self.next_op(now, exec)
            }
            CallResult::Read(v) => {
                exec.results
                    .push(ClientOpResult::Value(v.map(|(_, value)| value)));
                self.next_op(now, exec)
            }
            CallResult::Rows(rows) => {
                exec.results.push(ClientOpResult::Rows(rows));
                self.next_op(now, exec)
            }
            CallResult::Committed(info) => {
                let done = Executed {
                    results: std::mem::take(&mut exec.results),
                    tx: info.tx,
                    read_ts: info.read_ts,
                    write_ts: info.write_ts,
                    attempts: exec.attempt,
                };
                self.finish_execute(exec, Ok(done))
            }
            // Back-off over: the next attempt.
            CallResult::Slept => {
                exec.attempt += 1;
                self.begin_attempt(now, exec)
            }
            CallResult::Failed(e) => {
                if let Some(txn) = exec.txn.take() {
                    self.gateway.abort(txn);
                }
                // Aborts are retried, as `Session::run` does; so is a clock
                // not yet synchronised (a node that just started).
                let retry = e.is_abort() || e == TxnError::ClockUnavailable;
                if retry && exec.attempt < self.config.limits.retry_attempts {
                    let attempt = exec.attempt;
                    let call = self.new_call(exec);
                    self.gateway.backoff(now, call, attempt);
                } else {
                    self.finish_execute(exec, Err(e))
                }
            }
            other => {
                let e = TxnError::Protocol {
                    node: self.id,
                    detail: format!("embedded coordinator answered {other:?}"),
                };
                self.finish_execute(exec, Err(e))
            }
        }
    }

    fn finish_execute(&mut self, exec: Exec, r: Result<Executed, TxnError>) {
        let r = r.map_err(|e| match e {
            TxnError::Aborted(reason) => ExecuteError::Aborted {
                attempts: exec.attempt,
                reason: reason.to_string(),
            },
            TxnError::Indeterminate { tx, .. } => ExecuteError::Indeterminate { tx },
            e @ (TxnError::KeyTooLarge { .. }
            | TxnError::ValueTooLarge { .. }
            | TxnError::TooManyOps { .. }) => ExecuteError::Invalid(e.to_string()),
            e => ExecuteError::Unavailable(e.to_string()),
        });
        self.reply(exec.peer, Some(exec.id), ThinResponse::Executed(r).into());
    }

    /// Move the embedded coordinator's effects and the loopback frames
    /// until both are quiet.
    fn pump(&mut self, now: u64) {
        loop {
            let effects = self.gateway.drain_effects();
            let frame = if effects.is_empty() {
                self.loopback.pop_front()
            } else {
                None
            };
            if effects.is_empty() && frame.is_none() {
                return;
            }
            for e in effects {
                match e {
                    Effect::Send { to, frame } => self.send(Peer::Node(to), frame),
                    Effect::Wake { at_local_ns } => self.arm(now, at_local_ns),
                    Effect::Reply { call, result } => self.on_call_result(now, call, result),
                }
            }
            if let Some(f) = frame {
                self.handle(now, Peer::Node(self.id), f);
            }
        }
    }

    /// Ask for a tick at `at` unless one at or before it is pending.
    fn arm(&mut self, now: u64, at: u64) {
        if self.armed_ns.is_none_or(|a| at < a || a < now) {
            self.armed_ns = Some(at);
            self.effects.push(NodeEffect::Wake { at_local_ns: at });
        }
    }

    /// The link to node `node` broke: the embedded coordinator's RPCs to it
    /// fail now.
    pub fn on_disconnect(&mut self, now: u64, node: NodeId) {
        self.gateway.on_disconnect(now, node);
        self.pump(now);
    }

    /// Time passes: GC, the embedded coordinator's timers and clock sync.
    pub fn tick(&mut self, now: u64) {
        if self.armed_ns.is_some_and(|a| a <= now) {
            self.armed_ns = None;
        }
        if now >= self.next_gc_ns {
            self.next_gc_ns = now + self.config.limits.gc_interval_us.max(1) * 1000;
            let window_ns = self.config.limits.gc_window_ms * 1_000_000;
            if let Some(iv) = self.gateway.clock_time(now) {
                self.participant
                    .gc(Timestamp(iv.lower.saturating_sub(window_ns)));
            }
        }
        self.gateway.tick(now);
        self.pump(now);
        let next_gc = self.next_gc_ns;
        self.arm(now, next_gc);
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        self.participant.check_invariants();
        self.gateway.check_invariants();
        assert!(self.executes.len() <= self.config.limits.max_concurrent_executes);
        assert!(
            self.gateway.open_txns() <= self.executes.len(),
            "an open thin-client transaction without its execute"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Configuration {
        Configuration::local(3, 7000, 3, 6, std::path::Path::new("/nonexistent"))
    }

    fn register(p: &mut NodeProcess) -> u64 {
        p.on_message(
            0,
            Peer::Conn(1),
            Frame::Request {
                id: 1,
                truncate: Default::default(),
                req: Request::Cm(CmRequest::RegisterClient),
            },
        );
        match p.drain_effects().pop() {
            Some(NodeEffect::Send {
                frame:
                    Frame::Response {
                        resp: Response::Cm(CmResponse::Registered { coordinator, .. }),
                        ..
                    },
                ..
            }) => coordinator,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Review finding 6: coordinator ids came from an in-memory counter at
    /// the CM and restarted with it, so a restarted CM handed out ids whose
    /// transactions nodes still held records for.
    #[test]
    fn coordinator_ids_are_unique_across_cm_restarts() {
        let mut seen = std::collections::BTreeSet::new();
        for incarnation in 1..=3 {
            let mut cm = NodeProcess::new(config(), NodeId(0), incarnation).unwrap();
            for _ in 0..5 {
                assert!(seen.insert(register(&mut cm)), "coordinator id reused");
            }
        }
        for n in 0..3 {
            for incarnation in 1..=3 {
                assert!(seen.insert(embedded_coordinator_id(NodeId(n), incarnation)));
            }
        }
    }

    #[test]
    fn non_cm_refuses_registration_and_clock_sync_with_a_typed_error() {
        let mut p = NodeProcess::new(config(), NodeId(1), 1).unwrap();
        for req in [
            Request::Cm(CmRequest::RegisterClient),
            Request::Clock(ClockRequest::Sync),
        ] {
            p.on_message(
                0,
                Peer::Conn(7),
                Frame::Request {
                    id: 9,
                    truncate: Default::default(),
                    req,
                },
            );
            assert!(matches!(
                p.drain_effects().as_slice(),
                [NodeEffect::Send {
                    to: Peer::Conn(7),
                    frame: Frame::Response {
                        id: 9,
                        resp: Response::Rejected(Rejection::WrongRole(_))
                    }
                }]
            ));
        }
    }
}
