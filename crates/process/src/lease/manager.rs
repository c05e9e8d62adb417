//! The CM's side of the leases (FaRM §5.1): it grants every holder its
//! lease, holds one at every member, suspects a silent holder, and bounds
//! when a removed holder's lease has surely ended (FaRM §5.2 step 7).

use super::*;

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
    pub(super) params: LeaseParams,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::testing::*;

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
