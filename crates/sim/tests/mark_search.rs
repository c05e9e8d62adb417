//! The search for seeds that reach a window: which coverage marks each
//! swarm seed reaches. When a seed test in `seeds.rs` fails with "seed N
//! no longer reaches <mark>", this finds seeds that do.

use meridian_bugs::marks;
use meridian_sim::{run_and_check, SimConfig};
use std::collections::BTreeMap;

/// Which coverage marks each swarm seed reaches: the search that finds a
/// seed for a window when its old one moved off it. Run with
/// `MERIDIAN_MARK_SEEDS=from..to cargo test --release -p meridian-sim
/// --test mark_search -- --ignored --nocapture marks_reached_by_swarm_seeds`
/// (`MERIDIAN_MARK_VARIANT=early` for the early COMMIT-PRIMARY answer).
#[test]
#[ignore]
fn marks_reached_by_swarm_seeds() {
    let range = std::env::var("MERIDIAN_MARK_SEEDS").unwrap_or_else(|_| "0..200".into());
    let (from, to) = range.split_once("..").expect("from..to");
    let (from, to): (u64, u64) = (from.parse().unwrap(), to.parse().unwrap());
    let early = std::env::var("MERIDIAN_MARK_VARIANT").is_ok_and(|v| v == "early");
    let threads = 2u64;
    let found: Vec<BTreeMap<&'static str, Vec<u64>>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    let mut found: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
                    for seed in (from..to).filter(|s| s % threads == t) {
                        let before = marks::snapshot();
                        let cfg = if early {
                            SimConfig {
                                report_after_primary_fsync: false,
                                ..SimConfig::swarm(seed)
                            }
                        } else {
                            SimConfig::swarm(seed)
                        };
                        let ok = run_and_check(cfg).is_ok();
                        for (m, n) in marks::snapshot() {
                            if ok && n > before.get(m).copied().unwrap_or(0) {
                                found.entry(m).or_default().push(seed);
                            }
                        }
                    }
                    found
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for f in found {
        for (m, seeds) in f {
            all.entry(m).or_default().extend(seeds);
        }
    }
    for (m, mut seeds) in all {
        seeds.sort();
        let n = seeds.len();
        seeds.truncate(8);
        println!("{n:5} {m:?}: {seeds:?}");
    }
}

/// Print the stuck report of swarm seed `MERIDIAN_DEBUG_SEED` (debugging aid).
#[test]
#[ignore]
fn debug_stuck_seed() {
    let seed: u64 = std::env::var("MERIDIAN_DEBUG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(71);
    let r = meridian_sim::run_and_check(meridian_sim::SimConfig::swarm(seed)).expect("checked");
    for l in &r.stuck {
        println!("{l}");
    }
}

/// Which seeds catch injected bug `MERIDIAN_BUG` (its `Debug` name) under
/// configuration `MERIDIAN_BUG_CONFIG` (`swarm`, `swarm-rows`: the rows
/// workload with swarm faults, or `early-multi`: swarm with the early
/// answer and multi-read transactions), over `MERIDIAN_MARK_SEEDS`: the
/// search for a negative test's seed when its old one drifted. Prints each
/// seed that is caught with the bug and passes without it.
#[test]
#[ignore]
fn seeds_that_catch_a_bug() {
    use meridian_bugs::{Bug, Bugs};
    let name = std::env::var("MERIDIAN_BUG").expect("MERIDIAN_BUG");
    let bug = *Bug::ALL
        .iter()
        .find(|b| format!("{b:?}") == name)
        .expect("a bug name");
    let kind = std::env::var("MERIDIAN_BUG_CONFIG").unwrap_or_else(|_| "swarm".into());
    let range = std::env::var("MERIDIAN_MARK_SEEDS").unwrap_or_else(|_| "0..200".into());
    let (from, to) = range.split_once("..").expect("from..to");
    let (from, to): (u64, u64) = (from.parse().unwrap(), to.parse().unwrap());
    let cfg = |seed: u64| match kind.as_str() {
        "swarm-rows" => SimConfig {
            faults: meridian_sim::Faults::swarm(seed),
            ..SimConfig::rows(seed)
        },
        "early-multi" => SimConfig {
            report_after_primary_fsync: false,
            single_reads: false,
            ..SimConfig::swarm(seed)
        },
        _ => SimConfig::swarm(seed),
    };
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let cfg = &cfg;
            sc.spawn(move || {
                for seed in (from..to).filter(|s| s % 2 == t) {
                    let bugs = Bugs::of(&[bug]);
                    let broken = SimConfig {
                        bugs: bugs.clone(),
                        ..cfg(seed)
                    };
                    if run_and_check(broken).is_err()
                        && bugs.hits(bug) > 0
                        && run_and_check(cfg(seed)).is_ok()
                    {
                        println!("{bug:?} caught by seed {seed}");
                    }
                }
            });
        }
    });
}
