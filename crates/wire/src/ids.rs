//! Identifiers and global time: node, region, configuration and
//! transaction ids, and [`Timestamp`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// A key: an ordered byte string (compared lexicographically).
pub type Key = Vec<u8>;
/// A value: an opaque byte string.
pub type Value = Vec<u8>;

/// Identifier of a node (a server process). The configuration names its
/// configuration manager, which is also the clock master (FaRM §3, FaRMv2
/// §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Identifier of a region: a contiguous range of the key space replicated on
/// one primary and `f` backups (FaRM §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegionId(pub u32);

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Configuration identifier: FaRM's unique, increasing configuration sequence
/// number (FaRM §3, §5.2). Static (always 1) until reconfiguration lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConfigId(pub u64);

/// A point in global time, in nanoseconds of the clock master's clock
/// (FaRMv2 §4.1). `Timestamp(0)` is the initial version of every key.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp of the (implicit) initial, absent version of every key.
    pub const ZERO: Timestamp = Timestamp(0);
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

/// Transaction identifier, FaRM §5.3 step 2: ⟨c, m, t, l⟩ = the configuration
/// in which the transaction started, the coordinator's machine id, the
/// coordinator-local thread id and a thread-local unique sequence number.
///
/// Coordinators are clients (FaRM, RAMP and RIFL all put the coordinator at
/// the client); a client's machine id is handed out by the CM at registration
/// ([`CmRequest::RegisterClient`]), so `coordinator` is unique cluster-wide.
/// The same id will identify the RIFL client lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TxId {
    /// c: configuration identifier when the transaction started.
    pub config: ConfigId,
    /// m: the coordinator's machine (client) id, unique in the cluster.
    pub coordinator: u64,
    /// t: coordinator-local thread (session) id.
    pub thread: u32,
    /// l: sequence number unique within (coordinator, thread).
    pub local: u64,
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx<{},{},{},{}>",
            self.config.0, self.coordinator, self.thread, self.local
        )
    }
}
