//! Truncation (FaRM §4, step 5): the TRUNCATE queue per node, carried on
//! the next request or flushed, the low bound of transactions whose
//! records are all truncated, and a clean close that waits for them.

use super::*;

impl ClientProcess {
    /// FaRM Table 1's low bound on non-truncated transaction ids: every
    /// transaction of this coordinator with a smaller `TxId::local` is
    /// finished, and its ABORT or TRUNCATE was acknowledged by every node
    /// it concerned. It stops below any transaction whose records may
    /// remain (unknown outcome, ABORT or TRUNCATE given up), for recovery
    /// to resolve. Monotone. O(open work); recomputed at each truncation
    /// flush and sent with truncations.
    pub fn truncate_low(&self) -> u64 {
        let mut low = self.next_local;
        let mut see = |tx: &TxId| low = low.min(tx.local);
        self.txns.values().for_each(|t| see(&t.id));
        self.finishing.keys().for_each(&mut see);
        self.truncates.values().flatten().for_each(&mut see);
        for r in self.rpcs.values() {
            r.truncate.iter().for_each(&mut see);
            if let Purpose::Abort(tx) | Purpose::PostCommit(tx) = &r.purpose {
                see(tx);
            }
        }
        low.min(self.unresolved_low.unwrap_or(u64::MAX))
    }

    /// TRUNCATEs queued and not yet sent.
    pub fn queued_truncations(&self) -> usize {
        self.truncates.values().map(Vec::len).sum()
    }

    pub(super) fn queue_truncate(&mut self, tx: TxId, nodes: &[NodeId]) {
        for n in nodes {
            self.truncates.entry(*n).or_default().push(tx);
        }
    }

    pub(super) fn flush_truncates(&mut self, now: u64) {
        self.low = self.truncate_low();
        let pending: Vec<(NodeId, Vec<TxId>)> = std::mem::take(&mut self.truncates)
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect();
        for (n, txs) in pending {
            // The ids ride in the frame's truncate field, so a lost frame
            // re-queues them (see rpc_failed).
            self.truncates.insert(n, txs);
            self.send_rpc(
                now,
                n,
                Request::Txn(TxnRequest::Truncate { txs: Vec::new() }),
                Purpose::Truncate,
            );
        }
    }

    pub(super) fn maybe_closed(&mut self) {
        let Some(call) = self.closing else { return };
        let busy = self.rpcs.values().any(|r| {
            matches!(
                r.purpose,
                Purpose::Truncate | Purpose::Abort(_) | Purpose::PostCommit(_)
            )
        });
        if !busy && self.truncates.values().all(Vec::is_empty) && self.finishing.is_empty() {
            self.closing = None;
            // A clean close releases the lease, unless a transaction's
            // outcome stayed unknown: then its lease runs out and the
            // configuration that follows recovers it (FaRM §5.3).
            self.lease_params = None;
            let role = self
                .lease
                .with(0, |r, _| std::mem::replace(r, LeaseRole::None));
            if let LeaseRole::Member(l) = role {
                if self.unresolved_low.is_none() {
                    self.send_oneway(
                        l.cm(),
                        Request::Lease(LeaseMessage::Release {
                            holder: LeaseHolder::Client(self.coordinator),
                        }),
                    );
                }
            }
            self.reply(call, CallResult::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// FaRM Table 1's low bound: it passes a transaction only once every
    /// node acknowledged its TRUNCATE, and it rides with truncations.
    #[test]
    fn the_low_bound_passes_a_transaction_only_after_its_truncations_are_acknowledged() {
        let mut p = new_client();
        let backups = committing_backups(&mut p);
        assert_eq!(p.truncate_low(), 0, "transaction 0 is not finished");
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        answer(&mut p, 600_200, &primaries, Response::Txn(TxnResponse::Ack));
        assert_eq!(p.truncate_low(), 0, "committed but not yet truncated");
        p.close(600_300, 3);
        let flushed: Vec<_> = p
            .drain_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Send {
                    to,
                    frame: Frame::Request { id, truncate, .. },
                } => Some((to, id, truncate)),
                _ => None,
            })
            .collect();
        assert!(!flushed.is_empty());
        assert_eq!(p.truncate_low(), 0, "truncations in flight");
        for (to, id, _) in &flushed {
            p.on_message(
                600_400,
                *to,
                Frame::Response {
                    id: *id,
                    resp: Response::Txn(TxnResponse::Ack),
                },
            );
        }
        assert_eq!(p.truncate_low(), 1, "every truncation acknowledged");
        p.check_invariants();
    }

    /// A transaction whose outcome is unknown holds the low bound below it:
    /// its records may remain until recovery resolves it.
    #[test]
    fn the_low_bound_stops_at_a_transaction_with_an_unknown_outcome() {
        let mut p = new_client();
        let _backups_lost = committing_backups(&mut p);
        // COMMIT-BACKUP is never acknowledged: after `rpc_attempts` tries
        // the commit is reported unknown.
        let mut now = 600_000;
        for _ in 0..=p.limits.rpc_attempts {
            now += 2_000_000;
            p.tick(now);
        }
        let e = p.drain_effects();
        assert!(replies(&e)
            .iter()
            .any(|(_, r)| matches!(r, CallResult::Failed(TxnError::Indeterminate { .. }))));
        p.begin(now, 9, 0, TxnOptions::default());
        assert_eq!(p.truncate_low(), 0, "held below the unknown transaction");
    }

    /// Truncations are flushed on close, re-sent when the
    /// frame carrying them is lost, and close answers once they are acked.
    #[test]
    fn truncations_survive_a_lost_frame_and_are_flushed_on_close() {
        let mut p = new_client();
        let backups = committing_backups(&mut p);
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        let e = answer(&mut p, 600_200, &primaries, Response::Txn(TxnResponse::Ack));
        assert!(matches!(replies(&e)[..], [(2, CallResult::Committed(_))]));
        assert!(p.queued_truncations() > 0);

        p.close(600_300, 3);
        let first = sent(&p.drain_effects());
        let carried: usize = first.iter().map(|(_, _, _, t)| t.len()).sum();
        assert!(carried > 0, "close flushes the truncation queue");
        // The frames are lost: the ids are re-queued and sent again.
        p.tick(5_000_000);
        let again = sent(&p.drain_effects());
        let carried_again: usize = again.iter().map(|(_, _, _, t)| t.len()).sum();
        assert_eq!(carried_again, carried, "lost truncations are sent again");
        let e = answer(&mut p, 5_000_100, &again, Response::Txn(TxnResponse::Ack));
        assert!(matches!(replies(&e)[..], [(3, CallResult::Closed)]));
        assert_eq!(p.queued_truncations(), 0);
        p.check_invariants();
    }
}
