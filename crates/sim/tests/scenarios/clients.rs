//! Client crashes: what a client's previous incarnation left in flight.

use super::warm_up;
use meridian_bugs::marks;
use meridian_sim::{Endpoint, EventView, Scenario, SimConfig};
use meridian_wire::{Frame, Response};

/// A client restarts while the answer to a clock sync of its previous
/// incarnation is still in the network, and the new incarnation's own
/// first sync has the same RPC id. Delivered to the new incarnation, the
/// old answer would give its clock a master time read before its request
/// left, and its upper bound would fall below the master's time. Real
/// sockets die with their process; the simulator drops frames sent to a
/// previous incarnation, and the time oracle checks every `read_ts`.
/// Script: client 0's clock-sync answers are held; once one is held,
/// client 0 crashes and restarts, and the answer is released.
fn a_sync_answer_outlives_its_client(seed: u64) -> Result<(), String> {
    let mut s = Scenario::new(SimConfig::bank(seed));
    warm_up(&mut s, 10)?;
    let answers = s.hold(|e| {
        matches!(
            e,
            EventView::Deliver {
                to: Endpoint::Client(0),
                frame: Frame::Response {
                    resp: Response::Clock(_),
                    ..
                },
                ..
            }
        )
    });
    s.run_until_held(answers, "a clock-sync answer to client 0")?;
    s.crash_client(0);
    s.restart_client(0);
    s.release(answers);
    let r = s.finish()?;
    if r.timed_out {
        return Err(format!("stuck:\n{}", r.stuck.join("\n")));
    }
    Ok(())
}

#[test]
fn a_restarted_client_takes_no_answer_meant_for_its_old_self() {
    for seed in [1, 2, 3] {
        let watch = marks::watch("a frame for a client's previous incarnation is dropped");
        a_sync_answer_outlives_its_client(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        watch.assert_hit();
    }
}
