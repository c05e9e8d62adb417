//! What [`check`](crate::check) found: counts and violations.

use std::fmt;

use crate::graph::EdgeKind;
use crate::history::{Key, Outcome, WriteId};

/// How many violations `Display` for [`CheckReport`] prints in full.
const DISPLAY_LIMIT: usize = 5;

/// Which guarantee a dependency cycle breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CycleClass {
    /// A cycle among transactions the client saw commit (or whose writes
    /// were observed): the history is not strictly serializable.
    StrictSerializability,
    /// A cycle that needs an aborted transaction: the committed history may
    /// be fine, but an aborted transaction observed an inconsistent or stale
    /// snapshot, which FaRMv2's opacity forbids.
    Opacity,
}

impl fmt::Display for CycleClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CycleClass::StrictSerializability => "strict-serializability",
            CycleClass::Opacity => "opacity",
        })
    }
}

/// Adya-style name of a cycle, from the kinds of its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Anomaly {
    /// Only write-write edges (dirty write).
    G0,
    /// Write-write and write-read edges only (circular information flow).
    G1c,
    /// Exactly one anti-dependency edge (read skew, lost update).
    GSingle,
    /// Two or more anti-dependency edges (write skew).
    G2,
}

impl Anomaly {
    /// Elle's name for the anomaly (`G0`, `G1c`, `G-single`, `G2-item`).
    pub fn as_str(self) -> &'static str {
        match self {
            Anomaly::G0 => "G0",
            Anomaly::G1c => "G1c",
            Anomaly::GSingle => "G-single",
            Anomaly::G2 => "G2-item",
        }
    }
}

/// One transaction on a reported cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleStep {
    /// Index of the transaction in [`History::txns`](crate::History).
    pub txn: usize,
    /// Its client session.
    pub process: u64,
    /// Its recorded outcome (an `Unknown` one on a cycle was promoted to
    /// committed because someone read its writes).
    pub outcome: Outcome,
    /// Kinds of the dependency edges from this transaction to the next step
    /// (the last step's edges lead back to the first). Real-time edges run
    /// through barrier nodes, so `Rt` is reported alone.
    pub edges_to_next: Vec<EdgeKind>,
}

/// A concrete dependency cycle, extracted from one strongly connected
/// component of the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// Which guarantee it breaks.
    pub class: CycleClass,
    /// Adya/Elle classification, by the weakest edge kind of each step.
    pub anomaly: Anomaly,
    /// True when the cycle needs a real-time edge (Elle's `-realtime`).
    pub realtime: bool,
    /// Number of transactions in the component the cycle came from.
    pub component_txns: usize,
    /// The cycle, starting anywhere.
    pub steps: Vec<CycleStep>,
}

impl Cycle {
    /// Elle-style name, e.g. `G-single-realtime`.
    pub fn name(&self) -> String {
        if self.realtime {
            format!("{}-realtime", self.anomaly.as_str())
        } else {
            self.anomaly.as_str().to_string()
        }
    }
}

/// Something wrong with a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A read of a value no transaction in the history wrote.
    GarbageRead {
        /// Reading transaction.
        txn: usize,
        /// Key read.
        key: Key,
        /// Value observed.
        write_id: WriteId,
    },
    /// A read of a value that was written, but to a different key.
    WrongKeyRead {
        /// Reading transaction.
        txn: usize,
        /// Key read.
        key: Key,
        /// Value observed.
        write_id: WriteId,
        /// Key the value was actually written to.
        written_key: Key,
        /// Writing transaction.
        writer: usize,
    },
    /// G1a: a read of a value written by an aborted transaction.
    AbortedRead {
        /// Reading transaction.
        txn: usize,
        /// Key read.
        key: Key,
        /// Value observed.
        write_id: WriteId,
        /// The aborted writer.
        writer: usize,
    },
    /// A store-served read returned the reading transaction's own write,
    /// which cannot be installed before the transaction commits.
    InternalRead {
        /// Reading (and writing) transaction.
        txn: usize,
        /// Key read.
        key: Key,
        /// Value observed.
        write_id: WriteId,
    },
    /// Two writes in the history carry the same write id; reads of it are
    /// attributed to the first.
    DuplicateWriteId {
        /// The duplicated id.
        write_id: WriteId,
        /// First writer.
        first: usize,
        /// Second writer.
        second: usize,
    },
    /// A committed writer has no `write_ts`, so the version order of the
    /// keys it wrote is unknown (ww/rw edges of those keys are skipped).
    MissingWriteTs {
        /// The writer.
        txn: usize,
    },
    /// Two committed writers of one key share a `write_ts`, so the key's
    /// version order is ambiguous (its ww/rw edges are skipped).
    WriteTsTie {
        /// The key.
        key: Key,
        /// The shared timestamp.
        write_ts: u64,
        /// One writer.
        first: usize,
        /// The other.
        second: usize,
    },
    /// A transaction completed before it was invoked; it gets no real-time
    /// edges.
    BadTiming {
        /// The transaction.
        txn: usize,
        /// Its invocation time.
        invoke_ns: u64,
        /// Its (earlier) completion time.
        complete_ns: u64,
    },
    /// A read (or a scan) found the key absent at its `read_ts`, but the
    /// newest version at or before `read_ts` is a live write: a lost row, a
    /// phantom, or a delete shown to readers it does not precede.
    AbsentRead {
        /// Reading transaction.
        txn: usize,
        /// Key found absent.
        key: Key,
        /// Writer of the live version.
        writer: usize,
        /// That version's `write_ts`.
        write_ts: u64,
        /// The reader's `read_ts`.
        read_ts: u64,
    },
    /// A dependency cycle.
    Cycle(Cycle),
    /// The history is too large for the checker's 30-bit node ids.
    TooLarge {
        /// Number of transactions.
        txns: usize,
    },
}

impl Violation {
    /// The cycle, if this is a cycle violation.
    pub fn as_cycle(&self) -> Option<&Cycle> {
        match self {
            Violation::Cycle(c) => Some(c),
            _ => None,
        }
    }
}

/// Renders a key for humans: printable ASCII as is, other bytes as `\xNN`.
pub(crate) struct KeyDisplay<'a>(pub(crate) &'a [u8]);

impl fmt::Display for KeyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for &b in self.0 {
            match b {
                b'"' => f.write_str("\\\"")?,
                b'\\' => f.write_str("\\\\")?,
                0x20..=0x7e => write!(f, "{}", b as char)?,
                _ => write!(f, "\\x{b:02x}")?,
            }
        }
        f.write_str("\"")
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} violation ({}) in a component of {} transactions: ",
            self.class,
            self.name(),
            self.component_txns
        )?;
        for s in &self.steps {
            write!(f, "T{} (process {}, {}) -", s.txn, s.process, s.outcome)?;
            for (i, k) in s.edges_to_next.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                f.write_str(k.as_str())?;
            }
            f.write_str("-> ")?;
        }
        match self.steps.first() {
            Some(s) => write!(f, "T{}", s.txn),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::GarbageRead { txn, key, write_id } => write!(
                f,
                "garbage read: T{txn} read {} = {write_id}, which nobody wrote",
                KeyDisplay(key)
            ),
            Violation::WrongKeyRead { txn, key, write_id, written_key, writer } => write!(
                f,
                "garbage read: T{txn} read {} = {write_id}, but T{writer} wrote that value to {}",
                KeyDisplay(key),
                KeyDisplay(written_key)
            ),
            Violation::AbortedRead { txn, key, write_id, writer } => write!(
                f,
                "G1a (aborted read): T{txn} read {} = {write_id}, written by aborted T{writer}",
                KeyDisplay(key)
            ),
            Violation::InternalRead { txn, key, write_id } => write!(
                f,
                "internal inconsistency: T{txn} read its own write {} = {write_id} from the store",
                KeyDisplay(key)
            ),
            Violation::DuplicateWriteId { write_id, first, second } => write!(
                f,
                "malformed history: write id {write_id} written by both T{first} and T{second}"
            ),
            Violation::MissingWriteTs { txn } => write!(
                f,
                "malformed history: committed writer T{txn} has no write_ts; its keys' version order is unknown"
            ),
            Violation::WriteTsTie { key, write_ts, first, second } => write!(
                f,
                "version order of {} ambiguous: T{first} and T{second} both committed at write_ts {write_ts}",
                KeyDisplay(key)
            ),
            Violation::BadTiming { txn, invoke_ns, complete_ns } => write!(
                f,
                "malformed history: T{txn} completed at {complete_ns} before its invocation at {invoke_ns}"
            ),
            Violation::AbsentRead { txn, key, writer, write_ts, read_ts } => write!(
                f,
                "missing row: T{txn} found {} absent at read_ts {read_ts}, but T{writer}'s live version at write_ts {write_ts} is the newest before it",
                KeyDisplay(key)
            ),
            Violation::Cycle(c) => c.fmt(f),
            Violation::TooLarge { txns } => {
                write!(f, "history of {txns} transactions is too large to check")
            }
        }
    }
}

/// The result of [`check`](crate::check).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Transactions the client saw commit.
    pub committed: usize,
    /// Transactions the client saw abort.
    pub aborted: usize,
    /// Transactions with unknown outcome.
    pub unknown: usize,
    /// Unknown-outcome transactions treated as committed because someone
    /// read one of their writes (the rest are dropped from the graph).
    pub promoted: usize,
    /// Edges in the dependency graph (real-time edges are counted as the
    /// barrier edges that encode them).
    pub edges: usize,
    /// Strongly connected components with more than one transaction; at
    /// most a few of them are reported as [`Violation::Cycle`].
    pub cyclic_components: usize,
    /// The violations found (capped per kind; see `suppressed`).
    pub violations: Vec<Violation>,
    /// Violations found but not listed because of the per-kind caps.
    pub suppressed: usize,
}

impl CheckReport {
    /// True when no violation of any kind was found.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty() && self.suppressed == 0 && self.cyclic_components == 0
    }

    /// The reported dependency cycles.
    pub fn cycles(&self) -> impl Iterator<Item = &Cycle> {
        self.violations.iter().filter_map(Violation::as_cycle)
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_ok() { "OK" } else { "INVALID" };
        write!(
            f,
            "{verdict}: {} committed, {} aborted, {} unknown ({} promoted), {} edges, {} cyclic components, {} violations",
            self.committed,
            self.aborted,
            self.unknown,
            self.promoted,
            self.edges,
            self.cyclic_components,
            self.violations.len() + self.suppressed
        )?;
        for v in self.violations.iter().take(DISPLAY_LIMIT) {
            write!(f, "\n  - {v}")?;
        }
        let more = self.violations.len().saturating_sub(DISPLAY_LIMIT) + self.suppressed;
        if more > 0 {
            write!(f, "\n  ... and {more} more")?;
        }
        Ok(())
    }
}
