//! Locks of a region replica (FaRM §4 steps 1–3, FaRMv2 Algorithm 2):
//! LockAtTs, unlock, read-set and range validation, and lock recovery's
//! holds (FaRM §5.3 step 4).

use crate::{check_range, Object, RegionStore, StoreKey};
use meridian_wire::{Conflict, KeyRange, Timestamp, TxId};

impl RegionStore {
    /// LockAtTs (FaRMv2 Algorithm 2): lock `key` for `tx` unless it is locked
    /// by another transaction or, with `check = Some(read_ts)`, has a
    /// version newer than `read_ts`. `check = None` locks a blind write
    /// (the transaction did not read `key`; `TxnRequest::LockBlind` says
    /// why no version check is needed). Idempotent for the same `tx`.
    ///
    /// A checked `read_ts` below the GC safe point is refused, exactly as
    /// validation refuses it: GC may have removed a deleted object
    /// entirely, and an absent object would then look unchanged since
    /// `read_ts` (a lost update over a concurrent delete).
    ///
    /// Errors: [`Conflict::Locked`], [`Conflict::Changed`], [`Conflict::TooOld`].
    pub fn lock(&mut self, tx: TxId, key: &[u8], check: Option<Timestamp>) -> Result<(), Conflict> {
        if check.is_some_and(|read_ts| read_ts < self.safe_point) {
            return Err(Conflict::TooOld);
        }
        if self.recovery_locked(key) {
            return Err(Conflict::Locked);
        }
        let obj = match self.objects.get_mut(key) {
            Some(o) => o,
            None => self.objects.entry(StoreKey::from_slice(key)).or_default(),
        };
        match obj.lock.as_deref() {
            Some(&holder) if holder == tx => return Ok(()),
            Some(_) => return Err(Conflict::Locked),
            None => {}
        }
        if check.is_some_and(|read_ts| obj.head_ts() > read_ts) {
            return Err(Conflict::Changed);
        }
        obj.lock = Some(Box::new(tx));
        Ok(())
    }

    /// True if `key` is locked by a transaction other than `tx`, or held
    /// by lock recovery: [`RegionStore::lock`] would fail with
    /// [`Conflict::Locked`].
    pub fn locked_by_another(&self, tx: TxId, key: &[u8]) -> bool {
        self.recovery_locked(key)
            || self
                .objects
                .get(key)
                .and_then(|o| o.lock.as_deref())
                .is_some_and(|&holder| holder != tx)
    }

    /// Release `tx`'s lock on `key` (no-op if not held by `tx`); removes a
    /// placeholder object created only for the lock.
    pub fn unlock(&mut self, tx: TxId, key: &[u8]) {
        if let Some(obj) = self.objects.get_mut(key) {
            if obj.lock.as_deref() == Some(&tx) {
                obj.lock = None;
                if obj.versions.is_empty() {
                    self.objects.remove(key);
                }
            }
        }
    }

    /// VALIDATE one key read by `tx` at `read_ts`: unlocked (except by `tx`)
    /// and unchanged since `read_ts`.
    ///
    /// Errors: [`Conflict::Locked`], [`Conflict::Changed`], [`Conflict::TooOld`].
    pub fn validate_key(&self, tx: TxId, key: &[u8], read_ts: Timestamp) -> Result<(), Conflict> {
        if read_ts < self.safe_point {
            return Err(Conflict::TooOld);
        }
        if self.recovery_locked(key) {
            return Err(Conflict::Locked);
        }
        match self.objects.get(key) {
            None => Ok(()),
            Some(obj) => Self::validate_obj(tx, obj, read_ts),
        }
    }

    fn validate_obj(tx: TxId, obj: &Object, read_ts: Timestamp) -> Result<(), Conflict> {
        match obj.lock.as_deref() {
            Some(&holder) if holder != tx => return Err(Conflict::Locked),
            _ => {}
        }
        if obj.head_ts() > read_ts {
            return Err(Conflict::Changed);
        }
        Ok(())
    }

    /// VALIDATE a scanned range against phantoms: no key in `range` was
    /// inserted, deleted or changed after `read_ts`, and none is locked by
    /// another transaction.
    ///
    /// Errors: as [`RegionStore::validate_key`].
    pub fn validate_range(
        &self,
        tx: TxId,
        range: &KeyRange,
        read_ts: Timestamp,
    ) -> Result<(), Conflict> {
        if read_ts < self.safe_point {
            return Err(Conflict::TooOld);
        }
        self.check_recovery_range(range)?;
        for obj in self
            .objects
            .range::<_, [u8]>(check_range(range))
            .map(|(_, o)| o)
        {
            Self::validate_obj(tx, obj, read_ts)?;
        }
        Ok(())
    }

    pub(crate) fn recovery_locked(&self, key: &[u8]) -> bool {
        !self.recovery_locks.is_empty() && self.recovery_locks.contains_key(key)
    }

    pub(crate) fn check_recovery_range(&self, range: &KeyRange) -> Result<(), Conflict> {
        if !self.recovery_locks.is_empty()
            && self
                .recovery_locks
                .range::<[u8], _>(check_range(range))
                .next()
                .is_some()
        {
            return Err(Conflict::Locked);
        }
        Ok(())
    }

    /// FaRM §5.3 step 4: hold `key` for recovering transaction `tx` (no
    /// version check: the transaction already holds, or held, the lock at
    /// the old primary). Idempotent.
    pub fn recovery_lock(&mut self, tx: TxId, key: &[u8]) {
        self.recovery_locks
            .entry(key.to_vec())
            .or_default()
            .insert(tx);
    }

    /// Release `tx`'s recovery hold (and its ordinary lock) on `key`.
    pub fn recovery_unlock(&mut self, tx: TxId, key: &[u8]) {
        if let Some(set) = self.recovery_locks.get_mut(key) {
            set.remove(&tx);
            if set.is_empty() {
                self.recovery_locks.remove(key);
            }
        }
        self.unlock(tx, key);
    }

    /// Keys held by recovery (for invariants and status).
    pub fn recovery_lock_count(&self) -> usize {
        self.recovery_locks.len()
    }

    /// True if `tx` holds a recovery lock on `key`.
    pub fn holds_recovery_lock(&self, tx: TxId, key: &[u8]) -> bool {
        self.recovery_locks
            .get(key)
            .is_some_and(|s| s.contains(&tx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ts, tx};

    /// FaRM §5.3 step 4: two recovering transactions may hold one key; it
    /// stays locked to readers, lockers, validators and scans until both
    /// are decided.
    #[test]
    fn recovery_locks_hold_a_key_until_every_holder_is_decided() {
        let mut s = RegionStore::new(4);
        s.apply_backup(b"k", ts(10), Some(vec![1]));
        s.recovery_lock(tx(1), b"k");
        s.recovery_lock(tx(2), b"k");
        let all = KeyRange {
            start: vec![],
            end: None,
        };
        s.recovery_unlock(tx(1), b"k");
        assert_eq!(s.read(b"k", ts(20)), Err(Conflict::Locked));
        assert_eq!(s.lock(tx(3), b"k", Some(ts(20))), Err(Conflict::Locked));
        assert_eq!(s.validate_key(tx(3), b"k", ts(20)), Err(Conflict::Locked));
        assert_eq!(
            s.scan(&all, ts(20), 10, 1 << 20).map(|_| ()),
            Err(Conflict::Locked)
        );
        s.recovery_unlock(tx(2), b"k");
        assert_eq!(s.read(b"k", ts(20)).unwrap().unwrap().version, ts(10));
        s.check_invariants();
    }

    /// A reader meets a lock: it reads past it only when the head version
    /// is already newer than its `read_ts` (the lock holder's `write_ts`
    /// must then exceed the head's, so it cannot enter the snapshot);
    /// otherwise the lock holder might commit below `read_ts`, and the read
    /// aborts. Scans follow the same rule.
    #[test]
    fn a_read_passes_a_lock_only_below_a_newer_head() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"k", ts(10), Some(vec![1]));
        s.install(tx(2), b"k", ts(20), Some(vec![2]));
        s.lock(tx(3), b"k", Some(ts(25))).unwrap();
        // read_ts 15 < head 20: the version at 15 is final.
        let v = s.read(b"k", ts(15)).unwrap().unwrap();
        assert_eq!((v.version, v.value), (ts(10), vec![1]));
        // read_ts 20 and 30 >= head: the holder may commit at 21..=30.
        assert_eq!(s.read(b"k", ts(20)), Err(Conflict::Locked));
        assert_eq!(s.read(b"k", ts(30)), Err(Conflict::Locked));
        let all = KeyRange {
            start: b"a".to_vec(),
            end: None,
        };
        let (rows, _) = s.scan(&all, ts(15), 10, usize::MAX).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1.version, ts(10));
        assert_eq!(s.scan(&all, ts(20), 10, usize::MAX), Err(Conflict::Locked));
        // An insert's lock placeholder has no head: always locked.
        s.lock(tx(4), b"new", Some(ts(1))).unwrap();
        assert_eq!(s.read(b"new", ts(1)), Err(Conflict::Locked));
        // Validation is unchanged: a read-write reader at 15 fails on the
        // newer head anyway.
        assert!(s.validate_key(tx(5), b"k", ts(15)).is_err());
        s.check_invariants();
    }

    #[test]
    fn lock_at_ts_rejects_newer_versions_and_other_holders() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"k", ts(10), Some(vec![1]));
        assert_eq!(s.lock(tx(2), b"k", Some(ts(9))), Err(Conflict::Changed));
        s.lock(tx(2), b"k", Some(ts(10))).unwrap();
        s.lock(tx(2), b"k", Some(ts(10))).unwrap();
        assert_eq!(s.lock(tx(3), b"k", Some(ts(50))), Err(Conflict::Locked));
        assert_eq!(s.validate_key(tx(3), b"k", ts(50)), Err(Conflict::Locked));
        assert_eq!(s.validate_key(tx(2), b"k", ts(50)), Ok(()));
        s.unlock(tx(2), b"k");
        assert_eq!(s.validate_key(tx(3), b"k", ts(9)), Err(Conflict::Changed));
        // Lock placeholder for an insert disappears on unlock.
        s.lock(tx(4), b"new", Some(ts(1))).unwrap();
        s.unlock(tx(4), b"new");
        assert!(s.object(b"new").is_none());
        s.check_invariants();
    }

    /// A blind write (`check = None`) locks past a newer version and below
    /// the safe point, but never past another holder; its install still
    /// lands above the head, and a scan's validation still sees the change.
    #[test]
    fn blind_locks_skip_the_version_check_but_not_the_lock() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"k", ts(10), Some(vec![1]));
        s.gc(ts(8));
        assert_eq!(s.lock(tx(2), b"k", Some(ts(5))), Err(Conflict::TooOld));
        assert_eq!(s.lock(tx(2), b"k", Some(ts(9))), Err(Conflict::Changed));
        assert!(!s.locked_by_another(tx(3), b"k"));
        s.lock(tx(2), b"k", None).unwrap();
        assert_eq!(s.lock(tx(3), b"k", None), Err(Conflict::Locked));
        assert!(s.locked_by_another(tx(3), b"k"));
        assert!(!s.locked_by_another(tx(2), b"k"));
        let all = KeyRange {
            start: Vec::new(),
            end: None,
        };
        assert_eq!(s.validate_range(tx(2), &all, ts(9)), Err(Conflict::Changed));
        s.install(tx(2), b"k", ts(20), Some(vec![2]));
        s.lock(tx(3), b"k", None).unwrap();
        s.check_invariants();
    }

    /// T reads k, k is deleted and the tombstone collected,
    /// then T locks k. The object is gone, so only the safe point can tell
    /// that k changed after T's `read_ts`.
    #[test]
    fn lock_below_the_safe_point_is_refused_after_a_collected_delete() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"k", ts(10), Some(vec![1]));
        // T reads k at 20 and sees version 10.
        assert_eq!(s.read(b"k", ts(20)).unwrap().unwrap().version, ts(10));
        // A concurrent transaction deletes k at 30; GC collects the tombstone.
        s.lock(tx(2), b"k", Some(ts(25))).unwrap();
        s.install(tx(2), b"k", ts(30), None);
        s.gc(ts(40));
        assert!(s.object(b"k").is_none(), "tombstone collected");
        // T now tries to write k: it must not succeed.
        assert_eq!(s.lock(tx(3), b"k", Some(ts(20))), Err(Conflict::TooOld));
        assert!(
            s.object(b"k").is_none(),
            "a refused lock leaves no placeholder"
        );
        // A transaction with a fresh snapshot can.
        s.lock(tx(4), b"k", Some(ts(41))).unwrap();
        s.check_invariants();
    }
}
