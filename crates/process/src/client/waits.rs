//! Timestamp waits (FaRMv2 §4.1–4.2): GET_TS for `read_ts` and
//! `write_ts`, the uncertainty waits they end with, and the waits parked
//! until the clock is synchronised.

use super::*;

impl ClientProcess {
    /// GET_TS for `txn` (FaRMv2 Algorithm 1): a [`Wait::Ts`] until the
    /// uncertainty has passed. Without a usable clock sample the
    /// transaction first waits for one ([`Wait::Clock`], once: `park`).
    ///
    /// Errors: [`TxnError::ClockUnavailable`] (counted by cause in
    /// [`ClientStats`]).
    pub(super) fn start_ts_wait(
        &mut self,
        now: u64,
        txn: TxnHandle,
        write: bool,
        park: bool,
    ) -> Result<(), TxnError> {
        let ticket = self.clock.get_ts(now);
        if let Err(ClockError::Expired { .. }) = ticket {
            meridian_bugs::mark!("a client's clock samples expire");
        }
        let ticket = match ticket {
            Ok(t) => t,
            Err(
                ClockError::Expired { .. }
                | ClockError::NotSynchronised
                | ClockError::StaleLocalTime { .. },
            ) if park && !self.clock.is_master() && self.clock_park_ns > 0 => {
                self.stats.clock_parked += 1;
                self.clock_parked += 1;
                self.add_wait(
                    now.saturating_add(self.clock_park_ns),
                    Wait::Clock { txn, write },
                );
                // Ask now if no sync is on its way.
                if !self.sync_inflight {
                    self.next_sync_ns = Some(now);
                }
                return Ok(());
            }
            Err(e) => {
                match e {
                    ClockError::Expired { .. } => self.stats.clock_expired += 1,
                    ClockError::PastTimeBound { .. } => self.stats.clock_past_bound += 1,
                    ClockError::NotSynchronised
                    | ClockError::StaleLocalTime { .. }
                    | ClockError::Inconsistent { .. }
                    | ClockError::Disabled => self.stats.clock_not_ready += 1,
                }
                return Err(TxnError::ClockUnavailable);
            }
        };
        // A `write_ts` is raised to the transaction's floor if need be: above
        // `read_ts` (FaRMv2 needs `write_ts > read_ts`; with
        // `clock.reads_wait_at_server` the coordinator hands `read_ts` out
        // before its clock shows it past, and a tighter sample may have
        // lowered its upper bound since), and above every version a blind
        // LOCK met (`TxnResponse::LockedAbove`), so that each primary
        // installs above its keys' heads. A larger `write_ts` is as safe:
        // its wait below covers it.
        let mut ticket = ticket;
        if write {
            let floor = self
                .txns
                .get(&txn)
                .and_then(|t| t.engine.as_ref())
                .map(|e| e.write_ts_floor());
            if let Some(floor) = floor.filter(|f| *f > ticket.ts) {
                match self.clock.passed_at(now, floor) {
                    Ok(ready) => {
                        ticket.ts = floor;
                        ticket.ready_local_ns = ready;
                    }
                    Err(_) => {
                        self.stats.clock_not_ready += 1;
                        return Err(TxnError::ClockUnavailable);
                    }
                }
            }
        }
        let unwaited = write
            && self.writes_wait_at_server
            && self
                .txns
                .get(&txn)
                .and_then(|t| t.engine.as_ref())
                .is_some_and(|e| e.may_wait_at_server());
        let at = if !write && self.reads_wait_at_server {
            self.stats.read_ts_unwaited += 1;
            now
        } else if unwaited {
            self.stats.write_ts_unwaited += 1;
            self.stats.write_ts_unwaited_uncertainty_ns_sum += ticket.uncertainty_ns;
            now
        } else {
            self.stats.ts_count += 1;
            self.stats.uncertainty_ns_sum += ticket.uncertainty_ns;
            ticket.ready_local_ns
        };
        self.add_wait(
            at,
            Wait::Ts {
                txn,
                ts: ticket.ts,
                write,
                unwaited,
                start_local_ns: now,
            },
        );
        Ok(())
    }

    /// GET_TS failed for `txn`: a Begin fails (nothing was read), a
    /// commit is abandoned before its commit point (its locks released;
    /// retryable, as FaRM does for any failure before it).
    pub(super) fn ts_failed(&mut self, now: u64, txn: TxnHandle, write: bool, e: TxnError) {
        if write {
            self.abandon(now, txn, TxnError::Aborted(AbortReason::ClockUnavailable));
        } else if let Some(t) = self.txns.remove(&txn) {
            if let Some(call) = t.call {
                self.reply(call, CallResult::Failed(e));
            }
        }
    }

    /// A clock sample was accepted: every transaction waiting for one
    /// asks for its timestamp now.
    pub(super) fn unpark_clock_waits(&mut self, now: u64) {
        if self.clock_parked == 0 {
            return;
        }
        let parked: Vec<(u64, u64)> = self
            .waits
            .iter()
            .filter(|(_, w)| matches!(w, Wait::Clock { .. }))
            .map(|(k, _)| *k)
            .collect();
        for key in parked {
            if let Some(w) = self.waits.remove(&key) {
                self.waits.insert((now, key.1), w);
            }
        }
        self.end_due_waits(now);
    }

    pub(super) fn add_wait(&mut self, at: u64, w: Wait) {
        self.next_wait += 1;
        self.waits.insert((at, self.next_wait), w);
    }

    /// `w`, due at local time `ready`, ends at `now`.
    pub(super) fn wait_done(&mut self, now: u64, ready: u64, w: Wait) {
        match w {
            Wait::Resend { txn, seq, write_ts } => self.resend_when_passed(now, txn, seq, write_ts),
            Wait::Sleep(call) => self.reply(call, CallResult::Slept),
            Wait::Clock { txn, write } => {
                self.clock_parked = self.clock_parked.saturating_sub(1);
                if !self.txns.contains_key(&txn) {
                    return;
                }
                if let Err(e) = self.start_ts_wait(now, txn, write, false) {
                    self.ts_failed(now, txn, write, e);
                }
            }
            Wait::Ts {
                txn,
                ts,
                write,
                unwaited,
                start_local_ns,
            } => {
                if (write && !unwaited) || (!write && !self.reads_wait_at_server) {
                    self.stats.ts_wait_ns_sum += now.saturating_sub(start_local_ns);
                    let late = now.saturating_sub(ready);
                    self.stats.ts_late_ns_sum += late;
                    if late > 100_000 {
                        self.stats.ts_late_over_100us += 1;
                    }
                }
                if write {
                    let step = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                        Some(e) if unwaited => e.on_write_ts_unwaited(ts),
                        Some(e) => e.on_write_ts(ts),
                        None => return,
                    };
                    match step {
                        Ok(s) => self.drive_commit(now, txn, s),
                        Err(e) => self.abandon(now, txn, e),
                    }
                    return;
                }
                let map = self.map.clone();
                let limits = self.limits.clone();
                let Some(t) = self.txns.get_mut(&txn) else {
                    return;
                };
                t.engine = Some(Transaction::new(t.id, ts, t.opts, map, limits));
                let tx = t.id;
                self.answer(
                    txn,
                    CallResult::Began {
                        txn,
                        tx,
                        read_ts: ts,
                    },
                    false,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// With `clock.reads_wait_at_server` the coordinator hands out
    /// `read_ts` without waiting, so a tighter sample arriving afterwards
    /// can put its clock's upper bound below `read_ts`; the commit's
    /// `write_ts` is then raised above `read_ts` (FaRMv2 needs
    /// `write_ts > read_ts`; without the raise the engine refuses the
    /// `write_ts` and the transaction is abandoned).
    #[test]
    fn write_ts_is_raised_above_a_read_ts_handed_out_unwaited() {
        let mut p = new_client();
        // A wide first sample (a 5 ms round trip): a high upper bound.
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            &mut p,
            5_001_000,
            &sync,
            Response::Clock(ClockResponse::MasterTime {
                master_ns: 2_600_000,
            }),
        );
        p.begin(5_001_100, 1, 0, TxnOptions::default());
        let read_ts = match &replies(&p.drain_effects())[..] {
            [(1, CallResult::Began { read_ts, .. })] => *read_ts,
            other => panic!("Began expected at once: {other:?}"),
        };
        // A tight second sample: the upper bound falls far below read_ts.
        p.tick(5_001_200);
        let sync = sent(&p.drain_effects());
        assert!(!sync.is_empty(), "a second sync is due");
        answer(
            &mut p,
            5_001_300,
            &sync,
            Response::Clock(ClockResponse::MasterTime {
                master_ns: 5_100_250,
            }),
        );
        let upper = p.clock_time(5_001_400).expect("synchronised").upper;
        assert!(
            upper < read_ts.0,
            "the setup needs upper {upper} < read_ts {read_ts:?}"
        );
        p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
            .unwrap();
        p.commit(5_001_400, 2, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        assert_eq!(locks.len(), 1);
        let mut e = answer(
            &mut p,
            5_001_500,
            &locks,
            Response::Txn(TxnResponse::Lock(Ok(()))),
        );
        p.tick(50_000_000);
        e.extend(p.drain_effects());
        let write_ts: Vec<Timestamp> = sent(&e)
            .into_iter()
            .filter_map(|(_, _, r, _)| match unheld(&r) {
                Some(TxnRequest::CommitBackup { write_ts, .. }) => Some(*write_ts),
                _ => None,
            })
            .collect();
        assert!(
            !write_ts.is_empty() && write_ts.iter().all(|w| *w > read_ts),
            "COMMIT-BACKUP with write_ts above read_ts {read_ts:?}: {write_ts:?} {:?}",
            replies(&e)
        );
    }

    /// With `clock.reads_wait_at_server` (the default) a Begin takes
    /// `read_ts` as the clock's upper bound and answers at once (the nodes
    /// hold the reads), and is counted as unwaited; without it, it waits.
    #[test]
    fn read_ts_is_waited_out_where_the_configuration_says() {
        for at_server in [true, false] {
            let mut p = synced_client(at_server);
            let upper = p.clock_time(2000).expect("synchronised").upper;
            p.begin(2000, 1, 0, TxnOptions::default());
            let began: Vec<_> = replies(&p.drain_effects())
                .into_iter()
                .filter_map(|(c, r)| match r {
                    CallResult::Began { read_ts, .. } if c == 1 => Some(read_ts),
                    _ => None,
                })
                .collect();
            if at_server {
                assert_eq!(began, vec![Timestamp(upper)], "answered at once");
                assert_eq!(p.stats().read_ts_unwaited, 1);
                assert_eq!(p.stats().ts_count, 0);
            } else {
                assert!(began.is_empty(), "the coordinator waits: {began:?}");
                assert_eq!(p.stats().read_ts_unwaited, 0);
                assert_eq!(p.stats().ts_count, 1);
            }
        }
    }
}
