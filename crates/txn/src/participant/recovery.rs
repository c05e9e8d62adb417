//! Transaction recovery at a participant (FaRM §5.3): the records each
//! replica reports, lock recovery (step 4), replicating transaction state
//! to new replicas (step 5), evidence and votes (step 6), and the
//! COMMIT-, ABORT- and TRUNCATE-RECOVERY decisions (step 7).

use super::{add_write_once, Finish, Mutation, Participant};
use meridian_storage::log::LockState;
use meridian_wire::{RegionId, Timestamp, TxId};
use std::collections::BTreeMap;

impl Participant {
    /// FaRM §5.3 steps 2–3: this replica's records in `region` of
    /// transactions that began committing before configuration `config`
    /// (every such transaction recovers: requests of older configurations
    /// are refused, so their coordinators cannot finish them).
    pub fn recovering_records(
        &self,
        config: meridian_wire::ConfigId,
        region: RegionId,
    ) -> Vec<meridian_wire::RecoveringTx> {
        let mut out: BTreeMap<TxId, meridian_wire::RecoveringTx> = BTreeMap::new();
        let restrict = |rec: &meridian_wire::LockRecord| meridian_wire::LockRecord {
            writes: rec
                .writes
                .iter()
                .filter(|w| w.region == region)
                .cloned()
                .collect(),
            ..rec.clone()
        };
        let primary = self.durable.log.primary.iter().map(|(tx, (rec, st))| {
            let wts = match st {
                LockState::Committed(w) => Some(*w),
                LockState::Locked => None,
            };
            (tx, rec, wts)
        });
        let backup = self
            .durable
            .log
            .backup
            .iter()
            .map(|(tx, (rec, w))| (tx, rec, Some(*w)));
        let replicated = self
            .durable
            .log
            .replicated
            .iter()
            .map(|(tx, (rec, _, w))| (tx, rec, *w));
        for (tx, rec, wts) in primary.chain(backup).chain(replicated) {
            if tx.config >= config || !rec.writes.iter().any(|w| w.region == region) {
                continue;
            }
            let e = out
                .entry(*tx)
                .or_insert_with(|| meridian_wire::RecoveringTx {
                    record: restrict(rec),
                    evidence: self.evidence(*tx, region),
                    write_ts: None,
                });
            e.write_ts = e
                .write_ts
                .or(wts)
                .or(self.durable.recovered.get(tx).copied());
        }
        out.into_values().collect()
    }

    /// FaRM §5.3 step 4 at `region`'s primary: hold every key the
    /// recovering transactions wrote there, then unblock the region.
    pub fn recover_locks(&mut self, region: RegionId, txs: &[meridian_wire::RecoveringTx]) {
        self.journal(|| Mutation::RecoverLocks {
            region,
            txs: txs.to_vec(),
        });
        // Decided in this region here already: COMMIT-RECOVERY put the
        // region's writes in place, or the transaction finished. A commit
        // applied in another region only does not count: this region's
        // writes are not in place yet.
        let (recovered, finished) = (&self.durable.recovered_regions, &self.durable.finished);
        let known = |tx: &TxId| recovered.contains(&(*tx, region)) || finished.contains_key(tx);
        if let Some(store) = self.durable.stores.get_mut(&region) {
            for t in txs {
                if known(&t.record.tx) {
                    // Decided here already (COMMIT- or ABORT-RECOVERY came
                    // before this region's lock recovery ended, or the
                    // transaction was truncated here): holding its keys
                    // now would keep them locked for good.
                    continue;
                }
                let keys: Vec<meridian_wire::Key> = t
                    .record
                    .writes
                    .iter()
                    .filter(|w| w.region == region)
                    .map(|w| w.key.clone())
                    .collect();
                for k in &keys {
                    store.recovery_lock(t.record.tx, k);
                }
                self.durable
                    .recovery_held
                    .insert((t.record.tx, region), keys);
            }
        }
        self.durable.blocked.remove(&region);
    }

    /// True once this replica knows `tx`'s outcome: committed by recovery,
    /// aborted, or truncated.
    pub fn outcome_known(&self, tx: TxId) -> bool {
        self.durable.recovered.contains_key(&tx) || self.durable.finished.contains_key(&tx)
    }

    /// True once `tx` is decided in `region` here: COMMIT-RECOVERY put the
    /// region's writes in place, or it aborted or was truncated.
    pub fn decided_in(&self, tx: TxId, region: RegionId) -> bool {
        self.durable.recovered_regions.contains(&(tx, region))
            || self.durable.finished.contains_key(&tx)
    }

    /// Coverage: holds of `tx` outlive a COMMIT-RECOVERY (they are in
    /// regions whose writes are not in place here yet).
    fn mark_holds_kept(&self, tx: TxId) {
        if self
            .durable
            .recovery_held
            .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
            .next()
            .is_some()
        {
            meridian_bugs::mark!(
                "a COMMIT-RECOVERY keeps other regions' holds until their writes are in place"
            );
        }
    }

    /// FaRM §5.3 step 7: COMMIT-RECOVERY of `record` (writes in `region`)
    /// at `write_ts`: apply the writes at their place in each chain,
    /// release the transaction's locks in the region. Idempotent; a no-op
    /// for a transaction already truncated here.
    pub fn commit_recovery(
        &mut self,
        region: RegionId,
        record: &meridian_wire::LockRecord,
        write_ts: Timestamp,
    ) {
        self.journal(|| Mutation::CommitRecovery {
            region,
            record: record.clone(),
            write_ts,
        });
        let tx = record.tx;
        if self.durable.finished.get(&tx) == Some(&Finish::Truncated) {
            // Applied and truncated here already; the holds lock recovery
            // took from other replicas' reports still go, or the keys stay
            // locked forever.
            let unapplied = self
                .durable
                .recovery_held
                .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
                .map(|((_, r), keys)| {
                    let store = self.durable.stores.get(r);
                    keys.iter()
                        .filter(|k| {
                            store
                                .and_then(|s| s.object(k))
                                .is_some_and(|o| o.head_ts() < write_ts)
                        })
                        .count() as u64
                })
                .sum::<u64>();
            self.stats.holds_released_unapplied += unapplied;
            self.release_recovery_holds(tx);
            return;
        }
        assert!(
            self.durable.finished.get(&tx) != Some(&Finish::Aborted),
            "COMMIT-RECOVERY of {tx}, which this replica saw aborted"
        );
        // Every write of the transaction this node knows (the record sent,
        // its own LOCK or COMMIT-BACKUP record): the decision is per
        // transaction, so all of them are applied and released now, and a
        // later COMMIT-RECOVERY for another region is a no-op.
        //
        // Writes this node already installed as primary (COMMIT-PRIMARY
        // reached it before the configuration changed) are not installed
        // again: GC may have collected a later tombstone of the key since,
        // and the old write would bring the deleted key back.
        let installed_here = |w: &meridian_wire::WriteOp| match self.durable.log.primary.get(&tx) {
            Some((rec, LockState::Committed(_))) => rec
                .writes
                .iter()
                .any(|i| i.region == w.region && i.key == w.key),
            _ => false,
        };
        let mut writes: Vec<meridian_wire::WriteOp> = record
            .writes
            .iter()
            .filter(|w| w.region == region && !installed_here(w))
            .cloned()
            .collect();
        if let Some((rec, LockState::Locked)) = self.durable.log.primary.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        if let Some((rec, _)) = self.durable.log.backup.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        if let Some((rec, _, _)) = self.durable.log.replicated.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        let mut applied: std::collections::BTreeSet<RegionId> = [region].into_iter().collect();
        if let Some((rec, LockState::Committed(_))) = self.durable.log.primary.get(&tx) {
            applied.extend(rec.writes.iter().map(|w| w.region));
        }
        for w in &writes {
            applied.insert(w.region);
            if let Some(store) = self.durable.stores.get_mut(&w.region) {
                store.apply_backup(&w.key, write_ts, w.value.clone());
                store.recovery_unlock(tx, &w.key);
            } else {
                continue;
            }
            self.note_installed(w.region, &w.key);
        }
        // Release only the holds of regions whose writes are in place now:
        // a hold lock recovery took from another replica's report for a
        // region whose writes this node does not know (its own LOCK record
        // was lost in a restart) stays until that region's COMMIT-RECOVERY:
        // released with another region's decision, it would let a read see
        // the old version and a writer commit over the missing write.
        for r in &applied {
            if let Some(keys) = self.durable.recovery_held.remove(&(tx, *r)) {
                if let Some(store) = self.durable.stores.get_mut(r) {
                    for k in &keys {
                        store.recovery_unlock(tx, k);
                    }
                }
            }
            self.durable.recovered_regions.insert((tx, *r));
        }
        self.mark_holds_kept(tx);
        if let Some((_, st)) = self.durable.log.primary.get_mut(&tx) {
            *st = LockState::Committed(write_ts);
        }
        // Keep a record of the commit until truncation, so that this
        // replica reports it (commit-primary evidence) if a later
        // configuration recovers the transaction again: a replica whose
        // only record is step 5's (or none) would otherwise report nothing
        // and the region vote from the others' weaker evidence: when the
        // decision reaches a backup but not the primary, the primary's
        // LOCK record alone would vote lock and recovery would abort a
        // transaction this replica committed.
        let mine = |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| w.region == region);
        if !self.durable.stores.contains_key(&region) {
            // Not a replica of the region here (a decision sent by a
            // stale placement): nothing to report for it later.
        } else if !self
            .durable
            .log
            .primary
            .get(&tx)
            .is_some_and(|(r, _)| mine(r))
            && !self
                .durable
                .log
                .backup
                .get(&tx)
                .is_some_and(|(r, _)| mine(r))
        {
            let e = self.durable.log.replicated.entry(tx).or_insert_with(|| {
                (
                    meridian_wire::LockRecord {
                        writes: Vec::new(),
                        ..record.clone()
                    },
                    meridian_wire::Evidence::CommitPrimary,
                    None,
                )
            });
            for w in record.writes.iter().filter(|w| w.region == region) {
                add_write_once(&mut e.0, w.clone());
            }
            e.1 = meridian_wire::Evidence::CommitPrimary;
            e.2 = Some(write_ts);
        } else if let Some(e) = self.durable.log.replicated.get_mut(&tx) {
            e.1 = meridian_wire::Evidence::CommitPrimary;
            e.2 = Some(write_ts);
        }
        self.durable.recovered.insert(tx, write_ts);
    }

    /// FaRM §5.3 step 7: ABORT-RECOVERY in `region`: release every lock of
    /// the transaction, drop its records, remember it aborted.
    ///
    /// Panics (release builds too) if this replica committed it: recovery
    /// never aborts a transaction a primary exposed.
    pub fn abort_recovery(&mut self, tx: TxId, region: RegionId) {
        self.journal(|| Mutation::AbortRecovery { tx, region });
        assert!(
            !matches!(
                self.durable.log.primary.get(&tx),
                Some((_, LockState::Committed(_)))
            ) && !self.durable.recovered.contains_key(&tx),
            "ABORT-RECOVERY of {tx}, which committed at this replica"
        );
        let _ = region; // the decision is per transaction: release everywhere
        self.release_recovery_holds(tx);
        self.abort(tx);
        self.durable.log.backup.remove(&tx);
        self.durable.log.replicated.remove(&tx);
    }

    pub(super) fn release_recovery_holds(&mut self, tx: TxId) {
        let held: Vec<(RegionId, Vec<meridian_wire::Key>)> = self
            .durable
            .recovery_held
            .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
            .map(|((_, r), keys)| (*r, keys.clone()))
            .collect();
        for (r, keys) in held {
            self.durable.recovery_held.remove(&(tx, r));
            if let Some(store) = self.durable.stores.get_mut(&r) {
                for k in &keys {
                    store.recovery_unlock(tx, k);
                }
            }
        }
    }

    /// FaRM §5.3 step 7: TRUNCATE-RECOVERY: drop the transaction's records
    /// (applying a backup record first) and remember it truncated.
    pub fn truncate_recovery(&mut self, tx: TxId) {
        self.journal(|| Mutation::TruncateRecovery(tx));
        if self.durable.finished.get(&tx) == Some(&Finish::Aborted) {
            return;
        }
        self.truncate(&[tx]);
    }

    /// FaRM §5.3 step 5, at a replica of `region` that reported no record
    /// of `t.record.tx`: keep the record the region's primary replicated,
    /// with the evidence the region had (`t.evidence`: `CommitPrimary`,
    /// `CommitBackup` or `Lock`; others are ignored) and `t.write_ts`, until
    /// the decision. A new replica thus votes in later configurations as
    /// the region's old replicas would have (a promoted new replica would
    /// otherwise vote unknown and recovery abort a committed transaction).
    /// Idempotent; a no-op if this node already
    /// holds a record of the transaction or knows its outcome.
    pub fn replicate_tx_state(&mut self, region: RegionId, t: &meridian_wire::RecoveringTx) {
        use meridian_wire::Evidence;
        let tx = t.record.tx;
        if !matches!(
            t.evidence,
            Evidence::CommitPrimary | Evidence::CommitBackup | Evidence::Lock
        ) || self.outcome_known(tx)
            || self.is_finished(tx)
            || !self.durable.stores.contains_key(&region)
        {
            return;
        }
        // Kept unless this replica's own records already say as much: a
        // restored primary whose LOCK record survived the crash but whose
        // COMMIT-PRIMARY did not holds evidence Lock, and must keep the
        // COMMIT-BACKUP evidence its backups reported, or a later
        // configuration without those backups votes lock and aborts a
        // transaction an earlier recovery committed.
        if self.evidence(tx, region) <= t.evidence {
            return;
        }
        if self.durable.log.primary.contains_key(&tx) || self.durable.log.backup.contains_key(&tx) {
            meridian_bugs::mark!(
                "step 5 upgrades a replica whose evidence is weaker than the region's"
            );
        }
        self.journal(|| Mutation::ReplicateTxState {
            region,
            tx: t.clone(),
        });
        let writes: Vec<meridian_wire::WriteOp> = t
            .record
            .writes
            .iter()
            .filter(|w| w.region == region)
            .cloned()
            .collect();
        let e = self.durable.log.replicated.entry(tx).or_insert_with(|| {
            (
                meridian_wire::LockRecord {
                    writes: Vec::new(),
                    ..t.record.clone()
                },
                t.evidence,
                None,
            )
        });
        for w in writes {
            add_write_once(&mut e.0, w);
        }
        // Evidence orders strongest first.
        e.1 = e.1.min(t.evidence);
        e.2 = e.2.or(t.write_ts);
    }

    /// The primary's own vote-relevant evidence when asked for a vote on a
    /// transaction it found no records of (FaRM §5.3 step 6, REQUEST-VOTE).
    pub fn vote_without_records(&self, tx: TxId, region: RegionId) -> meridian_wire::RecoveryVote {
        use meridian_wire::{Evidence, RecoveryVote};
        match self.evidence(tx, region) {
            Evidence::CommitPrimary => RecoveryVote::CommitPrimary,
            Evidence::CommitBackup => RecoveryVote::CommitBackup,
            Evidence::Lock => RecoveryVote::Lock,
            Evidence::Aborted => RecoveryVote::Abort,
            Evidence::Truncated => RecoveryVote::Truncated,
            Evidence::Nothing => RecoveryVote::Unknown,
        }
    }

    /// What this replica knows of `tx` in `region` (FaRM §5.3 step 6): a
    /// LOCK record (committed or not) if this node is the region's primary
    /// and locked for it, a COMMIT-BACKUP record if a backup, else how it
    /// finished here (aborted, truncated, or below the coordinator's low
    /// bound, which FaRM counts as truncated), else nothing.
    pub fn evidence(&self, tx: TxId, region: RegionId) -> meridian_wire::Evidence {
        use meridian_wire::Evidence;
        let touches =
            |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| w.region == region);
        if self.durable.recovered.contains_key(&tx) {
            return Evidence::CommitPrimary;
        }
        // The strongest of the records held: a LOCK record (a restored
        // primary's, whose COMMIT-PRIMARY the crash took) can sit beside
        // a stronger replicated record (`replicate_tx_state`).
        let primary = self
            .durable
            .log
            .primary
            .get(&tx)
            .filter(|(rec, _)| touches(rec))
            .map(|(_, state)| match state {
                LockState::Committed(_) => Evidence::CommitPrimary,
                LockState::Locked => Evidence::Lock,
            });
        let backup = self
            .durable
            .log
            .backup
            .get(&tx)
            .filter(|(rec, _)| touches(rec))
            .map(|_| Evidence::CommitBackup);
        let replicated = self
            .durable
            .log
            .replicated
            .get(&tx)
            .filter(|(rec, _, _)| touches(rec))
            .map(|(_, e, _)| *e);
        if let Some(e) = [primary, backup, replicated].into_iter().flatten().min() {
            return e;
        }
        match self.durable.finished.get(&tx) {
            Some(Finish::Aborted) => Evidence::Aborted,
            Some(Finish::Truncated) => Evidence::Truncated,
            None if tx.local < self.low_bound(tx.coordinator) => Evidence::Truncated,
            None => Evidence::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::testing::{
        assert_deleted, cfg, commit_at_primary, commit_backup, record, two_nodes, tx,
    };
    use meridian_config::Configuration;
    use meridian_wire::{
        ConfigId, Conflict, LockRecord, NodeId, Response, TxnRequest, TxnResponse,
    };

    /// FaRM §5.3 step 6: what a replica reports about a transaction, for
    /// each state its records can be in.
    #[test]
    fn evidence_tells_every_record_state_apart() {
        use meridian_wire::Evidence as E;
        let mut p = Participant::new(NodeId(0), &cfg());
        let ra = p.region_of(b"a");
        let rz = p.region_of(&[0xff]);
        assert_ne!(ra, rz);
        let lock = |p: &mut Participant, l: u64| {
            let rec = record(p, tx(l), 10, &[b"a"]);
            p.handle(&[], &TxnRequest::Lock(rec))
        };
        assert_eq!(p.evidence(tx(1), ra), E::Nothing);
        lock(&mut p, 1);
        assert_eq!(p.evidence(tx(1), ra), E::Lock);
        assert_eq!(p.evidence(tx(1), rz), E::Nothing, "another region");
        p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        assert_eq!(p.evidence(tx(1), ra), E::CommitPrimary);
        p.handle(&[tx(1)], &TxnRequest::Abort { tx: tx(99) });
        assert_eq!(p.evidence(tx(1), ra), E::Truncated);
        lock(&mut p, 2);
        p.handle(&[], &TxnRequest::Abort { tx: tx(2) });
        assert_eq!(p.evidence(tx(2), ra), E::Aborted);
        // A restored primary kept its LOCK record but lost
        // its COMMIT-PRIMARY; lock recovery replicated the backups'
        // COMMIT-BACKUP evidence to it. It must report the stronger one,
        // or a later configuration without those backups aborts what an
        // earlier recovery committed.
        let rec4 = record(&p, tx(4), 30, &[b"a"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec4.clone())),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        assert_eq!(p.evidence(tx(4), ra), E::Lock);
        let rt = |e: E| meridian_wire::RecoveringTx {
            record: rec4.clone(),
            evidence: e,
            write_ts: Some(Timestamp(35)),
        };
        p.replicate_tx_state(ra, &rt(E::Lock));
        assert_eq!(p.evidence(tx(4), ra), E::Lock, "nothing stronger");
        p.replicate_tx_state(ra, &rt(E::CommitBackup));
        assert_eq!(
            p.evidence(tx(4), ra),
            E::CommitBackup,
            "the stronger evidence"
        );
        // Node 1 of two is the backup of region 0.
        let two = Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"));
        let mut b = Participant::new(NodeId(1), &two);
        let rec = record(&b, tx(3), 30, &[&[1]]);
        let r0 = rec.writes[0].region;
        commit_backup(&mut b, rec, 40);
        assert_eq!(b.evidence(tx(3), r0), E::CommitBackup);
        assert_eq!(b.evidence(tx(3), RegionId(1)), E::Nothing);
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(0).coordinator,
                local: 50,
            }),
        });
        assert_eq!(p.evidence(tx(40), ra), E::Truncated, "below the low bound");
        p.check_invariants();
    }

    /// A transaction committed at its primary (COMMIT-PRIMARY) but not
    /// truncated is recovered after a configuration change, and a later
    /// delete of the same key has been collected by GC meanwhile: a
    /// primary does not reinstall writes it already installed, or the
    /// deleted key would come back.
    #[test]
    fn commit_recovery_never_reinstalls_a_write_the_primary_installed() {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let key: &[u8] = &[1];
        let older = record(&p, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        let mut delete = record(&p, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        commit_at_primary(&mut p, older.clone(), 10);
        commit_at_primary(&mut p, delete, 20);
        // The delete is truncated and collected; the older write is not
        // truncated (its TRUNCATE was lost) and is recovered later.
        p.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        p.gc(Timestamp(1_000));
        p.commit_recovery(region, &older, Timestamp(10));
        assert_deleted(&p, region, key);
        p.check_invariants();
    }

    /// A replica with no record of a transaction (or only
    /// a step-5 replicated one) applies its COMMIT-RECOVERY. Until the
    /// transaction is truncated it keeps the writes as commit-primary
    /// evidence and reports them to the next configuration: if the
    /// region's primary missed the decision, its LOCK record alone would
    /// vote lock and recovery would abort a committed transaction. The
    /// kept record holds GC below its `write_ts`, so applying it again at
    /// truncation cannot bring back a key a later delete removed.
    #[test]
    fn commit_recovery_keeps_commit_evidence_until_truncation() {
        let mut b = Participant::new(NodeId(1), &two_nodes());
        let key: &[u8] = &[1];
        let older = record(&b, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        assert_eq!(b.evidence(tx(1), region), meridian_wire::Evidence::Nothing);
        b.commit_recovery(region, &older, Timestamp(10));
        let next = b.recovering_records(ConfigId(2), region);
        assert_eq!(
            next.len(),
            1,
            "the commit is reported to the next configuration"
        );
        assert_eq!(next[0].record, older);
        assert_eq!(next[0].evidence, meridian_wire::Evidence::CommitPrimary);
        assert_eq!(next[0].write_ts, Some(Timestamp(10)));
        // A later delete of the key commits and is truncated; GC runs far
        // ahead, but stays below the kept record's write_ts.
        let mut delete = record(&b, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        commit_backup(&mut b, delete, 20);
        b.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(1_000));
        b.truncate_recovery(tx(1));
        b.gc(Timestamp(2_000));
        assert!(b.recovering_records(ConfigId(2), region).is_empty());
        assert_eq!(
            b.evidence(tx(1), region),
            meridian_wire::Evidence::Truncated
        );
        assert_deleted(&b, region, key);
        b.check_invariants();
    }

    /// A transaction COMMIT-RECOVERY committed here and that then ends with
    /// a plain TRUNCATE (its coordinator finished it; no TRUNCATE-RECOVERY
    /// follows) leaves no recovery mark behind, which would otherwise stay
    /// for good, one map entry and one set entry per such transaction and
    /// region. Its evidence is then the finished set's `Truncated`.
    #[test]
    fn a_plain_truncate_ends_commit_recoverys_marks() {
        let mut b = Participant::new(NodeId(1), &two_nodes());
        let rec = record(&b, tx(1), 5, &[&[1], &[2]]);
        let region = rec.writes[0].region;
        b.commit_recovery(region, &rec, Timestamp(10));
        assert_eq!(
            (b.durable.recovered.len(), b.durable.recovered_regions.len()),
            (1, 1),
            "COMMIT-RECOVERY marks the transaction"
        );
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        assert!(
            b.durable.recovered.is_empty() && b.durable.recovered_regions.is_empty(),
            "left after TRUNCATE: {:?} {:?}",
            b.durable.recovered,
            b.durable.recovered_regions
        );
        assert_eq!(
            b.evidence(tx(1), region),
            meridian_wire::Evidence::Truncated
        );
        assert!(b.outcome_known(tx(1)) && b.decided_in(tx(1), region));
        b.check_invariants();
    }

    /// Lock recovery holds the keys of a transaction a backup still
    /// reported; the primary then truncates it (a late TRUNCATE). The
    /// COMMIT-RECOVERY of the truncated transaction still releases the
    /// hold, or readers would see `Locked` forever.
    #[test]
    fn commit_recovery_of_a_truncated_transaction_releases_its_recovery_holds() {
        let (mut p, rec) = committed_and_held(meridian_wire::Evidence::CommitBackup);
        p.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        p.commit_recovery(rec.writes[0].region, &rec, Timestamp(10));
        assert_hold_released(&p, &rec);
    }

    /// A primary that committed `tx(1)` (a write of key `[1]` at 10), and
    /// lock recovery's hold on that key, reported with `evidence`: a read
    /// meets the hold.
    fn committed_and_held(
        evidence: meridian_wire::Evidence,
    ) -> (Participant, meridian_wire::LockRecord) {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let rec = record(&p, tx(1), 5, &[&[1]]);
        let region = rec.writes[0].region;
        commit_at_primary(&mut p, rec.clone(), 10);
        p.recover_locks(
            region,
            &[meridian_wire::RecoveringTx {
                record: rec.clone(),
                evidence,
                write_ts: Some(Timestamp(10)),
            }],
        );
        let store = p.durable.stores.get(&region).expect("store");
        assert_eq!(store.read(&[1], Timestamp(20)), Err(Conflict::Locked));
        (p, rec)
    }

    fn assert_hold_released(p: &Participant, rec: &meridian_wire::LockRecord) {
        let store = p.durable.stores.get(&rec.writes[0].region).expect("store");
        assert!(
            matches!(store.read(&[1], Timestamp(20)), Ok(Some(_))),
            "the hold is released"
        );
        p.check_invariants();
    }

    /// Lock recovery holds the key of a transaction this primary committed
    /// (COMMIT-PRIMARY) but has not truncated; its recovery coordinator
    /// leaves before deciding, the client's TRUNCATE arrives in the next
    /// configuration, and that configuration's recovery finds no record to
    /// vote on, so no COMMIT-RECOVERY ever comes. The truncation releases
    /// the holds of regions whose writes are in place, or readers would
    /// wait on the hold forever.
    #[test]
    fn truncation_releases_the_recovery_holds_of_a_transaction_in_place() {
        let (mut p, rec) = committed_and_held(meridian_wire::Evidence::CommitPrimary);
        p.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        assert_hold_released(&p, &rec);
    }

    /// A one-node participant and two keys in different regions it leads.
    fn two_region_keys() -> (
        Participant,
        &'static [u8],
        RegionId,
        &'static [u8],
        RegionId,
    ) {
        let p = Participant::new(NodeId(0), &cfg());
        let (ka, kb): (&'static [u8], &'static [u8]) = (&[1], &[200]);
        let (ra, rb) = (p.region_of(ka), p.region_of(kb));
        assert_ne!(ra, rb);
        (p, ka, ra, kb, rb)
    }

    /// The count behind the simulator's check on COMMIT-RECOVERY's
    /// truncated branch (`ParticipantStats::holds_released_unapplied`): a
    /// hold that outlived the truncation of a transaction, in a region
    /// whose write this replica never had, released by a COMMIT-RECOVERY
    /// for another region while the key is still older than `write_ts`,
    /// is counted; the release itself is unchanged.
    #[test]
    fn a_hold_released_over_a_missing_write_is_counted() {
        let (mut p, ka, ra, kb, rb) = two_region_keys();
        // kb has an old version (5) here.
        let old = record(&p, tx(1), 1, &[kb]);
        p.handle(&[], &TxnRequest::Lock(old));
        p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(5),
            },
        );
        // Transaction 2 wrote ka and kb at 10; lock recovery holds kb here
        // from another replica's report, and this node knows only ka.
        let in_b = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(2), 6, &[kb])
        };
        p.recover_locks(
            rb,
            &[meridian_wire::RecoveringTx {
                record: in_b,
                evidence: meridian_wire::Evidence::Lock,
                write_ts: None,
            }],
        );
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: vec![tx(2)],
            low: None,
        });
        assert_eq!(p.stats().holds_released_unapplied, 0);
        let in_a = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(2), 6, &[ka])
        };
        p.commit_recovery(ra, &in_a, Timestamp(10));
        assert_eq!(p.stats().holds_released_unapplied, 1, "kb is still at 5");
    }

    /// Lock recovery holds the keys of a transaction whose
    /// LOCK record this primary still had (evidence Lock) and, in another
    /// region, of one known here only from a replicated record without
    /// `write_ts` (FaRM §5.3 step 5); the coordinator had aborted it (its
    /// ABORT refused in the new configuration) and its low bound passed
    /// it. The bound drops the records; the holds must go too, or no later
    /// configuration finds a record to recover and the keys stay held.
    #[test]
    fn a_low_bound_releases_the_recovery_holds_of_an_aborted_transaction() {
        let (mut p, ka, ra, kb, rb) = two_region_keys();
        let rec = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(1), 5, &[ka])
        };
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec.clone())),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let in_b = LockRecord {
            writes: record(&p, tx(1), 5, &[kb]).writes,
            ..rec.clone()
        };
        let lock_evidence = |record: LockRecord| meridian_wire::RecoveringTx {
            record,
            evidence: meridian_wire::Evidence::Lock,
            write_ts: None,
        };
        p.recover_locks(ra, &[lock_evidence(rec)]);
        p.replicate_tx_state(rb, &lock_evidence(in_b.clone()));
        p.recover_locks(rb, &[lock_evidence(in_b)]);
        for (r, k) in [(ra, ka), (rb, kb)] {
            assert_eq!(
                p.read(r, k, Timestamp(20)),
                TxnResponse::Read(Err(Conflict::Locked))
            );
        }
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(1).coordinator,
                local: 2,
            }),
        });
        assert_eq!(p.log_len(), 0, "the stale records are dropped");
        for (r, k) in [(ra, ka), (rb, kb)] {
            assert_eq!(
                p.read(r, k, Timestamp(20)),
                TxnResponse::Read(Ok(None)),
                "{k:?} still held"
            );
        }
        p.check_invariants();
    }

    /// A decision that reaches a primary before its region's lock recovery
    /// ends (the recovery coordinator decided on another region's
    /// commit-primary vote) must not be undone by that lock recovery: the
    /// keys would stay held for good.
    #[test]
    fn lock_recovery_after_the_decision_holds_nothing() {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let key: &[u8] = &[1];
        let rec = record(&p, tx(1), 5, &[key]);
        let region = rec.writes[0].region;
        p.commit_recovery(region, &rec, Timestamp(10));
        assert!(p.outcome_known(tx(1)));
        p.recover_locks(
            region,
            &[meridian_wire::RecoveringTx {
                record: rec,
                evidence: meridian_wire::Evidence::CommitBackup,
                write_ts: Some(Timestamp(10)),
            }],
        );
        let store = p.durable.stores.get(&region).expect("store");
        assert!(
            matches!(store.read(key, Timestamp(20)), Ok(Some(_))),
            "the committed write is readable, not held"
        );
        p.check_invariants();
    }

    /// A primary of two regions (keys `ka` in `ra`, `kb` in `rb`; `kb` has
    /// version 5) and tx 2's record writing both at read_ts 6: the
    /// participant, the keys, the regions, and the record restricted to a
    /// region (for the tests of holds across regions).
    #[allow(clippy::type_complexity)]
    fn two_region_recovery() -> (
        Participant,
        (&'static [u8], &'static [u8]),
        (RegionId, RegionId),
        impl Fn(RegionId) -> LockRecord,
    ) {
        let mut p = Participant::new(NodeId(0), &cfg());
        let (ka, kb): (&'static [u8], &'static [u8]) = (&[1], &[200]);
        let (ra, rb) = (p.region_of(ka), p.region_of(kb));
        assert_ne!(ra, rb);
        let old = record(&p, tx(1), 1, &[kb]);
        commit_at_primary(&mut p, old, 5);
        let rec = record(&p, tx(2), 6, &[ka, kb]);
        let only = move |r: RegionId| LockRecord {
            writes: rec
                .writes
                .iter()
                .filter(|w| w.region == r)
                .cloned()
                .collect(),
            ..rec.clone()
        };
        (p, (ka, kb), (ra, rb), only)
    }

    /// A restored primary of two regions lost its LOCK
    /// record of a transaction; lock recovery held the transaction's keys
    /// in both regions from a backup's report. COMMIT-RECOVERY for the first
    /// region must not release the hold on the second region's key before
    /// that key's write is applied (its own COMMIT-RECOVERY), or a read at
    /// a later read_ts sees the old version and a new writer commits over it.
    #[test]
    fn commit_recovery_of_one_region_keeps_the_holds_of_another() {
        let kept = meridian_bugs::marks::watch(
            "a COMMIT-RECOVERY keeps other regions' holds until their writes are in place",
        );
        let (mut p, (_, kb), (ra, rb), only) = two_region_recovery();
        for r in [ra, rb] {
            p.recover_locks(
                r,
                &[meridian_wire::RecoveringTx {
                    record: only(r),
                    evidence: meridian_wire::Evidence::CommitBackup,
                    write_ts: Some(Timestamp(10)),
                }],
            );
        }
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked))
        );
        p.commit_recovery(ra, &only(ra), Timestamp(10));
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked)),
            "kb released before its write was applied"
        );
        p.commit_recovery(rb, &only(rb), Timestamp(10));
        assert!(matches!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(10),
                ..
            })))
        ));
        kept.assert_hit();
    }

    /// The other order: COMMIT-RECOVERY for region A reaches a
    /// primary that lost its record before region B's lock recovery ends;
    /// B's lock recovery must still hold B's key until B's COMMIT-RECOVERY.
    #[test]
    fn lock_recovery_after_another_regions_decision_still_holds() {
        let (mut p, (_, kb), (ra, rb), only) = two_region_recovery();
        let rt = |r: RegionId| meridian_wire::RecoveringTx {
            record: only(r),
            evidence: meridian_wire::Evidence::CommitBackup,
            write_ts: Some(Timestamp(10)),
        };
        p.recover_locks(ra, &[rt(ra)]);
        p.commit_recovery(ra, &only(ra), Timestamp(10));
        p.recover_locks(rb, &[rt(rb)]);
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked)),
            "kb served before its write was applied"
        );
        p.commit_recovery(rb, &only(rb), Timestamp(10));
        assert!(matches!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(10),
                ..
            })))
        ));
        p.check_invariants();
    }
}
