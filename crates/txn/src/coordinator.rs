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

use meridian_config::{Limits, RegionMap};
use meridian_wire::{
    Conflict, Key, KeyRange, LockRecord, NodeId, RegionId, Response, Timestamp, TxId, TxnRequest,
    TxnResponse, Value, Versioned, WriteOp,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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

fn is_lock_outcome(r: &Response) -> bool {
    matches!(r, Response::Txn(TxnResponse::Lock(_))) || refused_for_configuration(r)
}

fn is_validate_outcome(r: &Response) -> bool {
    matches!(r, Response::Txn(TxnResponse::Validate(_))) || refused_for_configuration(r)
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
    reported: bool,
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
            reported: false,
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

    /// Read `key`: from the write buffer, or by a `Read` to its primary.
    ///
    /// Errors: `KeyTooLarge`, `TooManyOps`, `Aborted`/`Finished` if the
    /// transaction is over.
    pub fn get(&mut self, key: &[u8]) -> Result<GetStep, TxnError> {
        self.check_executing()?;
        self.check_key(key)?;
        if let Some(v) = self.writes.get(key) {
            return Ok(GetStep::Local(v.clone()));
        }
        let r = self.map.region_of(key);
        if self.opts.single_read {
            if self.single_read.is_some() {
                return Err(TxnError::SingleRead);
            }
            self.single_read = Some(None);
            return Ok(GetStep::Remote(
                r.primary,
                TxnRequest::ReadLatest {
                    region: r.id,
                    key: key.to_vec(),
                },
            ));
        }
        Ok(GetStep::Remote(
            r.primary,
            TxnRequest::Read {
                region: r.id,
                key: key.to_vec(),
                read_ts: self.read_ts,
            },
        ))
    }

    /// Consume the reply to the `Read` of `key`.
    ///
    /// Errors: `Aborted` on a conflict (the transaction is then aborted and
    /// holds no locks), `Protocol` on an unexpected reply.
    pub fn on_read_reply(
        &mut self,
        from: NodeId,
        key: &[u8],
        resp: Response,
    ) -> Result<Option<Versioned>, TxnError> {
        self.check_executing()?;
        match resp {
            Response::Txn(TxnResponse::Read(Ok(v))) => {
                let region = self.map.region_of(key).id;
                self.reads.insert(key.to_vec(), region);
                Ok(v)
            }
            Response::Txn(TxnResponse::ReadLatest(Ok(l))) if self.single_read == Some(None) => {
                let region = self.map.region_of(key).id;
                self.reads.insert(key.to_vec(), region);
                self.single_read = Some(Some(l.version));
                Ok(l.value.map(|value| Versioned {
                    version: l.version,
                    value,
                }))
            }
            Response::Txn(TxnResponse::Read(Err(c)) | TxnResponse::ReadLatest(Err(c))) => {
                Err(self.fail(AbortReason::Read(c)))
            }
            r if refused_for_configuration(&r) => Err(self.fail(AbortReason::Reconfigured)),
            other => Err(TxnError::Protocol {
                node: from,
                detail: format!("{other:?}"),
            }),
        }
    }

    /// Start a scan of `[start, end)` (`end = None`: to the end of the key
    /// space) for up to `limit` live pairs, in key order, including this
    /// transaction's own buffered writes. Returns the first request to send;
    /// pass its reply to [`Transaction::on_scan_reply`] until it returns
    /// [`ScanStep::Done`]. One scan at a time.
    ///
    /// The engine, not the driver, decides when a scan has enough rows: it
    /// reads regions in key order and stops only once the rows it has
    /// *covered* (stored rows merged with buffered writes, deletes removed)
    /// reach `limit`. A participant that returns fewer rows than asked with
    /// `more = true` (it clamps to `max_scan_rows`) is asked again from the
    /// next key of the same region. So every key below the last row returned
    /// was read and is validated; no gap is committed unvalidated.
    ///
    /// Errors: `KeyTooLarge`, `TooManyOps`, `Aborted`/`Finished`.
    pub fn scan(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) -> Result<ScanStep, TxnError> {
        self.check_executing()?;
        if self.opts.single_read {
            return Err(TxnError::SingleRead);
        }
        self.check_key(start)?;
        if let Some(e) = end {
            self.check_key(e)?;
        }
        let mut queue = std::collections::VecDeque::new();
        for r in self.map.regions() {
            let r_end = r.end.as_deref();
            let starts_before_end = end.is_none_or(|e| r.start.as_slice() < e);
            let ends_after_start = r_end.is_none_or(|re| re > start);
            if !(starts_before_end && ends_after_start) {
                continue;
            }
            let s = if r.start.as_slice() > start {
                r.start.clone()
            } else {
                start.to_vec()
            };
            let e = match (r_end, end) {
                (Some(a), Some(b)) => Some(if a < b { a.to_vec() } else { b.to_vec() }),
                (Some(a), None) => Some(a.to_vec()),
                (None, b) => b.map(|b| b.to_vec()),
            };
            if e.as_ref().is_some_and(|e| e.as_slice() <= s.as_slice()) {
                continue;
            }
            queue.push_back((r.id, r.primary, KeyRange { start: s, end: e }));
        }
        self.scan = Some(ScanState {
            start: start.to_vec(),
            end: end.map(|e| e.to_vec()),
            limit,
            rows: BTreeMap::new(),
            covered_end: Some(start.to_vec()),
            queue,
            inflight: None,
        });
        Ok(self.next_scan_step())
    }

    /// The merged rows of the covered prefix `[start, covered_end)`: stored
    /// rows plus buffered puts, minus buffered deletes.
    fn scan_merged(&self, st: &ScanState) -> BTreeMap<Key, Value> {
        let mut merged = st.rows.clone();
        let upper = match &st.covered_end {
            Some(e) => std::ops::Bound::Excluded(e.as_slice()),
            None => match &st.end {
                Some(e) => std::ops::Bound::Excluded(e.as_slice()),
                None => std::ops::Bound::Unbounded,
            },
        };
        for (k, v) in self
            .writes
            .range::<[u8], _>((std::ops::Bound::Included(st.start.as_slice()), upper))
        {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        merged
    }

    fn next_scan_step(&mut self) -> ScanStep {
        let Some(mut st) = self.scan.take() else {
            return ScanStep::Done(Vec::new());
        };
        let merged = self.scan_merged(&st);
        let enough = merged.len() >= st.limit as usize;
        let next = if enough { None } else { st.queue.pop_front() };
        match next {
            None => {
                // Done: every key of [start, covered_end) was read (and will
                // be validated); the first `limit` merged rows are exact.
                ScanStep::Done(merged.into_iter().take(st.limit as usize).collect())
            }
            Some((region, node, range)) => {
                // Ask for enough rows to reach the limit even if buffered
                // deletes remove some; the participant may return fewer.
                let deletes = self
                    .writes
                    .iter()
                    .filter(|(k, v)| v.is_none() && range.contains(k))
                    .count();
                let want = (st.limit as usize - merged.len()).saturating_add(deletes);
                let want = want.clamp(1, self.limits.max_scan_rows.max(1) as usize) as u32;
                let req = TxnRequest::Scan {
                    region,
                    range: range.clone(),
                    limit: want,
                    read_ts: self.read_ts,
                };
                st.inflight = Some((region, node, range));
                self.scan = Some(st);
                ScanStep::Send(node, req)
            }
        }
    }

    /// Consume the reply to the scan request last returned. Records the range
    /// actually covered for phantom validation.
    ///
    /// Errors: `Aborted` on a conflict, `Protocol` on an unexpected reply or
    /// one from the wrong node.
    pub fn on_scan_reply(&mut self, from: NodeId, resp: Response) -> Result<ScanStep, TxnError> {
        self.check_executing()?;
        let Some((region, node, range)) = self.scan.as_mut().and_then(|s| s.inflight.take()) else {
            return Err(TxnError::Protocol {
                node: from,
                detail: "scan reply with no scan in flight".into(),
            });
        };
        if node != from {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!("scan reply expected from {node}"),
            });
        }
        match resp {
            Response::Txn(TxnResponse::Scan(Ok((rows, more)))) => {
                if rows.iter().any(|(k, _)| !range.contains(k))
                    || rows.windows(2).any(|w| w[0].0 >= w[1].0)
                {
                    return Err(TxnError::Protocol {
                        node: from,
                        detail: "scan rows outside the range or out of order".into(),
                    });
                }
                let covered = match (more, rows.last()) {
                    // Cut short: covered up to and including the last key.
                    (true, Some((last, _))) => {
                        let mut succ = last.clone();
                        succ.push(0);
                        KeyRange {
                            start: range.start.clone(),
                            end: Some(succ),
                        }
                    }
                    (true, None) => {
                        return Err(TxnError::Protocol {
                            node: from,
                            detail: "scan reply with more = true and no rows".into(),
                        })
                    }
                    (false, _) => range.clone(),
                };
                self.scans.push((region, covered.clone()));
                let st = self.scan.as_mut().ok_or(TxnError::Finished)?;
                st.covered_end = covered.end.clone();
                st.rows.extend(rows.into_iter().map(|(k, v)| (k, v.value)));
                if more {
                    if let Some(e) = covered.end {
                        // Continue this region from the next key.
                        st.queue.push_front((
                            region,
                            node,
                            KeyRange {
                                start: e,
                                end: range.end,
                            },
                        ));
                    }
                }
                Ok(self.next_scan_step())
            }
            Response::Txn(TxnResponse::Scan(Err(c))) => Err(self.fail(AbortReason::Read(c))),
            r if refused_for_configuration(&r) => Err(self.fail(AbortReason::Reconfigured)),
            other => Err(TxnError::Protocol {
                node: from,
                detail: format!("{other:?}"),
            }),
        }
    }

    /// Buffer a write.
    ///
    /// Errors: `KeyTooLarge`, `ValueTooLarge`, `TooManyOps`, `ReadOnly`,
    /// `Aborted`/`Finished`.
    pub fn put(&mut self, key: Key, value: Value) -> Result<(), TxnError> {
        self.check_executing()?;
        self.check_key(&key)?;
        if value.len() > self.limits.max_value_bytes {
            return Err(TxnError::ValueTooLarge {
                len: value.len(),
                max: self.limits.max_value_bytes,
            });
        }
        if self.opts.read_only || self.opts.single_read {
            return Err(TxnError::ReadOnly);
        }
        self.writes.insert(key, Some(value));
        Ok(())
    }

    /// Buffer a delete.
    ///
    /// Errors: as [`Transaction::put`].
    pub fn delete(&mut self, key: Key) -> Result<(), TxnError> {
        self.check_executing()?;
        self.check_key(&key)?;
        if self.opts.read_only || self.opts.single_read {
            return Err(TxnError::ReadOnly);
        }
        self.writes.insert(key, None);
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

    fn writes_by<F: Fn(&meridian_config::RegionInfo) -> Vec<NodeId>>(
        &self,
        targets: F,
    ) -> BTreeMap<NodeId, Vec<WriteOp>> {
        let mut by: BTreeMap<NodeId, Vec<WriteOp>> = BTreeMap::new();
        for (k, v) in &self.writes {
            let r = self.map.region_of(k);
            for n in targets(r) {
                by.entry(n).or_default().push(WriteOp {
                    region: r.id,
                    key: k.clone(),
                    value: v.clone(),
                });
            }
        }
        by
    }

    fn written_regions(&self) -> Vec<RegionId> {
        let set: BTreeSet<RegionId> = self
            .writes
            .keys()
            .map(|k| self.map.region_of(k).id)
            .collect();
        set.into_iter().collect()
    }

    /// Start commit (FaRM §4 step 1). Read-only transactions finish at once.
    ///
    /// Errors: `Aborted`/`Finished` if the transaction is already over.
    pub fn commit(&mut self) -> Result<CommitStep, TxnError> {
        self.check_executing()?;
        if self.writes.is_empty() {
            self.phase = CommitStage::Committed;
            return Ok(CommitStep::Done(Ok(self.read_ts)));
        }
        let regions = self.written_regions();
        let by = self.writes_by(|r| vec![r.primary]);
        let msgs: Vec<(NodeId, TxnRequest)> = by
            .into_iter()
            .map(|(n, writes)| {
                // A key written but never read (a blind write) needs no
                // check against `read_ts` (TxnRequest::LockBlind); FaRM's
                // plain LOCK goes when every written key was read.
                let blind: Vec<bool> = writes
                    .iter()
                    .map(|w| !self.reads.contains_key(&w.key))
                    .collect();
                let record = LockRecord {
                    tx: self.id,
                    read_ts: self.read_ts,
                    regions: regions.clone(),
                    writes,
                };
                let req = if blind.contains(&true) {
                    TxnRequest::LockBlind { record, blind }
                } else {
                    TxnRequest::Lock(record)
                };
                (n, req)
            })
            .collect();
        self.lock_targets = msgs.iter().map(|(n, _)| *n).collect();
        self.pending = self.lock_targets.clone();
        self.phase = CommitStage::Locking;
        Ok(CommitStep::Send(msgs))
    }

    /// True if this transaction's `write_ts` wait can be left to the
    /// nodes (`clock.writes_wait_at_server`): it sends a VALIDATE (it read
    /// a key it does not write, or scanned), or a COMMIT-BACKUP (a written
    /// region has a backup), that can carry `write_ts` to be held. A
    /// transaction with neither must wait at the coordinator.
    pub fn may_wait_at_server(&self) -> bool {
        !self.scans.is_empty()
            || self.reads.keys().any(|k| !self.writes.contains_key(k))
            || self
                .writes
                .keys()
                .any(|k| !self.map.region_of(k).backups.is_empty())
    }

    /// The write timestamp has been taken (and its uncertainty waited out).
    ///
    /// Errors: `Protocol` if called out of phase.
    pub fn on_write_ts(&mut self, write_ts: Timestamp) -> Result<CommitStep, TxnError> {
        self.take_write_ts(write_ts, false)
    }

    /// The write timestamp has been taken from GET_TS and *not* waited
    /// out (`clock.writes_wait_at_server`, FaRMv2 §4.2's wait moved to the
    /// nodes): the VALIDATEs, or if there are none the COMMIT-BACKUPs, go
    /// wrapped in `TxnRequest::AfterWriteTs`, which each node holds until
    /// its clock shows `write_ts` past. Everything after them follows
    /// their replies, so validation, the release of the locks and the
    /// report all come after `write_ts` passed (FaRMv2 §7.3).
    ///
    /// Errors: `Protocol` if called out of phase, or for a transaction
    /// that has nothing to carry the wait ([`Self::may_wait_at_server`]).
    pub fn on_write_ts_unwaited(&mut self, write_ts: Timestamp) -> Result<CommitStep, TxnError> {
        if !self.may_wait_at_server() {
            return Err(TxnError::Protocol {
                node: NodeId(u32::MAX),
                detail: "write_ts left to the nodes by a transaction that sends no \
                         VALIDATE or COMMIT-BACKUP"
                    .into(),
            });
        }
        self.take_write_ts(write_ts, true)
    }

    fn take_write_ts(
        &mut self,
        write_ts: Timestamp,
        unwaited: bool,
    ) -> Result<CommitStep, TxnError> {
        if self.phase != CommitStage::AwaitWriteTs {
            return Err(TxnError::Protocol {
                node: NodeId(u32::MAX),
                detail: format!("write_ts in phase {:?}", self.phase),
            });
        }
        assert!(
            write_ts > self.read_ts,
            "write_ts {write_ts} not after read_ts {} for {}",
            self.read_ts,
            self.id
        );
        self.write_ts = Some(write_ts);
        self.write_ts_unwaited = unwaited;
        // Validate keys read but not written, and all scanned ranges.
        let mut by: BTreeMap<NodeId, (Vec<(RegionId, Key)>, Vec<(RegionId, KeyRange)>)> =
            BTreeMap::new();
        for (k, region) in &self.reads {
            if self.writes.contains_key(k) {
                continue; // the lock already checked it (LockAtTs)
            }
            let primary = self
                .map
                .get(*region)
                .map(|r| r.primary)
                .unwrap_or(NodeId(0));
            by.entry(primary).or_default().0.push((*region, k.clone()));
        }
        for (region, range) in &self.scans {
            let primary = self
                .map
                .get(*region)
                .map(|r| r.primary)
                .unwrap_or(NodeId(0));
            by.entry(primary)
                .or_default()
                .1
                .push((*region, range.clone()));
        }
        if by.is_empty() {
            return Ok(self.start_commit_backup());
        }
        self.phase = CommitStage::Validating;
        self.pending = by.keys().copied().collect();
        Ok(CommitStep::Send(
            by.into_iter()
                .map(|(n, (keys, ranges))| {
                    let validate = TxnRequest::Validate {
                        tx: self.id,
                        read_ts: self.read_ts,
                        keys,
                        ranges,
                    };
                    (n, self.held_if_unwaited(validate))
                })
                .collect(),
        ))
    }

    /// `req` wrapped to be held until `write_ts` passed, if it was not
    /// waited out; as is otherwise.
    fn held_if_unwaited(&self, req: TxnRequest) -> TxnRequest {
        match (self.write_ts_unwaited, self.write_ts) {
            (true, Some(write_ts)) => TxnRequest::AfterWriteTs {
                write_ts,
                req: Box::new(req),
            },
            _ => req,
        }
    }

    fn start_commit_backup(&mut self) -> CommitStep {
        let Some(write_ts) = self.write_ts else {
            return CommitStep::Done(Err(self.failure.unwrap_or(AbortReason::User)));
        };
        let regions = self.written_regions();
        let by = self.writes_by(|r| r.backups.clone());
        if by.is_empty() {
            return self.start_commit_primary();
        }
        // A VALIDATE held until `write_ts` passed answered already: the
        // COMMIT-BACKUPs need no hold of their own.
        let held = self.write_ts_unwaited && self.phase != CommitStage::Validating;
        self.backup_targets = by.keys().copied().collect();
        self.pending = self.backup_targets.clone();
        self.phase = CommitStage::CommittingBackups;
        CommitStep::Send(
            by.into_iter()
                .map(|(n, writes)| {
                    let backup = TxnRequest::CommitBackup {
                        record: LockRecord {
                            tx: self.id,
                            read_ts: self.read_ts,
                            regions: regions.clone(),
                            writes,
                        },
                        write_ts,
                    };
                    let req = if held {
                        self.held_if_unwaited(backup)
                    } else {
                        backup
                    };
                    (n, req)
                })
                .collect(),
        )
    }

    fn start_commit_primary(&mut self) -> CommitStep {
        let Some(write_ts) = self.write_ts else {
            return CommitStep::Done(Err(self.failure.unwrap_or(AbortReason::User)));
        };
        // COMMIT-PRIMARY releases the locks: `write_ts` must have passed,
        // waited out here or shown past by a node that held a VALIDATE or
        // COMMIT-BACKUP whose reply is in (FaRMv2 §7.3).
        assert!(
            !self.write_ts_unwaited
                || matches!(
                    self.phase,
                    CommitStage::Validating | CommitStage::CommittingBackups
                ),
            "COMMIT-PRIMARY of {} before any node showed its unwaited write_ts {write_ts} past",
            self.id
        );
        self.phase = CommitStage::CommittingPrimaries;
        self.pending = self.lock_targets.clone();
        CommitStep::Send(
            self.lock_targets
                .iter()
                .map(|n| {
                    (
                        *n,
                        TxnRequest::CommitPrimary {
                            tx: self.id,
                            write_ts,
                        },
                    )
                })
                .collect(),
        )
    }

    /// Consume one reply of the current phase. Returns the next step when the
    /// phase completes (or, for COMMIT-PRIMARY, on the first ack), `None`
    /// while replies are still outstanding.
    ///
    /// Errors: `Protocol` for a reply that does not fit the phase.
    pub fn on_reply(
        &mut self,
        from: NodeId,
        resp: Response,
    ) -> Result<Option<CommitStep>, TxnError> {
        if matches!(resp, Response::Txn(TxnResponse::Installed)) {
            return self.on_installed(from);
        }
        if !self.pending.remove(&from) {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!("unexpected reply in phase {:?}: {resp:?}", self.phase),
            });
        }
        match (self.phase, resp) {
            (CommitStage::Locking, resp) if is_lock_outcome(&resp) => {
                match resp {
                    Response::Txn(TxnResponse::Lock(Err(c))) => {
                        self.failure.get_or_insert(AbortReason::Lock(c));
                    }
                    Response::Txn(TxnResponse::Lock(Ok(()))) => {}
                    _ => {
                        // Refused for the configuration: this node logged
                        // nothing; the others' LOCKs get ABORT.
                        self.failure.get_or_insert(AbortReason::Reconfigured);
                    }
                }
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                if let Some(reason) = self.failure {
                    self.phase = CommitStage::Aborted;
                    return Ok(Some(CommitStep::Done(Err(reason))));
                }
                self.phase = CommitStage::AwaitWriteTs;
                Ok(Some(CommitStep::GetWriteTs))
            }
            (CommitStage::Validating, resp) if is_validate_outcome(&resp) => {
                match resp {
                    Response::Txn(TxnResponse::Validate(Err(c))) => {
                        self.failure.get_or_insert(AbortReason::Validate(c));
                    }
                    Response::Txn(TxnResponse::Validate(Ok(()))) => {}
                    _ => {
                        self.failure.get_or_insert(AbortReason::Reconfigured);
                    }
                }
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                if let Some(reason) = self.failure {
                    self.phase = CommitStage::Aborted;
                    return Ok(Some(CommitStep::Done(Err(reason))));
                }
                Ok(Some(self.start_commit_backup()))
            }
            (CommitStage::CommittingBackups, Response::Txn(TxnResponse::Ack)) => {
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                Ok(Some(self.start_commit_primary()))
            }
            (CommitStage::CommittingPrimaries, Response::Txn(TxnResponse::Ack)) => {
                if self.pending.is_empty() {
                    self.phase = CommitStage::Committed;
                }
                if self.reported {
                    return Ok(None);
                }
                self.reported = true;
                Ok(self.write_ts.map(|ts| CommitStep::Done(Ok(ts))))
            }
            (phase, resp) => Err(TxnError::Protocol {
                node: from,
                detail: format!("reply {resp:?} in phase {phase:?}"),
            }),
        }
    }

    /// A primary's first answer to COMMIT-PRIMARY under disk durability
    /// ([`TxnResponse::Installed`]): it installed the writes, and its
    /// `Ack` follows once the record is durable. The first such answer (or
    /// `Ack`) reports the commit, as FaRM §4 step 4 reports at the first
    /// COMMIT-PRIMARY ack; the primary stays pending, so truncation
    /// ([`Self::is_fully_acknowledged`]) still waits for every `Ack`.
    fn on_installed(&mut self, from: NodeId) -> Result<Option<CommitStep>, TxnError> {
        if self.phase != CommitStage::CommittingPrimaries || !self.pending.contains(&from) {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!(
                    "Installed from a node not awaited in phase {:?}",
                    self.phase
                ),
            });
        }
        if self.reported {
            return Ok(None);
        }
        self.reported = true;
        Ok(self.write_ts.map(|ts| CommitStep::Done(Ok(ts))))
    }

    /// ABORT records to send (one-way) after an aborted commit: every primary
    /// a LOCK was sent to.
    pub fn abort_messages(&self) -> Vec<(NodeId, TxnRequest)> {
        if self.phase != CommitStage::Aborted {
            return Vec::new();
        }
        self.lock_targets
            .iter()
            .map(|n| (*n, TxnRequest::Abort { tx: self.id }))
            .collect()
    }

    /// True once every COMMIT-PRIMARY has been acknowledged.
    pub fn is_fully_acknowledged(&self) -> bool {
        self.phase == CommitStage::Committed
    }

    /// Nodes that hold log records of this committed transaction and must
    /// receive its TRUNCATE: the write-set primaries and backups.
    pub fn truncation_targets(&self) -> Vec<NodeId> {
        let set: BTreeSet<NodeId> = self
            .lock_targets
            .union(&self.backup_targets)
            .copied()
            .collect();
        set.into_iter().collect()
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::Participant;
    use meridian_config::Configuration;
    use meridian_wire::ConfigId;

    /// Two nodes, one copy, two regions: keys below 0x80 on n0, the rest on n1.
    fn config(max_scan_rows: u32) -> Configuration {
        let mut c = Configuration::local(2, 7000, 1, 2, std::path::Path::new("/nonexistent"));
        c.limits.max_scan_rows = max_scan_rows;
        c
    }

    fn tx(l: u64) -> TxId {
        TxId {
            config: ConfigId(1),
            coordinator: 5,
            thread: 0,
            local: l,
        }
    }

    struct Net {
        parts: BTreeMap<NodeId, Participant>,
        map: Arc<RegionMap>,
        limits: Arc<Limits>,
        next: u64,
    }

    impl Net {
        fn new(participant_cfg: &Configuration, coordinator_cfg: &Configuration) -> Self {
            Net {
                parts: (0..2)
                    .map(|i| (NodeId(i), Participant::new(NodeId(i), participant_cfg)))
                    .collect(),
                map: Arc::new(RegionMap::new(coordinator_cfg)),
                limits: Arc::new(coordinator_cfg.limits.clone()),
                next: 100,
            }
        }

        fn begin(&mut self, read_ts: u64) -> Transaction {
            self.begin_with(read_ts, TxnOptions::default())
        }

        fn begin_with(&mut self, read_ts: u64, opts: TxnOptions) -> Transaction {
            self.next += 1;
            Transaction::new(
                tx(self.next),
                Timestamp(read_ts),
                opts,
                self.map.clone(),
                self.limits.clone(),
            )
        }

        fn call(&mut self, node: NodeId, req: &TxnRequest) -> Response {
            self.parts
                .get_mut(&node)
                .map(|p| p.handle(&[], req))
                .expect("a participant")
        }

        /// Commit `t`, answering every message from the participants.
        fn commit(&mut self, t: &mut Transaction, write_ts: u64) -> Result<Timestamp, AbortReason> {
            let mut step = t.commit().expect("commit starts");
            loop {
                step = match step {
                    CommitStep::Done(r) => {
                        for (n, req) in t.abort_messages() {
                            self.call(n, &req);
                        }
                        return r;
                    }
                    CommitStep::GetWriteTs => t.on_write_ts(Timestamp(write_ts)).unwrap(),
                    CommitStep::Send(msgs) => {
                        let mut next = None;
                        for (n, req) in msgs {
                            let resp = self.call(n, &req);
                            if let Some(s) = t.on_reply(n, resp).unwrap() {
                                next.get_or_insert(s);
                            }
                        }
                        next.expect("phase decided")
                    }
                };
            }
        }

        fn write(&mut self, keys: &[&[u8]], write_ts: u64) {
            let mut t = self.begin(write_ts - 1);
            for k in keys {
                t.put(k.to_vec(), b"v".to_vec()).unwrap();
            }
            assert_eq!(self.commit(&mut t, write_ts), Ok(Timestamp(write_ts)));
        }

        /// Drive a scan to completion; returns the rows and the requests sent.
        fn scan(&mut self, t: &mut Transaction, limit: u32) -> (Vec<Key>, Vec<TxnRequest>) {
            let mut sent = Vec::new();
            let mut step = t.scan(b"", None, limit).unwrap();
            loop {
                match step {
                    ScanStep::Done(rows) => {
                        return (rows.into_iter().map(|(k, _)| k).collect(), sent)
                    }
                    ScanStep::Send(n, req) => {
                        let resp = self.call(n, &req);
                        sent.push(req);
                        step = t.on_scan_reply(n, resp).unwrap();
                    }
                }
            }
        }
    }

    /// A single-read transaction sends one READ-LATEST, sees the newest
    /// version whatever its `read_ts` (here below it), records the version
    /// it saw (a tombstone's too), and refuses a second read, a scan and a
    /// write; it commits with no messages.
    #[test]
    fn a_single_read_reads_the_newest_version_once() {
        let c = config(10_000);
        let mut net = Net::new(&c, &c);
        net.write(&[b"\x10"], 30);
        let mut t = net.begin_with(20, TxnOptions::single_read());
        let GetStep::Remote(n, req) = t.get(b"\x10").unwrap() else {
            panic!("a single read is served by the primary");
        };
        assert!(matches!(req, TxnRequest::ReadLatest { .. }), "{req:?}");
        assert!(matches!(t.get(b"\x11"), Err(TxnError::SingleRead)));
        assert!(matches!(t.scan(b"", None, 1), Err(TxnError::SingleRead)));
        assert!(matches!(
            t.put(b"\x12".to_vec(), b"v".to_vec()),
            Err(TxnError::ReadOnly)
        ));
        let resp = net.call(n, &req);
        let v = t.on_read_reply(n, b"\x10", resp).unwrap();
        assert_eq!(
            v.map(|v| v.version),
            Some(Timestamp(30)),
            "newer than read_ts 20"
        );
        assert_eq!(t.observed_version(), Some(Timestamp(30)));
        assert_eq!(
            net.commit(&mut t, 40),
            Ok(Timestamp(20)),
            "read-only: no write_ts"
        );
        // A deleted key: absent, at the tombstone's version.
        let mut d = net.begin(49);
        d.delete(b"\x20".to_vec()).unwrap();
        assert_eq!(net.commit(&mut d, 50), Ok(Timestamp(50)));
        let mut t = net.begin_with(60, TxnOptions::single_read());
        let GetStep::Remote(n, req) = t.get(b"\x20").unwrap() else {
            panic!("remote");
        };
        let resp = net.call(n, &req);
        assert_eq!(t.on_read_reply(n, b"\x20", resp).unwrap(), None);
        assert_eq!(t.observed_version(), Some(Timestamp(50)));
    }

    /// A buffered delete inside the range must not make the scan stop at
    /// `limit` stored rows: the merged result would have fewer than
    /// `limit` rows, and the next region would be neither read nor
    /// validated.
    #[test]
    fn a_buffered_delete_does_not_end_a_scan_early() {
        let c = config(10_000);
        let mut net = Net::new(&c, &c);
        net.write(&[b"\x10", b"\x20", b"\x90"], 10);
        let mut t = net.begin(20);
        t.delete(b"\x10".to_vec()).unwrap();
        let (rows, sent) = net.scan(&mut t, 2);
        assert_eq!(rows, vec![b"\x20".to_vec(), b"\x90".to_vec()]);
        assert_eq!(sent.len(), 2, "both regions read");
        // The second region's range is validated too: a concurrent insert
        // before the commit is a phantom that aborts it.
        net.write(&[b"\x85"], 30);
        t.put(b"\x11".to_vec(), b"w".to_vec()).unwrap();
        assert!(matches!(
            net.commit(&mut t, 40),
            Err(AbortReason::Validate(Conflict::Changed))
        ));
    }

    /// A participant that clamps a scan to its own `max_scan_rows` answers
    /// `more = true`; the scan reads the rest of that region before the
    /// next one, so no unread, unvalidated gap is left.
    #[test]
    fn a_clamped_region_is_read_to_the_end_before_the_next() {
        let participant = config(2);
        let coordinator = config(10_000);
        let mut net = Net::new(&participant, &coordinator);
        net.write(&[b"\x10", b"\x20", b"\x30", b"\x90"], 10);
        let mut t = net.begin(20);
        let (rows, sent) = net.scan(&mut t, 10);
        assert_eq!(
            rows,
            vec![
                b"\x10".to_vec(),
                b"\x20".to_vec(),
                b"\x30".to_vec(),
                b"\x90".to_vec()
            ]
        );
        assert_eq!(sent.len(), 3, "region 0 twice (clamped), then region 1");
        // Rows past the limit are neither returned nor needed.
        let mut u = net.begin(20);
        let (rows, _) = net.scan(&mut u, 1);
        assert_eq!(rows, vec![b"\x10".to_vec()]);
    }

    #[test]
    fn scan_replies_are_checked() {
        let c = config(10_000);
        let mut net = Net::new(&c, &c);
        let mut t = net.begin(20);
        let ScanStep::Send(n, _) = t.scan(b"", None, 5).unwrap() else {
            panic!("expected a request");
        };
        // From the wrong node.
        let other = NodeId(1 - n.0);
        assert!(matches!(
            t.on_scan_reply(
                other,
                Response::Txn(TxnResponse::Scan(Ok((Vec::new(), false))))
            ),
            Err(TxnError::Protocol { .. })
        ));
    }

    /// A participant that moved to a newer configuration refuses LOCK with
    /// `ConfigMismatch` (FaRM §5.2 precise membership). Before the commit
    /// decision that is an abort to retry, not a protocol error (a false
    /// suspicion moves a live participant to a newer configuration), and
    /// the other participant's lock is released by ABORT.
    #[test]
    fn a_lock_refused_for_the_configuration_aborts_and_releases_the_others() {
        let c = config(10_000);
        let mut net = Net::new(&c, &c);
        let mut t = net.begin(20);
        t.put(b"\x10".to_vec(), b"a".to_vec()).unwrap();
        t.put(b"\x90".to_vec(), b"b".to_vec()).unwrap();
        let CommitStep::Send(msgs) = t.commit().expect("commit starts") else {
            panic!("expected LOCKs");
        };
        assert_eq!(msgs.len(), 2);
        let mut done = None;
        for (n, req) in msgs {
            let resp = if n == NodeId(1) {
                Response::Rejected(meridian_wire::Rejection::ConfigMismatch {
                    sent: ConfigId(1),
                    current: ConfigId(2),
                })
            } else {
                net.call(n, &req)
            };
            if let Some(s) = t.on_reply(n, resp).expect("a normal outcome") {
                done = Some(s);
            }
        }
        assert_eq!(done, Some(CommitStep::Done(Err(AbortReason::Reconfigured))));
        let aborts = t.abort_messages();
        assert!(aborts.iter().any(|(n, _)| *n == NodeId(0)), "{aborts:?}");
        for (n, req) in aborts {
            net.call(n, &req);
        }
        // The key n0 locked is free again: a later writer commits.
        net.write(&[b"\x10"], 30);
        // A refused read aborts the same way.
        let mut u = net.begin(40);
        let err = u
            .on_read_reply(
                NodeId(0),
                b"\x10",
                Response::Rejected(meridian_wire::Rejection::NotMember("n0".into())),
            )
            .unwrap_err();
        assert_eq!(err, TxnError::Aborted(AbortReason::Reconfigured));
    }
}
