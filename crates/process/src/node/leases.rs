//! Leases (FaRM §5.1): starting the lease role on the shell's clock, the
//! lease messages the process decides (the [`LeaseDesk`] decides the rest
//! on the lease thread), renewals, and suspicion of the CM, of members and
//! of clients whose leases ran out.

use super::{sender, NodeEffect, NodeEvent, NodeProcess, Peer, Standing};
use crate::lease::{LeaseClient, LeaseDesk, LeaseFrom, LeaseManager, LeaseOutcome, LeaseRole};
use meridian_wire::{ConfigId, Frame, LeaseHolder, LeaseMessage, NodeId, Request};

impl NodeProcess {
    /// Start the lease role at the first input, on the shell's clock.
    pub(super) fn start_leases(&mut self, now: u64) {
        if std::mem::replace(&mut self.lease_started, true) {
            return;
        }
        let c = &self.config;
        // A fresh cluster's members start at different times: the first
        // CM gives each a grace period to ask for its first lease.
        let grace_ns =
            if (c.id() == ConfigId(1) || self.restored) && self.standing == Standing::Member {
                c.lease.formation_grace_ms * 1_000_000
            } else {
                0
            };
        let role = if c.cm() == self.id {
            LeaseRole::Cm(
                LeaseManager::new(
                    self.lease_params,
                    c.id(),
                    self.id,
                    &c.members(),
                    now.saturating_add(grace_ns),
                )
                .with_max_clients(c.limits.max_client_leases),
            )
        } else {
            LeaseRole::Member(
                LeaseClient::new(
                    self.lease_params,
                    LeaseHolder::Node(self.id),
                    c.id(),
                    c.cm(),
                    now,
                )
                .with_grace(now.saturating_add(grace_ns)),
            )
        };
        self.lease.with(now, |r, _| *r = role);
    }

    /// True while this node holds its lease (the CM: leases at a majority).
    pub fn may_serve(&self, now: u64) -> bool {
        self.standing == Standing::Member
            && self.lease.read(|r| match r {
                LeaseRole::Member(c) => c.holds(now),
                LeaseRole::Cm(m) => m.holds_majority(now),
                LeaseRole::None => false,
            })
    }

    /// A lease message (FaRM §5.1), through the same [`LeaseDesk`] path
    /// the shell's lease thread takes; what the desk cannot decide alone
    /// comes back here.
    pub(super) fn on_lease(&mut self, now: u64, from: Peer, m: LeaseMessage) {
        let via = match from {
            Peer::Node(n) => LeaseFrom::Node(n),
            Peer::Conn(_) => LeaseFrom::Anonymous,
        };
        match self.lease.on_message(now, via, &m) {
            LeaseOutcome::Reply { to, msg } => {
                let to = to.map_or(from, Peer::Node);
                self.send(
                    to,
                    Frame::OneWay {
                        config: self.config.id(),
                        truncate: Default::default(),
                        req: Request::Lease(msg),
                    },
                );
            }
            LeaseOutcome::Nothing => {}
            LeaseOutcome::Forward => self.on_lease_forwarded(from, &m),
        }
    }

    /// A lease message the desk handed back: a non-member asking the CM
    /// for a lease is told it was removed (with the CM's NEW-CONFIG; it
    /// then asks to join). A grant for a newer configuration is ignored:
    /// NEW-CONFIG brings that configuration.
    fn on_lease_forwarded(&mut self, from: Peer, m: &LeaseMessage) {
        if self.standing != Standing::Member || self.config.cm() != self.id {
            return;
        }
        if let Some(n) = sender(from, crate::lease::holder_node(m)) {
            if !self.config.is_member(n) {
                self.tell_removed(n);
            }
        }
    }

    /// A lease message the shell's lease thread could not decide alone
    /// ([`LeaseOutcome::Forward`]), from `from` (a node the thread
    /// identified by its address, or anonymous).
    pub fn on_lease_forward(&mut self, now: u64, from: Option<NodeId>, m: LeaseMessage) {
        self.start_leases(now);
        let peer = match from {
            Some(n) => Peer::Node(n),
            None => Peer::Conn(0),
        };
        self.on_lease_forwarded(peer, &m);
        self.pump(now);
    }

    /// The lease engine, for the shell's lease thread.
    pub fn lease_desk(&self) -> LeaseDesk {
        self.lease.clone()
    }

    /// FaRM §5.1: renew, grant, suspect. (In the tokio shell the lease
    /// thread renews too; a renewal is due once, whichever thread asks.)
    pub(super) fn lease_tick(&mut self, now: u64) {
        // Without a lease thread (the simulator), this tick is the
        // listener's look (`LeaseDesk::owner_listens`).
        self.lease.owner_listens(now);
        if let Some((cm, m)) = self.lease.renew(now) {
            self.send_oneway(cm, Request::Lease(m));
        }
        // A listener that has not looked for longer than a stall has not
        // heard what may be waiting for it: suspect after its next look,
        // which forgives the stall (`LeaseDesk::listener_current`).
        if !self.lease.listener_current(now) {
            return;
        }
        enum Seen {
            CmSuspected(NodeId),
            Holders(Vec<LeaseHolder>),
            Nothing,
        }
        let seen = self.lease.with(now, |r, now| match r {
            LeaseRole::Member(c) if c.cm_suspected(now) => Seen::CmSuspected(c.cm()),
            LeaseRole::Cm(m) => {
                let expired = m.suspects(now);
                for h in &expired {
                    if let LeaseHolder::Client(_) = h {
                        m.remove(*h);
                    }
                }
                Seen::Holders(expired)
            }
            _ => Seen::Nothing,
        });
        match seen {
            Seen::Nothing => {}
            Seen::CmSuspected(cm) => {
                if self.reconfig.may_suspect_cm() {
                    self.note_suspect(now, vec![cm]);
                    self.reconfig.suspect_cm(now);
                }
            }
            Seen::Holders(expired) => {
                let mut suspects = Vec::new();
                for h in expired {
                    match h {
                        LeaseHolder::Node(n) => suspects.push(n),
                        LeaseHolder::Client(c) => {
                            // A dead client's locks and undecided commits:
                            // the next configuration recovers every
                            // transaction of an older one (FaRM §5.3), its
                            // included, and refuses its late requests.
                            self.clients_to_recover = true;
                            self.effects
                                .push(NodeEffect::Event(NodeEvent::ClientSuspect(c)));
                        }
                    }
                }
                if self.clients_to_recover
                    && suspects.is_empty()
                    && self.reconfig.may_start()
                    && self.reconfig.config().id() == self.config.id()
                    && self.config.cm() == self.id
                {
                    self.clients_to_recover = false;
                    let next = self.config.renewed();
                    self.reconfig.propose(now, next);
                    self.after_engines(now);
                    return;
                }
                if !suspects.is_empty() {
                    if self.reconfig.reconfiguring() {
                        // Members that never acknowledged a proposal and
                        // whose leases ran out: say so, like any suspicion.
                        let stuck = self.reconfig.abandon_unacked(now, &suspects);
                        if !stuck.is_empty() {
                            self.note_suspect(now, stuck);
                        }
                    } else if self.reconfig.may_suspect_members() {
                        self.note_suspect(now, suspects.clone());
                        self.reconfig.suspect_members(now, &suspects);
                    }
                }
            }
        }
    }

    /// Report a suspicion once per set of suspects and lease (retries of
    /// the same suspicion every tick are not news).
    pub(super) fn note_suspect(&mut self, now: u64, who: Vec<NodeId>) {
        let lease = self.lease_params.lease_ns;
        let repeat = self
            .last_suspect
            .as_ref()
            .is_some_and(|(set, at)| *set == who && now < at.saturating_add(lease));
        if !repeat {
            self.effects
                .push(NodeEffect::Event(NodeEvent::Suspect(who.clone())));
            self.last_suspect = Some((who, now));
        }
    }
}
