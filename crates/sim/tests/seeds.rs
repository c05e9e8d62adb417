//! Seeds of the deterministic simulator through the checker.
//!
//! The simulator runs the production client and node process objects (see
//! the crate essay). Set `MERIDIAN_SIM_SEEDS=n` for more seeds,
//! `MERIDIAN_SIM_SEED=s` to replay one. The 10,000-seed swarm run is
//! `meridian sim --workload swarm --seeds 10000`.
//!
//! Windows that a scripted scenario reaches by explicit steps, whatever
//! the schedule, live in `tests/scenarios/` with their coverage marks;
//! the seeds named here reach theirs through a seed's schedule, and each
//! asserts the mark of the rule it guards, so a schedule change that moves
//! a seed off its window fails the test instead of passing it vacuously.

use meridian_bugs::{marks, Bug, Bugs};
use meridian_process::node::NodeEvent;
use meridian_sim::{run_and_check, Faults, Sim, SimConfig, SimReport};
use meridian_wire::NodeId;
use std::collections::BTreeMap;

fn seeds(default: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("MERIDIAN_SIM_SEED") {
        return vec![s.parse().expect("MERIDIAN_SIM_SEED must be a number")];
    }
    let n = std::env::var("MERIDIAN_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}

/// `cfg` with the injected bug `bug`, and the set, whose hit counters the
/// run's processes share (read them after the run).
fn inject(bug: Bug, cfg: SimConfig) -> (SimConfig, Bugs) {
    let bugs = Bugs::of(&[bug]);
    (
        SimConfig {
            bugs: bugs.clone(),
            ..cfg
        },
        bugs,
    )
}

/// Asserts that the injected bug `bug` ran its broken branch in the run
/// whose set is `bugs` (a negative test that its bug never reaches proves
/// nothing).
fn assert_hit(bugs: &Bugs, bug: Bug) {
    assert!(bugs.hits(bug) > 0, "the injected bug {bug:?} was never hit");
}

/// Runs `cfg` through the checker and asserts it finished (or lost a
/// region, beyond the fault model) instead of ending by the time limit.
fn assert_finishes(cfg: SimConfig) {
    let seed = cfg.seed;
    let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        r.region_lost || !r.timed_out,
        "seed {seed} ({}): stuck:\n{}",
        r.faults.describe(),
        r.stuck.join("\n")
    );
}

/// Runs `cfg` through the checker and asserts that the run reached the
/// code path marked `mark` (the rule the seed guards): a seed whose
/// schedule moved off its window fails here instead of passing without
/// testing anything. With `live`, the run must also finish (or lose a
/// region, beyond the fault model).
fn reaches(mark: &'static str, cfg: SimConfig, live: bool) -> SimReport {
    let seed = cfg.seed;
    let watch = marks::watch(mark);
    let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
    if live {
        assert!(
            r.region_lost || !r.timed_out,
            "seed {seed} ({}): stuck:\n{}",
            r.faults.describe(),
            r.stuck.join("\n")
        );
    }
    assert!(
        watch.hits() > 0,
        "seed {seed} no longer reaches {mark:?}: its schedule moved off the \
         window; find a seed that does, or script the window in tests/scenarios/"
    );
    r
}

#[test]
fn bank_seeds_pass_the_checker() {
    let mut committed = 0;
    let mut aborted = 0;
    for seed in seeds(150) {
        let r = run_and_check(SimConfig::bank(seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: a fault-free run must finish");
        committed += r.committed;
        aborted += r.aborted;
    }
    assert!(
        committed > 0 && aborted > 0,
        "workload must commit and also contend: {committed} committed, {aborted} aborted"
    );
}

/// Register transactions, a fifth of them sent as thin clients' `Execute`
/// to a random node (run by the node's embedded coordinator, recorded and
/// checked like the others).
#[test]
fn register_seeds_pass_the_checker() {
    let mut thin = 0;
    for seed in seeds(150) {
        let r = run_and_check(SimConfig::register(seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.committed > 0);
        assert!(!r.timed_out, "seed {seed}: a fault-free run must finish");
        thin += r.thin_committed;
    }
    assert!(thin > 0, "no thin-client transaction committed");
}

/// Inserts, deletes, delete-then-insert, scans across regions with small
/// limits, and long transactions past the GC window.
#[test]
fn rows_seeds_pass_the_checker() {
    let (mut committed, mut too_old, mut scans, mut deletes) = (0, 0, 0, 0);
    for seed in seeds(150) {
        let r = run_and_check(SimConfig::rows(seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: a fault-free run must finish");
        committed += r.committed;
        too_old += r.too_old;
        for t in &r.history.txns {
            if t.outcome == meridian_checker::Outcome::Committed {
                scans += t.scans.len();
                deletes += t.deletes.len();
            }
        }
    }
    assert!(committed > 0 && scans > 0 && deletes > 0);
    assert!(too_old > 0, "long transactions must hit the GC safe point");
}

/// Swarm seeds whose schedules reach a reconfiguration corner that leaves
/// the run stuck without its rule (the checker passes them; only liveness
/// is at stake), each with the interleaving it reaches:
/// - 10: a backup that has not yet applied the configuration refuses a
///   COMMIT-BACKUP; a client that gave the decided transaction up then
///   would leave its locks held for good once that configuration commits.
/// - 304: a node a configuration removed, unaware of it, is probed;
///   unless removed nodes answer probes as empty, the prober finds no
///   majority (as when the CM adds a joining node, CASes and crashes
///   before the node hears: only two of four remain).
/// - 437: n0, CM of 2, and n1 probe at
///   once across a one-way partition; n1's configuration 3 removes n0 and
///   wins the CAS, and n0 then CASes a successor of 3 that adds itself back
///   as CM. n2, in 3, refuses that NEW-CONFIG as a non-member's, and n1's 3
///   is superseded, so nothing would commit again. A prober removed by the
///   stored configuration stops (`Removed`) and joins again.
#[test]
fn swarm_seeds_with_rare_liveness_windows_finish() {
    for (seed, mark) in [
        (
            10,
            "a lagging participant's refusal of a decided commit is resent",
        ),
        (304, "a removed node unaware of it answers a probe as empty"),
    ] {
        reaches(mark, SimConfig::swarm(seed), true);
    }
    // No swarm seed of 0–4999 reaches the probe-end check for 437's
    // window any more (a lost CAS or a read of the stored configuration
    // removes the node first); it stays a sweep seed.
    assert_finishes(SimConfig::swarm(437));
}

/// The CI subset of the swarm: a random mix of faults per seed.
#[test]
fn swarm_seeds_pass_the_checker() {
    let (mut crashes, mut dropped, mut unknown) = (0, 0, 0);
    let (mut reconfigured, mut recovered) = (0u64, 0u64);
    for seed in seeds(400) {
        let r = run_and_check(SimConfig::swarm(seed)).unwrap_or_else(|e| panic!("{e}"));
        // Liveness after healing: every transient fault heals, a client
        // that gives up releases its locks, node
        // crashes are survived by reconfiguration, recovery and rejoining
        // (FaRM §5), and a crashed client's lease expires and the
        // configuration renewal recovers its transactions, so every client
        // finishes — unless more than f replicas of a region failed
        // (beyond the fault model). For every fault mix: partitions,
        // pauses and lossy networks included (seeds 0–999 all finish).
        if !r.region_lost {
            assert!(
                !r.timed_out,
                "seed {seed} ({}): stuck after healing",
                r.faults.describe()
            );
        }
        if r.faults.node_crashes {
            reconfigured += u64::from(r.last_config > 1);
            recovered += r.recovered.0 + r.recovered.1;
        }
        crashes += r.crashes;
        dropped += r.dropped;
        unknown += r.unknown;
    }
    assert!(crashes > 0 && dropped > 0, "the swarm must inject faults");
    assert!(unknown > 0, "some commits must end with an unknown outcome");
    assert!(
        reconfigured > 0,
        "node crashes must lead to new configurations"
    );
    assert!(recovered > 0, "recovery must decide some transactions");
}

/// Swarm seeds whose schedules reach a safety hazard, each with the
/// interleaving and the rule that keeps it safe:
/// - 350 and 545: a COMMIT-PRIMARY ack rejected by a restarted node must not leave
///   the other ack RPCs of a forgotten transaction behind (ClientProcess
///   invariant).
/// - 780: the CM (the clock master) is cut off, and a client that has not
///   heard of the new configuration still holds the old master's samples;
///   timestamps from them fall below the new master's fast-forwarded time,
///   so a read would miss a write that completed before it began
///   (strict-serializability violation). Samples expire
///   (`clock.max_sample_age_us`) and the new master waits for them.
/// - 1379: safety across reconfiguration.
/// - 155, 331 with node pauses added: pauses combined with crashes.
/// - 956 (one-way partition, pauses, drift): a member that never synced
///   with the first master (paused) reports no clock bound, and the old
///   master could serve time up to a bound its successor raised, so the new
///   master would start below times the old one handed out (global-time
///   oracle). Bounds carry the CM stored with them, and a replaced master
///   ignores its successor's.
/// - 401 (whole-cluster crash, disk, node crashes): a node that rejoins
///   empty gets a participant with its journal, so what it does afterwards
///   reaches the disk log; without it the whole-cluster restart restores
///   its stale replicas and a committed write vanishes (G-single). The
///   schedule depends on the simulated clocks keeping the drift bound
///   between any two clocks.
#[test]
fn regression_seeds_pass_the_checker() {
    for (seed, mark) in [
        (350, "a forgotten commit's outstanding ack RPCs go with it"),
        (545, "a forgotten commit's outstanding ack RPCs go with it"),
        (780, "a client's clock samples expire"),
        (
            956,
            "a replaced clock master ignores its successor's time bound",
        ),
        (401, "a reset participant keeps journaling"),
    ] {
        reaches(mark, SimConfig::swarm(seed), false);
    }
    // Sweep seeds that once failed, with no single window to mark.
    for seed in [1379, 424] {
        run_and_check(SimConfig::swarm(seed)).unwrap_or_else(|e| panic!("{e}"));
    }
    for seed in [155, 331] {
        let mut cfg = SimConfig::swarm(seed);
        cfg.faults.node_pauses = true;
        run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// `make`'s runs, fault-free (must finish and commit) and with the swarm's
/// faults (must keep every invariant, and finish when nothing crashes).
fn unrecorded_runs(make: fn(u64) -> SimConfig) {
    for seed in seeds(20) {
        let r = run_and_check(make(seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: a fault-free run must finish");
        assert!(r.committed > 0, "seed {seed}: nothing committed");
        let cfg = SimConfig {
            faults: Faults::swarm(seed),
            ..make(seed)
        };
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        if !r.faults.node_crashes && !r.faults.client_crashes {
            assert!(!r.timed_out, "seed {seed} ({}): stuck", r.faults.describe());
        }
    }
}

/// TATP runs unchanged through the client API in the simulator.
#[test]
fn tatp_runs_in_the_simulator_with_and_without_faults() {
    unrecorded_runs(SimConfig::tatp);
}

/// YCSB (workload A) runs unchanged through the client API in the
/// simulator, like TATP.
#[test]
fn ycsb_runs_in_the_simulator_with_and_without_faults() {
    unrecorded_runs(SimConfig::ycsb);
}

/// Liveness: these swarm seeds reach reconfiguration interleavings that
/// leave the run stuck without their rules, and must finish.
/// - 9: a member's lease runs out at the CM (it
///   answered another node's probe) just before its ACK comes, and the CM
///   abandons its proposal; the probe that follows finds a minority, and
///   the CM must not sit on a configuration nobody will commit.
/// - 265: a member comes back without its disk
///   state; the restored CM suspects it at its JOIN instead of waiting
///   `formation_grace_ms` (2 s) for its lease.
/// - 2 and 4: the CM suspects a member
///   cut off while it resends NEW-CONFIG-COMMIT; the member, back after the
///   partition heals, waits for the commit, and recovery with it, so the CM
///   resends an unfinished commit until acknowledged or superseded.
/// - 27: two backup CMs that cannot
///   reach a majority probe each other every lease; each answer pauses the
///   answerer's renewals with the live CM, which then suspects them too. A
///   prober without a majority sends PROBE-FAILED and the answerers renew at
///   once.
#[test]
fn liveness_regression_seeds_finish() {
    for (seed, mark) in [
        (9, "a CM abandons a proposal members never acknowledged"),
        (265, "a member's JOIN forfeits its lease grace at the CM"),
        (2, "a CM resends an unfinished commit after a probe"),
        (4, "a CM resends an unfinished commit after a probe"),
        (27, "a PROBE-FAILED from every prober resumes renewals"),
    ] {
        reaches(mark, SimConfig::swarm(seed), true);
    }
}

/// Client leases (FaRM §5.1): clients crash in the
/// middle of commits, holding locks. Each crashed client's lease expires at
/// the CM, which renews the configuration; recovery decides the client's
/// transactions the same way everywhere (the checker sees all or nothing)
/// and releases their locks, so the surviving clients finish. Without the
/// client lease the locks stay held and the run hits the time limit.
#[test]
fn a_crashed_clients_locks_are_released_and_its_commits_decided() {
    let (mut renewals, mut crashes) = (0, 0);
    for seed in seeds(12) {
        let mut cfg = SimConfig::bank(seed);
        cfg.faults = Faults {
            client_crashes: true,
            ..Faults::none()
        };
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !r.timed_out,
            "seed {seed}: stuck after client crashes:\n{}",
            r.stuck.join("\n")
        );
        crashes += r.crashes;
        renewals += r
            .node_events
            .iter()
            .filter(|(_, _, e)| matches!(e, NodeEvent::ClientSuspect(_)))
            .count();
    }
    assert!(crashes > 0, "no client crashed");
    assert!(renewals > 0, "no client lease ever expired");
}

/// A node whose clock runs 600 ppm off the master's (inside ε = 1000 ppm,
/// so safe, but past `clock.max_rate_ppm` = 200) reports itself, the CM
/// removes it, it does not rejoin, and the run still commits and checks.
/// No other node, with clocks within 50 ppm, is ever reported.
#[test]
fn a_node_whose_clock_drifts_past_the_rate_limit_is_reported_and_removed() {
    for (seed, ppm) in [(1, 600), (2, -600)] {
        let mut cfg = SimConfig::bank(seed);
        cfg.nodes = 5;
        // Long enough for the CM to act on the report (about half a
        // second after it): with reads waiting for locks instead of
        // aborting, 400 transactions per client can end the run before that.
        cfg.txns_per_client = 800;
        cfg.time_limit_ns = 8_000_000_000;
        cfg.max_rate_ppm = 200;
        cfg.drifting_node = Some((3, ppm));
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: stuck:\n{}", r.stuck.join("\n"));
        let reported: Vec<(u32, NodeId)> = r
            .node_events
            .iter()
            .filter_map(|(_, at, e)| match e {
                NodeEvent::ClockRateExceeded { node, ppm: got } => {
                    // A clock `ppm` fast sees the master `ppm` slow.
                    assert!(
                        (got + ppm).abs() < 100,
                        "measured {got} ppm for a clock {ppm} off"
                    );
                    Some((*at, *node))
                }
                _ => None,
            })
            .collect();
        assert!(
            reported.iter().any(|(at, n)| *at == 3 && *n == NodeId(3)),
            "seed {seed}: node 3 never reported itself: {reported:?}"
        );
        assert!(
            reported.iter().all(|(_, n)| *n == NodeId(3)),
            "seed {seed}: a node within the limit was reported: {reported:?}"
        );
        let removed = r
            .node_events
            .iter()
            .any(|(_, at, e)| *at == 3 && matches!(e, NodeEvent::Removed(_)));
        assert!(removed, "seed {seed}: node 3 was not removed");
    }
}

/// FaRM §5.2 and §5.4: a node in the address book but outside the
/// configuration asks to join while the bank workload runs; the CM adds it
/// and then moves backup replicas onto it one paced step at a time, each
/// filled by data recovery before the next. The checker passes and the run
/// ends clean (the newest configuration's replicas equal their primaries).
#[test]
fn a_spare_node_joins_and_regions_rebalance_onto_it() {
    for seed in [1, 2] {
        let mut cfg = SimConfig::bank(seed);
        cfg.nodes = 4;
        cfg.spare_nodes = 1;
        cfg.txns_per_client = 200;
        cfg.time_limit_ns = 6_000_000_000;
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: stuck:\n{}", r.stuck.join("\n"));
        let moves = r
            .node_events
            .iter()
            .filter(|(_, _, e)| matches!(e, NodeEvent::Rebalance { .. }))
            .count();
        let filled_at_3 = r
            .node_events
            .iter()
            .any(|(_, at, e)| *at == 3 && matches!(e, NodeEvent::DataRecovered(_)));
        assert!(moves >= 2, "seed {seed}: {moves} rebalancing moves");
        assert!(filled_at_3, "seed {seed}: the spare never filled a replica");
        // Each finished move takes a replica off a node, which hands it
        // out to be freed (`NodeEffect::Discard`) instead of freeing it in
        // place.
        let dropped = r
            .node_events
            .iter()
            .filter(|(_, _, e)| matches!(e, NodeEvent::Rebalance { step, .. } if step.finished))
            .count() as u64;
        assert!(dropped > 0, "seed {seed}: no move finished");
        assert!(
            r.discarded_replicas >= dropped,
            "seed {seed}: {dropped} replicas moved away, {} discarded",
            r.discarded_replicas
        );
    }
}

/// Each fault alone, so a failure points at one fault.
#[test]
fn each_fault_alone_passes_the_checker() {
    let base = Faults::none();
    let singles = [
        Faults {
            loss_permille: 30,
            ..base
        },
        Faults {
            duplicate_permille: 30,
            ..base
        },
        Faults {
            long_delay_permille: 20,
            ..base
        },
        Faults {
            partitions: true,
            ..base
        },
        Faults {
            one_way_partitions: true,
            ..base
        },
        Faults {
            node_crashes: true,
            ..base
        },
        Faults {
            client_crashes: true,
            ..base
        },
        Faults {
            stall_permille: 100,
            ..base
        },
        Faults {
            node_pauses: true,
            ..base
        },
        Faults {
            wide_drift: true,
            ..base
        },
    ];
    for faults in singles {
        for seed in seeds(15) {
            let cfg = SimConfig {
                faults,
                ..SimConfig::bank(seed)
            };
            run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn a_seed_reproduces_exactly() {
    for cfg in [
        SimConfig::bank(42),
        SimConfig::swarm(42),
        SimConfig::swarm(7),
    ] {
        let a = Sim::new(cfg.clone()).run();
        let b = Sim::new(cfg).run();
        assert_eq!(a.messages, b.messages);
        assert_eq!(a.dropped, b.dropped);
        assert_eq!(a.end_ns, b.end_ns);
        assert_eq!(a.digest, b.digest, "one seed, one history digest");
        assert_eq!(
            meridian_checker::to_edn(&a.history),
            meridian_checker::to_edn(&b.history)
        );
    }
    let a = Sim::new(SimConfig::bank(42)).run();
    let c = Sim::new(SimConfig::bank(43)).run();
    assert_ne!(a.end_ns, c.end_ns, "different seeds should differ");
    assert_ne!(a.digest, c.digest, "different seeds' digests differ");
}

/// A bank run with disk durability in which every node crashes at the
/// same instant and restarts from its log.
fn cluster_crash_bank(seed: u64) -> SimConfig {
    SimConfig {
        faults: Faults {
            disk: true,
            cluster_crash: true,
            ..Faults::none()
        },
        // Long enough that the crash (drawn in the first 200 ms) comes
        // before the workload ends: with fsyncs only on demand, 60
        // transactions per client finish first on some seeds.
        txns_per_client: 120,
        ..SimConfig::bank(seed)
    }
}

/// `cfg` with one-read transactions at `read_ts` instead of single reads
/// (`SimConfig::single_reads` off): the schedules of register, rows and
/// swarm seeds some seed tests take as their inputs.
fn before_single_reads(cfg: SimConfig) -> SimConfig {
    SimConfig {
        single_reads: false,
        ..cfg
    }
}

/// `cfg` with the early COMMIT-PRIMARY answer
/// (`report_after_primary_fsync = false`, opt-in; the nodes' default is
/// FaRM's rule): the schedules some seed tests take as their inputs, and
/// the setting their assertions are about.
fn early_answer(cfg: SimConfig) -> SimConfig {
    SimConfig {
        report_after_primary_fsync: false,
        ..cfg
    }
}

/// Disk durability: every node crashes at the same instant and
/// restarts from its write-ahead log and checkpoint. The restarted CM
/// renews the configuration, every in-flight transaction recovers, and the
/// run finishes; the checker finds no lost acknowledged commit (a lost one
/// breaks the bank audits and the version order).
#[test]
fn a_whole_cluster_crash_loses_no_acknowledged_commit() {
    let (mut crashes, mut committed_after) = (0u64, 0u64);
    for seed in seeds(15) {
        let cfg = cluster_crash_bank(seed);
        let nodes = cfg.nodes as u64;
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !r.timed_out,
            "seed {seed}: stuck after the cluster restarted"
        );
        assert_eq!(r.crashes, nodes, "seed {seed}: every node crashes once");
        assert!(
            r.last_config > 1,
            "seed {seed}: the restarted CM renews its configuration"
        );
        crashes += r.crashes;
        committed_after += r.committed;
    }
    assert!(crashes > 0 && committed_after > 0);
}

/// With the early COMMIT-PRIMARY answer (`report_after_primary_fsync =
/// false`, opt-in) a plain whole-cluster crash, every node restarting
/// from its disk into the same configuration, loses nothing either: the
/// backups' COMMIT-BACKUP records decide the commits the primaries'
/// crashes took (`the_early_commit_primary_answer_can_lose_a_commit` shows
/// what it does not survive).
#[test]
fn the_early_answer_survives_a_plain_whole_cluster_crash() {
    for seed in seeds(8) {
        let r =
            run_and_check(early_answer(cluster_crash_bank(seed))).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.timed_out, "seed {seed}: stuck");
    }
}

/// The simulator loses what a node had not fsynced when it crashes, so
/// it can see a durability rule broken: with the ACKs of log records sent
/// before their fsync, a whole-cluster crash loses acknowledged commits
/// and the checker (bank audits, version order) says so. The same seeds
/// with the real rule pass (`a_whole_cluster_crash_loses_no_acknowledged_commit`).
#[test]
fn acks_sent_before_their_fsync_lose_commits_the_checker_sees() {
    // Only some seeds' crash instant falls where an acknowledged commit is
    // not yet on disk under the broken rule (about 2 in 100 with reads
    // waiting at the nodes), and which ones moves with any change to the
    // processes' timing.
    let caught = cluster_crashes_caught(cluster_crash_bank, Bug::AckBeforeFsync);
    assert!(
        !caught.is_empty(),
        "no seed caught ACKs that leave before their fsync"
    );
}

/// Seeds of 0–299 whose whole-cluster-crash bank run, with `bug`
/// injected, fails the checker; searched until two are caught. The bug
/// must have been hit in each, and the real rule must pass each of them
/// (panics otherwise).
fn cluster_crashes_caught(base: impl Fn(u64) -> SimConfig, bug: Bug) -> Vec<u64> {
    let mut caught = Vec::new();
    for seed in 0..300u64 {
        let (cfg, bugs) = inject(bug, base(seed));
        if run_and_check(cfg).is_err() {
            assert_hit(&bugs, bug);
            run_and_check(base(seed)).unwrap_or_else(|e| panic!("{e}"));
            caught.push(seed);
            if caught.len() == 2 {
                break;
            }
        }
    }
    caught
}

/// A primary answers COMMIT-PRIMARY `Installed` before its fsync and
/// `Ack` after it; coordinators truncate only after the `Ack`. A backup
/// applies a transaction's writes at TRUNCATE, so truncating at
/// `Installed` can leave a backup's apply durable while a whole-cluster
/// crash takes the primary's install: the primary then serves the old
/// value. The simulator must see that: with the `Installed` answer taken
/// as the ACK, some seed fails the checker; the real rule passes it.
#[test]
fn truncating_before_the_primarys_fsync_loses_writes_the_checker_sees() {
    let caught =
        cluster_crashes_caught(|s| early_answer(cluster_crash_bank(s)), Bug::InstalledIsAck);
    assert!(
        !caught.is_empty(),
        "no seed caught a truncation before the primary's fsync"
    );
}

/// FaRMv2 §4.3 as the bench sees it: when a CM crash moves the clock
/// master, members report `ClockDisabled` and then `ClockEnabled` (the
/// markers the failover timeline measures the disabled time from).
#[test]
fn a_cm_change_disables_clocks_and_enables_them_again() {
    let (mut disabled, mut enabled) = (0, 0);
    for seed in seeds(10) {
        let mut cfg = SimConfig::bank(seed);
        cfg.faults = Faults {
            node_crashes: true,
            ..Faults::none()
        };
        let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
        if r.timed_out {
            continue;
        }
        // Per node, in time order: every disable that is not the node's
        // last clock event is followed by an enable, and a run that ends
        // has enabled clocks again somewhere after any disable.
        let mut last: BTreeMap<u32, bool> = BTreeMap::new();
        for (_, node, e) in &r.node_events {
            match e {
                NodeEvent::ClockDisabled(_) => {
                    disabled += 1;
                    last.insert(*node, true);
                }
                NodeEvent::ClockEnabled(_) => {
                    enabled += 1;
                    assert_eq!(
                        last.insert(*node, false),
                        Some(true),
                        "seed {seed}: node {node} enabled a clock it had not disabled"
                    );
                }
                _ => {}
            }
        }
        if last.values().any(|d| *d) {
            assert!(
                last.values().any(|d| !*d),
                "seed {seed}: clocks disabled and never enabled again: {last:?}"
            );
        }
    }
    assert!(disabled > 0, "no CM change disabled a clock");
    assert!(enabled > 0, "no clock was enabled again");
}

/// Clients' clock syncs are answered by the master's lease thread from a
/// view its process publishes and withdraws (`node::answer_clock_sync`,
/// FaRMv2 §4.3). The real rule passes these swarm seeds (they are in
/// `swarm_seeds_pass_the_checker` too); a lease thread that keeps
/// answering from the last view after the process withdrew it (a CM
/// change, a disabled clock), without its lease majority or time bound,
/// hands out times below the new master's: the simulator sees global time
/// go back, and the checker sees the anomalies (missing rows,
/// strict-serializability and opacity cycles).
#[test]
fn a_master_clock_kept_past_its_withdrawal_is_caught() {
    let mut caught = Vec::new();
    // Every master time a lease thread or a process hands out is checked
    // against the largest handed out before it (`global time went back`):
    // a kept view answers below the new master's times. Which seeds catch
    // it moves with the processes' timing: the last known ones first, then
    // a search. The real rule must pass the seed that does.
    for seed in [1u64, 2, 3].into_iter().chain(0..400) {
        let (broken, bugs) = inject(Bug::MasterClockKept, SimConfig::swarm(seed));
        if run_and_check(broken).is_err() {
            assert_hit(&bugs, Bug::MasterClockKept);
            run_and_check(SimConfig::swarm(seed)).unwrap_or_else(|e| panic!("{e}"));
            caught.push(seed);
            break;
        }
    }
    assert!(
        !caught.is_empty(),
        "no seed caught a master clock answering past its withdrawal"
    );
}

/// The `read_ts` wait at the nodes (`clock.reads_wait_at_server`, the
/// default) passes; a deliberately broken variant in which the
/// clients leave the wait to the nodes but the nodes serve at once (nobody
/// waits out `read_ts`'s uncertainty, FaRMv2 §4.1 ignored) is caught on
/// every one of these seeds: the time oracle sees nodes serve reads before
/// global time passed `read_ts`.
#[test]
fn reads_served_before_read_ts_passed_are_caught() {
    let mut caught = Vec::new();
    for seed in [2u64, 3, 41] {
        run_and_check(SimConfig::swarm(seed)).unwrap_or_else(|e| panic!("{e}"));
        let (broken, bugs) = inject(Bug::ReadsUnwaited, SimConfig::swarm(seed));
        if let Err(e) = run_and_check(broken) {
            assert_hit(&bugs, Bug::ReadsUnwaited);
            caught.push((seed, e.to_string()));
        }
    }
    assert!(
        caught.len() == 3,
        "a read served before its read_ts passed went unseen: caught only {caught:?}"
    );
    assert!(
        caught
            .iter()
            .any(|(_, e)| e.contains("served a read at read_ts")),
        "the time oracle did not see it: {caught:?}"
    );
}

/// Reads that meet a lock wait at the primary for it to go
/// (`limits.read_lock_wait_us`, off by default, on here) instead of
/// aborting at once (FaRMv2 §4.7). A deliberately broken
/// wait that serves the read past the lock at its next try (as if the lock
/// had gone) misses lock holders that commit at or below the read's
/// `read_ts`; the checker sees the stale reads. Which seeds catch it moves
/// with timing: the last known ones first, then a search. The real rule
/// must pass the seed that does.
#[test]
fn lock_waits_that_read_past_the_lock_are_caught() {
    let mut caught = Vec::new();
    let waiting = |seed| SimConfig {
        read_lock_wait_us: 5_000,
        ..SimConfig::register(seed)
    };
    for seed in [0u64].into_iter().chain(1..200) {
        let (broken, bugs) = inject(Bug::LockWaitsReadPastLocks, waiting(seed));
        if let Err(e) = run_and_check(broken) {
            assert_hit(&bugs, Bug::LockWaitsReadPastLocks);
            run_and_check(waiting(seed)).unwrap_or_else(|e| panic!("{e}"));
            caught.push((seed, e.to_string()));
            break;
        }
    }
    assert!(
        caught
            .iter()
            .any(|(_, e)| e.contains("missing row") || e.contains("violation")),
        "no seed's checker caught reads served past a lock they waited for: {caught:?}"
    );
}

/// A primary holds a key for
/// lock recovery of a transaction it has committed; the recovery's
/// coordinator leaves before deciding it, and the client's TRUNCATE,
/// arriving in the next configuration, drops the records. A hold left in
/// place then has no record for any later configuration to recover, and
/// every read of the key would wait 5 ms and come back TooOld. A truncation
/// releases the holds of regions whose writes are in place
/// (`Participant::truncate`). Swarm seeds 32 and 39 reach the release;
/// `truncation_releases_the_recovery_holds_of_a_transaction_in_place`
/// scripts it in the participant.
#[test]
fn a_truncation_releases_lock_recovery_holds_on_installed_regions() {
    for seed in [32, 39] {
        reaches(
            "a truncation releases lock recovery's holds on installed regions",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// A prober CASing a proposal c+1 over configuration c (learned from a
/// failed CAS) receives c's NEW-CONFIG from its CM meanwhile. Applying it
/// would drop the attempt while its CAS still succeeds, leaving the
/// service with a c+1 that no node applies: every later raise of the CM's
/// time bound would be refused and its clock, the clock master's, would
/// stop serving, while the members, renewing their leases with a live CM,
/// never suspect it. A prober whose
/// CAS is in flight answers an older configuration's NEW-CONFIG only once
/// the CAS is decided (the CM resends). Keeping the attempt alive while
/// acknowledging the NEW-CONFIG is no alternative: it breaks strict
/// serializability (a lease to c's CM that the new CM does not outwait).
/// Swarm seeds 1286 and 4244 reach the deferral (1286 is the only one of
/// 0–3,999);
/// `a_prober_casing_over_a_configuration_defers_its_new_config` scripts it
/// in the reconfiguration engine.
#[test]
fn a_cas_in_flight_defers_an_older_new_config_and_the_run_finishes() {
    for seed in [1286, 4244] {
        reaches(
            "a CAS in flight defers an older NEW-CONFIG",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// Safety, swarm seed 3935: a committed insert must not vanish. T302
/// (client 5) commits in configuration 2, writing regions 3 and 5; region
/// 3's backup n4 holds its COMMIT-BACKUP record. n4 leads region 3 from
/// configuration 3 on, and n2 joins it as a new replica filled by data
/// recovery from n4. A fill that finished before n4's lock recovery reached
/// T302 would leave n2 marked ready without T302's record; promoted once n4
/// is removed, n2 would vote unknown, and recovery would abort a
/// transaction the client was told committed. FaRM §5.3 step 5
/// (REPLICATE-TX-STATE: after lock recovery the primary sends the replicas
/// without a recovering transaction's record the region's record and
/// evidence), and serving a new replica's FETCH only after lock recovery
/// and step 5 reached it, keep the insert. (The run ends with the region
/// lost: n4 goes before n2 is filled, beyond the fault model.)
#[test]
fn a_new_replica_is_filled_only_after_lock_recovery_and_step_5() {
    reaches(
        "a FETCH waits for lock recovery and step 5",
        SimConfig::swarm(3935),
        false,
    );
}

/// Liveness, swarm seed 3234, with the read lock wait on (5 ms) and the
/// simulator's GC window of 5 ms: reads that wait for a lock held through a
/// recovery come back `TooOld`, and with long recoveries the run commits
/// almost nothing against many aborts. Recoveries short enough keep this
/// run finishing; the hazard itself remains, since a read that waits for a
/// lock longer than the GC window still aborts TooOld.
#[test]
fn reads_waiting_on_locks_held_through_a_recovery_still_finish() {
    assert_finishes(SimConfig::swarm(3234));
}

/// Safety of recovery's key holds and region blocks:
/// - 4284 and 4779 (disk, whole-cluster crash; without the rule the bank
///   totals end at 764 and 828): a primary with no record of a recovering
///   transaction (its LOCK lost in a restart, or promoted without the
///   COMMIT-BACKUP) holds the transaction's keys in two regions from other
///   replicas' reports. If a COMMIT-RECOVERY for one region released the
///   holds of both, a read of the other region's key would see the old
///   balance before that region's COMMIT-RECOVERY installs the write below
///   the reader's `read_ts`, and the reader's transfer would commit over it.
///   A COMMIT-RECOVERY releases only the holds of regions whose writes it
///   put in place, and lock recovery holds a region's keys unless that
///   region's writes are in place (`Participant::commit_recovery`,
///   `recover_locks`).
/// - 4639 (G-single-realtime without the rule): a backup promoted by a
///   configuration that never commits (no lock recovery runs) is unblocked
///   by the next configuration, which keeps the placement and its
///   LastReplicaChange, and would serve a read from its old copy, missing a
///   committed write. A region stays blocked until its lock recovery
///   (`Participant::reconfigure`).
/// - 3691: a committed row read as absent when step 5 holds without the two
///   rules above.
///
/// No swarm seed of 0–4999 reaches the first window any more;
/// `commit_recovery_of_one_region_keeps_the_holds_of_another` and
/// `lock_recovery_after_another_regions_decision_still_holds` script it in
/// the participant (the first asserts its mark). These seeds stay as sweep
/// seeds for the second.
#[test]
fn recovery_unblocks_a_region_only_once_its_writes_are_in_place() {
    for seed in [4284, 4779, 4639, 3691] {
        run_and_check(SimConfig::swarm(seed)).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Liveness, with data recovery waiting for lock recovery: new replicas
/// finish filling regions and report ready, the CM records them complete,
/// and the whole cluster crashes. Restored in the configuration that lists them as filling, they
/// would refuse every later NEW-CONFIG (it gives them complete replicas
/// they did not have "when restored"). The participant journals a finished
/// fill (`Participant::mark_filled`), which counts as a complete replica.
/// Swarm seeds 7, 12 and 15 reach it.
#[test]
fn a_journaled_fill_counts_as_complete_after_a_cluster_crash() {
    for seed in [7, 12, 15] {
        reaches(
            "a restored node counts its journaled fills complete",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// Liveness: a prober's CAS of configuration c+1 (with itself as CM)
/// wins, its answer is lost, and it crashes and is restored in c. If it
/// hosts no coordination replica, on its own it never learns that the
/// service names it the CM of c+1, and nobody else can replace c+1 (the
/// old CM is removed by it, and the survivors may be a minority without
/// the restored, silent nodes). A restored node without a replica reads
/// the service (`CoordMessage::Read`) and renews the configuration it won
/// (`renew_unapplied_proposal`). Swarm seed 1187 reaches the renewal
/// (the only one of 0–3,999).
#[test]
fn a_restored_node_without_a_coord_replica_renews_the_cas_it_won() {
    for seed in [1187] {
        reaches(
            "a restored node renews a CAS it won and never applied",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// Swarm seed 9253 (a node paused past its lease, one-way partitions,
/// crashes): a transaction commits and is truncated at its regions'
/// primary, whose backup of one region misses the TRUNCATE (it comes with
/// the older configuration). The primary's other region is then copied to
/// a new replica, which the next configuration makes primary. Asked for its
/// vote, a new primary with no record and no knowledge of the truncation
/// would vote `unknown`; recovery would abort the committed transaction,
/// and a later read would miss its write in one region while the other
/// region keeps it (an opacity violation). A copy carries its source's
/// finished ids (`FinishedIds` on the last chunk,
/// `Participant::learn_finished`), so the new primary votes `truncated` as
/// its source would (FaRM §5.3 step 6).
#[test]
fn a_copied_region_votes_truncated_as_its_source_would() {
    reaches(
        "a filled replica learns its source's truncations",
        SimConfig::swarm(9253),
        false,
    );
}

/// Blind writes (keys written without being read) are locked without
/// LockAtTs's version check (`TxnRequest::LockBlind`), and a transaction
/// whose only write is one blind write waits at the primary for a lock it
/// meets (`limits.blind_lock_wait_us`) instead of aborting. The register
/// workload (reads, then writes of fresh ids, some to keys it read, some
/// blind) reaches both on contended keys; the checker must pass every
/// seed, and the waits must have happened.
#[test]
fn blind_writes_lock_unchecked_and_wait_and_the_checker_passes() {
    let mut waited = 0;
    for seed in 0..12 {
        let r = run_and_check(SimConfig::register(seed)).unwrap_or_else(|e| panic!("{e}"));
        waited += r.blind_locks_waited;
    }
    assert!(
        waited > 0,
        "no blind LOCK waited for a lock in 12 register runs: {waited}"
    );
}

/// The broken variant: every LOCK skips the version check, also for keys
/// the transaction read (`Bug::LocksUnchecked`). A transfer
/// then overwrites a balance it never saw; the bank audit or the checker
/// must catch it, and the real rule must pass the seed that does.
#[test]
fn locks_that_skip_the_version_check_for_read_keys_are_caught() {
    let mut caught = None;
    for seed in 0..40 {
        let (broken, bugs) = inject(Bug::LocksUnchecked, SimConfig::bank(seed));
        if let Err(e) = run_and_check(broken) {
            assert_hit(&bugs, Bug::LocksUnchecked);
            run_and_check(SimConfig::bank(seed)).unwrap_or_else(|e| panic!("{e}"));
            caught = Some((seed, e));
            break;
        }
    }
    let (seed, e) = caught.expect("no seed caught LOCKs that skip the version check");
    assert!(
        e.contains("audit") || e.contains("violation") || e.contains("total"),
        "seed {seed}: {e}"
    );
}

/// `write_ts`'s uncertainty wait at the nodes
/// (`clock.writes_wait_at_server`, the default) passes; broken variants in
/// which the clients leave the wait to the nodes but the nodes handle the
/// held requests at once (nobody waits it out, FaRMv2 §7.3) are caught.
/// Bank transfers validate nothing (they write every key they read), so
/// their COMMIT-BACKUPs carry the wait: with every held request handled at
/// once, the time oracle sees it at the nodes and at the clients told of
/// the commits. Register transactions that read a key they do not write
/// send VALIDATEs, which carry the wait instead: with only those handled
/// at once, the suite must catch that too. The real rule must pass every
/// seed that catches a variant.
#[test]
fn commits_reported_before_write_ts_passed_are_caught() {
    let first_caught = |bug: Bug, real: fn(u64) -> SimConfig| {
        (0..20).find_map(|seed| {
            let (broken, bugs) = inject(bug, real(seed));
            let e = run_and_check(broken).err()?;
            assert_hit(&bugs, bug);
            run_and_check(real(seed)).unwrap_or_else(|e| panic!("{e}"));
            Some(format!("seed {seed}: {e}"))
        })
    };
    let all = first_caught(Bug::WritesUnwaited, SimConfig::bank)
        .expect("no bank seed caught held requests handled at once");
    for what in ["handled a held COMMIT-BACKUP", "committed at write_ts"] {
        assert!(all.contains(what), "not caught as \"{what}\": {all}");
    }
    let validates = first_caught(Bug::ValidatesUnwaited, SimConfig::register)
        .expect("no register seed caught held VALIDATEs handled at once");
    println!("held VALIDATEs handled at once: {validates}");
    assert!(
        [
            "handled a held VALIDATE",
            "committed at write_ts",
            "violation",
            "not after head"
        ]
        .iter()
        .any(|w| validates.contains(w)),
        "caught, but not by a check of time or isolation: {validates}"
    );
}

/// Liveness, swarm seed 10499: n0, CM of configuration 2 behind a one-way
/// partition, is removed by 3 and never learns it; a client whose
/// transaction from configuration 1 is decided keeps resending its
/// COMMIT-PRIMARY to n0, which refuses each with `ConfigMismatch` (it
/// lags). Each refusal gives its attempt back, at most `rpc_attempts` times
/// per request, and every resend is a new request, so a count starting at
/// 0 per resend would never end the resends. The count carries over
/// (`ClientProcess::retry`), and the commit ends indeterminate for recovery
/// to decide. n0 itself loses its own CAS to the configuration that removes
/// it; staying a CM whose configuration waits for its commit, it would
/// never rejoin, so a lost CAS to a configuration without the node reports
/// it removed, and n0 joins again.
#[test]
fn resends_refused_as_mismatched_end_and_the_removed_cm_rejoins() {
    reaches(
        "a CAS lost to a configuration without this node removes it",
        SimConfig::swarm(10499),
        true,
    );
}

/// A whole-cluster crash in memory mode loses every region (a fault mix
/// the swarm never draws: `Faults::normalised`). Every node comes back
/// empty and outside every configuration, so no member is left to probe
/// and no node reports the loss: without the simulator's oracle
/// (`Sim::last_copy_crashed`) the run would end "stuck", which a sweep
/// reports as a liveness bug. The oracle sees the crash take each region's
/// last copy and counts the run as lost, beyond the fault model. (A
/// configuration of one member whose node crashes is the same case.)
#[test]
fn a_memory_mode_cluster_crash_counts_as_lost() {
    let mut cfg = SimConfig::bank(3);
    cfg.faults = Faults {
        cluster_crash: true,
        ..Faults::none()
    };
    let r = run_and_check(cfg).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        r.timed_out && r.region_lost,
        "timed out {} lost {}: every copy of every region crashed",
        r.timed_out,
        r.region_lost
    );
}

/// Liveness: a CM waiting for a member's ACK behind a partition gives up
/// on it and probes; the probe has its majority, but the CAS gets no
/// answer (the CM is cut off from the service's leader) and the CAS client
/// gives up. A
/// prober that dropped the attempt would become a plain member again and,
/// with its own proposal abandoned for the probe, wait for a commit nobody
/// sends, suspecting no one. A CAS without an answer is asked again a lease
/// later. Swarm seeds 881, 1154 and 2950 reach it (6 of 0–3,999); the
/// reconfiguration engine's `a_cas_without_an_answer_is_asked_again`
/// scripts it.
#[test]
fn an_unanswered_cas_is_asked_again_a_lease_later() {
    for seed in [881, 1154, 2950] {
        reaches(
            "an unanswered CAS is asked again a lease later",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// Liveness, swarm seed 26030: n0, CM of configuration 2 = {0,1,3,4},
/// stores 3 = {0,3,4} and crashes before any NEW-CONFIG goes out; it comes
/// back empty. n1 learns from the service that 3 removes it and answers no
/// probe, so n3 and n4 are two of 2's four members, never a majority, and
/// without a CAS they never learn of 3: nothing would commit. A probe
/// without a majority reads the stored configuration, and the next probe is
/// over its members (`Reconfig::on_stored`): n3 and n4 are two of 3's
/// three.
#[test]
fn a_probe_without_a_majority_reads_the_stored_configuration() {
    let r = reaches(
        "a probe without a majority reads the stored configuration",
        SimConfig::swarm(26030),
        true,
    );
    assert!(
        !r.timed_out && r.committed > 0,
        "seed 26030 ({}): stuck with {} committed:\n{}",
        r.faults.describe(),
        r.committed,
        r.stuck.join("\n")
    );
}

/// Global time, swarm seed 22870: n1 probes over the stored configuration 3
/// (`a_probe_without_a_majority_reads_the_stored_configuration`). Sent
/// under n1's own configuration's id (2), the probes would let global time
/// go back: n2 answers as empty, which bars it from a NEW-CONFIG of 2, not
/// of 3; it then applies 3 from n0, its CM, and grants it leases, so n0
/// keeps serving the clock while n1, CM of 4, serves its own (n0 hands out
/// 987 ms after n1 has handed out 1,331 ms). A probe carries the id of the
/// configuration it probes (`State::Probing::probed`); sent under the
/// member's own id, this seed fails.
#[test]
fn a_probe_carries_the_id_of_the_configuration_it_probes() {
    let r = reaches(
        "a probe carries the id of the stored configuration it probes",
        SimConfig::swarm(22870),
        true,
    );
    assert!(r.committed > 0 && !r.timed_out, "seed 22870: stuck");
}

/// A refill could bring a deleted key back: a replica filling a region
/// logs a write of k and its delete; the write's TRUNCATE never comes, and
/// recovery in the next configuration keeps the write to put in place at
/// truncation. That configuration refills the replica from a primary that
/// has collected the delete's tombstone, so its copy says nothing of k, and
/// the old write, put in place on the refilled copy, would be served as
/// k's value once the replica becomes primary (G2-item). A refill fences
/// writes below the source's GC safe point to keys its copy does not hold
/// (`RegionStore::merge_chunk`). Swarm seeds 2 and 14 reach the fence
/// dropping a stale write; no swarm seed meets the anomaly without it, and
/// the participant test `the_fill_fence_keeps_a_collected_delete_deleted`
/// (with `Bug::RefillUnfenced` hit and caught) and the storage test
/// `the_fill_fence_drops_late_stale_writes_but_not_pending_ones` script it.
#[test]
fn a_refilled_replica_does_not_bring_back_a_collected_delete() {
    for seed in [2, 14] {
        reaches(
            "the fill fence drops a stale write",
            SimConfig::swarm(seed),
            true,
        );
    }
}

/// The CM, primary of a region, has two new backups, and both finish
/// filling; their `ReplicaReady` reaches only the CM's memory, and the CM
/// crashes before any configuration records the copies complete. A remap
/// that knew only the recorded copies would take the CM's copy for the
/// region's only complete one and report it lost. Probe answers carry the
/// regions a member finished filling, and the remap counts those copies
/// complete. Swarm seeds 5 and 7 reach it, and
/// `copies_filled_before_the_cm_failed_survive_it` scripts it in the
/// reconfiguration engine.
#[test]
fn a_remap_counts_copies_a_member_finished_filling() {
    for seed in [5, 7] {
        let r = reaches(
            "a remap counts copies a member finished filling",
            SimConfig::swarm(seed),
            true,
        );
        assert!(
            !r.region_lost && !r.timed_out,
            "seed {seed} ({}): lost {} timed out {}:\n{}",
            r.faults.describe(),
            r.region_lost,
            r.timed_out,
            r.stuck.join("\n")
        );
    }
}

/// The rare path of the fill fence, which swarm seeds 1832 and 2942 with
/// the early COMMIT-PRIMARY answer reach: a primary serves a copy while lock
/// recovery holds a key it has no object of (a recovering insert), and the
/// chunk carries that key with no versions, so the new replica treats the
/// insert's write as pending rather than stale (`RegionStore::copy_after`).
/// The run must reach the path and pass the checker. (A variant that leaves
/// such keys out also passes the checker on the seeds that reach the path:
/// the swarm reaches it but does not show its failure; the storage test
/// `the_copy_carries_keys_held_by_lock_recovery` is what catches the
/// omission.) Of the swarm seeds of 0–2999 that once reached the path,
/// 1832 and 2942 still do since the durability rule moved the schedules.
#[test]
fn a_copy_served_during_lock_recovery_carries_the_held_keys() {
    for seed in [1832, 2942] {
        let r =
            run_and_check(early_answer(SimConfig::swarm(seed))).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.copied_recovery_holds > 0,
            "seed {seed} ({}) no longer copies a key held by lock recovery",
            r.faults.describe()
        );
    }
}

/// Swarm seed 1945 with the early COMMIT-PRIMARY answer: a whole-cluster
/// crash leaves primary n0 with a transaction's LOCK record but not its
/// COMMIT-PRIMARY (reported to the client at `Installed`). Configuration
/// 2's recovery commits it from the backups' COMMIT-BACKUP records, but n0
/// moves on to configuration 3 before the decision reaches it, without the
/// backups' evidence. If n0 reported its own LOCK record, shadowing
/// everything else (`Participant::evidence`), and step 5 skipped a replica
/// that reported any record, configuration 4, without those backups, would
/// vote lock and abort the committed write (a G-single-realtime cycle). A
/// replica reports its strongest evidence, and step 5 upgrades a replica
/// whose evidence is weaker than the region's.
#[test]
fn a_replica_reports_its_strongest_evidence_to_recovery() {
    reaches(
        "step 5 upgrades a replica whose evidence is weaker than the region's",
        early_answer(SimConfig::swarm(1945)),
        false,
    );
}

/// Swarm seed 21794 (long delays, stalls, node crashes and pauses, disk):
/// CM n0, primary of region 0, crashes while configuration 5 recovers a
/// committed transaction and comes back from disk with its LOCK record but
/// not its COMMIT-PRIMARY. Still a member (a restored CM renews its
/// configuration), it could answer the recovery coordinator's REQUEST-VOTE
/// at once, without lock recovery, with evidence Lock and no record; the
/// coordinator would commit and truncate the transaction without sending
/// n0 the region's COMMIT-RECOVERY, so n0 would never install the writes
/// and a later read-only scan would see part of the transaction (a G-single
/// cycle, which `Bug::RestoredRecoveryVotes` showed on this seed before the
/// durability rule's messages moved its schedule; no seed of 0–1,499 with
/// the same settings catches it now). A restored node takes no part in the
/// recovery of the configuration it was restored in (`NodeProcess::restore`
/// stops its recovery flow).
#[test]
fn a_restored_cm_takes_no_part_in_its_old_configurations_recovery() {
    run_and_check(before_single_reads(early_answer(SimConfig::swarm(21794))))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Single-read transactions (`TxnOptions::single_read`, FaRM §3's
/// lock-free read): the register workload's one-read transactions read
/// the newest committed version with no `read_ts`, and the checker passes
/// on every seed, with the history naming the version each read saw. A
/// primary that answers such a read past a lock on its key
/// (`Bug::LatestReadsPastLocks`) misses a write that another primary
/// already reported committed; with some messages held back (long delays,
/// so one primary's COMMIT-PRIMARY arrives late) the checker must catch it
/// as a real-time cycle (seeds 7, 8 and 11 do; each passes when correct).
#[test]
fn single_reads_pass_and_reads_past_a_lock_are_caught() {
    let delayed = |seed| SimConfig {
        faults: Faults {
            long_delay_permille: 30,
            ..Faults::none()
        },
        ..SimConfig::register(seed)
    };
    let mut single = 0u64;
    for seed in 0..12u64 {
        for cfg in [SimConfig::register(seed), delayed(seed)] {
            assert!(cfg.single_reads, "single reads are the simulator's default");
            let out = run_and_check(cfg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            single += out.latest_reads;
        }
    }
    assert!(
        single > 500,
        "the register workload made only {single} single reads"
    );
    let mut caught = None;
    for seed in 0..200u64 {
        let (broken, bugs) = inject(Bug::LatestReadsPastLocks, delayed(seed));
        if let Err(e) = run_and_check(broken) {
            assert_hit(&bugs, Bug::LatestReadsPastLocks);
            caught = Some((seed, e.to_string()));
            break;
        }
    }
    let (seed, e) = caught.expect("no seed caught single reads served past a lock");
    assert!(e.contains("-realtime"), "seed {seed}: {e}");
}

/// Without a backup (replication 1), a read must not show a write whose
/// COMMIT-PRIMARY record is not durable: with disk durability and a
/// whole-cluster crash, recovery finds only the LOCK record and aborts the
/// write a reader already saw. A read reply waits for the record that
/// changed what it shows (`ReadDeps`). Seeds 456, 1254, 4981, 130 and 750
/// run schedules where a READ or a single read meets a write whose
/// COMMIT-PRIMARY is not yet durable, and pass. The old rule
/// (`Bug::ReadsBeforeInstallDurable`) no longer fails on them since the
/// schedules moved; `tests/scenarios/durability.rs` scripts its window and
/// catches it.
#[test]
fn without_a_backup_reads_wait_for_the_log() {
    let cfg = |seed| SimConfig {
        faults: Faults {
            disk: true,
            cluster_crash: true,
            ..Faults::none()
        },
        txns_per_client: 120,
        replication: 1,
        ..SimConfig::register(seed)
    };
    for seed in [456u64, 1254, 4981, 130, 750] {
        run_and_check(cfg(seed)).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The simulator's time oracle for single reads: a primary's answer to a
/// `TxnRequest::ReadLatest` names a version whose `write_ts` global time
/// has passed (`Sim::check_latest_read`). With the nodes handling held
/// VALIDATEs and COMMIT-BACKUPs at once (`Bug::WritesUnwaited`), a
/// primary installs a version before its `write_ts` passed, and the
/// oracle sees a single read answered with it (register seed 25).
#[test]
fn a_single_read_of_a_version_from_the_future_is_caught() {
    let (broken, bugs) = inject(Bug::WritesUnwaited, SimConfig::register(25));
    let err = run_and_check(broken).expect_err("the broken write wait must be caught");
    assert_hit(&bugs, Bug::WritesUnwaited);
    assert!(err.contains("answered a single read"), "{err}");
}

/// `rows --faults` seed 948 (loss, one-way partition, node and client
/// crashes, wide drift, disk, a whole-cluster crash) once re-added a node
/// removed while down with only filling replicas: `restored_replicas_hold`
/// is vacuously true for it (no complete replica is a subset of anything),
/// so keeping its log on that ground would keep a stale COMMIT-BACKUP
/// that a later recovery commits over a committed delete (G-single). Such
/// a node resets its participant. The seed passes with single reads on or
/// off; since the durability rule's messages moved the schedule, no
/// swarm-rows seed of 0–1,499 catches the vacuous rule
/// (`Bug::ReaddedKeepsLog`) any more (see docs/open-problems.md).
#[test]
fn a_removed_node_readded_as_filling_forgets_its_log() {
    let cfg = |single_reads| SimConfig {
        faults: Faults::swarm(948),
        single_reads,
        ..SimConfig::rows(948)
    };
    for single in [true, false] {
        run_and_check(cfg(single)).unwrap_or_else(|e| panic!("{e}"));
    }
}
