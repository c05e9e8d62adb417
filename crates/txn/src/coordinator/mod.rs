//! # Coordinator (FaRM §4, FaRMv2 §4.2, §7 Algorithm 2)
//!
//! **Problem.** A transaction executes at the client: it reads at a snapshot
//! `read_ts`, buffers its writes, and at commit must make them visible
//! atomically at a `write_ts` that orders it after everything it read and
//! before anything that read it, with each written region replicated `f + 1`
//! ways before any primary exposes the writes.
//!
//! **Algorithm** (the driver supplies `read_ts` from `GET_TS`, after the
//! uncertainty wait):
//! 1. Execution. `get` returns a buffered write or asks the driver to send
//!    `Read{key, read_ts}` to the key's primary; a locked object or a freed
//!    version aborts at once (early abort, FaRMv2 §4.7), so even a doomed
//!    transaction only ever sees one consistent snapshot (opacity).
//! 2. Read-only transactions commit with no messages (FaRMv2 §4.2).
//! 3. `Lock` to each primary of the write set (LockAtTs: fail if locked or if
//!    a version newer than `read_ts` exists). A key written without being
//!    read (a blind write) is only locked (`LockBlind`, no version check:
//!    its version enters at a `write_ts` taken while the lock is held).
//! 4. `write_ts = GET_TS()` while the locks are held ([`CommitStep::GetWriteTs`]).
//!    The driver either waits its uncertainty out ([`Transaction::on_write_ts`])
//!    or leaves the wait to the nodes ([`Transaction::on_write_ts_unwaited`],
//!    `clock.writes_wait_at_server`): the first messages that need
//!    `write_ts` past (the VALIDATEs, or else the COMMIT-BACKUPs) then go
//!    in `TxnRequest::AfterWriteTs`, held by each node until its clock
//!    shows `write_ts` past. Either way validation and the release of the
//!    locks come after `write_ts` passed (FaRMv2 §7.3).
//! 5. `Validate` keys read but not written, and every scanned range, at their
//!    primaries: unlocked and unchanged since `read_ts`.
//! 6. `CommitBackup` to every backup of every written region; wait for all.
//! 7. `CommitPrimary` to every primary of the write set; the transaction is
//!    committed as soon as one acknowledges ([`CommitStep::Done`]).
//! 8. Once all primaries acknowledge, the driver queues TRUNCATE for the
//!    primaries and backups ([`Transaction::truncation_targets`]); it is
//!    piggybacked on later traffic.
//!
//! Any failed Lock or Validate aborts: the driver sends the one-way ABORT
//! records from [`Transaction::abort_messages`] to every lock target.
//!
//! **Invariants** ([`Transaction::check_invariants`]): phases advance in the
//! order above; `write_ts > read_ts`; no message of a later phase is issued
//! before every reply of the previous phase is in, except the report after
//! the first COMMIT-PRIMARY ack; COMMIT-PRIMARY of an unwaited `write_ts`
//! only after a held VALIDATE or COMMIT-BACKUP phase (asserted).
//!
//! **Layout.** This module holds the types and the transaction's state;
//! `execute` the reads, scans and buffered writes of step 1; `commit` the
//! commit phases of steps 2 to 8 and the ABORT records.

use meridian_config::{Limits, RegionMap};
use meridian_wire::{
    Conflict, Key, KeyRange, NodeId, RegionId, Response, Timestamp, TxId, TxnRequest, Value,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod commit;
mod execute;
#[cfg(test)]
mod tests;

/// Options of a transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxnOptions {
    /// Hint: the transaction will not write. Writes are then refused with
    /// [`TxnError::ReadOnly`]; commit sends no messages either way.
    pub read_only: bool,
    /// Promise: the transaction makes one read (`get`) and nothing else,
    /// no scan and no write (so it is read-only too). That read is
    /// FaRM §3's lock-free read ([`TxnRequest::ReadLatest`]): the
    /// primary answers with the key's newest committed version at once,
    /// with no `read_ts` and no hold until one passed, and waits only for
    /// a lock on the key. It is still strictly serializable (the proof is
    /// on [`TxnRequest::ReadLatest`]). A second read or a scan is refused
    /// with [`TxnError::SingleRead`], a write with [`TxnError::ReadOnly`].
    /// Its client begins it without GET_TS while its clock is usable; its
    /// `read_ts` is then `Timestamp::ZERO` and its place in time is the
    /// version it saw ([`Transaction::observed_version`]).
    pub single_read: bool,
}

impl TxnOptions {
    /// Options of a single-read transaction ([`TxnOptions::single_read`]).
    pub fn single_read() -> Self {
        TxnOptions {
            read_only: true,
            single_read: true,
        }
    }

    /// Options of a read-only transaction ([`TxnOptions::read_only`]).
    pub fn read_only() -> Self {
        TxnOptions {
            read_only: true,
            single_read: false,
        }
    }
}

/// Why a transaction aborted. Aborts are normal outcomes: retry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// A read met a lock or a freed version (early abort).
    Read(Conflict),
    /// Locking the write set failed.
    Lock(Conflict),
    /// Validation of the read set failed.
    Validate(Conflict),
    /// The application aborted.
    User,
    /// The coordinator gave up after an operational failure (timeout, lost
    /// connection) before the commit decision; its locks were released.
    Abandoned,
    /// A participant refused the transaction because the configuration
    /// changed since it began (FaRM §5.2 precise membership): a request of
    /// an older configuration, or one sent to a node that left. Retry in
    /// the new configuration.
    Reconfigured,
    /// GET_TS for `write_ts` failed after the locks were taken: the clock's
    /// samples had expired (a slow clock master) or a CM change disabled it
    /// (FaRMv2 §4.3). The locks were released; retry.
    ClockUnavailable,
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbortReason::Read(c) => write!(f, "read conflict: {c}"),
            AbortReason::Lock(c) => write!(f, "lock conflict: {c}"),
            AbortReason::Validate(c) => write!(f, "validation failed: {c}"),
            AbortReason::User => f.write_str("aborted by the application"),
            AbortReason::Abandoned => f.write_str("abandoned after an operational failure"),
            AbortReason::Reconfigured => {
                f.write_str("the configuration changed; retry in the new one")
            }
            AbortReason::ClockUnavailable => {
                f.write_str("the clock was unavailable for write_ts; locks released")
            }
        }
    }
}

/// Errors of transaction operations. [`TxnError::Aborted`] is the normal,
/// retryable outcome; the others are operational errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The transaction aborted (retry it).
    #[error("transaction aborted: {0}")]
    Aborted(AbortReason),
    /// A key exceeds `limits.max_key_bytes`.
    #[error("key of {len} bytes exceeds the {max}-byte limit")]
    KeyTooLarge {
        /// Key length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A value exceeds `limits.max_value_bytes`.
    #[error("value of {len} bytes exceeds the {max}-byte limit")]
    ValueTooLarge {
        /// Value length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// More operations than `limits.max_txn_ops`.
    #[error("transaction exceeds {max} operations")]
    TooManyOps {
        /// Limit.
        max: usize,
    },
    /// A write in a transaction begun read-only.
    #[error("write in a read-only transaction")]
    ReadOnly,
    /// A single-read transaction ([`TxnOptions::single_read`]) asked for a
    /// second read or a scan.
    #[error("a single-read transaction reads one key, once")]
    SingleRead,
    /// The transaction already finished.
    #[error("transaction already finished")]
    Finished,
    /// A participant answered with something the protocol does not allow.
    #[error("protocol error from {node}: {detail}")]
    Protocol {
        /// The node.
        node: NodeId,
        /// What it sent.
        detail: String,
    },
    /// The network failed (connection lost, timeout).
    #[error("transport: {0}")]
    Transport(String),
    /// The clock is not synchronised with the clock master yet.
    #[error("clock not synchronised with the clock master")]
    ClockUnavailable,
    /// The commit decision was taken but no reply confirmed the outcome: the
    /// transaction may or may not have committed (Jepsen's `:info`). Only
    /// recovery (FaRM §5.3) can tell; exactly-once retries need RIFL, which
    /// is not built.
    #[error("outcome of {tx} unknown: {detail}")]
    Indeterminate {
        /// The transaction.
        tx: TxId,
        /// The `write_ts` it commits at if recovery commits it: recovery
        /// commits only on COMMIT-BACKUP or COMMIT-PRIMARY evidence, which
        /// carries the coordinator's `write_ts` (FaRM §5.3 step 7). `None`
        /// if none was taken. A checker needs it to place the writes in
        /// each key's version order.
        write_ts: Option<Timestamp>,
        /// What failed.
        detail: String,
    },
    /// A participant refused a request as malformed (a coordinator bug or a
    /// misconfiguration, never a normal outcome).
    #[error("{node} rejected the request: {rejection}")]
    Rejected {
        /// The node.
        node: NodeId,
        /// Why.
        rejection: meridian_wire::Rejection,
    },
    /// The client process is closing and takes no new work.
    #[error("client closed")]
    Closed,
}

impl TxnError {
    /// True for [`TxnError::Aborted`].
    pub fn is_abort(&self) -> bool {
        matches!(self, TxnError::Aborted(_))
    }
}

/// True for a participant's refusal because the request belongs to another
/// configuration or the node is not a member (FaRM §5.2): before the commit
/// decision such a refusal aborts the transaction.
fn refused_for_configuration(r: &Response) -> bool {
    matches!(
        r,
        Response::Rejected(
            meridian_wire::Rejection::ConfigMismatch { .. }
                | meridian_wire::Rejection::NotMember(_)
        )
    )
}

/// What `get` needs.
#[derive(Clone, Debug, PartialEq)]
pub enum GetStep {
    /// Answered from the write buffer.
    Local(Option<Value>),
    /// Send this request to the node and pass the reply to
    /// [`Transaction::on_read_reply`].
    Remote(NodeId, TxnRequest),
}

/// What a scan needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum ScanStep {
    /// Send this request and pass the reply to [`Transaction::on_scan_reply`].
    Send(NodeId, TxnRequest),
    /// The scan's rows, in key order (at most `limit`).
    Done(Vec<(Key, Value)>),
}

/// An open scan: what has been covered so far and what is left.
#[derive(Clone, Debug)]
struct ScanState {
    start: Key,
    end: Option<Key>,
    limit: u32,
    /// Stored rows read so far.
    rows: BTreeMap<Key, Value>,
    /// Every key in `[start, covered_end)` has been read; `None` = up to `end`.
    covered_end: Option<Key>,
    /// Regions (or the rest of one) still to read, in key order.
    queue: std::collections::VecDeque<(RegionId, NodeId, KeyRange)>,
    /// The request awaiting its reply.
    inflight: Option<(RegionId, NodeId, KeyRange)>,
}

/// What commit needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum CommitStep {
    /// Send each request and pass every reply to [`Transaction::on_reply`].
    Send(Vec<(NodeId, TxnRequest)>),
    /// Take `write_ts = GET_TS()` (waiting out the uncertainty) and pass it to
    /// [`Transaction::on_write_ts`].
    GetWriteTs,
    /// Finished. On abort, send [`Transaction::abort_messages`] one-way.
    Done(Result<Timestamp, AbortReason>),
}

/// Where a transaction stands at its coordinator, also for timing where
/// a commit's time goes (FaRM §4 Figure 4's steps; FaRMv2 §4.1's
/// `write_ts` wait). [`CommitStage::index`] numbers them in this order;
/// the first [`CommitStage::TIMED`] are the stages the bench times for
/// each committed read-write transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CommitStage {
    /// Before the application's commit call: reads and scans.
    Executing,
    /// LOCK sent, waiting for every primary's LOCK-REPLY.
    Locking,
    /// Locked; waiting for `write_ts` (its uncertainty, FaRMv2 §4.1).
    AwaitWriteTs,
    /// VALIDATE sent, waiting for the replies.
    Validating,
    /// COMMIT-BACKUP sent, waiting for every backup's (durable) ack.
    CommittingBackups,
    /// COMMIT-PRIMARY sent, waiting for the first primary's answer (and,
    /// after the report, for the others' acks).
    CommittingPrimaries,
    /// Committed (reported).
    Committed,
    /// Aborted.
    Aborted,
}

impl CommitStage {
    /// The stages a commit is timed in, `Executing` to
    /// `CommittingPrimaries`: the length of an array indexed by
    /// [`CommitStage::index`].
    pub const TIMED: usize = 6;

    /// 0 (`Executing`) to 7 (`Aborted`).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One transaction at its coordinator.
#[derive(Debug)]
pub struct Transaction {
    id: TxId,
    read_ts: Timestamp,
    opts: TxnOptions,
    map: Arc<RegionMap>,
    limits: Arc<Limits>,
    /// Keys read from storage (not from the write buffer), with region.
    reads: BTreeMap<Key, RegionId>,
    /// Scanned ranges that must be validated against phantoms.
    scans: Vec<(RegionId, KeyRange)>,
    writes: BTreeMap<Key, Option<Value>>,
    /// The scan in progress, if any.
    scan: Option<ScanState>,
    phase: CommitStage,
    /// Replies still awaited in this phase, by node.
    pending: BTreeSet<NodeId>,
    lock_targets: BTreeSet<NodeId>,
    backup_targets: BTreeSet<NodeId>,
    failure: Option<AbortReason>,
    write_ts: Option<Timestamp>,
    /// `write_ts` was handed in before it passed
    /// ([`Transaction::on_write_ts_unwaited`]): the first messages that
    /// need it past carry it to be held (`TxnRequest::AfterWriteTs`).
    write_ts_unwaited: bool,
    /// The newest version a blind LOCK met above `read_ts`
    /// ([`TxnResponse::LockedAbove`]; `Timestamp::ZERO` if none):
    /// `write_ts` must exceed it.
    blind_head: Timestamp,
    reported: bool,
    /// Disk durability: the primaries whose granted LOCK is not yet known
    /// durable ([`TxnResponse::LockDurable`]). COMMIT-PRIMARY waits until
    /// it is empty.
    lock_undurable: BTreeSet<NodeId>,
    /// Every COMMIT-BACKUP is acknowledged and COMMIT-PRIMARY waits only
    /// for `lock_undurable`.
    primary_waits: bool,
    /// A single-read transaction's read: `None` before it is sent,
    /// `Some(None)` while in flight, `Some(Some(v))` once answered with the
    /// newest version's `write_ts` `v`.
    single_read: Option<Option<Timestamp>>,
}

impl Transaction {
    /// Begin transaction `id` at snapshot `read_ts` (which the driver took
    /// with `GET_TS`, uncertainty waited out).
    pub fn new(
        id: TxId,
        read_ts: Timestamp,
        opts: TxnOptions,
        map: Arc<RegionMap>,
        limits: Arc<Limits>,
    ) -> Self {
        Transaction {
            id,
            read_ts,
            opts,
            map,
            limits,
            reads: BTreeMap::new(),
            scans: Vec::new(),
            writes: BTreeMap::new(),
            scan: None,
            phase: CommitStage::Executing,
            pending: BTreeSet::new(),
            lock_targets: BTreeSet::new(),
            backup_targets: BTreeSet::new(),
            failure: None,
            write_ts: None,
            write_ts_unwaited: false,
            blind_head: Timestamp::ZERO,
            reported: false,
            lock_undurable: BTreeSet::new(),
            primary_waits: false,
            single_read: None,
        }
    }

    /// For a single-read transaction ([`TxnOptions::single_read`]) whose
    /// read was answered: the `write_ts` of the newest version it saw, live
    /// or a tombstone (`LatestRead::version`). The read's snapshot is
    /// the key at that version, so a history records it as the read's
    /// `read_ts` (`read_ts` itself is unused by such a transaction).
    pub fn observed_version(&self) -> Option<Timestamp> {
        self.single_read.flatten()
    }

    /// The transaction id.
    pub fn id(&self) -> TxId {
        self.id
    }

    /// The snapshot timestamp.
    pub fn read_ts(&self) -> Timestamp {
        self.read_ts
    }

    /// The least `write_ts` this transaction may take: above `read_ts`
    /// (FaRMv2) and above every version its blind locks met
    /// ([`TxnResponse::LockedAbove`]), so that each primary installs above
    /// its keys' heads. The driver raises a GET_TS below it to it, and
    /// waits it out like any `write_ts`.
    pub fn write_ts_floor(&self) -> Timestamp {
        Timestamp(self.read_ts.0.max(self.blind_head.0).saturating_add(1))
    }

    /// The write timestamp, once taken.
    pub fn write_ts(&self) -> Option<Timestamp> {
        self.write_ts
    }

    /// The stage the transaction is in ([`CommitStage`]).
    pub fn stage(&self) -> CommitStage {
        self.phase
    }

    /// True if nothing has been written.
    pub fn is_read_only(&self) -> bool {
        self.writes.is_empty()
    }

    /// True once committed or aborted.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, CommitStage::Committed | CommitStage::Aborted)
    }

    /// The buffered writes.
    pub fn writes(&self) -> &BTreeMap<Key, Option<Value>> {
        &self.writes
    }

    fn check_executing(&self) -> Result<(), TxnError> {
        match self.phase {
            CommitStage::Executing => Ok(()),
            CommitStage::Aborted => {
                Err(TxnError::Aborted(self.failure.unwrap_or(AbortReason::User)))
            }
            _ => Err(TxnError::Finished),
        }
    }

    fn check_key(&self, key: &[u8]) -> Result<(), TxnError> {
        if key.len() > self.limits.max_key_bytes {
            return Err(TxnError::KeyTooLarge {
                len: key.len(),
                max: self.limits.max_key_bytes,
            });
        }
        if self.reads.len() + self.writes.len() + self.scans.len() >= self.limits.max_txn_ops {
            return Err(TxnError::TooManyOps {
                max: self.limits.max_txn_ops,
            });
        }
        Ok(())
    }

    /// Abort by the application. Nothing is locked during execution, so no
    /// messages are needed.
    pub fn abort(&mut self) {
        if self.phase == CommitStage::Executing {
            self.failure = Some(AbortReason::User);
            self.phase = CommitStage::Aborted;
        }
    }

    /// Give up on the transaction after an operational failure (a timeout,
    /// a lost connection, a protocol error) *before* the commit decision:
    /// during execution, Lock, the `write_ts` wait or Validate. The
    /// transaction is then aborted and [`Transaction::abort_messages`] names
    /// every primary a LOCK was sent to, so the driver releases what it may
    /// hold.
    ///
    /// Returns false, changing nothing, once COMMIT-BACKUP may have been sent:
    /// from then on only recovery may decide (FaRM §5.3), so the driver must
    /// retry or report the outcome as unknown.
    pub fn abandon(&mut self) -> bool {
        match self.phase {
            CommitStage::Executing
            | CommitStage::Locking
            | CommitStage::AwaitWriteTs
            | CommitStage::Validating => {
                self.failure.get_or_insert(AbortReason::Abandoned);
                self.phase = CommitStage::Aborted;
                self.pending.clear();
                self.scan = None;
                true
            }
            CommitStage::Aborted => true,
            CommitStage::CommittingBackups
            | CommitStage::CommittingPrimaries
            | CommitStage::Committed => false,
        }
    }

    /// True once the commit decision is taken (COMMIT-BACKUP may have been
    /// sent): the outcome can no longer be changed by the coordinator alone.
    pub fn is_decided(&self) -> bool {
        matches!(
            self.phase,
            CommitStage::CommittingBackups
                | CommitStage::CommittingPrimaries
                | CommitStage::Committed
        )
    }

    /// Nodes whose reply is awaited in the current phase.
    pub fn pending_replies(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.pending.iter().copied()
    }

    fn fail(&mut self, reason: AbortReason) -> TxnError {
        self.failure = Some(reason);
        self.phase = CommitStage::Aborted;
        TxnError::Aborted(reason)
    }

    /// Panics (release builds too) on a broken invariant.
    pub fn check_invariants(&self) {
        if let Some(w) = self.write_ts {
            assert!(w > self.read_ts, "write_ts not after read_ts");
            assert!(
                self.phase >= CommitStage::Validating,
                "write_ts before locking finished"
            );
        }
        if self.phase >= CommitStage::CommittingBackups && self.phase != CommitStage::Aborted {
            assert!(self.write_ts.is_some(), "committing without write_ts");
            assert!(self.failure.is_none(), "committing after a failure");
        }
        // Every RPC awaited goes to a lock or backup target (checked
        // without building their union: this runs on every reply).
        assert!(
            self.phase == CommitStage::Validating
                || self
                    .pending
                    .iter()
                    .all(|n| self.lock_targets.contains(n) || self.backup_targets.contains(n)),
            "awaiting a node that is neither a lock nor a backup target"
        );
        // COMMIT-PRIMARY exposes the writes only once every LOCK record
        // is durable (disk durability).
        assert!(
            !matches!(
                self.phase,
                CommitStage::CommittingPrimaries | CommitStage::Committed
            ) || self.lock_undurable.is_empty(),
            "COMMIT-PRIMARY before every LOCK record was durable"
        );
        assert!(self.lock_undurable.is_subset(&self.lock_targets));
    }
}
