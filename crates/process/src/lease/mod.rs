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
//!
//! **Layout.** [`LeaseClient`] (`holder.rs`) is a holder's side,
//! [`LeaseManager`] (`manager.rs`) the CM's, and [`LeaseDesk`] (`desk.rs`)
//! the lock-guarded desk that the lease thread and the process share.

mod desk;
mod holder;
mod manager;
#[cfg(test)]
mod testing;

pub use desk::{LeaseDesk, ListenerStalls, MasterClockView};
pub use holder::LeaseClient;
pub use manager::{LeaseManager, RELEASED_KEEP_LEASES};

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

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

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
}
