//! Restarts from disk (FaRM §5.2, FaRMv2 §4.3): a CM or the whole cluster
//! restored from its logs, at the steps where a rule keeps time monotonic
//! and the configuration live.

use super::{disk_bank, finish_live, warm_up};
use meridian_bugs::marks;
use meridian_sim::{Endpoint, EventView, Scenario, SimConfig};
use meridian_wire::{CoordMessage, Frame, Request};

/// Whether `e` delivers to node `n` the coordination service's answer
/// that its CAS won. The service's leader answers over the network when
/// it runs on another node; a scenario whose CAS is answered locally
/// finishes without reaching its window and fails.
fn winning_cas_answer(e: &EventView<'_>, n: u32) -> bool {
    matches!(e, EventView::Deliver {
        to: Endpoint::Node(to),
        frame: Frame::OneWay {
            req: Request::Coord(CoordMessage::CasReply { swapped: true, .. }),
            ..
        } | Frame::Request {
            req: Request::Coord(CoordMessage::CasReply { swapped: true, .. }),
            ..
        },
        ..
    } if *to == n)
}

/// The bank workload in disk mode on `nodes` nodes.
fn disk_bank_on(seed: u64, nodes: u32) -> SimConfig {
    SimConfig {
        nodes,
        ..disk_bank(seed)
    }
}

/// After a whole-cluster crash no fast-forward value survives: a restored
/// CM that resumed its own clock could go below times its predecessor
/// handed out. The time bound stored in the coordination service keeps
/// global time monotonic (FaRMv2 §4.3), and the simulator's global-time
/// oracle checks every time handed out against the largest before it.
/// Script: every node crashes once the cluster has run, and all restart
/// from disk.
fn whole_cluster_restart(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(disk_bank(seed));
    warm_up(&mut s, 30)?;
    for n in 0..3 {
        s.crash_node(n);
    }
    for n in 0..3 {
        s.restart_node(n);
    }
    finish_live(s).map(|_| ())
}

#[test]
fn a_master_restored_after_a_whole_cluster_crash_starts_at_the_stored_bound() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a new clock master starts at the stored time bound above FF");
        whole_cluster_restart(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// The CM, the clock master, crashes and restarts from disk before anyone
/// suspects it, and renews its configuration as CM again with a fresh
/// clock. The CM has not changed, so members and clients that kept the
/// samples of its previous incarnation would mix two clocks (a read at
/// `read_ts` above a later commit's `write_ts`). The renewal carries a new
/// `Configuration::clock_epoch`, and clients fail their clocks over at it.
fn the_cm_restarts_from_disk(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(disk_bank(seed));
    warm_up(&mut s, 30)?;
    s.crash_node(0);
    s.restart_node(0);
    finish_live(s).map(|_| ())
}

#[test]
fn a_restored_cms_renewal_starts_a_new_clock_epoch() {
    for seed in [1, 2, 3] {
        let renewed = marks::watch("a restored CM renews its configuration with a new clock epoch");
        let failover = marks::watch("a client fails its clock over at a new clock epoch of its CM");
        the_cm_restarts_from_disk(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        renewed.assert_hit();
        failover.assert_hit();
    }
}

/// The CM's last proposal is stored in the coordination service, but the
/// whole cluster crashes before the CAS answer reaches it. A restored CM
/// that renewed its older configuration would lose the CAS to its own
/// proposal forever; it renews the stored proposal instead, and restored
/// members accept a later configuration of their CM whose complete
/// replicas for them were complete when they were restored (here the
/// proposal removes a member, so the renewal promotes restored backups).
/// Script: node 2 of three crashes; the CM's winning CAS answer is held;
/// once it is held, nodes 0 and 1 crash (the answer is lost) and all
/// three restart from disk.
fn crash_before_the_cas_answer(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(disk_bank_on(seed, 3));
    warm_up(&mut s, 30)?;
    let answer = s.hold(|e| winning_cas_answer(e, 0));
    s.crash_node(2);
    s.run_until_held(answer, "the CM's winning CAS answer")?;
    s.crash_node(0);
    s.crash_node(1);
    s.discard(answer);
    for n in 0..3 {
        s.restart_node(n);
    }
    finish_live(s).map(|_| ())
}

#[test]
fn a_restored_cm_renews_the_proposal_the_service_stores() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a restored CM renews its own stored proposal");
        let accepted =
            marks::watch("a restored member accepts a later configuration its replicas allow");
        crash_before_the_cas_answer(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
        accepted.assert_hit();
    }
}
