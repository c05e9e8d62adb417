//! Reconfiguration step 3 (FaRM §5.2): the coordination service's
//! compare-and-swap of the configuration decides the one attempt that
//! goes on to NEW-CONFIG; a loser adopts the winner or leaves.

use super::*;

impl Reconfig {
    /// Step 3's answer: `Ok` if the coordination service installed the
    /// proposal, `Err(current)` with its current configuration otherwise.
    /// `surely_expired_at(node)` is the lease manager's bound for each
    /// removed member when this node was already the CM.
    pub fn on_cas(
        &mut self,
        now: u64,
        result: Result<(), Configuration>,
        surely_expired_at: impl Fn(NodeId) -> u64,
    ) {
        let State::Casing {
            proposed,
            probe_end_ns,
            ..
        } = std::mem::replace(&mut self.state, State::Member)
        else {
            return;
        };
        if let Err(current) = result {
            if current.id() < proposed.id() {
                // Nothing stored at the proposal's id: the CAS client gave
                // up (no answer from the service, this node cut off from
                // its majority), and the CAS may or may not have taken
                // effect. Ask again until the service answers: either it
                // stores the proposal (above) or another one (below).
                // Dropping the attempt here would leave a CM that
                // abandoned its own unacknowledged proposal for this probe
                // a member whose configuration waits for a commit nobody
                // will send, suspecting no one.
                // (Asked again after a lease, not at once: a replica here
                // may answer at once, and from a stale copy.) The CAS
                // client counts a stored proposal equal to this one as
                // swapped, so a CAS that took effect unanswered ends
                // well.
                meridian_bugs::mark!("an unanswered CAS is asked again a lease later");
                self.state = State::Casing {
                    proposed,
                    probe_end_ns,
                    ask_again_ns: Some(now.saturating_add(self.params.lease.lease_ns)),
                };
                return;
            }
            if current.id() > self.config.id() && !current.is_member(self.me) {
                // The winner removed this node: no NEW-CONFIG of it will
                // come, and a CM whose own configuration still waits for
                // its commit would otherwise neither suspect anyone nor
                // be suspected by itself, staying in it for good.
                // Removed, it joins again (FaRM §5.2), as a probe over such
                // a configuration makes it.
                meridian_bugs::mark!("a CAS lost to a configuration without this node removes it");
                self.service_config = None;
                self.become_removed(current.id());
                return;
            }
            // Someone else won; its NEW-CONFIG should come. If it does not
            // (its CM died after the CAS), the next attempt starts from it.
            if current.id() > self.config.id() {
                self.service_config = Some(Box::new(current));
            }
            return;
        }
        self.service_config = None;
        let old_cm = self.config.cm();
        let removed: Vec<NodeId> = self
            .config
            .members()
            .into_iter()
            .filter(|m| !proposed.is_member(*m))
            .collect();
        let over = self.params.lease.surely_over_ns();
        let commit_after_ns = if old_cm == self.me {
            removed
                .iter()
                .map(|n| surely_expired_at(*n))
                .max()
                .unwrap_or(now)
        } else if removed.contains(&old_cm) {
            // FaRMv2 §4.3: "if only the old CM was removed, the lease
            // expiry wait is skipped". Every other member of the old
            // configuration is in this one and must acknowledge it, and
            // each acknowledgement carries how long the lease it granted
            // the old CM may still last (`cm_lease_left_ns`, waited out
            // with the clock samples' age below): once those are over the
            // old CM holds no majority, so it serves and hands out time no
            // more, with no whole lease waited past the probe. Others
            // removed with it held leases the old CM granted while it had
            // its majority: they get one lease more (`after_grants_ns`).
            now
        } else {
            probe_end_ns.saturating_add(2 * over)
        };
        // The old master answered clock syncs until its lease majority
        // ended; samples taken from it expire `clock_sample_age_ns` later.
        let after_grants_ns = if proposed.cm() != old_cm {
            let others_removed = removed.iter().any(|n| *n != old_cm);
            self.params.clock_sample_age_ns
                + if removed.contains(&old_cm) && others_removed {
                    over
                } else {
                    0
                }
        } else {
            0
        };
        let mut acks = BTreeMap::new();
        acks.insert(self.me, 0);
        self.state = State::Proposing {
            proposed_at_ns: now,
            proposed: proposed.clone(),
            acks,
            commit_after_ns: commit_after_ns
                .saturating_add(self.params.lease.stretch_ns(after_grants_ns)),
            after_grants_ns,
            cm_changed: proposed.cm() != old_cm,
            next_resend_ns: now,
            clock_after_ns: now.saturating_add(
                self.params
                    .lease
                    .stretch_ns(after_grants_ns.min(self.params.clock_sample_age_ns)),
            ),
            clock_ff_ns: None,
        };
        self.apply(*proposed);
        self.resend(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconfig::testing::*;

    /// The CM of a configuration still waiting for one member's ACK
    /// probes that member and CASes a successor, but another prober's CAS
    /// removing the CM wins first. Its configuration applied and
    /// uncommitted, the CM suspects neither anyone (its commit is pending)
    /// nor its CM (itself), and no NEW-CONFIG of the winner comes (not a
    /// member): it would stay in its configuration for good, never
    /// rejoining. A lost CAS to a configuration without this node tells it
    /// it was removed, as a probe over such a configuration does.
    #[test]
    fn a_cm_whose_cas_loses_to_a_configuration_without_it_is_removed() {
        let removed = meridian_bugs::marks::watch(
            "a CAS lost to a configuration without this node removes it",
        );
        let mut net = Net::new(6);
        // The CM removes n5 and applies 2; n4 answers the probe, then is
        // cut off and never ACKs the NEW-CONFIG.
        net.cm_suspects(5);
        for _ in 0..40 {
            if net.nodes[&NodeId(0)].describe().starts_with("casing") {
                break;
            }
            net.step();
        }
        net.dead.insert(NodeId(4));
        net.run_ms(5);
        assert_eq!(net.store.id(), ConfigId(2), "{:?}", net.log);
        assert!(net.nodes[&NodeId(0)].reconfiguring(), "{:?}", net.log);
        net.run_ms(10);
        // n4 is back. n1 suspects the CM and probes one step ahead; the CM
        // then gives up on n4's ACK and probes too. n1's CAS wins.
        net.dead.remove(&NodeId(4));
        let now = net.now;
        net.nodes
            .get_mut(&NodeId(1))
            .unwrap()
            .start_probe(now, [NodeId(0)].into_iter().collect());
        net.collect(NodeId(1));
        net.step();
        let now = net.now;
        let probing = net
            .nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .abandon_unacked(now, &[NodeId(4)]);
        assert_eq!(probing, vec![NodeId(4)], "{:?}", net.log);
        net.collect(NodeId(0));
        net.run_ms(40);
        assert!(!net.store.is_member(NodeId(0)), "{:?}", net.log);
        assert!(
            net.nodes[&NodeId(0)].removed(),
            "the CM stays in {:?}: {}; {:?}",
            net.nodes[&NodeId(0)].config().id(),
            net.nodes[&NodeId(0)].describe(),
            net.log
        );
        removed.assert_hit();
    }

    /// A prober's CAS gets no answer (the CAS client gave up, cut off
    /// from the service's majority). Dropping the attempt would leave it,
    /// a CM that abandoned its own unacknowledged proposal for the probe,
    /// waiting for a commit nobody will send. It asks again a lease later,
    /// until the service answers.
    #[test]
    fn a_cas_without_an_answer_is_asked_again() {
        let asked = meridian_bugs::marks::watch("an unanswered CAS is asked again a lease later");
        let mut net = Net::new(5);
        net.expiry_ns = 0;
        // The members reach each other, but the CAS of a node on the cut
        // side gets no answer (the service is out of reach).
        net.cut = [0, 1, 2, 4].into_iter().map(NodeId).collect();
        net.dead.insert(NodeId(3));
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(MS, &[NodeId(3)]);
        net.collect(NodeId(0));
        for _ in 0..40 {
            if net.nodes[&NodeId(0)].describe().starts_with("casing") {
                break;
            }
            net.step();
        }
        net.step();
        assert_eq!(net.store.id(), ConfigId(1), "{:?}", net.log);
        assert_eq!(
            net.nodes[&NodeId(0)].describe(),
            "casing 2",
            "{:?}",
            net.log
        );
        // The CAS client gives up: it reports the configuration it
        // expected to replace.
        let (now, given_up) = (net.now, net.store.clone());
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .on_cas(now, Err(given_up), |_| 0);
        net.collect(NodeId(0));
        assert_eq!(
            net.nodes[&NodeId(0)].describe(),
            "casing 2",
            "{:?}",
            net.log
        );
        // The service is back in reach: the CAS is asked again a lease on.
        net.cut.clear();
        net.run_ms(40);
        assert_eq!(net.store.id(), ConfigId(2), "{:?}", net.log);
        assert!(!net.store.is_member(NodeId(3)));
        assert_eq!(net.committed(0), (2, 0, false), "{:?}", net.log);
        asked.assert_hit();
    }

    #[test]
    fn concurrent_attempts_have_one_winner() {
        let mut net = Net::new(5);
        net.dead.insert(NodeId(0));
        // Both backups start at once (as if each suspected on its own).
        net.nodes
            .get_mut(&NodeId(1))
            .unwrap()
            .start_probe(MS, [NodeId(0)].into_iter().collect());
        net.nodes
            .get_mut(&NodeId(2))
            .unwrap()
            .start_probe(MS, [NodeId(0)].into_iter().collect());
        net.collect(NodeId(1));
        net.collect(NodeId(2));
        net.run_ms(40);
        let oks = net.log.iter().filter(|l| l.ends_with("ok")).count();
        let lost = net.log.iter().filter(|l| l.ends_with("lost")).count();
        assert_eq!((oks, lost), (1, 1), "{:?}", net.log);
        let cm = net.store.cm().0;
        for id in [1, 2, 3, 4] {
            assert_eq!(net.committed(id), (2, cm, false), "{:?}", net.log);
        }
        for r in net.nodes.values() {
            r.check_invariants();
        }
    }
}
