//! Membership: reconfiguration (FaRM §5.2) and leases (FaRM §5.1).

use serde::{Deserialize, Serialize};

use crate::*;

/// FaRM §5.2's reconfiguration messages, with FaRMv2 §4.3's clock
/// fast-forward values folded in. All one-way; `from` is the sender.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReconfigMessage {
    /// Step 1: a member that suspects the CM asks a backup CM to start.
    SuspectCm {
        /// The suspecting member's configuration.
        config: ConfigId,
        /// The suspecting member.
        from: NodeId,
    },
    /// Step 2: the would-be CM checks who is alive.
    Probe {
        /// The configuration probed: the prober's, or a newer one the
        /// coordination service stores whose NEW-CONFIG never reached it.
        config: ConfigId,
        /// The prober.
        from: NodeId,
        /// The probe round.
        seq: u64,
    },
    /// Step 2 failed: the prober found no majority and will not CAS for
    /// round `seq`, so those that answered it may renew with their CM
    /// again at once (their pause would otherwise let two failing probers
    /// keep each other and the live CM apart indefinitely).
    ProbeFailed {
        /// The prober's configuration.
        config: ConfigId,
        /// The prober.
        from: NodeId,
        /// The probe round that failed.
        seq: u64,
    },
    /// Step 2: the answer to a probe.
    ProbeReply {
        /// The replier's configuration.
        config: ConfigId,
        /// The replier.
        from: NodeId,
        /// The probe round answered.
        seq: u64,
        /// The replier restarted without its memory, or was restored from
        /// disk in the probed configuration and is not back in one yet,
        /// and is outside every configuration (it asks to join): it
        /// counts toward the probe's
        /// majority — its old incarnation is gone and it grants the old CM
        /// no lease — but holds no replica, so the new configuration
        /// leaves it out (it joins again afterwards).
        empty: bool,
        /// Regions the replier holds as a filling replica in `config` and
        /// has finished filling there (FaRM §5.4 data recovery done): the
        /// prober may count those copies complete when it remaps `config`,
        /// as the CM does once it got the replier's `ReplicaReady`. Empty
        /// unless the replier holds `config` itself.
        filled: Vec<RegionId>,
    },
    /// Step 5: the new configuration, as TOML text (the `config` crate's
    /// format), from its CM. Also the new CM's lease request.
    NewConfig {
        /// The new configuration's id.
        config: ConfigId,
        /// Its CM.
        from: NodeId,
        /// The configuration.
        config_toml: String,
    },
    /// Step 6: a member applied the new configuration; it grants the CM a
    /// lease and reports the upper bound of its clock, ns (FaRMv2 §4.3 FF).
    NewConfigAck {
        /// The configuration applied.
        config: ConfigId,
        /// The member.
        from: NodeId,
        /// Upper bound of the member's global-time interval, ns (0 if it
        /// has none).
        clock_upper_ns: u64,
        /// How much longer a lease this member granted the previous CM may
        /// last, ns on the member's clock (the new CM waits it out before
        /// NEW-CONFIG-COMMIT).
        cm_lease_left_ns: u64,
    },
    /// Step 7: the configuration is committed; clocks advance to at least
    /// `clock_ff_ns` (FaRMv2 §4.3).
    NewConfigCommit {
        /// The configuration.
        config: ConfigId,
        /// The CM.
        from: NodeId,
        /// Global time is at least this from now on, ns.
        clock_ff_ns: u64,
    },
    /// A member acknowledges NEW-CONFIG-COMMIT.
    NewConfigCommitAck {
        /// The configuration.
        config: ConfigId,
        /// The member.
        from: NodeId,
    },
    /// A node outside the configuration (restarted with its memory lost,
    /// or removed while alive) asks the CM to add it (FaRM §5.2: joins are
    /// reconfigurations started by the CM).
    Join {
        /// The newest configuration the node knows.
        config: ConfigId,
        /// The node.
        from: NodeId,
    },
    /// FaRMv2 §4.3, ahead of NEW-CONFIG-COMMIT: the new CM took over as
    /// clock master at `clock_ff_ns`; members follow it now rather than at
    /// the commit (which may still wait for removed members' leases).
    ClockReady {
        /// The configuration.
        config: ConfigId,
        /// The new CM.
        from: NodeId,
        /// Fast-forward time, ns.
        clock_ff_ns: u64,
    },
    /// A member's clock rate differs from the clock master's by more than
    /// `clock.max_rate_ppm` (FaRMv2 §4.1's drift assumption): the CM
    /// removes the member, or steps down if most members say so of it.
    ClockRate {
        /// The member's configuration.
        config: ConfigId,
        /// The member.
        from: NodeId,
        /// How much faster the master's clock ran than the member's, ppm.
        ppm: i64,
    },
}

/// Who holds a lease at the CM: a member node, or a client (a
/// coordinator, by its coordinator id). FaRM §5.1 leases are between the CM
/// and machines; Meridian's clients are coordinators, so they hold leases
/// too and their failure is detected the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LeaseHolder {
    /// A member node.
    Node(NodeId),
    /// A client, by coordinator id.
    Client(u64),
}

/// FaRM §5.1's 3-way lease handshake. A holder sends `Request` every 1/5 of
/// the lease; the CM's `Grant` grants the holder a lease and asks for one;
/// the holder's `GrantAck` grants the CM its lease at the holder. All three
/// are one-way frames: a lost one is covered by the next renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseMessage {
    /// Holder → CM: please grant me a lease.
    Request {
        /// The holder's configuration.
        config: ConfigId,
        /// Who asks.
        holder: LeaseHolder,
        /// The holder's sequence number for this request.
        seq: u64,
    },
    /// CM → holder: a lease grant, and the CM's request for a lease.
    Grant {
        /// The CM's configuration.
        config: ConfigId,
        /// The request granted.
        seq: u64,
        /// False while the CM holds no lease at a majority (at formation, or
        /// cut off): the holder acknowledges (granting the CM its lease)
        /// but gets no lease itself, so a minority never serves.
        lease: bool,
    },
    /// Holder → CM: the holder grants the CM a lease.
    GrantAck {
        /// The holder's configuration.
        config: ConfigId,
        /// Who grants.
        holder: LeaseHolder,
        /// The grant being acknowledged.
        seq: u64,
    },
    /// Client → CM: the client closed cleanly (no transaction of its
    /// remains undecided), so the end of its requests is not a failure.
    Release {
        /// Who leaves.
        holder: LeaseHolder,
    },
}
