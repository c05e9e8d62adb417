//! End-to-end tests of the checker and the EDN export.

use meridian_checker::*;

/// A transaction builder for tests.
fn txn(process: u64, invoke_ns: u64, complete_ns: u64) -> TxnRecord {
    TxnRecord {
        process,
        invoke_ns,
        complete_ns,
        reads: vec![],
        writes: vec![],
        deletes: Vec::new(),
        scans: Vec::new(),
        outcome: Outcome::Committed,
        read_ts: None,
        write_ts: None,
    }
}

trait Build {
    fn r(self, k: &str, v: Option<WriteId>) -> Self;
    fn w(self, k: &str, v: WriteId) -> Self;
    fn ts(self, ts: u64) -> Self;
    fn outcome(self, o: Outcome) -> Self;
}

impl Build for TxnRecord {
    fn r(mut self, k: &str, v: Option<WriteId>) -> Self {
        self.reads.push((k.as_bytes().to_vec(), v));
        self
    }
    fn w(mut self, k: &str, v: WriteId) -> Self {
        self.writes.push((k.as_bytes().to_vec(), v));
        self
    }
    fn ts(mut self, ts: u64) -> Self {
        self.write_ts = Some(ts);
        self
    }
    fn outcome(mut self, o: Outcome) -> Self {
        self.outcome = o;
        self
    }
}

fn hist(txns: Vec<TxnRecord>) -> History {
    History::from(txns)
}

fn only_cycle(r: &CheckReport) -> &Cycle {
    let cycles: Vec<&Cycle> = r.cycles().collect();
    assert_eq!(cycles.len(), 1, "expected exactly one cycle:\n{r}");
    assert_eq!(r.cyclic_components, 1);
    cycles[0]
}

fn cycle_txns(c: &Cycle) -> Vec<usize> {
    let mut v: Vec<usize> = c.steps.iter().map(|s| s.txn).collect();
    v.sort();
    v
}

#[test]
fn serial_history_passes() {
    let h = hist(vec![
        txn(1, 0, 10).r("x", None).w("x", 1).ts(5),
        txn(2, 20, 30).r("x", Some(1)).r("y", None).w("y", 2).ts(25),
        txn(1, 40, 50)
            .r("x", Some(1))
            .r("y", Some(2))
            .w("x", 3)
            .w("y", 4)
            .ts(45),
        txn(3, 60, 70).r("y", Some(4)).outcome(Outcome::Aborted),
        txn(2, 60, 70).r("x", Some(3)),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
    assert_eq!((r.committed, r.aborted, r.unknown), (4, 1, 0));
    assert!(r.edges > 0);
    assert!(r.to_string().starts_with("OK"));
}

#[test]
fn lost_update_is_caught() {
    // Both read the initial x and both write x; overlapping in time.
    let h = hist(vec![
        txn(1, 0, 100).r("x", None).w("x", 1).ts(10),
        txn(2, 0, 100).r("x", None).w("x", 2).ts(11),
    ]);
    let r = check(&h);
    assert!(!r.is_ok());
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::StrictSerializability);
    assert_eq!(c.anomaly, Anomaly::GSingle);
    assert!(!c.realtime);
    assert_eq!(cycle_txns(c), vec![0, 1]);
    let s = r.to_string();
    assert!(
        s.contains("G-single") && s.contains("T0") && s.contains("T1"),
        "{s}"
    );
}

#[test]
fn write_skew_is_caught() {
    let h = hist(vec![
        txn(1, 0, 100).r("x", None).r("y", None).w("x", 1).ts(10),
        txn(2, 0, 100).r("x", None).r("y", None).w("y", 2).ts(11),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::StrictSerializability);
    assert_eq!(c.anomaly, Anomaly::G2);
    assert!(c
        .steps
        .iter()
        .all(|s| s.edges_to_next == vec![EdgeKind::Rw]));
}

#[test]
fn stale_read_across_real_time_is_caught() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 20, 30).r("x", None),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::StrictSerializability);
    assert!(c.realtime);
    assert_eq!(c.name(), "G-single-realtime");
    let kinds: Vec<Vec<EdgeKind>> = c.steps.iter().map(|s| s.edges_to_next.clone()).collect();
    assert!(kinds.contains(&vec![EdgeKind::Rt]) && kinds.contains(&vec![EdgeKind::Rw]));
}

#[test]
fn stale_read_with_overlapping_times_passes() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 5, 30).r("x", None),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
}

#[test]
fn equal_completion_and_invocation_times_are_concurrent() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 10, 30).r("x", None),
    ]);
    assert!(check(&h).is_ok());
    // One nanosecond later it is a violation.
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 11, 30).r("x", None),
    ]);
    assert!(!check(&h).is_ok());
}

#[test]
fn real_time_is_transitive_through_barriers() {
    // T0 completes at 10; T1 [5,15] is concurrent with T0, T2 [12,20] is
    // concurrent with T1 but after T0; T3 [25,30] after everything.
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 5, 15).w("z", 2).ts(14),
        txn(3, 12, 20).w("q", 3).ts(18),
        txn(4, 25, 30).r("z", Some(2)).r("x", None),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(cycle_txns(c), vec![0, 3]);
    assert!(c.realtime);
}

#[test]
fn fractured_read_by_aborted_txn_is_opacity_violation() {
    let h = hist(vec![
        txn(1, 0, 100).w("x", 1).w("y", 2).ts(10),
        txn(2, 0, 100)
            .r("x", Some(1))
            .r("y", None)
            .outcome(Outcome::Aborted),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::Opacity);
    assert!(c.steps.iter().any(|s| s.outcome == Outcome::Aborted));
    assert!(r.to_string().contains("opacity"), "{r}");
}

#[test]
fn fractured_read_by_committed_txn_is_serializability_violation() {
    let h = hist(vec![
        txn(1, 0, 100).w("x", 1).w("y", 2).ts(10),
        txn(2, 0, 100).r("x", Some(1)).r("y", None),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::StrictSerializability);
    assert_eq!(c.anomaly, Anomaly::GSingle);
}

#[test]
fn committed_cycle_is_preferred_over_aborted_one_in_same_component() {
    // Lost update between T0 and T1, plus an aborted T2 whose fractured
    // read ties it into the same component.
    let h = hist(vec![
        txn(1, 0, 100).r("x", None).w("x", 1).w("y", 3).ts(10),
        txn(2, 0, 100).r("x", None).w("x", 2).ts(11),
        txn(3, 0, 100)
            .r("x", Some(2))
            .r("y", None)
            .outcome(Outcome::Aborted),
    ]);
    let r = check(&h);
    let c = only_cycle(&r);
    assert_eq!(c.class, CycleClass::StrictSerializability);
    assert_eq!(cycle_txns(c), vec![0, 1]);
}

#[test]
fn aborted_txn_must_respect_real_time() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 20, 30).r("x", None).outcome(Outcome::Aborted),
    ]);
    let c = only_cycle(&check(&h)).clone();
    assert_eq!(c.class, CycleClass::Opacity);
    assert!(c.realtime);
}

#[test]
fn aborted_read_g1a_is_detected() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).outcome(Outcome::Aborted),
        txn(2, 20, 30).r("x", Some(1)),
        txn(3, 20, 30).r("x", Some(1)).outcome(Outcome::Aborted),
    ]);
    let r = check(&h);
    assert_eq!(r.cyclic_components, 0);
    let g1a: Vec<_> = r
        .violations
        .iter()
        .filter_map(|v| match v {
            Violation::AbortedRead {
                txn,
                writer,
                write_id,
                ..
            } => Some((*txn, *writer, *write_id)),
            _ => None,
        })
        .collect();
    assert_eq!(g1a, vec![(1, 0, 1), (2, 0, 1)]);
    assert!(r.to_string().contains("G1a"));
}

#[test]
fn garbage_read_is_detected() {
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(5),
        txn(2, 20, 30).r("x", Some(99)),
        txn(3, 20, 30).r("y", Some(1)),
    ]);
    let r = check(&h);
    assert_eq!(r.violations.len(), 2, "{r}");
    assert!(matches!(
        &r.violations[0],
        Violation::GarbageRead { txn: 1, write_id: 99, key } if key == b"x"
    ));
    assert!(matches!(
        &r.violations[1],
        Violation::WrongKeyRead {
            txn: 2,
            writer: 0,
            write_id: 1,
            ..
        }
    ));
}

#[test]
fn read_of_own_write_is_internal_violation() {
    let h = hist(vec![txn(1, 0, 10).r("x", Some(1)).w("x", 1).ts(5)]);
    let r = check(&h);
    assert!(
        matches!(
            r.violations.as_slice(),
            [Violation::InternalRead { txn: 0, .. }]
        ),
        "{r}"
    );
}

#[test]
fn version_order_problems_are_reported_not_panicked() {
    let h = hist(vec![
        txn(1, 0, 100).r("x", None).w("x", 1).ts(10),
        txn(2, 0, 100).r("x", None).w("x", 2).ts(10),
        txn(3, 0, 100).w("y", 3),
        txn(4, 0, 100).w("y", 4).ts(7),
        txn(5, 0, 100).w("a", 5).ts(8).w("b", 6),
    ]);
    let r = check(&h);
    assert!(r.violations.iter().any(|v| matches!(
        v,
        Violation::WriteTsTie {
            write_ts: 10,
            first: 0,
            second: 1,
            ..
        }
    )));
    assert!(r
        .violations
        .iter()
        .any(|v| matches!(v, Violation::MissingWriteTs { txn: 2 })));
    // The ambiguous key contributes no ww/rw edges, so no cycle is claimed.
    assert_eq!(r.cyclic_components, 0);
    let dup = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(1),
        txn(2, 20, 30).w("y", 1).ts(2),
    ]);
    assert!(matches!(
        check(&dup).violations.as_slice(),
        [Violation::DuplicateWriteId {
            write_id: 1,
            first: 0,
            second: 1
        }]
    ));
    let timing = hist(vec![txn(1, 10, 5)]);
    assert!(matches!(
        check(&timing).violations.as_slice(),
        [Violation::BadTiming { txn: 0, .. }]
    ));
}

#[test]
fn unknown_outcome_promoted_when_read_and_dropped_otherwise() {
    // Unknown T0 wrote x and y; T1 saw x but not y: fractured, once T0 is
    // promoted to committed.
    let h = hist(vec![
        txn(1, 0, 100)
            .w("x", 1)
            .w("y", 2)
            .ts(10)
            .outcome(Outcome::Unknown),
        txn(2, 0, 100).r("x", Some(1)).r("y", None),
    ]);
    let r = check(&h);
    assert_eq!(r.promoted, 1);
    assert_eq!(only_cycle(&r).class, CycleClass::StrictSerializability);

    // Nobody read it: dropped, and a reader of the initial y is fine.
    let h = hist(vec![
        txn(1, 0, 10)
            .w("x", 1)
            .w("y", 2)
            .ts(10)
            .outcome(Outcome::Unknown),
        txn(2, 20, 30).r("y", None),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
    assert_eq!((r.unknown, r.promoted), (1, 0));
}

#[test]
fn unknown_outcome_may_take_effect_after_client_gave_up() {
    // The client gave up on T0 at 10, T1 at [20,30] did not see it, T2 at
    // [40,50] did: legal, T0 took effect between 30 and 40.
    let h = hist(vec![
        txn(1, 0, 10).w("x", 1).ts(35).outcome(Outcome::Unknown),
        txn(2, 20, 30).r("x", None),
        txn(3, 40, 50).r("x", Some(1)),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.promoted, 1);
}

#[test]
fn edn_export_matches_expected() {
    let h = hist(vec![
        txn(3, 100, 250).r("k1", None).w("k2", 17).ts(200),
        txn(4, 120, 130)
            .r("k2", Some(17))
            .r("a\"b", None)
            .outcome(Outcome::Aborted),
        txn(5, 140, 300).w("k1", 18).outcome(Outcome::Unknown),
    ]);
    let expected = "\
{:type :invoke, :f :txn, :value [[:r \"k1\" nil] [:w \"k2\" 17]], :process 3, :time 100, :index 0}
{:type :invoke, :f :txn, :value [[:r \"k2\" nil] [:r \"a\\\"b\" nil]], :process 4, :time 120, :index 1}
{:type :fail, :f :txn, :value [[:r \"k2\" 17] [:r \"a\\\"b\" nil]], :process 4, :time 130, :index 2}
{:type :invoke, :f :txn, :value [[:w \"k1\" 18]], :process 5, :time 140, :index 3}
{:type :ok, :f :txn, :value [[:r \"k1\" nil] [:w \"k2\" 17]], :process 3, :time 250, :index 4}
{:type :info, :f :txn, :value [[:w \"k1\" 18]], :process 5, :time 300, :index 5}
";
    assert_eq!(to_edn(&h), expected);
    let mut out = Vec::new();
    write_edn(&h, &mut out).expect("write to Vec");
    assert_eq!(String::from_utf8(out).expect("utf8"), expected);
    assert_eq!(to_edn(&History::default()), "");
}

#[test]
fn history_helpers() {
    let mut a = History::default();
    assert!(a.is_empty());
    a.push(txn(1, 0, 1));
    let mut b = History::default();
    b.push(txn(2, 0, 1));
    b.push(txn(3, 0, 1));
    a.merge(b);
    assert_eq!(a.len(), 3);
    assert_eq!(a.txns[2].process, 3);
}

/// splitmix64, so the tests need no dependencies.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Simulates a serial execution in index order. Transaction i is invoked at
/// 10·i and lasts up to 35 ns, so neighbours overlap, but real time never
/// contradicts the serial order. Some abort (reading a consistent snapshot),
/// some end unknown (half of those really take effect).
fn random_serial_history(n: usize, keys: u64, seed: u64) -> History {
    let mut rng = Rng(seed);
    let mut state: Vec<Option<WriteId>> = vec![None; keys as usize];
    let names: Vec<Vec<u8>> = (0..keys).map(|k| format!("key-{k}").into_bytes()).collect();
    let mut next_id: WriteId = 1;
    let mut h = History::default();
    for i in 0..n as u64 {
        let mut t = txn(i % 64, 10 * i, 10 * i + rng.below(36));
        for _ in 0..1 + rng.below(3) {
            let k = rng.below(keys) as usize;
            t.reads.push((names[k].clone(), state[k]));
        }
        let nw = rng.below(3);
        let mut written: Vec<usize> = Vec::new();
        for _ in 0..nw {
            let k = rng.below(keys) as usize;
            if !written.contains(&k) {
                written.push(k);
                t.writes.push((names[k].clone(), next_id));
                next_id += 1;
            }
        }
        let roll = rng.below(100);
        let (outcome, applied) = match roll {
            0..=4 => (Outcome::Aborted, false),
            5..=6 => (Outcome::Unknown, roll == 5),
            _ => (Outcome::Committed, true),
        };
        t.outcome = outcome;
        t.read_ts = Some(i);
        if applied {
            t.write_ts = Some(i + 1);
            for (k, w) in written.iter().zip(&t.writes) {
                state[*k] = Some(w.1);
            }
        }
        h.push(t);
    }
    h
}

#[test]
fn large_random_serial_history_passes() {
    let h = random_serial_history(200_000, 5_000, 7);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.committed + r.aborted + r.unknown, 200_000);
    assert!(r.promoted > 0 && r.aborted > 0);
}

#[test]
fn anomaly_hidden_in_large_history_is_found() {
    let mut h = random_serial_history(100_000, 2_000, 11);
    let end = h.txns.iter().map(|t| t.complete_ns).max().unwrap_or(0);
    // A late reader sees the initial value of a key that was written (and
    // completed) long before: a stale read, far away in real time.
    let (key, _) = h
        .txns
        .iter()
        .find(|t| t.outcome == Outcome::Committed && !t.writes.is_empty())
        .map(|t| t.writes[0].clone())
        .expect("some committed writer");
    h.push(txn(999, end + 10, end + 20).r(std::str::from_utf8(&key).expect("ascii"), None));
    let r = check(&h);
    assert!(!r.is_ok());
    let c = only_cycle(&r);
    assert!(c.realtime, "{r}");
    assert!(c.steps.iter().any(|s| s.txn == 100_000));
}

/// Run with `cargo test --release -p meridian-checker -- --ignored --nocapture`.
#[test]
#[ignore]
fn million_transactions_check_quickly() {
    let h = random_serial_history(1_000_000, 100_000, 3);
    let start = std::time::Instant::now();
    let r = check(&h);
    let took = start.elapsed();
    assert!(r.is_ok(), "{r}");
    let start = std::time::Instant::now();
    let mut sink = std::io::sink();
    write_edn(&h, &mut sink).expect("edn");
    eprintln!(
        "check: {took:?} ({} edges); edn: {:?}",
        r.edges,
        start.elapsed()
    );
}

// ----- deletes, absent reads and scans ---------------------------------------

fn at(mut t: TxnRecord, read_ts: u64) -> TxnRecord {
    t.read_ts = Some(read_ts);
    t
}

fn del(mut t: TxnRecord, k: &str, id: WriteId) -> TxnRecord {
    t.deletes.push((k.as_bytes().to_vec(), id));
    t
}

fn scan(
    mut t: TxnRecord,
    start: &str,
    end: &str,
    limit: usize,
    rows: &[(&str, WriteId)],
) -> TxnRecord {
    t.scans.push(ScanRead {
        start: start.as_bytes().to_vec(),
        end: Some(end.as_bytes().to_vec()),
        limit,
        rows: rows
            .iter()
            .map(|(k, w)| (k.as_bytes().to_vec(), *w))
            .collect(),
    });
    t
}

fn absent_reads(r: &CheckReport) -> Vec<(usize, Vec<u8>)> {
    r.violations
        .iter()
        .filter_map(|v| match v {
            Violation::AbsentRead { txn, key, .. } => Some((*txn, key.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn tombstones_are_versions() {
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        del(at(txn(1, 20, 30), 15), "k", 2).ts(25),
        // After the delete: absent is right.
        at(txn(2, 40, 50), 45).r("k", None),
        // Between the write and the delete: absent is a lost row.
        at(txn(3, 12, 18), 10).r("k", None),
    ]);
    let r = check(&h);
    assert_eq!(absent_reads(&r), vec![(3, b"k".to_vec())], "{r}");

    // A reader of the old value that starts after the delete completed is
    // stale: it must come after the tombstone (rw to the deleter, rt from it).
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        del(at(txn(1, 20, 30), 15), "k", 2).ts(25),
        at(txn(2, 40, 50), 20).r("k", Some(1)),
    ]);
    let r = check(&h);
    assert!(!r.is_ok(), "stale read past a delete must be caught");
    assert_eq!(cycle_txns(only_cycle(&r)), vec![1, 2]);
}

#[test]
fn a_scan_missing_a_row_is_a_phantom() {
    let base = vec![
        at(txn(1, 0, 10), 1).w("a", 1).w("c", 3).ts(5),
        at(txn(2, 11, 30), 12).w("b", 2).ts(20),
    ];
    // Started after b's insert completed, but did not return b.
    let mut h = base.clone();
    h.push(scan(
        at(txn(3, 40, 50), 45),
        "a",
        "d",
        10,
        &[("a", 1), ("c", 3)],
    ));
    let r = check(&hist(h));
    assert_eq!(absent_reads(&r), vec![(2, b"b".to_vec())], "{r}");

    // The same rows are right for a snapshot before the insert...
    let mut h = base.clone();
    h.push(scan(
        at(txn(3, 11, 50), 15),
        "a",
        "d",
        10,
        &[("a", 1), ("c", 3)],
    ));
    assert!(check(&hist(h)).is_ok());

    // ... and a scan that hit its limit at "a" says nothing about b or c.
    let mut h = base;
    h.push(scan(at(txn(3, 40, 50), 45), "a", "d", 1, &[("a", 1)]));
    assert!(check(&hist(h)).is_ok());
}

#[test]
fn a_scan_skips_the_transactions_own_writes() {
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("a", 1).ts(5),
        // It deletes a, so its scan does not return a: not a missing row.
        del(scan(at(txn(2, 20, 30), 21), "a", "z", 10, &[]), "a", 2).ts(25),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
}

/// A delete whose commit reply was lost is unknown and has no write_ts;
/// an absent read
/// after it may have seen its tombstone, so it is not a missing row.
#[test]
fn an_absent_read_after_an_unknown_delete_is_not_a_missing_row() {
    let mut unknown = del(at(txn(2, 20, 30), 15), "k", 2).outcome(Outcome::Unknown);
    unknown.write_ts = None;
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        unknown,
        at(txn(3, 40, 50), 45).r("k", None),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
}

/// An unknown-outcome delete that carries the write_ts it would commit at
/// (the client took one before the outcome was lost) explains an absent
/// read only at or after that write_ts: before it, the absence is a
/// missing row.
#[test]
fn an_unknown_delete_with_a_write_ts_explains_only_later_absent_reads() {
    let unknown = del(at(txn(2, 20, 30), 15), "k", 2)
        .outcome(Outcome::Unknown)
        .ts(25);
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        unknown.clone(),
        at(txn(3, 40, 50), 45).r("k", None),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        unknown,
        at(txn(3, 40, 50), 20).r("k", None),
    ]);
    let r = check(&h);
    assert_eq!(absent_reads(&r), vec![(2, b"k".to_vec())], "{r}");
}

/// An unknown-outcome writer that somebody read is promoted; with its
/// write_ts recorded its writes join the version order, so a transaction
/// that read past it (the version before it, at a later read_ts) and then
/// wrote the key forms a cycle with it: a lost update.
#[test]
fn a_promoted_unknown_writer_with_a_write_ts_is_placed() {
    let lost = at(txn(2, 20, 30), 15)
        .w("a", 2)
        .w("b", 3)
        .outcome(Outcome::Unknown)
        .ts(25);
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("a", 1).w("b", 1).ts(5),
        lost,
        // Sees the unknown transfer's a: promotes it.
        at(txn(3, 40, 50), 45).r("a", Some(2)),
        // Reads b before the transfer at a later read_ts and writes it.
        at(txn(4, 40, 50), 46).r("b", Some(1)).w("b", 4).ts(47),
    ]);
    let r = check(&h);
    assert!(!r.is_ok(), "a lost update past a promoted writer: {r}");
}

/// A promoted unknown-outcome transaction (somebody read one of its writes)
/// that also deleted a key but left no write_ts cannot be placed; an absent
/// read of that key after it is left unresolved, not a missing row (a
/// thin-client transaction can leave such a record).
#[test]
fn a_promoted_unknown_delete_without_a_write_ts_is_not_a_missing_row() {
    let mut unknown = del(at(txn(2, 20, 30), 15), "k", 2)
        .w("j", 3)
        .outcome(Outcome::Unknown);
    unknown.write_ts = None;
    let h = hist(vec![
        at(txn(1, 0, 10), 1).w("k", 1).ts(5),
        unknown,
        at(txn(3, 40, 50), 45).r("k", None).r("j", Some(3)),
    ]);
    let r = check(&h);
    assert!(r.is_ok(), "{r}");
}

/// A single read records the version it saw as its `read_ts`. One that
/// answered "absent at 20", the tombstone of a delete whose outcome is
/// unknown and which nobody else read, proves that delete committed; if a
/// live write at 30 completed before the read was invoked, the read was
/// stale and must be caught (left unplaced, the delete would leave the
/// read unresolved, with no edges). A read that names no such delete's
/// `write_ts` leaves it unplaced.
#[test]
fn a_single_read_of_an_unknown_deletes_tombstone_promotes_it() {
    let w1 = txn(1, 0, 100).w("k", 1).ts(10);
    let mut d = txn(2, 100, u64::MAX).ts(20).outcome(Outcome::Unknown);
    d.deletes.push((b"k".to_vec(), 2));
    let w3 = txn(3, 200, 300).w("k", 3).ts(30);
    let single = |read_ts| {
        let mut s = txn(4, 400, 500).r("k", None);
        s.read_ts = Some(read_ts);
        s
    };
    let r = check(&hist(vec![w1.clone(), d.clone(), w3.clone(), single(20)]));
    assert!(
        !r.is_ok(),
        "the stale read of the tombstone at 20 passed:\n{r}"
    );
    assert_eq!(r.promoted, 1, "the delete it saw is promoted:\n{r}");
    // Not fresh either way: at 35 it missed the live write at 30.
    let r = check(&hist(vec![w1.clone(), d.clone(), w3.clone(), single(35)]));
    assert!(!r.is_ok(), "{r}");
    // A fresh single read, absent just after the delete with nothing
    // after it, passes, with the delete promoted.
    let r = check(&hist(vec![w1, d, single(20)]));
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.promoted, 1);
}
