//! The oracles that judge a run from outside the processes: the global
//! time oracle (FaRMv2 Lemma 1 at the client and at the server, held
//! writes, single reads, global time never going back) and the oracle for
//! a crash beyond the fault model (the last copy of a region lost).

use crate::clocks::SimClock;
use crate::executor::{lock, ClientLog, World};
use crate::network::peer_key;
use crate::Sim;
use meridian_process::node::Peer;
use meridian_wire::{ClockResponse, Frame, NodeId, Request, Response, TxnRequest, TxnResponse};
use std::sync::Mutex;

/// FaRMv2 Lemma 1 as an oracle: `read_ts` is at least global time (the
/// master's clock) when the transaction was invoked, and in the past by the
/// time it is used: at `now` if `read` (the transaction's reads are done),
/// or, when the coordinator hands it out at once
/// (`clock.reads_wait_at_server`), when each node serves a read at it
/// ([`Sim::check_served_read`]).
pub(crate) fn oracle(
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

impl Sim {
    /// The oracle for "beyond the fault model" in memory mode: true if
    /// crashing node `n` now takes the last copy of a region held in
    /// memory. `n` is a member of its configuration, a replica (complete
    /// or filling) of some region there, and no other replica of that
    /// region is a running member of that configuration or a newer one.
    /// Nodes report a lost region themselves only when they probe
    /// (`NodeEvent::RegionLost`); a configuration of one member whose node
    /// crashes leaves nobody to probe, so without this oracle the run
    /// would end stuck rather than lost. Filling replicas count as copies, so the
    /// oracle errs towards calling a run stuck (which a sweep reports), not
    /// lost. Disk mode never loses a copy to a crash.
    pub(crate) fn last_copy_crashed(&self, n: u32) -> bool {
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

    /// FaRMv2 Lemma 1 at the server: a node serves a read at `read_ts`
    /// only once global time has passed it (the oracle's check, made where
    /// the wait happens with `clock.reads_wait_at_server`).
    pub(crate) fn check_served_read(&mut self, now: u64, node: u32, read_ts: u64) {
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
    pub(crate) fn check_latest_read(&mut self, now: u64, node: u32, version: u64) {
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

    /// The global-time oracle: a master time handed out below one handed
    /// out before (by any node) is a clock-failover bug.
    pub(crate) fn check_master_time(&mut self, now: u64, node: u32, master_ns: u64) {
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

    /// Note a request node `n` takes into service from `peer`, to check
    /// its reply: a READ's or SCAN's `read_ts`, a held VALIDATE's or
    /// COMMIT-BACKUP's `write_ts`; and count single reads.
    pub(crate) fn note_in_service(&mut self, n: u32, peer: Peer, frame: &Frame) {
        if let Frame::Request {
            id,
            req: Request::Txn(TxnRequest::Read { read_ts, .. } | TxnRequest::Scan { read_ts, .. }),
            ..
        } = frame
        {
            self.reads_in_service
                .insert((n, peer_key(peer), *id), read_ts.0);
        }
        if let Frame::Request {
            req: Request::Txn(TxnRequest::ReadLatest { .. }),
            ..
        } = frame
        {
            self.latest_reads += 1;
        }
        if let Frame::Request {
            id,
            req: Request::Txn(TxnRequest::AfterWriteTs { write_ts, req }),
            ..
        } = frame
        {
            let kind = match **req {
                TxnRequest::Validate { .. } => "VALIDATE",
                _ => "COMMIT-BACKUP",
            };
            self.holds_in_service
                .insert((n, peer_key(peer), *id), (write_ts.0, kind));
        }
    }

    /// Check a reply node `n` sends to `to` against the oracles: a master
    /// time, and the answer to a request noted in service.
    pub(crate) fn check_reply(&mut self, now: u64, n: u32, to: Peer, frame: &Frame) {
        if let Frame::Response {
            resp: Response::Clock(ClockResponse::MasterTime { master_ns }),
            ..
        } = frame
        {
            self.check_master_time(now, n, *master_ns);
        }
        if let Frame::Response {
            id,
            resp: Response::Txn(r),
        } = frame
        {
            if let Some((write_ts, kind)) = self.holds_in_service.remove(&(n, peer_key(to), *id)) {
                if matches!(
                    r,
                    TxnResponse::Validate(Ok(())) | TxnResponse::Ack | TxnResponse::Installed
                ) {
                    self.check_held_write(now, n, write_ts, kind);
                }
            }
        }
        if let Frame::Response {
            resp: Response::Txn(TxnResponse::ReadLatest(Ok(l))),
            ..
        } = frame
        {
            self.check_latest_read(now, n, l.version.0);
        }
        if let Frame::Response {
            id,
            resp: Response::Txn(r @ (TxnResponse::Read(_) | TxnResponse::Scan(_))),
        } = frame
        {
            let served = matches!(r, TxnResponse::Read(Ok(_)) | TxnResponse::Scan(Ok(_)));
            if let Some(read_ts) = self.reads_in_service.remove(&(n, peer_key(to), *id)) {
                if served {
                    self.check_served_read(now, n, read_ts);
                }
            }
        }
    }
}
