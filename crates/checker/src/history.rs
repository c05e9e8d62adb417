//! The recorded history: one [`TxnRecord`] per transaction a client ran.

/// A key as the store sees it: an arbitrary byte string.
pub type Key = Vec<u8>;

/// Unique id of one written value (Elle-style: every write in a history
/// writes a distinct id). 0 is never used.
pub type WriteId = u64;

/// What the client learned about a transaction's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The store acknowledged the commit.
    Committed,
    /// The store reported an abort; none of its writes may ever be visible.
    Aborted,
    /// The client never learned the outcome (timeout, crash, lost reply).
    Unknown,
}

impl Outcome {
    /// Lower-case name, as used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Aborted => "aborted",
            Outcome::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transaction as observed by a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecord {
    /// Client session; a session runs transactions one at a time.
    pub process: u64,
    /// Real time (ns) the transaction was invoked (begin).
    pub invoke_ns: u64,
    /// Real time (ns) its outcome was known to the client.
    pub complete_ns: u64,
    /// Reads served by the store, in order; `None` = read the initial
    /// (absent) version. Reads of the transaction's own buffered writes are
    /// not recorded.
    pub reads: Vec<(Key, Option<WriteId>)>,
    /// Final buffered write per key.
    pub writes: Vec<(Key, WriteId)>,
    /// Final buffered delete per key, each with a history-only write id:
    /// tombstones are versions, placed in the version order by `write_ts`
    /// like any write. A key appears in `writes` or `deletes`, not both.
    pub deletes: Vec<(Key, WriteId)>,
    /// Range reads, checked as predicate reads (see [`ScanRead`]).
    pub scans: Vec<ScanRead>,
    /// What the client learned about the transaction's fate.
    pub outcome: Outcome,
    /// The snapshot timestamp the store assigned (informational only).
    pub read_ts: Option<u64>,
    /// For committed writers: the system's commit timestamp. It gives the
    /// per-key version order. An unknown-outcome writer may carry the
    /// `write_ts` it commits at if it commits at all (FaRM §5.3: recovery
    /// commits only on evidence carrying the coordinator's `write_ts`);
    /// once promoted, its writes are placed by it.
    pub write_ts: Option<u64>,
}

/// One scan: up to `limit` live rows with `start <= key < end` (`end =
/// None`: to the end of the key space), in key order.
///
/// The checker reads it as a predicate read: every returned row is a read of
/// that row's version, and every other key of the history inside the
/// covered range is a read of that key as *absent* (the covered range is
/// `[start, end)` if fewer than `limit` rows came back, else `[start, last
/// row]`). So a row the scan should have returned (a phantom or a missing
/// row) is caught like any stale read. Keys the transaction itself writes
/// or deletes are skipped (the scan saw its own buffered writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanRead {
    /// First key of the range.
    pub start: Key,
    /// End of the range (exclusive), `None` = unbounded.
    pub end: Option<Key>,
    /// The scan's row limit.
    pub limit: usize,
    /// Rows returned (key, value's write id), in key order.
    pub rows: Vec<(Key, WriteId)>,
}

impl TxnRecord {
    /// A transaction of `process` invoked at `invoke_ns`, with nothing read
    /// or written yet and an unknown outcome (the recorder fills it in).
    pub fn invoked(process: u64, invoke_ns: u64) -> Self {
        TxnRecord {
            process,
            invoke_ns,
            complete_ns: 0,
            reads: Vec::new(),
            writes: Vec::new(),
            deletes: Vec::new(),
            scans: Vec::new(),
            outcome: Outcome::Unknown,
            read_ts: None,
            write_ts: None,
        }
    }
}

/// A client history: every transaction any client ran, in any order.
///
/// Transactions are identified in reports by their index in `txns`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The transactions.
    pub txns: Vec<TxnRecord>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one transaction.
    pub fn push(&mut self, t: TxnRecord) {
        self.txns.push(t);
    }

    /// Appends every transaction of `other` (e.g. histories of several
    /// clients). Indices of `other`'s transactions shift by `self.len()`.
    pub fn merge(&mut self, other: History) {
        if self.txns.is_empty() {
            self.txns = other.txns;
        } else {
            self.txns.extend(other.txns);
        }
    }

    /// Number of transactions.
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// True when the history holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }
}

impl From<Vec<TxnRecord>> for History {
    fn from(txns: Vec<TxnRecord>) -> Self {
        History { txns }
    }
}

impl Extend<TxnRecord> for History {
    fn extend<I: IntoIterator<Item = TxnRecord>>(&mut self, iter: I) {
        self.txns.extend(iter);
    }
}
