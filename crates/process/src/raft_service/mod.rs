//! # The embedded coordination service: a Raft group holding configurations
//!
//! **Problem.** FaRM §5.2 step 3 needs a compare-and-swap on the
//! configuration that exactly one contender wins, and that a minority
//! partition can never win. FaRM keeps the configuration in Zookeeper. A
//! Meridian cluster should need no outside service, so the first 1, 3 or 5
//! nodes (`[coordination] replicas`) embed a Raft group whose replicated
//! state machine is one register: the current configuration, and beside it
//! the *time bound*.
//!
//! **The time bound.** FaRMv2 §4.3 keeps global time monotonic across a
//! CM change with FF, the maximum clock upper bound the surviving members
//! report. After a whole-cluster crash no member survives to report one,
//! and a restored CM's own clock says nothing about what its predecessor
//! handed out (it may start below times already given out, and hand out a
//! `read_ts` below commits that precede it). So
//! the register also stores a bound on every time any master may have
//! handed out, as Percolator's and TiDB's timestamp oracles store theirs: a
//! clock master serves time only below the stored bound (less a reserve for
//! its followers' uncertainty), raises it a window ahead
//! (`clock.time_bound_window_ms`) in the background, and a new master
//! starts at or above the bound the CAS that made it CM returned. A raise
//! is a log entry like a CAS: `RaiseTimeBound { to_ns }` sets the bound to
//! `max(stored, to_ns)` and every answer carries the stored bound and the
//! CM of the configuration stored with it. Only that CM uses the bound, so
//! a master a CAS replaced never serves past the bound stored at that CAS,
//! which is where its successor starts.
//!
//! **Algorithm.** [`ServiceReplica`] wraps a raft-rs `RawNode` (the `Ready`
//! model: a synchronous state machine, so it runs unchanged in the
//! simulator). A `Cas { expected, proposed }` reaching the leader is
//! proposed as a log entry; every replica applies entries in log order with
//! the same rule (swap iff the register still holds `expected` and
//! `proposed` is its direct successor), so the decision is linearizable;
//! the replica that accepted the request answers it when it applies the
//! entry. Followers answer `NotLeader` with their leader hint.
//! [`CasClient`] runs on every node: it sends the request to the leader it
//! knows, follows hints, moves on after a timeout, and treats "the register
//! holds exactly my proposal" as a win, so a retried request whose first
//! attempt won is not mistaken for a loss.
//!
//! Elections are deterministic: the replica of rank `r` campaigns after
//! `election_ticks + 2r` ticks (raft-rs draws the timeout from
//! `[min, max)`, which we make a single value), so a simulated run replays
//! exactly and split votes resolve by rank. Pre-vote and check-quorum are
//! on: a partitioned replica cannot disrupt the leader, and a leader cut
//! off from its majority steps down.
//!
//! **Durability.** Raft needs its hard state and log to survive a restart.
//! The replica emits [`ServiceOutput::Persist`] with its whole state (hard
//! state, snapshot, log tail; a few KB, since the log is compacted into a
//! snapshot every [`COMPACT_ENTRIES`] entries) before the messages that
//! depend on it; the shell writes it durably before sending anything after
//! it. The simulator keeps it across crashes.
//!
//! **Invariants.** The register's identifier only grows, by one per swap;
//! the time bound never decreases;
//! every replica applies the same entries in the same order; the log tail
//! holds at most [`COMPACT_ENTRIES`] applied entries.
//!
//! **Layout.** [`ServiceReplica`] (`replica.rs`) is one member of the Raft
//! group, its durable state and raft-rs `Storage` live in `store.rs`, and
//! [`CasClient`] (`cas_client.rs`) is the client every node runs.

mod cas_client;
mod replica;
mod store;
#[cfg(test)]
mod testing;

pub use cas_client::{CasClient, CasOutput};
pub use replica::ServiceReplica;

use meridian_config::Configuration;
use meridian_wire::{ConfigId, CoordMessage, NodeId};
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message, Snapshot};
use raft::{GetEntriesContext, RaftState, RawNode, StateRole, Storage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Applied entries kept before the log is compacted into a snapshot.
pub const COMPACT_ENTRIES: u64 = 64;

/// Requests a replica remembers for answering at apply time; the oldest is
/// forgotten beyond this (its requester retries).
pub const MAX_WAITING: usize = 256;

/// Errors of the coordination service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Raft refused its configuration or state.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The persisted state does not decode.
    #[error("persisted coordination state is corrupt: {0}")]
    Corrupt(String),
    /// This node holds no replica.
    #[error("{0} holds no coordination replica")]
    NotAReplica(NodeId),
}

/// Raft timing, from `[coordination]` (shell clocks in ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftParams {
    /// One Raft tick, ns.
    pub tick_ns: u64,
    /// Base election timeout, ticks.
    pub election_ticks: usize,
    /// Heartbeat interval, ticks.
    pub heartbeat_ticks: usize,
}

impl RaftParams {
    /// From a configuration's `[coordination]` section.
    pub fn from_config(c: &Configuration) -> Self {
        RaftParams {
            tick_ns: c.coordination.tick_ms.max(1) * 1_000_000,
            election_ticks: c.coordination.election_ticks,
            heartbeat_ticks: c.coordination.heartbeat_ticks,
        }
    }

    /// How long a CAS requester waits for an answer before trying the
    /// next replica, ns: two election timeouts.
    pub fn request_timeout_ns(&self) -> u64 {
        2 * self.election_ticks as u64 * self.tick_ns
    }
}

/// What a replica asks its host node to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceOutput {
    /// Send `msg` to node `to` (possibly this node itself).
    Send {
        /// Destination.
        to: NodeId,
        /// The message.
        msg: CoordMessage,
    },
    /// Write this state durably (replacing the previous one) before
    /// acting on any later output.
    Persist(Vec<u8>),
}
