use meridian_sim::{run_and_check, Faults, SimConfig};
#[test]
fn sweep() {
    let start: u64 = std::env::var("START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let mut fails = Vec::new();
    for seed in start..start + n {
        let cfg = SimConfig {
            faults: Faults {
                disk: true,
                cluster_crash: true,
                ..Faults::none()
            },
            txns_per_client: 120,
            replication: 1,
            ..SimConfig::register(seed)
        };
        if let Err(e) = run_and_check(cfg) {
            eprintln!("seed {seed}: {}", &e[..e.len().min(400)]);
            fails.push(seed);
        }
    }
    eprintln!("REPL1 SWEEP {start}..{} fails={fails:?}", start + n);
}
