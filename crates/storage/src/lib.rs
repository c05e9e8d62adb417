//! # Storage: regions, objects, versions and logs (FaRM §3–4, FaRMv2 §4.4–4.5)
//!
//! **Problem.** A node holds replicas of regions. At a region's primary,
//! reads at a `read_ts` must return the version with the highest `write_ts`
//! ≤ `read_ts`, objects must be lockable by the commit protocol, and old
//! versions must live as long as a reader may need them, but no longer.
//!
//! **Design.** A [`RegionStore`] is an ordered map from key to [`Object`].
//! An object is a lock word (the [`TxId`] holding it) and a short chain of
//! versions in increasing `write_ts` order; a version's value is `None` for a
//! delete (a tombstone, needed so that scans can detect deleted keys as
//! phantoms). The head version is the newest. This is FaRMv2's head version
//! plus old-version list (§4.4), minus RDMA's fixed-address constraint.
//!
//! **GC (time window).** Installing a version over an older one queues the
//! key for GC. [`RegionStore::gc`] advances the region's *GC safe point* and
//! frees, for each queued key older than the safe point, every version but
//! the newest one at or below it (and the whole object if that is a
//! tombstone). A read whose `read_ts` is below the safe point, or below an
//! object's `floor_ts` (raised when a version chain hits its bound), aborts
//! with [`Conflict::TooOld`] instead of returning a wrong value. The OAT-based
//! safe point (FaRMv2 §4.5) will only change who computes the safe point.
//!
//! **Invariants** ([`RegionStore::check_invariants`]): versions strictly
//! increase in `write_ts`; a chain never exceeds its bound; an object with no
//! versions is locked (it exists only to hold an insert's lock); the safe
//! point never decreases.
//!
//! The transaction log ([`log::TxLog`]) holds LOCK and COMMIT-BACKUP records
//! until TRUNCATE (FaRM §4 step 5, Table 1).

mod fill;
mod gc;
mod locks;
pub mod log;
#[cfg(test)]
mod testing;
mod versions;

pub use versions::{Object, StoreKey, Version, Versions, INLINE_KEY_BYTES};

use meridian_wire::{Conflict, Key, KeyRange, LatestRead, Timestamp, TxId, Value, Versioned};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

/// Counters of one region replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreStats {
    /// Versions freed by GC or by the chain bound.
    pub versions_freed: u64,
    /// Objects removed (tombstones collected).
    pub objects_removed: u64,
    /// Writes a refilled replica did not put in place, and copies it
    /// dropped, because its source had collected a newer tombstone of the
    /// key ([`RegionStore::merge_chunk`], the fill fence).
    pub stale_fill_writes: u64,
}

/// One replica of a region (serialisable for checkpoints, disk
/// durability).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegionStore {
    #[serde(deserialize_with = "versions::deserialize_objects")]
    objects: imbl::OrdMap<StoreKey, Object>,
    /// FaRM §5.3 step 4 lock recovery: keys written by recovering
    /// transactions, held until COMMIT- or ABORT-RECOVERY. Several
    /// recovering transactions may hold one key (one committed at the old
    /// primary, a later one locked there), so this is a set per key; reads,
    /// locks and validations treat a held key as locked.
    recovery_locks: BTreeMap<Key, std::collections::BTreeSet<TxId>>,
    safe_point: Timestamp,
    gc_queue: VecDeque<(Timestamp, Key)>,
    max_versions: usize,
    stats: StoreStats,
    /// The fill fence ([`RegionStore::merge_chunk`]): the highest GC safe
    /// point of the source among the chunks merged into this replica
    /// (`ZERO` on a replica that was never filled). A write below it to a
    /// key this replica does not hold is stale unless the key is in
    /// `fill_pending`.
    fill_floor_ts: Timestamp,
    /// Keys the source reported locked with no version (a pending insert):
    /// their transaction's write, below `fill_floor_ts` or not, is still
    /// to be put in place here. Bounded by the source's locks; a key
    /// leaves when a write is applied to it.
    fill_pending: std::collections::BTreeSet<Key>,
}

/// `range` as `BTreeMap::range` bounds. A range whose end lies below its
/// start (remote input) is empty, `[start, start)`: `BTreeMap::range`
/// panics on inverted bounds, and a node must not panic on a request.
pub(crate) fn check_range(range: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    let start = range.start.as_slice();
    (
        Bound::Included(start),
        match &range.end {
            Some(e) if e.as_slice() < start => Bound::Excluded(start),
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        },
    )
}

/// Drop the oldest versions beyond `max_versions`, raising the object's
/// `floor_ts` so that reads needing them abort. Returns the number dropped.
pub(crate) fn enforce_chain_bound(obj: &mut Object, max_versions: usize) -> u64 {
    if obj.versions.len() <= max_versions {
        return 0;
    }
    let drop = obj.versions.len() - max_versions;
    obj.versions.drain(..drop);
    obj.floor_ts = obj.versions[0].ts;
    drop as u64
}

impl RegionStore {
    /// An empty replica keeping at most `max_versions` versions per object.
    pub fn new(max_versions: usize) -> Self {
        RegionStore {
            objects: imbl::OrdMap::new(),
            recovery_locks: BTreeMap::new(),
            safe_point: Timestamp::ZERO,
            gc_queue: VecDeque::new(),
            max_versions: max_versions.max(1),
            stats: StoreStats::default(),
            fill_floor_ts: Timestamp::ZERO,
            fill_pending: std::collections::BTreeSet::new(),
        }
    }

    /// Number of objects (live or tombstoned or lock placeholders).
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True if no objects.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The current GC safe point.
    pub fn safe_point(&self) -> Timestamp {
        self.safe_point
    }

    /// Counters.
    pub fn stats(&self) -> StoreStats {
        self.stats
    }

    /// The object at `key`, if any (for tests and status).
    pub fn object(&self, key: &[u8]) -> Option<&Object> {
        self.objects.get(key)
    }

    /// Read `key` at `read_ts` (FaRMv2 Algorithm 2 ReadAtTs).
    ///
    /// Returns the newest version with `write_ts <= read_ts`, `None` if the
    /// key was absent then. Errors: [`Conflict::Locked`] if the object is
    /// locked (an early abort, FaRMv2 §4.7), [`Conflict::TooOld`] if the
    /// needed version was freed.
    pub fn read(&self, key: &[u8], read_ts: Timestamp) -> Result<Option<Versioned>, Conflict> {
        if read_ts < self.safe_point {
            return Err(Conflict::TooOld);
        }
        if self.recovery_locked(key) {
            return Err(Conflict::Locked);
        }
        let Some(obj) = self.objects.get(key) else {
            return Ok(None);
        };
        if obj.lock.is_some() && !obj.lock_cannot_precede(read_ts) {
            return Err(Conflict::Locked);
        }
        Self::version_at(obj, read_ts)
    }

    /// The newest committed version of `key`, live or a tombstone, for a
    /// single-read transaction (FaRM §3's lock-free read; see
    /// `TxnRequest::ReadLatest` for why no `read_ts` is needed). Any lock
    /// on the key, and lock recovery, answer `Locked`: its holder may
    /// commit at a `write_ts` below the time of this read. A key with no
    /// object is answered absent at the GC safe point: GC removes only an
    /// object whose one version is a tombstone at or below it, so the
    /// newest version there is that tombstone or none at all (a history
    /// that records the answer's version as the read's `read_ts` resolves
    /// it to the tombstone, not to the key's first absence).
    ///
    /// Errors: `Conflict::Locked`.
    pub fn read_latest(&self, key: &[u8]) -> Result<LatestRead, Conflict> {
        if self.recovery_locked(key) {
            return Err(Conflict::Locked);
        }
        let Some(obj) = self.objects.get(key) else {
            return Ok(self.absent());
        };
        if obj.lock.is_some() {
            return Err(Conflict::Locked);
        }
        Ok(Self::newest(obj))
    }

    /// [`RegionStore::read_latest`] without its lock check: the injected
    /// bug `LatestReadsPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_latest_past_locks(&self, key: &[u8]) -> LatestRead {
        match self.objects.get(key) {
            Some(obj) => Self::newest(obj),
            None => self.absent(),
        }
    }

    /// [`RegionStore::read_latest`]'s answer for a key with no object.
    fn absent(&self) -> LatestRead {
        LatestRead {
            version: self.safe_point,
            value: None,
        }
    }

    fn newest(obj: &Object) -> LatestRead {
        match obj.versions.iter().next_back() {
            Some(v) => LatestRead {
                version: v.ts,
                value: v.value.clone(),
            },
            None => LatestRead {
                version: Timestamp::ZERO,
                value: None,
            },
        }
    }

    /// `read` without its lock checks, so a lock holder that later commits
    /// at or below `read_ts` is missed: the injected bug
    /// `LockWaitsReadPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_past_locks(
        &self,
        key: &[u8],
        read_ts: Timestamp,
    ) -> Result<Option<Versioned>, Conflict> {
        match self.objects.get(key) {
            Some(obj) => Self::version_at(obj, read_ts),
            None => Ok(None),
        }
    }

    fn version_at(obj: &Object, read_ts: Timestamp) -> Result<Option<Versioned>, Conflict> {
        Ok(obj.at(read_ts)?.and_then(|v| {
            v.value.as_ref().map(|value| Versioned {
                version: v.ts,
                value: value.clone(),
            })
        }))
    }

    /// Scan live keys of `range` at `read_ts`, at most `limit` of them and,
    /// beyond the first row, at most `max_bytes` of keys and values.
    ///
    /// Returns the rows and whether a bound cut the scan short. Errors as
    /// [`RegionStore::read`] for any object met in the range.
    pub fn scan(
        &self,
        range: &KeyRange,
        read_ts: Timestamp,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(Vec<(Key, Versioned)>, bool), Conflict> {
        if read_ts < self.safe_point {
            return Err(Conflict::TooOld);
        }
        self.check_recovery_range(range)?;
        let mut bytes = 0usize;
        let mut rows = Vec::new();
        for (k, obj) in self.objects.range::<_, [u8]>(check_range(range)) {
            if obj.lock.is_some() && !obj.lock_cannot_precede(read_ts) {
                return Err(Conflict::Locked);
            }
            if let Some(v) = obj.at(read_ts)? {
                if let Some(value) = &v.value {
                    let size = k.len() + value.len();
                    if rows.len() == limit || (!rows.is_empty() && bytes + size > max_bytes) {
                        return Ok((rows, true));
                    }
                    bytes += size;
                    rows.push((
                        k.to_vec(),
                        Versioned {
                            version: v.ts,
                            value: value.clone(),
                        },
                    ));
                }
            }
        }
        Ok((rows, false))
    }

    /// Install a new head version at `write_ts`, releasing `tx`'s lock if it
    /// holds it (primary: COMMIT-PRIMARY; backup: apply at truncation).
    ///
    /// Panics (release builds too) if `write_ts` is not newer than the head:
    /// that would break timestamp order, a safety invariant.
    pub fn install(&mut self, tx: TxId, key: &[u8], write_ts: Timestamp, value: Option<Value>) {
        let obj = match self.objects.get_mut(key) {
            Some(o) => o,
            None => self.objects.entry(StoreKey::from_slice(key)).or_default(),
        };
        assert!(
            write_ts > obj.head_ts(),
            "install of {tx} at {write_ts} not after head {} on key {:?}",
            obj.head_ts(),
            key
        );
        if obj.lock.as_deref() == Some(&tx) {
            obj.lock = None;
        }
        let had_versions = !obj.versions.is_empty();
        obj.versions.push(Version {
            ts: write_ts,
            value,
        });
        self.stats.versions_freed += enforce_chain_bound(obj, self.max_versions);
        let tombstone = obj.versions.last().is_some_and(|v| v.value.is_none());
        if had_versions || tombstone {
            self.gc_queue.push_back((write_ts, key.to_vec()));
        }
    }

    /// Apply a committed write at a backup (lazily, at truncation). Records
    /// of different transactions may be truncated out of `write_ts` order,
    /// so the version is inserted at its place in the chain; a duplicate
    /// (same `write_ts`) is ignored, which makes re-application idempotent.
    /// A version older than the object's `floor_ts` arrives after newer ones
    /// already pushed the floor past it: no read at or above the floor can
    /// see it, so it is dropped (counted as freed) rather than placed below
    /// the floor.
    ///
    /// On a refilled replica, a write below the fill fence to a key the
    /// replica does not hold is dropped (counted in `stale_fill_writes`):
    /// its source had applied it and collected a newer tombstone
    /// ([`RegionStore::merge_chunk`] argues why), so putting it in place
    /// would bring a deleted key back.
    pub fn apply_backup(&mut self, key: &[u8], write_ts: Timestamp, value: Option<Value>) {
        if write_ts < self.fill_floor_ts
            && !self.fill_pending.contains(key)
            && self.objects.get(key).is_none()
        {
            self.stats.stale_fill_writes += 1;
            return;
        }
        if !self.fill_pending.is_empty() {
            self.fill_pending.remove(key);
        }
        self.insert_version(key, write_ts, value);
    }

    /// [`RegionStore::apply_backup`] without the fill fence: a version
    /// copied from the source, or a committed write at a replica that
    /// passed it.
    pub(crate) fn insert_version(&mut self, key: &[u8], write_ts: Timestamp, value: Option<Value>) {
        if self.objects.get(key).is_some_and(|o| write_ts < o.floor_ts) {
            self.stats.versions_freed += 1;
            return;
        }
        let obj = match self.objects.get_mut(key) {
            Some(o) => o,
            None => self.objects.entry(StoreKey::from_slice(key)).or_default(),
        };
        match obj.versions.binary_search_by(|v| v.ts.cmp(&write_ts)) {
            Ok(_) => return,
            Err(pos) => obj.versions.insert(
                pos,
                Version {
                    ts: write_ts,
                    value,
                },
            ),
        }
        self.stats.versions_freed += enforce_chain_bound(obj, self.max_versions);
        if obj.versions.len() > 1 || obj.versions.last().is_some_and(|v| v.value.is_none()) {
            self.gc_queue.push_back((write_ts, key.to_vec()));
        }
    }

    /// Iterate all objects in key order (for status and tests).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Object)> {
        self.objects.iter().map(|(k, o)| (&k[..], o))
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        for (k, obj) in &self.objects {
            assert!(
                obj.versions.len() <= self.max_versions,
                "version chain of {k:?} over its bound"
            );
            assert!(
                !obj.versions.is_empty() || obj.lock.is_some(),
                "unlocked empty object {k:?}"
            );
            for w in obj.versions.windows(2) {
                assert!(w[0].ts < w[1].ts, "versions of {k:?} out of order");
            }
            if let Some(first) = obj.versions.first() {
                assert!(
                    obj.floor_ts <= first.ts,
                    "floor above oldest version on {k:?}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ts, tx};

    #[test]
    fn reads_see_the_version_at_read_ts() {
        let mut s = RegionStore::new(8);
        s.lock(tx(1), b"k", Some(ts(0))).unwrap();
        assert_eq!(s.read(b"k", ts(5)), Err(Conflict::Locked));
        s.install(tx(1), b"k", ts(10), Some(b"a".to_vec()));
        s.lock(tx(2), b"k", Some(ts(15))).unwrap();
        s.install(tx(2), b"k", ts(20), Some(b"b".to_vec()));
        assert_eq!(s.read(b"k", ts(9)).unwrap(), None);
        assert_eq!(s.read(b"k", ts(10)).unwrap().unwrap().value, b"a");
        assert_eq!(s.read(b"k", ts(19)).unwrap().unwrap().value, b"a");
        assert_eq!(s.read(b"k", ts(25)).unwrap().unwrap().version, ts(20));
        s.check_invariants();
    }

    /// A range whose end lies below its start (remote input: a SCAN or a
    /// VALIDATE) is empty, with or without recovery locks in the store,
    /// instead of panicking in `BTreeMap::range`.
    #[test]
    fn an_inverted_range_is_empty_and_panics_nothing() {
        let mut s = RegionStore::new(8);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            s.install(tx(i as u64), *k, ts(10 + i as u64), Some(k.to_vec()));
        }
        s.recovery_lock(tx(7), b"b");
        let inverted = KeyRange {
            start: b"c".to_vec(),
            end: Some(b"a".to_vec()),
        };
        assert_eq!(
            s.scan(&inverted, ts(100), 10, usize::MAX),
            Ok((Vec::new(), false))
        );
        assert_eq!(s.validate_range(tx(9), &inverted, ts(100)), Ok(()));
        s.check_invariants();
    }

    #[test]
    fn scans_and_phantom_validation() {
        let mut s = RegionStore::new(8);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            s.install(tx(i as u64), *k, ts(10 + i as u64), Some(k.to_vec()));
        }
        let all = KeyRange {
            start: b"a".to_vec(),
            end: None,
        };
        let (rows, more) = s.scan(&all, ts(100), 2, usize::MAX).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(more);
        let (rows, more) = s.scan(&all, ts(11), 10, usize::MAX).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        assert!(!more);
        assert_eq!(
            s.validate_range(tx(9), &all, ts(11)),
            Err(Conflict::Changed)
        );
        assert_eq!(s.validate_range(tx(9), &all, ts(12)), Ok(()));
        // An insert after read_ts is a phantom; so is a delete.
        s.install(tx(5), b"bb", ts(30), Some(vec![]));
        assert_eq!(
            s.validate_range(tx(9), &all, ts(12)),
            Err(Conflict::Changed)
        );
        s.install(tx(6), b"a", ts(40), None);
        let r = KeyRange {
            start: b"a".to_vec(),
            end: Some(b"b".to_vec()),
        };
        assert_eq!(s.validate_range(tx(9), &r, ts(35)), Err(Conflict::Changed));
        assert_eq!(s.scan(&r, ts(45), 10, usize::MAX).unwrap().0.len(), 0);
    }

    /// A single read's answer: the newest version whatever its time, a
    /// lock answered `Locked`, a tombstone named by its `write_ts`, and a
    /// collected tombstone by the safe point (not as "never written").
    #[test]
    fn the_latest_read_names_the_newest_version_even_a_collected_tombstone() {
        let mut s = RegionStore::new(8);
        let latest = |v: u64, value: Option<Vec<u8>>| LatestRead {
            version: ts(v),
            value,
        };
        assert_eq!(s.read_latest(b"k"), Ok(latest(0, None)), "never written");
        s.install(tx(1), b"k", ts(10), Some(vec![1]));
        s.install(tx(2), b"k", ts(20), Some(vec![2]));
        assert_eq!(s.read_latest(b"k"), Ok(latest(20, Some(vec![2]))));
        s.lock(tx(3), b"k", None).unwrap();
        assert_eq!(s.read_latest(b"k"), Err(Conflict::Locked));
        #[cfg(feature = "sim-bugs")]
        assert_eq!(s.read_latest_past_locks(b"k"), latest(20, Some(vec![2])));
        s.install(tx(3), b"k", ts(30), None);
        assert_eq!(s.read_latest(b"k"), Ok(latest(30, None)), "the tombstone");
        s.gc(ts(40));
        assert!(s.object(b"k").is_none(), "tombstone collected");
        assert_eq!(
            s.read_latest(b"k"),
            Ok(latest(40, None)),
            "at the safe point"
        );
        assert_eq!(s.read_latest(b"other"), Ok(latest(40, None)));
    }

    #[test]
    fn backups_apply_out_of_order() {
        let mut s = RegionStore::new(8);
        s.apply_backup(b"k", ts(20), Some(vec![2]));
        s.apply_backup(b"k", ts(10), Some(vec![1]));
        s.apply_backup(b"k", ts(20), Some(vec![2]));
        let v: Vec<_> = s
            .object(b"k")
            .unwrap()
            .versions
            .iter()
            .map(|v| v.ts)
            .collect();
        assert_eq!(v, vec![ts(10), ts(20)]);
        s.check_invariants();
    }

    #[test]
    #[should_panic(expected = "not after head")]
    fn out_of_order_install_is_caught() {
        let mut s = RegionStore::new(3);
        s.install(tx(1), b"k", ts(10), Some(vec![]));
        s.install(tx(2), b"k", ts(10), Some(vec![]));
    }
}
