use meridian_sim::{run_and_check, SimConfig};
#[test]
#[ignore]
fn scan_broken() {
    let first: u64 = std::env::var("FIRST").unwrap().parse().unwrap();
    let n: u64 = std::env::var("N").unwrap().parse().unwrap();
    let mut caught = 0;
    for seed in first..first + n {
        let base = SimConfig::swarm(seed);
        if !base.faults.disk { continue; }
        let cfg = SimConfig { broken_commit_record_ignored: true, ..base };
        match std::panic::catch_unwind(|| run_and_check(cfg)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => { caught += 1; eprintln!("CAUGHT seed {seed}: {}", e.lines().take(3).collect::<Vec<_>>().join(" | ")); }
            Err(_) => { caught += 1; eprintln!("PANIC seed {seed}"); }
        }
        if caught >= 3 { break; }
    }
    eprintln!("done caught={caught}");
}
