//! Replies to the client process's RPCs, routed to their purpose, and the
//! commit driver that carries out each step of the commit protocol
//! (FaRM §4, FaRMv2 §4.2): LOCK, VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY.

use super::*;

impl ClientProcess {
    pub(super) fn on_scan_step(&mut self, now: u64, txn: TxnHandle, step: ScanStep) {
        match step {
            ScanStep::Done(rows) => self.answer(txn, CallResult::Rows(rows), false),
            ScanStep::Send(node, req) => self.send_rpc(now, node, req, Purpose::Scan(txn)),
        }
    }

    pub(super) fn drive_commit(&mut self, now: u64, txn: TxnHandle, step: CommitStep) {
        // Every stage change of a commit comes through here; the report
        // ends the last stage (the engine stays in COMMIT-PRIMARY for its
        // remaining acks).
        if let Some(t) = self.txns.get_mut(&txn) {
            let stage = match (&step, &t.engine) {
                (CommitStep::Done(Ok(_)), _) => Some(CommitStage::Committed),
                (CommitStep::Done(Err(_)), _) => Some(CommitStage::Aborted),
                (_, Some(e)) => Some(e.stage()),
                (_, None) => None,
            };
            if let Some(stage) = stage {
                let (was, since) = t.stage;
                if stage != was {
                    if let Some(ns) = t.stage_ns.get_mut(was.index()) {
                        *ns += now.saturating_sub(since);
                    }
                    t.stage = (stage, now);
                }
            }
        }
        match step {
            CommitStep::Send(msgs) => {
                for (n, req) in msgs {
                    self.send_rpc(now, n, req, Purpose::Commit(txn));
                }
            }
            CommitStep::GetWriteTs => {
                if let Err(e) = self.start_ts_wait(now, txn, true, true) {
                    self.ts_failed(now, txn, true, e);
                }
            }
            CommitStep::Done(Ok(write_ts)) => {
                let Some(t) = self.txns.get_mut(&txn) else {
                    return;
                };
                let Some(engine) = t.engine.take() else {
                    return;
                };
                let info = CommitInfo {
                    tx: engine.id(),
                    read_ts: engine.read_ts(),
                    write_ts,
                    wrote: !engine.is_read_only(),
                };
                // Re-tag the outstanding COMMIT-PRIMARY acks before ending
                // the transaction, so they are collected, not dropped. A
                // resent LOCK still waiting for its answers is done with:
                // COMMIT-PRIMARY went after every `LockDurable`.
                let mut done_with = Vec::new();
                for id in &t.rpcs {
                    if let Some(r) = self.rpcs.get_mut(id) {
                        if r.purpose == Purpose::Commit(txn) {
                            if matches!(r.req, Request::Txn(TxnRequest::CommitPrimary { .. })) {
                                r.purpose = Purpose::PostCommit(info.tx);
                            } else {
                                done_with.push(*id);
                            }
                        }
                    }
                }
                if info.wrote {
                    self.stats.commit_stages_timed += 1;
                    for (sum, ns) in self.stats.commit_stage_ns_sum.iter_mut().zip(t.stage_ns) {
                        *sum += ns;
                    }
                    if engine.is_fully_acknowledged() {
                        self.queue_truncate(info.tx, &engine.truncation_targets());
                    } else {
                        self.finishing.insert(info.tx, Box::new(engine));
                    }
                }
                self.answer(txn, CallResult::Committed(info), true);
                for id in done_with {
                    self.remove_rpc(id);
                }
            }
            CommitStep::Done(Err(reason)) => {
                let aborts = self
                    .txns
                    .get(&txn)
                    .and_then(|t| t.engine.as_ref())
                    .map(|e| e.abort_messages())
                    .unwrap_or_default();
                self.end_txn_keep_call(txn);
                self.send_aborts(now, aborts);
                self.answer(txn, CallResult::Failed(TxnError::Aborted(reason)), true);
            }
        }
    }

    pub(super) fn on_response(&mut self, now: u64, from: NodeId, id: u64, resp: Response) {
        match self.rpcs.get(&id) {
            Some(r) if r.to == from => {}
            _ => return, // late, duplicated, or for a finished purpose
        }
        self.refresh_config_if_refused(now, from, &resp);
        if self.lagging_commit_participant(id, &resp) {
            self.give_back_lag_refusal(id);
            return;
        }
        if matches!(resp, Response::Txn(meridian_wire::TxnResponse::NotHeld))
            && self.held_back_at(now, id)
        {
            return;
        }
        if matches!(resp, Response::Txn(meridian_wire::TxnResponse::Installed)) {
            // The primary's `Ack` follows once its record is durable: the
            // RPC stays for it (and for its timeout), and the engine
            // reports the commit now (`Coordinator::on_reply`).
            return self.on_installed(now, from, id);
        }
        let granted = matches!(
            resp,
            Response::Txn(
                meridian_wire::TxnResponse::Lock(Ok(()))
                    | meridian_wire::TxnResponse::LockedAbove(_)
            )
        );
        if self.map.disk_durable() && granted {
            // Disk durability: the primary's `LockDurable` follows once
            // the LOCK record is durable; the RPC stays for it (and for
            // its timeout), and the engine goes on now. If it came first,
            // the RPC ends here. Frames may come twice or out of order.
            if let Some(r) = self.rpcs.get_mut(&id) {
                if r.answered_once {
                    return; // a duplicate
                }
                r.answered_once = true;
                if !r.durable_first {
                    return self.on_first_answer(now, from, id, resp);
                }
            }
        }
        if matches!(resp, Response::Txn(meridian_wire::TxnResponse::LockDurable)) {
            if let Some(r) = self.rpcs.get_mut(&id) {
                if r.durable_first {
                    return; // a duplicate
                }
                if !r.answered_once {
                    // Ahead of its LOCK-REPLY: the RPC waits for that.
                    r.durable_first = true;
                    return self.on_first_answer(now, from, id, resp);
                }
            }
        }
        let Some(rpc) = self.remove_rpc(id) else {
            return;
        };
        match rpc.purpose {
            Purpose::ClockSync { send_local_ns } => {
                self.on_clock_sync_reply(now, send_local_ns, resp)
            }
            Purpose::GetConfig => {
                self.config_inflight = false;
                if let Response::Cm(CmResponse::Config { config_toml }) = resp {
                    match Configuration::from_toml(&config_toml) {
                        Ok(c) => {
                            self.set_config(now, &c);
                        }
                        Err(_) => self.stats.rpc_failures += 1,
                    }
                }
            }
            Purpose::Ping(call) => self.reply(call, CallResult::Pong),
            Purpose::Execute(call) => match resp {
                Response::Thin(meridian_wire::ThinResponse::Executed(r)) => {
                    self.reply(call, CallResult::Executed(r))
                }
                other => self.reply(call, unexpected(from, "Execute", &other)),
            },
            Purpose::Register(call) => match resp {
                Response::Cm(CmResponse::Registered { coordinator, .. })
                    if self.next_local == 0 =>
                {
                    self.coordinator = coordinator;
                    self.reply(call, CallResult::Registered(coordinator))
                }
                other => self.reply(call, unexpected(from, "registration", &other)),
            },
            Purpose::Abort(_) | Purpose::Truncate => {}
            Purpose::Read(txn) => {
                let key = match self.txns.get(&txn).map(|t| &t.op) {
                    Some(Op::Get { key }) => key.clone(),
                    Some(Op::GetMany { .. }) => {
                        return self.on_get_many_reply(now, txn, from, id, resp)
                    }
                    _ => return,
                };
                let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                    Some(e) => e.on_read_reply(from, &key, resp),
                    None => return,
                };
                match r {
                    Ok(v) => self.answer(
                        txn,
                        CallResult::Read(v.map(|v| (v.version, v.value))),
                        false,
                    ),
                    Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
                    Err(e) => self.abandon(now, txn, e),
                }
            }
            Purpose::Scan(txn) => {
                let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                    Some(e) => e.on_scan_reply(from, resp),
                    None => return,
                };
                match r {
                    Ok(step) => self.on_scan_step(now, txn, step),
                    Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
                    Err(e) => self.abandon(now, txn, e),
                }
            }
            Purpose::Commit(txn) => self.commit_reply(now, txn, from, resp),
            Purpose::PostCommit(tx) => {
                let done = match self.finishing.get_mut(&tx) {
                    Some(e) => {
                        // A bad ack after the report cannot change the
                        // outcome; the records then wait for recovery.
                        if e.on_reply(from, resp).is_err() {
                            self.drop_finishing(tx);
                            return;
                        }
                        e.is_fully_acknowledged()
                    }
                    None => false,
                };
                if done {
                    if let Some(e) = self.finishing.remove(&tx) {
                        self.queue_truncate(tx, &e.truncation_targets());
                    }
                }
            }
        }
        self.flush_full_truncate_queues(now);
    }

    /// A refusal that says the configuration may have changed (a newer
    /// configuration id, not a member, no lease, a recovering region)
    /// sends the client to fetch the configuration, from `from` when the
    /// refusal names a newer one.
    pub(super) fn refresh_config_if_refused(&mut self, now: u64, from: NodeId, resp: &Response) {
        match resp {
            Response::Rejected(Rejection::ConfigMismatch { current, .. })
                if *current > self.config_id =>
            {
                self.refresh_config(now, Some(from))
            }
            Response::Rejected(Rejection::ConfigMismatch { .. } | Rejection::NotMember(_)) => {
                self.refresh_config(now, None)
            }
            r if unavailable(r) => self.refresh_config(now, None),
            _ => {}
        }
    }

    /// A commit participant lagging a configuration behind refused RPC
    /// `id`. Keep the RPC: its timeout sends it again, and the attempt
    /// this refusal cost is given back (the node answered, so it is not
    /// the unreachable node `rpc_attempts` bounds), at most `rpc_attempts`
    /// times: a node that never catches up is removed by a later
    /// configuration, whose recovery decides the transaction, and the
    /// resends must end.
    pub(super) fn give_back_lag_refusal(&mut self, id: u64) {
        let limit = self.limits.rpc_attempts;
        if let Some(r) = self.rpcs.get_mut(&id) {
            if r.lag_refusals < limit {
                meridian_bugs::mark!(
                    "a lagging participant's refusal of a decided commit is resent"
                );
                r.lag_refusals += 1;
                r.attempt = r.attempt.saturating_sub(1);
            }
        }
    }

    /// The clock master's answer to a sync sent at local `send_local_ns`.
    pub(super) fn on_clock_sync_reply(&mut self, now: u64, send_local_ns: u64, resp: Response) {
        self.sync_inflight = false;
        if let Response::Clock(ClockResponse::MasterTime { master_ns }) = resp {
            let sample = SyncSample {
                send_local_ns,
                master_ns,
                recv_local_ns: self.received_at.unwrap_or(now).max(send_local_ns),
            };
            if self.clock.on_sync(sample).is_err() {
                self.stats.clock_rejected += 1;
            } else {
                self.unpark_clock_waits(now);
            }
        } else if let Response::Rejected(Rejection::WrongRole(_)) = resp {
            self.stats.clock_refused += 1;
            // This node is not the clock master: the CM changed. A client
            // whose samples expired starts no transaction, so this is how
            // it learns the new configuration; without it, such a client
            // stays stuck.
            self.refresh_config(now, None);
        }
    }

    /// Truncation queues that reached their bound are flushed at once.
    pub(super) fn flush_full_truncate_queues(&mut self, now: u64) {
        let full: Vec<NodeId> = self
            .truncates
            .iter()
            .filter(|(_, q)| q.len() >= self.limits.max_pending_truncations)
            .map(|(n, _)| *n)
            .collect();
        for n in full {
            self.send_rpc(
                now,
                n,
                Request::Txn(TxnRequest::Truncate { txs: Vec::new() }),
                Purpose::Truncate,
            );
        }
    }

    /// A COMMIT-PRIMARY's first answer, [`meridian_wire::TxnResponse::Installed`]: the
    /// commit is reported if it is the first, the RPC waits on for the
    /// durable `Ack`. After the report (`Purpose::PostCommit`) there is
    /// nothing more to do with it.
    pub(super) fn on_installed(&mut self, now: u64, from: NodeId, id: u64) {
        let installed = Response::Txn(meridian_wire::TxnResponse::Installed);
        self.on_first_answer(now, from, id, installed);
    }

    /// The first of a request's two answers (COMMIT-PRIMARY's `Installed`,
    /// a granted LOCK's reply under disk durability): the engine gets it,
    /// and the RPC stays for the second.
    fn on_first_answer(&mut self, now: u64, from: NodeId, id: u64, resp: Response) {
        if let Some(Purpose::Commit(txn)) = self.rpcs.get(&id).map(|r| r.purpose) {
            self.commit_reply(now, txn, from, resp);
        }
    }

    /// Hand a reply to transaction `txn`'s commit engine and carry out
    /// the step it returns.
    pub(super) fn commit_reply(&mut self, now: u64, txn: TxnHandle, from: NodeId, resp: Response) {
        let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
            Some(e) => {
                let r = e.on_reply(from, resp);
                e.check_invariants();
                r
            }
            None => return,
        };
        match r {
            Ok(Some(step)) => self.drive_commit(now, txn, step),
            Ok(None) => {}
            Err(e) => self.abandon(now, txn, e),
        }
    }
}

/// The failure a call reports when node `node` answered its `what`
/// request with `other`.
fn unexpected(node: NodeId, what: &str, other: &Response) -> CallResult {
    CallResult::Failed(TxnError::Protocol {
        node,
        detail: format!("{what} answered with {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// `clock.writes_wait_at_server` (the default): once every LOCK is
    /// granted, `write_ts` is taken and the COMMIT-BACKUPs (the
    /// transaction validates nothing) leave at once, each wrapped to be
    /// held until `write_ts` passed; nothing waits at the coordinator.
    #[test]
    fn a_write_ts_left_to_the_nodes_rides_on_the_commit_backups() {
        let mut p = new_client();
        let backups = locks_granted(&mut p);
        assert_eq!(backups.len(), 2, "{backups:?}");
        for (_, _, r, _) in &backups {
            let Request::Txn(t @ TxnRequest::AfterWriteTs { req, .. }) = r else {
                panic!("not held: {r:?}");
            };
            assert!(matches!(**req, TxnRequest::CommitBackup { .. }), "{r:?}");
            assert!(t.held_write_ts().is_some(), "malformed: {r:?}");
        }
        assert_eq!(p.stats().write_ts_unwaited, 1);
        assert_eq!(p.stats().ts_count, 0, "no GET_TS wait at the coordinator");
        p.check_invariants();
    }

    /// Disk durability: a primary answers COMMIT-PRIMARY first with
    /// `Installed` (before its fsync), then `Ack` (after). The commit is
    /// reported at `Installed`; the TRUNCATE waits for every `Ack`, since a
    /// backup applies at truncation and the primary's install is not yet
    /// durable.
    #[test]
    fn installed_reports_the_commit_and_the_ack_lets_it_truncate() {
        let mut p = new_client();
        let backups = committing_backups(&mut p);
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        assert!(!primaries.is_empty());
        let e = answer(
            &mut p,
            600_200,
            &primaries,
            Response::Txn(TxnResponse::Installed),
        );
        assert!(
            replies(&e)
                .iter()
                .any(|(_, r)| matches!(r, CallResult::Committed(_))),
            "reported at Installed: {e:?}"
        );
        // Where its time went: LOCK 200.3 → 200.4 µs, COMMIT-BACKUP (sent
        // at once, `write_ts` left to the nodes) → 600.1, COMMIT-PRIMARY
        // → 600.2, the report; the later Ack does not count.
        let st = p.stats();
        assert_eq!(st.commit_stages_timed, 1);
        let stage = |s: CommitStage| st.commit_stage_ns_sum[s.index()];
        assert_eq!(stage(CommitStage::Locking), 100);
        assert_eq!(stage(CommitStage::AwaitWriteTs), 0);
        assert_eq!(stage(CommitStage::Validating), 0);
        assert_eq!(stage(CommitStage::CommittingBackups), 399_700);
        assert_eq!(stage(CommitStage::CommittingPrimaries), 100);
        p.check_invariants();
        // Nothing is truncatable yet: a close flushes no TRUNCATE.
        p.close(600_300, 3);
        let truncations = |e: &Effects| {
            sent(e)
                .iter()
                .filter(|(_, _, r, txs)| {
                    matches!(r, Request::Txn(TxnRequest::Truncate { .. })) || !txs.is_empty()
                })
                .count()
        };
        assert_eq!(
            truncations(&p.drain_effects()),
            0,
            "truncated before the Ack"
        );
        let mut e = answer(&mut p, 600_400, &primaries, Response::Txn(TxnResponse::Ack));
        // Queued, and flushed at the next flush tick (or at once by the close).
        p.tick(5_000_000);
        e.extend(p.drain_effects());
        assert!(truncations(&e) > 0, "every Ack in: the TRUNCATE goes");
        assert_eq!(p.stats().commit_stage_ns_sum, st.commit_stage_ns_sum);
        p.check_invariants();
    }

    /// A COMMIT-PRIMARY target stuck in an older configuration (removed
    /// by a later one, it never learned) refuses every resend with
    /// `ConfigMismatch`. The refusals' given-back attempts are bounded per
    /// request, across its resends: once `rpc_attempts` of them are spent,
    /// the attempts count again and the commit ends indeterminate, for
    /// recovery to decide. A count that started afresh at each resend
    /// would resend every 20 ms forever.
    #[test]
    fn a_lagging_commit_primary_target_is_resent_a_bounded_number_of_times() {
        let mut p = new_client();
        let backups = committing_backups(&mut p);
        let mut pending = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        assert!(pending
            .iter()
            .all(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitPrimary { .. }))));
        let lagging = Response::Rejected(Rejection::ConfigMismatch {
            sent: p.config_id,
            current: ConfigId(p.config_id.0 - 1),
        });
        let targets = pending.len() as u32;
        let (mut now, mut resends, mut outcome) = (600_200, 0u32, None);
        let bound = 4 * p.limits.rpc_attempts * targets + 4;
        while outcome.is_none() && resends <= bound {
            let e = answer(&mut p, now, &pending, lagging.clone());
            outcome = replies(&e).into_iter().next();
            now += 2_000_000;
            p.tick(now);
            let e = p.drain_effects();
            outcome = outcome.or_else(|| replies(&e).into_iter().next());
            pending = sent(&e)
                .into_iter()
                .filter(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitPrimary { .. })))
                .collect();
            resends += pending.len() as u32;
        }
        match outcome {
            Some((_, CallResult::Failed(TxnError::Indeterminate { .. }))) => {}
            other => panic!("after {resends} resends: {other:?}"),
        }
        // Per target: `rpc_attempts` refusals given back, then
        // `rpc_attempts` counted.
        assert!(
            resends <= 2 * p.limits.rpc_attempts * targets,
            "{resends} resends to {targets} targets for rpc_attempts = {}",
            p.limits.rpc_attempts
        );
        p.check_invariants();
    }
}
