//! # Transaction engines (FaRM §4, FaRMv2 §4.2 and §7 Algorithm 2)
//!
//! Two deterministic state machines that do no I/O:
//!
//! - [`coordinator::Transaction`] runs at the client (the coordinator). It
//!   buffers writes, turns reads into `Read`/`Scan` requests to primaries,
//!   and drives commit through Lock → write_ts → Validate → CommitBackup →
//!   CommitPrimary, telling its driver which messages to send and consuming
//!   the replies.
//! - [`participant::Participant`] runs at every node. It owns the node's
//!   region replicas and log and answers each request with one response.
//!
//! The runtime (`meridian-node`, `meridian-client`) and the simulator
//! (`meridian-sim`) drive the same engines; only they own sockets, clocks and
//! randomness.

pub mod coordinator;
pub mod participant;
pub mod recovery;

pub use coordinator::{
    AbortReason, CommitStage, CommitStep, GetStep, ScanStep, Transaction, TxnError, TxnOptions,
};
pub use meridian_storage::RegionStore;
pub use participant::{DurabilityError, Mutation, Participant, ParticipantSnapshot};
