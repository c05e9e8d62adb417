//! A batch of seeds of contended workloads through the checker.
//! Set `MERIDIAN_SIM_SEEDS=n` for more seeds, `MERIDIAN_SIM_SEED=s` to replay one.

use meridian_sim::{run_and_check, Sim, SimConfig};

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

#[test]
fn bank_seeds_pass_the_checker() {
    let mut committed = 0;
    let mut aborted = 0;
    for seed in seeds(200) {
        let r = run_and_check(SimConfig::bank(seed)).unwrap_or_else(|e| panic!("{e}"));
        committed += r.committed;
        aborted += r.aborted;
    }
    assert!(
        committed > 0 && aborted > 0,
        "workload must commit and also contend: {committed} committed, {aborted} aborted"
    );
}

#[test]
fn register_seeds_pass_the_checker() {
    for seed in seeds(200) {
        let r = run_and_check(SimConfig::register(seed)).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.committed > 0);
    }
}

#[test]
fn a_seed_reproduces_exactly() {
    let a = Sim::new(SimConfig::bank(42)).run();
    let b = Sim::new(SimConfig::bank(42)).run();
    assert_eq!(a.messages, b.messages);
    assert_eq!(a.end_ns, b.end_ns);
    assert_eq!(
        meridian_checker::to_edn(&a.history),
        meridian_checker::to_edn(&b.history)
    );
    let c = Sim::new(SimConfig::bank(43)).run();
    assert_ne!(a.end_ns, c.end_ns, "different seeds should differ");
}
