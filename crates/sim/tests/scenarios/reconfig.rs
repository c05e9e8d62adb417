//! Reconfiguration windows (FaRM §5.2): a CM or members failing at the
//! steps where a rule keeps the cluster live.

use super::{bank_on, config_without, finish_live, reconfig_message, warm_up};
use meridian_bugs::marks;
use meridian_sim::{Endpoint, Scenario};
use meridian_wire::ReconfigMessage;

const RANK_K: &str = "a backup CM of rank k probes k leases after suspecting";

/// The CM (node 0) and its first backup CM (node 1) of five crash at once.
/// The other members ask the first backup to take over, and it never
/// answers: the backup of rank 2 must give it a lease and then probe
/// itself (`Reconfig::suspect_cm`), or nothing would ever replace the CM.
fn cm_and_first_backup_crash(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(bank_on(seed, 5));
    warm_up(&mut s, 20)?;
    s.crash_node(0);
    s.crash_node(1);
    let probes = marks::count(RANK_K);
    s.run_until("a backup CM of rank 2 probing", |_| {
        marks::count(RANK_K) > probes
    })?;
    // Nodes 0 and 1 hold two of the coordination service's three
    // replicas: back from their disks, the service answers the CAS again.
    s.restart_node(0);
    s.restart_node(1);
    s.run_until("a configuration with a CM other than node 0", |sim| {
        sim.node_config(2)
            .is_some_and(|c| c.cm() != meridian_wire::NodeId(0))
    })?;
    finish_live(s).map(|_| ())
}

#[test]
fn the_cm_and_its_first_backup_crashing_at_once_are_replaced() {
    for seed in [1, 2, 3] {
        let watch = marks::watch(RANK_K);
        cm_and_first_backup_crash(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// A configuration of two whose CM crashes and restarts empty: the
/// survivor alone is no majority of two, so it probes its suspect too, and
/// the restarted node's empty answer counts (its old incarnation is gone).
/// Script: node 2 of three crashes for good; once the other two form a
/// configuration of two, the CM (node 0) crashes and restarts at once.
fn a_pair_whose_cm_restarts(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(bank_on(seed, 3));
    warm_up(&mut s, 20)?;
    s.crash_node(2);
    s.run_until("a configuration of nodes 0 and 1", |sim| {
        sim.node_config(1)
            .is_some_and(|c| c.members().len() == 2 && config_without(sim, 1, &[2]))
    })?;
    s.crash_node(0);
    s.restart_node(0);
    s.run_until("node 1 replaces the configuration of two", |sim| {
        config_without(sim, 1, &[0, 2])
    })?;
    s.restart_node(2);
    finish_live(s).map(|_| ())
}

#[test]
fn a_pair_whose_cm_restarts_empty_is_replaced_by_the_survivor() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a suspect that restarted empty counts toward a probe");
        a_pair_whose_cm_restarts(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// The CM dies between NEW-CONFIG and NEW-CONFIG-COMMIT: its members
/// applied the new configuration and wait for the commit, blocked. They
/// must suspect the CM as members of any configuration do
/// (`Reconfig::may_suspect_cm`), or every region stays blocked.
/// Script: node 4 of five crashes; the CM's NEW-CONFIG-COMMITs are held;
/// once one is held, the CM crashes and they are lost.
fn cm_dies_before_its_commit(seed: u64) -> Result<(), String> {
    crash_at_a_held_commit(seed, 0, |_, from| from == Endpoint::Node(0))
}

/// Node 4 of five crashes; the NEW-CONFIG-COMMITs `held(to, from)` picks
/// are held; once one is, node `victim` crashes and they are lost. The
/// others must replace the configuration without the two, and the run
/// must finish once both restart.
fn crash_at_a_held_commit(
    seed: u64,
    victim: u32,
    held: fn(Endpoint, Endpoint) -> bool,
) -> Result<(), String> {
    let mut s = Scenario::new(bank_on(seed, 5));
    warm_up(&mut s, 20)?;
    let commits = s.hold(move |e| {
        matches!(
            reconfig_message(e),
            Some((to, from, ReconfigMessage::NewConfigCommit { .. })) if held(to, from)
        )
    });
    s.crash_node(4);
    // Every member has answered NEW-CONFIG once the CM sends its commit.
    s.run_until_held(commits, "a held NEW-CONFIG-COMMIT")?;
    s.crash_node(victim);
    s.discard(commits);
    s.run_until("a configuration without the two crashed nodes", |sim| {
        config_without(sim, 1, &[victim, 4])
    })?;
    s.restart_node(victim);
    s.restart_node(4);
    finish_live(s).map(|_| ())
}

#[test]
fn a_cm_dying_between_new_config_and_its_commit_is_replaced() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a member awaiting NEW-CONFIG-COMMIT suspects its CM");
        cm_dies_before_its_commit(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// The CM resends NEW-CONFIG-COMMIT to a member that crashes before it
/// arrives: the CM must go on suspecting members while it commits
/// (`Reconfig::may_suspect_members`), or it resends forever and data
/// recovery waits for the dead member.
/// Script: node 4 of five crashes; NEW-CONFIG-COMMITs to node 3 are
/// held; once one is held, node 3 crashes and they are lost.
fn member_dies_before_the_commit(seed: u64) -> Result<(), String> {
    crash_at_a_held_commit(seed, 3, |to, _| to == Endpoint::Node(3))
}

#[test]
fn a_cm_still_committing_suspects_a_member_that_died() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a CM still committing suspects a member");
        member_dies_before_the_commit(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// A configuration shrinks to its CM alone: its commit waits for no
/// acknowledgement (the CM counts itself), so the CM admits the others'
/// JOINs again. Script: node 2 of three crashes for good; once nodes 0
/// and 1 form a configuration, node 1 crashes and restarts empty (its
/// empty answer gives the CM its majority of two); then node 2 restarts,
/// and both must be admitted again.
fn shrink_to_the_cm(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(bank_on(seed, 3));
    warm_up(&mut s, 20)?;
    s.crash_node(2);
    s.run_until("a configuration of nodes 0 and 1", |sim| {
        sim.node_config(0)
            .is_some_and(|c| c.members().len() == 2 && config_without(sim, 0, &[2]))
    })?;
    s.crash_node(1);
    s.restart_node(1);
    s.run_until("a configuration of the CM alone", |sim| {
        sim.node_config(0).is_some_and(|c| c.members().len() == 1)
    })?;
    s.restart_node(2);
    s.run_until("nodes 1 and 2 admitted again", |sim| {
        sim.node_config(0).is_some_and(|c| c.members().len() == 3)
    })?;
    finish_live(s).map(|_| ())
}

#[test]
fn a_cluster_shrunk_to_its_cm_admits_members_again() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a CM left alone ends its commit at once");
        shrink_to_the_cm(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}

/// Two members of a configuration of four crash and come back from disk.
/// With only one other answer the CM has no majority of four; a restored
/// node answers a probe of the configuration it was restored in as empty,
/// so the CM removes both and they join again.
/// Script (disk mode): five nodes; node 4 crashes for good so the
/// configuration has four members; then two members other than the CM
/// crash and restart from disk.
fn two_of_four_restored(seed: u64) -> Result<(), String> {
    let mut cfg = bank_on(seed, 5);
    cfg.faults.disk = true;
    let mut s = Scenario::new(cfg);
    warm_up(&mut s, 20)?;
    s.crash_node(4);
    s.run_until(
        "nodes 2 and 3 hold a configuration of four on disk",
        |sim| {
            [2, 3].iter().all(|n| {
                sim.node_config(*n).is_some_and(|c| c.members().len() == 4)
                    && config_without(sim, *n, &[4])
                    && sim.log_synced(*n)
            })
        },
    )?;
    // The CM's probes of node 2 are held while nodes 2 and 3 are down:
    // once one is held, the CM suspects them, and they come back from
    // disk before its probes arrive.
    let probes = s.hold(|e| {
        matches!(
            reconfig_message(e),
            Some((
                Endpoint::Node(2),
                Endpoint::Node(0),
                ReconfigMessage::Probe { .. }
            ))
        )
    });
    s.crash_node(2);
    s.crash_node(3);
    s.run_until_held(probes, "the CM's probe of node 2")?;
    s.restart_node(2);
    s.restart_node(3);
    s.release(probes);
    s.restart_node(4);
    finish_live(s).map(|_| ())
}

#[test]
fn restored_nodes_answer_probes_of_their_configuration_as_empty() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a restored node answers a probe of its configuration as empty");
        two_of_four_restored(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}
