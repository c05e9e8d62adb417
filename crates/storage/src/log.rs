//! The transaction log of one node (FaRM §4, Table 1).
//!
//! A primary keeps each LOCK record until the coordinator truncates the
//! transaction; the record's state moves from `Locked` to `Committed` on
//! COMMIT-PRIMARY. A backup keeps each COMMIT-BACKUP record (with its
//! `write_ts`) and applies it to its region replicas lazily, when the
//! transaction is truncated. ABORT drops a LOCK record at once.
//!
//! The log is bounded by `Limits::max_log_records`; a full log refuses new
//! records with `Conflict::Overloaded` (FaRM reserves log space before
//! commit for the same reason, §4 "log reservations").
//!
//! Recovery (FaRM §5.3) reads these records to find recovering
//! transactions; that is why they carry the full LOCK payload. A replica
//! that lacked a recovering transaction's record receives it from the
//! region's primary (REPLICATE-TX-STATE, FaRM §5.3 step 5) and keeps it,
//! with the evidence the region had for it, until the decision.

use meridian_wire::{Evidence, LockRecord, Timestamp, TxId};
use std::collections::BTreeMap;

/// State of a LOCK record at a primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LockState {
    /// Locks held, outcome not yet known here.
    Locked,
    /// COMMIT-PRIMARY processed at this `write_ts`.
    Committed(Timestamp),
}

/// A node's log of un-truncated records.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TxLog {
    /// LOCK records at this node as primary.
    pub primary: BTreeMap<TxId, (LockRecord, LockState)>,
    /// COMMIT-BACKUP records at this node as backup, with `write_ts`.
    pub backup: BTreeMap<TxId, (LockRecord, Timestamp)>,
    /// Records of recovering transactions replicated to this node by a
    /// region's primary (FaRM §5.3 step 5, REPLICATE-TX-STATE): the
    /// record (writes in the regions replicated here), the strongest
    /// evidence the region had (`CommitPrimary`, `CommitBackup` or
    /// `Lock`), and `write_ts` if known. COMMIT-RECOVERY at a replica with
    /// no LOCK or COMMIT-BACKUP record of its own in the region keeps (or
    /// puts) the region's writes here as `CommitPrimary` evidence with
    /// `write_ts`, until truncation, so the replica reports the commit to
    /// later configurations, though it held no record of its own in the
    /// region. Like a COMMIT-BACKUP record,
    /// an entry with `write_ts` holds GC below it until it is applied.
    #[serde(default)]
    pub replicated: BTreeMap<TxId, (LockRecord, Evidence, Option<Timestamp>)>,
}

impl TxLog {
    /// Records held (all kinds).
    pub fn len(&self) -> usize {
        self.primary.len() + self.backup.len() + self.replicated.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
