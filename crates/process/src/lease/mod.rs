//! # Leases: failure detection between the CM and every node and client (FaRM §5.1)
//!
//! **Problem.** The CM must learn quickly that a node or a client has
//! failed, a node must learn that the CM has failed, and — for safety — a
//! machine that has been removed from the configuration must stop serving
//! before its replacement starts, even when it is alive on the wrong side of
//! a partition.
//!
//! **Algorithm** (FaRM §5.1). Every holder (a member node other than the
//! CM, or a client) keeps a lease at the CM, and the CM keeps a lease at
//! every member. A holder sends `Request` every `lease / 5`; the CM's
//! `Grant` grants the holder its lease and asks for one; the holder's
//! `GrantAck` grants the CM its lease. Expiry of any lease triggers
//! recovery: the CM suspects a holder whose requests stopped for a lease
//! period ([`LeaseManager::suspects`]); a node suspects the CM when no grant
//! came for a lease period ([`LeaseClient::cm_suspected`]).
//!
//! **Drift.** Local clocks run within `drift_ppm` of true time. Each side
//! measures its own lease conservatively:
//! - a holder's lease starts at its *send* time of the granted request and
//!   lasts `lease × (1 − ε)` of its local time, so it ends no later in true
//!   time than `lease` after the request left;
//! - the CM's bound on when a holder's lease has surely ended is the
//!   *send* time of its last grant plus `lease × (1 + ε)` of the CM's time
//!   ([`LeaseManager::surely_expired_at`]); a new CM waits for it before
//!   committing a configuration that removes the holder (FaRM §5.2 step 7);
//! - the CM's lease at a member starts at the send time of the grant the
//!   member acknowledged and lasts `lease × (1 − ε)`.
//!
//! **Serving rule.** A non-CM node serves only while it holds its lease
//! ([`LeaseClient::holds`]); the CM serves and grants only while it holds
//! leases at a majority of the members, itself included
//! ([`LeaseManager::holds_majority`]). A machine cut off with a minority
//! therefore stops serving within one lease, which is what lets the
//! majority take over its regions after waiting one lease.
//!
//! **Bootstrap and reconfiguration.** A new CM's NEW-CONFIG is its lease
//! request to every member and their NEW-CONFIG-ACK is their grant
//! ([`LeaseManager::granted_by`]); the first configuration is formed the
//! same way, so there is no lease without a configuration.
//!
//! **Invariants** (`check_invariants`): bounded outstanding requests and
//! grants (`MAX_OUTSTANDING`); a holder's lease never ends after its
//! request's send time plus one lease.
//!
//! The lease engine is pure (no I/O, no clock of its own). FaRM §5.1 runs
//! it on a dedicated high-priority thread so that load cannot starve it,
//! and so does Meridian: every node and client process answers lease
//! messages and sends renewals on a lease thread of its own
//! (`meridian_transport::lease_udp`, `SCHED_RR` where the OS allows), over
//! UDP, through [`LeaseDesk`], which takes only its own small lock, never
//! the process's. In the simulator, lease messages reach the same desk
//! through `NodeProcess::on_message`.

use meridian_wire::{ConfigId, LeaseHolder, LeaseMessage, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Outstanding lease requests (holder) or grants (CM) remembered per
/// holder; older ones are forgotten and their replies ignored.
pub const MAX_OUTSTANDING: usize = 8;

/// CMs a holder remembers its grants to (more fold into one bound).
pub const MAX_GRANTED_CMS: usize = 8;

/// Lease timing: the lease and the drift bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseParams {
    /// The lease, ns.
    pub lease_ns: u64,
    /// Clock drift bound, ppm (FaRMv2 §4.1's ε).
    pub drift_ppm: u64,
}

impl LeaseParams {
    /// From a lease in ms and the clock's drift bound.
    pub fn new(lease_ms: u64, drift_ppm: u64) -> Self {
        LeaseParams {
            lease_ns: lease_ms.saturating_mul(1_000_000),
            drift_ppm: drift_ppm.min(999_999),
        }
    }

    /// Renewal period: one fifth of the lease (FaRM §5.1).
    pub fn renew_ns(&self) -> u64 {
        (self.lease_ns / 5).max(1)
    }

    /// How long a lease lasts for its holder, measured from its request's
    /// send time on the holder's clock: `lease × (1 − ε)`, rounded down.
    pub fn held_ns(&self) -> u64 {
        (self.lease_ns as u128 * (1_000_000 - self.drift_ppm) as u128 / 1_000_000) as u64
    }

    /// `ns` measured on one clock, stretched to surely cover the same span
    /// on another: two drifts of ε, `ns × (1 + 3ε)`, rounded up.
    pub fn stretch_ns(&self, ns: u64) -> u64 {
        (ns as u128 * (1_000_000 + 3 * self.drift_ppm) as u128).div_ceil(1_000_000) as u64
    }

    /// The longest a lease listener may go without looking before the
    /// gap counts as a stall of its own process (or machine) and is
    /// forgiven ([`LeaseDesk::listen`]): half a lease. A healthy listener
    /// looks at least every renewal period (a fifth of a lease).
    pub fn stall_ns(&self) -> u64 {
        (self.lease_ns / 2).max(1)
    }

    /// How long the granter waits, from the grant's send time on its own
    /// clock, before the lease has surely ended at the holder:
    /// `lease × (1 + ε)`, rounded up.
    pub fn surely_over_ns(&self) -> u64 {
        (self.lease_ns as u128 * (1_000_000 + self.drift_ppm) as u128).div_ceil(1_000_000) as u64
    }
}

/// The holder's side: a node other than the CM, or a client.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    params: LeaseParams,
    me: LeaseHolder,
    config: ConfigId,
    cm: NodeId,
    next_seq: u64,
    next_renew_ns: u64,
    /// Requests sent: (seq, local send time).
    sent: VecDeque<(u64, u64)>,
    /// When this holder last granted each CM a lease (a `GrantAck`, or a
    /// NEW-CONFIG-ACK), local ns, per CM; kept across resets, so it bounds
    /// the lease of any earlier CM too. Grants surely over are pruned;
    /// beyond [`MAX_GRANTED_CMS`] CMs the oldest folds into `folded_ns`.
    last_grants: BTreeMap<NodeId, u64>,
    /// The latest grant folded out of `last_grants` (counts for every CM).
    folded_ns: Option<u64>,
    /// My lease at the CM ends at this local time (0: none).
    lease_until_ns: u64,
    /// The CM's lease at me ends here: later, the CM is suspected.
    cm_until_ns: u64,
    grants: u64,
}

impl LeaseClient {
    /// A holder `me` of configuration `config` whose CM is `cm`, starting
    /// at `now`. It holds no lease yet; the CM is given one lease period to
    /// answer before it is suspected.
    pub fn new(
        params: LeaseParams,
        me: LeaseHolder,
        config: ConfigId,
        cm: NodeId,
        now: u64,
    ) -> Self {
        LeaseClient {
            params,
            me,
            config,
            cm,
            next_seq: 1,
            next_renew_ns: now,
            sent: VecDeque::new(),
            last_grants: BTreeMap::new(),
            folded_ns: None,
            lease_until_ns: 0,
            cm_until_ns: now.saturating_add(params.lease_ns),
            grants: 0,
        }
    }

    /// Do not suspect the CM before `until_ns` unless it answered once
    /// (a fresh cluster's CM may start after this member).
    pub fn with_grace(mut self, until_ns: u64) -> Self {
        self.cm_until_ns = self.cm_until_ns.max(until_ns);
        self
    }

    /// The CM this holder renews with.
    pub fn cm(&self) -> NodeId {
        self.cm
    }

    /// The configuration this holder's requests name.
    pub fn config(&self) -> ConfigId {
        self.config
    }

    /// Who holds this lease.
    pub fn me(&self) -> LeaseHolder {
        self.me
    }

    /// Grants received so far.
    pub fn grants(&self) -> u64 {
        self.grants
    }

    /// A NEW-CONFIG from `cm` for `config` arrived (FaRM §5.2 step 5: it is
    /// a lease request from the new CM). If the CM changed, the old lease is
    /// void and renewals go to the new CM at once. Either way the CM gets a
    /// lease period before it is suspected. Nothing is sent from here: the
    /// NEW-CONFIG-ACK is the grant.
    pub fn reset(&mut self, now: u64, config: ConfigId, cm: NodeId) {
        if cm != self.cm {
            self.lease_until_ns = 0;
            self.sent.clear();
            self.next_renew_ns = now;
        }
        self.cm = cm;
        self.config = config;
        self.cm_until_ns = self
            .cm_until_ns
            .max(now.saturating_add(self.params.lease_ns));
    }

    /// This member answered a probe from a would-be CM (FaRM §5.2 step 2):
    /// stop renewing with the current CM for three leases, so that a CM
    /// being replaced loses its majority (and stops serving) within one
    /// lease of the probe. If no new configuration comes, renewals resume.
    pub fn pause_renewals(&mut self, now: u64) {
        self.next_renew_ns = self
            .next_renew_ns
            .max(now.saturating_add(3 * self.params.lease_ns));
    }

    /// Every prober this member answered gave up without a majority
    /// ([`meridian_wire::ReconfigMessage::ProbeFailed`]): renew with the CM again now
    /// instead of after the pause.
    pub fn resume_renewals(&mut self, now: u64) {
        self.next_renew_ns = self.next_renew_ns.min(now);
    }

    /// Send a renewal if one is due; returns the message for the CM.
    pub fn tick(&mut self, now: u64) -> Option<LeaseMessage> {
        if now < self.next_renew_ns {
            return None;
        }
        self.next_renew_ns = now.saturating_add(self.params.renew_ns());
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.sent.len() == MAX_OUTSTANDING {
            self.sent.pop_front();
        }
        self.sent.push_back((seq, now));
        Some(LeaseMessage::Request {
            config: self.config,
            holder: self.me,
            seq,
        })
    }

    /// A message from `from`; returns the GrantAck to send back, if any.
    /// Grants from a node that is not this holder's CM, for another
    /// configuration, or for a forgotten request are ignored.
    pub fn on_message(
        &mut self,
        now: u64,
        from: NodeId,
        msg: &LeaseMessage,
    ) -> Option<LeaseMessage> {
        let LeaseMessage::Grant { config, seq, lease } = *msg else {
            return None;
        };
        if from != self.cm || config != self.config {
            return None;
        }
        let sent_ns = self.sent.iter().find(|(s, _)| *s == seq)?.1;
        if lease {
            self.lease_until_ns = self
                .lease_until_ns
                .max(sent_ns.saturating_add(self.params.held_ns()));
        }
        // The first grant ends a formation grace (see `with_grace`).
        self.cm_until_ns = if self.grants == 0 {
            now.saturating_add(self.params.lease_ns)
        } else {
            self.cm_until_ns
                .max(now.saturating_add(self.params.lease_ns))
        };
        self.grants += 1;
        self.note_grant_to(self.cm, now);
        Some(LeaseMessage::GrantAck {
            config,
            holder: self.me,
            seq,
        })
    }

    /// This holder granted its (new) CM a lease another way: a member's
    /// NEW-CONFIG-ACK is its grant to the new CM (see the module essay), so
    /// it counts in [`LeaseClient::cm_lease_left_ns`] like a `GrantAck`.
    pub fn note_grant(&mut self, now: u64) {
        self.note_grant_to(self.cm, now);
    }

    fn note_grant_to(&mut self, cm: NodeId, now: u64) {
        let over = self.params.surely_over_ns();
        self.last_grants.retain(|_, t| t.saturating_add(over) > now);
        let t = self.last_grants.entry(cm).or_insert(now);
        *t = (*t).max(now);
        while self.last_grants.len() > MAX_GRANTED_CMS {
            let Some((&oldest, &t)) = self.last_grants.iter().min_by_key(|(_, t)| **t) else {
                break;
            };
            self.last_grants.remove(&oldest);
            self.folded_ns = Some(self.folded_ns.map_or(t, |f| f.max(t)));
        }
    }

    /// How much longer, on this holder's clock, a lease it granted a CM
    /// other than `asking` may last: from the last grant, a lease measured
    /// on that CM's clock is surely over after `lease × (1 + ε)` here. A
    /// new CM (`asking`) waits this out (reported in NEW-CONFIG-ACK) before
    /// committing, so the replaced CM has stopped serving whatever it was
    /// granted late. Grants to `asking` itself do not count: a re-sent
    /// NEW-CONFIG's second ACK would otherwise report the first one, and
    /// every CM failover would wait one lease for nothing.
    pub fn cm_lease_left_ns(&self, now: u64, asking: NodeId) -> u64 {
        let over = self.params.surely_over_ns();
        self.last_grants
            .iter()
            .filter(|(cm, _)| **cm != asking)
            .map(|(_, t)| *t)
            .chain(self.folded_ns)
            .map(|t| t.saturating_add(over).saturating_sub(now))
            .max()
            .unwrap_or(0)
    }

    /// True while this holder's lease at the CM is valid: it may serve.
    pub fn holds(&self, now: u64) -> bool {
        now < self.lease_until_ns
    }

    /// This holder's lease listener did not look for `gap_ns` up to `now`
    /// (its process or machine stalled; [`LeaseDesk::listen`]): the time
    /// the CM has to grant again before it is suspected moves later by the
    /// gap, at most to a lease from `now`. Only suspicion moves: the
    /// holder's own lease (`holds`) and its grants to CMs do not, so what
    /// it may serve is unchanged.
    pub fn forgive_stall(&mut self, gap_ns: u64, now: u64) {
        let cap = now.saturating_add(self.params.lease_ns);
        if self.cm_until_ns < cap {
            self.cm_until_ns = self.cm_until_ns.saturating_add(gap_ns).min(cap);
        }
    }

    /// True once the CM's lease at this holder has expired (FaRM §5.2 step
    /// 1: the holder suspects the CM).
    pub fn cm_suspected(&self, now: u64) -> bool {
        now >= self.cm_until_ns
    }

    /// The local time the next renewal is due.
    pub fn next_renew_ns(&self) -> u64 {
        self.next_renew_ns
    }

    /// The next local time at which something here changes.
    pub fn next_wake_ns(&self) -> u64 {
        let mut t = self.next_renew_ns.min(self.cm_until_ns);
        if self.lease_until_ns > 0 {
            t = t.min(self.lease_until_ns);
        }
        t
    }

    /// Panics if an invariant is broken (release builds too).
    pub fn check_invariants(&self) {
        assert!(
            self.sent.len() <= MAX_OUTSTANDING,
            "lease requests unbounded"
        );
        if let Some(&(_, newest)) = self.sent.back() {
            assert!(
                self.lease_until_ns <= newest.saturating_add(self.params.held_ns()),
                "a lease outlives its newest request"
            );
        }
        assert!(
            self.last_grants.len() <= MAX_GRANTED_CMS,
            "granted CMs unbounded"
        );
    }
}

/// What the CM knows about one holder.
#[derive(Clone, Debug, Default)]
struct Held {
    /// Whether the holder has asked at least once.
    heard: bool,
    /// Local time of the holder's last request (for suspicion).
    last_request_ns: u64,
    /// Local send time of the CM's last grant (the holder's lease surely
    /// ends `surely_over_ns` after it).
    last_grant_ns: Option<u64>,
    /// Grants sent, (seq, local send time).
    grants: VecDeque<(u64, u64)>,
    /// The CM's lease at this holder ends here (members only).
    cm_lease_until_ns: u64,
}

/// The CM's side: the holders' leases and the CM's leases at the members.
#[derive(Clone, Debug)]
pub struct LeaseManager {
    params: LeaseParams,
    config: ConfigId,
    cm: NodeId,
    members: BTreeSet<NodeId>,
    held: BTreeMap<LeaseHolder, Held>,
    /// Most clients tracked at once (`limits.max_client_leases`).
    max_clients: usize,
    /// Clients that released their lease, with the local release time:
    /// a request of theirs that arrives late (sent before the release)
    /// must not start a lease nobody renews. Kept `RELEASED_KEEP_LEASES`
    /// leases, at most `max_clients` of them.
    released: BTreeMap<LeaseHolder, u64>,
}

/// Leases a released client is remembered for (its stale requests are
/// ignored meanwhile).
pub const RELEASED_KEEP_LEASES: u64 = 16;

impl LeaseManager {
    /// The CM `cm` of configuration `config` with `members`, starting at
    /// `now`: every member is given one lease period before it is suspected.
    /// The CM holds no lease at any member until
    /// [`LeaseManager::granted_by`] or a `GrantAck`.
    pub fn new(
        params: LeaseParams,
        config: ConfigId,
        cm: NodeId,
        members: &[NodeId],
        now: u64,
    ) -> Self {
        let mut m = LeaseManager {
            params,
            config,
            cm,
            members: members.iter().copied().collect(),
            held: BTreeMap::new(),
            max_clients: usize::MAX,
            released: BTreeMap::new(),
        };
        for &n in members {
            if n != cm {
                m.add(LeaseHolder::Node(n), now);
            }
        }
        m
    }

    /// Track at most `max` clients (`limits.max_client_leases`).
    pub fn with_max_clients(mut self, max: usize) -> Self {
        self.max_clients = max;
        self
    }

    /// Clients holding a lease (or given one lease period to ask).
    pub fn clients(&self) -> usize {
        self.held
            .keys()
            .filter(|h| matches!(h, LeaseHolder::Client(_)))
            .count()
    }

    /// Start tracking `holder` (a registering client, a joining node) as
    /// if it had just asked.
    pub fn add(&mut self, holder: LeaseHolder, now: u64) {
        self.held.entry(holder).or_insert(Held {
            last_request_ns: now,
            ..Held::default()
        });
    }

    /// Stop tracking `holder` (removed from the configuration, or a client
    /// whose failure is being handled).
    pub fn remove(&mut self, holder: LeaseHolder) {
        self.held.remove(&holder);
    }

    /// Move to configuration `config` with `members` (a configuration the
    /// CM itself installed). Removed members stop being tracked; new ones
    /// are added.
    pub fn set_config(&mut self, now: u64, config: ConfigId, members: &[NodeId]) {
        self.config = config;
        self.members = members.iter().copied().collect();
        let gone: Vec<LeaseHolder> = self
            .held
            .keys()
            .filter(|h| matches!(h, LeaseHolder::Node(n) if !self.members.contains(n)))
            .copied()
            .collect();
        for h in gone {
            self.held.remove(&h);
        }
        for &n in members {
            if n != self.cm {
                self.add(LeaseHolder::Node(n), now);
            }
        }
    }

    /// Member `node` acknowledged a lease request the CM sent at `sent_ns`
    /// outside the handshake (its NEW-CONFIG-ACK to a NEW-CONFIG sent then).
    pub fn granted_by(&mut self, node: NodeId, sent_ns: u64) {
        if let Some(h) = self.held.get_mut(&LeaseHolder::Node(node)) {
            h.cm_lease_until_ns = h
                .cm_lease_until_ns
                .max(sent_ns.saturating_add(self.params.held_ns()));
        }
    }

    /// A lease message from a holder; returns the Grant to send back, if
    /// any. Requests from unknown holders, for another configuration, or
    /// while the CM does not hold a majority are not granted.
    pub fn on_message(&mut self, now: u64, msg: &LeaseMessage) -> Option<LeaseMessage> {
        match *msg {
            LeaseMessage::Request {
                config,
                holder,
                seq,
            } => {
                if config != self.config && matches!(holder, LeaseHolder::Node(_)) {
                    // A member still in an older configuration (its
                    // NEW-CONFIG is in flight, or its main loop is busy
                    // applying it while its lease thread renews) is alive,
                    // so it is not suspected for the lag; it gets no grant
                    // until it renews in this configuration. Without this a
                    // member whose apply took longer than a lease was
                    // removed at every non-failure change (rebalancing
                    // moves under TATP removed two nodes in a row).
                    if config < self.config {
                        if let Some(h) = self.held.get_mut(&holder) {
                            h.last_request_ns = h.last_request_ns.max(now);
                        }
                    }
                    return None;
                }
                let majority = self.holds_majority(now);
                // A client is tracked from its first request (it may have
                // registered at an earlier CM), within the bound.
                if self.released.contains_key(&holder) {
                    return None;
                }
                if matches!(holder, LeaseHolder::Client(_))
                    && !self.held.contains_key(&holder)
                    && self.clients() < self.max_clients
                {
                    self.add(holder, now);
                }
                let h = self.held.get_mut(&holder)?;
                // The first request ends a formation grace (a start time
                // set in the future); later ones only move forward.
                h.last_request_ns = if h.heard {
                    h.last_request_ns.max(now)
                } else {
                    now
                };
                h.heard = true;
                if majority {
                    h.last_grant_ns = Some(now);
                }
                if h.grants.len() == MAX_OUTSTANDING {
                    h.grants.pop_front();
                }
                h.grants.push_back((seq, now));
                // Without a majority the CM still asks for leases (so it
                // can form one) but grants none.
                Some(LeaseMessage::Grant {
                    config: self.config,
                    seq,
                    lease: majority,
                })
            }
            LeaseMessage::GrantAck {
                config,
                holder,
                seq,
            } => {
                if config != self.config {
                    return None;
                }
                let held_ns = self.params.held_ns();
                let h = self.held.get_mut(&holder)?;
                let sent = h.grants.iter().find(|(s, _)| *s == seq)?.1;
                h.cm_lease_until_ns = h.cm_lease_until_ns.max(sent.saturating_add(held_ns));
                None
            }
            LeaseMessage::Release { holder } => {
                if matches!(holder, LeaseHolder::Client(_)) {
                    self.held.remove(&holder);
                    let keep_ns = self.params.lease_ns.saturating_mul(RELEASED_KEEP_LEASES);
                    self.released
                        .retain(|_, at| now < at.saturating_add(keep_ns));
                    while self.released.len() >= self.max_clients.max(1) {
                        let oldest = self
                            .released
                            .iter()
                            .min_by_key(|(h, at)| (**at, **h))
                            .map(|(h, _)| *h);
                        match oldest {
                            Some(h) => self.released.remove(&h),
                            None => break,
                        };
                    }
                    self.released.insert(holder, now);
                }
                None
            }
            LeaseMessage::Grant { .. } => None,
        }
    }

    /// Member `node` asked to join, so it restarted without its memory:
    /// if it has not asked for a lease in this configuration yet, its
    /// formation grace ends now and it is suspected at the next tick
    /// instead of a grace later (a whole-cluster restart must not wait
    /// `formation_grace_ms` for a member that came back empty). A member
    /// already heard from is alive here: its JOIN is a stale message, and
    /// its lease decides. Suspecting is always safe (the removal still
    /// waits out every lease, FaRM §5.2); this only shortens the wait.
    pub fn forfeit_grace(&mut self, node: NodeId, now: u64) {
        if let Some(h) = self.held.get_mut(&LeaseHolder::Node(node)) {
            if !h.heard {
                h.last_request_ns = now.saturating_sub(self.params.lease_ns);
            }
        }
    }

    /// The CM's lease listener did not look for `gap_ns` up to `now` (its
    /// process or machine stalled; [`LeaseDesk::listen`]): requests the
    /// holders sent meanwhile may wait unread in its socket, so each
    /// holder's silence is measured as if the gap had not happened (its
    /// last request moves later by the gap, at most to `now`). Only
    /// suspicion moves: the grants' bounds (`surely_expired_at`) and the
    /// CM's own leases at the members (`holds_majority`) do not, so what
    /// anyone may serve is unchanged.
    pub fn forgive_stall(&mut self, gap_ns: u64, now: u64) {
        for h in self.held.values_mut() {
            if h.last_request_ns < now {
                h.last_request_ns = h.last_request_ns.saturating_add(gap_ns).min(now);
            }
        }
    }

    /// Holders whose lease has expired at the CM (no request for a lease
    /// period), in order: FaRM §5.2 step 1's suspects.
    pub fn suspects(&self, now: u64) -> Vec<LeaseHolder> {
        self.held
            .iter()
            .filter(|(_, h)| now >= h.last_request_ns.saturating_add(self.params.lease_ns))
            .map(|(k, _)| *k)
            .collect()
    }

    /// The CM-local time after which `holder`'s lease has surely ended
    /// (it was never granted one: now).
    pub fn surely_expired_at(&self, holder: LeaseHolder, now: u64) -> u64 {
        match self.held.get(&holder).and_then(|h| h.last_grant_ns) {
            Some(t) => t.saturating_add(self.params.surely_over_ns()),
            None => now,
        }
    }

    /// True while the CM holds leases at a majority of the members,
    /// counting itself: only then may it serve and grant.
    pub fn holds_majority(&self, now: u64) -> bool {
        let held = self
            .members
            .iter()
            .filter(|&&m| {
                m == self.cm
                    || self
                        .held
                        .get(&LeaseHolder::Node(m))
                        .is_some_and(|h| now < h.cm_lease_until_ns)
            })
            .count();
        held * 2 > self.members.len()
    }

    /// The next local time at which a suspicion can start.
    pub fn next_wake_ns(&self) -> Option<u64> {
        self.held
            .values()
            .map(|h| h.last_request_ns.saturating_add(self.params.lease_ns))
            .min()
    }

    /// Panics if an invariant is broken (release builds too).
    pub fn check_invariants(&self) {
        for (k, h) in &self.held {
            assert!(
                h.grants.len() <= MAX_OUTSTANDING,
                "grants to {k:?} unbounded"
            );
            if let LeaseHolder::Node(n) = k {
                assert!(self.members.contains(n), "lease kept for non-member {n}");
            }
        }
        assert!(
            self.clients() <= self.max_clients,
            "client leases past limits.max_client_leases"
        );
        assert!(
            self.released.len() <= self.max_clients.max(1),
            "released clients unbounded"
        );
    }
}

/// A process's lease role (FaRM §5.1).
#[derive(Debug)]
pub enum LeaseRole {
    /// No lease yet (a client before it registers, or after a clean close).
    None,
    /// A member other than the CM, or a client: holds a lease at the CM.
    Member(LeaseClient),
    /// The CM: tracks every member's and client's lease.
    Cm(LeaseManager),
}

impl LeaseRole {
    /// The lease timing, if the role holds leases.
    fn params(&self) -> Option<LeaseParams> {
        match self {
            LeaseRole::None => None,
            LeaseRole::Member(c) => Some(c.params),
            LeaseRole::Cm(m) => Some(m.params),
        }
    }

    /// Forgive a listener stall of `gap_ns` up to `now` (see the roles'
    /// `forgive_stall`).
    fn forgive_stall(&mut self, gap_ns: u64, now: u64) {
        match self {
            LeaseRole::None => {}
            LeaseRole::Member(c) => c.forgive_stall(gap_ns, now),
            LeaseRole::Cm(m) => m.forgive_stall(gap_ns, now),
        }
    }
}

/// Who a lease message comes from, as the transport knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseFrom {
    /// A node the transport identified (a link, or a datagram from the
    /// node's own address in the address book).
    Node(NodeId),
    /// An anonymous sender (an accepted connection, a datagram from an
    /// address outside the address book): the message's own claim stands.
    Anonymous,
}

/// The member node a holder's lease message names as its sender (`None`
/// for a client's, and for a grant, which names nobody).
pub fn holder_node(m: &LeaseMessage) -> Option<NodeId> {
    match m {
        LeaseMessage::Request { holder, .. }
        | LeaseMessage::GrantAck { holder, .. }
        | LeaseMessage::Release { holder } => match holder {
            LeaseHolder::Node(n) => Some(*n),
            LeaseHolder::Client(_) => None,
        },
        LeaseMessage::Grant { .. } => None,
    }
}

/// What to do after [`LeaseDesk::on_message`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// Send this back to the sender (`to`: the node, when known).
    Reply {
        /// The node the reply goes to (`None`: back to an anonymous sender).
        to: Option<NodeId>,
        /// The reply (a `Grant` or a `GrantAck`).
        msg: LeaseMessage,
    },
    /// Nothing to send.
    Nothing,
    /// The lease engine alone cannot decide: the owning process must see
    /// the message on its own thread (a non-member to be told it was
    /// removed; a grant for a newer configuration).
    Forward,
}

/// What the clock master publishes for its lease thread, so that the
/// thread answers clock synchronisations without the process lock
/// (FaRMv2 §4.1: the master's answer is the sample's only server-side
/// delay, and a busy process widened every sample, so every uncertainty).
/// Published by the process after each input while it may hand out time,
/// and withdrawn, under the desk lock, the moment it may not
/// ([`LeaseDesk::withdraw_master_clock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasterClockView {
    /// Global time minus local time, ns (`ClockSync::master_offset_ns`).
    pub offset_ns: i128,
    /// Hand out no time at or above this, global ns: the stored time bound
    /// less the followers' reserve (`ClockSync::set_time_bound`).
    pub limit_ns: u64,
}

#[derive(Debug)]
struct Desk {
    role: LeaseRole,
    /// The master clock, while this process may hand out time from it.
    clock: Option<MasterClockView>,
    /// The highest global time handed out from `clock`, ns: the process
    /// folds it into its FF value (FaRMv2 §4.3).
    clock_handed_ns: u64,
    /// The owner is a member (or a registered client) and may use leases.
    serving: bool,
    /// The members of the owner's configuration (the CM answers only them).
    members: BTreeSet<NodeId>,
    /// The latest `now` seen: the two threads read the clock at different
    /// moments, and the engines expect time not to go back.
    last_now: u64,
    /// Grants a holder received, and requests it sent.
    grants: u64,
    requests: u64,
    /// Who receives this desk's lease messages, and when it last looked.
    listener: Listener,
}

/// The lease listener of a desk: a lease thread ([`LeaseDesk::attach_listener`])
/// or, without one, the owning process itself.
#[derive(Debug, Default)]
struct Listener {
    /// A lease thread listens; else the owner's lease ticks do
    /// ([`LeaseDesk::owner_listens`]).
    thread: bool,
    /// When the listener last looked, local ns.
    last_ns: Option<u64>,
    /// Stalls forgiven, and their total and longest, ns.
    stalls: u64,
    stalled_ns: u64,
    longest_ns: u64,
}

/// Listener stalls a desk forgave ([`LeaseDesk::stalls`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerStalls {
    /// Gaps longer than [`LeaseParams::stall_ns`] between two looks.
    pub count: u64,
    /// Their total, ns.
    pub total_ns: u64,
    /// The longest, ns.
    pub longest_ns: u64,
}

/// The lease engine shared by the process that owns it and a dedicated
/// lease thread (FaRM §5.1: "lease renewal ... runs in a dedicated
/// thread ... at the highest user-space priority", so that load cannot
/// starve it).
///
/// The owning process (`NodeProcess`, `ClientProcess`) drives the slow
/// decisions on its own thread through [`LeaseDesk::with`]: suspicion,
/// reconfiguration, NEW-CONFIG as a grant. The shell's lease thread only
/// answers lease messages ([`LeaseDesk::on_message`]) and sends renewals
/// ([`LeaseDesk::renew`]), taking this small lock and never the process's.
/// The simulator calls the same two methods through the process, on one
/// thread, so the code that ships is the code it runs.
///
/// Invariant: time as the engines see it never goes back
/// (`LeaseDesk::clamp`), whichever thread calls.
#[derive(Clone, Debug)]
pub struct LeaseDesk(std::sync::Arc<std::sync::Mutex<Desk>>);

impl LeaseDesk {
    /// A desk holding `role`; the owner serves from the start if `serving`.
    pub fn new(role: LeaseRole, serving: bool) -> Self {
        LeaseDesk(std::sync::Arc::new(std::sync::Mutex::new(Desk {
            role,
            clock: None,
            clock_handed_ns: 0,
            serving,
            members: BTreeSet::new(),
            last_now: 0,
            grants: 0,
            requests: 0,
            listener: Listener::default(),
        })))
    }

    /// A look by the listener at `now` (see [`LeaseDesk::listen`]).
    fn listen_locked(d: &mut Desk, now: u64) {
        let last = d.listener.last_ns.replace(now);
        let (Some(last), Some(p)) = (last, d.role.params()) else {
            return;
        };
        let gap = now.saturating_sub(last);
        if gap > p.stall_ns() {
            d.role.forgive_stall(gap, now);
            let l = &mut d.listener;
            l.stalls += 1;
            l.stalled_ns = l.stalled_ns.saturating_add(gap);
            l.longest_ns = l.longest_ns.max(gap);
        }
    }

    /// A lease thread listens for this desk from now on (the shell calls
    /// this as it starts the thread, which then calls
    /// [`LeaseDesk::listen`] at every look); the owner's ticks no longer
    /// count as looks.
    pub fn attach_listener(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        d.listener.thread = true;
        d.listener.last_ns = Some(now);
    }

    /// The lease thread looks for lease messages at `now` (every loop of
    /// its thread; clamped). A gap since its last look longer than
    /// [`LeaseParams::stall_ns`] was a stall of this process
    /// or machine (the listener runs at the highest priority and looks at
    /// least every renewal period), during which requests and grants may
    /// have waited unread; the role forgives it, so silence is counted
    /// only while the listener was there to hear (`forgive_stall`).
    ///
    /// FaRM §5.1 keeps leases short with a dedicated high-priority thread;
    /// on a shared virtual machine even that thread stops now and then
    /// (a real-time probe on this project's 2-core VM saw gaps of up to
    /// 92 ms, one of 75 ms at the very moment every node of a local
    /// cluster suspected every other during a bulk load). Forgiving only ever delays a suspicion, by at most the
    /// stall, and suspicion decides nothing about safety: what a holder
    /// may serve, and when a removal may commit, still follow the leases
    /// themselves (FaRM §5.2).
    pub fn listen(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        Self::listen_locked(&mut d, now);
    }

    /// The owner's lease tick at `now`: a look, unless a lease thread
    /// listens (in the simulator, and in a process without a lease thread,
    /// the owner receives the lease messages itself).
    pub fn owner_listens(&self, now: u64) {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        if !d.listener.thread {
            Self::listen_locked(&mut d, now);
        }
    }

    /// True unless the listener has not looked for longer than a stall
    /// (it is stalled, or has not run since one): suspicion waits until it
    /// has looked, and forgiven the stall, rather than count a silence it
    /// was not there to hear.
    pub fn listener_current(&self, now: u64) -> bool {
        let d = self.lock();
        match (d.listener.last_ns, d.role.params()) {
            (Some(last), Some(p)) => now.saturating_sub(last) <= p.stall_ns(),
            _ => true,
        }
    }

    /// The stalls this desk's listener had and forgave so far.
    pub fn stalls(&self) -> ListenerStalls {
        let l = &self.lock().listener;
        ListenerStalls {
            count: l.stalls,
            total_ns: l.stalled_ns,
            longest_ns: l.longest_ns,
        }
    }

    /// The next local time the lease thread should look by: the next
    /// renewal, and at most a renewal period from `now` (so that a healthy
    /// listener's gaps stay well below [`LeaseParams::stall_ns`]).
    pub fn next_look_ns(&self, now: u64) -> u64 {
        let d = self.lock();
        let renew = match (&d.role, d.serving) {
            (LeaseRole::Member(c), true) => c.next_renew_ns(),
            _ => u64::MAX,
        };
        let period = d.role.params().map_or(u64::MAX, |p| p.renew_ns());
        renew.min(now.saturating_add(period))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Desk> {
        match self.0.lock() {
            Ok(g) => g,
            // A panic elsewhere already stops the process (invariants are
            // asserted); the state itself is plain data.
            Err(p) => p.into_inner(),
        }
    }

    /// `now`, never below a time already seen here.
    fn clamp(d: &mut Desk, now: u64) -> u64 {
        d.last_now = d.last_now.max(now);
        d.last_now
    }

    /// Run `f` on the role, at `now` (clamped: returned as the second
    /// argument to `f`).
    pub fn with<R>(&self, now: u64, f: impl FnOnce(&mut LeaseRole, u64) -> R) -> R {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        f(&mut d.role, now)
    }

    /// Read the role without a time (for queries that take none).
    pub fn read<R>(&self, f: impl FnOnce(&LeaseRole) -> R) -> R {
        f(&self.lock().role)
    }

    /// The owner may (not) use its leases: a removed or restarted node
    /// neither answers nor renews.
    pub fn set_serving(&self, serving: bool) {
        self.lock().serving = serving;
    }

    /// Publish the master clock (`Some`) or stop handing out time from it
    /// (`None`).
    pub fn set_master_clock(&self, view: Option<MasterClockView>) {
        self.lock().clock = view;
    }

    /// The highest global time handed out through
    /// [`LeaseDesk::master_time`], ns (0: none), which the process's FF
    /// value covers (`NodeProcess::ff_value`).
    pub fn master_clock_handed_ns(&self) -> u64 {
        self.lock().clock_handed_ns
    }

    /// Stop handing out time at once (the clock may be disabled, FaRMv2
    /// §4.3): nothing is handed out after this returns until a view is
    /// published again, so an FF value computed afterwards covers every
    /// time handed out.
    pub fn withdraw_master_clock(&self) {
        self.set_master_clock(None)
    }

    /// The clock master's answer to a synchronisation at local time `now`
    /// (FaRMv2 §4.1): its global time, if it may hand out time now. It may
    /// when it serves, is the CM with leases at a majority of the members
    /// (FaRM §5.1), and has published a view (it is the master, enabled,
    /// taken over) whose limit the time stays below. The time is read and
    /// recorded under the desk lock, so a withdrawal either precedes it or
    /// finds it in [`LeaseDesk::master_clock_handed_ns`].
    ///
    /// Errors: why no time is handed out, as the process would say it.
    pub fn master_time(&self, now: u64) -> Result<u64, &'static str> {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        let LeaseRole::Cm(m) = &d.role else {
            return Err("not the clock master");
        };
        if !d.serving || !m.holds_majority(now) {
            return Err("the clock master holds no lease majority now (FaRM §5.1)");
        }
        let Some(v) = d.clock else {
            return Err(
                "the clock master hands out no time now (disabled during a CM change, \
                        or not taken over yet, FaRMv2 §4.3)",
            );
        };
        let t = (now as i128 + v.offset_ns).clamp(0, u64::MAX as i128) as u64;
        if t >= v.limit_ns {
            return Err("the clock master reached its stored time bound (FaRMv2 §4.3)");
        }
        d.clock_handed_ns = d.clock_handed_ns.max(t);
        Ok(t)
    }

    /// The members of the owner's current configuration.
    pub fn set_members(&self, members: impl IntoIterator<Item = NodeId>) {
        self.lock().members = members.into_iter().collect();
    }

    /// Grants received and requests sent by a holder so far.
    pub fn counts(&self) -> (u64, u64) {
        let d = self.lock();
        (d.grants, d.requests)
    }

    /// A lease message from `from` at `now` (FaRM §5.1): the CM grants a
    /// member's or a client's request and records a `GrantAck`; a holder
    /// records a grant and acknowledges it. Messages of a non-member to
    /// the CM, and grants for another configuration, are
    /// [`LeaseOutcome::Forward`]ed to the owner.
    pub fn on_message(&self, now: u64, from: LeaseFrom, m: &LeaseMessage) -> LeaseOutcome {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        // Whoever receives lease messages is the listener.
        Self::listen_locked(&mut d, now);
        if !d.serving {
            return LeaseOutcome::Nothing;
        }
        let client = matches!(
            m,
            LeaseMessage::Request {
                holder: LeaseHolder::Client(_),
                ..
            } | LeaseMessage::GrantAck {
                holder: LeaseHolder::Client(_),
                ..
            } | LeaseMessage::Release {
                holder: LeaseHolder::Client(_)
            }
        );
        let claimed = match (m, &d.role) {
            (LeaseMessage::Grant { .. }, LeaseRole::Member(c)) => Some(c.cm()),
            _ => holder_node(m),
        };
        let sender = match from {
            LeaseFrom::Node(n) => Some(n),
            LeaseFrom::Anonymous => claimed,
        };
        let Desk {
            role,
            members,
            grants,
            ..
        } = &mut *d;
        match role {
            LeaseRole::Cm(mgr) if client => match mgr.on_message(now, m) {
                Some(msg) => LeaseOutcome::Reply {
                    to: match from {
                        LeaseFrom::Node(n) => Some(n),
                        LeaseFrom::Anonymous => None,
                    },
                    msg,
                },
                None => LeaseOutcome::Nothing,
            },
            _ if client => LeaseOutcome::Nothing,
            LeaseRole::Cm(mgr) => {
                let Some(n) = sender else {
                    return LeaseOutcome::Nothing;
                };
                if !members.contains(&n) {
                    return LeaseOutcome::Forward;
                }
                match mgr.on_message(now, m) {
                    Some(msg) => LeaseOutcome::Reply { to: Some(n), msg },
                    None => LeaseOutcome::Nothing,
                }
            }
            LeaseRole::Member(c) => {
                let Some(n) = sender else {
                    return LeaseOutcome::Nothing;
                };
                if let LeaseMessage::Grant { config, .. } = m {
                    if *config > c.config() {
                        return LeaseOutcome::Forward;
                    }
                }
                match c.on_message(now, n, m) {
                    Some(msg) => {
                        *grants += 1;
                        let to = match c.me() {
                            // The CM holds no lease at a client.
                            LeaseHolder::Client(_) => return LeaseOutcome::Nothing,
                            LeaseHolder::Node(_) => Some(n),
                        };
                        LeaseOutcome::Reply { to, msg }
                    }
                    None => LeaseOutcome::Nothing,
                }
            }
            LeaseRole::None => LeaseOutcome::Nothing,
        }
    }

    /// A holder's renewal, if one is due at `now`: the CM to send it to and
    /// the request (FaRM §5.1, every `lease / 5`).
    pub fn renew(&self, now: u64) -> Option<(NodeId, LeaseMessage)> {
        let mut d = self.lock();
        let now = Self::clamp(&mut d, now);
        if !d.serving {
            return None;
        }
        let LeaseRole::Member(c) = &mut d.role else {
            return None;
        };
        let cm = c.cm();
        let m = c.tick(now)?;
        d.requests += 1;
        Some((cm, m))
    }

    /// When the next renewal is due (local ns), if this desk renews.
    pub fn next_renew_ns(&self) -> Option<u64> {
        let d = self.lock();
        match (&d.role, d.serving) {
            (LeaseRole::Member(c), true) => Some(c.next_renew_ns()),
            _ => None,
        }
    }

    /// Panics (release builds too) if the role's invariants are broken.
    pub fn check_invariants(&self) {
        match &self.lock().role {
            LeaseRole::Member(c) => c.check_invariants(),
            LeaseRole::Cm(m) => m.check_invariants(),
            LeaseRole::None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn params() -> LeaseParams {
        LeaseParams::new(10, 1000)
    }

    fn cm_desk() -> LeaseDesk {
        let m = LeaseManager::new(params(), ConfigId(1), NodeId(0), &[NodeId(0), NodeId(1)], 0);
        let d = LeaseDesk::new(LeaseRole::Cm(m), true);
        d.set_members([NodeId(0), NodeId(1)]);
        d
    }

    /// Node 1's desk, a member holding its lease at CM node 0.
    fn member_desk() -> LeaseDesk {
        let c = LeaseClient::new(
            params(),
            LeaseHolder::Node(NodeId(1)),
            ConfigId(1),
            NodeId(0),
            0,
        );
        LeaseDesk::new(LeaseRole::Member(c), true)
    }

    fn request(holder: LeaseHolder, seq: u64) -> LeaseMessage {
        LeaseMessage::Request {
            config: ConfigId(1),
            holder,
            seq,
        }
    }

    fn cm_suspects(d: &LeaseDesk, now: u64) -> Vec<LeaseHolder> {
        d.with(now, |r, now| match r {
            LeaseRole::Cm(m) => m.suspects(now),
            _ => Vec::new(),
        })
    }

    /// A stall of the CM's lease listener (its thread did not run: on a
    /// shared VM, tens of ms) is not counted as the holders' silence:
    /// suspicion waits while the listener is behind, the listener's next
    /// look forgives the gap, and a holder that stays silent is suspected
    /// a lease of listening later. Without forgiveness the look at 30 ms
    /// suspects node 1 at once.
    #[test]
    fn a_stall_of_the_cm_listener_is_not_counted_as_a_holders_silence() {
        let d = cm_desk();
        d.attach_listener(0);
        d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 1),
        );
        for t in [2, 4, 6] {
            d.listen(t * MS);
            assert!(d.listener_current(t * MS));
        }
        // The thread stops from 6 ms to 30 ms: meanwhile the listener is
        // not current, so the process does not suspect.
        assert!(!d.listener_current(29 * MS), "a listener 23 ms behind");
        d.listen(30 * MS);
        assert!(d.listener_current(30 * MS));
        assert_eq!(
            d.stalls(),
            ListenerStalls {
                count: 1,
                total_ns: 24 * MS,
                longest_ns: 24 * MS,
            }
        );
        assert!(cm_suspects(&d, 30 * MS).is_empty(), "the stall was counted");
        // Node 1 stays silent: suspected once a lease of listening passed
        // (its request at 1 ms, moved by the 24 ms gap: 25 + 10).
        for t in [32, 34] {
            d.listen(t * MS);
            assert!(cm_suspects(&d, t * MS).is_empty(), "{t} ms");
        }
        d.listen(35 * MS);
        assert_eq!(cm_suspects(&d, 35 * MS), vec![LeaseHolder::Node(NodeId(1))]);
    }

    /// A member's listener stall moves when it suspects the CM, not its own
    /// lease: after the stall it may not serve until it is granted again,
    /// and a CM that stays silent is suspected a lease of listening later.
    #[test]
    fn a_stall_of_a_members_listener_delays_suspecting_the_cm_not_its_lease() {
        let d = member_desk();
        d.attach_listener(0);
        let (_, req) = d.renew(MS).expect("due");
        let LeaseMessage::Request { seq, .. } = req else {
            panic!("{req:?}")
        };
        let grant = LeaseMessage::Grant {
            config: ConfigId(1),
            seq,
            lease: true,
        };
        d.on_message(2 * MS, LeaseFrom::Node(NodeId(0)), &grant);
        let state = |now: u64| {
            d.with(now, |r, now| match r {
                LeaseRole::Member(c) => (c.holds(now), c.cm_suspected(now)),
                _ => (false, false),
            })
        };
        assert_eq!(state(3 * MS), (true, false));
        // A 20 ms stall from 4 ms.
        d.listen(4 * MS);
        d.listen(24 * MS);
        // Its lease (from the request at 1 ms) ended during the stall;
        // the CM, granted at 2 ms, has had 2 ms of listening before the
        // stall and gets 8 more after it.
        assert_eq!(state(24 * MS), (false, false), "serves past its lease");
        for t in [26, 28, 30, 31] {
            d.listen(t * MS);
            assert_eq!(state(t * MS), (false, false), "{t} ms");
        }
        d.listen(32 * MS);
        assert_eq!(state(32 * MS), (false, true));
    }

    /// Without a lease thread (the simulator) the owner's lease ticks are
    /// the looks, and forgive a stall of the process; with one attached
    /// they do not count, so a stalled thread leaves the listener behind.
    #[test]
    fn the_owner_listens_only_without_a_lease_thread() {
        let d = cm_desk();
        d.owner_listens(MS);
        d.owner_listens(20 * MS);
        assert_eq!(d.stalls().count, 1, "the owner's gap is a stall");
        let t = cm_desk();
        t.attach_listener(0);
        t.owner_listens(MS);
        t.owner_listens(2 * MS);
        t.owner_listens(20 * MS);
        assert_eq!(t.stalls().count, 0);
        assert!(!t.listener_current(20 * MS), "the thread did not look");
    }

    /// The lease thread's path: the CM desk grants a member and a client
    /// alone, hands a non-member back to the node, and a desk that does not
    /// serve (a removed node) answers nothing.
    #[test]
    fn the_desk_grants_members_and_clients_and_forwards_non_members() {
        let d = cm_desk();
        let member = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 1),
        );
        assert!(
            matches!(
                member,
                LeaseOutcome::Reply {
                    to: Some(NodeId(1)),
                    msg: LeaseMessage::Grant { seq: 1, .. }
                }
            ),
            "{member:?}"
        );
        let client = d.on_message(
            MS,
            LeaseFrom::Anonymous,
            &request(LeaseHolder::Client(9), 1),
        );
        assert!(
            matches!(
                client,
                LeaseOutcome::Reply {
                    to: None,
                    msg: LeaseMessage::Grant { .. }
                }
            ),
            "{client:?}"
        );
        let stranger = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(4)),
            &request(LeaseHolder::Node(NodeId(4)), 1),
        );
        assert_eq!(stranger, LeaseOutcome::Forward);
        d.set_serving(false);
        let removed = d.on_message(
            MS,
            LeaseFrom::Node(NodeId(1)),
            &request(LeaseHolder::Node(NodeId(1)), 2),
        );
        assert_eq!(removed, LeaseOutcome::Nothing);
    }

    /// Renewals are due once whichever thread asks, and a holder's desk
    /// never sees time go back (two threads read the clock at different
    /// moments).
    #[test]
    fn a_renewal_is_due_once_and_time_never_goes_back() {
        let d = member_desk();
        assert!(d.renew(5 * MS).is_some());
        assert!(
            d.renew(5 * MS).is_none(),
            "a second thread at the same time renews again"
        );
        // A thread that read the clock earlier asks late: still not due.
        assert!(d.renew(MS).is_none());
        assert_eq!(d.with(MS, |_, now| now), 5 * MS, "time went back");
        // The grant for seq 1 gives the holder its lease and is acknowledged.
        let grant = LeaseMessage::Grant {
            config: ConfigId(1),
            seq: 1,
            lease: true,
        };
        let out = d.on_message(6 * MS, LeaseFrom::Node(NodeId(0)), &grant);
        assert!(
            matches!(
                out,
                LeaseOutcome::Reply {
                    to: Some(NodeId(0)),
                    msg: LeaseMessage::GrantAck { .. }
                }
            ),
            "{out:?}"
        );
        assert_eq!(d.counts(), (1, 1));
        // A grant of a newer configuration goes to the owner.
        let newer = LeaseMessage::Grant {
            config: ConfigId(2),
            seq: 1,
            lease: true,
        };
        assert_eq!(
            d.on_message(7 * MS, LeaseFrom::Node(NodeId(0)), &newer),
            LeaseOutcome::Forward
        );
        assert!(d.read(|r| matches!(r, LeaseRole::Member(c) if c.holds(7 * MS))));
    }

    /// A re-sent NEW-CONFIG's second ACK must not report the grant the
    /// first ACK gave the very CM asking (every CM failover waited a lease
    /// for it), while grants to any other CM still count.
    #[test]
    fn grants_to_the_asking_cm_do_not_count_in_the_lease_left() {
        let p = LeaseParams::new(50, 0);
        let mut c = LeaseClient::new(p, LeaseHolder::Node(NodeId(2)), ConfigId(1), NodeId(0), 0);
        c.note_grant(10 * MS); // to CM 0
        c.reset(20 * MS, ConfigId(2), NodeId(1));
        c.note_grant(20 * MS); // to CM 1: its NEW-CONFIG-ACK
                               // CM 1 asks: only the grant to CM 0 counts (10 + 50 - 30).
        assert_eq!(c.cm_lease_left_ns(30 * MS, NodeId(1)), 30 * MS);
        // Another would-be CM asks: the grant to CM 1 counts too.
        assert_eq!(c.cm_lease_left_ns(30 * MS, NodeId(3)), 40 * MS);
        assert_eq!(c.cm_lease_left_ns(80 * MS, NodeId(3)), 0);
        c.check_invariants();
    }

    #[test]
    fn the_three_way_handshake_gives_both_sides_a_lease() {
        let p = params();
        let members = [NodeId(0), NodeId(1), NodeId(2)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        // The CM holds no lease yet, so it cannot grant: formation goes
        // through NEW-CONFIG, whose acks are grants.
        assert!(!cm.holds_majority(0));
        cm.granted_by(NodeId(1), 0);
        assert!(cm.holds_majority(MS));
        let mut n1 = LeaseClient::new(p, LeaseHolder::Node(NodeId(1)), ConfigId(1), NodeId(0), 0);
        let req = n1.tick(MS).unwrap();
        assert!(n1.tick(MS + 1).is_none(), "renewal waits lease/5");
        assert!(!n1.holds(MS));
        let grant = cm.on_message(MS + 100, &req).unwrap();
        let ack = n1.on_message(MS + 200, NodeId(0), &grant).unwrap();
        assert!(n1.holds(MS + 200));
        // The holder's lease runs from its send time, shortened by the drift.
        assert_eq!(p.held_ns(), 9_990_000);
        assert!(n1.holds(MS + p.held_ns() - 1));
        assert!(!n1.holds(MS + p.held_ns()));
        assert_eq!(cm.on_message(MS + 300, &ack), None);
        // The CM's bound on the holder's lease runs from the grant's send.
        assert_eq!(
            cm.surely_expired_at(LeaseHolder::Node(NodeId(1)), 0),
            MS + 100 + 10_010_000
        );
        // A grant from a non-CM or for another configuration is ignored.
        assert!(n1.on_message(MS, NodeId(2), &grant).is_none());
        let other = LeaseMessage::Grant {
            lease: true,
            config: ConfigId(9),
            seq: 1,
        };
        assert!(n1.on_message(MS, NodeId(0), &other).is_none());
        n1.check_invariants();
        cm.check_invariants();
    }

    #[test]
    fn a_member_lagging_one_configuration_behind_is_not_suspected_nor_granted() {
        let p = params();
        let members = [NodeId(0), NodeId(1)];
        let mut cm = LeaseManager::new(p, ConfigId(2), NodeId(0), &members, 0);
        let mut t = 0;
        let mut seq = 0;
        while t < 30 * MS {
            seq += 1;
            let old = LeaseMessage::Request {
                config: ConfigId(1),
                holder: LeaseHolder::Node(NodeId(1)),
                seq,
            };
            assert!(
                cm.on_message(t, &old).is_none(),
                "no grant across configurations"
            );
            assert!(cm.suspects(t).is_empty(), "{t}");
            t += 2 * MS;
        }
        assert!(
            !cm.holds_majority(t),
            "renewals of an older configuration grant nothing"
        );
        // A newer configuration's request (a CM behind its members) counts
        // for nothing, and silence is suspected as before.
        let newer = LeaseMessage::Request {
            config: ConfigId(3),
            holder: LeaseHolder::Node(NodeId(1)),
            seq: seq + 1,
        };
        assert!(cm.on_message(t, &newer).is_none());
        assert_eq!(cm.suspects(t + 20 * MS), vec![LeaseHolder::Node(NodeId(1))]);
        cm.check_invariants();
    }

    /// The master's lease thread hands out time only from a published
    /// view, below its limit, as the CM holding a lease majority; a
    /// withdrawal stops it at once and reports the highest time handed
    /// out, which the process's FF value then covers (FaRMv2 §4.3).
    #[test]
    fn the_lease_thread_hands_out_master_time_only_as_published() {
        let p = params();
        let members = [NodeId(0), NodeId(1), NodeId(2)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        cm.granted_by(NodeId(1), 0);
        let desk = LeaseDesk::new(LeaseRole::Cm(cm), true);
        assert!(desk.master_time(MS).is_err(), "no view published yet");
        let view = MasterClockView {
            offset_ns: 1_000,
            limit_ns: 5 * MS,
        };
        desk.set_master_clock(Some(view));
        assert_eq!(desk.master_clock_handed_ns(), 0);
        assert_eq!(desk.master_time(MS), Ok(MS + 1_000));
        assert_eq!(desk.master_time(2 * MS), Ok(2 * MS + 1_000));
        assert!(desk.master_time(5 * MS).is_err(), "at its time bound");
        assert_eq!(desk.master_clock_handed_ns(), 2 * MS + 1_000);
        desk.withdraw_master_clock();
        assert!(desk.master_time(5 * MS).is_err(), "withdrawn");
        // The majority lapses a lease after the last grant.
        desk.set_master_clock(Some(MasterClockView {
            limit_ns: u64::MAX,
            ..view
        }));
        assert!(desk.master_time(5 * MS).is_ok());
        assert!(desk.master_time(1_000 * MS).is_err(), "no lease majority");
        // Only a CM's desk answers, and only while it serves.
        let member = LeaseDesk::new(
            LeaseRole::Member(LeaseClient::new(
                p,
                LeaseHolder::Node(NodeId(1)),
                ConfigId(1),
                NodeId(0),
                0,
            )),
            true,
        );
        member.set_master_clock(Some(view));
        assert!(member.master_time(MS).is_err());
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        cm.granted_by(NodeId(1), 0);
        let idle = LeaseDesk::new(LeaseRole::Cm(cm), false);
        idle.set_master_clock(Some(view));
        assert!(idle.master_time(MS).is_err(), "not serving");
    }

    #[test]
    fn silence_is_suspected_after_one_lease_and_a_minority_cm_stops_granting() {
        let p = params();
        let members = [NodeId(0), NodeId(1), NodeId(2)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        cm.granted_by(NodeId(1), 0);
        cm.granted_by(NodeId(2), 0);
        let mut n1 = LeaseClient::new(p, LeaseHolder::Node(NodeId(1)), ConfigId(1), NodeId(0), 0);
        // Node 1 renews every 2 ms; node 2 is silent.
        let mut t = 0;
        while t < 30 * MS {
            if let Some(req) = n1.tick(t) {
                if let Some(g) = cm.on_message(t, &req) {
                    if let Some(ack) = n1.on_message(t, NodeId(0), &g) {
                        cm.on_message(t, &ack);
                    }
                }
            }
            if t < 10 * MS {
                assert!(cm.suspects(t).is_empty(), "{t}");
            }
            t += MS / 2;
        }
        assert_eq!(cm.suspects(t), vec![LeaseHolder::Node(NodeId(2))]);
        assert!(!n1.cm_suspected(t));
        assert!(cm.holds_majority(t), "1 and the CM are 2 of 3");
        // Node 1 goes silent too: the CM loses its majority and stops
        // granting, and node 1 would suspect it.
        let late = t + 20 * MS;
        assert!(!cm.holds_majority(late));
        let req = LeaseMessage::Request {
            config: ConfigId(1),
            holder: LeaseHolder::Node(NodeId(1)),
            seq: 1_000,
        };
        assert_eq!(
            cm.on_message(late, &req),
            Some(LeaseMessage::Grant {
                config: ConfigId(1),
                seq: 1_000,
                lease: false
            }),
            "a minority CM asks for leases but grants none"
        );
        assert!(n1.cm_suspected(late));
        assert!(!n1.holds(late));
    }

    /// Formation: a fresh CM holds no lease anywhere, so its first grants
    /// carry no lease; the holders' acks give it a majority, and the next
    /// round grants real leases.
    #[test]
    fn a_fresh_cluster_forms_leases_in_two_rounds() {
        let p = params();
        let members = [NodeId(0), NodeId(1), NodeId(2)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0);
        let mut n1 = LeaseClient::new(p, LeaseHolder::Node(NodeId(1)), ConfigId(1), NodeId(0), 0);
        let mut t = 0;
        for round in 0..2 {
            let req = n1.tick(t).unwrap();
            let grant = cm.on_message(t, &req).unwrap();
            assert!(matches!(grant, LeaseMessage::Grant { lease, .. } if lease == (round == 1)));
            let ack = n1.on_message(t, NodeId(0), &grant).unwrap();
            assert_eq!(n1.holds(t), round == 1, "round {round}");
            assert!(cm.on_message(t, &ack).is_none());
            assert!(cm.holds_majority(t));
            t += p.renew_ns();
        }
    }

    #[test]
    fn reconfiguration_moves_leases_to_the_new_cm() {
        let p = params();
        let mut n1 = LeaseClient::new(p, LeaseHolder::Node(NodeId(1)), ConfigId(1), NodeId(0), 0);
        let req = n1.tick(0).unwrap();
        let mut cm0 = LeaseManager::new(p, ConfigId(1), NodeId(0), &[NodeId(0), NodeId(1)], 0);
        cm0.granted_by(NodeId(1), 0);
        let g = cm0.on_message(0, &req).unwrap();
        n1.on_message(0, NodeId(0), &g);
        assert!(n1.holds(MS));
        // NEW-CONFIG from CM 2: the old lease is void, renewals go to 2.
        n1.reset(2 * MS, ConfigId(2), NodeId(2));
        assert!(!n1.holds(2 * MS));
        assert_eq!(n1.cm(), NodeId(2));
        let req = n1.tick(2 * MS).unwrap();
        assert!(matches!(
            req,
            LeaseMessage::Request {
                config: ConfigId(2),
                ..
            }
        ));
        // A stale grant from the old CM does not count.
        assert!(n1.on_message(2 * MS, NodeId(0), &g).is_none());
        let mut cm2 = LeaseManager::new(p, ConfigId(2), NodeId(2), &[NodeId(1), NodeId(2)], 2 * MS);
        cm2.granted_by(NodeId(1), 2 * MS);
        let g2 = cm2.on_message(2 * MS, &req).unwrap();
        assert!(n1.on_message(2 * MS, NodeId(2), &g2).is_some());
        assert!(n1.holds(3 * MS));
        // The new configuration drops removed members' leases.
        cm2.set_config(3 * MS, ConfigId(3), &[NodeId(2)]);
        assert!(cm2.suspects(100 * MS).is_empty());
        cm2.check_invariants();
    }

    /// Clients hold leases too: the CM tracks one from its first request
    /// and suspects it a lease after its last; a released client is not
    /// suspected, and its request that arrives after the release (sent
    /// before it) starts nothing.
    #[test]
    fn a_silent_client_is_suspected_and_a_released_one_is_not() {
        let p = params();
        let members = [NodeId(0), NodeId(1)];
        let mut cm = LeaseManager::new(p, ConfigId(1), NodeId(0), &members, 0).with_max_clients(2);
        let req = |c: u64, seq: u64| LeaseMessage::Request {
            config: ConfigId(1),
            holder: LeaseHolder::Client(c),
            seq,
        };
        assert!(cm.on_message(MS, &req(7, 1)).is_some());
        assert!(cm.on_message(MS, &req(8, 1)).is_some());
        // Past the bound: not tracked, not granted.
        assert!(cm.on_message(MS, &req(9, 1)).is_none());
        assert_eq!(cm.clients(), 2);
        cm.on_message(
            2 * MS,
            &LeaseMessage::Release {
                holder: LeaseHolder::Client(8),
            },
        );
        assert!(cm.on_message(3 * MS, &req(8, 2)).is_none());
        cm.on_message(
            11 * MS,
            &LeaseMessage::GrantAck {
                config: ConfigId(1),
                holder: LeaseHolder::Node(NodeId(1)),
                seq: 0,
            },
        );
        let clients: Vec<_> = cm
            .suspects(11 * MS)
            .into_iter()
            .filter(|h| matches!(h, LeaseHolder::Client(_)))
            .collect();
        assert_eq!(clients, vec![LeaseHolder::Client(7)]);
        cm.check_invariants();
    }
}
