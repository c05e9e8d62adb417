use meridian_sim::{Sim, SimConfig};
#[test]
#[ignore]
fn scratch_run() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let wait: u64 = std::env::var("WAIT").unwrap().parse().unwrap();
    let cfg = SimConfig { read_lock_wait_us: wait, ..SimConfig::swarm(seed) };
    let r = Sim::new(cfg).run();
    eprintln!("timed_out {} lost {}", r.timed_out, r.region_lost);
}
