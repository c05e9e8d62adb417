//! # Meridian wire types
//!
//! Everything that crosses a process boundary is defined here: identifiers
//! ([`NodeId`], [`RegionId`], [`ConfigId`], [`TxId`]), global-time
//! [`Timestamp`]s, the FaRM log records ([`LockRecord`], which is also the
//! payload of `CommitBackup`), the request/response messages of the
//! transaction and clock protocols, and the length-prefixed [`Frame`] codec.
//!
//! The names follow the papers: FaRM §4 Tables 1–2 (`Lock`, `LockReply`,
//! `Validate`, `CommitBackup`, `CommitPrimary`, `Abort`, `Truncate`), FaRMv2
//! §4.1 (clock synchronisation with the clock master) and §4.2 (`read_ts`,
//! `write_ts`), FaRM §5.1–5.4 (leases, reconfiguration, transaction-state
//! and data recovery: [`LeaseMessage`], [`ReconfigMessage`],
//! [`RecoveryMessage`]). A new protocol (RAMP, RIFL) adds a variant of its
//! own. The enums are not `#[non_exhaustive]`, by design: every match in the
//! engines must handle a new variant explicitly.
//!
//! Encoding: a frame is a little-endian `u32` length followed by that many
//! bytes of `bincode` (fixed-int, little-endian). A frame longer than
//! [`MAX_FRAME_BYTES`] or one that fails to decode is a [`WireError`]; the
//! transport closes the connection and logs it, nothing else is affected.
//! Keys and values on the hot paths (READ, its reply, the LOCK record's
//! writes, thin-client operations) are (de)serialised as byte strings
//! (`serde_bytes`), one copy instead of one call per byte; bincode writes
//! a byte string and a `Vec<u8>` the same way, so the encoding is that of a
//! plain `Vec<u8>`.

mod coord;
mod frame;
mod ids;
mod membership;
mod recovery;
mod service;
mod txn;

pub use coord::*;
pub use frame::*;
pub use ids::*;
pub use membership::*;
pub use recovery::*;
pub use service::*;
pub use txn::*;
