//! # Meridian wire types
//!
//! Everything that crosses a process boundary is defined here: identifiers
//! ([`NodeId`], [`RegionId`], [`ConfigId`], [`TxId`]), global-time
//! [`Timestamp`]s, the FaRM log records ([`LockRecord`], which is also the
//! payload of `CommitBackup`), the request/response messages of the
//! transaction and clock protocols, and the length-prefixed [`Frame`] codec.
//!
//! The names follow the papers: FaRM §4 Tables 1–2 (`Lock`, `LockReply`,
//! `Validate`, `CommitBackup`, `CommitPrimary`, `Abort`, `Truncate`), FaRMv2
//! §4.1 (clock synchronisation with the clock master) and §4.2 (`read_ts`,
//! `write_ts`), FaRM §5.1–5.4 (leases, reconfiguration, transaction-state
//! and data recovery: [`LeaseMessage`], [`ReconfigMessage`],
//! [`RecoveryMessage`]). A new protocol (RAMP, RIFL) adds a variant of its
//! own. The enums are not `#[non_exhaustive]`, by design: every match in the
//! engines must handle a new variant explicitly.
//!
//! Encoding: a frame is a little-endian `u32` length followed by that many
//! bytes of `bincode` (fixed-int, little-endian). A frame longer than
//! [`MAX_FRAME_BYTES`] or one that fails to decode is a [`WireError`]; the
//! transport closes the connection and logs it, nothing else is affected.
//! Keys and values on the hot paths (READ, its reply, the LOCK record's
//! writes, thin-client operations) are (de)serialised as byte strings
//! (`serde_bytes`), one copy instead of one call per byte; bincode writes
//! a byte string and a `Vec<u8>` the same way, so the encoding is that of a
//! plain `Vec<u8>`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A key: an ordered byte string (compared lexicographically).
pub type Key = Vec<u8>;
/// A value: an opaque byte string.
pub type Value = Vec<u8>;

/// Largest frame the codec accepts, in bytes (64 MiB). Bigger than any legal
/// message: keys and values are bounded far below this by `Limits`-style
/// configuration (see `meridian-config`).
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// Identifier of a node (a server process). The configuration names its
/// configuration manager, which is also the clock master (FaRM §3, FaRMv2
/// §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Identifier of a region: a contiguous range of the key space replicated on
/// one primary and `f` backups (FaRM §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegionId(pub u32);

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Configuration identifier: FaRM's unique, increasing configuration sequence
/// number (FaRM §3, §5.2). Static (always 1) until reconfiguration lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConfigId(pub u64);

/// A point in global time, in nanoseconds of the clock master's clock
/// (FaRMv2 §4.1). `Timestamp(0)` is the initial version of every key.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp of the (implicit) initial, absent version of every key.
    pub const ZERO: Timestamp = Timestamp(0);
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

/// Transaction identifier, FaRM §5.3 step 2: ⟨c, m, t, l⟩ = the configuration
/// in which the transaction started, the coordinator's machine id, the
/// coordinator-local thread id and a thread-local unique sequence number.
///
/// Coordinators are clients (FaRM, RAMP and RIFL all put the coordinator at
/// the client); a client's machine id is handed out by the CM at registration
/// ([`CmRequest::RegisterClient`]), so `coordinator` is unique cluster-wide.
/// The same id will identify the RIFL client lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TxId {
    /// c: configuration identifier when the transaction started.
    pub config: ConfigId,
    /// m: the coordinator's machine (client) id, unique in the cluster.
    pub coordinator: u64,
    /// t: coordinator-local thread (session) id.
    pub thread: u32,
    /// l: sequence number unique within (coordinator, thread).
    pub local: u64,
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx<{},{},{},{}>",
            self.config.0, self.coordinator, self.thread, self.local
        )
    }
}

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

/// One operation of a thin-client one-shot transaction, executed by a node on
/// the client's behalf (`meridian get|put|delete|scan`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientOp {
    /// Read a key.
    Get(#[serde(with = "serde_bytes")] Key),
    /// Write a key.
    Put(
        #[serde(with = "serde_bytes")] Key,
        #[serde(with = "serde_bytes")] Value,
    ),
    /// Delete a key.
    Delete(#[serde(with = "serde_bytes")] Key),
    /// Scan `[start, end)` returning at most `limit` pairs.
    Scan {
        /// Inclusive start.
        start: Key,
        /// Exclusive end (`None` = end of key space).
        end: Option<Key>,
        /// Maximum rows.
        limit: u32,
    },
}

/// Result of a [`ClientOp`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientOpResult {
    /// Value of a `Get` (`None` = absent).
    Value(#[serde(with = "serde_bytes")] Option<Value>),
    /// Rows of a `Scan`.
    Rows(Vec<(Key, Value)>),
    /// A `Put`/`Delete` took effect.
    Done,
}

/// Per-node status, for `meridian status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node.
    pub node: NodeId,
    /// Configuration the node runs.
    pub config: ConfigId,
    /// Current clock uncertainty (upper − lower), ns; 0 on the clock master.
    pub uncertainty_ns: u64,
    /// Clock synchronisations completed.
    pub syncs: u64,
    /// Regions this node is primary for.
    pub primary_regions: Vec<RegionId>,
    /// Regions this node is a backup for.
    pub backup_regions: Vec<RegionId>,
    /// Live keys held (primary + backup copies).
    pub objects: u64,
    /// Log records not yet truncated (LOCK + COMMIT-BACKUP).
    pub log_records: u64,
    /// Requests served since start.
    pub requests: u64,
}

/// A request, by protocol. Each gets exactly one [`Response`] unless sent
/// one-way.
///
/// Every protocol has its own pair of enums, so a new protocol (recovery,
/// RAMP, RIFL) adds a variant here and an enum of its own, not arms in a
/// shared match: an engine that does not serve a protocol answers the whole
/// variant with [`Rejection::WrongRole`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// The transaction protocol (FaRM §4, FaRMv2 §4.2): participant duties.
    Txn(TxnRequest),
    /// Clock synchronisation with the clock master (FaRMv2 §4.1).
    Clock(ClockRequest),
    /// The configuration manager (FaRM §3): client registration and
    /// configuration lookup. Membership and leases travel as `Lease` and
    /// `Reconfig`.
    Cm(CmRequest),
    /// Thin clients: a node coordinates a transaction on their behalf.
    Thin(ThinRequest),
    /// Operations: liveness and status.
    Admin(AdminRequest),
    /// Leases between the CM and every node and client (FaRM §5.1), sent
    /// one-way on a channel of their own.
    Lease(LeaseMessage),
    /// Reconfiguration between members (FaRM §5.2, FaRMv2 §4.3), sent
    /// one-way; each side retransmits until it hears back.
    Reconfig(ReconfigMessage),
    /// Transaction-state and data recovery between members (FaRM §5.3,
    /// §5.4), sent one-way; each side retransmits until it hears back.
    Recovery(RecoveryMessage),
    /// The coordination service (FaRM §5.2 step 3): Raft between its
    /// replicas, and compare-and-swap of the configuration from any node.
    /// One-way, and outside precise membership: the service outlives
    /// configurations.
    Coord(CoordMessage),
}

/// Messages of the coordination service (an embedded Raft group, FaRM §3
/// and §5.2 step 3). All one-way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordMessage {
    /// A Raft message between replicas, protobuf-encoded by raft-rs.
    Raft {
        /// The sending replica.
        from: NodeId,
        /// The encoded `eraftpb::Message`.
        bytes: Vec<u8>,
    },
    /// Replace the configuration `expected` by `proposed_toml` (whose id is
    /// `expected + 1`) if it is still current.
    Cas {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
        /// The configuration the requester runs.
        expected: ConfigId,
        /// Its proposed successor, TOML.
        proposed_toml: String,
    },
    /// The outcome of a `Cas`, decided in Raft log order.
    CasReply {
        /// The request answered.
        req: u64,
        /// True if the swap happened.
        swapped: bool,
        /// The service's configuration after the request, TOML.
        current_toml: String,
        /// The service's time bound after the request, global ns.
        time_bound_ns: u64,
        /// The CM of the configuration stored with that bound: only that
        /// CM's clock may use the bound (a master replaced by a CAS must
        /// not serve up to bounds raised after it).
        cm: NodeId,
    },
    /// Raise the time bound to at least `to_ns` (global ns). A clock
    /// master hands out no time at or past the bound it last saw stored,
    /// so a master that takes over, even after every node crashed, starts
    /// global time at the stored bound and it never goes backwards
    /// (FaRMv2 §4.3's monotonicity, kept across restarts).
    RaiseTimeBound {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
        /// The bound wanted, global ns.
        to_ns: u64,
    },
    /// The time bound stored after a `RaiseTimeBound`, global ns.
    TimeBound {
        /// The request answered.
        req: u64,
        /// The stored bound (at least the one asked for).
        bound_ns: u64,
        /// The CM of the configuration stored with it (see `CasReply`).
        cm: NodeId,
    },
    /// Tell `from` the configuration this replica has applied (a value
    /// the service stored; possibly not the newest), answered by a
    /// `CasReply` with `swapped: false`. A node restored from disk that
    /// hosts no replica learns this way whether the service names it the
    /// CM of a configuration it never applied.
    Read {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
    },
    /// This replica is not the leader; try `leader` (if known).
    NotLeader {
        /// The request answered.
        req: u64,
        /// The leader this replica knows of.
        leader: Option<NodeId>,
    },
}

/// One replica's records of a recovering transaction in one region, sent
/// to the region's primary in NEED-RECOVERY (FaRM §5.3 steps 2, 4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveringTx {
    /// The record (writes restricted to the region).
    pub record: LockRecord,
    /// The replica's evidence about the transaction.
    pub evidence: Evidence,
    /// `write_ts`, if the replica knows it (COMMIT-BACKUP or COMMIT-PRIMARY).
    pub write_ts: Option<Timestamp>,
}

/// One object's versions (oldest first, `None` = tombstone) and floor,
/// copied to a new replica by data recovery (FaRM §5.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectCopy {
    /// The key.
    pub key: Key,
    /// (write_ts, value) oldest first.
    pub versions: Vec<(Timestamp, Option<Value>)>,
    /// Reads below this abort at the source.
    pub floor_ts: Timestamp,
}

/// FaRM §5.3's transaction-state recovery and §5.4's data recovery. All
/// one-way and resent until answered; every message names its
/// configuration, and one of another configuration is ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryMessage {
    /// Step 2–4: a replica's records of recovering transactions in
    /// `region`, to its primary (empty if it has none).
    NeedRecovery {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The replica.
        from: NodeId,
        /// Its recovering transactions there.
        txs: Vec<RecoveringTx>,
    },
    /// The primary got `region`'s NEED-RECOVERY (acknowledges it).
    NeedRecoveryAck {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
    },
    /// Step 5 (REPLICATE-TX-STATE): after lock recovery, a region's
    /// primary sends a replica that reported no record of a recovering
    /// transaction the region's record of it, with the strongest evidence
    /// the region had (`CommitPrimary`, `CommitBackup` or `Lock`) and
    /// `write_ts` if known. Resent until acknowledged; the primary copies
    /// the region to a new replica only after it acknowledged every such
    /// record (FaRM starts data recovery after lock recovery, §5.4).
    ReplicateTxState {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The primary.
        from: NodeId,
        /// The record (writes in `region`), evidence and `write_ts`.
        tx: RecoveringTx,
    },
    /// A replica stored a REPLICATE-TX-STATE record.
    ReplicateTxStateAck {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The transaction.
        tx: TxId,
        /// The replica.
        from: NodeId,
    },
    /// Step 6: a region's vote, from its primary to the transaction's
    /// recovery coordinator.
    Vote {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The voting region.
        region: RegionId,
        /// Its vote.
        vote: RecoveryVote,
        /// Every region the transaction wrote (from its record; empty if
        /// the region has none).
        regions: Vec<RegionId>,
        /// The record's `read_ts` and writes in `region` (empty if none).
        writes: Vec<WriteOp>,
        /// The transaction's read timestamp (0 if unknown).
        read_ts: Timestamp,
        /// `write_ts`, if known in the region.
        write_ts: Option<Timestamp>,
    },
    /// Step 6: the recovery coordinator asks a region's primary for its
    /// vote (a region that sent none: it may never have seen the
    /// transaction).
    RequestVote {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The region asked.
        region: RegionId,
        /// The recovery coordinator.
        from: NodeId,
    },
    /// Step 7: commit the transaction's writes in `region` at `write_ts`.
    CommitRecovery {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The region.
        region: RegionId,
        /// The record (writes in the region).
        record: LockRecord,
        /// The write timestamp.
        write_ts: Timestamp,
        /// The recovery coordinator.
        from: NodeId,
    },
    /// Step 7: abort the transaction in `region`.
    AbortRecovery {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The region.
        region: RegionId,
        /// The recovery coordinator.
        from: NodeId,
    },
    /// A replica applied COMMIT- or ABORT-RECOVERY.
    DecisionAck {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The region.
        region: RegionId,
        /// The replica.
        from: NodeId,
    },
    /// Step 7: every replica applied the decision; drop the records.
    TruncateRecovery {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The recovery coordinator.
        from: NodeId,
    },
    /// A replica processed TRUNCATE-RECOVERY.
    TruncateAck {
        /// Configuration.
        config: ConfigId,
        /// The transaction.
        tx: TxId,
        /// The replica.
        from: NodeId,
    },
    /// §5.4: a new replica asks the primary for objects of `region` after
    /// `after` (exclusive; `None` = from the start).
    Fetch {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The new replica.
        from: NodeId,
        /// Resume point.
        after: Option<Key>,
    },
    /// §5.4: a chunk of the region's objects; `done` on the last one.
    Chunk {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The resume point this chunk answers.
        after: Option<Key>,
        /// Objects, in key order.
        objects: Vec<ObjectCopy>,
        /// True if no object follows.
        done: bool,
        /// The source replica's GC safe point when it copied `objects`:
        /// the new replica's fill fence (`RegionStore::merge_chunk`).
        source_safe_point: Timestamp,
        /// On the last chunk (`done`): what the source knows of finished
        /// transactions, the ids it truncated and each coordinator's low
        /// bound (FaRM §5.3 step 6 votes `truncated` on it). The copy holds
        /// those transactions' writes without their records, so the new
        /// replica must vote on them as the source would: knowing nothing
        /// of them, a region whose replicas all came from copies would vote
        /// `Unknown`, and recovery would abort a transaction whose writes
        /// the copy holds. Empty on other chunks.
        finished: FinishedIds,
    },
    /// §5.4: `from` holds a complete copy of `region`, to the CM (which
    /// may then promote it).
    ReplicaReady {
        /// Configuration.
        config: ConfigId,
        /// The region.
        region: RegionId,
        /// The replica.
        from: NodeId,
    },
}

/// A replica's knowledge of truncated transactions (FaRM §5.3 step 6):
/// ids truncated here, and each coordinator's low bound on its
/// non-truncated ids (FaRM Table 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedIds {
    /// Transactions whose records were truncated.
    pub truncated: Vec<TxId>,
    /// Low bounds, one per coordinator.
    pub low_bounds: Vec<TruncateLow>,
}

/// What one replica's log says about a recovering transaction (FaRM §5.3
/// step 6), strongest first. A region's primary combines its replicas'
/// evidence into the region's [`RecoveryVote`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Evidence {
    /// Saw COMMIT-PRIMARY or COMMIT-RECOVERY.
    CommitPrimary,
    /// Saw COMMIT-BACKUP.
    CommitBackup,
    /// Holds a LOCK record.
    Lock,
    /// Saw ABORT or ABORT-RECOVERY (its records are gone).
    Aborted,
    /// Truncated the transaction (in its truncated set, or below the
    /// coordinator's low bound).
    Truncated,
    /// Has no record and no memory of one.
    Nothing,
}

/// A region's vote on a recovering transaction (FaRM §5.3 step 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RecoveryVote {
    /// Some replica saw COMMIT-PRIMARY or COMMIT-RECOVERY.
    CommitPrimary,
    /// Some replica saw COMMIT-BACKUP and none saw an abort.
    CommitBackup,
    /// Some replica holds a LOCK record and none saw an abort.
    Lock,
    /// Otherwise, when some replica saw an abort or holds nothing.
    Abort,
    /// Every replica truncated it.
    Truncated,
    /// No replica knows it (explicit REQUEST-VOTE to a region that never
    /// saw it, or forgot it without truncating).
    Unknown,
}

/// FaRM §5.2's reconfiguration messages, with FaRMv2 §4.3's clock
/// fast-forward values folded in. All one-way; `from` is the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReconfigMessage {
    /// Step 1: a member that suspects the CM asks a backup CM to start.
    SuspectCm {
        /// The suspecting member's configuration.
        config: ConfigId,
        /// The suspecting member.
        from: NodeId,
    },
    /// Step 2: the would-be CM checks who is alive.
    Probe {
        /// The configuration probed: the prober's, or a newer one the
        /// coordination service stores whose NEW-CONFIG never reached it.
        config: ConfigId,
        /// The prober.
        from: NodeId,
        /// The probe round.
        seq: u64,
    },
    /// Step 2 failed: the prober found no majority and will not CAS for
    /// round `seq`, so those that answered it may renew with their CM
    /// again at once (their pause would otherwise let two failing probers
    /// keep each other and the live CM apart indefinitely).
    ProbeFailed {
        /// The prober's configuration.
        config: ConfigId,
        /// The prober.
        from: NodeId,
        /// The probe round that failed.
        seq: u64,
    },
    /// Step 2: the answer to a probe.
    ProbeReply {
        /// The replier's configuration.
        config: ConfigId,
        /// The replier.
        from: NodeId,
        /// The probe round answered.
        seq: u64,
        /// The replier restarted without its memory, or was restored from
        /// disk in the probed configuration and is not back in one yet,
        /// and is outside every configuration (it asks to join): it
        /// counts toward the probe's
        /// majority — its old incarnation is gone and it grants the old CM
        /// no lease — but holds no replica, so the new configuration
        /// leaves it out (it joins again afterwards).
        empty: bool,
        /// Regions the replier holds as a filling replica in `config` and
        /// has finished filling there (FaRM §5.4 data recovery done): the
        /// prober may count those copies complete when it remaps `config`,
        /// as the CM does once it got the replier's `ReplicaReady`. Empty
        /// unless the replier holds `config` itself.
        filled: Vec<RegionId>,
    },
    /// Step 5: the new configuration, as TOML text (the `config` crate's
    /// format), from its CM. Also the new CM's lease request.
    NewConfig {
        /// The new configuration's id.
        config: ConfigId,
        /// Its CM.
        from: NodeId,
        /// The configuration.
        config_toml: String,
    },
    /// Step 6: a member applied the new configuration; it grants the CM a
    /// lease and reports the upper bound of its clock, ns (FaRMv2 §4.3 FF).
    NewConfigAck {
        /// The configuration applied.
        config: ConfigId,
        /// The member.
        from: NodeId,
        /// Upper bound of the member's global-time interval, ns (0 if it
        /// has none).
        clock_upper_ns: u64,
        /// How much longer a lease this member granted the previous CM may
        /// last, ns on the member's clock (the new CM waits it out before
        /// NEW-CONFIG-COMMIT).
        cm_lease_left_ns: u64,
    },
    /// Step 7: the configuration is committed; clocks advance to at least
    /// `clock_ff_ns` (FaRMv2 §4.3).
    NewConfigCommit {
        /// The configuration.
        config: ConfigId,
        /// The CM.
        from: NodeId,
        /// Global time is at least this from now on, ns.
        clock_ff_ns: u64,
    },
    /// A member acknowledges NEW-CONFIG-COMMIT.
    NewConfigCommitAck {
        /// The configuration.
        config: ConfigId,
        /// The member.
        from: NodeId,
    },
    /// A node outside the configuration (restarted with its memory lost,
    /// or removed while alive) asks the CM to add it (FaRM §5.2: joins are
    /// reconfigurations started by the CM).
    Join {
        /// The newest configuration the node knows.
        config: ConfigId,
        /// The node.
        from: NodeId,
    },
    /// FaRMv2 §4.3, ahead of NEW-CONFIG-COMMIT: the new CM took over as
    /// clock master at `clock_ff_ns`; members follow it now rather than at
    /// the commit (which may still wait for removed members' leases).
    ClockReady {
        /// The configuration.
        config: ConfigId,
        /// The new CM.
        from: NodeId,
        /// Fast-forward time, ns.
        clock_ff_ns: u64,
    },
    /// A member's clock rate differs from the clock master's by more than
    /// `clock.max_rate_ppm` (FaRMv2 §4.1's drift assumption): the CM
    /// removes the member, or steps down if most members say so of it.
    ClockRate {
        /// The member's configuration.
        config: ConfigId,
        /// The member.
        from: NodeId,
        /// How much faster the master's clock ran than the member's, ppm.
        ppm: i64,
    },
}

/// Who holds a lease at the CM: a member node, or a client (a
/// coordinator, by its coordinator id). FaRM §5.1 leases are between the CM
/// and machines; Meridian's clients are coordinators, so they hold leases
/// too and their failure is detected the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LeaseHolder {
    /// A member node.
    Node(NodeId),
    /// A client, by coordinator id.
    Client(u64),
}

/// FaRM §5.1's 3-way lease handshake. A holder sends `Request` every 1/5 of
/// the lease; the CM's `Grant` grants the holder a lease and asks for one;
/// the holder's `GrantAck` grants the CM its lease at the holder. All three
/// are one-way frames: a lost one is covered by the next renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseMessage {
    /// Holder → CM: please grant me a lease.
    Request {
        /// The holder's configuration.
        config: ConfigId,
        /// Who asks.
        holder: LeaseHolder,
        /// The holder's sequence number for this request.
        seq: u64,
    },
    /// CM → holder: a lease grant, and the CM's request for a lease.
    Grant {
        /// The CM's configuration.
        config: ConfigId,
        /// The request granted.
        seq: u64,
        /// False while the CM holds no lease at a majority (at formation, or
        /// cut off): the holder acknowledges (granting the CM its lease)
        /// but gets no lease itself, so a minority never serves.
        lease: bool,
    },
    /// Holder → CM: the holder grants the CM a lease.
    GrantAck {
        /// The holder's configuration.
        config: ConfigId,
        /// Who grants.
        holder: LeaseHolder,
        /// The grant being acknowledged.
        seq: u64,
    },
    /// Client → CM: the client closed cleanly (no transaction of its
    /// remains undecided), so the end of its requests is not a failure.
    Release {
        /// Who leaves.
        holder: LeaseHolder,
    },
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
        /// The request to handle once `write_ts` has passed here.
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
    /// leaves before the fsync only while every region has a complete
    /// backup, whose COMMIT-BACKUP records are then the durable copies
    /// (`meridian_process::node::independent_of_log`). An extension of
    /// FaRM §4 step 4 for disks; appended last, so older replies decode as
    /// before.
    Installed,
    /// Reply to [`TxnRequest::ReadLatest`]: the key's newest committed
    /// version when the primary served it. Appended last, so older
    /// replies decode as before.
    ReadLatest(Result<LatestRead, Conflict>),
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

/// Clock synchronisation (FaRMv2 §4.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockRequest {
    /// MASTERTIME(): the clock master's current time.
    Sync,
}

/// Replies of the clock protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockResponse {
    /// The master's clock when it handled the request, ns.
    MasterTime {
        /// Master time, ns.
        master_ns: u64,
    },
}

/// Requests to the configuration manager.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmRequest {
    /// Ask for a coordinator id and the configuration (text).
    RegisterClient,
    /// Ask any node for the configuration it runs (a client that was told
    /// [`Rejection::ConfigMismatch`], or that lost touch with the cluster).
    GetConfig,
}

/// Replies of the configuration manager.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmResponse {
    /// Reply to `RegisterClient`.
    Registered {
        /// The coordinator id for this client's transaction ids.
        coordinator: u64,
        /// The configuration, as TOML text.
        config_toml: String,
    },
    /// Reply to `GetConfig`: the node's configuration, as TOML text.
    Config {
        /// The configuration.
        config_toml: String,
    },
}

/// Requests of thin clients, which let a node coordinate for them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThinRequest {
    /// Run the operations as one transaction (retrying aborts) and commit.
    Execute {
        /// The operations, run in order in one transaction.
        ops: Vec<ClientOp>,
    },
}

/// Replies to thin clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThinResponse {
    /// Reply to `Execute`.
    Executed(Result<Executed, ExecuteError>),
}

/// A committed thin-client transaction: per-operation results and its
/// timestamps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executed {
    /// One result per operation, in order.
    pub results: Vec<ClientOpResult>,
    /// The transaction's id.
    pub tx: TxId,
    /// Its snapshot time: its `read_ts`, or for a lone GET (run as a
    /// single read, FaRM §3's lock-free read) the version it saw, which
    /// may be older than the call.
    pub read_ts: Timestamp,
    /// Its commit time (equal to `read_ts` if it wrote nothing).
    pub write_ts: Timestamp,
    /// Attempts it took (aborts retried by the node).
    pub attempts: u32,
}

/// Why a thin-client transaction did not commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecuteError {
    /// The node already runs `limits.max_concurrent_executes` of them;
    /// nothing was done. Retry later.
    Busy {
        /// The bound.
        max: usize,
    },
    /// Every attempt aborted (`limits.retry_attempts`); nothing took effect.
    Aborted {
        /// Attempts made.
        attempts: u32,
        /// Why the last one aborted.
        reason: String,
    },
    /// The commit decision was made but not every primary acknowledged it:
    /// the transaction may or may not have taken effect (Jepsen's `:info`).
    Indeterminate {
        /// Its id, to look it up once recovery resolves it.
        tx: TxId,
        /// The `write_ts` it commits at if recovery commits it (FaRM §5.3:
        /// recovery commits only on evidence that carries it).
        write_ts: Option<Timestamp>,
    },
    /// A bad request (a key or value over its limit, …); nothing took effect.
    Invalid(String),
    /// The node's coordinator could not run it (clock not synchronised,
    /// unreachable nodes, …); nothing took effect.
    Unavailable(String),
}

impl fmt::Display for ExecuteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecuteError::Busy { max } => write!(
                f,
                "the node is running {max} thin-client transactions already; retry later"
            ),
            ExecuteError::Aborted { attempts, reason } => {
                write!(f, "aborted {attempts} times; last: {reason}")
            }
            ExecuteError::Indeterminate { tx, .. } => write!(
                f,
                "outcome of {tx} unknown: the commit was decided but not acknowledged"
            ),
            ExecuteError::Invalid(s) => write!(f, "invalid request: {s}"),
            ExecuteError::Unavailable(s) => write!(f, "unavailable: {s}"),
        }
    }
}

impl std::error::Error for ExecuteError {}

/// Operational requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Null RPC (for `meridian bench rpc`).
    Ping,
    /// Report this node's status.
    Status,
}

/// Operational replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AdminResponse {
    /// Reply to `Ping`.
    Pong,
    /// Reply to `Status`.
    Status(NodeStatus),
}

/// A response to a [`Request`]: the protocol's own reply, or a refusal
/// common to all protocols.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Transaction protocol.
    Txn(TxnResponse),
    /// Clock protocol.
    Clock(ClockResponse),
    /// Configuration manager.
    Cm(CmResponse),
    /// Thin clients.
    Thin(ThinResponse),
    /// Operations.
    Admin(AdminResponse),
    /// The request was malformed or misdirected and changed nothing.
    Rejected(Rejection),
    /// The node could not serve a well-formed request (message for humans);
    /// nothing changed.
    Error(String),
}

macro_rules! protocol_from {
    ($($inner:ident => $outer:ident :: $variant:ident),* $(,)?) => {$(
        impl From<$inner> for $outer {
            fn from(m: $inner) -> $outer {
                $outer::$variant(m)
            }
        }
    )*};
}

protocol_from! {
    TxnRequest => Request::Txn,
    ClockRequest => Request::Clock,
    CmRequest => Request::Cm,
    ThinRequest => Request::Thin,
    AdminRequest => Request::Admin,
    TxnResponse => Response::Txn,
    ClockResponse => Response::Clock,
    CmResponse => Response::Cm,
    ThinResponse => Response::Thin,
    AdminResponse => Response::Admin,
}

/// FaRM Table 1's TRUNCATE record, piggybacked on a frame (FaRM §4 step 5):
/// the coordinator attaches the ids of transactions it has finished to
/// whatever it next sends to that node, with its low bound on
/// non-truncated transaction ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncation {
    /// Transactions whose records can be dropped (and applied at backups).
    pub txs: Vec<TxId>,
    /// The sending coordinator's low bound, if it sent one.
    pub low: Option<TruncateLow>,
}

impl Truncation {
    /// The ids `txs`, without a low bound.
    pub fn of(txs: Vec<TxId>) -> Self {
        Truncation { txs, low: None }
    }

    /// True if it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.txs.is_empty() && self.low.is_none()
    }
}

/// A coordinator's low bound on non-truncated transaction ids (FaRM
/// Table 1): every transaction of `coordinator` with `TxId::local <
/// local` is finished and truncated everywhere (its ABORT or TRUNCATE was
/// acknowledged), so no record of it is needed any more and a late LOCK
/// or COMMIT-BACKUP for it is stale. Recovery (FaRM §5.3) uses it to tell
/// which transactions may still need resolving. Monotone per coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TruncateLow {
    /// The coordinator (`TxId::coordinator`).
    pub coordinator: u64,
    /// Every `TxId::local` below this is truncated.
    pub local: u64,
}

/// A frame on a connection. Requests carry piggybacked TRUNCATE records
/// ([`Truncation`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// A request expecting a response with the same `id`.
    Request {
        /// Per-connection request id.
        id: u64,
        /// The sender's configuration (FaRM §5.2 precise membership):
        /// transaction requests of another configuration are refused with
        /// [`Rejection::ConfigMismatch`]. `ConfigId(0)` = a sender that knows
        /// no configuration (thin clients, the CLI), accepted only for
        /// requests that need none.
        config: ConfigId,
        /// Piggybacked truncations.
        truncate: Truncation,
        /// The request.
        req: Request,
    },
    /// A one-way request: no response is sent.
    OneWay {
        /// The sender's configuration (as for `Request`).
        config: ConfigId,
        /// Piggybacked truncations.
        truncate: Truncation,
        /// The request.
        req: Request,
    },
    /// A response to request `id`.
    Response {
        /// The request's id.
        id: u64,
        /// The response.
        resp: Response,
    },
}

/// Codec errors.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The length prefix exceeds [`MAX_FRAME_BYTES`].
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// Claimed length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame body did not decode.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

fn opts() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .with_limit(MAX_FRAME_BYTES as u64)
}

/// Append `frame`, length-prefixed, to `out`.
///
/// Errors: [`WireError::FrameTooLarge`] if the encoding exceeds
/// [`MAX_FRAME_BYTES`] (nothing is appended then).
pub fn encode_frame(frame: &Frame, out: &mut Vec<u8>) -> Result<(), WireError> {
    use bincode::Options;
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    if let Err(e) = opts().serialize_into(&mut *out, frame) {
        out.truncate(start);
        return Err(match *e {
            bincode::ErrorKind::SizeLimit => WireError::FrameTooLarge {
                len: MAX_FRAME_BYTES + 1,
                max: MAX_FRAME_BYTES,
            },
            other => WireError::Malformed(other.to_string()),
        });
    }
    let len = out.len() - start - 4;
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Try to decode one frame from the front of `buf`.
///
/// Returns `Ok(Some((frame, consumed_bytes)))`, `Ok(None)` if `buf` holds
/// less than a whole frame, or an error for an oversized or malformed frame.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
    use bincode::Options;
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let frame: Frame = opts()
        .deserialize(&buf[4..4 + len])
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    Ok(Some((frame, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx() -> TxId {
        TxId {
            config: ConfigId(1),
            coordinator: 7,
            thread: 2,
            local: 99,
        }
    }

    /// The byte-string form of keys and values encodes exactly as the
    /// per-byte sequence did, so WALs and peers written before it still
    /// decode (and a value's bytes decode back unchanged).
    #[test]
    fn byte_string_fields_encode_as_the_per_byte_sequence_did() {
        use bincode::Options;
        #[derive(Serialize)]
        struct OldWriteOp {
            region: RegionId,
            key: Vec<u8>,
            value: Option<Vec<u8>>,
        }
        let new = WriteOp {
            region: RegionId(3),
            key: b"key".to_vec(),
            value: Some((0..=255u8).collect()),
        };
        let old = OldWriteOp {
            region: new.region,
            key: new.key.clone(),
            value: new.value.clone(),
        };
        let a = opts().serialize(&new).unwrap();
        let b = opts().serialize(&old).unwrap();
        assert_eq!(a, b);
        let back: WriteOp = opts().deserialize(&b).unwrap();
        assert_eq!(back, new);
        let deleted = WriteOp { value: None, ..new };
        let back: WriteOp = opts()
            .deserialize(&opts().serialize(&deleted).unwrap())
            .unwrap();
        assert_eq!(back, deleted);
    }

    #[test]
    fn frames_round_trip_back_to_back() {
        let a = Frame::Request {
            id: 5,
            config: ConfigId(3),
            truncate: Truncation {
                txs: vec![tx()],
                low: Some(TruncateLow {
                    coordinator: 7,
                    local: 90,
                }),
            },
            req: Request::Txn(TxnRequest::Lock(LockRecord {
                tx: tx(),
                read_ts: Timestamp(10),
                regions: vec![RegionId(3)],
                writes: vec![WriteOp {
                    region: RegionId(3),
                    key: b"k".to_vec(),
                    value: None,
                }],
            })),
        };
        let b = Frame::Response {
            id: 5,
            resp: Response::Txn(TxnResponse::Lock(Err(Conflict::Locked))),
        };
        let mut buf = Vec::new();
        encode_frame(&a, &mut buf).unwrap();
        encode_frame(&b, &mut buf).unwrap();
        let (fa, n) = decode_frame(&buf).unwrap().unwrap();
        assert_eq!(fa, a);
        let (fb, m) = decode_frame(&buf[n..]).unwrap().unwrap();
        assert_eq!(fb, b);
        assert_eq!(n + m, buf.len());
        // A partial frame is not an error.
        assert!(decode_frame(&buf[..n - 1]).unwrap().is_none());
    }

    #[test]
    fn malformed_and_oversized_frames_are_errors() {
        let mut bad = 3u32.to_le_bytes().to_vec();
        bad.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(decode_frame(&bad), Err(WireError::Malformed(_))));
        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes();
        assert!(matches!(
            decode_frame(&huge),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

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
