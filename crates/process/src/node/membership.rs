//! Membership and reconfiguration (FaRM §5.2, §5.4, FaRMv2 §4.3):
//! probes and NEW-CONFIG at members and outsiders, the CAS answer, applying
//! and committing a configuration, join and removal, a restored node's way
//! back into a configuration, and the CM's rebalancing moves.

use super::{sender, NodeEffect, NodeEvent, NodeProcess, Peer, Standing};
use crate::lease::{LeaseClient, LeaseManager, LeaseRole};
use crate::reconfig::ReconfigOutput;
use meridian_config::Configuration;
use meridian_wire::{ConfigId, LeaseHolder, NodeId, ReconfigMessage, RegionId, Request};
use std::collections::{BTreeMap, BTreeSet};

/// True if every complete replica (primary, or backup not filling) that
/// configuration `next` gives `me` was a complete replica of `me` in
/// `restored`, the configuration `me` was restored from disk in. Its role
/// may change (a backup promoted to primary, a primary demoted) and new
/// replicas may be added as filling; the data it restored covers the rest.
/// `had`: the regions of which the node held a complete replica when it was
/// restored ([`NodeProcess::restored_complete`]).
///
/// False when `next` gives `me` no complete replica at all: the empty set
/// is a subset of anything, and that vacuous "hold" would let a node that
/// a committed configuration removed rejoin with only filling replicas
/// while keeping its old log, whose stale COMMIT-BACKUP record would then
/// make the next recovery commit a transaction the configuration that
/// removed it already settled as never committed, writing an old value
/// back over a committed delete (FaRM §5.2's precise membership).
fn restored_replicas_hold(next: &Configuration, had: &BTreeSet<RegionId>, me: NodeId) -> bool {
    let mine = complete_replicas(next, me);
    !had.is_empty() && !mine.is_empty() && mine.is_subset(had)
}

/// The regions of which `me` holds a complete replica in `c`: primary, or
/// backup not filling.
fn complete_replicas(c: &Configuration, me: NodeId) -> BTreeSet<RegionId> {
    c.regions()
        .iter()
        .filter(|r| r.primary == me || (r.backups.contains(&me) && !r.filling.contains(&me)))
        .map(|r| r.id)
        .collect()
}

impl NodeProcess {
    /// A CM restored from disk renews its configuration (retried after a
    /// failed attempt): every transaction of the crashed one then recovers
    /// and every member re-establishes its leases.
    pub(super) fn renew_after_restart(&mut self, now: u64) {
        if self.restored
            && self.standing == Standing::Member
            && self.config.cm() == self.id
            && self.reconfig.may_start()
            && self.reconfig.config().id() == self.config.id()
        {
            // The service may hold this CM's own last proposal, which the
            // crash kept it from applying: renew that one.
            match self.reconfig.service_config().cloned() {
                Some(base) if base.cm() == self.id => {
                    meridian_bugs::mark!("a restored CM renews its own stored proposal");
                    let mut next = base.renewed();
                    next.clock_epoch = next.config_id;
                    self.reconfig.propose_over(now, &base, next);
                }
                _ => {
                    meridian_bugs::mark!(
                        "a restored CM renews its configuration with a new clock epoch"
                    );
                    let mut next = self.config.renewed();
                    next.clock_epoch = next.config_id;
                    self.reconfig.propose(now, next);
                }
            }
            self.after_engines(now);
        }
    }

    /// A node restored from disk that the coordination service names as the
    /// CM of a configuration newer than the one it was restored in renews
    /// that configuration (whole-cluster restart). It won that CAS just
    /// before the crash and never applied the configuration (else it would
    /// have been restored in it), so it never sent its NEW-CONFIG, and
    /// nobody else will replace it: the other members were restored in
    /// older configurations whose CM's renewal CAS now fails, and they do
    /// not suspect a CM they never heard of (the CM of the replaced
    /// configuration retries its CAS over it forever). It proposes `base` renewed over it, as a restored
    /// CM does with its own last proposal (`renew_after_restart`), and only
    /// if every complete replica that gives it was complete when it was
    /// restored (none at all if it was filling everywhere), the rule every
    /// restored member applies to the NEW-CONFIG (see `on_reconfig`), so
    /// its own restored data is current (FaRM §5.2
    /// precise membership: no configuration after the restored one ran a
    /// transaction on those replicas without it).
    pub(super) fn renew_unapplied_proposal(&mut self, now: u64) {
        // The service's configuration: the replica hosted here, else what
        // a read of the service returned (a node without a replica never
        // sees the register otherwise, as when its CAS won, the answer was
        // lost, and it crashed and was restored).
        let Some(base) = self
            .service
            .as_ref()
            .map(|s| s.current().clone())
            .or_else(|| self.service_read.as_deref().cloned())
        else {
            return;
        };
        if base.cm() != self.id || base.id() <= self.config.id() || !self.reconfig.may_start() {
            return;
        }
        let mut next = base.renewed();
        // A restored CM's clock starts afresh: members and clients fail
        // over to it (`Configuration::clock_epoch`).
        next.clock_epoch = next.config_id;
        if !complete_replicas(&next, self.id).is_subset(&self.restored_complete()) {
            return;
        }
        meridian_bugs::mark!("a restored node renews a CAS it won and never applied");
        self.reconfig.propose_over(now, &base, next);
        self.after_engines(now);
    }

    /// The regions of which this node holds a complete replica under the
    /// configuration it holds: those the configuration lists complete, and
    /// those it lists as filling here whose data recovery had finished
    /// ([`Participant::is_filled`], journaled). A restored node that filled
    /// a region and reported it ready before a whole-cluster crash is
    /// listed complete by the next configuration, and the second part lets
    /// it accept that NEW-CONFIG.
    fn restored_complete(&self) -> BTreeSet<RegionId> {
        let mut had = complete_replicas(&self.config, self.id);
        let filled = self.filled_here(&self.config);
        if !filled.is_empty() {
            meridian_bugs::mark!("a restored node counts its journaled fills complete");
        }
        had.extend(filled);
        had
    }

    /// The regions configuration `c` lists as filling on this node whose
    /// data recovery finished under it ([`Participant::is_filled`]; the
    /// participant resets that when a configuration lists the region as
    /// filling anew). Empty if the participant runs another configuration.
    fn filled_here(&self, c: &Configuration) -> BTreeSet<RegionId> {
        if self.participant.config().id() != c.id() {
            return BTreeSet::new();
        }
        c.placement
            .iter()
            .filter(|r| r.filling.contains(&self.id) && self.participant.is_filled(r.id))
            .map(|r| r.id)
            .collect()
    }

    /// Tell the reconfiguration engine which regions this node finished
    /// filling in the configuration it runs ([`Reconfig::set_filled`]),
    /// before it answers or runs a probe.
    pub(super) fn sync_filled(&mut self) {
        let c = self.reconfig.config();
        let filled = self.filled_here(c);
        let id = c.id();
        self.reconfig.set_filled(id, filled);
    }

    /// A reconfiguration message (FaRM §5.2): probes, NEW-CONFIG and its
    /// ACK and COMMIT, joins and clock-rate reports.
    pub(super) fn on_reconfig(&mut self, now: u64, from: Peer, m: ReconfigMessage) {
        let claimed = match &m {
            ReconfigMessage::SuspectCm { from, .. }
            | ReconfigMessage::Probe { from, .. }
            | ReconfigMessage::ProbeReply { from, .. }
            | ReconfigMessage::ProbeFailed { from, .. }
            | ReconfigMessage::NewConfig { from, .. }
            | ReconfigMessage::NewConfigAck { from, .. }
            | ReconfigMessage::NewConfigCommit { from, .. }
            | ReconfigMessage::NewConfigCommitAck { from, .. }
            | ReconfigMessage::Join { from, .. }
            | ReconfigMessage::ClockRate { from, .. }
            | ReconfigMessage::ClockReady { from, .. } => *from,
        };
        let Some(from) = sender(from, Some(claimed)) else {
            return;
        };
        if !matches!(
            m,
            ReconfigMessage::ClockRate { .. } | ReconfigMessage::Join { .. }
        ) {
            // The lease thread hands out no time while a reconfiguration
            // message is handled: it may disable the clock, and the FF
            // value this input reports must cover every time handed out
            // (FaRMv2 §4.3). The view is published again at the end of the
            // input (`drain_effects`) if the clock still serves.
            self.lease.withdraw_master_clock();
        }
        if self.standing != Standing::Member {
            return self.on_reconfig_outside(now, from, m);
        }
        if let ReconfigMessage::Join { from: joiner, .. } = &m {
            self.on_join(now, *joiner);
            return;
        }
        if let ReconfigMessage::ClockRate { config, from, ppm } = m {
            self.on_clock_rate(now, config, from, ppm);
            return;
        }
        let counted_answer = matches!(m, ReconfigMessage::ProbeReply { .. })
            && self.reconfig.counts_probe_answers_of(from);
        if !self.config.is_member(from) && !counted_answer {
            // A stale node that a configuration removed: tell it, with the
            // CM's NEW-CONFIG (it then asks to join again). (Not a probe
            // answer from a member of the newer configuration the service
            // stores, whose majority the probe may count, such as a node
            // that configuration added back.)
            return self.tell_removed(from);
        }
        if let ReconfigMessage::NewConfigAck { config, .. } = &m {
            let (cfg, sent) = (self.config.id(), self.proposal_sent_ns);
            self.lease.with(now, |r, _| {
                if let LeaseRole::Cm(mgr) = r {
                    if *config == cfg {
                        mgr.granted_by(from, sent);
                    }
                }
            });
        }
        let upper = self.ff_value(now);
        // Grants to CMs other than the one proposing (NEW-CONFIG's sender).
        let asking = match &m {
            ReconfigMessage::NewConfig { from, .. } => *from,
            _ => self.config.cm(),
        };
        let left = self.lease.with(now, |r, now| match r {
            LeaseRole::Member(c) => c.cm_lease_left_ns(now, asking),
            _ => 0,
        });
        let acks_new_config = matches!(m, ReconfigMessage::NewConfig { .. });
        if matches!(
            m,
            ReconfigMessage::Probe { .. } | ReconfigMessage::ProbeReply { .. }
        ) {
            self.sync_filled();
        }
        if self.reconfig.on_message(now, m, upper, left) {
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.pause_renewals(now);
                }
            });
        }
        if self.reconfig.take_resume_renewals() {
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.resume_renewals(now);
                }
            });
        }
        self.after_engines(now);
        if acks_new_config {
            // A NEW-CONFIG-ACK this may have sent grants its CM a lease
            // (counted from the CM's send time): a later CM must outwait
            // it, even if no `GrantAck` follows (the CM dies first).
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.note_grant(now);
                }
            });
        }
    }

    /// A reconfiguration message at a node outside the configuration: a
    /// probe is answered as empty (if memory was lost), and only a
    /// NEW-CONFIG that adds this node back matters (it starts from
    /// scratch: memory is gone or stale).
    fn on_reconfig_outside(&mut self, now: u64, from: NodeId, m: ReconfigMessage) {
        if let ReconfigMessage::Probe { config, seq, .. } = &m {
            return self.answer_probe_outside(from, *config, *seq);
        }
        if let ReconfigMessage::NewConfig {
            config_toml,
            config,
            ..
        } = &m
        {
            // It must add this node as a *new* member: every replica it
            // holds there still filling. A configuration that lists it
            // with complete replicas predates its crash (its memory is
            // gone); the CM removes it once its lease runs out, and then
            // it joins.
            let me = self.id;
            // A restarted CM renewing the configuration this node was
            // restored in (whole-cluster restart): same members and
            // placement, next id. The node keeps its restored data.
            // Also a later one, as long as every complete replica it
            // gives this node was a complete replica when it was
            // restored (others come as filling): every configuration
            // after the restored one that committed needed this node's
            // ACK (which it would have journaled) unless it removed the
            // node, and after a removal the node comes back only as a
            // filling replica. So its data is current, also when the CM's
            // own proposal was stored but never applied, and when that
            // proposal removed a member, so that its renewal promotes this
            // node's backups and refills elsewhere.
            // That argument does not depend on who the CM is: every
            // configuration the service stores is derived from the one
            // it replaces (the CAS's expected id), so a complete replica
            // of this node in it was complete in every configuration
            // since the restored one, and a transaction writing it there
            // needed this node in that configuration (FaRM §5.2 precise
            // membership), which it would have journaled. So the later
            // one may come from another CM: the CM of the stored
            // configuration, which it never applied before the whole
            // cluster crashed, renews it (see `renew_unapplied_proposal`).
            let had = self.restored_complete();
            let renews_mine = self.restored
                && *config > self.config.id()
                && Configuration::from_toml(config_toml).is_ok_and(|c| {
                    let exact = config.0 == self.config.id().0 + 1
                        && c.members() == self.config.members()
                        && c.regions() == self.config.regions()
                        && c.cm() == self.config.cm();
                    let held = !exact && restored_replicas_hold(&c, &had, me);
                    if held {
                        meridian_bugs::mark!(
                            "a restored member accepts a later configuration its replicas allow"
                        );
                    }
                    exact
                        || held
                        || meridian_bugs::bug!(
                            self.bugs,
                            ReaddedKeepsLog,
                            if !had.is_empty() && complete_replicas(&c, me).is_empty()
                        )
                });
            if renews_mine {
                self.reconfig.rejoin();
                let upper = self.ff_value(now);
                self.reconfig.on_message(now, m, upper, 0);
                self.after_engines(now);
                return;
            }
            let adds_me = *config > self.config.id()
                && *config > self.probed_empty_in
                && Configuration::from_toml(config_toml).is_ok_and(|c| {
                    c.is_member(me)
                        && c.regions().iter().all(|r| {
                            (r.primary != me && !r.backups.contains(&me))
                                || (r.primary != me && r.filling.contains(&me))
                        })
                });
            if adds_me {
                self.reset_participant();
                self.reconfig.rejoin();
                let upper = self.ff_value(now);
                self.reconfig.on_message(now, m, upper, 0);
                self.after_engines(now);
            }
        }
    }

    /// A probe of configuration `config` at a node outside the
    /// configuration: answered as empty by a node that lost its memory,
    /// and in the two cases below; otherwise unanswered.
    fn answer_probe_outside(&mut self, from: NodeId, config: ConfigId, seq: u64) {
        // A removed node too, for a configuration newer than any it
        // applied: one that added it back (a join) but whose NEW-CONFIG
        // never reached it before its CM failed. It holds nothing that
        // configuration can use (a removed node comes back only with
        // filling replicas, and drops what it had), and it never granted
        // that configuration's CM a lease, so its answer counts toward the
        // prober's majority like a restarted one's (FaRM §5.2 step 2) and
        // it is left out of the next configuration, then joins again. This
        // lets the two others of a configuration of four replace it when
        // its CM dies right after its CAS with the joining member never
        // told.
        let removed_unaware =
            self.standing == Standing::Removed && config > self.config.id() && !self.restored;
        // A node restored from disk, probed in the configuration it was
        // restored in, answers as empty too: its old incarnation is gone
        // just as a memory-less restart's is, so it is on no side of a
        // partition and grants the old CM nothing, and the prober leaves
        // it out of the next configuration, after which it joins again (as
        // a restored node the CM removed with a majority of its own already
        // does). This gives a CM of four whose two other members crashed
        // and came back from disk its majority. Only its own configuration:
        // a probe of a newer one comes from a member that applied a
        // proposal this node never acknowledged, such as its CM's renewal
        // after a whole-cluster restart, where staying silent lets the CM
        // resend that NEW-CONFIG and keep this node's restored data, while
        // an empty answer would have the CM drop it.
        let restored_same =
            self.standing == Standing::Restarted && self.restored && config == self.config.id();
        if (self.standing == Standing::Restarted && !self.restored)
            || removed_unaware
            || restored_same
        {
            if removed_unaware {
                meridian_bugs::mark!("a removed node unaware of it answers a probe as empty");
            }
            if restored_same {
                meridian_bugs::mark!(
                    "a restored node answers a probe of its configuration as empty"
                );
            }
            // Never again accept a NEW-CONFIG of this configuration (from
            // its old CM): having counted toward a successor's probe, this
            // node must not grant that CM a lease.
            self.probed_empty_in = self.probed_empty_in.max(config);
            let reply = ReconfigMessage::ProbeReply {
                config,
                from: self.id,
                seq,
                empty: true,
                filled: Vec::new(),
            };
            self.send_oneway(from, Request::Reconfig(reply));
        }
    }

    /// FaRM §5.2: a node asks to join; the CM adds it (as a backup of
    /// regions short of replicas, filled by data recovery).
    fn on_join(&mut self, now: u64, joiner: NodeId) {
        if self.config.cm() != self.id {
            return;
        }
        if self.config.is_member(joiner) {
            // A member that asks to join lost its memory: once removed it
            // is added back as a new member.
            meridian_bugs::mark!("a member's JOIN forfeits its lease grace at the CM");
            self.lease.with(now, |r, now| {
                if let LeaseRole::Cm(m) = r {
                    m.forfeit_grace(joiner, now);
                }
            });
            return;
        }
        let Ok(node) = self.config.node(joiner).cloned() else {
            return; // not in the address book: unknown nodes are refused
        };
        if let Ok(next) = self.reconfig.config().with_joined(node) {
            self.reconfig.propose(now, next);
            self.after_engines(now);
        }
    }

    /// Send `node` (not a member) the current configuration, so that it
    /// learns it was removed.
    pub(super) fn tell_removed(&mut self, node: NodeId) {
        if let Ok(config_toml) = self.config.to_toml() {
            let msg = ReconfigMessage::NewConfig {
                config: self.config.id(),
                from: self.config.cm(),
                config_toml,
            };
            self.send_oneway(node, Request::Reconfig(msg));
        }
    }

    /// The coordination service answered this node's CAS.
    pub fn on_cas_result(&mut self, now: u64, result: Result<(), Box<Configuration>>) {
        if result.is_ok() {
            // The CAS answer's bound came first (on_time_bound).
            self.takeover_bound_ns = self.time_bound_ns;
            let next = ConfigId(self.reconfig.config().id().0 + 1);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ConfigCas(next)));
        }
        let me = self.id;
        let nodes: Vec<NodeId> = self
            .reconfig
            .config()
            .nodes
            .iter()
            .map(|n| NodeId(n.id))
            .collect();
        let (surely, left) = self.lease.with(now, |r, now| {
            let surely: BTreeMap<NodeId, u64> = nodes
                .iter()
                .map(|&n| {
                    let t = match r {
                        LeaseRole::Cm(m) => m.surely_expired_at(LeaseHolder::Node(n), now),
                        _ => now,
                    };
                    (n, t)
                })
                .collect();
            // This node too may have granted the replaced CM a lease.
            let left = match r {
                LeaseRole::Member(c) => Some(c.cm_lease_left_ns(now, me)),
                _ => None,
            };
            (surely, left)
        });
        self.reconfig.on_cas(now, result.map_err(|c| *c), |n| {
            surely.get(&n).copied().unwrap_or(now)
        });
        if let Some(left) = left {
            self.reconfig.extend_commit_wait(now, left);
        }
        self.after_engines(now);
        self.keep_time_bound_ahead(now);
        self.pump(now);
    }

    /// Carry out what the reconfiguration and recovery engines asked for.
    pub(super) fn after_engines(&mut self, now: u64) {
        loop {
            let outs = self.reconfig.drain();
            if outs.is_empty() {
                break;
            }
            for o in outs {
                match o {
                    ReconfigOutput::Send { to, msg } => {
                        self.send_oneway(to, Request::Reconfig(msg))
                    }
                    ReconfigOutput::Cas { expected, proposed } => {
                        if self.cas.is_external() {
                            self.effects.push(NodeEffect::Cas { expected, proposed })
                        } else {
                            self.cas
                                .hint_leader(self.service.as_ref().and_then(|r| r.leader()));
                            self.cas.start(now, expected, *proposed);
                            self.after_cas(now);
                        }
                    }
                    ReconfigOutput::Applied { config, .. } => self.apply_config(now, *config),
                    ReconfigOutput::ReadStored => {
                        // An external service (the shell's) answers CASes
                        // only; its members learn a newer configuration
                        // from their next CAS.
                        if !self.cas.is_external() {
                            self.cas.read(now);
                            self.after_cas(now);
                        }
                    }
                    ReconfigOutput::RegionLost { config, detail } => {
                        self.effects
                            .push(NodeEffect::Event(NodeEvent::RegionLost(config, detail)));
                    }
                    ReconfigOutput::Removed { config } => {
                        // Whatever it holds is stale now (a restored CM
                        // whose cluster went on, or a removed member).
                        if self.restored {
                            self.reset_participant();
                            self.restored = false;
                        }
                        self.standing = Standing::Removed;
                        self.lease.set_serving(false);
                        self.next_join_ns = now;
                        self.effects
                            .push(NodeEffect::Event(NodeEvent::Removed(config)));
                    }
                    ReconfigOutput::Committed {
                        config,
                        clock_ff_ns,
                    } => self.commit_config(now, config, clock_ff_ns),
                    ReconfigOutput::ClockReady { clock_ff_ns, .. } => {
                        self.take_over_clock(now, clock_ff_ns)
                    }
                }
            }
        }
        for (to, msg) in self.recovery.drain() {
            self.send_oneway(to, Request::Recovery(msg));
        }
        let cfg = self.config.id();
        if !self.regions_active_reported && self.participant.blocked_regions().is_empty() {
            self.regions_active_reported = true;
            self.effects
                .push(NodeEffect::Event(NodeEvent::RegionsActive(cfg)));
        }
        if !self.data_recovered_reported && self.recovery.filling_regions().is_empty() {
            self.data_recovered_reported = true;
            self.effects
                .push(NodeEffect::Event(NodeEvent::DataRecovered(cfg)));
        }
    }

    /// FaRM §5.2 step 6: run configuration `config` (blocked regions until
    /// recovery; clocks disabled until the commit's FF and a sync with the
    /// master).
    ///
    /// A clock failover happens when the CM changes and also when a CM
    /// restarted from disk renews its configuration
    /// ([`Configuration::clock_master_changed_from`]): its clock starts
    /// afresh at the bound its CAS returned, and a member that kept the
    /// samples of its previous incarnation would stay on the old timeline:
    /// a client on the old samples could commit a write at a `write_ts`
    /// below a `read_ts` a client on the new master has already read at.
    /// (Clocks do not fail over at every configuration: that storms
    /// transactions with aborts.)
    fn apply_config(&mut self, now: u64, config: Configuration) {
        self.effects
            .push(NodeEffect::Event(NodeEvent::Applied(config.id())));
        self.participant.reconfigure(&config);
        // The previous configuration's recovery ends here: it would vote
        // and apply decisions on a participant that left it.
        self.recovery.stop();
        self.gateway.set_config(now, &config);
        self.rate_reports.clear();
        self.rate_decide_at = None;
        let members = config.members();
        if config.cm() == self.id {
            self.proposal_sent_ns = now;
            let (params, me) = (self.lease_params, self.id);
            self.lease.with(now, |r, now| match r {
                LeaseRole::Cm(m) => m.set_config(now, config.id(), &members),
                _ => {
                    *r = LeaseRole::Cm(
                        LeaseManager::new(params, config.id(), me, &members, now)
                            .with_max_clients(config.limits.max_client_leases),
                    )
                }
            });
        } else {
            let (params, me) = (self.lease_params, self.id);
            self.lease.with(now, |r, now| match r {
                LeaseRole::Member(c) => c.reset(now, config.id(), config.cm()),
                _ => {
                    *r = LeaseRole::Member(LeaseClient::new(
                        params,
                        LeaseHolder::Node(me),
                        config.id(),
                        config.cm(),
                        now,
                    ))
                }
            });
        }
        let failover = config.clock_master_changed_from(&self.config);
        if failover {
            self.lease.withdraw_master_clock();
            self.gateway.clock_mut().disable();
        }
        self.clock_failover |= failover;
        self.standing = Standing::Member;
        self.lease.set_members(config.members());
        self.lease.set_serving(true);
        self.restored = false;
        self.regions_active_reported = false;
        // Armed by the commit, which starts data recovery: before it no
        // replica is being filled, and reporting then would put "data
        // recovered" before the configuration even committed.
        self.data_recovered_reported = true;
        self.config = config;
    }

    /// FaRM §5.2 step 7 and FaRMv2 §4.3: the configuration committed.
    fn commit_config(&mut self, now: u64, config: ConfigId, clock_ff_ns: u64) {
        self.effects
            .push(NodeEffect::Event(NodeEvent::Committed(config)));
        self.take_over_clock(now, clock_ff_ns);
        self.recovery
            .start(now, &self.config, &mut self.participant);
        self.data_recovered_reported = false;
        self.keep_time_bound_ahead(now);
    }

    /// FaRM §5.4 at the CM: once nothing is being reconfigured, recovered
    /// or filled, install the next half of a make-before-break move
    /// ([`Configuration::rebalance_step`]: add a filling replica on a
    /// lightly loaded member, or, once it is filled, drop the old one), so
    /// a node that joined gets regions while every region keeps f + 1
    /// complete replicas. One step at a time: the next waits until the new
    /// replica is filled (data recovery is paced) and a lease has passed.
    pub(super) fn rebalance_tick(&mut self, now: u64) {
        if self.config.cm() != self.id
            || now < self.next_rebalance_ns
            || !self.reconfig.may_start()
            || self.reconfig.config().id() != self.config.id()
            || self.recovery.busy()
            || self
                .reconfig
                .config()
                .regions()
                .iter()
                .any(|r| !r.filling.is_empty())
        {
            return;
        }
        self.next_rebalance_ns = now + self.lease_params.lease_ns;
        if let Some((next, step)) = self.reconfig.config().rebalance_step() {
            self.effects.push(NodeEffect::Event(NodeEvent::Rebalance {
                config: next.id(),
                step,
            }));
            self.reconfig.propose(now, next);
            self.after_engines(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::{CoordMessage, Frame};

    /// n3 wins the CAS of 2 (CM n3, members 2-4), its answer is lost, and
    /// n3 crashes before applying 2. Restored in 1, it hosts no
    /// coordination replica (the group is n0-n2), so nothing tells it that
    /// the service names it the CM of 2; the old CM (removed by 2) and the
    /// survivors (a minority of 1 without the restored, silent nodes)
    /// cannot replace it either. It must read the service and renew 2.
    #[test]
    fn a_restored_node_without_a_replica_renews_the_configuration_it_won() {
        let c1 = Configuration::local(5, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        assert!(!c1.coordination_group().contains(&NodeId(3)));
        let alive = [2, 3, 4].into_iter().map(NodeId).collect();
        let c2 = c1.remap(&alive, NodeId(3)).unwrap();
        let mut n3 = NodeProcess::restore(c1.clone(), NodeId(3), 2, None, &[]).unwrap();
        n3.tick(1_000);
        let read = n3.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Send {
                to: Peer::Node(to),
                frame:
                    Frame::OneWay {
                        req: Request::Coord(CoordMessage::Read { req, .. }),
                        ..
                    },
            } => Some((to, req)),
            _ => None,
        });
        let (to, req) = read.expect("a restored node without a replica reads the service");
        let answer = CoordMessage::CasReply {
            req,
            swapped: false,
            current_toml: c2.to_toml().unwrap(),
            time_bound_ns: 0,
            cm: NodeId(3),
        };
        n3.on_message(
            2_000,
            Peer::Node(to),
            Frame::OneWay {
                config: ConfigId(1),
                truncate: Default::default(),
                req: Request::Coord(answer),
            },
        );
        let cas = n3.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Send {
                frame:
                    Frame::OneWay {
                        req:
                            Request::Coord(CoordMessage::Cas {
                                expected,
                                proposed_toml,
                                ..
                            }),
                        ..
                    },
                ..
            } => Some((expected, proposed_toml)),
            _ => None,
        });
        let (expected, proposed) = cas.expect("it renews the stored configuration");
        assert_eq!(expected, ConfigId(2));
        let next = Configuration::from_toml(&proposed).unwrap();
        assert_eq!((next.id(), next.cm()), (ConfigId(3), NodeId(3)));
        assert_eq!(next.members(), c2.members());
    }

    /// n0, CM of a configuration of four, sees n2 and n4 crash and come
    /// back restored from disk. Were restored nodes silent to probes, n0
    /// and n3 (two of four) could never replace the configuration. A
    /// restored node answers a probe of the configuration
    /// it was restored in as empty (it counts toward the majority and is
    /// left out, then joins again); a probe of a newer configuration stays
    /// unanswered (its CM's renewal may still come for it).
    #[test]
    fn a_restored_node_answers_a_probe_of_its_configuration_as_empty() {
        let c1 = Configuration::local(5, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        let mut n3 = NodeProcess::restore(c1.clone(), NodeId(3), 2, None, &[]).unwrap();
        n3.drain_effects();
        let probe = |n3: &mut NodeProcess, config: ConfigId, seq: u64| {
            n3.on_message(
                1_000 + seq,
                Peer::Node(NodeId(0)),
                Frame::OneWay {
                    config,
                    truncate: Default::default(),
                    req: Request::Reconfig(ReconfigMessage::Probe {
                        config,
                        from: NodeId(0),
                        seq,
                    }),
                },
            );
            n3.drain_effects()
                .into_iter()
                .filter_map(|e| match e {
                    NodeEffect::Send {
                        to: Peer::Node(to),
                        frame:
                            Frame::OneWay {
                                req: Request::Reconfig(r @ ReconfigMessage::ProbeReply { .. }),
                                ..
                            },
                    } => Some((to, r)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let same = probe(&mut n3, c1.id(), 1);
        assert_eq!(
            same,
            vec![(
                NodeId(0),
                ReconfigMessage::ProbeReply {
                    config: c1.id(),
                    from: NodeId(3),
                    seq: 1,
                    empty: true,
                    filled: Vec::new(),
                }
            )],
            "a restored node answers a probe of its own configuration as empty"
        );
        let newer = probe(&mut n3, ConfigId(c1.id().0 + 1), 2);
        assert!(
            newer.is_empty(),
            "a probe of a newer configuration got {newer:?}"
        );
    }
}
