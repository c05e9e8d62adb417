//! Data recovery of a region replica (FaRM §5.4): copies in chunks, merges
//! behind the fill fence, and a promoted backup's floors (FaRMv2 §4.7).

use crate::RegionStore;
use meridian_wire::{Key, Timestamp};
use std::ops::Bound;

impl RegionStore {
    /// FaRMv2 §4.7: a backup promoted to primary may lack versions older
    /// than its heads (it applied records lazily and out of order), so it
    /// keeps only each head and raises the floor to it; older reads abort
    /// with [`Conflict::TooOld`] instead of returning a wrong value.
    pub fn reset_floors_to_head(&mut self) {
        let mut freed = 0;
        self.objects = std::mem::take(&mut self.objects)
            .into_iter()
            .map(|(k, mut obj)| {
                if obj.versions.len() > 1 {
                    let drop = obj.versions.len() - 1;
                    obj.versions.drain(..drop);
                    freed += drop as u64;
                }
                obj.floor_ts = obj.head_ts();
                (k, obj)
            })
            .collect();
        self.stats.versions_freed += freed;
    }

    /// FaRM §5.4 data recovery, source side: up to `max` objects after
    /// `after` (exclusive), with their versions, and whether the region
    /// ends there. A lock placeholder (a key locked by a pending insert,
    /// no versions) is copied with no versions, so that the new replica
    /// knows the key's write is still to come ([`RegionStore::merge_chunk`]).
    /// So is a key held by lock recovery (FaRM §5.3 step 4) that this
    /// replica holds no object of: a recovering transaction's insert.
    pub fn copy_after(
        &self,
        after: Option<&[u8]>,
        max: usize,
    ) -> (Vec<meridian_wire::ObjectCopy>, bool) {
        let (out, done, _) = self.copy_after_counted(after, max);
        (out, done)
    }

    /// [`RegionStore::copy_after`], also counting the keys held by lock
    /// recovery with no object that the chunk carries (how often a copy
    /// meets a recovering insert: the simulator reports it, to show the
    /// swarm reaches that path).
    pub fn copy_after_counted(
        &self,
        after: Option<&[u8]>,
        max: usize,
    ) -> (Vec<meridian_wire::ObjectCopy>, bool, usize) {
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        let mut done = true;
        for (k, obj) in self.objects.range::<_, [u8]>((lower, Bound::Unbounded)) {
            if out.len() == max.max(1) {
                done = false;
                break;
            }
            out.push(meridian_wire::ObjectCopy {
                key: k.to_vec(),
                versions: obj
                    .versions
                    .iter()
                    .map(|v| (v.ts, v.value.clone()))
                    .collect(),
                floor_ts: obj.floor_ts,
            });
        }
        if !self.recovery_locks.is_empty() {
            let upper = match (done, out.last()) {
                (false, Some(o)) => Bound::Included(o.key.as_slice()),
                _ => Bound::Unbounded,
            };
            let held: Vec<meridian_wire::ObjectCopy> = self
                .recovery_locks
                .range::<[u8], _>((lower, upper))
                .filter(|(k, _)| self.objects.get(&k[..]).is_none())
                .map(|(k, _)| meridian_wire::ObjectCopy {
                    key: k.clone(),
                    versions: Vec::new(),
                    floor_ts: Timestamp::ZERO,
                })
                .collect();
            let n = held.len();
            if n > 0 {
                out.extend(held);
                out.sort_by(|a, b| a.key.cmp(&b.key));
            }
            return (out, done, n);
        }
        (out, done, 0)
    }

    /// FaRM §5.4 data recovery, new replica side: merge a copied object
    /// with what new commits already put here (versions are idempotent by
    /// `write_ts`; the floor only rises).
    pub fn merge_copy(&mut self, copy: &meridian_wire::ObjectCopy) {
        for (ts, value) in &copy.versions {
            self.insert_version(&copy.key, *ts, value.clone());
        }
        if let Some(obj) = self.objects.get_mut(&copy.key[..]) {
            if copy.floor_ts > obj.floor_ts {
                let keep_from = obj.versions.partition_point(|v| v.ts < copy.floor_ts);
                if keep_from < obj.versions.len() {
                    obj.versions.drain(..keep_from);
                    obj.floor_ts = copy.floor_ts.min(obj.versions[0].ts);
                }
            }
        }
    }

    /// FaRM §5.4 data recovery, new replica side: merge one chunk of the
    /// source's copy, the objects after `after` through the chunk's last
    /// key (through the region's end if `done`), copied when the source's
    /// GC safe point was `source_safe_point`.
    ///
    /// **The fill fence.** A refilled replica starts
    /// empty, but the node keeps its log: COMMIT-BACKUP records, and
    /// COMMIT-RECOVERY's kept writes, of transactions it logged before the
    /// refill, put in place at truncation. The source applied those writes
    /// long ago and may since have deleted the key and collected the
    /// tombstone, so its copy says nothing of the key, and the old write
    /// put in place here brings the deleted key back. A key the copy does
    /// not hold is, at the source when the chunk was taken, one of:
    /// - absent: never written, or deleted with its tombstone collected. A
    ///   collected tombstone is at or below the source's safe point and
    ///   newer than every write it hid, so every write to the key below
    ///   that safe point is stale;
    /// - locked by a pending insert: the source is the region's primary
    ///   and holds the lock of every transaction that has not installed
    ///   there (FaRM §5.3 step 4 re-takes them before any chunk is served),
    ///   so the copy carries the key as a placeholder with no versions, and
    ///   the key goes into `fill_pending`: its write is still to come;
    /// - not yet locked: a transaction that locks it later takes a
    ///   `write_ts` above the source's clock at that time, so above the
    ///   safe point.
    ///
    /// So in the chunk's range, versions below `source_safe_point` of keys
    /// the copy does not hold are dropped here, and a later write below
    /// the highest such safe point (`fill_floor_ts`) to a key this replica
    /// does not hold is dropped by [`RegionStore::apply_backup`], unless
    /// the key is pending. Both are counted in `stale_fill_writes`.
    ///
    /// Left open: a stale write to a key that is pending again (deleted,
    /// collected and locked by a new insert at the source) passes the
    /// fence; it is hidden once the insert installs, and stays if the
    /// insert aborts.
    pub fn merge_chunk(
        &mut self,
        after: Option<&[u8]>,
        objects: &[meridian_wire::ObjectCopy],
        done: bool,
        source_safe_point: Timestamp,
    ) {
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let upper = match (done, objects.last()) {
            (true, _) => Some(Bound::Unbounded),
            (false, Some(o)) => Some(Bound::Included(o.key.as_slice())),
            (false, None) => None,
        };
        if let Some(upper) = upper {
            let copied = |k: &[u8]| {
                objects
                    .binary_search_by(|o| o.key.as_slice().cmp(k))
                    .is_ok()
            };
            let stale: Vec<Key> = self
                .objects
                .range::<_, [u8]>((lower, upper))
                .filter(|(k, o)| {
                    o.lock.is_none()
                        && !copied(&k[..])
                        && o.versions.first().is_some_and(|v| v.ts < source_safe_point)
                })
                .map(|(k, _)| k.to_vec())
                .collect();
            for key in stale {
                let Some(obj) = self.objects.get_mut(&key[..]) else {
                    continue;
                };
                let drop = obj.versions.partition_point(|v| v.ts < source_safe_point);
                obj.versions.drain(..drop);
                if drop > 0 {
                    meridian_bugs::mark!("the fill fence drops a stale write");
                }
                self.stats.stale_fill_writes += drop as u64;
                match obj.versions.first() {
                    Some(v) => obj.floor_ts = v.ts,
                    None => {
                        self.objects.remove(&key[..]);
                    }
                }
            }
        }
        for o in objects {
            if o.versions.is_empty() {
                if self.objects.get(&o.key[..]).is_none() {
                    self.fill_pending.insert(o.key.clone());
                }
            } else {
                self.merge_copy(o);
            }
        }
        self.fill_floor_ts = self.fill_floor_ts.max(source_safe_point);
    }

    /// [`RegionStore::merge_chunk`] without the fill fence: the injected
    /// bug `RefillUnfenced` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn merge_chunk_unfenced(&mut self, objects: &[meridian_wire::ObjectCopy]) {
        for o in objects.iter().filter(|o| !o.versions.is_empty()) {
            self.merge_copy(o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ts, tx};
    use meridian_wire::Conflict;

    /// FaRM §5.4: a copy merged into a replica that already took newer
    /// commits keeps both, in order; FaRMv2 §4.7: a promoted replica's
    /// floor is its head.
    #[test]
    fn data_recovery_merges_copies_and_promotion_resets_floors() {
        let mut src = RegionStore::new(4);
        for (k, t) in [(b"a", 10), (b"a", 20), (b"b", 15)] {
            src.apply_backup(k, ts(t), Some(vec![t as u8]));
        }
        let mut dst = RegionStore::new(4);
        dst.apply_backup(b"a", ts(30), Some(vec![30]));
        let (first, done) = src.copy_after(None, 1);
        assert!(!done);
        let (rest, done) = src.copy_after(Some(&first[0].key), 1);
        assert!(done, "nothing follows b");
        assert_eq!(src.copy_after(Some(&rest[0].key), 1), (vec![], true));
        for c in first.iter().chain(&rest) {
            dst.merge_copy(c);
        }
        dst.check_invariants();
        assert_eq!(dst.read(b"a", ts(25)).unwrap().unwrap().version, ts(20));
        assert_eq!(dst.read(b"a", ts(35)).unwrap().unwrap().version, ts(30));
        assert_eq!(dst.read(b"b", ts(15)).unwrap().unwrap().version, ts(15));
        dst.reset_floors_to_head();
        dst.check_invariants();
        assert_eq!(dst.read(b"a", ts(25)), Err(Conflict::TooOld));
        assert_eq!(dst.read(b"a", ts(35)).unwrap().unwrap().version, ts(30));
    }

    /// A backup applying truncations out of order drops a version below
    /// the floor the chain bound raised, keeping `floor_ts <= oldest
    /// version`.
    #[test]
    fn a_late_backup_version_below_the_floor_is_dropped() {
        let mut s = RegionStore::new(2);
        for t in [10, 20, 30] {
            s.apply_backup(b"k", ts(t), Some(vec![t as u8]));
        }
        s.check_invariants();
        s.apply_backup(b"k", ts(5), Some(vec![5]));
        s.check_invariants();
        assert_eq!(s.read(b"k", ts(25)).unwrap().unwrap().version, ts(20));
        assert_eq!(s.read(b"k", ts(7)), Err(Conflict::TooOld));
    }

    fn copy(key: &[u8], versions: &[(u64, Option<u8>)]) -> meridian_wire::ObjectCopy {
        meridian_wire::ObjectCopy {
            key: key.to_vec(),
            versions: versions
                .iter()
                .map(|(t, v)| (ts(*t), v.map(|b| vec![b])))
                .collect(),
            floor_ts: versions.first().map_or(Timestamp::ZERO, |(t, _)| ts(*t)),
        }
    }

    /// k is written at 10 and deleted at 20, and the
    /// source collects the tombstone (safe point 50). A refilled replica
    /// that put the write at 10 in place from its own log before the chunk
    /// came loses it when the chunk, which does not hold k, is merged.
    #[test]
    fn a_chunk_drops_a_write_whose_tombstone_the_source_collected() {
        let mut s = RegionStore::new(8);
        s.apply_backup(b"k", ts(10), Some(vec![1]));
        s.apply_backup(b"m", ts(60), Some(vec![6])); // newer than the copy
        s.merge_chunk(None, &[copy(b"a", &[(5, Some(9))])], true, ts(50));
        assert!(s.object(b"k").is_none(), "the stale write is dropped");
        assert_eq!(s.read(b"k", ts(70)).unwrap(), None);
        assert_eq!(s.read(b"m", ts(70)).unwrap().unwrap().value, vec![6]);
        assert_eq!(s.read(b"a", ts(70)).unwrap().unwrap().value, vec![9]);
        assert_eq!(s.stats().stale_fill_writes, 1);
        s.check_invariants();
    }

    /// The same write put in place after the chunk is dropped by the fence,
    /// unless the source reported the key as a pending insert.
    #[test]
    fn the_fill_fence_drops_late_stale_writes_but_not_pending_ones() {
        let mut s = RegionStore::new(8);
        s.merge_chunk(
            None,
            &[copy(b"a", &[(5, Some(9))]), copy(b"p", &[])],
            true,
            ts(50),
        );
        assert!(s.object(b"p").is_none(), "a placeholder is not an object");
        s.apply_backup(b"k", ts(10), Some(vec![1]));
        assert!(s.object(b"k").is_none(), "below the fence, not held: stale");
        s.apply_backup(b"p", ts(10), Some(vec![2]));
        assert_eq!(s.read(b"p", ts(70)).unwrap().unwrap().value, vec![2]);
        s.apply_backup(b"a", ts(30), Some(vec![3]));
        assert_eq!(s.read(b"a", ts(70)).unwrap().unwrap().value, vec![3]);
        s.apply_backup(b"n", ts(55), Some(vec![4]));
        assert_eq!(s.read(b"n", ts(70)).unwrap().unwrap().value, vec![4]);
        assert_eq!(s.stats().stale_fill_writes, 1);
        s.check_invariants();
    }

    /// A chunk only speaks for its own range: keys past its last one wait
    /// for the next chunk.
    #[test]
    fn a_chunk_drops_nothing_past_its_last_key() {
        let mut s = RegionStore::new(8);
        s.apply_backup(b"b", ts(10), Some(vec![1]));
        s.apply_backup(b"z", ts(10), Some(vec![2]));
        s.merge_chunk(None, &[copy(b"c", &[(5, Some(9))])], false, ts(50));
        assert!(s.object(b"b").is_none(), "inside the chunk's range");
        assert!(s.object(b"z").is_some(), "past the chunk's last key");
        s.merge_chunk(Some(b"c"), &[], true, ts(50));
        assert!(s.object(b"z").is_none(), "the last chunk covers the rest");
        s.check_invariants();
    }

    /// The source copies a lock placeholder (a pending insert) with no
    /// versions, so the new replica knows the key's write is to come.
    #[test]
    fn the_copy_carries_lock_placeholders() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"a", ts(10), Some(vec![1]));
        s.lock(tx(2), b"p", None).unwrap();
        let (objects, done) = s.copy_after(None, 10);
        assert!(done);
        let keys: Vec<_> = objects
            .iter()
            .map(|o| (o.key.clone(), o.versions.len()))
            .collect();
        assert_eq!(keys, vec![(b"a".to_vec(), 1), (b"p".to_vec(), 0)]);
    }

    /// A key held by lock recovery with no object here (a recovering
    /// transaction's insert) is copied as a placeholder too, in key order
    /// and within the chunk's range.
    #[test]
    fn the_copy_carries_keys_held_by_lock_recovery() {
        let mut s = RegionStore::new(8);
        s.install(tx(1), b"a", ts(10), Some(vec![1]));
        s.install(tx(1), b"c", ts(10), Some(vec![1]));
        s.install(tx(1), b"e", ts(10), Some(vec![1]));
        s.recovery_lock(tx(2), b"b");
        s.recovery_lock(tx(2), b"d");
        let (objects, done) = s.copy_after(None, 2);
        assert!(!done);
        let keys: Vec<_> = objects
            .iter()
            .map(|o| (o.key.clone(), o.versions.len()))
            .collect();
        assert_eq!(
            keys,
            vec![(b"a".to_vec(), 1), (b"b".to_vec(), 0), (b"c".to_vec(), 1)]
        );
        let (objects, done) = s.copy_after(Some(b"c"), 2);
        assert!(done);
        let keys: Vec<_> = objects.iter().map(|o| o.key.clone()).collect();
        assert_eq!(keys, vec![b"d".to_vec(), b"e".to_vec()]);
    }
}
