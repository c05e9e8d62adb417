//! The coordination service's messages: the replicated store the CM
//! keeps configurations in.

use serde::{Deserialize, Serialize};

use crate::*;

/// Messages of the coordination service (an embedded Raft group, FaRM §3
/// and §5.2 step 3). All one-way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordMessage {
    /// A Raft message between replicas, protobuf-encoded by raft-rs.
    Raft {
        /// The sending replica.
        from: NodeId,
        /// The encoded `eraftpb::Message`.
        bytes: Vec<u8>,
    },
    /// Replace the configuration `expected` by `proposed_toml` (whose id is
    /// `expected + 1`) if it is still current.
    Cas {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
        /// The configuration the requester runs.
        expected: ConfigId,
        /// Its proposed successor, TOML.
        proposed_toml: String,
    },
    /// The outcome of a `Cas`, decided in Raft log order.
    CasReply {
        /// The request answered.
        req: u64,
        /// True if the swap happened.
        swapped: bool,
        /// The service's configuration after the request, TOML.
        current_toml: String,
        /// The service's time bound after the request, global ns.
        time_bound_ns: u64,
        /// The CM of the configuration stored with that bound: only that
        /// CM's clock may use the bound (a master replaced by a CAS must
        /// not serve up to bounds raised after it).
        cm: NodeId,
    },
    /// Raise the time bound to at least `to_ns` (global ns). A clock
    /// master hands out no time at or past the bound it last saw stored,
    /// so a master that takes over, even after every node crashed, starts
    /// global time at the stored bound and it never goes backwards
    /// (FaRMv2 §4.3's monotonicity, kept across restarts).
    RaiseTimeBound {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
        /// The bound wanted, global ns.
        to_ns: u64,
    },
    /// The time bound stored after a `RaiseTimeBound`, global ns.
    TimeBound {
        /// The request answered.
        req: u64,
        /// The stored bound (at least the one asked for).
        bound_ns: u64,
        /// The CM of the configuration stored with it (see `CasReply`).
        cm: NodeId,
    },
    /// Tell `from` the configuration this replica has applied (a value
    /// the service stored; possibly not the newest), answered by a
    /// `CasReply` with `swapped: false`. A node restored from disk that
    /// hosts no replica learns this way whether the service names it the
    /// CM of a configuration it never applied.
    Read {
        /// The requesting node (the answer goes there).
        from: NodeId,
        /// The requester's number for this request.
        req: u64,
    },
    /// This replica is not the leader; try `leader` (if known).
    NotLeader {
        /// The request answered.
        req: u64,
        /// The leader this replica knows of.
        leader: Option<NodeId>,
    },
}
