//! Transaction-state and data recovery (FaRM §5.3, §5.4): the records a
//! recovering transaction carries, the votes, and the messages.

use serde::{Deserialize, Serialize};

use crate::*;

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
