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
//!
//! **Layout.** `probe.rs` holds steps 1, 2 and 4 (suspect, probe, remap),
//! `cas.rs` step 3, and `commit.rs` steps 5 to 7 (NEW-CONFIG, apply,
//! commit) with the lease wait; this file holds the engine's state.

mod cas;
mod commit;
mod probe;
#[cfg(test)]
mod testing;

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

    /// The newer configuration the coordination service returned when this
    /// node's CAS lost, if its NEW-CONFIG never came.
    pub fn service_config(&self) -> Option<&Configuration> {
        self.service_config.as_deref()
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

    /// `config` (stored, or sent by its CM) does not list this node: stop
    /// whatever it was attempting and report it removed; it joins again as
    /// a new member (FaRM §5.2).
    fn become_removed(&mut self, config: ConfigId) {
        self.removed = true;
        self.abandoned = None;
        self.state = State::Member;
        self.out.push(ReconfigOutput::Removed { config });
    }

    /// Take the "renew with the CM again now" signal
    /// ([`ReconfigMessage::ProbeFailed`] from every prober answered).
    pub fn take_resume_renewals(&mut self) -> bool {
        std::mem::take(&mut self.resume_renewals)
    }

    /// The CM learned that `node` holds a complete copy of `region` (FaRM
    /// §5.4): it may be promoted by the next remap.
    pub fn mark_ready(&mut self, region: meridian_wire::RegionId, node: NodeId) {
        self.config.mark_ready(region, node);
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
