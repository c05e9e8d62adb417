use meridian_sim::{Sim, SimConfig};
#[test]
#[ignore]
fn scratch() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let wait: u64 = std::env::var("WAIT").unwrap().parse().unwrap();
    let key: Vec<u8> = std::env::var("KEY").unwrap().split(',').map(|x| x.parse().unwrap()).collect();
    let cfg = SimConfig { read_lock_wait_us: wait, ..SimConfig::swarm(seed) };
    let report = Sim::new(cfg).run();
    for (i, t) in report.history.txns.iter().enumerate() {
        let touches = t.writes.iter().any(|(k, _)| *k == key)
            || t.deletes.iter().any(|(k, _)| *k == key)
            || t.reads.iter().any(|(k, _)| *k == key);
        if touches {
            eprintln!("T{i}: {:?} p{} inv={} done={} rts={:?} wts={:?} reads={:?} writes={:?} deletes={:?}", t.outcome, t.process, t.invoke_ns, t.complete_ns, t.read_ts, t.write_ts,
              t.reads.iter().filter(|(k,_)| *k==key).collect::<Vec<_>>(), t.writes.iter().filter(|(k,_)| *k==key).collect::<Vec<_>>(), t.deletes.iter().filter(|(k,_)| *k==key).collect::<Vec<_>>());
        }
    }
}
