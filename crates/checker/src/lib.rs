//! # meridian-checker: is this history strictly serializable and opaque?
//!
//! ## The problem
//!
//! Clients of Meridian record what they saw: for every transaction, when it
//! was invoked and when its outcome became known, which version of each key
//! its reads returned, what it wrote, and whether it committed, aborted or
//! ended with an unknown outcome. From that record alone we want to decide
//! whether the store behaved as FaRMv2 promises (Shamis et al., "Fast
//! General Distributed Transactions with Opacity", SIGMOD 2019, §2):
//!
//! * **strict serializability**: committed transactions appear to execute
//!   one at a time, in an order consistent with real time (if T1 completed
//!   before T2 was invoked, T1 comes first);
//! * **opacity**: even transactions that abort observe a consistent,
//!   real-time-respecting snapshot, so application code never runs on
//!   impossible data.
//!
//! ## The algorithm
//!
//! We follow Adya's dependency-graph formulation ("Weak Consistency", 1999)
//! as made practical by Jepsen's Elle (Kingsbury & Alvaro, VLDB 2020) for
//! the *rw-register* model. Elle's key trick is that every write writes a
//! unique value, so a read names exactly the write it observed; Meridian's
//! workloads write unique [`WriteId`]s for the same reason. Because the
//! store also exposes its commit timestamp (`write_ts`), the per-key version
//! order is known directly instead of being inferred.
//!
//! 1. **Read validation.** A read of an id nobody wrote (or wrote to another
//!    key) is a *garbage read*; a read of an aborted transaction's write is
//!    Adya's **G1a** (aborted read); a store-served read of the reader's own
//!    write is an internal inconsistency. Such reads add no edges.
//! 2. **Unknown outcomes.** A transaction whose fate the client never
//!    learned is treated as committed if anybody read one of its writes,
//!    and dropped otherwise. Its completion time is taken as +infinity (it
//!    might have taken effect long after the client gave up), so it precedes
//!    nothing in real time. If it has no `write_ts` it keeps its wr edges
//!    but is left out of the version order.
//! 3. **Graph.** Nodes are committed transactions plus aborted ones, which
//!    join as read-only nodes. Edges, per Adya: *ww* between consecutive
//!    versions of a key (ordered by `write_ts`, the initial absent version
//!    first), *wr* from a version's writer to its readers, *rw*
//!    (anti-dependency) from a reader of a version to the writer of the next
//!    one, and *rt* (real time) from T1 to T2 when
//!    `T1.complete_ns < T2.invoke_ns`.
//! 4. **Real time in O(n log n).** The rt relation has Θ(n²) pairs. Like
//!    Elle we encode it with barrier nodes: invocations are processed in
//!    time order, and before each one every not-yet-absorbed completion with
//!    a strictly earlier time feeds a fresh barrier chained after the
//!    previous one; the invoked transaction hangs off the newest barrier.
//!    A path T1 → barriers → T2 exists iff `T1.complete < T2.invoke`, so
//!    cycles are unchanged while the graph stays linear in size.
//! 5. **Cycles.** Iterative Tarjan finds strongly connected components with
//!    two or more transactions; a BFS inside each (at most ten are detailed)
//!    extracts a shortest concrete cycle, and barrier runs are collapsed to
//!    single rt steps. Cycles are named as Elle does: only ww edges is
//!    **G0**, ww/wr is **G1c**, one rw is **G-single**, more is **G2-item**,
//!    with a `-realtime` suffix when an rt edge is needed. A component that
//!    contains a cycle of committed transactions is a strict-serializability
//!    violation; one whose every cycle needs an aborted transaction is an
//!    opacity violation.
//!
//! ## Invariants
//!
//! * Soundness: every edge is a true ordering constraint of any legal
//!   serial order, so any reported cycle is a real violation. When data is
//!   missing or contradictory (no `write_ts`, equal `write_ts` on one key,
//!   duplicated ids) the affected edges are dropped and the problem itself
//!   is reported, never guessed around and never a panic.
//! * Real-time uses strict `<`: transactions whose completion and
//!   invocation times are equal are concurrent.
//! * Nothing recurses and everything is O((n + ops) log n): adjacency is a
//!   CSR array indexed by node number, so multi-million-transaction
//!   histories check in seconds.
//!
//! ## Export
//!
//! [`to_edn`] / [`write_edn`] write the history in Jepsen's EDN format
//! (`:invoke` plus `:ok`/`:fail`/`:info` ops of `:f :txn` with
//! `[[:r k v] [:w k v]]` values), so Elle can check it independently.
//!
//! ## Sources
//!
//! * A. Adya, *Weak Consistency: A Generalized Theory and Optimistic
//!   Implementations for Distributed Transactions*, MIT PhD thesis, 1999:
//!   the G0, G1a/G1b/G1c and G2 phenomena.
//! * K. Kingsbury, P. Alvaro, *Elle: Inferring Isolation Anomalies from
//!   Experimental Observations*, VLDB 2020, and the `elle.rw-register`
//!   model.
//! * A. Shamis et al., *Fast General Distributed Transactions with
//!   Opacity*, SIGMOD 2019, §2 (FaRMv2's strict serializability and opacity).

#![warn(missing_docs)]

mod check;
mod edn;
mod fxhash;
mod graph;
mod history;
mod report;

pub use check::check;
pub use edn::{to_edn, write_edn};
pub use graph::EdgeKind;
pub use history::{History, Key, Outcome, ScanRead, TxnRecord, WriteId};
pub use report::{Anomaly, CheckReport, Cycle, CycleClass, CycleStep, Violation};
