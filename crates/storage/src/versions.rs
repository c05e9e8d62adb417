//! Objects and their version chains (FaRMv2 §4.4): [`Version`], [`Object`]
//! with its lock word, and [`StoreKey`], the key as the store holds it.

use meridian_wire::{Conflict, Timestamp, TxId, Value};

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
/// of its own besides its value. Serialised as
/// the `Vec<Version>` it replaces.
pub type Versions = smallvec::SmallVec<[Version; 1]>;

/// An object: lock word plus version chain (oldest first, head last).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Object {
    /// Transaction holding the commit lock, if any. Boxed: a lock is held
    /// for a commit's few round trips, and an inline `Option<TxId>` took
    /// 40 of every object's bytes in the B-tree's leaves for it.
    /// Serialised as the `Option<TxId>` it replaces.
    pub lock: Option<Box<TxId>>,
    /// Versions, strictly increasing `ts`, newest last ([`Versions`]).
    #[serde(deserialize_with = "deserialize_versions")]
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
    /// past the lock instead of aborting (FaRMv2 §4.7 aborts
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

    pub(crate) fn at(&self, read_ts: Timestamp) -> Result<Option<&Version>, Conflict> {
        match self.versions.iter().rev().find(|v| v.ts <= read_ts) {
            Some(v) => Ok(Some(v)),
            None if read_ts < self.floor_ts => Err(Conflict::TooOld),
            None => Ok(None),
        }
    }
}

/// A key as the store holds it: up to [`INLINE_KEY_BYTES`] bytes inline
/// in the B-tree's nodes, longer ones on the heap, in 32 bytes either way.
/// A B-tree descent compares the probe with a key at every step; with
/// `Vec<u8>` keys each comparison would first chase a pointer to the
/// key's own allocation, and each key would cost an allocation of its
/// own. Ordered, hashed
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
/// up to 19 digits, most of which a 24-byte limit would put on the
/// heap). 30 is what
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

/// Elements a checkpoint's decoder reserves room for up front, at most.
/// A length prefix is not trusted: a damaged one would otherwise ask for
/// gigabytes, or overflow `Vec`'s capacity and panic, before the decoder
/// found the elements missing (smallvec's and imbl's own decoders reserve
/// whatever the prefix claims). Longer sequences grow as they decode.
const MAX_PREALLOC: usize = 4096;

/// [`Object::versions`] decoded as the `Vec<Version>` it is written as,
/// reserving at most [`MAX_PREALLOC`] versions before they are read.
fn deserialize_versions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Versions, D::Error> {
    struct Seq;
    impl<'de> serde::de::Visitor<'de> for Seq {
        type Value = Versions;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a sequence of versions")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Versions, A::Error> {
            let mut out = Versions::new();
            out.reserve(seq.size_hint().unwrap_or(0).min(MAX_PREALLOC));
            while let Some(v) = seq.next_element()? {
                out.push(v);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Seq)
}

/// A region's objects ([`crate::RegionStore`]) decoded as imbl decodes an
/// `OrdMap` (the same encoding: a map, entries in key order), reserving
/// at most [`MAX_PREALLOC`] entries before they are read.
pub(crate) fn deserialize_objects<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<imbl::OrdMap<StoreKey, Object>, D::Error> {
    struct Map;
    impl<'de> serde::de::Visitor<'de> for Map {
        type Value = imbl::OrdMap<StoreKey, Object>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of objects")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(MAX_PREALLOC));
            while let Some(e) = map.next_entry()? {
                entries.push(e);
            }
            Ok(imbl::OrdMap::from(entries))
        }
    }
    d.deserialize_map(Map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tx;
    use crate::RegionStore;
    use meridian_wire::KeyRange;

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
}
