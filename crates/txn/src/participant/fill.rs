//! Data recovery at a participant (FaRM §5.4): the source copies a
//! region's objects in chunks, the new replica merges them behind the fill
//! fence (the source's GC safe point) and, once its copy is complete,
//! adopts what the source knows of finished transactions.

use super::{Finish, Mutation, Participant};
use meridian_wire::{RegionId, Timestamp};

impl Participant {
    /// FaRM §5.4, source: objects of `region` after `after`, whether the
    /// region ends there, and the replica's GC safe point (the new
    /// replica's fill fence, [`RegionStore::merge_chunk`]).
    pub fn copy_region(
        &mut self,
        region: RegionId,
        after: Option<&[u8]>,
    ) -> Option<(Vec<meridian_wire::ObjectCopy>, bool, Timestamp)> {
        let s = self.durable.stores.get(&region)?;
        let (objects, done, held) =
            s.copy_after_counted(after, self.limits.data_recovery_chunk_objects);
        let safe_point = s.safe_point();
        self.stats.copied_recovery_holds += held as u64;
        Some((objects, done, safe_point))
    }

    /// FaRM §5.4, new replica: merge one chunk of copied objects into
    /// `region` ([`RegionStore::merge_chunk`]: the chunk's range, and the
    /// fill fence at the source's safe point).
    pub fn merge_copies(
        &mut self,
        region: RegionId,
        after: Option<&[u8]>,
        objects: &[meridian_wire::ObjectCopy],
        done: bool,
        source_safe_point: Timestamp,
    ) {
        self.journal(|| Mutation::MergeCopies {
            region,
            after: after.map(<[u8]>::to_vec),
            objects: objects.to_vec(),
            done,
            source_safe_point,
        });
        if let Some(s) = self.durable.stores.get_mut(&region) {
            if meridian_bugs::bug!(self.bugs, RefillUnfenced) {
                #[cfg(feature = "sim-bugs")]
                s.merge_chunk_unfenced(objects);
            } else {
                s.merge_chunk(after, objects, done, source_safe_point);
            }
        }
    }

    /// FaRM §5.4, new replica: data recovery of `region` finished here (the
    /// last chunk merged). Journaled: a node restored from disk in a
    /// configuration that lists it as filling `region` knows from this that
    /// its copy was complete before the crash, as a later configuration
    /// (whose CM heard its REPLICA-READY) may record.
    pub fn mark_filled(&mut self, region: RegionId) {
        if !self.durable.stores.contains_key(&region) || self.durable.filled.contains(&region) {
            return;
        }
        self.journal(|| Mutation::Filled(region));
        self.durable.filled.insert(region);
    }

    /// FaRM §5.4, source: what this replica knows of finished
    /// transactions, for a new replica whose copy is complete
    /// ([`Participant::learn_finished`]): the ids truncated here and every
    /// coordinator's low bound, in order.
    pub fn finished_ids(&self) -> meridian_wire::FinishedIds {
        meridian_wire::FinishedIds {
            truncated: self
                .durable
                .finished
                .iter()
                .filter(|(_, f)| **f == Finish::Truncated)
                .map(|(tx, _)| *tx)
                .collect(),
            low_bounds: self
                .durable
                .low_bounds
                .iter()
                .map(|(c, l)| meridian_wire::TruncateLow {
                    coordinator: *c,
                    local: *l,
                })
                .collect(),
        }
    }

    /// FaRM §5.3 step 6 and §5.4, new replica: adopt what the source of a
    /// completed copy knows of finished transactions. The copy holds the
    /// writes of transactions the source truncated, without their records;
    /// without this, the new replica, once primary, would vote `unknown`
    /// on such a transaction where the source would vote `truncated`, and
    /// recovery would abort a committed transaction (its write staying in
    /// one region and vanishing from the other). An id
    /// this node holds records of keeps them (their evidence is stronger);
    /// a low bound is taken as a piggybacked one would be.
    pub fn learn_finished(&mut self, f: &meridian_wire::FinishedIds) {
        if f.truncated.is_empty() && f.low_bounds.is_empty() {
            return;
        }
        self.journal(|| Mutation::LearnFinished(f.clone()));
        let journal = self.journal.take();
        for tx in &f.truncated {
            let held = self.durable.log.primary.contains_key(tx)
                || self.durable.log.backup.contains_key(tx)
                || self.durable.log.replicated.contains_key(tx)
                || self.durable.recovered.contains_key(tx);
            if !held && !self.durable.finished.contains_key(tx) {
                meridian_bugs::mark!("a filled replica learns its source's truncations");
                self.finish(*tx, Finish::Truncated);
            }
        }
        for low in &f.low_bounds {
            self.truncate_piggybacked(&meridian_wire::Truncation {
                txs: Vec::new(),
                low: Some(*low),
            });
        }
        self.journal = journal;
    }

    /// True if this node finished filling `region` under the configuration
    /// it holds ([`Participant::mark_filled`]).
    pub fn is_filled(&self, region: RegionId) -> bool {
        self.durable.filled.contains(&region)
    }

    /// Writes and copied versions the fill fence dropped, over the
    /// replicas held ([`RegionStore::merge_chunk`]).
    pub fn stale_fill_writes(&self) -> u64 {
        self.durable
            .stores
            .values()
            .map(|s| s.stats().stale_fill_writes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::testing::{cfg, commit_at_primary, record, two_nodes, tx};
    use meridian_config::Configuration;
    use meridian_storage::RegionStore;
    use meridian_wire::{ConfigId, LockRecord, NodeId, TxId, TxnRequest};

    /// Recovery holds live in a region's store: a configuration that
    /// refills a region (its copy here starts empty) drops them with the
    /// old copy, or the participant's invariants see a hold without its
    /// lock (a restored node that led the region during an earlier
    /// recovery, refilling it in a renewed configuration).
    #[test]
    fn a_refilled_region_drops_its_recovery_holds() {
        let two = two_nodes();
        let node = NodeId(0);
        let mut p = Participant::new(node, &two);
        let r = p.durable.primary_for[0];
        let key: Vec<u8> = (0u8..=255)
            .map(|k| vec![k, 7])
            .find(|k| p.region_of(k) == r)
            .expect("a key of the region");
        let rec = record(&p, tx(1), 10, &[&key]);
        let held = meridian_wire::RecoveringTx {
            record: rec,
            evidence: meridian_wire::Evidence::Lock,
            write_ts: None,
        };
        p.recover_locks(r, &[held]);
        assert!(!p.durable.recovery_held.is_empty());
        p.check_invariants();
        let mut next = two.renewed();
        next.config_id += 1;
        refill_as_backup(&mut p, &mut next, r, node);
        assert!(
            p.durable.recovery_held.is_empty(),
            "holds outlived the dropped copy"
        );
        p.check_invariants();
    }

    /// A replica filled by copy holds the writes of
    /// transactions its source truncated, without their records. It learns
    /// the source's finished ids with the last chunk, so once primary it
    /// votes `truncated` on them as the source would, not `unknown` (which
    /// made recovery abort a committed transaction). Records it holds keep
    /// their evidence; the knowledge is journaled and replays.
    #[test]
    fn a_filled_replica_votes_truncated_where_its_source_would() {
        use meridian_wire::Evidence as E;
        let mut src = Participant::new(NodeId(0), &cfg());
        let ra = src.region_of(b"a");
        let rec = record(&src, tx(1), 10, &[b"a"]);
        src.handle(&[], &TxnRequest::Lock(rec));
        src.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        src.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        src.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: 77,
                local: 5,
            }),
        });
        assert_eq!(src.evidence(tx(1), ra), E::Truncated);
        let known = src.finished_ids();
        assert!(known.truncated.contains(&tx(1)));
        // The new replica never saw the transaction.
        let mut new = Participant::new(NodeId(0), &cfg());
        new.enable_journal();
        let rec2 = record(&new, tx(2), 30, &[b"a"]);
        new.handle(&[], &TxnRequest::Lock(rec2));
        let _ = new.drain_journal();
        assert_eq!(
            new.vote_without_records(tx(1), ra),
            meridian_wire::RecoveryVote::Unknown
        );
        let cp = new.snapshot().expect("snapshot").encode().expect("encode");
        new.learn_finished(&known);
        assert_eq!(
            new.vote_without_records(tx(1), ra),
            meridian_wire::RecoveryVote::Truncated
        );
        let other = TxId {
            coordinator: 77,
            ..tx(3)
        };
        assert_eq!(
            new.evidence(other, ra),
            E::Truncated,
            "below the learnt low bound"
        );
        // A transaction it holds records of keeps its evidence.
        let mut with_tx2 = known.clone();
        with_tx2.truncated.push(tx(2));
        new.learn_finished(&with_tx2);
        assert_eq!(new.evidence(tx(2), ra), E::Lock);
        // The checkpoint before plus the journal after rebuild the state.
        let log = new.drain_journal();
        assert!(matches!(
            log.as_slice(),
            [Mutation::LearnFinished(_), Mutation::LearnFinished(_)]
        ));
        let mut replayed =
            Participant::restore(NodeId(0), &cfg(), Some(&cp), &log).expect("restore");
        // A restored primary blocks its regions until lock recovery.
        replayed.durable.blocked = new.durable.blocked.clone();
        assert!(replayed.same_state(&new));
    }

    /// A node removed from the configuration and added back holds its old
    /// copy of a region, with a lock taken two configurations earlier. A
    /// replica listed as filling starts from an empty store, so the stale
    /// lock and versions go.
    #[test]
    fn a_replica_listed_as_filling_starts_empty() {
        let two = two_nodes();
        let mut b = Participant::new(NodeId(1), &two);
        let key: &[u8] = &[1];
        let rec = record(&b, tx(1), 5, &[key]);
        let region = rec.writes[0].region;
        b.handle(
            &[],
            &TxnRequest::CommitBackup {
                record: rec,
                write_ts: Timestamp(10),
            },
        );
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        let store = b.durable.stores.get(&region).expect("backup store");
        assert!(matches!(store.read(key, Timestamp(20)), Ok(Some(_))));
        let mut next = two.clone();
        next.placement = two.regions();
        next.config_id = 3;
        for r in next.placement.iter_mut().filter(|r| r.id == region) {
            r.filling = vec![NodeId(1)];
        }
        let added = b.reconfigure(&next);
        assert!(added.contains(&region));
        let store = b.durable.stores.get(&region).expect("backup store");
        assert_eq!(
            store.read(key, Timestamp(20)),
            Ok(None),
            "stale copy dropped"
        );
        // The stale copy is handed out to be freed off the process lock,
        // once.
        let gone = b.take_discarded();
        assert_eq!(gone.len(), 1, "the stale copy, and nothing else");
        assert!(matches!(gone[0].read(key, Timestamp(20)), Ok(Some(_))));
        assert!(b.take_discarded().is_empty());
        b.check_invariants();
        // A region no longer held here is handed out too.
        let mut after = next.clone();
        after.config_id = 4;
        for r in after.placement.iter_mut() {
            r.filling.clear();
            r.backups.retain(|n| *n != NodeId(1));
            if r.primary == NodeId(1) {
                r.primary = NodeId(0);
            }
        }
        let held_before = b.durable.stores.len();
        b.reconfigure(&after);
        assert!(b.durable.stores.is_empty(), "node 1 holds nothing in 4");
        assert_eq!(b.take_discarded().len(), held_before);
        // A participant about to be replaced gives up all it holds.
        let mut c = Participant::new(NodeId(1), &two);
        let held = c.durable.stores.len();
        assert!(held > 0);
        assert_eq!(c.take_all_stores().len(), held);
        assert!(c.durable.stores.is_empty());
    }

    /// Reconfigure `p` with `next`, in which node 1 becomes `r`'s primary
    /// and `node` its only, filling backup (its copy starts empty).
    fn refill_as_backup(p: &mut Participant, next: &mut Configuration, r: RegionId, node: NodeId) {
        let id = next.id();
        let info = next
            .placement
            .iter_mut()
            .find(|i| i.id == r)
            .expect("the region");
        info.primary = NodeId(1);
        info.backups = vec![node];
        info.filling = vec![node];
        info.last_primary_change = id;
        info.last_replica_change = id;
        p.reconfigure(next);
    }

    /// Node 0, primary of a region, committed three transactions there,
    /// none truncated yet: `tx(1)` writes key `a` at 10, `tx(2)` key `b`
    /// at 12 and `tx(3)` deletes `b` at 14. Then a configuration lists it
    /// as a filling backup of the region (a member that missed a stored
    /// configuration removing it and was re-added by the next, keeping its
    /// log), so its copy starts empty. Returns the
    /// participant, the records, the region and the keys `a`, `b`.
    fn refilled_under_committed_lock_records(
    ) -> (Participant, [LockRecord; 3], RegionId, [Vec<u8>; 2]) {
        let two = two_nodes();
        let node = NodeId(0);
        let mut p = Participant::new(node, &two);
        let r = p.durable.primary_for[0];
        let mut keys = (0u8..=255)
            .map(|k| vec![k, 7])
            .filter(|k| p.region_of(k) == r);
        let mut key = || keys.next().expect("a key of the region");
        let keys = [key(), key()];
        let write_a = record(&p, tx(1), 5, &[&keys[0]]);
        let write_b = record(&p, tx(2), 11, &[&keys[1]]);
        let mut delete_b = record(&p, tx(3), 13, &[&keys[1]]);
        delete_b.writes[0].value = None;
        commit_at_primary(&mut p, write_a.clone(), 10);
        commit_at_primary(&mut p, write_b.clone(), 12);
        commit_at_primary(&mut p, delete_b.clone(), 14);
        let mut next = two.renewed();
        refill_as_backup(&mut p, &mut next, r, node);
        assert_eq!(p.store(r).map(RegionStore::len), Some(0), "refilled");
        p.check_invariants();
        (p, [write_a, write_b, delete_b], r, keys)
    }

    /// The new primary's copy of the region, taken before it (a backup of
    /// the three transactions, its COMMIT-BACKUP records not yet applied)
    /// had any of them: key `a` at 3 only, safe point 2.
    fn merge_copy_without_the_writes(p: &mut Participant, r: RegionId, a: &[u8]) {
        let old = meridian_wire::ObjectCopy {
            key: a.to_vec(),
            versions: vec![(Timestamp(3), Some(b"old".to_vec()))],
            floor_ts: Timestamp(3),
        };
        p.merge_copies(r, None, &[old], true, Timestamp(2));
    }

    /// The value of `key` in `region` at a late timestamp.
    fn value_at(p: &Participant, region: RegionId, key: &[u8]) -> Option<Vec<u8>> {
        let store = p.durable.stores.get(&region).expect("the region's store");
        store
            .read(key, Timestamp(3_000))
            .expect("unlocked")
            .map(|v| v.value)
    }

    /// COMMIT-RECOVERY must not skip the writes this node's own LOCK
    /// record says it installed once the refill dropped the copy they were
    /// installed in: the new copy, filled from a source that does not have
    /// them yet, would keep missing a committed write (`a` would stay at
    /// its old value). The refill moves them to the
    /// replicated log as commit-primary evidence: the node still reports
    /// the commit, and COMMIT-RECOVERY puts them in place.
    #[test]
    fn commit_recovery_puts_a_refilled_copy_s_own_committed_writes_in_place() {
        let (mut p, [write_a, ..], r, [a, _]) = refilled_under_committed_lock_records();
        merge_copy_without_the_writes(&mut p, r, &a);
        let reported = p.recovering_records(ConfigId(9), r);
        let mine = reported
            .iter()
            .find(|t| t.record.tx == tx(1))
            .expect("the commit is still reported");
        assert_eq!(mine.evidence, meridian_wire::Evidence::CommitPrimary);
        assert_eq!(mine.write_ts, Some(Timestamp(10)));
        p.commit_recovery(r, &write_a, Timestamp(10));
        assert_eq!(
            value_at(&p, r, &a),
            Some(b"v".to_vec()),
            "the committed write is missing from the refilled copy"
        );
        p.check_invariants();
        p.truncate_recovery(tx(1));
        assert_eq!(value_at(&p, r, &a), Some(b"v".to_vec()));
        p.check_invariants();
    }

    /// A plain TRUNCATE of the refilled node's committed LOCK record must
    /// not drop its writes unapplied as if they were in place: truncation
    /// applies the moved writes, behind the new copy's fill fence. Where
    /// the source had applied them all and collected the delete's
    /// tombstone (safe point 40), the old write of the deleted key stays
    /// out, as for any record kept across a refill, so a refilled copy
    /// does not need the rule that a primary never reinstalls what it
    /// installed.
    #[test]
    fn truncation_puts_a_refilled_copy_s_own_committed_writes_in_place() {
        let (mut p, _, r, [a, b]) = refilled_under_committed_lock_records();
        merge_copy_without_the_writes(&mut p, r, &a);
        p.handle(
            &[tx(1), tx(2), tx(3)],
            &TxnRequest::Truncate { txs: vec![] },
        );
        assert_eq!(
            value_at(&p, r, &a),
            Some(b"v".to_vec()),
            "the committed write is missing from the refilled copy"
        );
        assert_eq!(value_at(&p, r, &b), None);
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
        let (mut q, _, r, [a, b]) = refilled_under_committed_lock_records();
        let copied = meridian_wire::ObjectCopy {
            key: a.clone(),
            versions: vec![(Timestamp(10), Some(b"v".to_vec()))],
            floor_ts: Timestamp(10),
        };
        q.merge_copies(r, None, &[copied], true, Timestamp(40));
        q.handle(
            &[tx(1), tx(2), tx(3)],
            &TxnRequest::Truncate { txs: vec![] },
        );
        assert_eq!(value_at(&q, r, &a), Some(b"v".to_vec()));
        assert_eq!(value_at(&q, r, &b), None, "a deleted key came back");
        assert!(q.store(r).is_some_and(|s| s.object(&b).is_none()));
        q.check_invariants();
    }

    /// The fill fence on a refilled copy: the source collected `b`'s
    /// delete (safe point 40), so its copy says nothing of `b`, and the old
    /// write of `b` that this node's log still holds (`tx(2)` at 12, whose
    /// delete's record is not here) must stay out when truncation puts the
    /// log's writes in place. With the injected bug `RefillUnfenced` the
    /// copy is merged without the fence, and the deleted key comes back.
    #[test]
    fn the_fill_fence_keeps_a_collected_delete_deleted() {
        let refill_and_truncate = |p: &mut Participant, r: RegionId, a: &[u8]| {
            let copied = meridian_wire::ObjectCopy {
                key: a.to_vec(),
                versions: vec![(Timestamp(10), Some(b"v".to_vec()))],
                floor_ts: Timestamp(10),
            };
            p.merge_copies(r, None, &[copied], true, Timestamp(40));
            p.handle(&[tx(1), tx(2)], &TxnRequest::Truncate { txs: vec![] });
        };
        let (mut p, _, r, [a, b]) = refilled_under_committed_lock_records();
        refill_and_truncate(&mut p, r, &a);
        assert_eq!(value_at(&p, r, &a), Some(b"v".to_vec()));
        assert_eq!(value_at(&p, r, &b), None, "a collected delete came back");
        p.check_invariants();
        #[cfg(feature = "sim-bugs")]
        {
            use meridian_bugs::{Bug, Bugs};
            let (mut q, _, r, [a, b]) = refilled_under_committed_lock_records();
            let bugs = Bugs::of(&[Bug::RefillUnfenced]);
            q.set_bugs(bugs.clone());
            refill_and_truncate(&mut q, r, &a);
            assert!(bugs.hits(Bug::RefillUnfenced) > 0, "the bug was never hit");
            assert_eq!(
                value_at(&q, r, &b),
                Some(b"v".to_vec()),
                "without the fence the deleted key must come back (the test must see it)"
            );
        }
    }
}
