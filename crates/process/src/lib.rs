//! # Process objects: one synchronous state machine per role
//!
//! **Problem.** Meridian's protocol engines (`Transaction`, `Participant`,
//! `ClockSync`) are pure, but the code that drives them — retries, timeouts,
//! abort sending, the truncation queue, clock synchronisation — decides
//! safety under failures too. It must exist once, so that the simulator
//! tests the code that ships rather than a copy of its own.
//!
//! **Design** (etcd-io/raft's `Ready`, openraft's `EngineOutput`,
//! TigerBeetle's replica). Each role is a *process object*: a synchronous,
//! I/O-free state machine.
//! - Inputs: a message `(now, from, frame)`, a `tick(now)`, or an
//!   application call. `now` is the process's local clock in ns, read by the
//!   shell; the process never reads a clock, sleeps, or draws randomness it
//!   was not seeded with.
//! - Outputs: [`Effect`]s pushed to a queue that the shell drains: send a
//!   frame, wake me at a local time, reply to an application call.
//!
//! The tokio shells (`meridian-client`, `meridian-node`) and the simulator
//! (`meridian-sim`) are thin: they move bytes and time between sockets (or
//! the simulated network), timers and the same process objects.
//!
//! **Roles.**
//! - [`client::ClientProcess`]: the coordinator (FaRM §4: the client is the
//!   coordinator): open transactions, the commit driver with its timeouts,
//!   retries and abort sending, the truncation queue, and clock sync with
//!   the clock master.
//! - [`node::NodeProcess`]: a node: the participant, the clock master, the
//!   CM's coordinator ids, GC, and an embedded [`client::ClientProcess`]
//!   that coordinates thin clients' transactions and keeps the node's
//!   clock synchronised.
//!
//! **Invariants** (`check_invariants` on each process): every outstanding
//! RPC belongs to a live purpose; queues are within their bounds (all in
//! `meridian_config::Limits`); a transaction holds at most one application
//! call at a time.

#[cfg(feature = "sim-bugs")]
pub use meridian_bugs as bugs;
pub mod client;
pub mod coordination;
pub mod lease;
pub mod node;
pub mod raft_service;
pub mod reconfig;
pub mod recovery;

use meridian_wire::{Frame, NodeId};

/// An application call's id, chosen by the shell; the reply carries it.
pub type CallId = u64;

/// What a process asks its shell to do. Drained in order after every input.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect<R> {
    /// Send `frame` to node `to` (a `Frame::Request` expects a
    /// `Frame::Response` with the same id, fed back through `on_message`).
    Send {
        /// Destination.
        to: NodeId,
        /// The frame.
        frame: Frame,
    },
    /// Call `tick` at or after local time `at_local_ns`. Several may be
    /// outstanding; an early or extra tick is harmless.
    Wake {
        /// Local clock deadline, ns.
        at_local_ns: u64,
    },
    /// Answer application call `call`.
    Reply {
        /// The call.
        call: CallId,
        /// Its result.
        result: R,
    },
}
