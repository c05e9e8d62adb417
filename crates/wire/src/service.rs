//! The node's service envelope: every request and response kind (clock,
//! CM, thin client, admin) and the conversions into [`Request`] and
//! [`Response`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::*;

/// One operation of a thin-client one-shot transaction, executed by a node on
/// the client's behalf (`meridian get|put|delete|scan`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientOp {
    /// Read a key.
    Get(#[serde(with = "serde_bytes")] Key),
    /// Write a key.
    Put(
        #[serde(with = "serde_bytes")] Key,
        #[serde(with = "serde_bytes")] Value,
    ),
    /// Delete a key.
    Delete(#[serde(with = "serde_bytes")] Key),
    /// Scan `[start, end)` returning at most `limit` pairs.
    Scan {
        /// Inclusive start.
        start: Key,
        /// Exclusive end (`None` = end of key space).
        end: Option<Key>,
        /// Maximum rows.
        limit: u32,
    },
}

/// Result of a [`ClientOp`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientOpResult {
    /// Value of a `Get` (`None` = absent).
    Value(#[serde(with = "serde_bytes")] Option<Value>),
    /// Rows of a `Scan`.
    Rows(Vec<(Key, Value)>),
    /// A `Put`/`Delete` took effect.
    Done,
}

/// Per-node status, for `meridian status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node.
    pub node: NodeId,
    /// Configuration the node runs.
    pub config: ConfigId,
    /// Current clock uncertainty (upper − lower), ns; 0 on the clock master.
    pub uncertainty_ns: u64,
    /// Clock synchronisations completed.
    pub syncs: u64,
    /// Regions this node is primary for.
    pub primary_regions: Vec<RegionId>,
    /// Regions this node is a backup for.
    pub backup_regions: Vec<RegionId>,
    /// Live keys held (primary + backup copies).
    pub objects: u64,
    /// Log records not yet truncated (LOCK + COMMIT-BACKUP).
    pub log_records: u64,
    /// Requests served since start.
    pub requests: u64,
}

/// A request, by protocol. Each gets exactly one [`Response`] unless sent
/// one-way.
///
/// Every protocol has its own pair of enums, so a new protocol (recovery,
/// RAMP, RIFL) adds a variant here and an enum of its own, not arms in a
/// shared match: an engine that does not serve a protocol answers the whole
/// variant with [`Rejection::WrongRole`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// The transaction protocol (FaRM §4, FaRMv2 §4.2): participant duties.
    Txn(TxnRequest),
    /// Clock synchronisation with the clock master (FaRMv2 §4.1).
    Clock(ClockRequest),
    /// The configuration manager (FaRM §3): client registration and
    /// configuration lookup. Membership and leases travel as `Lease` and
    /// `Reconfig`.
    Cm(CmRequest),
    /// Thin clients: a node coordinates a transaction on their behalf.
    Thin(ThinRequest),
    /// Operations: liveness and status.
    Admin(AdminRequest),
    /// Leases between the CM and every node and client (FaRM §5.1), sent
    /// one-way on a channel of their own.
    Lease(LeaseMessage),
    /// Reconfiguration between members (FaRM §5.2, FaRMv2 §4.3), sent
    /// one-way; each side retransmits until it hears back.
    Reconfig(ReconfigMessage),
    /// Transaction-state and data recovery between members (FaRM §5.3,
    /// §5.4), sent one-way; each side retransmits until it hears back.
    Recovery(RecoveryMessage),
    /// The coordination service (FaRM §5.2 step 3): Raft between its
    /// replicas, and compare-and-swap of the configuration from any node.
    /// One-way, and outside precise membership: the service outlives
    /// configurations.
    Coord(CoordMessage),
}

/// Clock synchronisation (FaRMv2 §4.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockRequest {
    /// MASTERTIME(): the clock master's current time.
    Sync,
}

/// Replies of the clock protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockResponse {
    /// The master's clock when it handled the request, ns.
    MasterTime {
        /// Master time, ns.
        master_ns: u64,
    },
}

/// Requests to the configuration manager.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmRequest {
    /// Ask for a coordinator id and the configuration (text).
    RegisterClient,
    /// Ask any node for the configuration it runs (a client that was told
    /// [`Rejection::ConfigMismatch`], or that lost touch with the cluster).
    GetConfig,
}

/// Replies of the configuration manager.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmResponse {
    /// Reply to `RegisterClient`.
    Registered {
        /// The coordinator id for this client's transaction ids.
        coordinator: u64,
        /// The configuration, as TOML text.
        config_toml: String,
    },
    /// Reply to `GetConfig`: the node's configuration, as TOML text.
    Config {
        /// The configuration.
        config_toml: String,
    },
}

/// Requests of thin clients, which let a node coordinate for them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThinRequest {
    /// Run the operations as one transaction (retrying aborts) and commit.
    Execute {
        /// The operations, run in order in one transaction.
        ops: Vec<ClientOp>,
    },
}

/// Replies to thin clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThinResponse {
    /// Reply to `Execute`.
    Executed(Result<Executed, ExecuteError>),
}

/// A committed thin-client transaction: per-operation results and its
/// timestamps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executed {
    /// One result per operation, in order.
    pub results: Vec<ClientOpResult>,
    /// The transaction's id.
    pub tx: TxId,
    /// Its snapshot time: its `read_ts`, or for a lone GET (run as a
    /// single read, FaRM §3's lock-free read) the version it saw, which
    /// may be older than the call.
    pub read_ts: Timestamp,
    /// Its commit time (equal to `read_ts` if it wrote nothing).
    pub write_ts: Timestamp,
    /// Attempts it took (aborts retried by the node).
    pub attempts: u32,
}

/// Why a thin-client transaction did not commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecuteError {
    /// The node already runs `limits.max_concurrent_executes` of them;
    /// nothing was done. Retry later.
    Busy {
        /// The bound.
        max: usize,
    },
    /// Every attempt aborted (`limits.retry_attempts`); nothing took effect.
    Aborted {
        /// Attempts made.
        attempts: u32,
        /// Why the last one aborted.
        reason: String,
    },
    /// The commit decision was made but not every primary acknowledged it:
    /// the transaction may or may not have taken effect (Jepsen's `:info`).
    Indeterminate {
        /// Its id, to look it up once recovery resolves it.
        tx: TxId,
        /// The `write_ts` it commits at if recovery commits it (FaRM §5.3:
        /// recovery commits only on evidence that carries it).
        write_ts: Option<Timestamp>,
    },
    /// A bad request (a key or value over its limit, …); nothing took effect.
    Invalid(String),
    /// The node's coordinator could not run it (clock not synchronised,
    /// unreachable nodes, …); nothing took effect.
    Unavailable(String),
}

impl fmt::Display for ExecuteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecuteError::Busy { max } => write!(
                f,
                "the node is running {max} thin-client transactions already; retry later"
            ),
            ExecuteError::Aborted { attempts, reason } => {
                write!(f, "aborted {attempts} times; last: {reason}")
            }
            ExecuteError::Indeterminate { tx, .. } => write!(
                f,
                "outcome of {tx} unknown: the commit was decided but not acknowledged"
            ),
            ExecuteError::Invalid(s) => write!(f, "invalid request: {s}"),
            ExecuteError::Unavailable(s) => write!(f, "unavailable: {s}"),
        }
    }
}

impl std::error::Error for ExecuteError {}

/// Operational requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Null RPC (for `meridian-bench rpc`).
    Ping,
    /// Report this node's status.
    Status,
}

/// Operational replies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AdminResponse {
    /// Reply to `Ping`.
    Pong,
    /// Reply to `Status`.
    Status(NodeStatus),
}

/// A response to a [`Request`]: the protocol's own reply, or a refusal
/// common to all protocols.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Transaction protocol.
    Txn(TxnResponse),
    /// Clock protocol.
    Clock(ClockResponse),
    /// Configuration manager.
    Cm(CmResponse),
    /// Thin clients.
    Thin(ThinResponse),
    /// Operations.
    Admin(AdminResponse),
    /// The request was malformed or misdirected and changed nothing.
    Rejected(Rejection),
    /// The node could not serve a well-formed request (message for humans);
    /// nothing changed.
    Error(String),
}

macro_rules! protocol_from {
    ($($inner:ident => $outer:ident :: $variant:ident),* $(,)?) => {$(
        impl From<$inner> for $outer {
            fn from(m: $inner) -> $outer {
                $outer::$variant(m)
            }
        }
    )*};
}

protocol_from! {
    TxnRequest => Request::Txn,
    ClockRequest => Request::Clock,
    CmRequest => Request::Cm,
    ThinRequest => Request::Thin,
    AdminRequest => Request::Admin,
    TxnResponse => Response::Txn,
    ClockResponse => Response::Clock,
    CmResponse => Response::Cm,
    ThinResponse => Response::Thin,
    AdminResponse => Response::Admin,
}
