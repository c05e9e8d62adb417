//! The checker proper: read validation, version orders, graph construction
//! and cycle search. See the crate documentation for the algorithm.

use crate::fxhash::{map_with_capacity, FxHashMap, FxHashSet};
use crate::graph::{self, Csr, EdgeKind, EdgeList, MAX_NODES};
use crate::history::{History, Outcome, WriteId};
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

    // --- 1. Intern keys; flatten reads and writes. -------------------------
    let mut key_ids: FxHashMap<&[u8], u32> = map_with_capacity(1024);
    let mut key_names: Vec<&[u8]> = Vec::new();
    let mut read_off: Vec<usize> = Vec::with_capacity(n + 1);
    let mut read_key: Vec<u32> = Vec::with_capacity(total_reads);
    let mut write_key: Vec<u32> = Vec::with_capacity(total_writes);
    let mut write_txn: Vec<u32> = Vec::with_capacity(total_writes);
    let mut write_del: Vec<bool> = Vec::with_capacity(total_writes);
    read_off.push(0);
    for (i, t) in txns.iter().enumerate() {
        for (k, _) in reads_of[i].iter() {
            read_key.push(intern_key(&mut key_ids, &mut key_names, k));
        }
        for ((k, _), del) in t
            .writes
            .iter()
            .map(|w| (w, false))
            .chain(t.deletes.iter().map(|w| (w, true)))
        {
            write_key.push(intern_key(&mut key_ids, &mut key_names, k));
            write_txn.push(i as u32);
            write_del.push(del);
        }
        read_off.push(read_key.len());
    }
    drop(key_ids);
    let nkeys = key_names.len();

    // --- 2. Who wrote each value. ------------------------------------------
    let mut writer_of: FxHashMap<WriteId, u32> = map_with_capacity(total_writes);
    let mut j = 0usize;
    for (i, t) in txns.iter().enumerate() {
        for &(_, w) in t.writes.iter().chain(&t.deletes) {
            match writer_of.get(&w) {
                Some(&first) => {
                    let first = write_txn[first as usize] as usize;
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

    // --- 3. Validate reads; resolve each to a write op. ---------------------
    let mut read_src: Vec<u32> = Vec::with_capacity(total_reads);
    let mut promoted = vec![false; n];
    for (i, t) in txns.iter().enumerate() {
        for (r, (key, val)) in reads_of[i].iter().enumerate() {
            let rk = read_key[read_off[i] + r];
            let src = match val {
                // Which version an absent read saw (the initial absence or
                // a tombstone) is decided by its read_ts below.
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
                        let wt = write_txn[op as usize] as usize;
                        let wk = write_key[op as usize];
                        if wt == i {
                            sink.push(Cat::Internal, || Violation::InternalRead {
                                txn: i,
                                key: key.clone(),
                                write_id: *w,
                            });
                            SRC_INVALID
                        } else if wk != rk {
                            sink.push(Cat::Garbage, || Violation::WrongKeyRead {
                                txn: i,
                                key: key.clone(),
                                write_id: *w,
                                written_key: key_names[wk as usize].to_vec(),
                                writer: wt,
                            });
                            SRC_INVALID
                        } else {
                            match txns[wt].outcome {
                                Outcome::Aborted => {
                                    sink.push(Cat::AbortedRead, || Violation::AbortedRead {
                                        txn: i,
                                        key: key.clone(),
                                        write_id: *w,
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
                },
            };
            read_src.push(src);
        }
    }
    drop(writer_of);

    // An absent read by a transaction that read one key and wrote nothing,
    // whose read_ts is exactly the write_ts of a delete of that key whose
    // outcome is unknown, saw that delete's tombstone: a single read
    // (`TxnOptions::single_read`) records the version it saw as its
    // read_ts. The delete committed, so it is promoted and placed, and the
    // read resolves to its tombstone below; left unplaced, the read would
    // stay unresolved and a stale one would go unseen.
    let mut unknown_deletes: std::collections::BTreeMap<(u32, u64), Vec<u32>> =
        std::collections::BTreeMap::new();
    for (op, (&wt, &wk)) in write_txn.iter().zip(&write_key).enumerate() {
        let t = &txns[wt as usize];
        if let (true, Outcome::Unknown, Some(ts)) = (write_del[op], t.outcome, t.write_ts) {
            unknown_deletes.entry((wk, ts)).or_default().push(wt);
        }
    }
    if !unknown_deletes.is_empty() {
        for (i, t) in txns.iter().enumerate() {
            let one_absent_read = matches!(&reads_of[i][..], [(_, None)]);
            let (Some(r), true, true) = (
                t.read_ts,
                one_absent_read,
                t.writes.is_empty() && t.deletes.is_empty() && t.scans.is_empty(),
            ) else {
                continue;
            };
            let rk = read_key[read_off[i]];
            for &w in unknown_deletes.get(&(rk, r)).into_iter().flatten() {
                promoted[w as usize] = true;
            }
        }
    }
    drop(unknown_deletes);

    let role: Vec<Role> = txns
        .iter()
        .zip(&promoted)
        .map(|(t, &p)| match t.outcome {
            Outcome::Committed => Role::Committed,
            Outcome::Aborted => Role::Aborted,
            Outcome::Unknown if p => Role::Committed,
            Outcome::Unknown => Role::Excluded,
        })
        .collect();
    report.promoted = promoted.iter().filter(|&&p| p).count();
    drop(promoted);

    // --- 4. Per-key version order by write_ts. ------------------------------
    let mut key_bad = vec![false; nkeys];
    let mut missing_reported = vec![false; n];
    // (key, ts, write op) of every placeable committed write
    let mut placed: Vec<(u32, u64, u32)> = Vec::with_capacity(total_writes);
    for (op, (&wt, &wk)) in write_txn.iter().zip(&write_key).enumerate() {
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
                key: key_names[k as usize].to_vec(),
                write_ts: ts,
                first: write_txn[a as usize] as usize,
                second: write_txn[b as usize] as usize,
            });
        }
    }
    for k in 0..nkeys {
        for p in version_off[k]..version_off[k + 1] {
            version_pos[versions[p] as usize] = (p - version_off[k]) as u32;
        }
    }
    drop(placed);

    // --- 4b. Resolve absent reads: the newest version at or before the
    // reader's read_ts must be a tombstone (or there is none: the initial
    // absence). A live version there means the reader missed a row, unless
    // a transaction of unknown outcome deleted the key and its tombstone is
    // not placed: nobody reads a tombstone by its id, so only a write of
    // its own can promote it, and without a write_ts nothing places it.
    // Its tombstone may be the one read if its write_ts is unknown, or lies
    // between that live version and the read_ts. Such a read is left
    // unresolved (like Jepsen's :info).
    let mut unplaced_delete = vec![false; nkeys];
    // (key, write_ts) of the unknown-outcome deletes that carry one.
    let mut maybe_delete: Vec<(u32, u64)> = Vec::new();
    for (op, (&wt, &wk)) in write_txn.iter().zip(&write_key).enumerate() {
        let t = &txns[wt as usize];
        if !write_del[op] || t.outcome != Outcome::Unknown {
            continue;
        }
        match t.write_ts {
            // Promoted or not, it cannot be placed.
            None => unplaced_delete[wk as usize] = true,
            // Promoted (by a write of its own): placed like any version.
            Some(_) if role[wt as usize] == Role::Committed => {}
            Some(ts) => maybe_delete.push((wk, ts)),
        }
    }
    maybe_delete.sort_unstable();
    // An unknown delete of key `k` with write_ts in (after, upto].
    let maybe_deleted = |k: u32, after: u64, upto: u64| {
        let from = maybe_delete.partition_point(|&(mk, ts)| (mk, ts) <= (k, after));
        maybe_delete
            .get(from)
            .is_some_and(|&(mk, ts)| mk == k && ts <= upto)
    };
    for i in 0..n {
        let Some(read_ts) = txns[i].read_ts else {
            continue;
        };
        for r in read_off[i]..read_off[i + 1] {
            if read_src[r] != SRC_ABSENT {
                continue;
            }
            let k = read_key[r] as usize;
            if key_bad[k] {
                read_src[r] = SRC_INVALID;
                continue;
            }
            let ts = &version_ts[version_off[k]..version_off[k + 1]];
            let p = ts.partition_point(|&t| t <= read_ts);
            read_src[r] = if p == 0 {
                SRC_INITIAL
            } else {
                let op = versions[version_off[k] + p - 1];
                if write_del[op as usize] {
                    op
                } else if unplaced_delete[k] || maybe_deleted(k as u32, ts[p - 1], read_ts) {
                    SRC_INVALID
                } else {
                    let writer = write_txn[op as usize] as usize;
                    sink.push(Cat::Absent, || Violation::AbsentRead {
                        txn: i,
                        key: key_names[k].to_vec(),
                        writer,
                        write_ts: ts[p - 1],
                        read_ts,
                    });
                    SRC_INVALID
                }
            };
        }
    }
    drop(version_ts);
    drop(write_del);

    // --- 5. Edges. ----------------------------------------------------------
    let mut edges = EdgeList::with_capacity(2 * total_writes + 2 * total_reads + 3 * n);
    // ww
    for k in 0..nkeys {
        if key_bad[k] {
            continue;
        }
        let vs = &versions[version_off[k]..version_off[k + 1]];
        for w in vs.windows(2) {
            let (a, b) = (write_txn[w[0] as usize], write_txn[w[1] as usize]);
            if a != b {
                edges.push(a, b, EdgeKind::Ww);
            }
        }
    }
    // wr and rw
    for i in 0..n {
        if role[i] == Role::Excluded {
            continue;
        }
        let me = i as u32;
        for r in read_off[i]..read_off[i + 1] {
            let k = read_key[r] as usize;
            let next_op = match read_src[r] {
                SRC_INVALID => continue,
                SRC_INITIAL => {
                    if key_bad[k] || version_off[k] == version_off[k + 1] {
                        continue;
                    }
                    versions[version_off[k]]
                }
                op => {
                    edges.push(write_txn[op as usize], me, EdgeKind::Wr);
                    let pos = version_pos[op as usize];
                    if key_bad[k] || pos == UNPLACED {
                        continue;
                    }
                    let p = version_off[k] + pos as usize + 1;
                    if p >= version_off[k + 1] {
                        continue;
                    }
                    versions[p]
                }
            };
            let nw = write_txn[next_op as usize];
            if nw != me {
                edges.push(me, nw, EdgeKind::Rw);
            }
        }
    }
    drop(version_pos);
    drop(versions);
    drop(version_off);
    drop(read_src);
    // real time, through barrier nodes
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
    let nodes = add_realtime_edges(n, &mut invocations, &mut completions, &mut edges);
    drop(invocations);
    drop(completions);

    let g = Csr::build(nodes, edges);
    report.edges = g.edge_count();

    // --- 6. Strongly connected components. -----------------------------------
    let mut components: Vec<Vec<u32>> = Vec::new();
    let mut cyclic = 0usize;
    graph::tarjan(
        &g,
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
    report.cyclic_components = cyclic;

    // --- 7. One concrete cycle per reported component. -----------------------
    for scc in &components {
        if let Some(c) = explain_component(h, &g, &role, scc) {
            sink.violations.push(Violation::Cycle(c));
        }
    }

    report.violations = sink.violations;
    report.suppressed = sink.suppressed;
    report
}

/// Interns `k` (borrowed from the history, so no key is copied), recording
/// a new key's name in `names`.
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
