//! Serving the transaction protocol (FaRM §4, FaRMv2 §4.1–4.2, §4.7):
//! READ, SCAN and ReadLatest with their holds until `read_ts` has passed,
//! VALIDATE and COMMIT-BACKUP held until `write_ts` has, and the bounded
//! waits of reads and blind LOCKs for another transaction's lock.

use super::{NodeProcess, Peer, Standing};
use meridian_wire::{ConfigId, Conflict, Rejection, Response, Timestamp, TxnRequest, TxnResponse};
use std::collections::BTreeMap;

/// Requests held at this node (FaRMv2 §4.1–4.2 moved to the server, and
/// the lock waits): both kinds share `limits.max_deferred_reads`.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// READs and SCANs held until their `read_ts` has passed on this
    /// node's clock (`clock.reads_wait_at_server`), by the local time they
    /// may be served, then arrival order.
    pub(super) deferred_reads: BTreeMap<(u64, u64), DeferredRead>,
    pub(super) deferred_seq: u64,
    /// READs and SCANs waiting for another transaction's lock to go
    /// (`limits.read_lock_wait_us`), by arrival order, each with the local
    /// time its wait ends.
    pub(super) lock_waits: BTreeMap<u64, (u64, DeferredRead)>,
    /// An input may have released a lock (or changed the configuration):
    /// the lock waits are tried again before the next effects leave.
    pub(super) lock_waits_dirty: bool,
    /// What the `read_ts` wait did ([`NodeProcess::read_hold_stats`]).
    pub(super) read_holds: ReadHoldStats,
}

/// A READ or SCAN waiting for its `read_ts` to pass
/// ([`NodeProcess`] with `clock.reads_wait_at_server`), or for another
/// transaction's lock to go (`limits.read_lock_wait_us`); or a LOCK of one
/// blind write waiting for a lock to go (`limits.blind_lock_wait_us`).
#[derive(Debug)]
pub(super) struct DeferredRead {
    from: Peer,
    id: Option<u64>,
    config: ConfigId,
    req: TxnRequest,
    /// When it arrived, local ns.
    since: u64,
    /// A VALIDATE or COMMIT-BACKUP held until this `write_ts` passed
    /// (`TxnRequest::AfterWriteTs`): checked again when its time comes.
    after: Option<Timestamp>,
}

/// Held reads slower than this are counted apart
/// ([`ReadHoldStats::held_long`]), ns.
pub const READ_HOLD_LONG_NS: u64 = 500_000;

/// What the `read_ts` wait at this node did (`clock.reads_wait_at_server`,
/// FaRMv2 §4.1): counters since the node started, for operators and the
/// bench ([`NodeProcess::read_hold_stats`]). Reads refused for another
/// reason (a configuration mismatch, a lock) are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadHoldStats {
    /// READs and SCANs whose `read_ts` had already passed on arrival.
    pub served_at_once: u64,
    /// READs and SCANs held until this node's clock showed `read_ts` past.
    pub held: u64,
    /// The time they were held, in all, local ns.
    pub held_ns: u64,
    /// Of those, held longer than [`READ_HOLD_LONG_NS`].
    pub held_long: u64,
    /// Refused (`Conflict::Unavailable`, a `read-other` abort): `read_ts`
    /// more than the sample age ahead of this node's lower bound, or
    /// `limits.max_deferred_reads` already held.
    pub refused: u64,
    /// READs and SCANs that met another transaction's lock and waited for
    /// it to go (`limits.read_lock_wait_us`), then were served (answered
    /// with data, not refused).
    #[serde(default)]
    pub lock_waited: u64,
    /// The time those waited, in all, local ns.
    #[serde(default)]
    pub lock_wait_ns: u64,
    /// READs and SCANs whose lock was still held when their wait ran out:
    /// answered `Conflict::Locked` (an early abort, FaRMv2 §4.7).
    #[serde(default)]
    pub lock_wait_expired: u64,
    /// LOCKs of a single blind write that met another transaction's lock
    /// and waited for it to go (`limits.blind_lock_wait_us`), then took it.
    #[serde(default)]
    pub blind_locks_waited: u64,
    /// The time those waited, in all, local ns.
    #[serde(default)]
    pub blind_lock_wait_ns: u64,
    /// Such LOCKs whose key was still locked when their wait ran out:
    /// answered `Conflict::Locked` (the transaction aborts).
    #[serde(default)]
    pub blind_lock_wait_expired: u64,
    /// VALIDATEs and COMMIT-BACKUPs sent to be held until their `write_ts`
    /// passed (`TxnRequest::AfterWriteTs`, `clock.writes_wait_at_server`)
    /// whose `write_ts` had passed on arrival.
    #[serde(default)]
    pub write_ts_served_at_once: u64,
    /// Such requests held until this node's clock showed `write_ts` past
    /// (or until a configuration change, which then refused them).
    #[serde(default)]
    pub write_ts_held: u64,
    /// The time they were held, in all, local ns.
    #[serde(default)]
    pub write_ts_held_ns: u64,
    /// Such requests answered `TxnResponse::NotHeld` (no usable clock, a
    /// `write_ts` further ahead than a clock sample lives, or the hold
    /// bound full): their coordinators waited themselves and sent them
    /// again.
    #[serde(default)]
    pub write_ts_not_held: u64,
}

impl ReadHoldStats {
    /// Add what the counters did between `base` and `now`, two readings
    /// of one node's counters (a bench's measured window).
    pub fn add_window(&mut self, now: &ReadHoldStats, base: &ReadHoldStats) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.served_at_once += d(now.served_at_once, base.served_at_once);
        self.held += d(now.held, base.held);
        self.held_ns += d(now.held_ns, base.held_ns);
        self.held_long += d(now.held_long, base.held_long);
        self.refused += d(now.refused, base.refused);
        self.lock_waited += d(now.lock_waited, base.lock_waited);
        self.lock_wait_ns += d(now.lock_wait_ns, base.lock_wait_ns);
        self.lock_wait_expired += d(now.lock_wait_expired, base.lock_wait_expired);
        self.blind_locks_waited += d(now.blind_locks_waited, base.blind_locks_waited);
        self.blind_lock_wait_ns += d(now.blind_lock_wait_ns, base.blind_lock_wait_ns);
        self.blind_lock_wait_expired +=
            d(now.blind_lock_wait_expired, base.blind_lock_wait_expired);
        self.write_ts_served_at_once +=
            d(now.write_ts_served_at_once, base.write_ts_served_at_once);
        self.write_ts_held += d(now.write_ts_held, base.write_ts_held);
        self.write_ts_held_ns += d(now.write_ts_held_ns, base.write_ts_held_ns);
        self.write_ts_not_held += d(now.write_ts_not_held, base.write_ts_not_held);
    }
}

/// A READ's or SCAN's answer that met another transaction's lock
/// ([`Conflict::Locked`], FaRMv2 §4.7's early abort).
fn met_lock(resp: &Response) -> bool {
    matches!(
        resp,
        Response::Txn(
            TxnResponse::Read(Err(Conflict::Locked))
                | TxnResponse::ReadLatest(Err(Conflict::Locked))
                | TxnResponse::Scan(Err(Conflict::Locked))
                | TxnResponse::Lock(Err(Conflict::Locked))
        )
    )
}

/// A LOCK that may wait for another transaction's lock instead of failing
/// at once (`limits.blind_lock_wait_us`): the LOCK of a transaction whose
/// whole write set is one blind write. One write in one written region
/// means this is the transaction's only LOCK, so while it waits its
/// transaction holds no lock anyone could wait for (no cycle), and a blind
/// write has no version to check, so taking the lock later is exactly
/// what a LOCK sent later would do (`TxnRequest::LockBlind`).
pub(super) fn lock_may_wait(r: &TxnRequest) -> bool {
    matches!(
        r,
        TxnRequest::LockBlind { record, blind }
            if record.writes.len() == 1 && record.regions.len() == 1 && blind[..] == [true]
    )
}

/// The answer to a READ or SCAN (or a LOCK, VALIDATE) that cannot be
/// served now: [`Conflict::Unavailable`], a retryable abort. `None` for
/// other requests.
fn unavailable(r: &TxnRequest) -> Option<Response> {
    let e = Err(Conflict::Unavailable);
    Some(match r {
        TxnRequest::Read { .. } => TxnResponse::Read(Err(Conflict::Unavailable)).into(),
        TxnRequest::ReadLatest { .. } => TxnResponse::ReadLatest(Err(Conflict::Unavailable)).into(),
        TxnRequest::Scan { .. } => TxnResponse::Scan(Err(Conflict::Unavailable)).into(),
        TxnRequest::Lock(_) | TxnRequest::LockBlind { .. } => TxnResponse::Lock(e).into(),
        TxnRequest::Validate { .. } => TxnResponse::Validate(e).into(),
        _ => return None,
    })
}

impl NodeProcess {
    /// A transaction-protocol request sent in configuration `config`.
    pub(super) fn txn_request(&mut self, now: u64, config: ConfigId, r: &TxnRequest) -> Response {
        if self.standing != Standing::Member {
            return Response::Rejected(Rejection::NotMember(format!(
                "{} is not a member of any configuration",
                self.id
            )));
        }
        let mine = self.config.id();
        if config != mine {
            return Response::Rejected(Rejection::ConfigMismatch {
                sent: config,
                current: mine,
            });
        }
        if let Some(c) = r.tx().map(|tx| tx.config) {
            // A transaction commits within the configuration it began in;
            // an older one is recovery's (FaRM §5.3).
            if c != mine {
                return Response::Rejected(Rejection::ConfigMismatch {
                    sent: c,
                    current: mine,
                });
            }
        }
        // Reads, locks and validations need a lease (FaRM §5.1): a node cut
        // off from the CM stops serving them before it can be replaced.
        if !self.may_serve(now) {
            if let Some(resp) = unavailable(r) {
                return resp;
            }
        }
        let resp = self.participant.handle(&[], r);
        self.note_read_reply(r);
        resp
    }

    /// Serve a READ or SCAN whose `read_ts` has passed, or a LOCK that may
    /// wait ([`lock_may_wait`]); it arrived at `since`. A READ or SCAN
    /// that meets another transaction's lock whose holder may still commit
    /// at or below `read_ts` waits for the lock to go, at most
    /// `limits.read_lock_wait_us` from `since`, instead of aborting at once
    /// as FaRMv2 §4.7 does: it is answered as soon as the holder's
    /// COMMIT-PRIMARY, ABORT or recovery releases the lock
    /// ([`NodeProcess::retry_lock_waits`]), served at its `read_ts` then.
    /// Such a LOCK waits the same way, at most `limits.blind_lock_wait_us`.
    ///
    /// Why waiting is as safe as aborting: a read touches no state, so
    /// serving it later is serving a new read at the same `read_ts`, whose
    /// wait for `read_ts` has passed already; its answer is the version at
    /// `read_ts` among those installed then, and any writer still to come
    /// at or below `read_ts` holds a lock it meets again. A failed LOCK
    /// changed nothing either, and a blind one checks no version, so
    /// granting it later is granting a LOCK that came later. The wait
    /// cannot deadlock: a lock holder is committing and waits for nobody's
    /// read (reads precede a transaction's own locks), a waiting LOCK's
    /// transaction holds no lock, and the wait is bounded.
    pub(super) fn serve_or_wait(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        r: TxnRequest,
        since: u64,
    ) {
        #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
        let mut resp = self.txn_request(now, config, &r);
        if let TxnRequest::ReadLatest { region, key } = &r {
            if meridian_bugs::bug!(self.bugs, LatestReadsPastLocks, if met_lock(&resp)) {
                #[cfg(feature = "sim-bugs")]
                {
                    resp = self.participant.read_latest_past_locks(*region, key).into();
                }
                let _ = (region, key);
            }
        }
        let is_lock = r.lock_record().is_some();
        let wait_us = if is_lock {
            self.config.limits.blind_lock_wait_us
        } else {
            self.config.limits.read_lock_wait_us
        };
        let wait_ns = wait_us.saturating_mul(1000);
        let until = since.saturating_add(wait_ns);
        if met_lock(&resp)
            && until > now
            && self.holds.deferred_reads.len() + self.holds.lock_waits.len()
                < self.config.limits.max_deferred_reads
        {
            self.holds.deferred_seq += 1;
            self.holds.lock_waits.insert(
                self.holds.deferred_seq,
                (
                    until,
                    DeferredRead {
                        from,
                        id,
                        config,
                        req: r,
                        since,
                        after: None,
                    },
                ),
            );
            self.arm(now, until);
            return;
        }
        // A read whose wait already ran out (it was held for its read_ts
        // that long) is an expiry; one refused because the bound is full
        // is not counted here.
        if met_lock(&resp) && wait_ns > 0 && until <= now {
            if is_lock {
                self.holds.read_holds.blind_lock_wait_expired += 1;
            } else {
                self.holds.read_holds.lock_wait_expired += 1;
            }
        }
        self.reply(from, id, resp);
    }

    /// Try every READ, SCAN and LOCK waiting for a lock again (a lock may
    /// have gone, or the configuration changed): answer those served now
    /// or whose wait ran out, keep the rest (in arrival order) and ask for
    /// a tick when the next wait runs out. A LOCK whose key another
    /// transaction still holds is kept without being tried, so a wait
    /// journals one failed LOCK at most, not one per retry.
    pub(super) fn retry_lock_waits(&mut self, now: u64) {
        self.holds.lock_waits_dirty = false;
        let waits = std::mem::take(&mut self.holds.lock_waits);
        let mut next: Option<u64> = None;
        for (seq, (until, d)) in waits {
            let lock = d.req.lock_record().map(|(rec, _)| rec);
            if until > now
                && d.config == self.config.id()
                && lock.is_some_and(|rec| self.participant.locked_by_another(rec))
            {
                next = Some(next.map_or(until, |n| n.min(until)));
                self.holds.lock_waits.insert(seq, (until, d));
                continue;
            }
            #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
            let mut resp = self.txn_request(now, d.config, &d.req);
            if let TxnRequest::Read {
                region,
                key,
                read_ts,
            } = &d.req
            {
                if meridian_bugs::bug!(self.bugs, LockWaitsReadPastLocks, if met_lock(&resp)) {
                    #[cfg(feature = "sim-bugs")]
                    {
                        resp = self
                            .participant
                            .read_past_locks(*region, key, *read_ts)
                            .into();
                    }
                    let _ = (region, key, read_ts);
                }
            }
            if met_lock(&resp) {
                if until > now {
                    next = Some(next.map_or(until, |n| n.min(until)));
                    self.holds.lock_waits.insert(seq, (until, d));
                    continue;
                }
                if lock.is_some() {
                    self.holds.read_holds.blind_lock_wait_expired += 1;
                } else {
                    self.holds.read_holds.lock_wait_expired += 1;
                }
            } else if matches!(
                resp,
                Response::Txn(
                    TxnResponse::Read(Ok(_))
                        | TxnResponse::ReadLatest(Ok(_))
                        | TxnResponse::Scan(Ok(_))
                )
            ) {
                // Served (a rejection after a configuration change or a
                // lost lease is not counted as a wait that paid off).
                self.holds.read_holds.lock_waited += 1;
                self.holds.read_holds.lock_wait_ns += now.saturating_sub(d.since);
            } else if matches!(resp, Response::Txn(TxnResponse::Lock(Ok(())))) {
                self.holds.read_holds.blind_locks_waited += 1;
                self.holds.read_holds.blind_lock_wait_ns += now.saturating_sub(d.since);
            }
            self.reply(d.from, d.id, resp);
        }
        if let Some(at) = next {
            self.arm(now, at);
        }
    }

    /// FaRMv2 §4.1's `read_ts` wait, at the server
    /// (`clock.reads_wait_at_server`): a READ or SCAN whose `read_ts` this
    /// node's clock cannot yet show to be past (its lower bound is not
    /// above it) is held until it can, then served (by
    /// [`NodeProcess::tick`]); `Some(r)` to serve now.
    ///
    /// Why this is the guarantee the coordinator's wait gave: a writer
    /// that locks after the read is served takes its `write_ts` from
    /// GET_TS after locking, so above global time then, which is above
    /// `read_ts`; a writer that locked before finds its lock seen by the
    /// read. A node without a usable clock, holding too many reads, or
    /// asked for a `read_ts` further ahead than a clock sample lives
    /// (`clock.max_sample_age_us`: no coordinator's upper bound is)
    /// answers `Unavailable`, a retryable abort.
    pub(super) fn hold_until_read_ts_passed(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        r: TxnRequest,
    ) -> Option<TxnRequest> {
        if let TxnRequest::AfterWriteTs { .. } = r {
            let (write_ts, req) = match (r.held_write_ts(), r) {
                (Some(w), TxnRequest::AfterWriteTs { req, .. }) => (w, *req),
                _ => {
                    self.reply(from, id, Response::Rejected(Rejection::MalformedHold));
                    return None;
                }
            };
            return self.hold_until_write_ts_passed(now, from, id, config, write_ts, req);
        }
        let read_ts = match &r {
            TxnRequest::Read { read_ts, .. } | TxnRequest::Scan { read_ts, .. } => *read_ts,
            _ => return Some(r),
        };
        if !self.config.clock.reads_wait_at_server
            || config != self.config.id()
            || self.standing != Standing::Member
        {
            // Refused (or served) at once by `txn_request`.
            return Some(r);
        }
        let at = match self.passed_at_within_sample_life(now, read_ts) {
            Some(at) if at <= now => {
                self.holds.read_holds.served_at_once += 1;
                return Some(r);
            }
            Some(at) if self.hold_room() => at,
            _ => {
                self.holds.read_holds.refused += 1;
                if let Some(resp) = unavailable(&r) {
                    self.reply(from, id, resp);
                }
                return None;
            }
        };
        let d = DeferredRead {
            from,
            id,
            config,
            req: r,
            since: now,
            after: None,
        };
        self.defer(now, at, d);
        None
    }

    /// Hold `d` until local time `at` ([`NodeProcess::serve_deferred_reads`]).
    fn defer(&mut self, now: u64, at: u64, d: DeferredRead) {
        self.holds.deferred_seq += 1;
        self.holds
            .deferred_reads
            .insert((at, self.holds.deferred_seq), d);
        self.arm(now, at);
    }

    /// FaRMv2 §4.2's `write_ts` wait, at the server
    /// (`clock.writes_wait_at_server`): a VALIDATE or COMMIT-BACKUP sent
    /// in a [`TxnRequest::AfterWriteTs`] is handled only once this node's
    /// clock shows its `write_ts` past (its lower bound above it), held
    /// until then; `Some(req)` to handle now. A malformed one is rejected
    /// by the caller ([`NodeProcess::hold_until_read_ts_passed`]), which
    /// unwraps `write_ts` and the request.
    ///
    /// One that cannot be held (no usable clock, a `write_ts` further
    /// ahead than a clock sample lives, the hold bound full) is answered
    /// [`TxnResponse::NotHeld`] and changes nothing: its coordinator waits
    /// `write_ts` out on its own clock and sends it again unwrapped. It is
    /// not refused: a COMMIT-BACKUP may belong to a transaction that its
    /// other backups' records already commit (FaRM §5.3), and a node whose
    /// clock is out (say, hundreds of ms without an accepted sync) must
    /// not stall commits its clock has no part in.
    fn hold_until_write_ts_passed(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        write_ts: Timestamp,
        req: TxnRequest,
    ) -> Option<TxnRequest> {
        let tx_config = req.tx().map_or(config, |tx| tx.config);
        if config != self.config.id()
            || tx_config != self.config.id()
            || self.standing != Standing::Member
        {
            // Refused at once by `txn_request`.
            return Some(req);
        }
        if meridian_bugs::bug!(self.bugs, WritesUnwaited)
            || meridian_bugs::bug!(
                self.bugs,
                ValidatesUnwaited,
                if matches!(req, TxnRequest::Validate { .. })
            )
        {
            // Served at once, before `write_ts` has passed.
            return Some(req);
        }
        let at = match self.passed_at_within_sample_life(now, write_ts) {
            Some(at) if at <= now => {
                self.holds.read_holds.write_ts_served_at_once += 1;
                return Some(req);
            }
            at => at,
        };
        let Some(at) = at.filter(|_| self.hold_room()) else {
            self.holds.read_holds.write_ts_not_held += 1;
            self.reply(from, id, TxnResponse::NotHeld.into());
            return None;
        };
        let d = DeferredRead {
            from,
            id,
            config,
            req,
            since: now,
            after: Some(write_ts),
        };
        self.defer(now, at, d);
        None
    }

    /// The local time at which this node's clock shows `ts` past, if its
    /// clock can tell and that is within a clock sample's life
    /// (`clock.max_sample_age_us`: no coordinator's upper bound is further
    /// ahead); both holds, of a `read_ts` and of a `write_ts`, use it.
    fn passed_at_within_sample_life(&mut self, now: u64, ts: Timestamp) -> Option<u64> {
        let horizon_ns = self.config.clock.max_sample_age_us * 1000;
        match self.gateway.clock_mut().passed_at(now, ts) {
            Ok(at) if at <= now.saturating_add(horizon_ns) => Some(at),
            _ => None,
        }
    }

    /// Room for one more held request (`limits.max_deferred_reads`,
    /// shared by every kind of hold and lock wait).
    fn hold_room(&self) -> bool {
        self.holds.deferred_reads.len() + self.holds.lock_waits.len()
            < self.config.limits.max_deferred_reads
    }

    /// A held VALIDATE or COMMIT-BACKUP whose time came: handled if this
    /// node's clock shows its `write_ts` past (or its configuration is
    /// gone, which `txn_request` refuses), held again if its clock moved
    /// the time later (within a sample's life of its arrival), and
    /// answered [`TxnResponse::NotHeld`] if the clock lost its samples
    /// meanwhile or the time moved beyond that.
    fn serve_held_write(&mut self, now: u64, write_ts: Timestamp, d: DeferredRead) {
        // Held at most a clock sample's life in all, however often its
        // clock moved the time later (then sent back).
        let horizon_ns = self.config.clock.max_sample_age_us * 1000;
        let at = self
            .passed_at_within_sample_life(now, write_ts)
            .filter(|at| *at <= d.since.saturating_add(horizon_ns));
        if at.is_some_and(|at| at <= now) || d.config != self.config.id() {
            self.holds.read_holds.write_ts_held += 1;
            self.holds.read_holds.write_ts_held_ns += now.saturating_sub(d.since);
            let resp = self.txn_request(now, d.config, &d.req);
            self.installed_first(d.from, d.id, &d.req, &resp);
            self.reply(d.from, d.id, resp);
            return;
        }
        let Some(at) = at else {
            self.holds.read_holds.write_ts_not_held += 1;
            self.reply(d.from, d.id, TxnResponse::NotHeld.into());
            return;
        };
        self.defer(now, at, d);
    }

    /// Serve the held reads whose `read_ts` has passed (in the order they
    /// became servable), and the held VALIDATEs and COMMIT-BACKUPs whose
    /// `write_ts` has.
    pub(super) fn serve_deferred_reads(&mut self, now: u64) {
        while let Some(entry) = self.holds.deferred_reads.first_entry() {
            let (at, _) = *entry.key();
            if at > now {
                self.arm(now, at);
                break;
            }
            let d = entry.remove();
            if let Some(write_ts) = d.after {
                self.serve_held_write(now, write_ts, d);
                continue;
            }
            let held_ns = now.saturating_sub(d.since);
            self.holds.read_holds.held += 1;
            self.holds.read_holds.held_ns += held_ns;
            self.holds.read_holds.held_long += u64::from(held_ns > READ_HOLD_LONG_NS);
            self.serve_or_wait(now, d.from, d.id, d.config, d.req, d.since);
        }
    }

    /// What the `read_ts` wait at this node did since it started
    /// (`clock.reads_wait_at_server`, FaRMv2 §4.1). The node shell writes
    /// it to `stats.jsonl` once a second; `meridian-bench` reports it.
    pub fn read_hold_stats(&self) -> ReadHoldStats {
        self.holds.read_holds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::config;
    use crate::node::NodeEffect;
    use meridian_wire::{Frame, NodeId, Request};

    /// The hold cap of `serve_held_write`: a held VALIDATE is held a clock
    /// sample's life (`clock.max_sample_age_us`) from its arrival in all.
    /// With a steady clock a re-check only moves the time earlier (the best
    /// lower bound only rises), so the cap needs a clock reset: here the
    /// node follows a new master under a far wider drift bound, whose first
    /// sample puts `write_ts` past the cap, though still within a sample's
    /// life of the re-check. The request goes back (`NotHeld`) instead of
    /// being held again.
    #[test]
    fn a_held_request_goes_back_once_a_clock_reset_moves_its_time_past_the_cap() {
        let c = config();
        let horizon_ns = c.clock.max_sample_age_us * 1000;
        let mut p = NodeProcess::new(c, NodeId(1), 1).unwrap();
        let clock = p.gateway.clock_mut();
        assert!(!clock.is_master(), "n1 follows the clock master");
        clock
            .on_sync(meridian_time::SyncSample {
                send_local_ns: 0,
                master_ns: 1_000_000,
                recv_local_ns: 10_000,
            })
            .unwrap();
        let arrival = 100_000;
        // A write_ts the clock shows past 8 ms after the arrival.
        let write_ts = Timestamp(clock.time(arrival + 8_000_000).unwrap().lower);
        let validate = TxnRequest::Validate {
            tx: meridian_wire::TxId {
                config: ConfigId(1),
                coordinator: 7,
                thread: 0,
                local: 1,
            },
            read_ts: Timestamp(1),
            keys: vec![(meridian_wire::RegionId(0), vec![0, 1])],
            ranges: Vec::new(),
        };
        p.on_message(
            arrival,
            Peer::Conn(3),
            Frame::Request {
                id: 5,
                config: ConfigId(1),
                truncate: Default::default(),
                req: Request::Txn(TxnRequest::AfterWriteTs {
                    write_ts,
                    req: Box::new(validate),
                }),
            },
        );
        let wake = p.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Wake { at_local_ns } => Some(at_local_ns),
            NodeEffect::Send { frame, .. } => panic!("answered at once: {frame:?}"),
            _ => None,
        });
        let wake = wake.expect("held until write_ts passed");
        assert!(wake > arrival + 7_000_000 && wake < arrival + horizon_ns);
        // A new master (FaRMv2 §4.3) with a 50 % drift bound: the lower
        // bound now rises at half speed from the new sample.
        let clock = p.gateway.clock_mut();
        let reset_at = arrival + 5_000_000;
        let master_ns = clock.time(reset_at).unwrap().lower;
        clock.follow_new_master(0, 500_000);
        clock
            .on_sync(meridian_time::SyncSample {
                send_local_ns: reset_at,
                master_ns,
                recv_local_ns: reset_at + 10,
            })
            .unwrap();
        let later = clock.passed_at(wake, write_ts).unwrap();
        assert!(
            later > arrival + horizon_ns && later <= wake + horizon_ns,
            "the new estimate passes the cap but not a sample's life of the re-check"
        );
        p.tick(wake);
        let replies: Vec<_> = p
            .drain_effects()
            .into_iter()
            .filter_map(|e| match e {
                NodeEffect::Send {
                    to: Peer::Conn(3),
                    frame: Frame::Response { id, resp },
                } => Some((id, resp)),
                _ => None,
            })
            .collect();
        assert_eq!(replies, vec![(5, Response::Txn(TxnResponse::NotHeld))]);
    }
}
