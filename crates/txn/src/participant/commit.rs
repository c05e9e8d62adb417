//! The commit protocol at a participant (FaRM §4 steps 1–5, FaRMv2 §4.2
//! and Algorithm 2): reads and scans straight from storage, LOCK,
//! VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY, ABORT and TRUNCATE (with the
//! coordinators' low bounds, FaRM Table 1), and time-window GC.

use super::{Finish, Mutation, Participant};
use meridian_storage::log::LockState;
use meridian_storage::RegionStore;
use meridian_wire::{
    Conflict, KeyRange, RegionId, Rejection, Response, Timestamp, TxId, TxnRequest, TxnResponse,
};

/// FaRMv2 §4.2: a transaction's `write_ts` is after its `read_ts`.
fn check_write_ts(read_ts: Timestamp, write_ts: Timestamp) -> Result<(), Rejection> {
    if write_ts <= read_ts {
        return Err(Rejection::WriteTsNotAfterReadTs { read_ts, write_ts });
    }
    Ok(())
}

impl Participant {
    fn primary_store(&self, region: RegionId) -> Result<&RegionStore, Conflict> {
        if !self.durable.blocked.is_empty() && self.durable.blocked.contains(&region) {
            return Err(Conflict::Unavailable);
        }
        if !self.durable.primary_for.contains(&region) {
            return Err(if self.durable.stores.contains_key(&region) {
                Conflict::NotPrimary
            } else {
                Conflict::UnknownRegion
            });
        }
        self.durable
            .stores
            .get(&region)
            .ok_or(Conflict::UnknownRegion)
    }

    /// Serve a read straight from storage (no transaction state involved).
    pub fn read(&self, region: RegionId, key: &[u8], read_ts: Timestamp) -> TxnResponse {
        TxnResponse::Read(
            self.primary_store(region)
                .and_then(|s| s.read(key, read_ts)),
        )
    }

    /// A single-read transaction's read of `key`'s newest version at the
    /// primary of `region` ([`RegionStore::read_latest`]; FaRM §3).
    pub fn read_latest(&self, region: RegionId, key: &[u8]) -> TxnResponse {
        TxnResponse::ReadLatest(self.primary_store(region).and_then(|s| s.read_latest(key)))
    }

    /// [`Participant::read_latest`] without its lock check: the injected
    /// bug `LatestReadsPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_latest_past_locks(&self, region: RegionId, key: &[u8]) -> TxnResponse {
        TxnResponse::ReadLatest(
            self.primary_store(region)
                .map(|s| s.read_latest_past_locks(key)),
        )
    }

    /// [`Participant::read`] without its lock checks
    /// (`RegionStore::read_past_locks`): the injected bug
    /// `LockWaitsReadPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_past_locks(&self, region: RegionId, key: &[u8], read_ts: Timestamp) -> TxnResponse {
        TxnResponse::Read(
            self.primary_store(region)
                .and_then(|s| s.read_past_locks(key, read_ts)),
        )
    }

    /// True if another transaction (or lock recovery) holds the lock of a
    /// key `rec` writes here: a LOCK of `rec` would fail with
    /// `Conflict::Locked` now. For a waiting LOCK, which is tried again
    /// only once this is false (and journals nothing meanwhile).
    pub fn locked_by_another(&self, rec: &meridian_wire::LockRecord) -> bool {
        rec.writes.iter().any(|w| {
            self.durable
                .stores
                .get(&w.region)
                .is_some_and(|s| s.locked_by_another(rec.tx, &w.key))
        })
    }

    /// Serve a scan straight from storage, clamped to the region's range.
    pub fn scan(
        &self,
        region: RegionId,
        range: &KeyRange,
        limit: u32,
        read_ts: Timestamp,
    ) -> TxnResponse {
        let limit = limit.min(self.limits.max_scan_rows) as usize;
        TxnResponse::Scan(
            self.primary_store(region)
                .and_then(|s| s.scan(range, read_ts, limit, self.limits.max_scan_bytes)),
        )
    }

    /// Handle a transaction-protocol request; piggybacked `truncate` ids
    /// are processed first. A malformed request is answered with
    /// [`Response::Rejected`] before it touches any state.
    pub fn handle(&mut self, truncate: &[TxId], req: &TxnRequest) -> Response {
        self.stats.requests += 1;
        if let TxnRequest::CommitPrimary { tx, write_ts } = req {
            // Refused before it is logged: a logged COMMIT-PRIMARY below a
            // head would be refused again at every replay.
            if let Err(r) = self.check_above_heads(*tx, *write_ts) {
                self.stats.refused_below_head += 1;
                return Response::Rejected(r);
            }
        }
        let mutates = !truncate.is_empty()
            || matches!(
                req,
                TxnRequest::Lock(_)
                    | TxnRequest::LockBlind { .. }
                    | TxnRequest::CommitBackup { .. }
                    | TxnRequest::CommitPrimary { .. }
                    | TxnRequest::Abort { .. }
                    | TxnRequest::Truncate { .. }
            );
        if mutates {
            self.journal(|| Mutation::Request {
                truncate: truncate.to_vec(),
                req: req.clone(),
            });
        }
        if !truncate.is_empty() {
            self.truncate(truncate);
        }
        let ok = |r: TxnResponse| Response::Txn(r);
        match req {
            TxnRequest::Read {
                region,
                key,
                read_ts,
            } => ok(self.read(*region, key, *read_ts)),
            TxnRequest::ReadLatest { region, key } => ok(self.read_latest(*region, key)),
            TxnRequest::Scan {
                region,
                range,
                limit,
                read_ts,
            } => ok(self.scan(*region, range, *limit, *read_ts)),
            TxnRequest::Lock(rec) => match self.check_record(rec, true) {
                Ok(()) => ok(TxnResponse::Lock(self.lock(rec, &[]))),
                Err(r) => Response::Rejected(r),
            },
            TxnRequest::LockBlind { record, blind } => {
                let flags = if blind.len() == record.writes.len() {
                    Ok(())
                } else {
                    Err(Rejection::BlindFlagsMismatch {
                        writes: record.writes.len(),
                        flags: blind.len(),
                    })
                };
                match self.check_record(record, true).and(flags) {
                    Ok(()) => match self.lock(record, blind) {
                        Ok(()) => match self.blind_head(record, blind) {
                            head if head > record.read_ts => ok(TxnResponse::LockedAbove(head)),
                            _ => ok(TxnResponse::Lock(Ok(()))),
                        },
                        Err(c) => ok(TxnResponse::Lock(Err(c))),
                    },
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::Validate {
                tx,
                read_ts,
                keys,
                ranges,
            } => ok(TxnResponse::Validate(
                self.validate(*tx, *read_ts, keys, ranges),
            )),
            TxnRequest::CommitBackup { record, write_ts } => {
                match self
                    .check_record(record, false)
                    .and_then(|()| check_write_ts(record.read_ts, *write_ts))
                {
                    Ok(()) => {
                        self.commit_backup(record, *write_ts);
                        ok(TxnResponse::Ack)
                    }
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::CommitPrimary { tx, write_ts } => {
                match self.commit_primary(*tx, *write_ts) {
                    Ok(()) => ok(TxnResponse::Ack),
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::Abort { tx } => {
                self.abort(*tx);
                ok(TxnResponse::Ack)
            }
            TxnRequest::Truncate { txs } => {
                self.truncate(txs);
                ok(TxnResponse::Ack)
            }
            // The node holds it until its `write_ts` passed and hands the
            // participant only what it carries.
            TxnRequest::AfterWriteTs { .. } => Response::Rejected(Rejection::MalformedHold),
        }
    }

    /// Process a piggybacked TRUNCATE record: its ids, then its low bound.
    pub fn truncate_piggybacked(&mut self, t: &meridian_wire::Truncation) {
        if !t.txs.is_empty() || t.low.is_some() {
            self.journal(|| Mutation::Truncation(t.clone()));
        }
        if !t.txs.is_empty() {
            self.truncate(&t.txs);
        }
        if let Some(low) = t.low {
            if low.local <= self.low_bound(low.coordinator) {
                return;
            }
            self.durable.low_bounds.insert(low.coordinator, low.local);
            while self.durable.low_bounds.len() > self.limits.max_finished_ids {
                self.durable.low_bounds.pop_first();
            }
            // Records below the bound can only be stale duplicates (a LOCK
            // re-delivered after its ABORT once the finished set forgot
            // it) or records of a transaction whose ABORT this node refused
            // (its configuration had changed): the coordinator has finished
            // those transactions, so release them.
            let stale: Vec<TxId> = self
                .durable
                .log
                .primary
                .keys()
                .filter(|tx| tx.coordinator == low.coordinator && tx.local < low.local)
                .copied()
                .collect();
            for tx in stale {
                if matches!(
                    self.durable.log.primary.get(&tx),
                    Some((_, LockState::Locked))
                ) {
                    self.release_aborted_holds(tx);
                }
                self.abort(tx);
                self.truncate(&[tx]);
            }
        }
    }

    /// Release lock recovery's holds (FaRM §5.3 step 4) of `tx`, whose
    /// LOCK record here is still `Locked` below its coordinator's low bound
    /// (FaRM Table 1), in every region.
    ///
    /// Such a transaction was aborted by its coordinator: the bound passes
    /// a committed transaction only once its TRUNCATEs went out, and those
    /// go only after every COMMIT-PRIMARY was acknowledged (FaRM §4 step
    /// 5), which leaves no LOCK record `Locked`; and a coordinator aborts
    /// only before any COMMIT-BACKUP is sent
    /// ([`crate::Transaction::abandon`]). So no replica holds COMMIT-BACKUP
    /// or COMMIT-PRIMARY evidence of it and recovery can only decide abort
    /// (FaRM §5.3 steps 6–7): its holds guard no write a read could miss
    /// (unlike the holds of a committed transaction, which guard its
    /// writes until they are in place). They must go with the records, not
    /// wait for ABORT-RECOVERY: once the records are gone everywhere, no
    /// later configuration finds the transaction to recover, and a hold
    /// left behind would stay for good.
    fn release_aborted_holds(&mut self, tx: TxId) {
        self.release_recovery_holds(tx);
    }

    /// The low bound received from `coordinator` (0 if none).
    pub fn low_bound(&self, coordinator: u64) -> u64 {
        self.durable
            .low_bounds
            .get(&coordinator)
            .copied()
            .unwrap_or(0)
    }

    /// True if `tx` is finished here: aborted or truncated recently, or
    /// below its coordinator's low bound.
    pub(super) fn is_finished(&self, tx: TxId) -> bool {
        self.durable.finished.contains_key(&tx) || tx.local < self.low_bound(tx.coordinator)
    }

    /// Validate a LOCK (`as_primary`) or COMMIT-BACKUP record before it
    /// touches any state: non-empty, every key once, every key inside the
    /// region it names, sizes within [`Limits`]. A record that fails would
    /// otherwise reach a release-build assertion halfway through installing
    /// it.
    fn check_record(
        &self,
        rec: &meridian_wire::LockRecord,
        as_primary: bool,
    ) -> Result<(), Rejection> {
        if rec.writes.is_empty() {
            return Err(Rejection::EmptyRecord);
        }
        let mut seen = std::collections::BTreeSet::new();
        for w in &rec.writes {
            if w.key.len() > self.limits.max_key_bytes {
                return Err(Rejection::KeyTooLarge {
                    len: w.key.len(),
                    max: self.limits.max_key_bytes,
                });
            }
            if let Some(v) = &w.value {
                if v.len() > self.limits.max_value_bytes {
                    return Err(Rejection::ValueTooLarge {
                        len: v.len(),
                        max: self.limits.max_value_bytes,
                    });
                }
            }
            if self.map.region_of(&w.key).id != w.region {
                return Err(Rejection::WrongRegion {
                    key: w.key.clone(),
                    region: w.region,
                });
            }
            if !seen.insert(w.key.as_slice()) {
                return Err(Rejection::DuplicateKey { key: w.key.clone() });
            }
            let held = if as_primary {
                self.durable.primary_for.contains(&w.region)
            } else {
                self.durable.backup_for.contains(&w.region)
            };
            if !held {
                return Err(Rejection::WrongRole(format!(
                    "{} is not {} of {}",
                    self.node,
                    if as_primary { "primary" } else { "a backup" },
                    w.region
                )));
            }
        }
        Ok(())
    }

    pub(super) fn finish(&mut self, tx: TxId, how: Finish) {
        if self.durable.finished.insert(tx, how).is_none() {
            self.durable.finished_order.push_back(tx);
            while self.durable.finished_order.len() > self.limits.max_finished_ids {
                if let Some(old) = self.durable.finished_order.pop_front() {
                    self.durable.finished.remove(&old);
                }
            }
        }
    }

    /// LOCK (FaRM §4 step 1, FaRMv2 Algorithm 2 LockAtTs): lock every
    /// write of `rec` or none. A write whose `blind` flag is set (missing
    /// flags count as unset: plain [`TxnRequest::Lock`]) is locked without
    /// the check against `rec.read_ts` ([`TxnRequest::LockBlind`]).
    fn lock(&mut self, rec: &meridian_wire::LockRecord, blind: &[bool]) -> Result<(), Conflict> {
        if self.durable.log.primary.contains_key(&rec.tx) {
            return Ok(()); // duplicate delivery
        }
        if self.is_finished(rec.tx) {
            // Aborted (the coordinator gave up and its ABORT overtook this
            // LOCK) or already truncated: never lock for it again.
            return Err(Conflict::Finished);
        }
        if self.durable.log.len() >= self.limits.max_log_records {
            return Err(Conflict::Overloaded);
        }
        if !self.durable.blocked.is_empty()
            && rec
                .writes
                .iter()
                .any(|w| self.durable.blocked.contains(&w.region))
        {
            return Err(Conflict::Unavailable);
        }
        let mut locked = 0;
        let mut result = Ok(());
        for (i, w) in rec.writes.iter().enumerate() {
            let store = self
                .durable
                .stores
                .get_mut(&w.region)
                .ok_or(Conflict::UnknownRegion)?;
            let blind_write = blind.get(i).copied().unwrap_or(false);
            let unchecked =
                blind_write || meridian_bugs::bug!(self.bugs, LocksUnchecked, if !blind_write);
            let check = (!unchecked).then_some(rec.read_ts);
            if let Err(c) = store.lock(rec.tx, &w.key, check) {
                result = Err(c);
                break;
            }
            locked += 1;
        }
        if let Err(c) = result {
            for w in &rec.writes[..locked] {
                if let Some(s) = self.durable.stores.get_mut(&w.region) {
                    s.unlock(rec.tx, &w.key);
                }
            }
            self.stats.lock_conflicts += 1;
            return Err(c);
        }
        self.durable
            .log
            .primary
            .insert(rec.tx, (rec.clone(), LockState::Locked));
        Ok(())
    }

    fn validate(
        &mut self,
        tx: TxId,
        read_ts: Timestamp,
        keys: &[(RegionId, Vec<u8>)],
        ranges: &[(RegionId, KeyRange)],
    ) -> Result<(), Conflict> {
        let r = (|| {
            for (region, key) in keys {
                self.primary_store(*region)?
                    .validate_key(tx, key, read_ts)?;
            }
            for (region, range) in ranges {
                self.primary_store(*region)?
                    .validate_range(tx, range, read_ts)?;
            }
            Ok(())
        })();
        if r.is_err() {
            self.stats.validation_failures += 1;
        }
        r
    }

    fn commit_backup(&mut self, record: &meridian_wire::LockRecord, write_ts: Timestamp) {
        if self.is_finished(record.tx) {
            return; // a duplicate after TRUNCATE: already applied
        }
        if self.durable.log.backup.len() >= self.limits.max_log_records {
            // Log full: apply the record now instead of lazily. The coordinator
            // only sends COMMIT-BACKUP after deciding to commit.
            self.apply_backup(record, write_ts);
            return;
        }
        self.durable
            .log
            .backup
            .insert(record.tx, (record.clone(), write_ts));
    }

    pub(super) fn apply_backup(&mut self, record: &meridian_wire::LockRecord, write_ts: Timestamp) {
        for w in &record.writes {
            if let Some(s) = self.durable.stores.get_mut(&w.region) {
                s.apply_backup(&w.key, write_ts, w.value.clone());
            } else {
                continue;
            }
            self.note_installed(w.region, &w.key);
        }
        self.stats.backup_applied += 1;
    }

    /// The newest version's `write_ts` among the keys of `rec` written
    /// blind (`Timestamp::ZERO` if none): a blind lock skips the check
    /// against `read_ts`, so a head may lie above it. Stable while `rec`'s
    /// transaction holds the locks (only it installs there), so a resent
    /// LOCK is answered the same.
    fn blind_head(&self, rec: &meridian_wire::LockRecord, blind: &[bool]) -> Timestamp {
        rec.writes
            .iter()
            .zip(blind)
            .filter(|(_, b)| **b)
            .filter_map(|(w, _)| self.durable.stores.get(&w.region)?.object(&w.key))
            .map(|o| o.head_ts())
            .max()
            .unwrap_or(Timestamp::ZERO)
    }

    /// A COMMIT-PRIMARY of `tx` at `write_ts` installs above every head of
    /// the keys it writes here (the version order the store asserts): an
    /// honest coordinator takes `write_ts` above every head a
    /// [`TxnResponse::LockedAbove`] reported. Errors:
    /// [`Rejection::WriteTsNotAfterReadTs`], [`Rejection::WriteTsNotAboveHead`].
    /// No LOCK record, or one already committed: nothing to check.
    fn check_above_heads(&self, tx: TxId, write_ts: Timestamp) -> Result<(), Rejection> {
        let Some((rec, LockState::Locked)) = self.durable.log.primary.get(&tx) else {
            return Ok(());
        };
        check_write_ts(rec.read_ts, write_ts)?;
        for w in &rec.writes {
            let head = self
                .durable
                .stores
                .get(&w.region)
                .and_then(|s| s.object(&w.key))
                .map_or(Timestamp::ZERO, |o| o.head_ts());
            if head >= write_ts {
                return Err(Rejection::WriteTsNotAboveHead {
                    key: w.key.clone(),
                    head,
                    write_ts,
                });
            }
        }
        Ok(())
    }

    fn commit_primary(&mut self, tx: TxId, write_ts: Timestamp) -> Result<(), Rejection> {
        let Some((rec, state)) = self.durable.log.primary.get_mut(&tx) else {
            return Err(Rejection::NoLockRecord);
        };
        if *state != LockState::Locked {
            return Ok(()); // duplicate
        }
        // Checked before it was logged too (`check_above_heads`): a checked
        // lock keeps every head at or below read_ts, and a blind one's
        // heads are below write_ts by that check.
        check_write_ts(rec.read_ts, write_ts)?;
        *state = LockState::Committed(write_ts);
        let mut changed = Vec::with_capacity(rec.writes.len());
        for w in &rec.writes {
            if let Some(s) = self.durable.stores.get_mut(&w.region) {
                s.install(tx, &w.key, write_ts, w.value.clone());
                changed.push((w.region, w.key.clone()));
            }
        }
        for (region, key) in changed {
            self.note_installed(region, &key);
        }
        self.stats.commits += 1;
        Ok(())
    }

    pub(super) fn abort(&mut self, tx: TxId) {
        if matches!(
            self.durable.log.primary.get(&tx),
            Some((_, LockState::Committed(_)))
        ) {
            return; // committed here: an ABORT cannot undo it
        }
        self.finish(tx, Finish::Aborted);
        if let Some((rec, LockState::Locked)) = self.durable.log.primary.get(&tx) {
            for w in &rec.writes {
                if let Some(s) = self.durable.stores.get_mut(&w.region) {
                    s.unlock(tx, &w.key);
                }
            }
            self.durable.log.primary.remove(&tx);
        }
    }

    pub(super) fn truncate(&mut self, txs: &[TxId]) {
        for tx in txs {
            self.finish(*tx, Finish::Truncated);
            // COMMIT-RECOVERY's marks end with any truncation, not only
            // TRUNCATE-RECOVERY: the finished set now says the same
            // (evidence `Truncated`, which recovery counts as committed),
            // and a plain TRUNCATE whose TRUNCATE-RECOVERY never comes
            // would otherwise leave them here for good.
            self.durable.recovered.remove(tx);
            if !self.durable.recovered_regions.is_empty() {
                let done: Vec<(TxId, RegionId)> = self
                    .durable
                    .recovered_regions
                    .range((*tx, RegionId(0))..=(*tx, RegionId(u32::MAX)))
                    .copied()
                    .collect();
                for k in done {
                    self.durable.recovered_regions.remove(&k);
                }
            }
            // Regions whose writes of `tx` are in place here once the
            // records below are applied.
            let mut applied: std::collections::BTreeSet<RegionId> =
                std::collections::BTreeSet::new();
            if let Some((_, LockState::Committed(_))) = self.durable.log.primary.get(tx) {
                if let Some((rec, _)) = self.durable.log.primary.remove(tx) {
                    applied.extend(rec.writes.iter().map(|w| w.region));
                }
            }
            if let Some((rec, wts)) = self.durable.log.backup.remove(tx) {
                applied.extend(rec.writes.iter().map(|w| w.region));
                self.apply_backup(&rec, wts);
            }
            // Only committed transactions are truncated: a replicated
            // record is applied like a COMMIT-BACKUP record. One without
            // `write_ts` (evidence Lock) is never left here holding a key:
            // the coordinator's TRUNCATE names only transactions whose
            // every COMMIT-PRIMARY was acknowledged, so in their
            // configuration every replica of every written region logged
            // a COMMIT-BACKUP or committed LOCK record with `write_ts`, and
            // every later report and REPLICATE-TX-STATE of them carries it
            // (FaRM §5.3 steps 3–5); any other transaction is truncated
            // only by TRUNCATE-RECOVERY, sent once every replica of every
            // region with a record acknowledged its COMMIT-RECOVERY, which
            // takes the replicated record, installs it and releases its
            // regions' holds (step 7); and the low bound's release of an
            // aborted transaction's records releases its holds first
            // (`release_aborted_holds`).
            if let Some((rec, _, Some(wts))) = self.durable.log.replicated.remove(tx) {
                applied.extend(rec.writes.iter().map(|w| w.region));
                self.apply_backup(&rec, wts);
            }
            // A truncated transaction committed (its coordinator truncates
            // only after every COMMIT-PRIMARY was acknowledged), so lock
            // recovery's holds of it in regions whose writes are now in
            // place here go: the recovery that took them may never decide
            // it (its coordinator left before deciding, and the next
            // configuration finds no record of it here to vote on, so the
            // key would stay held for good). A hold in a region whose
            // writes this node does not know stays until that region's
            // COMMIT-RECOVERY: a read there would miss the write.
            for r in applied {
                if let Some(keys) = self.durable.recovery_held.remove(&(*tx, r)) {
                    meridian_bugs::mark!(
                        "a truncation releases lock recovery's holds on installed regions"
                    );
                    if let Some(store) = self.durable.stores.get_mut(&r) {
                        for k in &keys {
                            store.recovery_unlock(*tx, k);
                        }
                    }
                }
            }
        }
    }

    /// Advance GC on every replica to `safe_point` (time-window GC: the
    /// runtime passes its clock's lower bound minus `gc_window_ms`).
    ///
    /// The safe point is held below the oldest COMMIT-BACKUP record not yet
    /// applied: backups apply at truncation, in any order across
    /// coordinators, and a tombstone collected before an older write
    /// arrives would let that write resurrect the deleted key.
    pub fn gc(&mut self, safe_point: Timestamp) {
        if self.journal.is_some() && safe_point != self.durable.journaled_gc {
            self.durable.journaled_gc = safe_point;
            self.journal(|| Mutation::Gc(safe_point));
        }
        let oldest_pending = self
            .durable
            .log
            .backup
            .values()
            .map(|(_, wts)| *wts)
            .chain(
                self.durable
                    .log
                    .replicated
                    .values()
                    .filter_map(|(_, _, w)| *w),
            )
            .min()
            .map_or(safe_point, |w| Timestamp(w.0.saturating_sub(1)));
        let safe_point = safe_point.min(oldest_pending);
        for s in self.durable.stores.values_mut() {
            s.gc(safe_point);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::testing::{assert_deleted, cfg, commit_backup, record, tx};
    use meridian_config::Configuration;
    use meridian_wire::NodeId;

    /// A LOCK record naming one key twice is refused before it touches any
    /// state: locked (idempotently), it would panic in `install` at
    /// COMMIT-PRIMARY halfway through the record, leaving the node dead and
    /// keys locked.
    #[test]
    fn lock_record_with_a_duplicate_key_is_rejected_untouched() {
        let mut p = Participant::new(NodeId(0), &cfg());
        let rec = record(&p, tx(1), 10, &[b"a", b"a"]);
        let r = p.handle(&[], &TxnRequest::Lock(rec));
        assert_eq!(
            r,
            Response::Rejected(Rejection::DuplicateKey { key: b"a".to_vec() })
        );
        assert_eq!(p.log_len(), 0);
        assert_eq!(p.object_count(), 0, "nothing locked");
        // Even if a coordinator now sends COMMIT-PRIMARY, nothing panics.
        let r = p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        assert_eq!(r, Response::Rejected(Rejection::NoLockRecord));
        p.check_invariants();
    }

    /// A blind LOCK (no version check) on a key whose head lies above
    /// `read_ts` is granted and answered `LockedAbove(head)`, so an honest
    /// coordinator takes `write_ts` above the head. A COMMIT-PRIMARY below
    /// the head (a coordinator that ignored it, or a forged one) is refused
    /// before it is logged and counted, and nothing panics; one above the
    /// head installs.
    #[test]
    fn a_blind_lock_reports_the_head_and_a_commit_below_it_is_refused_unlogged() {
        let mut p = Participant::new(NodeId(0), &cfg());
        let w = record(&p, tx(1), 900, &[b"k"]);
        p.handle(&[], &TxnRequest::Lock(w));
        let at_1000 = TxnRequest::CommitPrimary {
            tx: tx(1),
            write_ts: Timestamp(1000),
        };
        assert_eq!(p.handle(&[], &at_1000), Response::Txn(TxnResponse::Ack));
        p.enable_journal();
        let blind = TxnRequest::LockBlind {
            record: record(&p, tx(2), 1, &[b"k"]),
            blind: vec![true],
        };
        assert_eq!(
            p.handle(&[], &blind),
            Response::Txn(TxnResponse::LockedAbove(Timestamp(1000)))
        );
        // A resent LOCK is answered the same.
        assert_eq!(
            p.handle(&[], &blind),
            Response::Txn(TxnResponse::LockedAbove(Timestamp(1000)))
        );
        let logged = p.drain_journal().len();
        let below = TxnRequest::CommitPrimary {
            tx: tx(2),
            write_ts: Timestamp(2),
        };
        assert_eq!(
            p.handle(&[], &below),
            Response::Rejected(Rejection::WriteTsNotAboveHead {
                key: b"k".to_vec(),
                head: Timestamp(1000),
                write_ts: Timestamp(2),
            })
        );
        assert!(p.drain_journal().is_empty(), "refused before it is logged");
        assert_eq!(p.stats().refused_below_head, 1);
        assert!(logged > 0);
        let above = TxnRequest::CommitPrimary {
            tx: tx(2),
            write_ts: Timestamp(1001),
        };
        assert_eq!(p.handle(&[], &above), Response::Txn(TxnResponse::Ack));
        p.check_invariants();
    }

    /// COMMIT-PRIMARY with `write_ts <= read_ts` is refused before any
    /// state changes (it would reach the `install` assertion); the lock
    /// stays until the coordinator aborts.
    #[test]
    fn commit_primary_with_write_ts_not_after_read_ts_is_rejected_untouched() {
        let mut p = Participant::new(NodeId(0), &cfg());
        // A committed version at 50 on "b"; a transaction that read at 60.
        let w = record(&p, tx(1), 40, &[b"b"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(w)),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let c = TxnRequest::CommitPrimary {
            tx: tx(1),
            write_ts: Timestamp(50),
        };
        assert_eq!(p.handle(&[], &c), Response::Txn(TxnResponse::Ack));
        let rec = record(&p, tx(2), 60, &[b"a", b"b"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let bad = TxnRequest::CommitPrimary {
            tx: tx(2),
            write_ts: Timestamp(30),
        };
        assert_eq!(
            p.handle(&[], &bad),
            Response::Rejected(Rejection::WriteTsNotAfterReadTs {
                read_ts: Timestamp(60),
                write_ts: Timestamp(30)
            })
        );
        p.check_invariants();
        // The abort releases both locks; the old version is intact.
        assert_eq!(
            p.handle(&[], &TxnRequest::Abort { tx: tx(2) }),
            Response::Txn(TxnResponse::Ack)
        );
        p.check_invariants();
        assert_eq!(
            p.read(p.region_of(b"b"), b"b", Timestamp(70)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(50),
                value: b"v".to_vec()
            })))
        );
    }

    #[test]
    fn misdirected_and_oversized_records_are_rejected() {
        let mut p = Participant::new(NodeId(0), &cfg());
        let mut rec = record(&p, tx(1), 10, &[b"a"]);
        rec.writes[0].region = RegionId(p.region_of(b"a").0 + 1);
        assert!(matches!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Rejected(Rejection::WrongRegion { .. })
        ));
        let mut rec = record(&p, tx(2), 10, &[b"a"]);
        rec.writes[0].value = Some(vec![0; p.limits.max_value_bytes + 1]);
        assert!(matches!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Rejected(Rejection::ValueTooLarge { .. })
        ));
        let rec = record(&p, tx(3), 10, &[b"a"]);
        assert!(matches!(
            p.handle(
                &[],
                &TxnRequest::CommitBackup {
                    record: rec,
                    write_ts: Timestamp(10)
                }
            ),
            Response::Rejected(_)
        ));
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
    }

    /// A LOCK that arrives after the coordinator's ABORT (the coordinator
    /// timed out and abandoned the transaction; the network reordered the
    /// two) must not lock anything: nobody would ever release it.
    #[test]
    fn a_lock_overtaken_by_its_abort_is_refused() {
        let mut p = Participant::new(NodeId(0), &cfg());
        assert_eq!(
            p.handle(&[], &TxnRequest::Abort { tx: tx(1) }),
            Response::Txn(TxnResponse::Ack)
        );
        let rec = record(&p, tx(1), 10, &[b"a"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Txn(TxnResponse::Lock(Err(Conflict::Finished)))
        );
        assert_eq!(p.object_count(), 0);
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
    }

    /// FaRM Table 1's low bound: a stale LOCK below it is refused, and a
    /// record below it (a duplicate LOCK that re-locked after its ABORT was
    /// forgotten) is released when the bound arrives.
    #[test]
    fn a_low_bound_refuses_and_releases_stale_records() {
        let mut c = cfg();
        c.limits.max_finished_ids = 1;
        let mut p = Participant::new(NodeId(0), &c);
        let lock = |p: &mut Participant, l: u64| {
            let rec = record(p, tx(l), 10, &[b"a"]);
            p.handle(&[], &TxnRequest::Lock(rec))
        };
        // tx 1 aborted; tx 2 finished pushes it out of the finished set; a
        // duplicate LOCK of tx 1 then locks again.
        assert_eq!(lock(&mut p, 1), Response::Txn(TxnResponse::Lock(Ok(()))));
        p.handle(&[], &TxnRequest::Abort { tx: tx(1) });
        p.handle(&[], &TxnRequest::Abort { tx: tx(2) });
        assert_eq!(lock(&mut p, 1), Response::Txn(TxnResponse::Lock(Ok(()))));
        assert_eq!(p.log_len(), 1);
        // The coordinator says everything below 3 is finished.
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(0).coordinator,
                local: 3,
            }),
        });
        assert_eq!(p.low_bound(tx(0).coordinator), 3);
        assert_eq!(p.log_len(), 0, "the stale record is released");
        p.check_invariants();
        assert_eq!(
            lock(&mut p, 1),
            Response::Txn(TxnResponse::Lock(Err(Conflict::Finished)))
        );
        assert_eq!(lock(&mut p, 3), Response::Txn(TxnResponse::Lock(Ok(()))));
        p.check_invariants();
    }

    /// A scan reply stays far below the frame limit: rows beyond
    /// `max_scan_bytes` are left for the next request.
    #[test]
    fn scan_replies_are_bounded_in_bytes() {
        let mut c = cfg();
        c.limits.max_scan_bytes = 250;
        let mut p = Participant::new(NodeId(0), &c);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            let mut rec = record(&p, tx(i as u64), 10, &[*k]);
            rec.writes[0].value = Some(vec![7; 100]);
            assert_eq!(
                p.handle(&[], &TxnRequest::Lock(rec)),
                Response::Txn(TxnResponse::Lock(Ok(())))
            );
            let c = TxnRequest::CommitPrimary {
                tx: tx(i as u64),
                write_ts: Timestamp(20),
            };
            assert_eq!(p.handle(&[], &c), Response::Txn(TxnResponse::Ack));
        }
        let range = KeyRange {
            start: b"a".to_vec(),
            end: Some(b"d".to_vec()),
        };
        match p.scan(p.region_of(b"a"), &range, 100, Timestamp(30)) {
            TxnResponse::Scan(Ok((rows, more))) => {
                assert_eq!(rows.len(), 2);
                assert!(more);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A backup applies a delete (truncated first) and then an older write
    /// of the same key (truncated later): GC stays below the oldest
    /// COMMIT-BACKUP record not yet applied, so the delete's tombstone is
    /// still there and the older write does not resurrect the key.
    #[test]
    fn gc_never_lets_an_older_backup_write_resurrect_a_deleted_key() {
        let two = Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"));
        let mut b = Participant::new(NodeId(1), &two);
        let key: &[u8] = &[1];
        let older = record(&b, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        let mut delete = record(&b, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        for (rec, wts) in [(older, 10), (delete, 20)] {
            commit_backup(&mut b, rec, wts);
        }
        // The delete's coordinator truncates first; GC runs far ahead.
        b.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(1_000));
        // Then the older write is truncated and applied.
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(2_000));
        assert_deleted(&b, region, key);
        b.check_invariants();
    }
}
