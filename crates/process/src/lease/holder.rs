//! The holder's side of a lease (FaRM §5.1): a member node or a client
//! renews its lease at the CM, grants the CM its lease in return, and
//! suspects the CM when grants stop for a lease period.

use super::*;

/// The holder's side: a node other than the CM, or a client.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    pub(super) params: LeaseParams,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::testing::*;

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
}
