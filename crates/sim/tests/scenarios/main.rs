//! Scripted scenarios: regression tests that drive the simulator into the
//! window they guard with explicit steps (hold, drop, crash, restart,
//! partition, release) and conditions on protocol state, so no change of
//! message schedule can move them off it. Each asserts the coverage mark
//! of the code that guards its window; where an injected bug breaks that
//! code, the bug is both hit and caught.

mod clients;
mod durability;
mod reconfig;
mod restart;
mod restore;

use meridian_sim::{Endpoint, EventView, Scenario, Sim, SimConfig};
use meridian_wire::{Frame, NodeId, ReconfigMessage, Request};

/// The bank workload in disk mode with no random faults: the scenarios
/// script their own.
pub fn disk_bank(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::bank(seed);
    cfg.faults.disk = true;
    cfg.txns_per_client = 120;
    cfg
}

/// The bank workload on `nodes` nodes (replication 3), in memory, long
/// enough for a reconfiguration or two while clients run.
pub fn bank_on(seed: u64, nodes: u32) -> SimConfig {
    let mut cfg = SimConfig::bank(seed);
    cfg.nodes = nodes;
    cfg.txns_per_client = 120;
    cfg
}

/// The reconfiguration message a delivery carries, if any.
pub fn reconfig_message<'a>(
    e: &'a EventView<'_>,
) -> Option<(Endpoint, Endpoint, &'a ReconfigMessage)>
where
{
    match e {
        EventView::Deliver {
            to,
            from,
            frame:
                Frame::Request {
                    req: Request::Reconfig(m),
                    ..
                }
                | Frame::OneWay {
                    req: Request::Reconfig(m),
                    ..
                },
        } => Some((*to, *from, m)),
        _ => None,
    }
}

/// Runs until the clients have run for `ms` milliseconds of simulated
/// time: the cluster is busy committing when the script's fault comes.
pub fn warm_up(s: &mut Scenario, ms: u64) -> Result<(), String> {
    let until = s.sim().now_ns() + ms * 1_000_000;
    s.run_until("the warm-up", |sim| sim.now_ns() >= until)
}

/// Whether node `n` is up and holds a configuration without any of
/// `gone`, led by a CM other than those.
pub fn config_without(sim: &Sim, n: u32, gone: &[u32]) -> bool {
    sim.node_config(n).is_some_and(|c| {
        gone.iter()
            .all(|g| !c.is_member(NodeId(*g)) && c.cm() != NodeId(*g))
    })
}

/// Finish a scenario: it must pass the checker and finish (not stuck).
pub fn finish_live(s: Scenario) -> Result<meridian_sim::SimReport, String> {
    let r = s.finish()?;
    if r.timed_out {
        return Err(format!("stuck:\n{}", r.stuck.join("\n")));
    }
    Ok(r)
}
