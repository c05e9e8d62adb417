//! A restored primary and lock recovery (FaRM §5.3).

use super::disk_bank;
use meridian_bugs::{marks, Bug, Bugs};
use meridian_process::node::DurableRecord;
use meridian_sim::{Endpoint, EventView, Scenario, Sim};
use meridian_txn::Mutation;
use meridian_wire::{
    Conflict, Frame, LockRecord, NodeId, Request, Response, TxId, TxnRequest, TxnResponse,
};
use std::cell::Cell;
use std::rc::Rc;

/// The transaction request a durable participant record logged, if any.
fn logged_request(r: &DurableRecord) -> Option<&TxnRequest> {
    match r {
        DurableRecord::Participant(Mutation::Request { req, .. }) => Some(req),
        _ => None,
    }
}

/// A COMMIT-BACKUP record durable at a backup of a region node `p` leads,
/// whose transaction's LOCK record `p` logged but has not fsynced: a
/// whole-cluster crash now loses the LOCK at the primary while a backup
/// keeps the commit. Returns the transaction and its record.
fn commit_backup_ahead_of_its_primary(sim: &Sim, p: u32) -> Option<(TxId, LockRecord)> {
    let config = sim.initial_config();
    let nodes = config.members().len() as u32;
    let led_by_p = |rec: &LockRecord| {
        rec.writes.iter().any(|w| {
            config
                .regions()
                .iter()
                .any(|r| r.id == w.region && r.primary == NodeId(p))
        })
    };
    let locked_unsynced = |tx: TxId| {
        sim.unsynced_log(p).iter().any(|(_, r)| {
            logged_request(r)
                .and_then(TxnRequest::lock_record)
                .is_some_and(|(rec, _)| rec.tx == tx)
        })
    };
    (0..nodes).filter(|b| *b != p).find_map(|b| {
        sim.durable_log(b)
            .iter()
            .find_map(|(_, r)| match logged_request(r) {
                Some(TxnRequest::CommitBackup { record, .. })
                    if led_by_p(record) && locked_unsynced(record.tx) =>
                {
                    Some((record.tx, record.clone()))
                }
                _ => None,
            })
    })
}

/// A restored primary blocks every region it leads until lock recovery,
/// even when the next configuration changes no replica (FaRM §5.3: a
/// primary that lost a LOCK record it answered before its fsync must not
/// serve the keys a backup's COMMIT-BACKUP is about to commit).
///
/// Script: once the initial rows are durable, node 1's fsyncs are held, so its LOCK records stay volatile
/// while its LOCK-REPLYs (sent before the fsync: every region has a
/// complete backup) let transactions go on to COMMIT-BACKUP. Once a backup
/// holds a durable COMMIT-BACKUP of a transaction T whose LOCK node 1 has
/// not fsynced, every node crashes and restarts from disk. Recovery
/// messages to node 1 are held until a transaction that read T's keys
/// there and locked them has its COMMIT-PRIMARY delivered there (or node
/// 1 has turned away 20 READs), so those reads come before lock recovery. With the restore rule
/// the region is blocked and the run passes; without it
/// (`Bug::RestoreForgotten`), node 1 serves T's keys without T's write,
/// which recovery then commits, and the checker sees the cycle.
fn restored_primary_scenario(seed: u64, bugs: Bugs) -> Result<(), String> {
    let p = 1u32;
    let mut cfg = disk_bank(seed);
    cfg.bugs = bugs;
    let nodes = cfg.nodes;
    let mut s = Scenario::new(cfg);
    s.run_until("node 1's initial rows are durable", |sim| sim.log_synced(p))?;
    let fsyncs = s.hold(move |e| matches!(e, EventView::Fsync { node, .. } if *node == p));
    let mut t = None;
    s.run_until(
        "a backup's COMMIT-BACKUP is durable ahead of its primary's LOCK",
        |sim| {
            t = commit_backup_ahead_of_its_primary(sim, p);
            t.is_some()
        },
    )?;
    let (_, record) = t.expect("found");
    for n in 0..nodes {
        s.crash_node(n);
    }
    s.release(fsyncs);
    // Recovery traffic to node 1 waits until a transaction that read T's
    // keys there and locked them past the lost lock has its COMMIT-PRIMARY
    // delivered there (the stale read commits), or until node 1 has turned
    // away 20 READs (it serves none while T's regions are blocked).
    let led: Vec<_> = s
        .sim()
        .initial_config()
        .regions()
        .iter()
        .filter(|r| r.primary == NodeId(p))
        .map(|r| r.id)
        .collect();
    let keys: Vec<Vec<u8>> = record
        .writes
        .iter()
        .filter(|w| led.contains(&w.region))
        .map(|w| w.key.clone())
        .collect();
    let turned_away = Rc::new(Cell::new(0u32));
    let stale: Rc<Cell<Option<TxId>>> = Rc::new(Cell::new(None));
    let stale_committed = Rc::new(Cell::new(false));
    let (away, st, done) = (turned_away.clone(), stale.clone(), stale_committed.clone());
    let recovery = s.hold(move |e| match e {
        EventView::Deliver {
            to: Endpoint::Node(n),
            frame: Frame::Request { req, .. } | Frame::OneWay { req, .. },
            ..
        } if *n == p => match req {
            Request::Recovery(_) => !done.get() && away.get() < 20,
            Request::Txn(TxnRequest::CommitPrimary { tx, .. }) => {
                if st.get() == Some(*tx) {
                    done.set(true);
                }
                false
            }
            Request::Txn(t) => {
                if let Some((rec, _)) = t.lock_record() {
                    if rec.writes.iter().any(|w| keys.contains(&w.key)) {
                        st.set(Some(rec.tx));
                    }
                }
                false
            }
            _ => false,
        },
        EventView::Deliver {
            from: Endpoint::Node(n),
            frame:
                Frame::Response {
                    resp: Response::Txn(TxnResponse::Read(Err(Conflict::Unavailable))),
                    ..
                },
            ..
        } if *n == p => {
            away.set(away.get() + 1);
            false
        }
        _ => false,
    });
    for n in 0..nodes {
        s.restart_node(n);
    }
    s.run_until(
        "a stale reader's COMMIT-PRIMARY, or 20 turned-away READs, at the restored primary",
        |_| stale_committed.get() || turned_away.get() >= 20,
    )?;
    s.release(recovery);
    s.finish().map(|_| ())
}

/// Three seeds (three schedules around the same script): the window is
/// reached on each, and only the bug is caught.
#[test]
fn a_restored_primary_blocks_its_regions_until_lock_recovery() {
    for seed in [1, 7, 11] {
        let watch = marks::watch("restored primary blocks an unchanged region");
        restored_primary_scenario(seed, Bugs::none()).unwrap_or_else(|e| panic!("{e}"));
        watch.assert_hit();
        let bugs = Bugs::of(&[Bug::RestoreForgotten]);
        let err = restored_primary_scenario(seed, bugs.clone())
            .expect_err("a restored primary serving before lock recovery must be caught");
        assert!(
            bugs.hits(Bug::RestoreForgotten) > 0,
            "seed {seed}: the bug was never hit"
        );
        assert!(
            err.contains("violation") || err.contains("audit"),
            "seed {seed}: {err}"
        );
    }
}
