//! The coordinator against participants: single reads, scans across
//! clamped regions and buffered deletes, checked scan replies, and a LOCK
//! refused for the configuration.

use super::*;
use crate::participant::Participant;
use meridian_config::Configuration;
use meridian_wire::{ConfigId, TxnResponse};

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

fn granted(r: &Response) -> bool {
    matches!(
        r,
        Response::Txn(TxnResponse::Lock(Ok(())) | TxnResponse::LockedAbove(_))
    )
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
                    let mut durable = Vec::new();
                    for (n, req) in msgs {
                        let resp = self.call(n, &req);
                        if granted(&resp) && self.map.disk_durable() {
                            durable.push(n);
                        }
                        if let Some(s) = t.on_reply(n, resp).unwrap() {
                            next.get_or_insert(s);
                        }
                    }
                    // A disk-mode primary's second answer to a granted LOCK.
                    for n in durable {
                        let resp = Response::Txn(TxnResponse::LockDurable);
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
                ScanStep::Done(rows) => return (rows.into_iter().map(|(k, _)| k).collect(), sent),
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

/// A blind write to a key whose newest version lies above the
/// transaction's `read_ts` is locked (`LockBlind` skips the version check)
/// and answered `LockedAbove(head)`: the transaction's `write_ts` floor
/// rises above the head, and a commit at the floor installs above it.
#[test]
fn a_blind_write_over_a_newer_version_takes_write_ts_above_it() {
    let c = config(100);
    let mut net = Net::new(&c, &c);
    net.write(&[b"k"], 1000);
    let mut t = net.begin(1);
    t.put(b"k".to_vec(), b"blind".to_vec()).unwrap();
    assert_eq!(t.write_ts_floor(), Timestamp(2));
    let mut step = t.commit().expect("commit starts");
    let mut floor = None;
    let result = loop {
        step = match step {
            CommitStep::Done(r) => break r,
            CommitStep::GetWriteTs => {
                floor = Some(t.write_ts_floor());
                t.on_write_ts(t.write_ts_floor()).unwrap()
            }
            CommitStep::Send(msgs) => {
                let mut next = None;
                let mut durable = Vec::new();
                for (n, req) in msgs {
                    let resp = net.call(n, &req);
                    if granted(&resp) {
                        durable.push(n);
                    }
                    if let Some(s) = t.on_reply(n, resp).unwrap() {
                        next.get_or_insert(s);
                    }
                }
                for n in durable {
                    let resp = Response::Txn(TxnResponse::LockDurable);
                    if let Some(s) = t.on_reply(n, resp).unwrap() {
                        next.get_or_insert(s);
                    }
                }
                next.expect("phase decided")
            }
        };
    };
    assert_eq!(floor, Some(Timestamp(1001)));
    assert_eq!(result, Ok(Timestamp(1001)));
}

/// Disk durability: COMMIT-PRIMARY exposes the writes, so it goes only
/// once every written region's primary said its LOCK record is durable
/// (`TxnResponse::LockDurable`); until then the commit sends nothing, and
/// the last `LockDurable` sends it.
#[test]
fn commit_primary_waits_for_every_lock_record_to_be_durable() {
    let c = config(100);
    let mut net = Net::new(&c, &c);
    assert!(net.map.disk_durable());
    let mut t = net.begin(10);
    t.put(vec![0x10], b"a".to_vec()).unwrap();
    t.put(vec![0x90], b"b".to_vec()).unwrap();
    let CommitStep::Send(locks) = t.commit().unwrap() else {
        panic!("LOCKs first");
    };
    assert_eq!(locks.len(), 2);
    let mut step = None;
    for (n, req) in &locks {
        let resp = net.call(*n, req);
        assert!(granted(&resp));
        if let Some(s) = t.on_reply(*n, resp).unwrap() {
            step = Some(s);
        }
    }
    assert!(matches!(step, Some(CommitStep::GetWriteTs)));
    // n0's LOCK record is durable, n1's not yet.
    assert!(t
        .on_reply(NodeId(0), Response::Txn(TxnResponse::LockDurable))
        .unwrap()
        .is_none());
    // One copy: no COMMIT-BACKUP, so COMMIT-PRIMARY would be next.
    match t.on_write_ts(Timestamp(20)).unwrap() {
        CommitStep::Send(m) => assert!(m.is_empty(), "nothing before n1's LockDurable: {m:?}"),
        other => panic!("{other:?}"),
    }
    t.check_invariants();
    match t
        .on_reply(NodeId(1), Response::Txn(TxnResponse::LockDurable))
        .unwrap()
    {
        Some(CommitStep::Send(m)) => {
            assert_eq!(m.len(), 2);
            assert!(m
                .iter()
                .all(|(_, r)| matches!(r, TxnRequest::CommitPrimary { .. })));
        }
        other => panic!("COMMIT-PRIMARY after the last LockDurable: {other:?}"),
    }
    // A repeated LOCK answer or LockDurable changes nothing.
    assert!(t
        .on_reply(NodeId(0), Response::Txn(TxnResponse::Lock(Ok(()))))
        .unwrap()
        .is_none());
    assert!(t
        .on_reply(NodeId(0), Response::Txn(TxnResponse::LockDurable))
        .unwrap()
        .is_none());
    t.check_invariants();
}
