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
//! Recovery (FaRM §5.3) will read these records to find recovering
//! transactions; that is why they carry the full LOCK payload.

use meridian_wire::{LockRecord, Timestamp, TxId};
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
}

impl TxLog {
    /// Records held (both kinds).
    pub fn len(&self) -> usize {
        self.primary.len() + self.backup.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
