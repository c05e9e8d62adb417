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

pub mod log;

use meridian_wire::{Conflict, Key, KeyRange, LatestRead, Timestamp, TxId, Value, Versioned};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

/// One version of an object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    /// The writing transaction's `write_ts`.
    pub ts: Timestamp,
    /// The value, `None` for a tombstone.
    pub value: Option<Value>,
}

/// An object's version chain: one version inline (most objects have one
/// once GC has run), more on the heap. Inline, a point read reaches the
/// head version without a pointer chase and an object costs no allocation
/// of its own besides its value (issue 7, memory per row). Serialised as
/// the `Vec<Version>` it replaces.
pub type Versions = smallvec::SmallVec<[Version; 1]>;

/// An object: lock word plus version chain (oldest first, head last).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Object {
    /// Transaction holding the commit lock, if any. Boxed: a lock is held
    /// for a commit's few round trips, and an inline `Option<TxId>` took
    /// 40 of every object's bytes in the B-tree's leaves for it (issue 7,
    /// memory per row). Serialised as the `Option<TxId>` it replaces.
    pub lock: Option<Box<TxId>>,
    /// Versions, strictly increasing `ts`, newest last ([`Versions`]).
    pub versions: Versions,
    /// Reads with `read_ts` below this abort: older versions were dropped.
    pub floor_ts: Timestamp,
}

impl Object {
    /// `write_ts` of the head version, `Timestamp::ZERO` if none.
    pub fn head_ts(&self) -> Timestamp {
        self.versions
            .last()
            .map(|v| v.ts)
            .unwrap_or(Timestamp::ZERO)
    }

    /// True if whoever holds this object's lock will commit, if at all,
    /// at a `write_ts` above `read_ts`, so a reader at `read_ts` may read
    /// past the lock instead of aborting (issue 7; FaRMv2 §4.7 aborts
    /// every read of a locked object).
    ///
    /// Why: the lock was taken after the head version was installed, and
    /// a head version is installed only after its writer's write
    /// uncertainty wait, when global time is past the head's `write_ts`.
    /// The lock holder takes its `write_ts` from GET_TS after locking, so
    /// its `write_ts` exceeds the head's. If the head is already newer
    /// than `read_ts`, the lock holder's write can never belong to the
    /// snapshot at `read_ts`, and the version at `read_ts` stays as it is.
    /// (A read-write reader then fails validation on the newer head; a
    /// read-only one commits with the version it read.)
    pub fn lock_cannot_precede(&self, read_ts: Timestamp) -> bool {
        self.head_ts() > read_ts
    }

    fn at(&self, read_ts: Timestamp) -> Result<Option<&Version>, Conflict> {
        match self.versions.iter().rev().find(|v| v.ts <= read_ts) {
            Some(v) => Ok(Some(v)),
            None if read_ts < self.floor_ts => Err(Conflict::TooOld),
            None => Ok(None),
        }
    }
}

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

/// A key as the store holds it: up to [`INLINE_KEY_BYTES`] bytes inline
/// in the B-tree's nodes, longer ones on the heap, in 32 bytes either way.
/// A B-tree descent compares the probe with a key at every step; with
/// `Vec<u8>` keys each comparison first chased a pointer to the key's own
/// allocation (13 % of a node's CPU was `memcmp` on such keys, TATP
/// profile), and each key cost an allocation of its own. Ordered, hashed
/// and compared as the byte string it holds (so maps keyed by it are
/// searched with a `&[u8]`); serialised as a byte sequence, like the
/// `Vec<u8>` it replaces.
///
/// Invariant: a key of at most [`INLINE_KEY_BYTES`] bytes is always
/// inline ([`StoreKey::from_slice`] is the only constructor), so one byte
/// string has one representation.
#[derive(Clone)]
pub enum StoreKey {
    /// `bytes[..len]`.
    Inline {
        /// Bytes used.
        len: u8,
        /// The key, zero-padded.
        bytes: [u8; INLINE_KEY_BYTES],
    },
    /// A key longer than [`INLINE_KEY_BYTES`].
    Heap(Box<[u8]>),
}

/// Keys up to this long are stored inline ([`StoreKey`]): TATP's and
/// TPC-C's keys are 5–24 bytes, YCSB's 24–25 (`[shard, tag]` + "user" +
/// up to 19 digits; with a 24-byte limit 89 % of them were on the heap,
/// and the lookup was 15 % of a node's CPU on YCSB-B, issue 7). 30 is what
/// fits beside the enum's tag and the length in 32 bytes, the size the
/// 24-byte `SmallVec` took.
pub const INLINE_KEY_BYTES: usize = 30;

const _: () = assert!(std::mem::size_of::<StoreKey>() == 32);

impl StoreKey {
    /// The key `key`, inline if it fits.
    pub fn from_slice(key: &[u8]) -> StoreKey {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0u8; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            StoreKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            StoreKey::Heap(key.into())
        }
    }

    /// The key's bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            StoreKey::Inline { len, bytes } => &bytes[..usize::from(*len).min(INLINE_KEY_BYTES)],
            StoreKey::Heap(b) => b,
        }
    }
}

impl std::ops::Deref for StoreKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::borrow::Borrow<[u8]> for StoreKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for StoreKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for StoreKey {}

impl PartialOrd for StoreKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for StoreKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl std::hash::Hash for StoreKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl std::fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl serde::Serialize for StoreKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.as_slice())
    }
}

impl<'de> serde::Deserialize<'de> for StoreKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<u8> = serde::Deserialize::deserialize(d)?;
        Ok(StoreKey::from_slice(&v))
    }
}

/// One replica of a region (serialisable for checkpoints, disk
/// durability).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegionStore {
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

fn check_range(range: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        Bound::Included(range.start.as_slice()),
        match &range.end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        },
    )
}

/// Drop the oldest versions beyond `max_versions`, raising the object's
/// `floor_ts` so that reads needing them abort. Returns the number dropped.
fn enforce_chain_bound(obj: &mut Object, max_versions: usize) -> u64 {
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

    /// LockAtTs (FaRMv2 Algorithm 2): lock `key` for `tx` unless it is locked
    /// by another transaction or, with `check = Some(read_ts)`, has a
    /// version newer than `read_ts`. `check = None` locks a blind write
    /// (the transaction did not read `key`; `TxnRequest::LockBlind` says
    /// why no version check is needed). Idempotent for the same `tx`.
    ///
    /// A checked `read_ts` below the GC safe point is refused, exactly as
    /// validation refuses it: GC may have removed a deleted object
    /// entirely, and an absent object would then look unchanged since
    /// `read_ts` (a lost update over a concurrent delete, review finding 1).
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
    fn insert_version(&mut self, key: &[u8], write_ts: Timestamp, value: Option<Value>) {
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

    fn recovery_locked(&self, key: &[u8]) -> bool {
        !self.recovery_locks.is_empty() && self.recovery_locks.contains_key(key)
    }

    fn check_recovery_range(&self, range: &KeyRange) -> Result<(), Conflict> {
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
    /// **The fill fence** (swarm seed 2447). A refilled replica starts
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

    /// Advance the GC safe point to `safe_point` (never backwards) and free
    /// versions no reader at or above it can need.
    pub fn gc(&mut self, safe_point: Timestamp) {
        if safe_point <= self.safe_point {
            return;
        }
        self.safe_point = safe_point;
        while let Some((ts, _)) = self.gc_queue.front() {
            if *ts > safe_point {
                break;
            }
            let Some((_, key)) = self.gc_queue.pop_front() else {
                break;
            };
            let Some(obj) = self.objects.get_mut(&key[..]) else {
                continue;
            };
            // Keep the newest version <= safe point and everything after it.
            if let Some(keep) = obj.versions.iter().rposition(|v| v.ts <= safe_point) {
                if keep > 0 {
                    obj.versions.drain(..keep);
                    obj.floor_ts = obj.floor_ts.max(obj.versions[0].ts);
                    self.stats.versions_freed += keep as u64;
                }
                if obj.versions.len() == 1 && obj.versions[0].value.is_none() && obj.lock.is_none()
                {
                    self.objects.remove(&key[..]);
                    self.stats.objects_removed += 1;
                }
            }
        }
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
    use meridian_wire::ConfigId;

    /// An object is serialised exactly as the shape it had before its lock
    /// was boxed and its versions inlined (`Option<TxId>`, `Vec<Version>`),
    /// locked or not, with no, one (inline) or several (spilled) versions,
    /// so checkpoints written before read the same.
    #[test]
    fn objects_serialise_as_before_the_compact_layout() {
        #[derive(serde::Serialize)]
        struct Before {
            lock: Option<TxId>,
            versions: Vec<Version>,
            floor_ts: Timestamp,
        }
        let v = |t: u64, x: Option<u8>| Version {
            ts: Timestamp(t),
            value: x.map(|x| vec![x; 3]),
        };
        for lock in [None, Some(tx(9))] {
            for versions in [
                vec![],
                vec![v(4, Some(1))],
                vec![v(4, None), v(6, Some(2)), v(8, Some(3))],
            ] {
                let now = Object {
                    lock: lock.map(Box::new),
                    versions: versions.iter().cloned().collect(),
                    floor_ts: Timestamp(3),
                };
                let before = Before {
                    lock,
                    versions: versions.clone(),
                    floor_ts: Timestamp(3),
                };
                let bytes = bincode::serialize(&now).unwrap();
                assert_eq!(bytes, bincode::serialize(&before).unwrap());
                assert_eq!(bincode::deserialize::<Object>(&bytes).unwrap(), now);
            }
        }
        // The point of the layout: an object fits in 56 bytes (72 before).
        assert!(
            std::mem::size_of::<Object>() <= 56,
            "{}",
            std::mem::size_of::<Object>()
        );
    }

    /// A store key is serialised exactly as the `Vec<u8>` it replaced
    /// (checkpoints written before read the same), short or long, and a
    /// store finds keys of either length.
    #[test]
    fn store_keys_serialise_as_byte_vectors() {
        for len in [0, 5, INLINE_KEY_BYTES, INLINE_KEY_BYTES + 1, 100] {
            let k: Vec<u8> = (0..len as u8).collect();
            assert_eq!(
                bincode::serialize(&StoreKey::from_slice(&k)).unwrap(),
                bincode::serialize(&k).unwrap(),
                "{len}"
            );
            let mut s = RegionStore::new(4);
            s.install(tx(1), &k, Timestamp(5), Some(vec![7]));
            assert_eq!(
                s.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>(),
                vec![k.clone()]
            );
            assert!(s.object(&k).is_some(), "{len}");
        }
    }

    /// Inline and heap keys order as their bytes do, across the boundary
    /// (a key and its extensions past 30 bytes, keys that differ only past
    /// it): the store iterates, finds and scans them in byte order.
    #[test]
    fn store_keys_order_as_bytes_across_the_inline_boundary() {
        let base: Vec<u8> = (0..INLINE_KEY_BYTES as u8).map(|b| b'a' + b % 26).collect();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for cut in [0, 1, INLINE_KEY_BYTES - 1, INLINE_KEY_BYTES] {
            keys.push(base[..cut].to_vec());
        }
        for tail in [&b"\x00"[..], b"a", b"z", b"\xff\xff", b"zz"] {
            let mut k = base.clone();
            k.extend_from_slice(tail);
            keys.push(k);
            let mut k = base[..INLINE_KEY_BYTES - 1].to_vec();
            k.extend_from_slice(tail);
            keys.push(k);
        }
        let mut store = RegionStore::new(4);
        // Installed in reverse order of length, then sorted by the store.
        let mut by_len = keys.clone();
        by_len.sort_by_key(|k| std::cmp::Reverse(k.len()));
        for k in &by_len {
            store.install(tx(1), k, Timestamp(5), Some(k.clone()));
        }
        keys.sort();
        keys.dedup();
        let stored: Vec<Vec<u8>> = store.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(stored, keys);
        for k in &keys {
            let heap = StoreKey::from_slice(k);
            assert_eq!(&*heap, &k[..]);
            assert_eq!(
                matches!(heap, StoreKey::Inline { .. }),
                k.len() <= INLINE_KEY_BYTES
            );
            let got = store.read(k, Timestamp(6)).unwrap().map(|v| v.value);
            assert_eq!(got.as_deref(), Some(&k[..]));
        }
        let from = keys[3].clone();
        let (rows, _) = store
            .scan(
                &KeyRange {
                    start: from.clone(),
                    end: None,
                },
                Timestamp(6),
                1000,
                1 << 20,
            )
            .unwrap();
        let scanned: Vec<Vec<u8>> = rows.into_iter().map(|r| r.0).collect();
        assert_eq!(scanned, keys[3..].to_vec());
    }

    fn tx(l: u64) -> TxId {
        TxId {
            config: ConfigId(1),
            coordinator: 1,
            thread: 0,
            local: l,
        }
    }
    fn ts(t: u64) -> Timestamp {
        Timestamp(t)
    }

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

    /// Found by the fault simulator (swarm seeds 3, 4, 7, …): a backup
    /// applying truncations out of order put a version below the floor the
    /// chain bound had raised, breaking `floor_ts <= oldest version`.
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

    #[test]
    fn gc_frees_old_versions_and_too_old_reads_abort() {
        let mut s = RegionStore::new(3);
        for i in 1..=5u64 {
            s.install(tx(i), b"k", ts(i * 10), Some(vec![i as u8]));
        }
        // Chain bound: only 30, 40, 50 remain; a read at 25 must abort.
        assert_eq!(s.read(b"k", ts(25)), Err(Conflict::TooOld));
        assert_eq!(s.read(b"k", ts(35)).unwrap().unwrap().value, vec![3]);
        s.gc(ts(45));
        assert_eq!(s.object(b"k").unwrap().versions.len(), 2);
        assert_eq!(s.read(b"k", ts(44)), Err(Conflict::TooOld));
        assert_eq!(s.read(b"k", ts(46)).unwrap().unwrap().value, vec![4]);
        s.install(tx(9), b"k", ts(60), None);
        s.gc(ts(70));
        assert!(s.object(b"k").is_none(), "tombstone collected");
        assert_eq!(s.read(b"k", ts(71)).unwrap(), None);
        s.gc(ts(1)); // never backwards
        assert_eq!(s.safe_point(), ts(70));
        s.check_invariants();
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

    /// Review finding 1: T reads k, k is deleted and the tombstone collected,
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

    /// Swarm seed 2447: k is written at 10 and deleted at 20, and the
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
