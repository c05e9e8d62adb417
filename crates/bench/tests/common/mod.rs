//! Shared by the peer tests: the contended read-modify-write every peer
//! driver must run without a lost update.

use meridian_bench::drive::Mix;
use meridian_bench::peers::Peer;
use meridian_workload::rmw::{self, RmwConfig};
use std::sync::Arc;

/// 8 hot counters, 4 sessions, 1 s: returns (committed, aborts, audit sum).
pub async fn contended_rmw(peer: &Peer) -> (u64, u64, u64) {
    let cfg = RmwConfig {
        records: 8,
        keys: 4,
        value_bytes: 16,
    };
    assert_eq!(
        peer.load(rmw::population(&cfg), |_| {})
            .await
            .expect("load"),
        8
    );
    let ran = peer
        .run(Arc::new(Mix::Rmw(cfg)), 4, 1, 3)
        .await
        .expect("run");
    let sum = peer.audit_rmw(&cfg).await.expect("audit");
    (ran.result.committed, ran.result.aborts, sum)
}
