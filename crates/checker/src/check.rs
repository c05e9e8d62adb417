//! The checker proper: read validation, version orders, graph construction
//! and cycle search. See the crate documentation for the algorithm.

use crate::fxhash::{map_with_capacity, FxHashMap, FxHashSet};
use crate::graph::{self, Csr, EdgeKind, EdgeList, MAX_NODES};
use crate::history::{History, Outcome, TxnRecord, WriteId};
use crate::report::{Anomaly, CheckReport, Cycle, CycleClass, CycleStep, Violation};

/// Cycles reported in full; further cyclic components are only counted.
const MAX_CYCLES: usize = 10;
/// Non-cycle violations listed per category; the rest are counted.
const MAX_PER_CATEGORY: usize = 100;

/// `read_src` value: the read saw the initial (absent) version.
const SRC_INITIAL: u32 = u32::MAX;
/// `read_src` value: the read is invalid (garbage, G1a, ...); no edges.
const SRC_INVALID: u32 = u32::MAX - 1;
/// A read of an absent key, resolved once versions are ordered.
const SRC_ABSENT: u32 = u32::MAX - 2;
/// `version_pos` value: the write is not in its key's version order.
const UNPLACED: u32 = u32::MAX;

/// Role of a transaction in the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Not in the graph (an unknown-outcome transaction nobody read from).
    Excluded,
    /// A committed writer/reader (includes promoted unknown ones).
    Committed,
    /// An aborted transaction: a read-only node, for opacity.
    Aborted,
}

/// Categories for the per-category caps.
#[derive(Clone, Copy)]
enum Cat {
    Garbage = 0,
    AbortedRead,
    Internal,
    Duplicate,
    MissingTs,
    Tie,
    Timing,
    Absent,
}
const CATS: usize = 8;

struct Sink {
    violations: Vec<Violation>,
    per_cat: [usize; CATS],
    suppressed: usize,
}

impl Sink {
    fn push(&mut self, cat: Cat, v: impl FnOnce() -> Violation) {
        let c = &mut self.per_cat[cat as usize];
        if *c < MAX_PER_CATEGORY {
            self.violations.push(v());
        } else {
            self.suppressed += 1;
        }
        *c += 1;
    }
}

/// Checks `h` for strict serializability (committed transactions) and
/// opacity (aborted transactions observed consistent, real-time-respecting
/// snapshots). Never panics on malformed input; problems become violations.
///
/// The phases: intern keys and flatten the history ([`Flat::build`]);
/// index the writers ([`index_writers`]); validate and resolve reads
/// ([`resolve_reads`], [`promote_seen_deletes`]); order each key's
/// versions ([`order_versions`]) and resolve absent reads against them
/// ([`resolve_absent_reads`]); build the graph ([`add_ww_edges`],
/// [`add_read_edges`], [`add_txn_realtime_edges`]); find its cyclic
/// components ([`cyclic_components`]) and explain one cycle in each
/// ([`explain_component`]).
pub fn check(h: &History) -> CheckReport {
    let txns = &h.txns;
    let n = txns.len();
    let mut report = CheckReport::default();
    for t in txns {
        match t.outcome {
            Outcome::Committed => report.committed += 1,
            Outcome::Aborted => report.aborted += 1,
            Outcome::Unknown => report.unknown += 1,
        }
    }
    let reads_of = expand_scans(h);
    let total_writes: usize = txns.iter().map(|t| t.writes.len() + t.deletes.len()).sum();
    let total_reads: usize = reads_of.iter().map(|r| r.len()).sum();
    // Transactions plus at most one barrier per transaction must fit the
    // packed node ids; write-op indices must stay below the sentinels.
    if 2 * n + 1 >= MAX_NODES || total_writes >= SRC_ABSENT as usize {
        report.violations.push(Violation::TooLarge { txns: n });
        return report;
    }
    let mut sink = Sink {
        violations: Vec::new(),
        per_cat: [0; CATS],
        suppressed: 0,
    };

    // 1-3: flatten, index the writers, resolve the reads.
    let mut flat = Flat::build(txns, &reads_of, total_reads, total_writes);
    let writer_of = index_writers(txns, &flat, total_writes, &mut sink);
    let (mut read_src, mut promoted) = resolve_reads(txns, &reads_of, &flat, &writer_of, &mut sink);
    drop(writer_of);
    promote_seen_deletes(txns, &reads_of, &flat, &mut promoted);
    let role = roles(txns, &promoted);
    report.promoted = promoted.iter().filter(|&&p| p).count();
    drop(promoted);

    // 4: version orders, and the absent reads resolved against them.
    let (versions, version_ts) = order_versions(txns, &flat, &role, total_writes, &mut sink);
    resolve_absent_reads(
        txns,
        &flat,
        &role,
        &versions,
        version_ts,
        &mut read_src,
        &mut sink,
    );
    drop(std::mem::take(&mut flat.write_del));

    // 5: edges.
    let mut edges = EdgeList::with_capacity(2 * total_writes + 2 * total_reads + 3 * n);
    add_ww_edges(&flat, &versions, &mut edges);
    add_read_edges(&flat, &versions, &role, &read_src, &mut edges);
    drop(versions);
    drop(read_src);
    let nodes = add_txn_realtime_edges(txns, &role, &mut edges, &mut sink);
    let g = Csr::build(nodes, edges);
    report.edges = g.edge_count();

    // 6-7: cyclic components, one concrete cycle per reported component.
    let (components, cyclic) = cyclic_components(&g, n, &role);
    report.cyclic_components = cyclic;
    for scc in &components {
        if let Some(c) = explain_component(h, &g, &role, scc) {
            sink.violations.push(Violation::Cycle(c));
        }
    }

    report.violations = sink.violations;
    report.suppressed = sink.suppressed;
    report
}

/// Each transaction's point reads plus its scans as point reads, as
/// [`expand_scans`] returns them.
type ReadsOf<'h> = [std::borrow::Cow<'h, [(crate::Key, Option<WriteId>)]>];

/// The history's reads and writes flattened into arrays indexed by read
/// and by write op (a transaction's writes, then its deletes), with keys
/// interned to dense ids.
struct Flat<'a> {
    /// Interned key id -> the key (borrowed from the history).
    key_names: Vec<&'a [u8]>,
    /// Transaction `i`'s reads are `read_off[i]..read_off[i + 1]`.
    read_off: Vec<usize>,
    /// Each read's key id.
    read_key: Vec<u32>,
    /// Each write op's key id.
    write_key: Vec<u32>,
    /// Each write op's transaction.
    write_txn: Vec<u32>,
    /// Whether each write op is a delete.
    write_del: Vec<bool>,
}

impl<'a> Flat<'a> {
    /// Phase 1: interns every key read or written (borrowed, so no key is
    /// copied) and flattens the reads and write ops.
    fn build(
        txns: &'a [TxnRecord],
        reads_of: &'a ReadsOf<'_>,
        total_reads: usize,
        total_writes: usize,
    ) -> Self {
        let n = txns.len();
        let mut key_ids: FxHashMap<&[u8], u32> = map_with_capacity(1024);
        let mut flat = Flat {
            key_names: Vec::new(),
            read_off: Vec::with_capacity(n + 1),
            read_key: Vec::with_capacity(total_reads),
            write_key: Vec::with_capacity(total_writes),
            write_txn: Vec::with_capacity(total_writes),
            write_del: Vec::with_capacity(total_writes),
        };
        flat.read_off.push(0);
        for (i, t) in txns.iter().enumerate() {
            for (k, _) in reads_of[i].iter() {
                flat.read_key
                    .push(intern_key(&mut key_ids, &mut flat.key_names, k));
            }
            for ((k, _), del) in t
                .writes
                .iter()
                .map(|w| (w, false))
                .chain(t.deletes.iter().map(|w| (w, true)))
            {
                flat.write_key
                    .push(intern_key(&mut key_ids, &mut flat.key_names, k));
                flat.write_txn.push(i as u32);
                flat.write_del.push(del);
            }
            flat.read_off.push(flat.read_key.len());
        }
        flat
    }

    /// The number of distinct keys.
    fn nkeys(&self) -> usize {
        self.key_names.len()
    }
}

/// Phase 2: who wrote each value, as the write op that wrote it. A write id
/// written twice is a violation; its first write op keeps it.
fn index_writers(
    txns: &[TxnRecord],
    flat: &Flat,
    total_writes: usize,
    sink: &mut Sink,
) -> FxHashMap<WriteId, u32> {
    let mut writer_of: FxHashMap<WriteId, u32> = map_with_capacity(total_writes);
    let mut j = 0usize;
    for (i, t) in txns.iter().enumerate() {
        for &(_, w) in t.writes.iter().chain(&t.deletes) {
            match writer_of.get(&w) {
                Some(&first) => {
                    let first = flat.write_txn[first as usize] as usize;
                    sink.push(Cat::Duplicate, || Violation::DuplicateWriteId {
                        write_id: w,
                        first,
                        second: i,
                    });
                }
                None => {
                    writer_of.insert(w, j as u32);
                }
            }
            j += 1;
        }
    }
    writer_of
}

/// Phase 3: validates every read and resolves it to the write op it saw,
/// or to a sentinel (`SRC_INITIAL`, `SRC_INVALID`, or `SRC_ABSENT` for an
/// absent read [`resolve_absent_reads`] decides). Returns each read's
/// source and which unknown-outcome transactions someone read from (they
/// committed: promoted).
fn resolve_reads(
    txns: &[TxnRecord],
    reads_of: &ReadsOf<'_>,
    flat: &Flat,
    writer_of: &FxHashMap<WriteId, u32>,
    sink: &mut Sink,
) -> (Vec<u32>, Vec<bool>) {
    let mut read_src: Vec<u32> = Vec::with_capacity(flat.read_key.len());
    let mut promoted = vec![false; txns.len()];
    for (i, t) in txns.iter().enumerate() {
        for (r, (key, val)) in reads_of[i].iter().enumerate() {
            let rk = flat.read_key[flat.read_off[i] + r];
            let src = match val {
                // Which version an absent read saw (the initial absence or
                // a tombstone) is decided by its read_ts later.
                None if t.read_ts.is_some() => SRC_ABSENT,
                None => SRC_INITIAL,
                Some(w) => match writer_of.get(w) {
                    None => {
                        sink.push(Cat::Garbage, || Violation::GarbageRead {
                            txn: i,
                            key: key.clone(),
                            write_id: *w,
                        });
                        SRC_INVALID
                    }
                    Some(&op) => {
                        read_of_write(txns, flat, (i, rk, key, *w), op, &mut promoted, sink)
                    }
                },
            };
            read_src.push(src);
        }
    }
    (read_src, promoted)
}

/// The source of transaction `i`'s read of `key` (key id `rk`) that saw
/// write id `w`, written by write op `op`: `op` itself, or `SRC_INVALID`
/// for a read of its own write, of another key's write or of an aborted
/// write (each a violation). A read of an unknown-outcome write promotes
/// its writer.
fn read_of_write(
    txns: &[TxnRecord],
    flat: &Flat,
    (i, rk, key, w): (usize, u32, &crate::Key, WriteId),
    op: u32,
    promoted: &mut [bool],
    sink: &mut Sink,
) -> u32 {
    let wt = flat.write_txn[op as usize] as usize;
    let wk = flat.write_key[op as usize];
    if wt == i {
        sink.push(Cat::Internal, || Violation::InternalRead {
            txn: i,
            key: key.clone(),
            write_id: w,
        });
        SRC_INVALID
    } else if wk != rk {
        sink.push(Cat::Garbage, || Violation::WrongKeyRead {
            txn: i,
            key: key.clone(),
            write_id: w,
            written_key: flat.key_names[wk as usize].to_vec(),
            writer: wt,
        });
        SRC_INVALID
    } else {
        match txns[wt].outcome {
            Outcome::Aborted => {
                sink.push(Cat::AbortedRead, || Violation::AbortedRead {
                    txn: i,
                    key: key.clone(),
                    write_id: w,
                    writer: wt,
                });
                SRC_INVALID
            }
            Outcome::Unknown => {
                promoted[wt] = true;
                op
            }
            Outcome::Committed => op,
        }
    }
}

/// Promotes the unknown-outcome deletes whose tombstone a single read saw.
///
/// An absent read by a transaction that read one key and wrote nothing,
/// whose read_ts is exactly the write_ts of a delete of that key whose
/// outcome is unknown, saw that delete's tombstone: a single read
/// (`TxnOptions::single_read`) records the version it saw as its
/// read_ts. The delete committed, so it is promoted and placed, and the
/// read resolves to its tombstone in [`resolve_absent_reads`]; left
/// unplaced, the read would stay unresolved and a stale one would go
/// unseen.
fn promote_seen_deletes(
    txns: &[TxnRecord],
    reads_of: &ReadsOf<'_>,
    flat: &Flat,
    promoted: &mut [bool],
) {
    let mut unknown_deletes: std::collections::BTreeMap<(u32, u64), Vec<u32>> =
        std::collections::BTreeMap::new();
    for (op, (&wt, &wk)) in flat.write_txn.iter().zip(&flat.write_key).enumerate() {
        let t = &txns[wt as usize];
        if let (true, Outcome::Unknown, Some(ts)) = (flat.write_del[op], t.outcome, t.write_ts) {
            unknown_deletes.entry((wk, ts)).or_default().push(wt);
        }
    }
    if unknown_deletes.is_empty() {
        return;
    }
    for (i, t) in txns.iter().enumerate() {
        let one_absent_read = matches!(&reads_of[i][..], [(_, None)]);
        let (Some(r), true, true) = (
            t.read_ts,
            one_absent_read,
            t.writes.is_empty() && t.deletes.is_empty() && t.scans.is_empty(),
        ) else {
            continue;
        };
        let rk = flat.read_key[flat.read_off[i]];
        for &w in unknown_deletes.get(&(rk, r)).into_iter().flatten() {
            promoted[w as usize] = true;
        }
    }
}

/// Each transaction's role in the graph: an unknown-outcome transaction
/// is in it as committed if promoted, and left out otherwise.
fn roles(txns: &[TxnRecord], promoted: &[bool]) -> Vec<Role> {
    txns.iter()
        .zip(promoted)
        .map(|(t, &p)| match t.outcome {
            Outcome::Committed => Role::Committed,
            Outcome::Aborted => Role::Aborted,
            Outcome::Unknown if p => Role::Committed,
            Outcome::Unknown => Role::Excluded,
        })
        .collect()
}

/// Each key's version order: the placed committed write ops by write_ts.
struct Versions {
    /// Keys whose order is not known (a write_ts tie, or a committed write
    /// without one): they get no ww or rw edges, and their absent reads
    /// stay unresolved.
    key_bad: Vec<bool>,
    /// Key `k`'s versions are `versions[version_off[k]..version_off[k + 1]]`.
    version_off: Vec<usize>,
    /// The placed write ops, key by key, each key's in write_ts order.
    versions: Vec<u32>,
    /// Each write op's position in its key's order, or `UNPLACED`.
    version_pos: Vec<u32>,
}

/// Phase 4: the per-key version order by write_ts of the write ops of
/// committed (and promoted) transactions, and each version's write_ts
/// (parallel to `versions`). A committed write without write_ts and a
/// write_ts tie are violations that leave their key's order unknown; a
/// promoted write without one keeps its wr edges but is not placed.
fn order_versions(
    txns: &[TxnRecord],
    flat: &Flat,
    role: &[Role],
    total_writes: usize,
    sink: &mut Sink,
) -> (Versions, Vec<u64>) {
    let nkeys = flat.nkeys();
    let mut key_bad = vec![false; nkeys];
    let mut missing_reported = vec![false; txns.len()];
    // (key, ts, write op) of every placeable committed write
    let mut placed: Vec<(u32, u64, u32)> = Vec::with_capacity(total_writes);
    for (op, (&wt, &wk)) in flat.write_txn.iter().zip(&flat.write_key).enumerate() {
        let t = &txns[wt as usize];
        if role[wt as usize] != Role::Committed {
            continue;
        }
        match t.write_ts {
            Some(ts) => placed.push((wk, ts, op as u32)),
            None if t.outcome == Outcome::Unknown => {
                // The client never learned the commit timestamp: keep its
                // wr edges, but it cannot be placed in the version order.
            }
            None => {
                key_bad[wk as usize] = true;
                if !missing_reported[wt as usize] {
                    missing_reported[wt as usize] = true;
                    sink.push(Cat::MissingTs, || Violation::MissingWriteTs {
                        txn: wt as usize,
                    });
                }
            }
        }
    }
    drop(missing_reported);
    placed.sort_unstable();
    let mut version_off = vec![0usize; nkeys + 1];
    for &(k, _, _) in &placed {
        version_off[k as usize + 1] += 1;
    }
    for k in 0..nkeys {
        version_off[k + 1] += version_off[k];
    }
    let mut version_pos = vec![UNPLACED; total_writes];
    let versions: Vec<u32> = placed.iter().map(|&(_, _, op)| op).collect();
    let version_ts: Vec<u64> = placed.iter().map(|&(_, ts, _)| ts).collect();
    for w in placed.windows(2) {
        if w[0].0 == w[1].0 && w[0].1 == w[1].1 && !key_bad[w[0].0 as usize] {
            key_bad[w[0].0 as usize] = true;
            let (k, ts, a, b) = (w[0].0, w[0].1, w[0].2, w[1].2);
            sink.push(Cat::Tie, || Violation::WriteTsTie {
                key: flat.key_names[k as usize].to_vec(),
                write_ts: ts,
                first: flat.write_txn[a as usize] as usize,
                second: flat.write_txn[b as usize] as usize,
            });
        }
    }
    for k in 0..nkeys {
        for p in version_off[k]..version_off[k + 1] {
            version_pos[versions[p] as usize] = (p - version_off[k]) as u32;
        }
    }
    let order = Versions {
        key_bad,
        version_off,
        versions,
        version_pos,
    };
    (order, version_ts)
}

/// The unknown-outcome deletes that the version order cannot place: per
/// key, whether one without a write_ts deleted it (promoted or not, it
/// cannot be placed), and the sorted (key, write_ts) of those with one
/// that are not promoted (a promoted one is placed like any version).
fn unplaced_deletes(
    txns: &[TxnRecord],
    flat: &Flat,
    role: &[Role],
) -> (Vec<bool>, Vec<(u32, u64)>) {
    let mut unplaced_delete = vec![false; flat.nkeys()];
    let mut maybe_delete: Vec<(u32, u64)> = Vec::new();
    for (op, (&wt, &wk)) in flat.write_txn.iter().zip(&flat.write_key).enumerate() {
        let t = &txns[wt as usize];
        if !flat.write_del[op] || t.outcome != Outcome::Unknown {
            continue;
        }
        match t.write_ts {
            None => unplaced_delete[wk as usize] = true,
            Some(_) if role[wt as usize] == Role::Committed => {}
            Some(ts) => maybe_delete.push((wk, ts)),
        }
    }
    maybe_delete.sort_unstable();
    (unplaced_delete, maybe_delete)
}

/// Phase 4b: resolves the absent reads (`SRC_ABSENT`). The newest version
/// at or before the reader's read_ts must be a tombstone (or there is
/// none: the initial absence). A live version there means the reader
/// missed a row, unless a transaction of unknown outcome deleted the key
/// and its tombstone is not placed: nobody reads a tombstone by its id, so
/// only a write of its own can promote it, and without a write_ts nothing
/// places it. Its tombstone may be the one read if its write_ts is
/// unknown, or lies between that live version and the read_ts. Such a
/// read is left unresolved (like Jepsen's :info). `version_ts` is each
/// version's write_ts, parallel to `v.versions`.
fn resolve_absent_reads(
    txns: &[TxnRecord],
    flat: &Flat,
    role: &[Role],
    v: &Versions,
    version_ts: Vec<u64>,
    read_src: &mut [u32],
    sink: &mut Sink,
) {
    let (unplaced_delete, maybe_delete) = unplaced_deletes(txns, flat, role);
    // An unknown delete of key `k` with write_ts in (after, upto].
    let maybe_deleted = |k: u32, after: u64, upto: u64| {
        let from = maybe_delete.partition_point(|&(mk, ts)| (mk, ts) <= (k, after));
        maybe_delete
            .get(from)
            .is_some_and(|&(mk, ts)| mk == k && ts <= upto)
    };
    for (i, t) in txns.iter().enumerate() {
        let Some(read_ts) = t.read_ts else {
            continue;
        };
        let reads = flat.read_off[i]..flat.read_off[i + 1];
        for (src, &k) in read_src[reads.clone()]
            .iter_mut()
            .zip(&flat.read_key[reads])
        {
            if *src != SRC_ABSENT {
                continue;
            }
            let k = k as usize;
            if v.key_bad[k] {
                *src = SRC_INVALID;
                continue;
            }
            let ts = &version_ts[v.version_off[k]..v.version_off[k + 1]];
            let p = ts.partition_point(|&t| t <= read_ts);
            *src = if p == 0 {
                SRC_INITIAL
            } else {
                let op = v.versions[v.version_off[k] + p - 1];
                if flat.write_del[op as usize] {
                    op
                } else if unplaced_delete[k] || maybe_deleted(k as u32, ts[p - 1], read_ts) {
                    SRC_INVALID
                } else {
                    let writer = flat.write_txn[op as usize] as usize;
                    sink.push(Cat::Absent, || Violation::AbsentRead {
                        txn: i,
                        key: flat.key_names[k].to_vec(),
                        writer,
                        write_ts: ts[p - 1],
                        read_ts,
                    });
                    SRC_INVALID
                }
            };
        }
    }
}

/// Phase 5a: a ww edge between the writers of consecutive versions of
/// every key whose order is known.
fn add_ww_edges(flat: &Flat, v: &Versions, edges: &mut EdgeList) {
    for k in 0..flat.nkeys() {
        if v.key_bad[k] {
            continue;
        }
        let vs = &v.versions[v.version_off[k]..v.version_off[k + 1]];
        for w in vs.windows(2) {
            let (a, b) = (flat.write_txn[w[0] as usize], flat.write_txn[w[1] as usize]);
            if a != b {
                edges.push(a, b, EdgeKind::Ww);
            }
        }
    }
}

/// Phase 5b: for every resolved read of a transaction in the graph, a wr
/// edge from the writer of the version it saw, and an rw edge to the
/// writer of the next version of its key (the first version, for a read
/// of the initial absence), where the key's order is known.
fn add_read_edges(
    flat: &Flat,
    v: &Versions,
    role: &[Role],
    read_src: &[u32],
    edges: &mut EdgeList,
) {
    for (i, &r_role) in role.iter().enumerate() {
        if r_role == Role::Excluded {
            continue;
        }
        let me = i as u32;
        let reads = flat.read_off[i]..flat.read_off[i + 1];
        for (&src, &k) in read_src[reads.clone()].iter().zip(&flat.read_key[reads]) {
            let k = k as usize;
            let next_op = match src {
                SRC_INVALID => continue,
                SRC_INITIAL => {
                    if v.key_bad[k] || v.version_off[k] == v.version_off[k + 1] {
                        continue;
                    }
                    v.versions[v.version_off[k]]
                }
                op => {
                    edges.push(flat.write_txn[op as usize], me, EdgeKind::Wr);
                    let pos = v.version_pos[op as usize];
                    if v.key_bad[k] || pos == UNPLACED {
                        continue;
                    }
                    let p = v.version_off[k] + pos as usize + 1;
                    if p >= v.version_off[k + 1] {
                        continue;
                    }
                    v.versions[p]
                }
            };
            let nw = flat.write_txn[next_op as usize];
            if nw != me {
                edges.push(me, nw, EdgeKind::Rw);
            }
        }
    }
}

/// Phase 5c: the real-time order among the transactions in the graph, as
/// edges through barrier nodes ([`add_realtime_edges`]); returns the total
/// node count. A completion before its invocation is a violation that
/// leaves the transaction out of the real-time order.
fn add_txn_realtime_edges(
    txns: &[TxnRecord],
    role: &[Role],
    edges: &mut EdgeList,
    sink: &mut Sink,
) -> usize {
    let n = txns.len();
    let mut invocations: Vec<(u64, u32)> = Vec::with_capacity(n);
    let mut completions: Vec<(u64, u32)> = Vec::with_capacity(n);
    for (i, t) in txns.iter().enumerate() {
        if role[i] == Role::Excluded {
            continue;
        }
        if t.outcome != Outcome::Unknown && t.complete_ns < t.invoke_ns {
            sink.push(Cat::Timing, || Violation::BadTiming {
                txn: i,
                invoke_ns: t.invoke_ns,
                complete_ns: t.complete_ns,
            });
            continue;
        }
        invocations.push((t.invoke_ns, i as u32));
        // An unknown-outcome transaction may take effect arbitrarily late:
        // its completion is at +infinity, so it precedes nothing.
        if t.outcome != Outcome::Unknown {
            completions.push((t.complete_ns, i as u32));
        }
    }
    add_realtime_edges(n, &mut invocations, &mut completions, edges)
}

/// Phase 6: the strongly connected components of `g` with two
/// transactions or more, searched from the `n` transactions in the graph:
/// the first `MAX_CYCLES` of them, and how many there are.
fn cyclic_components(g: &Csr, n: usize, role: &[Role]) -> (Vec<Vec<u32>>, usize) {
    let mut components: Vec<Vec<u32>> = Vec::new();
    let mut cyclic = 0usize;
    graph::tarjan(
        g,
        (0..n as u32).filter(|&i| role[i as usize] != Role::Excluded),
        |_| true,
        |scc| {
            if scc.len() < 2 {
                return;
            }
            let txn_members = scc.iter().filter(|&&v| (v as usize) < n).count();
            if txn_members < 2 {
                return;
            }
            cyclic += 1;
            if components.len() < MAX_CYCLES {
                components.push(scc.to_vec());
            }
        },
    );
    (components, cyclic)
}

/// Each transaction's point reads plus its scans as point reads (see
/// [`crate::ScanRead`]): returned rows as reads of their versions, other
/// known keys of the covered range as absent reads.
fn expand_scans(h: &History) -> Vec<std::borrow::Cow<'_, [(crate::Key, Option<WriteId>)]>> {
    use std::borrow::Cow;
    use std::collections::BTreeSet;
    if h.txns.iter().all(|t| t.scans.is_empty()) {
        return h
            .txns
            .iter()
            .map(|t| Cow::Borrowed(t.reads.as_slice()))
            .collect();
    }
    let mut known: BTreeSet<&[u8]> = BTreeSet::new();
    for t in &h.txns {
        let rows = t.scans.iter().flat_map(|s| s.rows.iter());
        for (k, _) in t.writes.iter().chain(&t.deletes).chain(rows) {
            known.insert(k);
        }
        for (k, _) in &t.reads {
            known.insert(k);
        }
    }
    h.txns
        .iter()
        .map(|t| {
            if t.scans.is_empty() {
                return Cow::Borrowed(t.reads.as_slice());
            }
            let own: BTreeSet<&[u8]> = t
                .writes
                .iter()
                .chain(&t.deletes)
                .map(|(k, _)| k.as_slice())
                .collect();
            let mut reads = t.reads.clone();
            for s in &t.scans {
                let returned: BTreeSet<&[u8]> = s.rows.iter().map(|(k, _)| k.as_slice()).collect();
                for (k, w) in &s.rows {
                    if !own.contains(k.as_slice()) {
                        reads.push((k.clone(), Some(*w)));
                    }
                }
                let full = s.rows.len() >= s.limit;
                let last = s.rows.last().map(|(k, _)| k.as_slice());
                for k in known.range::<[u8], _>((
                    std::ops::Bound::Included(s.start.as_slice()),
                    std::ops::Bound::Unbounded,
                )) {
                    let past_end = s.end.as_deref().is_some_and(|e| *k >= e);
                    let past_last = full && last.is_some_and(|l| *k > l);
                    if past_end || past_last || (full && last.is_none()) {
                        break;
                    }
                    if !returned.contains(k) && !own.contains(k) {
                        reads.push((k.to_vec(), None));
                    }
                }
            }
            Cow::Owned(reads)
        })
        .collect()
}

/// Interns `k` (borrowed from the history, so no key is copied), recording
/// a new key's name in `names`.
fn intern_key<'a>(
    ids: &mut FxHashMap<&'a [u8], u32>,
    names: &mut Vec<&'a [u8]>,
    k: &'a [u8],
) -> u32 {
    let next = names.len() as u32;
    let id = *ids.entry(k).or_insert(next);
    if id == next {
        names.push(k);
    }
    id
}

/// Adds real-time edges for `T1.complete < T2.invoke` in O(n log n) using a
/// chain of barrier nodes numbered from `first_barrier`; returns the total
/// node count.
///
/// Invocations are processed in time order. Before handling an invocation at
/// time `s`, every completion with time `< s` not yet absorbed feeds a fresh
/// barrier, which is chained after the previous barrier; the invoked
/// transaction hangs off the newest barrier. So `T1 ->* T2` through barriers
/// iff T1's completion was absorbed before T2's invocation was handled, i.e.
/// iff `c1 < s2`. Equal times are never absorbed (strict `<`).
fn add_realtime_edges(
    first_barrier: usize,
    invocations: &mut [(u64, u32)],
    completions: &mut [(u64, u32)],
    edges: &mut EdgeList,
) -> usize {
    invocations.sort_unstable();
    completions.sort_unstable();
    let mut next = first_barrier as u32;
    let mut current: Option<u32> = None;
    let mut ci = 0usize;
    for &(s, t) in invocations.iter() {
        let start = ci;
        while ci < completions.len() && completions[ci].0 < s {
            ci += 1;
        }
        if ci > start {
            let b = next;
            next += 1;
            if let Some(p) = current {
                edges.push(p, b, EdgeKind::Rt);
            }
            for &(_, c) in &completions[start..ci] {
                edges.push(c, b, EdgeKind::Rt);
            }
            current = Some(b);
        }
        if let Some(b) = current {
            edges.push(b, t, EdgeKind::Rt);
        }
    }
    next as usize
}

/// Extracts and classifies one cycle from a cyclic component.
fn explain_component(h: &History, g: &Csr, role: &[Role], scc: &[u32]) -> Option<Cycle> {
    let n = h.txns.len();
    let component_txns = scc.iter().filter(|&&v| (v as usize) < n).count();
    let members: FxHashSet<u32> = scc.iter().copied().collect();
    let is_aborted = |v: u32| (v as usize) < n && role[v as usize] == Role::Aborted;
    let has_aborted = scc.iter().any(|&v| is_aborted(v));

    let (class, path) = if !has_aborted {
        let start = *scc.iter().find(|&&v| (v as usize) < n)?;
        let p = graph::shortest_cycle_through(g, start, |v| members.contains(&v))?;
        (CycleClass::StrictSerializability, p)
    } else {
        // Prefer a cycle among committed transactions alone: that is a
        // serializability violation regardless of the aborted ones.
        let mut sub: Option<Vec<u32>> = None;
        graph::tarjan(
            g,
            scc.iter().copied(),
            |v| members.contains(&v) && !is_aborted(v),
            |c| {
                if sub.is_none() && c.iter().filter(|&&v| (v as usize) < n).count() >= 2 {
                    sub = Some(c.to_vec());
                }
            },
        );
        match sub {
            Some(c) => {
                let sub_members: FxHashSet<u32> = c.iter().copied().collect();
                let start = *c.iter().find(|&&v| (v as usize) < n)?;
                let p = graph::shortest_cycle_through(g, start, |v| sub_members.contains(&v))?;
                (CycleClass::StrictSerializability, p)
            }
            None => {
                let start = *scc.iter().find(|&&v| is_aborted(v))?;
                let p = graph::shortest_cycle_through(g, start, |v| members.contains(&v))?;
                (CycleClass::Opacity, p)
            }
        }
    };

    // Collapse barrier runs into single rt steps.
    let txn_pos: Vec<usize> = (0..path.len())
        .filter(|&i| (path[i] as usize) < n)
        .collect();
    let mut steps = Vec::with_capacity(txn_pos.len());
    let mut chosen: Vec<EdgeKind> = Vec::with_capacity(txn_pos.len());
    for (idx, &p) in txn_pos.iter().enumerate() {
        let a = path[p];
        let (b, direct) = match txn_pos.get(idx + 1) {
            Some(&q) => (path[q], q == p + 1),
            None => (path[0], p == path.len() - 1),
        };
        let kinds: Vec<EdgeKind> = if direct {
            let mut ks: Vec<EdgeKind> = g
                .out(a)
                .iter()
                .filter(|&&e| graph::target(e) == b)
                .map(|&e| graph::kind(e))
                .collect();
            ks.sort_unstable();
            ks.dedup();
            ks
        } else {
            vec![EdgeKind::Rt]
        };
        chosen.push(kinds.first().copied().unwrap_or(EdgeKind::Rt));
        let t = &h.txns[a as usize];
        steps.push(CycleStep {
            txn: a as usize,
            process: t.process,
            outcome: t.outcome,
            edges_to_next: kinds,
        });
    }
    let realtime = chosen.contains(&EdgeKind::Rt);
    let rw = chosen.iter().filter(|&&k| k == EdgeKind::Rw).count();
    let anomaly = match rw {
        0 if chosen.contains(&EdgeKind::Wr) => Anomaly::G1c,
        0 => Anomaly::G0,
        1 => Anomaly::GSingle,
        _ => Anomaly::G2,
    };
    Some(Cycle {
        class,
        anomaly,
        realtime,
        component_txns,
        steps,
    })
}
