//! # Reconfiguration: suspect, probe, CAS, remap, NEW-CONFIG, apply, commit (FaRM §5.2, FaRMv2 §4.3)
//!
//! **Problem.** When a member fails, the survivors must agree on a new
//! configuration — members, CM, region placement — such that exactly one
//! configuration follows each one, a minority cut off by a partition can
//! never make one, and no machine removed from the configuration still
//! serves once the new one lets regions move.
//!
//! **Algorithm.** One [`Reconfig`] engine per node, driven by its node
//! process:
//! 1. *Suspect.* The CM suspects the members whose lease expired
//!    ([`Reconfig::suspect_members`]). A member that suspects the CM
//!    ([`Reconfig::suspect_cm`]) starts at once if it is the first backup
//!    CM (the CM's successor among the members, in id order); otherwise it
//!    sends `SuspectCm` to that backup and waits `rank × probe_timeout`
//!    before trying itself, so a CM failure does not start many attempts.
//! 2. *Probe.* The would-be CM probes every member but the suspects and
//!    waits up to `probe_timeout` for replies. It goes on only if the
//!    replies and itself are a majority of the current members. A member
//!    that restarted without its memory answers as *empty*: it counts
//!    toward the majority (its old incarnation is gone, so it is on no
//!    other side of a partition and grants the old CM nothing) but is left
//!    out of the new configuration, and joins again afterwards. A member
//!    answering a probe from someone other than its CM stops renewing its
//!    lease with the old CM (so the old CM loses its majority within one
//!    lease; see `lease`). A probe that finds no majority reads the
//!    configuration the service stores ([`ReconfigOutput::ReadStored`]):
//!    if a CM stored a newer one and failed before its NEW-CONFIG reached
//!    anyone, the next probe is of that one (under its id, to its members
//!    and the current ones), a majority of either will do, and the remap
//!    starts from it ([`Reconfig::on_stored`]).
//! 3. *CAS.* It asks the coordination service to replace configuration
//!    `c` by `c + 1` ([`ReconfigOutput::Cas`]): only one machine can win.
//! 4. *Remap.* `c + 1` is [`Configuration::remap`] of `c` with the probed
//!    members and itself as CM: failed primaries are replaced by a backup,
//!    missing replicas refilled.
//! 5. *NEW-CONFIG* to every member of `c + 1`, resent until acknowledged.
//! 6. *Apply.* A member with a lower configuration applies it
//!    ([`ReconfigOutput::Applied`]): from then on it refuses messages of
//!    older configurations and blocks requests; it acknowledges with
//!    NEW-CONFIG-ACK (a lease grant to the new CM) carrying the upper bound
//!    of its clock.
//! 7. *Commit.* Once every member acknowledged and the removed members'
//!    leases have surely expired, the CM sends NEW-CONFIG-COMMIT with the
//!    fast-forward time FF, the maximum of the reported upper bounds
//!    (FaRMv2 §4.3), and every member unblocks and starts transaction
//!    recovery ([`ReconfigOutput::Committed`]).
//!
//! A prober whose CAS is in flight leaves a NEW-CONFIG of an older
//! configuration unanswered until its CAS is decided: applying it would
//! drop an attempt that may still win (the service would then hold a
//! configuration nobody drives), and acknowledging it would grant the old
//! CM a lease the prober's own commit does not outwait.
//!
//! **The lease wait** (step 7). If the CM is unchanged, it waits until the
//! last grant it sent to each removed member has surely run out
//! ([`crate::lease::LeaseManager::surely_expired_at`]). A new CM does not
//! know the old CM's grants; it knows that every probed member stopped
//! renewing the old CM when it answered the probe, so the old CM lost its
//! majority — and stopped serving and granting — within one lease of the
//! probe's end, and any lease it granted before ended within one more. It
//! waits one lease (`surely_over`) after the probe if the old CM is the
//! only machine removed, two otherwise.
//!
//! **Invariants** (`check_invariants`): the configuration id only grows; a
//! proposal is exactly one above the configuration it replaces; the
//! committed configuration contains this node unless it was removed.

use crate::lease::LeaseParams;
use meridian_config::Configuration;
use meridian_wire::{ConfigId, NodeId, ReconfigMessage};
use std::collections::{BTreeMap, BTreeSet};

/// Reconfiguration timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconfigParams {
    /// The lease timing (waits are derived from it).
    pub lease: LeaseParams,
    /// How long a prober waits for replies, and the spacing between backup
    /// CMs' attempts, ns.
    pub probe_timeout_ns: u64,
    /// How often unanswered NEW-CONFIG / NEW-CONFIG-COMMIT are resent, ns.
    pub resend_ns: u64,
    /// Backup CMs: the CM's successors that may start a reconfiguration
    /// before anyone else (FaRM §5.2 step 1's "small number").
    pub backup_cms: usize,
    /// The clock's maximum sample age (`clock.max_sample_age_us`), ns: when
    /// the CM (the clock master) changes, the commit — and with it the new
    /// master's clock — waits this much past the end of the old CM's
    /// leases, so every process that synchronised with the old master has
    /// stopped handing out its time (FaRMv2 §4.3's lease-expiry wait).
    pub clock_sample_age_ns: u64,
}

/// What the engine asks of its node.
#[derive(Clone, Debug, PartialEq)]
pub enum ReconfigOutput {
    /// Send `msg` to member `to` (one-way).
    Send {
        /// Destination.
        to: NodeId,
        /// The message.
        msg: ReconfigMessage,
    },
    /// Ask the coordination service to replace configuration `expected`
    /// by `proposed`; the answer comes back through [`Reconfig::on_cas`].
    Cas {
        /// The configuration being replaced.
        expected: ConfigId,
        /// Its successor.
        proposed: Box<Configuration>,
    },
    /// Step 6: apply this configuration (block requests, refuse older
    /// configurations; if its clock master changed,
    /// `Configuration::clock_master_changed_from`, disable clocks until the
    /// commit's FF: FaRMv2 §4.3). `cm_changed` is informational (the CM's
    /// own lease waits use it inside this engine).
    Applied {
        /// The configuration.
        config: Box<Configuration>,
        /// True if its CM differs from the previous one.
        cm_changed: bool,
    },
    /// This node is not a member of the configuration it was sent: it must
    /// stop serving (a restart joins as a new incarnation).
    Removed {
        /// The configuration that removed it.
        config: ConfigId,
    },
    /// A region lost every complete replica: no configuration can follow
    /// `config` (FaRM §5.2: "signals an error"; in memory mode the data is
    /// gone). Reported once per configuration; attempts go on in case a
    /// member was only slow.
    RegionLost {
        /// The configuration that cannot be replaced.
        config: ConfigId,
        /// Which region, and its replicas.
        detail: String,
    },
    /// FaRMv2 §4.3, ahead of step 7: the old clock master surely hands
    /// out no time any more, so the new master takes over at
    /// `clock_ff_ns` and members follow it, while the commit still waits
    /// for the leases of other removed members (a data wait, not a clock
    /// wait: their samples of the old master have expired too).
    ClockReady {
        /// The configuration.
        config: ConfigId,
        /// Fast-forward time, ns.
        clock_ff_ns: u64,
    },
    /// A probe found no majority: ask the coordination service which
    /// configuration it stores, and hand the answer to
    /// [`Reconfig::on_stored`]. A newer one may have been stored by a CM
    /// that failed before its NEW-CONFIG reached anyone, leaving members
    /// that only a probe over it can gather.
    ReadStored,
    /// Step 7: the applied configuration is committed; unblock, set the
    /// clock to at least `clock_ff_ns`, start transaction recovery.
    Committed {
        /// The configuration.
        config: ConfigId,
        /// Fast-forward time, ns.
        clock_ff_ns: u64,
    },
}

#[derive(Clone, Debug)]
enum State {
    /// Serving (or blocked waiting for NEW-CONFIG-COMMIT if `applied`).
    Member,
    /// Waiting for the first backup CM before trying (step 1).
    Deferred { until_ns: u64 },
    /// Step 2.
    Probing {
        /// The configuration probed: this node's, or the newer one the
        /// service stores ([`Reconfig::probe_base`]). Probes and their
        /// answers carry it, so that a member answering as empty refuses
        /// that configuration's NEW-CONFIG from its old CM afterwards
        /// (probed under the older id, a member that answered empty could
        /// apply the newer configuration from its CM, which would go on
        /// serving the clock beside the prober's).
        probed: ConfigId,
        seq: u64,
        suspects: BTreeSet<NodeId>,
        replied: BTreeSet<NodeId>,
        /// Members that answered from outside every configuration: they
        /// restarted empty (count toward the majority, hold nothing).
        empty: BTreeSet<NodeId>,
        /// Regions each replier finished filling in this configuration
        /// (its `ProbeReply::filled`): counted complete at the remap.
        filled: BTreeMap<NodeId, Vec<meridian_wire::RegionId>>,
        deadline_ns: u64,
        /// The suspects were probed too (only their empty answers count).
        ask_suspects: bool,
    },
    /// Step 3.
    Casing {
        proposed: Box<Configuration>,
        probe_end_ns: u64,
        /// When to ask the service again after a CAS that got no answer
        /// (see [`Reconfig::on_cas`]); `None` while one is in flight.
        ask_again_ns: Option<u64>,
    },
    /// Steps 5–7 at the new CM.
    Proposing {
        /// When NEW-CONFIG was first sent (every ACK was sent after it).
        proposed_at_ns: u64,
        proposed: Box<Configuration>,
        acks: BTreeMap<NodeId, u64>,
        commit_after_ns: u64,
        /// Waited past the end of every lease a member reports it granted
        /// the old CM (NEW-CONFIG-ACK's `cm_lease_left_ns`) before commit:
        /// the clock's maximum sample age when the CM (the clock master)
        /// changes, plus one lease when other members are removed with it
        /// (the old CM granted their leases only while it held its
        /// majority, which those reported grants bound), else 0.
        after_grants_ns: u64,
        /// The proposal replaces the CM: the leases members granted the
        /// old CM must be over before the commit. With the CM unchanged
        /// there is no old CM to outwait.
        cm_changed: bool,
        next_resend_ns: u64,
        /// When the CM changes: the clock takes over once every member
        /// acknowledged and this has passed (the old master's grants plus
        /// the clock samples' age, without the extra lease for other
        /// removed members); then the FF it took over at.
        clock_after_ns: u64,
        clock_ff_ns: Option<u64>,
    },
    /// After step 7 at the CM: resend NEW-CONFIG-COMMIT until acknowledged.
    Committing {
        config: ConfigId,
        clock_ff_ns: u64,
        acked: BTreeSet<NodeId>,
        next_resend_ns: u64,
    },
}

/// NEW-CONFIG-COMMIT of `config` from `me`, and the members of `current`
/// that have not acknowledged it.
fn commit_to_unacked(
    current: &Configuration,
    me: NodeId,
    config: ConfigId,
    clock_ff_ns: u64,
    acked: &BTreeSet<NodeId>,
) -> (ReconfigMessage, Vec<NodeId>) {
    let msg = ReconfigMessage::NewConfigCommit {
        config,
        from: me,
        clock_ff_ns,
    };
    let to = current
        .members()
        .into_iter()
        .filter(|m| !acked.contains(m))
        .collect();
    (msg, to)
}

/// FaRMv2 §4.3's FF at the new CM: the largest upper bound the members
/// acknowledged with (`acks`), carried forward by the time since NEW-CONFIG
/// went out at `proposed_at_ns`, with drift — the old master may have kept
/// handing out time until its lease ran out — and at least this node's own
/// upper bound.
fn fast_forward(
    acks: &BTreeMap<NodeId, u64>,
    proposed_at_ns: u64,
    now: u64,
    own_upper_ns: u64,
    drift_ppm: u64,
) -> u64 {
    let elapsed = now.saturating_sub(proposed_at_ns);
    let carried =
        elapsed.saturating_add((elapsed as u128 * drift_ppm as u128).div_ceil(1_000_000) as u64);
    acks.values()
        .copied()
        .max()
        .unwrap_or(0)
        .saturating_add(carried)
        .max(own_upper_ns)
}

/// One node's reconfiguration engine (see the module essay).
#[derive(Clone, Debug)]
pub struct Reconfig {
    me: NodeId,
    params: ReconfigParams,
    /// The configuration this node runs: committed, or applied and waiting
    /// for its commit (`pending_commit`).
    config: Configuration,
    pending_commit: bool,
    /// A commit this CM left unfinished to probe suspects (config, FF,
    /// members that acknowledged it): NEW-CONFIG-COMMIT is still resent to
    /// the others until they acknowledge or a newer configuration comes. A
    /// member that was only cut off for a while would otherwise wait for
    /// the commit forever, and recovery with it.
    unfinished_commit: Option<(ConfigId, u64, BTreeSet<NodeId>)>,
    /// When this member first suspected the CM of this configuration.
    cm_suspected_since: Option<(ConfigId, u64)>,
    next_commit_resend_ns: u64,
    /// The configuration a lost region was last reported for.
    lost_reported: Option<ConfigId>,
    /// Probes this member answered from would-be CMs (prober → round,
    /// answered at ns): each paused its renewals with the CM.
    answered: BTreeMap<NodeId, (u64, u64)>,
    /// Every answered prober gave up: renew with the CM again now.
    resume_renewals: bool,
    /// A newer configuration the coordination service returned when our
    /// CAS lost, whose NEW-CONFIG never came (its CM may have died right
    /// after its CAS): the next attempt remaps from it.
    service_config: Option<Box<Configuration>>,
    removed: bool,
    state: State,
    next_probe_seq: u64,
    /// The proposal [`Reconfig::abandon_unacked`] left for a probe: if the
    /// probe cannot make a successor (a minority, or a lost region), the
    /// CM goes back to it, resending NEW-CONFIG, rather than sit with an
    /// applied configuration nobody will ever commit.
    abandoned: Option<Box<State>>,
    /// Regions this node holds as a filling replica in the configuration
    /// named and has finished filling there ([`Reconfig::set_filled`]);
    /// used only while that is still `config` ([`Reconfig::filled_here`]).
    filled_here: (ConfigId, BTreeSet<meridian_wire::RegionId>),
    out: Vec<ReconfigOutput>,
}

impl Reconfig {
    /// Node `me` running committed configuration `config`.
    pub fn new(me: NodeId, params: ReconfigParams, config: Configuration) -> Self {
        Reconfig {
            me,
            params,
            config,
            pending_commit: false,
            unfinished_commit: None,
            cm_suspected_since: None,
            next_commit_resend_ns: 0,
            lost_reported: None,
            answered: BTreeMap::new(),
            resume_renewals: false,
            service_config: None,
            removed: false,
            state: State::Member,
            next_probe_seq: 1,
            abandoned: None,
            filled_here: (ConfigId(0), BTreeSet::new()),
            out: Vec::new(),
        }
    }

    /// Tell the engine which regions this node holds as a filling replica
    /// in configuration `config` and has finished filling there (FaRM
    /// §5.4; the node's `ReplicaReady` to the CM says the same). A probe
    /// of `config` reports them, and a probe this node runs counts its own
    /// complete at the remap: the CM marks a filled replica ready only in
    /// its own memory ([`Reconfig::mark_ready`]), so if the CM fails before
    /// a configuration records it, its successor would otherwise take the
    /// region's last complete replica for its only one and report the
    /// region lost when that replica fails, although filled copies exist.
    /// Ignored for any configuration but the one this node runs.
    pub fn set_filled(&mut self, config: ConfigId, regions: BTreeSet<meridian_wire::RegionId>) {
        self.filled_here = (config, regions);
    }

    /// [`Reconfig::set_filled`]'s regions if they were given for the
    /// configuration this node runs now, else none (a newer configuration
    /// may list the same region as filling anew, its copy reset).
    fn filled_here(&self) -> Vec<meridian_wire::RegionId> {
        if self.filled_here.0 == self.config.id() {
            self.filled_here.1.iter().copied().collect()
        } else {
            Vec::new()
        }
    }

    /// True while this node probes (a tick may end the probe).
    pub fn probing(&self) -> bool {
        matches!(self.state, State::Probing { .. })
    }

    /// The configuration this node runs.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// True between applying a configuration and its commit (requests are
    /// blocked), or while this node leads a reconfiguration.
    pub fn reconfiguring(&self) -> bool {
        self.pending_commit
            || !matches!(
                self.state,
                State::Member | State::Committing { .. } | State::Deferred { .. }
            )
    }

    /// True once a configuration removed this node.
    pub fn removed(&self) -> bool {
        self.removed
    }

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

    /// The newer configuration the coordination service returned when this
    /// node's CAS lost, if its NEW-CONFIG never came.
    pub fn service_config(&self) -> Option<&Configuration> {
        self.service_config.as_deref()
    }

    /// The configuration a probe tries to replace (FaRM §5.2 step 2): the
    /// service's newer one if a lost CAS or a read returned it (its
    /// NEW-CONFIG never came), else this node's.
    fn probe_base(&self) -> &Configuration {
        match &self.service_config {
            Some(c) if c.id() > self.config.id() => c,
            _ => &self.config,
        }
    }

    /// The member sets a probe may find a majority of: this node's
    /// configuration's, and the service's newer one's if known (a
    /// majority of either will do; the CAS decides between contenders).
    fn probe_member_sets(&self) -> Vec<Vec<NodeId>> {
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
        self.service_config = Some(Box::new(stored));
    }

    /// This node is not a member of the configuration it starts from (a
    /// spare in the address book): like a removed node, it takes part in
    /// nothing until a NEW-CONFIG adds it ([`Reconfig::rejoin`]).
    pub fn outside(&mut self) {
        self.removed = true;
        self.state = State::Member;
    }

    /// A removed or restarted node is about to be added again: accept the
    /// NEW-CONFIG that includes it.
    pub fn rejoin(&mut self) {
        self.removed = false;
        self.pending_commit = false;
        self.abandoned = None;
        self.state = State::Member;
    }

    /// True when an attempt could start now (not deferred, not running).
    pub fn may_start(&self) -> bool {
        !self.removed && !self.pending_commit && matches!(self.state, State::Member)
    }

    /// True when the CM may start removing members whose lease expired: as
    /// [`Reconfig::may_start`], but also while it still resends
    /// NEW-CONFIG-COMMIT — to a member that died meanwhile it would resend
    /// forever, and data recovery waits for that member.
    pub fn may_suspect_members(&self) -> bool {
        !self.removed
            && !self.pending_commit
            && matches!(self.state, State::Member | State::Committing { .. })
    }

    /// True when this member may suspect its CM (FaRM §5.2 step 1): as
    /// [`Reconfig::may_start`], but also while it waits for the commit of
    /// a configuration it applied — a CM that dies between NEW-CONFIG and
    /// NEW-CONFIG-COMMIT is replaced like any other; otherwise its members
    /// stay blocked forever.
    pub fn may_suspect_cm(&self) -> bool {
        !self.removed && matches!(self.state, State::Member)
    }

    /// Take the outputs produced so far, in order.
    pub fn drain(&mut self) -> Vec<ReconfigOutput> {
        std::mem::take(&mut self.out)
    }

    fn send(&mut self, to: NodeId, msg: ReconfigMessage) {
        if to != self.me {
            self.out.push(ReconfigOutput::Send { to, msg });
        }
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
            self.start_probe(now, [cm].into_iter().collect());
        } else {
            let me = self.me;
            self.send(ring[0], ReconfigMessage::SuspectCm { config, from: me });
            self.state = State::Deferred {
                until_ns: now.saturating_add(self.params.probe_timeout_ns * 2 * rank as u64),
            };
        }
    }

    fn start_probe(&mut self, now: u64, suspects: BTreeSet<NodeId>) {
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

    fn maybe_end_probe(&mut self, now: u64) {
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

    fn apply(&mut self, config: Configuration) {
        let cm_changed = config.cm() != self.config.cm();
        self.answered.clear();
        if self
            .service_config
            .as_ref()
            .is_some_and(|c| c.id() <= config.id())
        {
            self.service_config = None;
        }
        self.config = config.clone();
        self.pending_commit = true;
        // A newer configuration supersedes any abandoned proposal.
        self.abandoned = None;
        self.out.push(ReconfigOutput::Applied {
            config: Box::new(config),
            cm_changed,
        });
    }

    /// Resend NEW-CONFIG (while proposing) or NEW-CONFIG-COMMIT (while
    /// committing) to the members that have not answered, if due.
    fn resend(&mut self, now: u64) {
        let me = self.me;
        let (msg, to) = match &mut self.state {
            State::Proposing {
                proposed,
                acks,
                next_resend_ns,
                ..
            } if now >= *next_resend_ns => {
                *next_resend_ns = now.saturating_add(self.params.resend_ns);
                let Ok(config_toml) = proposed.to_toml() else {
                    return;
                };
                let msg = ReconfigMessage::NewConfig {
                    config: proposed.id(),
                    from: me,
                    config_toml,
                };
                let to: Vec<NodeId> = proposed
                    .members()
                    .into_iter()
                    .filter(|m| !acks.contains_key(m))
                    .collect();
                (msg, to)
            }
            State::Committing {
                config,
                clock_ff_ns,
                acked,
                next_resend_ns,
            } if now >= *next_resend_ns => {
                *next_resend_ns = now.saturating_add(self.params.resend_ns);
                commit_to_unacked(&self.config, me, *config, *clock_ff_ns, acked)
            }
            _ => return,
        };
        for m in to {
            self.send(m, msg.clone());
        }
    }

    /// Resend an unfinished commit (see `unfinished_commit`) to the
    /// members that have not acknowledged it, every `resend_ns`.
    fn resend_unfinished_commit(&mut self, now: u64) {
        let Some((config, clock_ff_ns, acked)) = &self.unfinished_commit else {
            return;
        };
        if *config != self.config.id() || self.config.cm() != self.me {
            self.unfinished_commit = None;
            return;
        }
        if matches!(self.state, State::Committing { .. }) || now < self.next_commit_resend_ns {
            return;
        }
        self.next_commit_resend_ns = now.saturating_add(self.params.resend_ns);
        let (msg, to) = commit_to_unacked(&self.config, self.me, *config, *clock_ff_ns, acked);
        for m in to {
            self.send(m, msg.clone());
        }
    }

    /// A reconfiguration message from member `from`. `clock_upper_ns` is
    /// the upper bound of this node's clock interval now (0 if none).
    /// Returns `true` if this node answered a probe from a node other than
    /// its CM (its lease client must stop renewing with the old CM).
    pub fn on_message(
        &mut self,
        now: u64,
        msg: ReconfigMessage,
        clock_upper_ns: u64,
        cm_lease_left_ns: u64,
    ) -> bool {
        if self.removed {
            return false;
        }
        let mine = self.config.id();
        let me = self.me;
        match msg {
            ReconfigMessage::SuspectCm { config, .. } => {
                if config == mine && matches!(self.state, State::Member | State::Deferred { .. }) {
                    let cm = self.config.cm();
                    self.start_probe(now, [cm].into_iter().collect());
                }
            }
            ReconfigMessage::ProbeFailed { config, from, seq } => {
                if config >= mine && self.answered.get(&from).map(|a| a.0) == Some(seq) {
                    self.answered.remove(&from);
                    // Answers older than the pause they caused are moot.
                    let pause_ns = 3 * self.params.lease.lease_ns;
                    self.answered
                        .retain(|_, (_, at)| at.saturating_add(pause_ns) > now);
                    self.resume_renewals = self.answered.is_empty();
                }
            }
            ReconfigMessage::Probe { config, from, seq } => {
                // A probe of a newer configuration (stored by the service;
                // this node missed its NEW-CONFIG, whose CM then failed) is
                // answered too: otherwise members left in the older one and
                // members that applied the newer one ignore each other's
                // probes for good.
                if config >= mine {
                    if from != self.config.cm() {
                        self.answered.insert(from, (seq, now));
                    }
                    let filled = if config == mine {
                        self.filled_here()
                    } else {
                        Vec::new()
                    };
                    self.send(
                        from,
                        ReconfigMessage::ProbeReply {
                            config,
                            from: me,
                            seq,
                            empty: false,
                            filled,
                        },
                    );
                    return from != self.config.cm();
                }
            }
            ReconfigMessage::ProbeReply {
                config,
                from,
                seq,
                empty: was_emptied,
                filled: regions,
            } => {
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
            ReconfigMessage::NewConfig {
                config,
                from,
                config_toml,
            } => {
                if config < mine {
                    return false;
                }
                if config == mine {
                    if self.pending_commit && self.config.cm() == from {
                        self.send(
                            from,
                            ReconfigMessage::NewConfigAck {
                                config,
                                from: me,
                                clock_upper_ns,
                                cm_lease_left_ns,
                            },
                        );
                    }
                    return false;
                }
                let Ok(next) = Configuration::from_toml(&config_toml) else {
                    return false;
                };
                if next.id() != config || next.cm() != from {
                    return false;
                }
                if let State::Casing { proposed, .. } = &self.state {
                    if proposed.id() > config {
                        // Our CAS of a successor of this configuration is
                        // in flight: answer nothing until it is decided
                        // (the CM resends). If it won, our proposal
                        // replaces this one; if it lost, the resend is
                        // applied then. Applying this one now would drop
                        // the attempt while the CAS may still succeed,
                        // leaving the service with a configuration no
                        // node drives: the CM's time-bound raises would
                        // be refused for good and its clock would stop.
                        // Acknowledging it and keeping the attempt instead
                        // would grant the CM a lease that the new CM does
                        // not outwait (a G-single cycle).
                        return false;
                    }
                }
                if !next.is_member(me) {
                    self.become_removed(config);
                    return false;
                }
                // A newer configuration supersedes whatever this node was
                // attempting.
                self.state = State::Member;
                self.apply(next);
                self.send(
                    from,
                    ReconfigMessage::NewConfigAck {
                        config,
                        from: me,
                        clock_upper_ns,
                        cm_lease_left_ns,
                    },
                );
            }
            ReconfigMessage::NewConfigAck {
                config,
                from,
                clock_upper_ns,
                cm_lease_left_ns,
            } => {
                let lease = self.params.lease;
                let sample_age_ns = self.params.clock_sample_age_ns;
                if let State::Proposing {
                    proposed,
                    acks,
                    commit_after_ns,
                    after_grants_ns,
                    cm_changed,
                    clock_after_ns,
                    ..
                } = &mut self.state
                {
                    let stretched =
                        lease.stretch_ns(cm_lease_left_ns.saturating_add(*after_grants_ns));
                    let clock_stretched = lease.stretch_ns(
                        cm_lease_left_ns.saturating_add((*after_grants_ns).min(sample_age_ns)),
                    );
                    if proposed.id() == config && proposed.is_member(from) {
                        acks.insert(from, clock_upper_ns);
                        // Leases the member granted the replaced CM (even
                        // late, after a probe) must be over before commit.
                        // A CM that stays CM replaces nobody: waiting for
                        // its own leases cost every non-CM failure (and
                        // every client failure) one lease (~50 ms).
                        if *cm_changed {
                            *commit_after_ns =
                                (*commit_after_ns).max(now.saturating_add(stretched));
                            *clock_after_ns =
                                (*clock_after_ns).max(now.saturating_add(clock_stretched));
                        }
                    }
                }
                self.maybe_commit(now, clock_upper_ns);
            }
            ReconfigMessage::NewConfigCommit {
                config,
                from,
                clock_ff_ns,
            } => {
                if config == mine && from == self.config.cm() {
                    if self.pending_commit {
                        self.pending_commit = false;
                        self.out.push(ReconfigOutput::Committed {
                            config,
                            clock_ff_ns,
                        });
                    }
                    self.send(
                        from,
                        ReconfigMessage::NewConfigCommitAck { config, from: me },
                    );
                }
            }
            ReconfigMessage::ClockReady {
                config,
                from,
                clock_ff_ns,
            } => {
                if config == mine && from == self.config.cm() && self.pending_commit {
                    self.out.push(ReconfigOutput::ClockReady {
                        config,
                        clock_ff_ns,
                    });
                }
            }
            // Handled by the node process (it knows the address book).
            ReconfigMessage::Join { .. } | ReconfigMessage::ClockRate { .. } => {}
            ReconfigMessage::NewConfigCommitAck { config, from } => {
                let members = self.config.members();
                if let Some((c, _, acked)) = &mut self.unfinished_commit {
                    if *c == config {
                        acked.insert(from);
                        if members.iter().all(|m| acked.contains(m)) {
                            self.unfinished_commit = None;
                        }
                    }
                }
                if let State::Committing {
                    config: c, acked, ..
                } = &mut self.state
                {
                    if *c == config {
                        acked.insert(from);
                    }
                }
                self.end_commit_if_acked();
            }
        }
        false
    }

    /// The new CM's own grants to the replaced CM: wait `left_ns` (on this
    /// node's clock) before committing the proposed configuration.
    pub fn extend_commit_wait(&mut self, now: u64, left_ns: u64) {
        if let State::Proposing {
            commit_after_ns,
            after_grants_ns,
            ..
        } = &mut self.state
        {
            *commit_after_ns = (*commit_after_ns)
                .max(now.saturating_add(left_ns.saturating_add(*after_grants_ns)));
        }
    }

    fn maybe_commit(&mut self, now: u64, own_upper_ns: u64) {
        self.maybe_clock_ready(now, own_upper_ns);
        let State::Proposing {
            proposed_at_ns,
            proposed,
            acks,
            commit_after_ns,
            clock_ff_ns: early_ff,
            ..
        } = &self.state
        else {
            return;
        };
        if now < *commit_after_ns || proposed.members().iter().any(|m| !acks.contains_key(m)) {
            return;
        }
        let early_ff = *early_ff;
        let config = proposed.id();
        // FaRMv2 §4.3: FF bounds every timestamp the old master can have
        // handed out. An ACK's upper bound holds for the old master's clock
        // when the ACK was sent (after NEW-CONFIG went out); the old master
        // may have kept answering until its lease ran out, so the bound is
        // carried forward to now by the time since NEW-CONFIG, with drift.
        // A clock that took over early keeps the FF it took over at.
        let drift_ppm = self.params.lease.drift_ppm;
        let clock_ff_ns = early_ff
            .unwrap_or_else(|| fast_forward(acks, *proposed_at_ns, now, own_upper_ns, drift_ppm));
        let mut acked = BTreeSet::new();
        acked.insert(self.me);
        self.pending_commit = false;
        self.state = State::Committing {
            config,
            clock_ff_ns,
            acked,
            next_resend_ns: now,
        };
        self.out.push(ReconfigOutput::Committed {
            config,
            clock_ff_ns,
        });
        self.resend(now);
        self.end_commit_if_acked();
    }

    /// Back to [`State::Member`] once every member of the committed
    /// configuration acknowledged NEW-CONFIG-COMMIT. The CM counts itself,
    /// so a configuration of the CM alone ends its commit at once instead
    /// of waiting for an acknowledgement nobody will send (and refusing
    /// every JOIN meanwhile).
    fn end_commit_if_acked(&mut self) {
        if let State::Committing { acked, .. } = &self.state {
            if self.config.members().iter().all(|m| acked.contains(m)) {
                self.state = State::Member;
            }
        }
    }

    /// The clock takeover ahead of the commit (see
    /// [`ReconfigOutput::ClockReady`]): when the CM changes, every member
    /// acknowledged, and the old master's grants plus the samples' age are
    /// over, but the commit still waits (other members were removed too).
    fn maybe_clock_ready(&mut self, now: u64, own_upper_ns: u64) {
        let drift_ppm = self.params.lease.drift_ppm;
        let State::Proposing {
            proposed_at_ns,
            proposed,
            acks,
            commit_after_ns,
            cm_changed,
            clock_after_ns,
            clock_ff_ns,
            ..
        } = &mut self.state
        else {
            return;
        };
        if !*cm_changed
            || clock_ff_ns.is_some()
            || now < *clock_after_ns
            || now >= *commit_after_ns
            || proposed.members().iter().any(|m| !acks.contains_key(m))
        {
            return;
        }
        let ff = fast_forward(acks, *proposed_at_ns, now, own_upper_ns, drift_ppm);
        *clock_ff_ns = Some(ff);
        let config = proposed.id();
        let members: Vec<NodeId> = proposed
            .members()
            .into_iter()
            .filter(|m| *m != self.me)
            .collect();
        self.out.push(ReconfigOutput::ClockReady {
            config,
            clock_ff_ns: ff,
        });
        let msg = ReconfigMessage::ClockReady {
            config,
            from: self.me,
            clock_ff_ns: ff,
        };
        for m in members {
            self.send(m, msg.clone());
        }
    }

    /// Timers: probe deadlines, deferred attempts, resends, the commit
    /// wait. `clock_upper_ns` as in [`Reconfig::on_message`].
    pub fn tick(&mut self, now: u64, clock_upper_ns: u64) {
        match &self.state {
            State::Deferred { until_ns } if now >= *until_ns => {
                self.state = State::Member;
                // Still suspected? The node process calls suspect_* again.
            }
            State::Probing { .. } => self.maybe_end_probe(now),
            State::Casing {
                proposed,
                ask_again_ns: Some(at),
                ..
            } if now >= *at => {
                let proposed = proposed.clone();
                let expected = ConfigId(proposed.id().0.saturating_sub(1));
                if let State::Casing { ask_again_ns, .. } = &mut self.state {
                    *ask_again_ns = None;
                }
                self.out.push(ReconfigOutput::Cas { expected, proposed });
            }
            State::Proposing { .. } => {
                self.maybe_commit(now, clock_upper_ns);
                self.resend(now);
            }
            State::Committing { .. } => self.resend(now),
            _ => {}
        }
        self.resend_unfinished_commit(now);
    }

    /// A proposal this node leads could not finish because `unacked`
    /// members never acknowledged it (their leases expired at the new CM):
    /// start over from the proposal, which the service already holds.
    ///
    /// A member gets a lease from the first NEW-CONFIG to acknowledge it:
    /// its lease at the CM may have run out only because it answered
    /// another node's probe (and stopped renewing), which says nothing of
    /// its health (without that lease, a proposal could be abandoned just
    /// before the member's ACK comes).
    /// Returns the members it now probes without (empty: nothing done).
    pub fn abandon_unacked(&mut self, now: u64, suspects: &[NodeId]) -> Vec<NodeId> {
        let State::Proposing {
            acks,
            proposed,
            proposed_at_ns,
            ..
        } = &self.state
        else {
            return Vec::new();
        };
        if now < proposed_at_ns.saturating_add(self.params.lease.lease_ns) {
            return Vec::new();
        }
        let stuck: BTreeSet<NodeId> = suspects
            .iter()
            .copied()
            .filter(|n| proposed.is_member(*n) && !acks.contains_key(n))
            .collect();
        if stuck.is_empty() {
            return Vec::new();
        }
        let proposal = std::mem::replace(&mut self.state, State::Member);
        self.abandoned = Some(Box::new(proposal));
        self.start_probe(now, stuck.clone());
        stuck.into_iter().collect()
    }

    /// A probe that cannot make a successor: back to the proposal
    /// [`Reconfig::abandon_unacked`] left, if any, resending NEW-CONFIG;
    /// else try again after a lease, if still suspected.
    /// The probe of this round will lead to no CAS: tell every member
    /// that answered, so that it renews with its CM again at once.
    fn tell_probe_failed(&mut self) {
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

    /// Take the "renew with the CM again now" signal
    /// ([`ReconfigMessage::ProbeFailed`] from every prober answered).
    pub fn take_resume_renewals(&mut self) -> bool {
        std::mem::take(&mut self.resume_renewals)
    }

    /// `config` (stored, or sent by its CM) does not list this node: stop
    /// whatever it was attempting and report it removed; it joins again as
    /// a new member (FaRM §5.2).
    fn become_removed(&mut self, config: ConfigId) {
        self.removed = true;
        self.abandoned = None;
        self.state = State::Member;
        self.out.push(ReconfigOutput::Removed { config });
    }

    fn probe_failed(&mut self, now: u64) {
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

    /// The CM learned that `node` holds a complete copy of `region` (FaRM
    /// §5.4): it may be promoted by the next remap.
    pub fn mark_ready(&mut self, region: meridian_wire::RegionId, node: NodeId) {
        self.config.mark_ready(region, node);
    }

    /// The engine's state, one line (to read a stuck simulation).
    pub fn describe(&self) -> String {
        match &self.state {
            State::Member => format!("member (pending commit {})", self.pending_commit),
            State::Deferred { until_ns } => format!("deferred until {until_ns}"),
            State::Probing {
                suspects,
                replied,
                empty,
                ..
            } => format!("probing (suspects {suspects:?}, replied {replied:?}, empty {empty:?})"),
            State::Casing { proposed, .. } => format!("casing {}", proposed.id().0),
            State::Proposing {
                proposed,
                acks,
                commit_after_ns,
                ..
            } => format!(
                "proposing {} (acked {:?}, commit after {commit_after_ns})",
                proposed.id().0,
                acks.keys().collect::<Vec<_>>()
            ),
            State::Committing { config, acked, .. } => {
                format!("committing {} (acked {acked:?})", config.0)
            }
        }
    }

    /// The next local time at which a timer here fires.
    pub fn next_wake_ns(&self) -> Option<u64> {
        let unfinished = self
            .unfinished_commit
            .as_ref()
            .map(|_| self.next_commit_resend_ns);
        let state = match &self.state {
            State::Member => None,
            State::Deferred { until_ns } => Some(*until_ns),
            State::Probing { deadline_ns, .. } => Some(*deadline_ns),
            State::Casing { ask_again_ns, .. } => *ask_again_ns,
            State::Proposing {
                commit_after_ns,
                next_resend_ns,
                clock_after_ns,
                clock_ff_ns,
                cm_changed,
                ..
            } => {
                let clock = if *cm_changed && clock_ff_ns.is_none() {
                    *clock_after_ns
                } else {
                    u64::MAX
                };
                Some((*commit_after_ns).min(*next_resend_ns).min(clock))
            }
            State::Committing { next_resend_ns, .. } => Some(*next_resend_ns),
        };
        match (state, unfinished) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Panics if an invariant is broken (release builds too).
    pub fn check_invariants(&self) {
        match &self.state {
            State::Casing { proposed, .. } => {
                let base = self
                    .service_config
                    .as_ref()
                    .map_or(self.config.id(), |c| c.id().max(self.config.id()));
                assert_eq!(
                    proposed.id().0,
                    base.0 + 1,
                    "a proposal must be the direct successor of the latest known configuration"
                )
            }
            State::Proposing { proposed, .. } => assert_eq!(
                proposed.id(),
                self.config.id(),
                "the CM runs the configuration it proposes"
            ),
            _ => {}
        }
        if let Some(a) = &self.abandoned {
            assert!(
                matches!(a.as_ref(), State::Proposing { proposed, .. } if proposed.id() == self.config.id())
                    && matches!(self.state, State::Probing { .. }),
                "an abandoned proposal is this configuration's, kept only while probing"
            );
        }
        if !self.removed {
            assert!(
                self.config.is_member(self.me),
                "running a configuration without me"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A few engines on a FIFO network with crashes and a partition, and
    /// a compare-and-swap register as the coordination service.
    struct Net {
        nodes: BTreeMap<NodeId, Reconfig>,
        dead: BTreeSet<NodeId>,
        /// Nodes cut off from the rest (both directions).
        cut: BTreeSet<NodeId>,
        store: Configuration,
        queue: Vec<(NodeId, NodeId, ReconfigMessage)>,
        cas_results: Vec<(NodeId, Result<(), Configuration>)>,
        /// Service reads asked for, answered with the stored
        /// configuration at the next step.
        reads: Vec<NodeId>,
        log: Vec<String>,
        now: u64,
        /// The lease manager's answer for removed members at the CM.
        expiry_ns: u64,
        /// What every member reports as left of the lease it granted its
        /// CM (NEW-CONFIG-ACK's `cm_lease_left_ns`).
        cm_lease_left_ns: u64,
    }

    fn params() -> ReconfigParams {
        ReconfigParams {
            lease: LeaseParams::new(10, 1000),
            probe_timeout_ns: 2 * MS,
            resend_ns: MS,
            backup_cms: 2,
            clock_sample_age_ns: 0,
        }
    }

    impl Net {
        fn new(n: u32) -> Net {
            let config = Configuration::local(n, 7000, 3, 12, std::path::Path::new("/tmp/r"));
            Net {
                nodes: config
                    .members()
                    .into_iter()
                    .map(|m| (m, Reconfig::new(m, params(), config.clone())))
                    .collect(),
                dead: BTreeSet::new(),
                cut: BTreeSet::new(),
                store: config,
                queue: Vec::new(),
                cas_results: Vec::new(),
                reads: Vec::new(),
                cm_lease_left_ns: 0,
                log: Vec::new(),
                now: 0,
                expiry_ns: 0,
            }
        }

        fn reachable(&self, a: NodeId, b: NodeId) -> bool {
            !self.dead.contains(&a)
                && !self.dead.contains(&b)
                && self.cut.contains(&a) == self.cut.contains(&b)
        }

        fn collect(&mut self, id: NodeId) {
            let outs = self.nodes.get_mut(&id).unwrap().drain();
            for o in outs {
                match o {
                    ReconfigOutput::Send { to, msg } => self.queue.push((id, to, msg)),
                    ReconfigOutput::Cas { expected, proposed } => {
                        // The service is reachable only from the majority
                        // side (a Raft group on nodes 0..3 in these tests).
                        let r = if self.cut.contains(&id) {
                            continue;
                        } else if self.store.id() == expected {
                            self.store = (*proposed).clone();
                            self.log.push(format!("{id} cas {} ok", proposed.id().0));
                            Ok(())
                        } else {
                            self.log.push(format!("{id} cas {} lost", proposed.id().0));
                            Err(self.store.clone())
                        };
                        self.cas_results.push((id, r));
                    }
                    ReconfigOutput::Applied { config, cm_changed } => self.log.push(format!(
                        "{id} applied {} cm {} changed {cm_changed}",
                        config.id().0,
                        config.cm()
                    )),
                    ReconfigOutput::Removed { config } => {
                        self.log.push(format!("{id} removed by {}", config.0))
                    }
                    ReconfigOutput::ReadStored => {
                        if !self.cut.contains(&id) {
                            self.reads.push(id);
                        }
                    }
                    ReconfigOutput::RegionLost { config, detail } => self
                        .log
                        .push(format!("{id} lost a region of {}: {detail}", config.0)),
                    ReconfigOutput::Committed {
                        config,
                        clock_ff_ns,
                    } => self.log.push(format!(
                        "{id} committed {} at {}ms ff {clock_ff_ns}",
                        config.0,
                        self.now / MS
                    )),
                    ReconfigOutput::ClockReady {
                        config,
                        clock_ff_ns,
                    } => self.log.push(format!(
                        "{id} clock ready {} at {}ms ff {clock_ff_ns}",
                        config.0,
                        self.now / MS
                    )),
                }
            }
        }

        fn step(&mut self) {
            self.now += MS / 4;
            let now = self.now;
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in &ids {
                if !self.dead.contains(id) {
                    self.nodes.get_mut(id).unwrap().tick(now, now / 1000);
                    self.collect(*id);
                }
            }
            for (id, r) in std::mem::take(&mut self.cas_results) {
                let exp = self.expiry_ns;
                self.nodes.get_mut(&id).unwrap().on_cas(now, r, |_| exp);
                self.collect(id);
            }
            for id in std::mem::take(&mut self.reads) {
                let stored = self.store.clone();
                self.nodes.get_mut(&id).unwrap().on_stored(stored);
                self.collect(id);
            }
            for (from, to, msg) in std::mem::take(&mut self.queue) {
                if self.reachable(from, to) {
                    let left = self.cm_lease_left_ns;
                    self.nodes.get_mut(&to).unwrap().on_message(
                        now,
                        msg,
                        now / 1000 + to.0 as u64,
                        left,
                    );
                    self.collect(to);
                }
            }
        }

        fn run_ms(&mut self, ms: u64) {
            for _ in 0..ms * 4 {
                self.step();
            }
        }

        /// Kill `dead` and let the CM (node 0) suspect it at 1 ms.
        fn cm_suspects(&mut self, dead: u32) {
            self.dead.insert(NodeId(dead));
            self.nodes
                .get_mut(&NodeId(0))
                .unwrap()
                .suspect_members(MS, &[NodeId(dead)]);
            self.collect(NodeId(0));
        }

        fn committed(&self, id: u32) -> (u64, u32, bool) {
            let r = &self.nodes[&NodeId(id)];
            (r.config().id().0, r.config().cm().0, r.reconfiguring())
        }
    }

    #[test]
    fn the_cm_removes_a_failed_member_after_its_lease_surely_expired() {
        let mut net = Net::new(5);
        net.expiry_ns = 20 * MS;
        net.cm_suspects(3);
        net.run_ms(40);
        for id in [0, 1, 2, 4] {
            assert_eq!(net.committed(id), (2, 0, false), "{:?}", net.log);
        }
        assert!(!net.store.is_member(NodeId(3)));
        let commit = net
            .log
            .iter()
            .find(|l| l.starts_with("n0 committed"))
            .unwrap();
        // FF: the largest ACK upper bound (20000) carried forward by the
        // 19.25 ms since NEW-CONFIG went out, with the drift bound.
        assert_eq!(
            commit, "n0 committed 2 at 20ms ff 19270004",
            "{:?}",
            net.log
        );
        // Members commit only after the CM did, and nobody disabled clocks.
        assert!(net.log.iter().all(|l| !l.contains("changed true")));
    }

    /// A configuration that shrinks to its CM alone commits at once: a
    /// commit waiting for an acknowledgement from some other member would
    /// leave the CM committing forever, refusing every removed node's JOIN,
    /// and the cluster would stay at one member.
    #[test]
    fn a_cm_left_alone_finishes_its_commit_and_may_add_members_again() {
        let mut net = Net::new(2);
        let gone = NodeId(1);
        net.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(MS, &[gone]);
        net.collect(NodeId(0));
        let probe = net.queue.iter().find_map(|(_, to, m)| match m {
            ReconfigMessage::Probe { config, seq, .. } if *to == gone => Some((*config, *seq)),
            _ => None,
        });
        let (config, seq) = probe.expect("a lone survivor probes its suspect");
        // The suspect restarted without its memory: it answers empty.
        net.dead.insert(gone);
        net.nodes.get_mut(&NodeId(0)).unwrap().on_message(
            MS,
            ReconfigMessage::ProbeReply {
                config,
                from: gone,
                seq,
                empty: true,
                filled: Vec::new(),
            },
            0,
            0,
        );
        net.collect(NodeId(0));
        net.run_ms(30);
        assert_eq!(net.committed(0), (2, 0, false), "{:?}", net.log);
        assert_eq!(net.store.members(), vec![NodeId(0)]);
        let cm = &net.nodes[&NodeId(0)];
        assert!(cm.may_start(), "{}", cm.describe());
    }

    /// A prober casing a proposal 3 over the stored configuration 2
    /// (learned from a lost CAS) receives 2's NEW-CONFIG before its CAS is
    /// decided. It must neither apply it (that drops the attempt, and if
    /// the CAS then succeeds the service holds a 3 no node drives) nor
    /// acknowledge it (a lease to 2's CM that 3's commit would not
    /// outwait). It answers nothing; its CAS wins, it proposes 3, and every
    /// live node commits 3 with it as CM.
    #[test]
    fn a_prober_casing_over_a_configuration_defers_its_new_config() {
        let mut net = Net::new(3);
        let alive: BTreeSet<NodeId> = net.store.members().into_iter().collect();
        let two = net.store.remap(&alive, NodeId(2)).unwrap();
        net.store = two.clone();
        net.dead.insert(NodeId(0));
        let n1 = NodeId(1);
        // First attempt: its CAS over 1 loses and teaches it 2.
        net.nodes.get_mut(&n1).unwrap().suspect_cm(MS);
        net.collect(n1);
        net.run_ms(2);
        assert!(
            net.log.iter().any(|l| l == "n1 cas 2 lost"),
            "{:?}",
            net.log
        );
        // Second attempt, over 2.
        net.run_ms(20);
        let now = net.now;
        net.nodes.get_mut(&n1).unwrap().suspect_cm(now);
        net.collect(n1);
        let mut casing = false;
        for _ in 0..40 {
            net.step();
            if net.nodes[&n1].describe().starts_with("casing 3") {
                casing = true;
                break;
            }
        }
        assert!(casing, "never cased 3: {:?}", net.log);
        let msg = ReconfigMessage::NewConfig {
            config: two.id(),
            from: NodeId(2),
            config_toml: two.to_toml().unwrap(),
        };
        let now = net.now;
        net.nodes.get_mut(&n1).unwrap().on_message(now, msg, 0, 0);
        net.collect(n1);
        assert!(
            net.queue.iter().all(|(from, _, _)| *from != n1),
            "answered: {:?}",
            net.queue
        );
        assert!(net.nodes[&n1].describe().starts_with("casing 3"));
        net.run_ms(40);
        assert!(net.log.iter().any(|l| l == "n1 cas 3 ok"), "{:?}", net.log);
        assert!(
            net.log.iter().all(|l| !l.starts_with("n1 applied 2")),
            "{:?}",
            net.log
        );
        for id in [1, 2] {
            assert_eq!(net.committed(id).0, 3, "{:?}", net.log);
            assert_eq!(net.committed(id).1, 1, "{:?}", net.log);
        }
    }

    /// The leases members granted their CM are outwaited only when the CM
    /// changes: a CM removing a failed member (or renewing the
    /// configuration for a dead client) commits once the removed member's
    /// lease is over, not one more lease later (the extra wait cost every
    /// such recovery ~50 ms on real processes).
    #[test]
    fn the_members_grants_are_outwaited_only_when_the_cm_changes() {
        let commit_at = |kill_cm: bool| {
            let mut net = Net::new(5);
            net.expiry_ns = 5 * MS;
            net.cm_lease_left_ns = 30 * MS;
            if kill_cm {
                net.dead.insert(NodeId(0));
                net.nodes.get_mut(&NodeId(1)).unwrap().suspect_cm(MS);
                net.collect(NodeId(1));
            } else {
                net.cm_suspects(3);
            }
            net.run_ms(60);
            let line = net
                .log
                .iter()
                .find(|l| l.contains(" committed 2 at "))
                .cloned()
                .unwrap_or_else(|| panic!("no commit: {:?}", net.log));
            let ms: u64 = line
                .split(" at ")
                .nth(1)
                .and_then(|r| r.split("ms").next())
                .and_then(|x| x.parse().ok())
                .unwrap();
            ms
        };
        assert!(commit_at(false) < 10, "same CM waited for its own leases");
        assert!(commit_at(true) >= 30, "a new CM must outwait the old one's");
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

    /// The CM stores a configuration that removes a member and dies
    /// before any NEW-CONFIG goes out. The removed member
    /// answers no probe, so the two others are half of the old
    /// configuration and never a majority of it; read from the service,
    /// the stored configuration makes them two of its three.
    #[test]
    fn members_left_behind_by_a_cm_dying_after_its_cas_replace_it() {
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
    }

    /// The CM dies between NEW-CONFIG and NEW-CONFIG-COMMIT. A member
    /// waiting for the commit may suspect its CM (else the cluster stays
    /// blocked), and the next configuration follows the applied one.
    #[test]
    fn a_cm_dying_before_its_commit_is_replaced() {
        let mut net = Net::new(5);
        net.expiry_ns = 20 * MS;
        net.cm_suspects(3);
        net.run_ms(5);
        // Everyone applied configuration 2; the CM waits for node 3's lease.
        for id in [1, 2, 4] {
            assert_eq!(net.committed(id), (2, 0, true), "{:?}", net.log);
            let r = &net.nodes[&NodeId(id)];
            assert!(!r.may_start() && r.may_suspect_cm());
        }
        net.dead.insert(NodeId(0));
        net.nodes.get_mut(&NodeId(1)).unwrap().suspect_cm(net.now);
        net.collect(NodeId(1));
        net.run_ms(40);
        for id in [1, 2, 4] {
            assert_eq!(net.committed(id), (3, 1, false), "{:?}", net.log);
        }
        assert!(!net.store.is_member(NodeId(0)) && !net.store.is_member(NodeId(3)));
    }

    #[test]
    fn a_backup_cm_replaces_a_failed_cm_and_fast_forwards_the_clock() {
        let mut net = Net::new(5);
        // Each member's last grant to the dead CM may last 7 ms more.
        net.cm_lease_left_ns = 7 * MS;
        net.dead.insert(NodeId(0));
        // Node 3 suspects first: it is not the first backup (node 1), so
        // it asks node 1 and waits.
        net.nodes.get_mut(&NodeId(3)).unwrap().suspect_cm(MS);
        net.collect(NodeId(3));
        net.run_ms(40);
        for id in [1, 2, 3, 4] {
            assert_eq!(net.committed(id), (2, 1, false), "{:?}", net.log);
        }
        assert_eq!(net.store.cm(), NodeId(1));
        // Only the CM was removed (FaRMv2 §4.3: no lease-expiry wait): the
        // commit waits only for the leases the members report they granted
        // the old CM, 7 ms after their acks at ~1 ms — not a whole lease
        // (10 ms) past the probe.
        let commit = net
            .log
            .iter()
            .find(|l| l.starts_with("n1 committed"))
            .unwrap();
        assert!(commit.starts_with("n1 committed 2 at 8ms"), "{commit}");
        // FF is the largest upper bound: the acks' (sent at ~1 ms) and the
        // new CM's own at commit time.
        let ff: u64 = commit.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(ff >= 8_000, "{commit}");
        assert!(
            net.log
                .iter()
                .any(|l| l == "n2 applied 2 cm n1 changed true"),
            "{:?}",
            net.log
        );
    }

    /// When the CM (the clock master) changes, the commit — and
    /// the new master's clock — waits the clock's maximum sample age past
    /// the members' acks, so a process no NEW-CONFIG reached has stopped
    /// handing out the old master's time.
    #[test]
    fn a_new_clock_master_waits_out_the_old_masters_samples() {
        let mut net = Net::new(5);
        for r in net.nodes.values_mut() {
            r.params.clock_sample_age_ns = 20 * MS;
        }
        net.dead.insert(NodeId(0));
        net.nodes.get_mut(&NodeId(1)).unwrap().suspect_cm(MS);
        net.collect(NodeId(1));
        net.run_ms(60);
        let commit = net
            .log
            .iter()
            .find(|l| l.starts_with("n1 committed"))
            .unwrap();
        // Without the sample age: 11 ms (one lease after the probe).
        let at_ms: u64 = commit
            .split(" at ")
            .nth(1)
            .and_then(|r| r.split("ms").next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(at_ms >= 21, "{commit}");
    }

    #[test]
    fn the_cm_and_another_member_failing_waits_their_grants_and_one_lease() {
        let mut net = Net::new(5);
        // The survivors' last grants to the dead CM may last 5 ms more.
        net.cm_lease_left_ns = 5 * MS;
        net.dead.insert(NodeId(0));
        net.dead.insert(NodeId(2));
        net.nodes.get_mut(&NodeId(1)).unwrap().suspect_cm(MS);
        net.collect(NodeId(1));
        net.run_ms(40);
        let commit = net
            .log
            .iter()
            .find(|l| l.starts_with("n1 committed"))
            .unwrap();
        // The probe waits its 2 ms timeout for node 2; the acks (at ~3 ms)
        // report 5 ms of grants to the old CM, and node 2's lease, which
        // the old CM granted before then, takes one lease (10.01 ms) more:
        // ~18 ms. (Two leases past the probe, 23 ms, before FaRMv2 §4.3's
        // bound was used.)
        assert!(
            commit.starts_with("n1 committed 2 at 18ms"),
            "{commit} {:?}",
            net.log
        );
        // The clock does not wait for node 2's lease: the old master stopped
        // handing out time when the grants ran out, and samples of it
        // expired (no sample age here): the new master and every member
        // take over at ~8 ms (3 ms + 5 ms of grants), with the FF the
        // commit then carries.
        let ready: Vec<&String> = net
            .log
            .iter()
            .filter(|l| l.contains("clock ready 2"))
            .collect();
        assert!(
            ready
                .iter()
                .any(|l| l.starts_with("n1 clock ready 2 at 8ms")),
            "{ready:?}"
        );
        let ff = |l: &str| l.rsplit(' ').next().unwrap_or("").to_string();
        assert!(
            ready.iter().all(|l| ff(l) == ff(commit)),
            "{ready:?} {commit}"
        );
        for n in [3, 4] {
            assert!(
                ready
                    .iter()
                    .any(|l| l.starts_with(&format!("n{n} clock ready 2"))),
                "{ready:?}"
            );
        }
        assert_eq!(net.store.members(), vec![NodeId(1), NodeId(3), NodeId(4)]);
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
    }

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
    }

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
    }

    /// A prober's CAS gets no answer (the CAS client gave up, cut off
    /// from the service's majority). Dropping the attempt would leave it,
    /// a CM that abandoned its own unacknowledged proposal for the probe,
    /// waiting for a commit nobody will send. It asks again a lease later,
    /// until the service answers.
    #[test]
    fn a_cas_without_an_answer_is_asked_again() {
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
