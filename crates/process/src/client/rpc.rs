//! RPCs of the client process: sending with a deadline, retries and
//! resends, and failure handling (FaRM §4): before the commit decision a
//! failure abandons the transaction and sends ABORT to every LOCK target;
//! after it, the idempotent commit messages are retried.

use super::*;

impl ClientProcess {
    pub(super) fn send_rpc(
        &mut self,
        now: u64,
        to: NodeId,
        req: impl Into<Request>,
        purpose: Purpose,
    ) {
        let timeout_ns = self.limits.rpc_timeout_ms * 1_000_000;
        self.send_rpc_within(now, to, req.into(), purpose, timeout_ns)
    }

    pub(super) fn send_rpc_within(
        &mut self,
        now: u64,
        to: NodeId,
        req: Request,
        purpose: Purpose,
        timeout_ns: u64,
    ) {
        let id = self.next_rpc;
        self.next_rpc += 1;
        // Clock syncs carry no truncations: the master's lease thread
        // answers them without the process (`node::answer_clock_sync`).
        let truncate = match req {
            Request::Clock(_) => Vec::new(),
            _ => self.truncates.remove(&to).unwrap_or_default(),
        };
        let deadline_ns = now + timeout_ns;
        // The low bound rides with truncations (FaRM Table 1).
        let low = (self.low > 0 && (!truncate.is_empty() || purpose == Purpose::Truncate))
            .then_some(meridian_wire::TruncateLow {
                coordinator: self.coordinator,
                local: self.low,
            });
        self.effects.push(Effect::Send {
            to,
            frame: Frame::Request {
                id,
                config: self.config_id,
                truncate: meridian_wire::Truncation {
                    txs: truncate.clone(),
                    low,
                },
                req: req.clone(),
            },
        });
        self.deadlines.insert((deadline_ns, id));
        self.rpcs.insert(
            id,
            Box::new(Rpc {
                to,
                req,
                truncate,
                deadline_ns,
                attempt: 1,
                lag_refusals: 0,
                durable_first: false,
                answered_once: false,
                purpose,
            }),
        );
        if let Purpose::Read(h) | Purpose::Scan(h) | Purpose::Commit(h) = purpose {
            if let Some(t) = self.txns.get_mut(&h) {
                t.rpcs.push(id);
            }
        }
    }

    pub(super) fn remove_rpc(&mut self, id: u64) -> Option<Box<Rpc>> {
        let r = self.rpcs.remove(&id)?;
        self.deadlines.remove(&(r.deadline_ns, id));
        Some(r)
    }

    /// True if `resp` refuses a COMMIT-BACKUP or COMMIT-PRIMARY of a
    /// transaction past its commit decision because the participant has
    /// not yet applied the transaction's configuration (`current < sent`).
    ///
    /// Such a node is a member of that configuration that missed its
    /// NEW-CONFIG so far (a one-way partition): members apply a
    /// configuration on NEW-CONFIG, before it commits (FaRM §5.2 step 5),
    /// so the others already locked and logged the transaction in it. The
    /// configuration cannot commit without this node's NEW-CONFIG-ACK, so
    /// the node either applies it (the resent request then succeeds) or a
    /// later configuration removes it, and that one's recovery (FaRM §5.3)
    /// decides the transaction. Giving up instead (treating the refusal
    /// as a protocol error, so the transaction ends indeterminate) would
    /// leave its LOCK records holding their objects for good once the
    /// configuration commits with the node: nothing recovers a transaction
    /// of the current configuration whose coordinator is alive, and every
    /// later writer of the key would abort. The safety of the commit does
    /// not depend on this: the request is sent again as it was, and the
    /// commit is reported only on a COMMIT-PRIMARY ack.
    pub(super) fn lagging_commit_participant(&self, id: u64, resp: &Response) -> bool {
        let Response::Rejected(Rejection::ConfigMismatch { sent, current }) = resp else {
            return false;
        };
        if current >= sent {
            return false;
        }
        let Some(Purpose::Commit(txn)) = self.rpcs.get(&id).map(|r| r.purpose) else {
            return false;
        };
        self.txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .is_some_and(|e| e.is_decided())
    }

    /// Give up on the COMMIT-PRIMARY acks of reported transaction `tx`:
    /// forget it together with every ack RPC still outstanding for it
    /// (a rejected ack must not leave its siblings behind).
    /// Its records wait for recovery (FaRM §5.3).
    /// `tx`'s records may remain at some node: hold the low bound below it.
    pub(super) fn unresolved(&mut self, tx: TxId) {
        let l = self.unresolved_low.get_or_insert(tx.local);
        *l = (*l).min(tx.local);
    }

    pub(super) fn drop_finishing(&mut self, tx: TxId) {
        self.unresolved(tx);
        self.finishing.remove(&tx);
        let ids: Vec<u64> = self
            .rpcs
            .iter()
            .filter(|(_, r)| r.purpose == Purpose::PostCommit(tx))
            .map(|(id, _)| *id)
            .collect();
        if !ids.is_empty() {
            meridian_bugs::mark!("a forgotten commit's outstanding ack RPCs go with it");
        }
        for id in ids {
            self.remove_rpc(id);
        }
    }

    /// RPC `id` was answered [`meridian_wire::TxnResponse::NotHeld`]: if it is a commit's
    /// request held until its `write_ts` passed, wait `write_ts` out on
    /// this clock and send it again unwrapped (the node did nothing with
    /// it; `clock.writes_wait_at_server`). False for any other RPC, whose
    /// answer then goes its usual way (a protocol error).
    pub(super) fn held_back_at(&mut self, now: u64, id: u64) -> bool {
        let held = self.rpcs.get(&id).is_some_and(|r| {
            matches!(
                (&r.purpose, &r.req),
                (
                    Purpose::Commit(_),
                    Request::Txn(TxnRequest::AfterWriteTs { .. })
                )
            )
        });
        let Some(rpc) = held.then(|| self.remove_rpc(id)).flatten() else {
            return false;
        };
        let (Purpose::Commit(txn), Request::Txn(TxnRequest::AfterWriteTs { write_ts, req })) =
            (rpc.purpose, rpc.req)
        else {
            return false;
        };
        self.stats.write_ts_sent_back += 1;
        self.next_wait += 1;
        let seq = self.next_wait;
        self.held_back.insert(seq, (rpc.to, Request::Txn(*req)));
        self.resend_when_passed(now, txn, seq, write_ts);
        true
    }

    /// Send held-back request `seq` of `txn` once this clock shows
    /// `write_ts` past. Without a usable clock, a VALIDATE's transaction
    /// is abandoned (before its commit point, as a failed GET_TS is), and
    /// a COMMIT-BACKUP looks again after `clock_park_ns` with a sync asked
    /// for: it may not be given up, since the transaction may be committed
    /// by its other backups' records (FaRM §5.3).
    pub(super) fn resend_when_passed(
        &mut self,
        now: u64,
        txn: TxnHandle,
        seq: u64,
        write_ts: Timestamp,
    ) {
        if !self.txns.contains_key(&txn) {
            self.held_back.remove(&seq);
            return;
        }
        let at = match self.clock.passed_at(now, write_ts) {
            Ok(at) if at <= now => {
                if let Some((to, req)) = self.held_back.remove(&seq) {
                    self.send_rpc(now, to, req, Purpose::Commit(txn));
                }
                return;
            }
            Ok(at) => at,
            Err(_) => {
                let validate = matches!(
                    self.held_back.get(&seq),
                    Some((_, Request::Txn(TxnRequest::Validate { .. })))
                );
                if validate {
                    self.held_back.remove(&seq);
                    self.stats.clock_not_ready += 1;
                    self.abandon(now, txn, TxnError::Aborted(AbortReason::ClockUnavailable));
                    return;
                }
                if !self.sync_inflight {
                    self.next_sync_ns = Some(now);
                }
                now.saturating_add(self.clock_park_ns)
            }
        };
        self.add_wait(at, Wait::Resend { txn, seq, write_ts });
    }

    /// Send an idempotent RPC again, or report that the attempts are spent.
    pub(super) fn retry(&mut self, now: u64, rpc: Box<Rpc>) -> bool {
        if rpc.attempt >= self.limits.rpc_attempts {
            return false;
        }
        self.stats.rpc_retries += 1;
        // The lag refusals carry over too: they bound the request's
        // resends, not one resend's, so a target stuck in an older
        // configuration is not resent to forever.
        let (attempt, lag_refusals) = (rpc.attempt + 1, rpc.lag_refusals);
        self.send_rpc(now, rpc.to, rpc.req, rpc.purpose);
        if let Some(r) = self.rpcs.get_mut(&(self.next_rpc - 1)) {
            r.attempt = attempt;
            r.lag_refusals = lag_refusals;
        }
        true
    }

    pub(super) fn rpc_failed(&mut self, now: u64, id: u64, why: &str) {
        let Some(rpc) = self.remove_rpc(id) else {
            return;
        };
        self.stats.rpc_failures += 1;
        // Piggybacked truncations may not have arrived: queue them again
        // (TRUNCATE is idempotent).
        if !rpc.truncate.is_empty() {
            self.truncates
                .entry(rpc.to)
                .or_default()
                .extend(rpc.truncate.iter().copied());
        }
        let err = TxnError::Transport(format!("{} {why}", rpc.to));
        if rpc.purpose != Purpose::GetConfig {
            // The node may be gone: the configuration may have changed.
            self.refresh_config(now, None);
        }
        match rpc.purpose {
            Purpose::Read(txn) | Purpose::Scan(txn) => self.abandon(now, txn, err),
            Purpose::Commit(txn) => {
                let decided = self
                    .txns
                    .get(&txn)
                    .and_then(|t| t.engine.as_ref())
                    .is_some_and(|e| e.is_decided());
                if !decided {
                    return self.abandon(now, txn, err);
                }
                let (tx, write_ts) = self
                    .txns
                    .get(&txn)
                    .map(|t| (Some(t.id), t.engine.as_ref().and_then(|e| e.write_ts())))
                    .unwrap_or((None, None));
                if !self.retry(now, rpc) {
                    self.stats.indeterminate += 1;
                    let tx = tx.unwrap_or(TxId {
                        config: self.config_id,
                        coordinator: self.coordinator,
                        thread: 0,
                        local: 0,
                    });
                    self.report_indeterminate(txn, tx, write_ts, err.to_string());
                }
            }
            Purpose::PostCommit(tx) => {
                if !self.retry(now, rpc) {
                    // Reported already; its records wait for recovery.
                    self.drop_finishing(tx);
                }
            }
            Purpose::Abort(tx) => {
                if !self.retry(now, rpc) {
                    self.unresolved(tx);
                }
            }
            Purpose::Truncate => {
                // The ids were re-queued above and ride on the retry. Give up
                // on a node that never answers, to stay bounded.
                let to = rpc.to;
                if !self.retry(now, rpc) {
                    if let Some(q) = self.truncates.remove(&to) {
                        self.stats.truncations_dropped += q.len() as u64;
                        for tx in &q {
                            self.unresolved(*tx);
                        }
                    }
                }
            }
            Purpose::ClockSync { .. } => {
                self.sync_inflight = false;
                self.refresh_config(now, None);
            }
            Purpose::GetConfig => self.config_inflight = false,
            Purpose::Ping(call) => self.reply(call, CallResult::Failed(err)),
            Purpose::Execute(call) => self.reply(call, CallResult::ExecuteLost(err.to_string())),
            Purpose::Register(call) => {
                if !self.retry(now, rpc) {
                    self.reply(call, CallResult::Failed(err));
                }
            }
        }
    }

    /// Give up on `txn` after an operational failure before the commit
    /// decision: release its locks (ABORT to every LOCK target) and fail the
    /// call in progress. After the decision it is reported unknown instead.
    /// Transaction `txn` (id `tx`) may have committed and its outcome is
    /// unknown here: its id holds the truncation low bound back for
    /// recovery to resolve, and the call fails as indeterminate.
    fn report_indeterminate(
        &mut self,
        txn: TxnHandle,
        tx: TxId,
        write_ts: Option<Timestamp>,
        detail: String,
    ) {
        self.unresolved(tx);
        self.answer(
            txn,
            CallResult::Failed(TxnError::Indeterminate {
                tx,
                write_ts,
                detail,
            }),
            true,
        );
    }

    pub(super) fn abandon(&mut self, now: u64, txn: TxnHandle, err: TxnError) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        let tx = t.id;
        let Some(engine) = t.engine.as_mut() else {
            return self.answer(txn, CallResult::Failed(err), true);
        };
        if !engine.abandon() {
            let write_ts = engine.write_ts();
            self.stats.indeterminate += 1;
            return self.report_indeterminate(txn, tx, write_ts, err.to_string());
        }
        let aborts = engine.abort_messages();
        self.end_txn_keep_call(txn);
        self.send_aborts(now, aborts);
        self.answer(txn, CallResult::Failed(err), true);
    }

    /// Drop the RPCs of `txn` but keep its entry (so its call can be answered).
    pub(super) fn end_txn_keep_call(&mut self, txn: TxnHandle) {
        let ids = match self.txns.get_mut(&txn) {
            Some(t) => std::mem::take(&mut t.rpcs),
            None => return,
        };
        for id in ids {
            let ours = self.rpcs.get(&id).is_some_and(|r| {
                matches!(r.purpose, Purpose::Read(h) | Purpose::Scan(h) | Purpose::Commit(h) if h == txn)
            });
            if ours {
                self.remove_rpc(id);
            }
        }
    }

    pub(super) fn send_aborts(&mut self, now: u64, aborts: Vec<(NodeId, TxnRequest)>) {
        for (n, req) in aborts {
            let tx = match &req {
                TxnRequest::Abort { tx } => *tx,
                _ => continue,
            };
            self.stats.aborts_sent += 1;
            self.send_rpc(now, n, req, Purpose::Abort(tx));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// A node that cannot hold a COMMIT-BACKUP until its `write_ts` passed
    /// answers NotHeld: the coordinator waits `write_ts` out on its own
    /// clock and only then sends the same COMMIT-BACKUP again, unwrapped,
    /// to the same node. The commit goes on when that node acknowledges.
    #[test]
    fn a_commit_backup_sent_back_goes_again_unwrapped_once_write_ts_passed() {
        let mut p = new_client();
        let backups = locks_granted(&mut p);
        let (to, _, held, _) = backups[0].clone();
        let Request::Txn(TxnRequest::AfterWriteTs { write_ts, req }) = held else {
            panic!("not held: {held:?}");
        };
        let e = answer(
            &mut p,
            200_500,
            &backups[..1],
            Response::Txn(TxnResponse::NotHeld),
        );
        assert!(
            sent(&e).is_empty(),
            "sent again before write_ts passed: {e:?}"
        );
        assert_eq!(p.stats().write_ts_sent_back, 1);
        let ready = p
            .clock
            .passed_at(200_500, write_ts)
            .expect("a usable clock");
        assert!(ready > 200_500, "write_ts {write_ts} already past");
        p.tick(ready - 1);
        assert!(sent(&p.drain_effects()).is_empty(), "sent again early");
        p.tick(ready);
        let again = sent(&p.drain_effects());
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].0, to);
        assert_eq!(again[0].2, Request::Txn(*req));
        // Both backups acknowledge: COMMIT-PRIMARY goes to the primaries.
        let mut acks = again.clone();
        acks.push(backups[1].clone());
        let primaries = sent(&answer(
            &mut p,
            ready + 100,
            &acks,
            Response::Txn(TxnResponse::Ack),
        ));
        assert_eq!(primaries.len(), 2, "{primaries:?}");
        assert!(primaries
            .iter()
            .all(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::CommitPrimary { .. }))));
        p.check_invariants();
    }

    /// A VALIDATE sent back (NotHeld) when the coordinator's own clock
    /// cannot show `write_ts` past either (here it lost its samples, as
    /// after following a new clock master) abandons the transaction,
    /// which is before its commit point: ABORT goes to every LOCK target
    /// and the call fails with a retryable `ClockUnavailable` abort,
    /// instead of holding the locks until the clock comes back.
    #[test]
    fn a_validate_sent_back_without_a_usable_clock_aborts() {
        let mut p = new_client();
        open_txn(&mut p);
        // Read b (region 0) and write a (region 1): b is validated.
        p.get(200_100, 5, TxnHandle(1), &[0x00, b'b']);
        let read = sent(&p.drain_effects());
        read_reply(&mut p, 200_150, read[0].0, read[0].1, Some(b"v"));
        p.put(TxnHandle(1), vec![0x80, b'a'], b"y".to_vec())
            .unwrap();
        p.commit(200_300, 6, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        let held = sent(&answer(
            &mut p,
            200_400,
            &locks,
            Response::Txn(TxnResponse::Lock(Ok(()))),
        ));
        assert!(
            matches!(unheld(&held[0].2), Some(TxnRequest::Validate { .. }))
                && matches!(held[0].2, Request::Txn(TxnRequest::AfterWriteTs { .. })),
            "{held:?}"
        );
        p.clock = ClockSync::new(1000);
        let e = answer(&mut p, 200_500, &held, Response::Txn(TxnResponse::NotHeld));
        let aborts: Vec<NodeId> = sent(&e)
            .into_iter()
            .filter(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Abort { .. })))
            .map(|(n, ..)| n)
            .collect();
        assert_eq!(aborts, vec![locks[0].0], "{e:?}");
        assert!(
            matches!(
                replies(&e)[..],
                [(
                    6,
                    CallResult::Failed(TxnError::Aborted(AbortReason::ClockUnavailable))
                )]
            ),
            "{e:?}"
        );
        p.check_invariants();
    }

    /// A LOCK that times out must not leave the other
    /// LOCK target locked: ABORT goes to every LOCK target.
    #[test]
    fn a_lock_timeout_sends_abort_to_every_lock_target() {
        let mut p = new_client();
        let locks = locking(&mut p);
        answer(
            &mut p,
            200_400,
            &locks[..1],
            Response::Txn(TxnResponse::Lock(Ok(()))),
        );
        p.tick(5_000_000);
        let e = p.drain_effects();
        let mut aborted: Vec<NodeId> = sent(&e)
            .into_iter()
            .filter(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Abort { .. })))
            .map(|(n, ..)| n)
            .collect();
        aborted.sort();
        let mut targets: Vec<NodeId> = locks.iter().map(|(n, ..)| *n).collect();
        targets.sort();
        assert_eq!(aborted, targets, "ABORT to every LOCK target");
        assert!(matches!(
            replies(&e)[..],
            [(2, CallResult::Failed(TxnError::Transport { .. }))]
        ));
        p.check_invariants();
    }
}
