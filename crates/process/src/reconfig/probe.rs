//! Reconfiguration steps 1, 2 and 4 (FaRM §5.2): suspecting the CM or
//! members, probing the members for a majority, reading the stored
//! configuration when none answers, and remapping the regions of the
//! probed members into the proposal.

use super::*;

impl Reconfig {
    /// The CM proposes `next` (a join or a rebalancing step) without a
    /// failure: straight to the CAS (FaRM §5.2 step 3); nothing is removed,
    /// so the commit needs no lease wait. Ignored unless this node is the
    /// CM and idle, or `next` is not the direct successor.
    pub fn propose(&mut self, now: u64, next: Configuration) {
        let newer_known = self
            .service_config
            .as_ref()
            .is_some_and(|c| c.id() > self.config.id());
        if !self.may_start()
            || newer_known
            || self.config.cm() != self.me
            || next.id().0 != self.config.id().0 + 1
        {
            return;
        }
        let proposed = Box::new(next);
        self.out.push(ReconfigOutput::Cas {
            expected: self.config.id(),
            proposed: proposed.clone(),
        });
        self.state = State::Casing {
            proposed,
            probe_end_ns: now,
            ask_again_ns: None,
        };
    }

    /// A restored CM's renewal of `base`, the configuration the service
    /// holds, which this CM proposed just before the cluster crashed and
    /// never applied (its CAS answer was lost with it): `next` (`base`
    /// renewed) replaces it. Nobody applied `base` either — every restored
    /// member is older — so it never committed.
    pub fn propose_over(&mut self, now: u64, base: &Configuration, next: Configuration) {
        if !self.may_start()
            || base.cm() != self.me
            || base.id() <= self.config.id()
            || next.id().0 != base.id().0 + 1
        {
            return;
        }
        // `base` is the latest configuration known here now (a restored
        // node may have read it from its own service replica).
        if self
            .service_config
            .as_ref()
            .is_none_or(|c| c.id() < base.id())
        {
            self.service_config = Some(Box::new(base.clone()));
        }
        let proposed = Box::new(next);
        self.out.push(ReconfigOutput::Cas {
            expected: base.id(),
            proposed: proposed.clone(),
        });
        self.state = State::Casing {
            proposed,
            probe_end_ns: now,
            ask_again_ns: None,
        };
    }

    /// The configuration a probe tries to replace (FaRM §5.2 step 2): the
    /// service's newer one if a lost CAS or a read returned it (its
    /// NEW-CONFIG never came), else this node's.
    pub(super) fn probe_base(&self) -> &Configuration {
        match &self.service_config {
            Some(c) if c.id() > self.config.id() => c,
            _ => &self.config,
        }
    }

    /// The member sets a probe may find a majority of: this node's
    /// configuration's, and the service's newer one's if known (a
    /// majority of either will do; the CAS decides between contenders).
    pub(super) fn probe_member_sets(&self) -> Vec<Vec<NodeId>> {
        let mut sets = vec![self.config.members()];
        if self.probe_base().id() != self.config.id() {
            sets.push(self.probe_base().members());
        }
        sets
    }

    /// Whether `node` is a member of a configuration a probe of this node
    /// counts ([`Reconfig::probe_member_sets`]): its probe answers count.
    pub fn counts_probe_answers_of(&self, node: NodeId) -> bool {
        self.config.is_member(node) || self.probe_base().is_member(node)
    }

    /// The configuration the coordination service stores, read after a
    /// probe found no majority ([`ReconfigOutput::ReadStored`]). If it is
    /// newer than this node's and lists this node, the next probe is over
    /// its members and remaps from it; if it does not list this node, the
    /// node was removed (as when a CAS loses to such a configuration).
    ///
    /// Why: a CM that stores configuration c+1 and fails before any member
    /// applies it leaves the members in c, and the members c+1 removed
    /// take part in nothing. If they were enough of c, the rest can never
    /// gather a majority of c, and without a CAS they never learn c+1
    /// (e.g. c = {0,1,3,4}, c+1 = {0,3,4} stored by CM 0, which crashes;
    /// 1 is removed; 3 and 4 alone are no majority of c). Over c+1's
    /// members they are a majority.
    pub fn on_stored(&mut self, stored: Configuration) {
        if self.removed
            || stored.id() <= self.config.id()
            || self
                .service_config
                .as_ref()
                .is_some_and(|c| c.id() >= stored.id())
            // Not in the middle of a probe: its answers are for the
            // configuration it probed.
            || !matches!(self.state, State::Member | State::Deferred { .. })
        {
            return;
        }
        if !stored.is_member(self.me) {
            self.service_config = None;
            self.become_removed(stored.id());
            return;
        }
        meridian_bugs::mark!("a probe without a majority reads the stored configuration");
        self.service_config = Some(Box::new(stored));
    }

    /// Step 1 at the CM: members whose lease expired.
    pub fn suspect_members(&mut self, now: u64, suspects: &[NodeId]) {
        // Deferred (a failed attempt waits a lease) counts as busy here.
        if !self.may_suspect_members() || suspects.is_empty() {
            return;
        }
        let suspects: BTreeSet<NodeId> = suspects
            .iter()
            .copied()
            .filter(|n| self.config.is_member(*n) && *n != self.me)
            .collect();
        if !suspects.is_empty() {
            if matches!(self.state, State::Committing { .. }) {
                meridian_bugs::mark!("a CM still committing suspects a member");
            }
            self.start_probe(now, suspects);
        }
    }

    /// Step 1 at a member: the CM's lease expired.
    pub fn suspect_cm(&mut self, now: u64) {
        if self.removed || !matches!(self.state, State::Member) {
            return;
        }
        let cm = self.config.cm();
        if cm == self.me {
            return;
        }
        if self.pending_commit {
            meridian_bugs::mark!("a member awaiting NEW-CONFIG-COMMIT suspects its CM");
        }
        let ring: Vec<NodeId> = {
            let members = self.config.members();
            let at = members.iter().position(|m| *m == cm).unwrap_or(0);
            (1..members.len())
                .map(|k| members[(at + k) % members.len()])
                .collect()
        };
        let rank = ring
            .iter()
            .take(self.params.backup_cms.max(1))
            .position(|m| *m == self.me)
            .unwrap_or(self.params.backup_cms.max(1));
        // A backup of rank k gives the ones before it k leases from its
        // first suspicion of this CM, then probes itself:
        // the first backup may be dead too (if the CM and the first backup
        // crash at once, the others must not ask the dead backup forever).
        let config = self.config.id();
        let since = match self.cm_suspected_since {
            Some((c, t)) if c == config => t,
            _ => {
                self.cm_suspected_since = Some((config, now));
                now
            }
        };
        let my_turn = now >= since.saturating_add(self.params.lease.lease_ns * rank as u64);
        if rank == 0 || (my_turn && now > since) {
            if rank > 0 {
                meridian_bugs::mark!("a backup CM of rank k probes k leases after suspecting");
            }
            self.start_probe(now, [cm].into_iter().collect());
        } else {
            let me = self.me;
            self.send(ring[0], ReconfigMessage::SuspectCm { config, from: me });
            self.state = State::Deferred {
                until_ns: now.saturating_add(self.params.probe_timeout_ns * 2 * rank as u64),
            };
        }
    }

    pub(super) fn start_probe(&mut self, now: u64, suspects: BTreeSet<NodeId>) {
        if let State::Committing {
            config,
            clock_ff_ns,
            acked,
            ..
        } = &self.state
        {
            self.unfinished_commit = Some((*config, *clock_ff_ns, acked.clone()));
        }
        let seq = self.next_probe_seq;
        self.next_probe_seq += 1;
        let config = self.probe_base().id();
        if config != self.config.id() {
            meridian_bugs::mark!("a probe carries the id of the stored configuration it probes");
        }
        let me = self.me;
        let sets = self.probe_member_sets();
        let members: BTreeSet<NodeId> = sets.iter().flatten().copied().collect();
        // The suspects are probed too when the others cannot make a
        // majority without them (a two-member configuration whose other
        // member failed, or half the members suspected): a suspect that
        // restarted without its memory answers as empty, and that answer
        // counts toward the majority like any other member's empty answer
        // (see `maybe_end_probe`: its old incarnation is gone, so it is on
        // no other side of a partition and grants the old CM nothing —
        // FaRM §5.2 step 2's majority is about who else may still serve);
        // any other answer from a suspect is ignored, so a suspect that is
        // alive after all is still left out. Without this a configuration of two members whose CM
        // crashed and restarted could never be replaced (the survivor's
        // probes of its one other member would fail forever).
        let ask_suspects = sets.iter().any(|ms| {
            let others = ms.iter().filter(|m| !suspects.contains(m)).count();
            others * 2 <= ms.len()
        });
        for m in members {
            if ask_suspects || !suspects.contains(&m) {
                self.send(
                    m,
                    ReconfigMessage::Probe {
                        config,
                        from: me,
                        seq,
                    },
                );
            }
        }
        self.state = State::Probing {
            probed: config,
            seq,
            suspects,
            replied: BTreeSet::new(),
            empty: BTreeSet::new(),
            filled: BTreeMap::new(),
            deadline_ns: now.saturating_add(self.params.probe_timeout_ns),
            ask_suspects,
        };
        self.maybe_end_probe(now);
    }

    pub(super) fn maybe_end_probe(&mut self, now: u64) {
        let State::Probing {
            suspects,
            replied,
            empty,
            filled,
            deadline_ns,
            ask_suspects,
            ..
        } = &self.state
        else {
            return;
        };
        let sets = self.probe_member_sets();
        let members: BTreeSet<NodeId> = sets.iter().flatten().copied().collect();
        let asked = members
            .iter()
            .filter(|m| !suspects.contains(m) && **m != self.me)
            .count();
        let answered = replied
            .iter()
            .chain(empty.iter())
            .filter(|m| !suspects.contains(m))
            .count();
        let mut alive = replied.clone();
        alive.insert(self.me);
        // A majority of this node's configuration, or of the newer one the
        // service stores (the members the stored one removed answer no
        // probe of the old one, of which the rest may be only half).
        let majority = sets.iter().any(|ms| {
            let counted = ms
                .iter()
                .filter(|m| alive.contains(m) || empty.contains(m))
                .count();
            counted * 2 > ms.len()
        });
        // Probing the suspects too, a minority waits for their empty
        // answers until the deadline.
        if (answered < asked || (*ask_suspects && !majority)) && now < *deadline_ns {
            return;
        }
        // A member that restarted empty answers too: its old incarnation
        // is gone, so it cannot be on the other side of a partition, and
        // it grants the old CM nothing (FaRM §5.2 step 2's majority is
        // about who else may still serve).
        if !majority {
            // A minority cannot reconfigure (FaRM §5.2 step 2). Unless
            // the service stores a newer configuration (see `on_stored`).
            self.tell_probe_failed();
            self.probe_failed(now);
            self.out.push(ReconfigOutput::ReadStored);
            return;
        }
        let mut base = self.probe_base().clone();
        if base.id() == self.config.id() {
            // Copies this configuration's members finished filling are
            // complete (FaRM §5.4), whether or not the CM's memory of
            // their `ReplicaReady` survived: a suspect's are not counted
            // (it is left out), nor are those reported for another
            // configuration (the service's newer one was never run).
            let mine = (self.me, self.filled_here());
            for (n, regions) in filled.iter().chain(std::iter::once((&mine.0, &mine.1))) {
                if alive.contains(n) {
                    for r in regions {
                        if base
                            .regions()
                            .iter()
                            .any(|p| p.id == *r && p.filling.contains(n))
                        {
                            meridian_bugs::mark!("a remap counts copies a member finished filling");
                        }
                        base.mark_ready(*r, *n);
                    }
                }
            }
        }
        if !base.is_member(self.me) {
            // The stored configuration (another prober's CAS won) removed
            // this node: it must not propose a successor of it that adds
            // itself back as CM (FaRM §5.2: a removed machine rejoins).
            // Such a configuration, once stored, sends a NEW-CONFIG that the
            // winner's members refuse as a non-member's, and nothing ever
            // commits again.
            meridian_bugs::mark!("a prober removed by the stored configuration stops");
            self.tell_probe_failed();
            self.become_removed(base.id());
            return;
        }
        let alive: BTreeSet<NodeId> = alive
            .into_iter()
            .filter(|n| base.node(*n).is_ok())
            .collect();
        match base.remap(&alive, self.me) {
            Ok(next) => {
                let proposed = Box::new(next);
                self.out.push(ReconfigOutput::Cas {
                    expected: base.id(),
                    proposed: proposed.clone(),
                });
                self.abandoned = None;
                self.state = State::Casing {
                    proposed,
                    probe_end_ns: now,
                    ask_again_ns: None,
                };
            }
            Err(e) => {
                // A region lost every replica: nothing this node can do
                // but keep its configuration (FaRM: "signals an error").
                self.tell_probe_failed();
                if self.lost_reported != Some(base.id()) {
                    self.lost_reported = Some(base.id());
                    self.out.push(ReconfigOutput::RegionLost {
                        config: base.id(),
                        detail: e.to_string(),
                    });
                }
                self.probe_failed(now);
            }
        }
    }

    /// Step 4's answer to this node's probe: `from` holds `config` (or, if
    /// `was_emptied`, restarted without its memory), with `regions` filled
    /// there.
    pub(super) fn on_probe_reply(
        &mut self,
        now: u64,
        config: ConfigId,
        from: NodeId,
        seq: u64,
        was_emptied: bool,
        regions: Vec<meridian_wire::RegionId>,
    ) {
        let in_base = self.counts_probe_answers_of(from);
        if let State::Probing {
            probed,
            seq: s,
            suspects,
            replied,
            empty,
            filled,
            ..
        } = &mut self.state
        {
            // A suspect counts only as empty (see `start_probe`).
            let counts = was_emptied || !suspects.contains(&from);
            if *s == seq && config == *probed && in_base && counts {
                if was_emptied && suspects.contains(&from) {
                    meridian_bugs::mark!("a suspect that restarted empty counts toward a probe");
                }
                if was_emptied {
                    if !replied.contains(&from) {
                        empty.insert(from);
                    }
                } else {
                    empty.remove(&from);
                    replied.insert(from);
                    filled.insert(from, regions);
                }
            }
        }
        self.maybe_end_probe(now);
    }

    /// A probe that cannot make a successor: back to the proposal
    /// [`Reconfig::abandon_unacked`] left, if any, resending NEW-CONFIG;
    /// else try again after a lease, if still suspected.
    /// The probe of this round will lead to no CAS: tell every member
    /// that answered, so that it renews with its CM again at once.
    pub(super) fn tell_probe_failed(&mut self) {
        let State::Probing {
            seq,
            replied,
            probed,
            ..
        } = &self.state
        else {
            return;
        };
        let (seq, config, me) = (*seq, *probed, self.me);
        for to in replied.clone() {
            if to != me {
                self.send(
                    to,
                    ReconfigMessage::ProbeFailed {
                        config,
                        from: me,
                        seq,
                    },
                );
            }
        }
    }

    pub(super) fn probe_failed(&mut self, now: u64) {
        match self.abandoned.take() {
            Some(mut p) => {
                if let State::Proposing { next_resend_ns, .. } = p.as_mut() {
                    *next_resend_ns = now;
                }
                self.state = *p;
                self.resend(now);
            }
            None => {
                self.state = State::Deferred {
                    until_ns: now.saturating_add(self.params.lease.lease_ns),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconfig::testing::*;

    #[test]
    fn a_minority_cannot_reconfigure_and_the_majority_removes_it() {
        let mut net = Net::new(5);
        net.cut = [NodeId(3), NodeId(4)].into_iter().collect();
        // The minority side suspects the CM; its backup CM (1) is out of
        // reach, so after waiting node 3 probes and finds only node 4.
        net.nodes.get_mut(&NodeId(3)).unwrap().suspect_cm(MS);
        net.nodes.get_mut(&NodeId(4)).unwrap().suspect_cm(MS);
        net.collect(NodeId(3));
        net.collect(NodeId(4));
        net.run_ms(15);
        assert!(net.log.iter().all(|l| !l.contains("cas")), "{:?}", net.log);
        assert_eq!(net.store.id(), ConfigId(1));
        // The CM suspects both and reconfigures without them.
        net.expiry_ns = 0;
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(net.now, &[NodeId(3), NodeId(4)]);
        net.collect(NodeId(0));
        net.run_ms(20);
        assert_eq!(net.store.members(), vec![NodeId(0), NodeId(1), NodeId(2)]);
        assert_eq!(net.committed(2), (2, 0, false));
        assert_eq!(
            net.committed(3),
            (1, 0, false),
            "the minority keeps the old one"
        );
        // Healed: the minority hears NEW-CONFIG? No: it is not a member, so
        // the CM never sends it one; a removed node rejoins as a new
        // incarnation. A stray NEW-CONFIG would tell it it was removed.
        net.cut.clear();
        let toml = net.store.to_toml().unwrap();
        net.nodes.get_mut(&NodeId(3)).unwrap().on_message(
            net.now,
            ReconfigMessage::NewConfig {
                config: ConfigId(2),
                from: NodeId(0),
                config_toml: toml,
            },
            0,
            0,
        );
        net.collect(NodeId(3));
        assert!(net.nodes[&NodeId(3)].removed());
        assert_eq!(net.log.last().unwrap(), "n3 removed by 2");
    }

    /// Half the members failed and came back without their memory (e.g.
    /// a configuration of two whose CM crashed and restarted). The others
    /// alone are no majority, so the prober asks the suspects too; their
    /// empty answers (the node process answers a probe so once it
    /// restarted empty) count toward the majority, and the new
    /// configuration leaves them out. Without probing the suspects, every
    /// attempt would fail for want of a majority.
    #[test]
    fn suspects_that_restarted_empty_complete_the_majority() {
        let counted =
            meridian_bugs::marks::watch("a suspect that restarted empty counts toward a probe");
        let mut net = Net::new(4);
        let (a, b) = (NodeId(1), NodeId(2));
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(MS, &[a, b]);
        net.collect(NodeId(0));
        let probes: Vec<(NodeId, ConfigId, u64)> = net
            .queue
            .iter()
            .filter_map(|(_, to, m)| match m {
                ReconfigMessage::Probe { config, seq, .. } if *to == a || *to == b => {
                    Some((*to, *config, *seq))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            probes.len(),
            2,
            "the suspects must be probed: {:?}",
            net.queue
        );
        // Their old incarnations are gone: the restarted ones answer empty.
        net.dead.extend([a, b]);
        for (from, config, seq) in probes {
            net.nodes.get_mut(&NodeId(0)).unwrap().on_message(
                MS,
                ReconfigMessage::ProbeReply {
                    config,
                    from,
                    seq,
                    empty: true,
                    filled: Vec::new(),
                },
                0,
                0,
            );
        }
        net.collect(NodeId(0));
        net.run_ms(20);
        assert_eq!(
            net.store.members(),
            vec![NodeId(0), NodeId(3)],
            "{:?}",
            net.log
        );
        assert_eq!(net.committed(0), (2, 0, false), "{:?}", net.log);
        assert_eq!(net.committed(3), (2, 0, false), "{:?}", net.log);
        // An answer from a suspect that is alive after all does not count:
        // with only node 3 and itself the CM stays a minority.
        let mut net = Net::new(4);
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(MS, &[a, b]);
        net.collect(NodeId(0));
        net.cut.extend([a, b]);
        for (from, to, m) in std::mem::take(&mut net.queue) {
            if to != a && to != b {
                net.queue.push((from, to, m));
            } else if let ReconfigMessage::Probe { config, seq, .. } = m {
                {
                    net.nodes.get_mut(&NodeId(0)).unwrap().on_message(
                        MS,
                        ReconfigMessage::ProbeReply {
                            config,
                            from: to,
                            seq,
                            empty: false,
                            filled: Vec::new(),
                        },
                        0,
                        0,
                    );
                }
            }
        }
        net.collect(NodeId(0));
        net.run_ms(3);
        assert!(net.log.iter().all(|l| !l.contains("cas")), "{:?}", net.log);
        counted.assert_hit();
    }

    /// The CM stores a configuration that removes a member and dies
    /// before any NEW-CONFIG goes out. The removed member
    /// answers no probe, so the two others are half of the old
    /// configuration and never a majority of it; read from the service,
    /// the stored configuration makes them two of its three.
    #[test]
    fn members_left_behind_by_a_cm_dying_after_its_cas_replace_it() {
        let read = meridian_bugs::marks::watch(
            "a probe without a majority reads the stored configuration",
        );
        let mut net = Net::new(4);
        net.cm_suspects(1);
        for _ in 0..400 {
            if net.store.id() == ConfigId(2) {
                break;
            }
            net.step();
        }
        assert_eq!(net.store.id(), ConfigId(2), "{:?}", net.log);
        assert!(!net.store.is_member(NodeId(1)), "{:?}", net.log);
        // The CM dies with its CAS stored and its NEW-CONFIG unsent; n1
        // comes back and learns it was removed.
        net.dead.insert(NodeId(0));
        net.dead.remove(&NodeId(1));
        let stored = net.store.clone();
        net.nodes.get_mut(&NodeId(1)).unwrap().on_stored(stored);
        net.collect(NodeId(1));
        assert!(net.nodes[&NodeId(1)].removed(), "{:?}", net.log);
        for id in [2, 3] {
            assert_eq!(net.committed(id), (1, 0, false), "{:?}", net.log);
        }
        // Their leases keep suspecting the dead CM.
        for _ in 0..100 {
            for id in [2, 3] {
                let now = net.now;
                net.nodes.get_mut(&NodeId(id)).unwrap().suspect_cm(now);
                net.collect(NodeId(id));
            }
            net.run_ms(1);
        }
        assert_eq!(net.store.id(), ConfigId(3), "{:?}", net.log);
        for id in [2, 3] {
            assert_eq!(net.committed(id), (3, 2, false), "{:?}", net.log);
        }
        read.assert_hit();
    }

    /// More than f failures: a region whose only complete replica died
    /// (its backups still filling) cannot be remapped. The would-be CM keeps
    /// its configuration and reports `RegionLost` once, however often it
    /// retries (the simulator counts such runs as beyond the fault model).
    #[test]
    fn a_region_without_a_complete_replica_is_reported_lost_once() {
        let mut net = Net::new(5);
        let mut cfg = net.store.clone();
        let mut placement = cfg.regions();
        for r in &mut placement {
            r.filling = r.backups.clone();
        }
        let victim = placement
            .iter()
            .map(|r| r.primary)
            .find(|p| *p != NodeId(0))
            .expect("a region with a primary other than the CM");
        cfg.placement = placement;
        for (m, r) in net.nodes.iter_mut() {
            *r = Reconfig::new(*m, params(), cfg.clone());
        }
        net.store = cfg;
        net.cm_suspects(victim.0);
        // The CM's lease keeps suspecting the victim: retry after each
        // deferral (one lease).
        for _ in 0..3 {
            net.run_ms(15);
            let now = net.now;
            net.nodes
                .get_mut(&NodeId(0))
                .unwrap()
                .suspect_members(now, &[victim]);
            net.collect(NodeId(0));
        }
        net.run_ms(15);
        let attempts = net
            .nodes
            .get(&NodeId(0))
            .map(|r| r.next_probe_seq)
            .unwrap_or(0);
        assert!(attempts >= 3, "the CM retried only {attempts} probe(s)");
        let lost: Vec<&String> = net
            .log
            .iter()
            .filter(|l| l.contains("lost a region"))
            .collect();
        assert_eq!(lost.len(), 1, "{:?}", net.log);
        assert!(lost[0].starts_with("n0 lost a region of 1"), "{lost:?}");
        assert_eq!(net.committed(0).0, 1, "no configuration may follow");
    }

    /// The CM, primary of a region whose two backups are new (filling),
    /// crashes just after both finished filling. Their `ReplicaReady`
    /// reached only the CM's memory, so a remap that trusted only the
    /// configuration would take the CM's copy for the region's only
    /// complete one and report the region lost. Probe answers carry the
    /// regions each member finished filling, and the remap counts those
    /// copies complete.
    #[test]
    fn copies_filled_before_the_cm_failed_survive_it() {
        let counted =
            meridian_bugs::marks::watch("a remap counts copies a member finished filling");
        let run = |report_filled: bool| {
            let mut net = Net::new(5);
            let mut c = net.store.clone();
            c.placement = c.regions();
            let r = c
                .placement
                .iter_mut()
                .find(|r| r.primary == NodeId(0))
                .expect("a region the CM leads");
            r.filling = r.backups.clone();
            let (region, fillers) = (r.id, r.backups.clone());
            for m in c.members() {
                net.nodes.insert(m, Reconfig::new(m, params(), c.clone()));
            }
            net.store = c.clone();
            if report_filled {
                for f in &fillers {
                    net.nodes
                        .get_mut(f)
                        .unwrap()
                        .set_filled(c.id(), [region].into_iter().collect());
                }
            }
            net.dead.insert(NodeId(0));
            for m in [1, 2, 3, 4] {
                net.nodes.get_mut(&NodeId(m)).unwrap().suspect_cm(MS);
                net.collect(NodeId(m));
            }
            net.run_ms(40);
            (net, region, fillers)
        };
        let (net, region, fillers) = run(true);
        assert!(
            net.log.iter().all(|l| !l.contains("lost a region")),
            "{:?}",
            net.log
        );
        assert_eq!(net.store.id(), ConfigId(2), "{:?}", net.log);
        let r = net.store.regions()[region.0 as usize].clone();
        assert!(
            fillers.contains(&r.primary) && r.filling.iter().all(|f| !fillers.contains(f)),
            "{r:?}"
        );
        // Without the reports the survivors find the region lost.
        let (net, _, _) = run(false);
        assert!(
            net.log.iter().any(|l| l.contains("lost a region")),
            "{:?}",
            net.log
        );
        assert_eq!(net.store.id(), ConfigId(1));
        counted.assert_hit();
    }
}
