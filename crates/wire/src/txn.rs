//! The transaction protocol (FaRM §4, FaRMv2 §4.2): the log records, the
//! messages between coordinator and participants, and why a request was
//! refused.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::*;

/// One buffered write: a new value, or `None` for a delete (a tombstone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOp {
    /// Region the key belongs to (the coordinator's view of the map).
    pub region: RegionId,
    /// The key written.
    #[serde(with = "serde_bytes")]
    pub key: Key,
    /// New value, `None` deletes the key.
    #[serde(with = "serde_bytes")]
    pub value: Option<Value>,
}

/// The LOCK log record (FaRM Table 1): written by the coordinator to each
/// primary of the write set. `CommitBackup` carries the same payload plus the
/// `write_ts` (FaRMv2 §4.2), so one type serves both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// The transaction.
    pub tx: TxId,
    /// The transaction's read timestamp: LockAtTs fails if the key has a
    /// version newer than this (FaRMv2 §7 Algorithm 2 line 6).
    pub read_ts: Timestamp,
    /// IDs of all regions with objects written by the transaction (needed by
    /// recovery, FaRM §5.3).
    pub regions: Vec<RegionId>,
    /// The writes this destination is primary (or backup) for.
    pub writes: Vec<WriteOp>,
}

/// A scanned key range `[start, end)` in one region; `end = None` means up to
/// the end of the region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    /// Inclusive lower bound.
    pub start: Key,
    /// Exclusive upper bound; `None` is unbounded (end of region).
    pub end: Option<Key>,
}

impl KeyRange {
    /// True if `key` lies in `[start, end)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// Why a participant refused an operation. These become transaction aborts at
/// the coordinator; they are normal outcomes, not errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Conflict {
    /// The key is locked by another transaction (FaRMv2 §4.7 early abort).
    Locked,
    /// The key has a version newer than the transaction's `read_ts`.
    Changed,
    /// The version needed at `read_ts` was garbage-collected.
    TooOld,
    /// The node is not the primary of the region (stale region map).
    NotPrimary,
    /// The node does not hold the region at all.
    UnknownRegion,
    /// A per-node bound (log capacity, version chain, …) was hit.
    Overloaded,
    /// The transaction already finished at this node (aborted or truncated):
    /// a late or duplicated LOCK is refused rather than re-locking.
    Finished,
    /// The node cannot serve the region now: it holds no lease (FaRM §5.1),
    /// or the region is blocked by recovery until its locks are recovered
    /// (FaRM §5.3 step 1). Retry; the configuration may have changed.
    Unavailable,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Conflict::Locked => "locked",
            Conflict::Changed => "changed since read_ts",
            Conflict::TooOld => "version garbage-collected",
            Conflict::NotPrimary => "not primary",
            Conflict::UnknownRegion => "unknown region",
            Conflict::Overloaded => "overloaded",
            Conflict::Finished => "transaction already finished here",
            Conflict::Unavailable => "region unavailable (no lease, or recovering)",
        };
        f.write_str(s)
    }
}

/// Why a node refused a request as malformed or misdirected, before touching
/// any state. Unlike a [`Conflict`], a rejection is not a normal outcome: a
/// correct coordinator never causes one, so the coordinator treats it as a
/// protocol error (and aborts what it holds). Remote input never panics a
/// node; it gets one of these instead.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Rejection {
    /// A LOCK or COMMIT-BACKUP record names the same key twice.
    DuplicateKey {
        /// The repeated key.
        key: Key,
    },
    /// A key lies outside the region it was sent for.
    WrongRegion {
        /// The key.
        key: Key,
        /// The region named in the request.
        region: RegionId,
    },
    /// A record with no writes.
    EmptyRecord,
    /// `write_ts <= read_ts` (FaRMv2 §4.2 requires `write_ts > read_ts`).
    WriteTsNotAfterReadTs {
        /// The transaction's read timestamp.
        read_ts: Timestamp,
        /// The offending write timestamp.
        write_ts: Timestamp,
    },
    /// COMMIT-PRIMARY for a transaction with no LOCK record here.
    NoLockRecord,
    /// A key over `limits.max_key_bytes`.
    KeyTooLarge {
        /// Key length, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// A value over `limits.max_value_bytes`.
    ValueTooLarge {
        /// Value length, bytes.
        len: usize,
        /// The limit, bytes.
        max: usize,
    },
    /// This node does not play the role the request needs (not the CM, not
    /// the clock master, or a request kind it does not serve).
    WrongRole(String),
    /// The request belongs to configuration `sent`, this node runs
    /// `current` (FaRM §5.2 precise membership). A sender behind fetches the
    /// current configuration ([`CmRequest::GetConfig`]) and retries.
    ConfigMismatch {
        /// The configuration the request was sent in.
        sent: ConfigId,
        /// The configuration this node runs.
        current: ConfigId,
    },
    /// The sender is not a member of this node's configuration.
    NotMember(String),
    /// A [`TxnRequest::LockBlind`] whose `blind` flags do not match its
    /// writes one for one. Appended last, as the variant it checks.
    BlindFlagsMismatch {
        /// Writes in the record.
        writes: usize,
        /// Flags sent.
        flags: usize,
    },
    /// A [`TxnRequest::AfterWriteTs`] whose `req` is neither a VALIDATE
    /// nor a COMMIT-BACKUP at the same `write_ts`, or one that reached a
    /// participant without being held (nodes unwrap it). Appended last, as
    /// the variant it checks.
    MalformedHold,
    /// A COMMIT-PRIMARY whose `write_ts` is not above the newest version
    /// of a key it would install (a coordinator that ignored a
    /// [`TxnResponse::LockedAbove`], or a forged request). Refused before
    /// anything is logged. Appended last.
    WriteTsNotAboveHead {
        /// The key.
        key: Key,
        /// Its newest version's `write_ts`.
        head: Timestamp,
        /// The `write_ts` sent.
        write_ts: Timestamp,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::DuplicateKey { key } => write!(f, "key {key:?} appears twice in one record"),
            Rejection::WrongRegion { key, region } => {
                write!(f, "key {key:?} does not belong to region {region}")
            }
            Rejection::EmptyRecord => f.write_str("record without writes"),
            Rejection::WriteTsNotAfterReadTs { read_ts, write_ts } => {
                write!(f, "write_ts {write_ts} is not after read_ts {read_ts}")
            }
            Rejection::NoLockRecord => f.write_str("COMMIT-PRIMARY without a LOCK record"),
            Rejection::KeyTooLarge { len, max } => {
                write!(f, "key of {len} bytes exceeds the {max}-byte limit")
            }
            Rejection::ValueTooLarge { len, max } => {
                write!(f, "value of {len} bytes exceeds the {max}-byte limit")
            }
            Rejection::WrongRole(s) => write!(f, "wrong role: {s}"),
            Rejection::ConfigMismatch { sent, current } => write!(
                f,
                "request of configuration {} refused by a node in configuration {}",
                sent.0, current.0
            ),
            Rejection::NotMember(s) => write!(f, "not a member: {s}"),
            Rejection::BlindFlagsMismatch { writes, flags } => {
                write!(f, "LOCK with {flags} blind-write flags for {writes} writes")
            }
            Rejection::MalformedHold => f.write_str(
                "a request held until its write_ts passed must be a VALIDATE or a \
                 COMMIT-BACKUP at that write_ts, and is unwrapped by the node",
            ),
            Rejection::WriteTsNotAboveHead {
                key,
                head,
                write_ts,
            } => write!(
                f,
                "write_ts {write_ts} is not above key {key:?}'s newest version at {head}"
            ),
        }
    }
}

/// A value as read at some `read_ts`: the payload and the `write_ts` of the
/// version it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    /// `write_ts` of the version read (`Timestamp::ZERO` never occurs here).
    pub version: Timestamp,
    /// The value.
    #[serde(with = "serde_bytes")]
    pub value: Value,
}

thread_local! {
    /// How many `AfterWriteTs` requests this thread is decoding inside one
    /// another ([`deserialize_unnested`]).
    static AFTER_WRITE_TS_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Decode [`TxnRequest::AfterWriteTs`]'s `req`, refusing one nested in
/// another: the decoder recurses once per level, so a frame nesting
/// millions of them would overflow the stack and abort the process.
/// Errors (as the decoder's custom error, so [`WireError::Malformed`] for
/// a frame) at the second level, before decoding any deeper.
fn deserialize_unnested<'de, D>(d: D) -> Result<Box<TxnRequest>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            AFTER_WRITE_TS_DEPTH.with(|c| c.set(c.get().saturating_sub(1)));
        }
    }
    let depth = AFTER_WRITE_TS_DEPTH.with(|c| {
        let v = c.get();
        c.set(v + 1);
        v
    });
    let _leave = Leave;
    if depth > 0 {
        return Err(D::Error::custom("AfterWriteTs nested in AfterWriteTs"));
    }
    Box::<TxnRequest>::deserialize(d)
}

/// The transaction protocol's requests (FaRM Table 2; FaRMv2 Algorithm 2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TxnRequest {
    /// Read `key` at `read_ts` from the primary of `region`; served straight
    /// from storage (the TCP analogue of FaRM's one-sided read).
    Read {
        /// Region of the key.
        region: RegionId,
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Key,
        /// Snapshot time.
        read_ts: Timestamp,
    },
    /// Scan up to `limit` live keys of `range` at `read_ts` on `region`'s primary.
    Scan {
        /// Region scanned.
        region: RegionId,
        /// Range within the region.
        range: KeyRange,
        /// Maximum rows returned.
        limit: u32,
        /// Snapshot time.
        read_ts: Timestamp,
    },
    /// LOCK record (FaRM §4 step 1, FaRMv2 Algorithm 2 LockAtTs).
    Lock(LockRecord),
    /// VALIDATE (FaRM Table 2): the keys and scanned ranges read from this
    /// primary, checked unlocked and unchanged since `read_ts`.
    Validate {
        /// The validating transaction (its own locks are ignored).
        tx: TxId,
        /// The transaction's read timestamp.
        read_ts: Timestamp,
        /// Point reads: (region, key).
        keys: Vec<(RegionId, Key)>,
        /// Scanned ranges (phantom check).
        ranges: Vec<(RegionId, KeyRange)>,
    },
    /// COMMIT-BACKUP record: the LOCK payload plus `write_ts`. Acknowledged on
    /// receipt, applied lazily at truncation.
    CommitBackup {
        /// Same payload as the LOCK record.
        record: LockRecord,
        /// The transaction's write timestamp.
        write_ts: Timestamp,
    },
    /// COMMIT-PRIMARY record: install the locked writes at `write_ts`, unlock.
    CommitPrimary {
        /// The transaction to commit.
        tx: TxId,
        /// Its write timestamp.
        write_ts: Timestamp,
    },
    /// ABORT record: release the transaction's locks, drop its LOCK record.
    Abort {
        /// The transaction to abort.
        tx: TxId,
    },
    /// TRUNCATE record (explicit form; normally piggybacked on frames).
    Truncate {
        /// Transactions whose records can be dropped (and applied at backups).
        txs: Vec<TxId>,
    },
    /// LOCK record of a write set with blind writes (FaRM §4 step 1). As
    /// [`TxnRequest::Lock`], except that a write with `blind[i]` set (the
    /// transaction wrote `record.writes[i]` without reading it) is only
    /// locked: LockAtTs's check for a version newer than `read_ts`
    /// (FaRMv2 §7 Algorithm 2 line 6) is skipped for it. FaRM's objects are
    /// always read before they are written, so its LOCK has no such case.
    ///
    /// Why skipping is safe: a blind write's version enters at `write_ts`,
    /// which GET_TS takes after this lock is held, so above every version
    /// committed before (whose writer held the lock at its own `write_ts`,
    /// FaRMv2 §7 Lemma 1); nothing of the object was read, so nothing read
    /// can be stale. A key in a scanned range is still checked by the
    /// range's VALIDATE. `blind.len()` must equal `record.writes.len()`
    /// (a mismatch is rejected as malformed). Appended last, so frames and
    /// log records of the variants above decode as before.
    LockBlind {
        /// The LOCK record, logged as for [`TxnRequest::Lock`].
        record: LockRecord,
        /// Per write of `record.writes`: written without being read.
        blind: Vec<bool>,
    },
    /// FaRMv2 §4.2's `write_ts` uncertainty wait, moved to the server
    /// (`clock.writes_wait_at_server`): the coordinator took `write_ts`
    /// from GET_TS after every LOCK was granted but did not wait it out,
    /// so this node holds `req` until its own clock shows `write_ts` past
    /// (its lower bound above it), then handles it as if it had arrived
    /// then. `req` is the transaction's [`TxnRequest::Validate`] (when it
    /// validates anything), or else its [`TxnRequest::CommitBackup`] with
    /// the same `write_ts`; anything else is rejected as malformed. Only
    /// `req` is ever logged.
    ///
    /// Why this is the wait FaRMv2 §7.3 requires: validation then happens
    /// after global time passed `write_ts`, and since COMMIT-BACKUP follows
    /// the last VALIDATE reply (or is itself held), and COMMIT-PRIMARY,
    /// which releases the locks, follows every COMMIT-BACKUP reply, the
    /// locks are held at global time `write_ts` and nothing is reported
    /// before it passed. Appended last, so frames and log records of the
    /// variants above decode as before.
    AfterWriteTs {
        /// The transaction's write timestamp, not yet waited out.
        write_ts: Timestamp,
        /// The request to handle once `write_ts` has passed here. Never
        /// itself an `AfterWriteTs`: the decoder refuses nesting (it would
        /// recurse once per level, and a frame can hold millions).
        #[serde(deserialize_with = "deserialize_unnested")]
        req: Box<TxnRequest>,
    },
    /// A single-read transaction's one read: `key`'s newest committed
    /// version at the primary of `region`, served at once, with no
    /// `read_ts` and no hold until one passed (FaRM §3's lock-free read,
    /// an optimized single-object read-only transaction). A lock on the
    /// key is waited for like a READ's (`limits.read_lock_wait_us`), then
    /// answered `Locked`.
    ///
    /// Why it is strictly serializable with no timestamp: place the read at
    /// global time `t`, the moment the primary serves it. Every installed
    /// version's `write_ts` is below `t`, because a primary installs only
    /// after global time passed `write_ts` (FaRMv2 §4.2's write wait, at the
    /// backups or the coordinator, precedes COMMIT-PRIMARY). A writer that
    /// locks the key after `t` takes its `write_ts` from GET_TS after
    /// locking, so above `t`; one that locked before holds the lock the read
    /// waits for. So the newest version is the one at `t`, and `t` lies
    /// between the read's invocation and its reply: any transaction
    /// reported before the invocation has `write_ts` below `t`, and any
    /// begun after the reply has timestamps above it. A second read would
    /// need a snapshot at one time for both, which is why only single-read
    /// transactions may use it (`TxnOptions::single_read`). Appended last,
    /// so older frames decode as before.
    ReadLatest {
        /// Region of the key.
        region: RegionId,
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Key,
    },
}

impl TxnRequest {
    /// The transaction a commit-protocol request belongs to (LOCK,
    /// VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY, ABORT; a held request's
    /// own); `None` for reads, scans and TRUNCATE.
    pub fn tx(&self) -> Option<TxId> {
        match self {
            TxnRequest::Lock(rec)
            | TxnRequest::LockBlind { record: rec, .. }
            | TxnRequest::CommitBackup { record: rec, .. } => Some(rec.tx),
            TxnRequest::Validate { tx, .. }
            | TxnRequest::CommitPrimary { tx, .. }
            | TxnRequest::Abort { tx } => Some(*tx),
            TxnRequest::AfterWriteTs { req, .. } => req.tx(),
            TxnRequest::Read { .. }
            | TxnRequest::Scan { .. }
            | TxnRequest::Truncate { .. }
            | TxnRequest::ReadLatest { .. } => None,
        }
    }

    /// For a [`TxnRequest::AfterWriteTs`], its `write_ts` if `req` is one
    /// it may carry (a VALIDATE, or a COMMIT-BACKUP at the same
    /// `write_ts`); `None` for a malformed one or another request.
    pub fn held_write_ts(&self) -> Option<Timestamp> {
        match self {
            TxnRequest::AfterWriteTs { write_ts, req } => match req.as_ref() {
                TxnRequest::Validate { .. } => Some(*write_ts),
                TxnRequest::CommitBackup { write_ts: w, .. } if w == write_ts => Some(*write_ts),
                _ => None,
            },
            _ => None,
        }
    }

    /// The LOCK record of a [`TxnRequest::Lock`] or [`TxnRequest::LockBlind`]
    /// and its blind-write flags (empty for a plain LOCK: every write was
    /// read); `None` for other requests.
    pub fn lock_record(&self) -> Option<(&LockRecord, &[bool])> {
        match self {
            TxnRequest::Lock(record) => Some((record, &[])),
            TxnRequest::LockBlind { record, blind } => Some((record, blind)),
            _ => None,
        }
    }
}

/// The transaction protocol's replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TxnResponse {
    /// Reply to `Read`: `Ok(None)` = absent at `read_ts`.
    Read(Result<Option<Versioned>, Conflict>),
    /// Reply to `Scan`: rows in key order, and whether `limit` cut it short.
    Scan(Result<(Vec<(Key, Versioned)>, bool), Conflict>),
    /// LOCK-REPLY (FaRM Table 2): did all locks succeed.
    Lock(Result<(), Conflict>),
    /// Reply to `Validate`.
    Validate(Result<(), Conflict>),
    /// Acknowledgement of a log record (COMMIT-BACKUP, COMMIT-PRIMARY,
    /// ABORT, TRUNCATE).
    Ack,
    /// Reply to a [`TxnRequest::AfterWriteTs`] this node cannot hold until
    /// its `write_ts` passed: its clock cannot tell now (no usable
    /// sample, disabled during a CM change), `write_ts` is further ahead
    /// than a clock sample lives, or its bound on held requests is full.
    /// Nothing was done; the coordinator waits `write_ts` out itself and
    /// sends the request again, unwrapped. Appended last, so older
    /// replies decode as before.
    NotHeld,
    /// First answer to a COMMIT-PRIMARY under disk durability: the
    /// primary installed the writes and unlocked them, but its record is
    /// not durable yet; the [`TxnResponse::Ack`] for the same request id
    /// follows once it is. The coordinator reports the commit at this
    /// answer and truncates only after every primary's `Ack` (a backup
    /// applies at TRUNCATE, so truncating earlier could leave a backup
    /// newer than a primary that then lost its install in a crash). It
    /// waits for the record like the `Ack`
    /// (`meridian_process::node::independent_of_log`), so both arrive
    /// together. An extension of FaRM §4 step 4 for disks; appended last,
    /// so older replies decode as before.
    Installed,
    /// Reply to [`TxnRequest::ReadLatest`]: the key's newest committed
    /// version when the primary served it. Appended last, so older
    /// replies decode as before.
    ReadLatest(Result<LatestRead, Conflict>),
    /// LOCK-REPLY of a [`TxnRequest::LockBlind`] whose blind writes met a
    /// version newer than the record's `read_ts` (a blind lock skips the
    /// version check): every lock is granted, and the newest such
    /// version's `write_ts` is this. The coordinator takes `write_ts` above
    /// it, so the primary installs above every head (an install at or
    /// below a head would break the version order). Appended last, so older
    /// replies decode as before.
    LockedAbove(Timestamp),
    /// Second answer to a granted LOCK under disk durability: the LOCK
    /// record is durable at this primary. The LOCK-REPLY
    /// ([`TxnResponse::Lock`] or [`TxnResponse::LockedAbove`]) may go
    /// before the fsync; the coordinator sends COMMIT-PRIMARY only after
    /// every written region's primary answered this, so whatever replicas
    /// form the next configuration hold the writes once any of them is
    /// exposed (`docs/internals/durability.md`). Appended last, so older
    /// replies decode as before.
    LockDurable,
}

/// A [`TxnRequest::ReadLatest`]'s answer: the newest version of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatestRead {
    /// `write_ts` of the newest version, live or a tombstone. For a key
    /// the primary holds no object for, its GC safe point: the key was
    /// never written, or its newest version was a tombstone at or below
    /// that time that GC collected (`Timestamp::ZERO` on a store that has
    /// collected nothing). A history records it as the read's snapshot
    /// time, so an absent answer resolves to the tombstone it saw.
    pub version: Timestamp,
    /// Its value; `None` if the newest version is a tombstone or there is
    /// none.
    #[serde(with = "serde_bytes")]
    pub value: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_range_bounds() {
        let r = KeyRange {
            start: b"b".to_vec(),
            end: Some(b"d".to_vec()),
        };
        assert!(!r.contains(b"a"));
        assert!(r.contains(b"b"));
        assert!(r.contains(b"c\xff"));
        assert!(!r.contains(b"d"));
        let open = KeyRange {
            start: b"b".to_vec(),
            end: None,
        };
        assert!(open.contains(b"zzz"));
    }
}
