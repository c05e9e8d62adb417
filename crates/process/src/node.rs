//! # The node process: participant, CM duties, clock, GC, thin-client coordinator (FaRM §3–4, FaRMv2 §4.1)
//!
//! **Problem.** A node answers the transaction protocol for the regions it
//! holds, and also plays roles the runtime used to implement on its own:
//! the clock master (node `cm`) answers clock synchronisations with its
//! clock, every other node synchronises with it; the CM hands out
//! coordinator ids; a timer advances the GC safe point; and thin clients
//! (the CLI, later the Python client) ask a node to coordinate a
//! transaction for them. The simulator must run exactly this code.
//!
//! **Algorithm.** [`NodeProcess`] takes frames from *peers* (the shell's
//! connections, or other nodes) and `tick`s, and emits [`NodeEffect`]s.
//! Requests are dispatched by protocol ([`Request`]'s per-protocol enums):
//! - `Txn` goes to the [`Participant`];
//! - `Clock` is answered by the clock master with its clock;
//! - `Cm` (registration) by the CM;
//! - `Admin` (ping, status) by every node;
//! - `Thin` (`Execute`, a thin client's one-shot transaction) runs on the
//!   node's *embedded coordinator*: a [`ClientProcess`], the same object a
//!   client library runs, whose sends go to other nodes as
//!   [`Peer::Node`] (and to this node itself through an internal loopback)
//!   and whose replies come back as responses from those nodes. A small
//!   synchronous driver here runs the operations in order, commits, and
//!   retries aborts with the client process's back-off, up to
//!   `limits.retry_attempts` times (the policy of `Session::run`). At most
//!   `limits.max_concurrent_executes` run at once; more are refused with
//!   [`ExecuteError::Busy`].
//!
//! Every `Frame::Request` gets exactly one `Frame::Response` to the same
//! peer; malformed or misdirected requests get a typed
//! [`Response::Rejected`], never a panic.
//!
//! **Clock.** The node's clock *is* its embedded coordinator's clock: on
//! the clock master it is the master clock ([`ClientProcess::with_master_clock`]);
//! elsewhere the coordinator synchronises it with the master every
//! `clock.node_sync_interval_us` (less often than clients sync: each sync
//! wakes threads at both ends, and a node's uncertainty is off the path of
//! most reads). GC raises the safe point to
//! `lower − gc_window_ms` every `limits.gc_interval_us`.
//!
//! **Held reads.** A READ or SCAN may wait at this node before it is
//! served, for two reasons, both bounded together by
//! `limits.max_deferred_reads`: until this node's clock shows its
//! `read_ts` past (`clock.reads_wait_at_server`, FaRMv2 §4.1's wait moved
//! to the server: [`NodeProcess::hold_until_read_ts_passed`]), and then,
//! if it meets another transaction's lock, until that lock goes, at most
//! `limits.read_lock_wait_us` after it arrived (instead of FaRMv2 §4.7's
//! abort at once; 0 restores the abort: `NodeProcess::serve_or_wait`). Either way the read is
//! served as a read arriving then would be, so its snapshot is unchanged.
//!
//! **Held commits.** With `clock.writes_wait_at_server` a coordinator
//! does not wait out its `write_ts` (FaRMv2 §4.2): it sends its VALIDATEs,
//! or if it validates nothing its COMMIT-BACKUPs, wrapped in
//! `TxnRequest::AfterWriteTs`, and this node handles each only once its
//! clock shows `write_ts` past, holding it in the same bounded queue
//! ([`NodeProcess::hold_until_write_ts_passed`]). One it cannot hold (no
//! usable clock, `write_ts` beyond a sample's life, the queue full) is
//! answered `TxnResponse::NotHeld`, untouched, and its coordinator waits
//! and sends it again unwrapped.
//!
//! **Coordinator ids** (review finding 6). Transaction ids embed the
//! coordinator id, and a reused id is mistaken for a duplicate by a node
//! that still holds its records. Ids are `incarnation << 32 | sequence`,
//! where the shell supplies an *incarnation* that is unique across restarts
//! of this node (the tokio node keeps a counter in its data directory,
//! fsynced before use; the simulator counts restarts). The embedded
//! coordinator of node `n` uses [`embedded_coordinator_id`].
//!
//! **Invariants** ([`NodeProcess::check_invariants`]): the participant's
//! and the embedded coordinator's; executes within their bound, each with
//! at most one call outstanding; held reads within their bound.

use crate::client::{CallResult, ClientProcess, TxnHandle};
use crate::lease::{
    LeaseClient, LeaseDesk, LeaseFrom, LeaseManager, LeaseOutcome, LeaseParams, LeaseRole,
    MasterClockView,
};
use crate::raft_service::{CasClient, CasOutput, ServiceError, ServiceOutput, ServiceReplica};
use crate::reconfig::{Reconfig, ReconfigOutput, ReconfigParams};
use crate::recovery::RecoveryFlow;
use crate::{CallId, Effect};
use meridian_config::Configuration;
use meridian_txn::{Participant, TxnError, TxnOptions};
use meridian_wire::{
    AdminRequest, AdminResponse, ClientOp, ClientOpResult, ClockRequest, ClockResponse, CmRequest,
    CmResponse, ConfigId, Conflict, CoordMessage, ExecuteError, Executed, Frame, LeaseHolder,
    LeaseMessage, NodeId, NodeStatus, ReconfigMessage, RegionId, Rejection, Request, Response,
    ThinRequest, ThinResponse, Timestamp, TxnRequest, TxnResponse,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Who sent a frame to a node: another node, or one of the shell's
/// connections (clients, the CLI). Replies go back to the same peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// A node: the destination of the embedded coordinator's requests, and
    /// the source of their responses.
    Node(NodeId),
    /// A connection of the shell, by the shell's id.
    Conn(u64),
}

/// What a node process asks its shell to do.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeEffect {
    /// Send `frame` to `to`. Frames to [`Peer::Node`] are the embedded
    /// coordinator's requests (responses to them come back through
    /// [`NodeProcess::on_message`] from that node); frames to
    /// [`Peer::Conn`] answer that connection.
    Send {
        /// Destination.
        to: Peer,
        /// The frame.
        frame: Frame,
    },
    /// Call `tick` at or after this local time.
    Wake {
        /// Local clock deadline, ns.
        at_local_ns: u64,
    },
    /// FaRM §5.2 step 3: ask the coordination service to replace
    /// configuration `expected` by `proposed`; answer with
    /// [`NodeProcess::on_cas_result`].
    Cas {
        /// The configuration being replaced.
        expected: ConfigId,
        /// Its successor.
        proposed: Box<Configuration>,
    },
    /// Ask the coordination service to raise its time bound to at least
    /// `to_ns` (global ns); answer with [`NodeProcess::on_time_bound`]
    /// (only with `[coordination] replicas = 0`; the embedded service is
    /// asked with messages).
    RaiseTimeBound {
        /// The bound wanted, global ns.
        to_ns: u64,
    },
    /// Write the coordination replica's state durably, replacing the
    /// last one, before carrying out any later effect (Raft's hard state
    /// and log; see [`crate::raft_service`]). Hand it back through
    /// [`NodeProcess::restore_coordination`] after a restart.
    PersistCoordination(Vec<u8>),
    /// Disk durability: append `records` (sequence numbers `first_seq`,
    /// `first_seq + 1`, …) to the write-ahead log and make them durable
    /// before carrying out any later effect of the drain that depends on
    /// them ([`split_held`]; group commit: one fsync may cover many).
    /// Always first in a drain that has it.
    AppendLog {
        /// Sequence number of the first record.
        first_seq: u64,
        /// The records.
        records: Vec<DurableRecord>,
    },
    /// Disk durability: `state` covers every record up to `through_seq`;
    /// write it durably, then drop those records from the log. Hand both
    /// back to [`NodeProcess::restore`] after a restart.
    Checkpoint {
        /// The last record covered.
        through_seq: u64,
        /// The state, frozen when the effect was made; its
        /// [`NodeSnapshot::encode`] is the checkpoint
        /// ([`NodeProcess::restore`] reads it). Encode it off the process
        /// lock: that is why it is a snapshot and not bytes.
        state: NodeSnapshot,
    },
    /// Something an operator or a timeline wants to see (FaRM Figure 9's
    /// markers).
    Event(NodeEvent),
    /// Replicas the node let go of (a refilled replica's old copy, a
    /// region no longer held, a participant reset): free them where
    /// freeing does not hold up the node. Nothing else is to be done with
    /// them, and nothing waits for it.
    Discard(Discarded),
}

/// Region replicas a node let go of ([`NodeEffect::Discard`]). Freeing a
/// replica of millions of objects takes seconds: a 1M-subscriber TATP
/// node added back to its configuration once held its process lock 4.4 s
/// doing it inline, while its lease requests waited for the lock and the
/// CM suspected it again and again. The tokio node frees them on a thread
/// of its own; the simulator drops them at once.
#[derive(Clone, PartialEq)]
pub struct Discarded(Vec<meridian_txn::RegionStore>);

impl Discarded {
    /// Replicas held.
    pub fn replicas(&self) -> usize {
        self.0.len()
    }

    /// Objects held, over every replica.
    pub fn objects(&self) -> usize {
        self.0.iter().map(meridian_txn::RegionStore::len).sum()
    }

    /// Writes the fill fence dropped on these replicas, over every one
    /// (`RegionStore::merge_chunk`).
    pub fn stale_fill_writes(&self) -> u64 {
        self.0.iter().map(|s| s.stats().stale_fill_writes).sum()
    }
}

impl std::fmt::Debug for Discarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Discarded({} replicas, {} objects)",
            self.replicas(),
            self.objects()
        )
    }
}

/// The clock master's lease thread answers a CLOCK-SYNC datagram
/// without the process lock (FaRMv2 §4.1: the master's delay in
/// answering widens every sample, so every uncertainty): `Some(reply)`
/// for a sync request carrying no piggybacked truncations (those only the
/// process may apply), from [`LeaseDesk::master_time`]; `None` for
/// anything else. The node shell's lease thread and the simulator both
/// answer through this, with the desk the process publishes its view to.
pub fn answer_clock_sync(desk: &LeaseDesk, now: u64, frame: &Frame) -> Option<Frame> {
    let Frame::Request {
        id,
        truncate,
        req: Request::Clock(ClockRequest::Sync),
        ..
    } = frame
    else {
        return None;
    };
    if !truncate.txs.is_empty() || truncate.low.is_some() {
        return None;
    }
    let resp = match desk.master_time(now) {
        Ok(master_ns) => ClockResponse::MasterTime { master_ns }.into(),
        Err(why) => Response::Rejected(Rejection::WrongRole(why.into())),
    };
    Some(Frame::Response { id: *id, resp })
}

/// Disk durability: whether effect `e`, from a drain that appended log
/// records, may be carried out before those records are durable.
///
/// Lease and clock traffic never depends on the log (a slow fsync must
/// neither expire leases nor age clock samples). The replies to READ,
/// SCAN and VALIDATE log nothing and, while every region has a complete
/// backup (`lock_replies_free`, [`NodeProcess::lock_replies_skip_fsync`]),
/// report only state that is already durable where it must be: a value a
/// read can see was installed by COMMIT-PRIMARY, which the coordinator
/// sends only after every backup acknowledged its COMMIT-BACKUP record,
/// each after its fsync (FaRM §4); a lock a read or validation reports as
/// held makes the reader abort or retry, whatever becomes of the lock.
/// A region without a complete backup breaks that argument: COMMIT-PRIMARY
/// went to it with no COMMIT-BACKUP anywhere, so the value it installed is
/// durable only once the primary's own record is, and a reader that saw it
/// before a crash would have seen a write recovery then aborts (found by a
/// review of the read lock wait, with replication 1; the wait serves reads
/// in the very drain of the COMMIT-PRIMARY that released them). Those
/// replies then wait like the rest. LOCK-REPLYs go at once on the same
/// condition, and so does a COMMIT-PRIMARY's first answer,
/// [`TxnResponse::Installed`]: the writes it reports installed are in
/// every backup's durable COMMIT-BACKUP record, which recovery commits
/// from (FaRM §5.3) if a crash takes the primary's install.
/// Everything else waits: the ACKs of COMMIT-BACKUP, COMMIT-PRIMARY,
/// ABORT and TRUNCATE, and any frame the embedded coordinator sends.
pub fn independent_of_log(e: &NodeEffect, lock_replies_free: bool) -> bool {
    match e {
        NodeEffect::Send { frame, .. } => match frame {
            Frame::OneWay {
                req: Request::Lease(_),
                ..
            }
            | Frame::Request {
                req: Request::Clock(_),
                ..
            }
            | Frame::Response {
                resp: Response::Clock(_),
                ..
            } => true,
            Frame::Response {
                resp:
                    Response::Txn(
                        TxnResponse::Lock(_)
                        | TxnResponse::Read(_)
                        | TxnResponse::ReadLatest(_)
                        | TxnResponse::Scan(_)
                        | TxnResponse::Validate(_)
                        | TxnResponse::Installed,
                    ),
                ..
            } => lock_replies_free,
            _ => false,
        },
        NodeEffect::Wake { .. } | NodeEffect::Event(_) | NodeEffect::Discard(_) => true,
        _ => false,
    }
}

/// Disk durability: split a drain's effects into those carried out at
/// once and those that wait until its last log record is durable: `(free,
/// Some((last_seq, held)))`, or `(all, None)` if nothing waits or
/// `logging` is false (memory mode). The log effects themselves
/// (`AppendLog`, `Checkpoint`, `PersistCoordination`) are the shell's to
/// carry out before this split; any left in `effects` land in `held`.
/// Both the tokio shell and the simulator use this one rule.
///
/// A drain that logged nothing still holds its replies while a region
/// has no complete backup (`lock_replies_free` false): they wait until the
/// log is durable through `log_end`, the last record appended so far
/// ([`NodeProcess::log_end_seq`]). A READ (or a single read) served in
/// such a drain may return a value an earlier drain's COMMIT-PRIMARY
/// installed whose record is not durable yet, and with no backup holding
/// a COMMIT-BACKUP, a crash of the primary would let recovery abort the
/// write the reader saw (found by an adversarial review of single reads
/// with replication 1, a whole-cluster crash and disk durability; plain
/// READs had it too).
#[allow(clippy::type_complexity)]
pub fn split_held(
    effects: Vec<NodeEffect>,
    logging: bool,
    lock_replies_free: bool,
    log_end: u64,
) -> (Vec<NodeEffect>, Option<(u64, Vec<NodeEffect>)>) {
    let last = effects.iter().find_map(|e| match e {
        NodeEffect::AppendLog { first_seq, records } => {
            Some(*first_seq + records.len().saturating_sub(1) as u64)
        }
        _ => None,
    });
    if !logging {
        return (effects, None);
    }
    let seq = match last {
        Some(seq) => seq,
        None if !lock_replies_free && log_end > 0 => log_end,
        None => return (effects, None),
    };
    let (free, held): (Vec<NodeEffect>, Vec<NodeEffect>) = effects
        .into_iter()
        .partition(|e| independent_of_log(e, lock_replies_free));
    if last.is_none() && held.is_empty() {
        return (free, None);
    }
    (free, Some((seq, held)))
}

/// Whether a drain's held effects ([`split_held`]) wait for anything:
/// false when they are only the drain's log markers
/// ([`NodeEffect::AppendLog`] without records), that is, no reply or
/// message depends on the drain's records. Such records need no fsync of
/// their own: the next fsync a reply asks for covers them, or the log's
/// idle sync (`limits.log_idle_sync_us`). Both the tokio shell and the
/// simulator use this one rule.
pub fn held_waits_for_log(held: &[NodeEffect]) -> bool {
    held.iter()
        .any(|e| !matches!(e, NodeEffect::AppendLog { .. }))
}

/// The peer and request id of a COMMIT-PRIMARY's early answer
/// ([`TxnResponse::Installed`]), if `e` sends one.
pub fn installed_reply(e: &NodeEffect) -> Option<(Peer, u64)> {
    match e {
        NodeEffect::Send {
            to,
            frame:
                Frame::Response {
                    id,
                    resp: Response::Txn(TxnResponse::Installed),
                },
        } => Some((*to, *id)),
        _ => None,
    }
}

/// Whether a drain's held effects ([`split_held`]) ask for an fsync now:
/// false when they are only log markers and the durable `Ack`s of
/// COMMIT-PRIMARYs whose [`TxnResponse::Installed`] went ahead in `free`.
/// Those `Ack`s only let the coordinator truncate, so they wait for the
/// next fsync someone else asks for, or the log's idle sync
/// (`limits.log_idle_sync_us`), and a COMMIT-PRIMARY costs no fsync of its
/// own. Both the tokio shell and the simulator use this one rule.
pub fn held_asks_fsync(free: &[NodeEffect], held: &[NodeEffect]) -> bool {
    let early: BTreeSet<(Peer, u64)> = free.iter().filter_map(installed_reply).collect();
    held.iter().any(|e| match e {
        NodeEffect::AppendLog { .. } => false,
        NodeEffect::Send {
            to,
            frame:
                Frame::Response {
                    id,
                    resp: Response::Txn(TxnResponse::Ack),
                },
        } => !early.contains(&(*to, *id)),
        _ => true,
    })
}

/// One record of a node's write-ahead log (disk durability).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum DurableRecord {
    /// A participant state change.
    Participant(meridian_txn::Mutation),
    /// This node became the clock master with this offset from its local
    /// clock to global time (FaRMv2 §4.3), ns.
    MasterClock {
        /// Offset, ns.
        offset_ns: i64,
    },
}

impl DurableRecord {
    /// Whether the shell fsyncs this record at once even if no reply
    /// waits for it ([`held_waits_for_log`]). The clock master's offset
    /// is: the master answers clock syncs before its fsync, so global
    /// time handed out from it should reach the disk without waiting for
    /// the idle sync. Participant records are not (their loss in a crash
    /// before any reply depended on them is allowed for).
    pub fn wants_prompt_sync(&self) -> bool {
        matches!(self, DurableRecord::MasterClock { .. })
    }
}

/// A READ or SCAN waiting for its `read_ts` to pass
/// ([`NodeProcess`] with `clock.reads_wait_at_server`), or for another
/// transaction's lock to go (`limits.read_lock_wait_us`); or a LOCK of one
/// blind write waiting for a lock to go (`limits.blind_lock_wait_us`).
#[derive(Debug)]
struct DeferredRead {
    from: Peer,
    id: Option<u64>,
    config: ConfigId,
    req: TxnRequest,
    /// When it arrived, local ns.
    since: u64,
    /// A VALIDATE or COMMIT-BACKUP held until this `write_ts` passed
    /// (`TxnRequest::AfterWriteTs`): checked again when its time comes.
    after: Option<Timestamp>,
}

/// Held reads slower than this are counted apart
/// ([`ReadHoldStats::held_long`]), ns.
pub const READ_HOLD_LONG_NS: u64 = 500_000;

/// What the `read_ts` wait at this node did (`clock.reads_wait_at_server`,
/// FaRMv2 §4.1): counters since the node started, for operators and the
/// bench ([`NodeProcess::read_hold_stats`]). Reads refused for another
/// reason (a configuration mismatch, a lock) are not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadHoldStats {
    /// READs and SCANs whose `read_ts` had already passed on arrival.
    pub served_at_once: u64,
    /// READs and SCANs held until this node's clock showed `read_ts` past.
    pub held: u64,
    /// The time they were held, in all, local ns.
    pub held_ns: u64,
    /// Of those, held longer than [`READ_HOLD_LONG_NS`].
    pub held_long: u64,
    /// Refused (`Conflict::Unavailable`, a `read-other` abort): `read_ts`
    /// more than the sample age ahead of this node's lower bound, or
    /// `limits.max_deferred_reads` already held.
    pub refused: u64,
    /// READs and SCANs that met another transaction's lock and waited for
    /// it to go (`limits.read_lock_wait_us`), then were served (answered
    /// with data, not refused).
    #[serde(default)]
    pub lock_waited: u64,
    /// The time those waited, in all, local ns.
    #[serde(default)]
    pub lock_wait_ns: u64,
    /// READs and SCANs whose lock was still held when their wait ran out:
    /// answered `Conflict::Locked` (an early abort, FaRMv2 §4.7).
    #[serde(default)]
    pub lock_wait_expired: u64,
    /// LOCKs of a single blind write that met another transaction's lock
    /// and waited for it to go (`limits.blind_lock_wait_us`), then took it.
    #[serde(default)]
    pub blind_locks_waited: u64,
    /// The time those waited, in all, local ns.
    #[serde(default)]
    pub blind_lock_wait_ns: u64,
    /// Such LOCKs whose key was still locked when their wait ran out:
    /// answered `Conflict::Locked` (the transaction aborts).
    #[serde(default)]
    pub blind_lock_wait_expired: u64,
    /// VALIDATEs and COMMIT-BACKUPs sent to be held until their `write_ts`
    /// passed (`TxnRequest::AfterWriteTs`, `clock.writes_wait_at_server`)
    /// whose `write_ts` had passed on arrival.
    #[serde(default)]
    pub write_ts_served_at_once: u64,
    /// Such requests held until this node's clock showed `write_ts` past
    /// (or until a configuration change, which then refused them).
    #[serde(default)]
    pub write_ts_held: u64,
    /// The time they were held, in all, local ns.
    #[serde(default)]
    pub write_ts_held_ns: u64,
    /// Such requests answered `TxnResponse::NotHeld` (no usable clock, a
    /// `write_ts` further ahead than a clock sample lives, or the hold
    /// bound full): their coordinators waited themselves and sent them
    /// again.
    #[serde(default)]
    pub write_ts_not_held: u64,
}

impl ReadHoldStats {
    /// Add what the counters did between `base` and `now`, two readings
    /// of one node's counters (a bench's measured window).
    pub fn add_window(&mut self, now: &ReadHoldStats, base: &ReadHoldStats) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.served_at_once += d(now.served_at_once, base.served_at_once);
        self.held += d(now.held, base.held);
        self.held_ns += d(now.held_ns, base.held_ns);
        self.held_long += d(now.held_long, base.held_long);
        self.refused += d(now.refused, base.refused);
        self.lock_waited += d(now.lock_waited, base.lock_waited);
        self.lock_wait_ns += d(now.lock_wait_ns, base.lock_wait_ns);
        self.lock_wait_expired += d(now.lock_wait_expired, base.lock_wait_expired);
        self.blind_locks_waited += d(now.blind_locks_waited, base.blind_locks_waited);
        self.blind_lock_wait_ns += d(now.blind_lock_wait_ns, base.blind_lock_wait_ns);
        self.blind_lock_wait_expired +=
            d(now.blind_lock_wait_expired, base.blind_lock_wait_expired);
        self.write_ts_served_at_once +=
            d(now.write_ts_served_at_once, base.write_ts_served_at_once);
        self.write_ts_held += d(now.write_ts_held, base.write_ts_held);
        self.write_ts_held_ns += d(now.write_ts_held_ns, base.write_ts_held_ns);
        self.write_ts_not_held += d(now.write_ts_not_held, base.write_ts_not_held);
    }
}

/// A READ's or SCAN's answer that met another transaction's lock
/// ([`Conflict::Locked`], FaRMv2 §4.7's early abort).
fn met_lock(resp: &Response) -> bool {
    matches!(
        resp,
        Response::Txn(
            TxnResponse::Read(Err(Conflict::Locked))
                | TxnResponse::ReadLatest(Err(Conflict::Locked))
                | TxnResponse::Scan(Err(Conflict::Locked))
                | TxnResponse::Lock(Err(Conflict::Locked))
        )
    )
}

/// A LOCK that may wait for another transaction's lock instead of failing
/// at once (`limits.blind_lock_wait_us`): the LOCK of a transaction whose
/// whole write set is one blind write. One write in one written region
/// means this is the transaction's only LOCK, so while it waits its
/// transaction holds no lock anyone could wait for (no cycle), and a blind
/// write has no version to check, so taking the lock later is exactly
/// what a LOCK sent later would do (`TxnRequest::LockBlind`).
fn lock_may_wait(r: &TxnRequest) -> bool {
    matches!(
        r,
        TxnRequest::LockBlind { record, blind }
            if record.writes.len() == 1 && record.regions.len() == 1 && blind[..] == [true]
    )
}

/// The answer to a READ or SCAN (or a LOCK, VALIDATE) that cannot be
/// served now: [`Conflict::Unavailable`], a retryable abort. `None` for
/// other requests.
fn unavailable(r: &TxnRequest) -> Option<Response> {
    let e = Err(Conflict::Unavailable);
    Some(match r {
        TxnRequest::Read { .. } => TxnResponse::Read(Err(Conflict::Unavailable)).into(),
        TxnRequest::ReadLatest { .. } => TxnResponse::ReadLatest(Err(Conflict::Unavailable)).into(),
        TxnRequest::Scan { .. } => TxnResponse::Scan(Err(Conflict::Unavailable)).into(),
        TxnRequest::Lock(_) | TxnRequest::LockBlind { .. } => TxnResponse::Lock(e).into(),
        TxnRequest::Validate { .. } => TxnResponse::Validate(e).into(),
        _ => return None,
    })
}

/// A node checkpoint: the participant's and the clock master's state.
#[derive(serde::Serialize, serde::Deserialize)]
struct NodeCheckpoint {
    participant: Vec<u8>,
    master_offset_ns: i64,
}

/// A node's state frozen for a checkpoint ([`NodeEffect::Checkpoint`]):
/// cheap to take under the process lock (the objects are shared with the
/// live state, see [`meridian_txn::ParticipantSnapshot`]), encoded by the
/// shell on another thread. Clones share it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSnapshot {
    participant: std::sync::Arc<meridian_txn::ParticipantSnapshot>,
    master_offset_ns: i64,
}

impl NodeSnapshot {
    /// The checkpoint bytes (bincode) that [`NodeProcess::restore`] reads.
    ///
    /// Errors: [`meridian_txn::DurabilityError::Corrupt`] if the state
    /// does not encode.
    pub fn encode(&self) -> Result<Vec<u8>, meridian_txn::DurabilityError> {
        let c = NodeCheckpoint {
            participant: self.participant.encode()?,
            master_offset_ns: self.master_offset_ns,
        };
        bincode::serialize(&c).map_err(|e| meridian_txn::DurabilityError::Corrupt(e.to_string()))
    }

    /// Write [`Self::encode`]'s bytes, byte for byte, into `w` from its
    /// current position, without building them in memory: the
    /// participant's state is streamed through a 1 MiB buffer and its
    /// length prefix patched in afterwards. Building them cost two
    /// state-sized buffers (the participant's bytes, then the checkpoint
    /// holding them: about 72 MB each with 100k TATP subscribers), and
    /// faulting in and zeroing their pages was 10 % of a node's CPU
    /// samples in a profile window that held a checkpoint (eighteenth
    /// session). Four alternating TATP pairs showed no throughput change
    /// (182.2k against 182.5k tx/s summed), so what this saves is the
    /// node's peak memory during a checkpoint. Returns the bytes written.
    ///
    /// Errors: the writer's, and [`std::io::ErrorKind::InvalidData`] if
    /// the state does not encode.
    pub fn encode_into<W: std::io::Write + std::io::Seek>(
        &self,
        w: &mut W,
    ) -> std::io::Result<u64> {
        use std::io::{SeekFrom, Write};
        /// Counts what passes through.
        struct Counting<W> {
            inner: W,
            n: u64,
        }
        impl<W: Write> Write for Counting<W> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let k = self.inner.write(buf)?;
                self.n += k as u64;
                Ok(k)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.inner.flush()
            }
        }
        let start = w.stream_position()?;
        // bincode (fixed-width, little-endian) of `NodeCheckpoint`: the
        // participant's bytes as a u64 length and the bytes, then the i64.
        w.write_all(&0u64.to_le_bytes())?;
        let n = {
            let mut out = Counting {
                inner: std::io::BufWriter::with_capacity(1 << 20, &mut *w),
                n: 0,
            };
            bincode::serialize_into(&mut out, &*self.participant).map_err(|e| match *e {
                bincode::ErrorKind::Io(io) => io,
                other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
            })?;
            out.flush()?;
            out.n
        };
        w.write_all(&self.master_offset_ns.to_le_bytes())?;
        let end = w.stream_position()?;
        w.seek(SeekFrom::Start(start))?;
        w.write_all(&n.to_le_bytes())?;
        w.seek(SeekFrom::Start(end))?;
        Ok(end - start)
    }

    /// Objects held, over every region.
    pub fn objects(&self) -> usize {
        self.participant.objects()
    }
}

/// Why a node could not be restored from disk.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The checkpoint or a log record is corrupt, or of another node.
    #[error(transparent)]
    Durability(#[from] meridian_txn::DurabilityError),
    /// The restored configuration does not hold this node.
    #[error(transparent)]
    Config(#[from] meridian_config::ConfigError),
}

/// Reconfiguration and recovery milestones at one node, for timelines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// This node suspected the members (or the CM) listed.
    Suspect(Vec<NodeId>),
    /// The CM suspected a client (by coordinator id): its lease expired
    /// without a release, so its transactions are recovered by the next
    /// configuration.
    ClientSuspect(u64),
    /// This node won the configuration CAS for `ConfigId`.
    ConfigCas(ConfigId),
    /// This node applied configuration `ConfigId`.
    Applied(ConfigId),
    /// Configuration `ConfigId` committed here; recovery starts.
    Committed(ConfigId),
    /// This node was removed from the configuration.
    Removed(ConfigId),
    /// A would-be CM found a region of `ConfigId` with no complete replica
    /// left among the live members (more than f failures): the cluster
    /// cannot reconfigure past it.
    RegionLost(ConfigId, String),
    /// Every region this node is primary of has finished lock recovery.
    RegionsActive(ConfigId),
    /// Data recovery filled every new replica at this node.
    DataRecovered(ConfigId),
    /// The CM proposed configuration `config` for one half of a
    /// make-before-break rebalancing move (FaRM §5.4): a node that joined
    /// gets replicas this way.
    Rebalance {
        /// The configuration that carries the step.
        config: ConfigId,
        /// The region, the replica's old and new member, and which half.
        step: meridian_config::RebalanceMove,
    },
    /// `node`'s clock rate was found `ppm` off the clock master's, past
    /// `clock.max_rate_ppm` (at the member: its own measurement; at the
    /// CM: the member it removes, or itself when most members report it).
    ClockRateExceeded {
        /// The node whose clock is off.
        node: NodeId,
        /// How much faster the master's clock ran than the node's, ppm.
        ppm: i64,
    },
    /// This node's clock stopped handing out time: the CM changed
    /// (FaRMv2 §4.3). The configuration is the one being applied.
    ClockDisabled(ConfigId),
    /// This node's clock hands out time again: it became the master at the
    /// commit, or synchronised with the new master once.
    ClockEnabled(ConfigId),
}

/// Where a node stands in the membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// A member of its configuration.
    Member,
    /// Restarted with its memory lost (or restored from disk and waiting
    /// for its CM's renewal): a member of nothing. It asks to join, and
    /// (memory lost) answers probes as empty.
    Restarted,
    /// A configuration removed it.
    Removed,
}

/// The node a one-way protocol message comes from: the link it arrived on
/// if the shell knows it (the simulator), else the sender the message
/// names (the tokio shell's accepted connections are anonymous; peers are
/// authenticated by TLS later).
fn sender(from: Peer, claimed: Option<NodeId>) -> Option<NodeId> {
    match from {
        Peer::Node(n) => Some(n),
        Peer::Conn(_) => claimed,
    }
}

/// True if every complete replica (primary, or backup not filling) that
/// configuration `next` gives `me` was a complete replica of `me` in
/// `restored`, the configuration `me` was restored from disk in. Its role
/// may change (a backup promoted to primary, a primary demoted) and new
/// replicas may be added as filling; the data it restored covers the rest.
/// `had`: the regions of which the node held a complete replica when it was
/// restored ([`NodeProcess::restored_complete`]).
///
/// False when `next` gives `me` no complete replica at all: the empty set
/// is a subset of anything, and that vacuous "hold" let a node that a
/// committed configuration had removed rejoin with only filling replicas
/// while keeping its old log, whose stale COMMIT-BACKUP record then made
/// the next recovery commit a transaction the configuration that removed
/// it had already settled as never committed, writing an old value back
/// over a committed delete (`rows --faults` seed 948, diagnosed by the
/// twentieth session's helper; FaRM §5.2's precise membership).
fn restored_replicas_hold(next: &Configuration, had: &BTreeSet<RegionId>, me: NodeId) -> bool {
    let mine = complete_replicas(next, me);
    !had.is_empty() && !mine.is_empty() && mine.is_subset(had)
}

/// The regions of which `me` holds a complete replica in `c`: primary, or
/// backup not filling.
fn complete_replicas(c: &Configuration, me: NodeId) -> BTreeSet<RegionId> {
    c.regions()
        .iter()
        .filter(|r| r.primary == me || (r.backups.contains(&me) && !r.filling.contains(&me)))
        .map(|r| r.id)
        .collect()
}

/// The clock master's reserve below the stored time bound, ns: twice the
/// maximum sample age, which covers how far past the master's answer any
/// synchronised process's upper bound can run (see
/// [`ClockSync::set_time_bound`]).
fn time_bound_reserve_ns(config: &Configuration) -> u64 {
    2 * config.clock.max_sample_age_us.saturating_mul(1000)
}

/// The coordinator id of the thin-client coordinator embedded in node
/// `node` during incarnation `incarnation`: top bit set, so it never meets a
/// CM-assigned id.
pub fn embedded_coordinator_id(node: NodeId, incarnation: u32) -> u64 {
    (1u64 << 63) | ((node.0 as u64 & 0x7fff_ffff) << 32) | incarnation as u64
}

/// One thin-client transaction being run by the embedded coordinator.
#[derive(Debug)]
struct Exec {
    /// Who asked, and its request id.
    peer: Peer,
    id: u64,
    ops: Vec<ClientOp>,
    /// Attempt number, from 1.
    attempt: u32,
    /// The open transaction of this attempt.
    txn: Option<TxnHandle>,
    /// Results of `ops[..results.len()]` in this attempt.
    results: Vec<ClientOpResult>,
    /// A lone GET run as a single read ([`TxnOptions::single_read`]): the
    /// version it saw, reported as the snapshot time
    /// ([`Executed::read_ts`]) in place of a `read_ts` it never took.
    observed: Option<Timestamp>,
}

/// One node (see the module essay).
#[derive(Debug)]
pub struct NodeProcess {
    id: NodeId,
    config: Configuration,
    standing: Standing,
    lease_params: LeaseParams,
    /// The lease engine, shared with the shell's lease thread (FaRM §5.1:
    /// renewals and grants must not wait for this node's work).
    lease: LeaseDesk,
    reconfig: Reconfig,
    recovery: RecoveryFlow,
    /// Whether the applied configuration changed the CM (clock failover at
    /// its commit, FaRMv2 §4.3).
    clock_failover: bool,
    /// The highest time bound this node knows the coordination service
    /// stores, global ns: a new clock master starts its time there or
    /// above, and the master hands out time only below it (FaRMv2 §4.3
    /// monotonicity across restarts; see [`ClockSync::set_time_bound`]).
    time_bound_ns: u64,
    /// The stored time bound the CAS that made this node CM returned: its
    /// clock starts there (or at FF, if higher) when the configuration
    /// commits. Its own raises since do not move that start.
    takeover_bound_ns: u64,
    /// The highest raise asked of an outside service (replicas = 0) and
    /// not yet answered, global ns.
    time_bound_asked_ns: u64,
    /// The highest configuration whose probe this node answered as empty
    /// (restarted without memory): it accepts only newer NEW-CONFIGs.
    probed_empty_in: ConfigId,
    /// The newest configuration a read of the coordination service
    /// returned that is newer than this node's (a restored node that hosts
    /// no replica asks, see `renew_unapplied_proposal`).
    service_read: Option<Box<Configuration>>,
    /// When a restored node without a replica next reads the service, ns.
    next_service_read_ns: u64,
    /// The clock was disabled when effects were last drained (the
    /// `ClockDisabled`/`ClockEnabled` events report its changes).
    clock_was_disabled: bool,
    /// When this node, as new CM, first sent NEW-CONFIG: members' acks
    /// count as lease grants from then (conservative).
    proposal_sent_ns: u64,
    regions_active_reported: bool,
    data_recovered_reported: bool,
    /// Leases start at the first input (the shell's clock is unknown at
    /// construction).
    lease_started: bool,
    /// Outside the configuration: when to ask to join again.
    next_join_ns: u64,
    participant: Participant,
    gateway: ClientProcess,
    incarnation: u32,
    next_coordinator_seq: u32,
    next_gc_ns: u64,
    armed_ns: Option<u64>,
    /// READs and SCANs held until their `read_ts` has passed on this
    /// node's clock (`clock.reads_wait_at_server`), by the local time they
    /// may be served, then arrival order.
    deferred_reads: BTreeMap<(u64, u64), DeferredRead>,
    deferred_seq: u64,
    /// READs and SCANs waiting for another transaction's lock to go
    /// (`limits.read_lock_wait_us`), by arrival order, each with the local
    /// time its wait ends.
    lock_waits: BTreeMap<u64, (u64, DeferredRead)>,
    /// An input may have released a lock (or changed the configuration):
    /// the lock waits are tried again before the next effects leave.
    lock_waits_dirty: bool,
    /// Injected bugs (tests only; [`NodeProcess::with_bugs`]).
    #[cfg(feature = "sim-bugs")]
    bugs: meridian_bugs::Bugs,
    /// What the `read_ts` wait did ([`NodeProcess::read_hold_stats`]).
    read_holds: ReadHoldStats,
    /// Thin-client transactions, by the call id of their current call.
    executes: BTreeMap<CallId, Exec>,
    next_call: CallId,
    /// Frames from this node to itself (embedded coordinator ↔ participant).
    loopback: VecDeque<Frame>,
    requests: u64,
    /// This node's replica of the coordination service, if it holds one.
    service: Option<ServiceReplica>,
    /// Compare-and-swaps this node sends to the coordination service.
    cas: CasClient,
    /// The last suspicion reported, and when (events are rate-limited).
    last_suspect: Option<(Vec<NodeId>, u64)>,
    /// This node found its clock rate off the master's (sticky until a
    /// restart: it reports it, and once removed it does not rejoin).
    clock_rate_bad: Option<i64>,
    /// When this member reports its clock rate to the CM again.
    next_rate_report_ns: u64,
    /// CM: members' clock-rate reports in the current configuration, and
    /// when to decide on them (one rate window after the first, so a
    /// master off the mark is told apart from one member off it).
    rate_reports: BTreeMap<NodeId, i64>,
    rate_decide_at: Option<u64>,
    /// CM: the next time a rebalancing move may start.
    next_rebalance_ns: u64,
    /// A client's lease expired: the CM renews the configuration (same
    /// members and placement, next id) as soon as no reconfiguration runs,
    /// so that recovery ends the client's transactions (FaRM §5.3).
    clients_to_recover: bool,
    /// Disk durability: the last log sequence number handed out, records
    /// since the last checkpoint, node-level records not yet drained, and
    /// the clock master offset last logged.
    log_seq: u64,
    since_checkpoint: u64,
    /// Objects the last checkpoint held: the next one waits for at least
    /// as many logged records ([`meridian_config::DurabilityConfig::checkpoint_records`]).
    checkpoint_objects: u64,
    /// The participant was replaced by an empty one: the next drain
    /// writes a checkpoint of it, so a restore does not replay the new
    /// records onto the old state.
    force_checkpoint: bool,
    node_records: Vec<DurableRecord>,
    master_offset_ns: i64,
    /// Restored from disk: the leases get the formation grace, and the CM
    /// proposes a fresh configuration at once (so every transaction of the
    /// one it crashed in recovers).
    restored: bool,
    /// [`NodeProcess::lock_replies_skip_fsync`] for the configuration it
    /// was computed in.
    lock_replies_free: Option<(ConfigId, bool)>,
    effects: Vec<NodeEffect>,
}

impl NodeProcess {
    /// Node `id` of `config`, in its `incarnation` (unique across restarts
    /// of this node; see the module essay).
    ///
    /// Errors: [`meridian_config::ConfigError`] if `id` is not a member.
    pub fn new(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        config.node(id)?;
        let coordinator = embedded_coordinator_id(id, incarnation);
        // The back-off jitter seed: fixed by node and incarnation, so a
        // simulated run replays exactly.
        let seed = coordinator.rotate_left(17) ^ 0x6d65_7269_6469_616e;
        let mut gateway = ClientProcess::new(&config, coordinator, seed)
            .managed()
            .with_sync_interval_us(config.clock.node_sync_interval_us);
        if config.cm() == id {
            gateway = gateway.with_master_clock();
            // No time until the first raise of the stored bound.
            let reserve = time_bound_reserve_ns(&config);
            gateway.clock_mut().set_time_bound(0, reserve);
        }
        if config.clock.max_rate_ppm > 0 {
            gateway.clock_mut().set_rate_check(
                config.clock.max_rate_ppm,
                config.clock.rate_window_ms.max(1) * 1_000_000,
            );
        }
        let lease_params = LeaseParams::new(config.lease.lease_ms, config.clock.drift_ppm);
        let lease = if config.cm() == id {
            LeaseRole::Cm(
                LeaseManager::new(lease_params, config.id(), id, &config.members(), 0)
                    .with_max_clients(config.limits.max_client_leases),
            )
        } else {
            LeaseRole::Member(LeaseClient::new(
                lease_params,
                LeaseHolder::Node(id),
                config.id(),
                config.cm(),
                0,
            ))
        };
        let lease = LeaseDesk::new(lease, true);
        lease.set_members(config.members());
        let reconfig = Reconfig::new(
            id,
            ReconfigParams {
                lease: lease_params,
                probe_timeout_ns: config.lease.probe_timeout_ms.max(1) * 1_000_000,
                resend_ns: config.lease.resend_ms.max(1) * 1_000_000,
                backup_cms: config.lease.backup_cms,
                clock_sample_age_ns: config.clock.max_sample_age_us * 1000,
            },
            config.clone(),
        );
        let service = if config.coordination_group().contains(&id) {
            Some(
                ServiceReplica::new(&config, id, None)
                    .map_err(|e| meridian_config::ConfigError::Invalid(e.to_string()))?,
            )
        } else {
            None
        };
        Ok(NodeProcess {
            service,
            cas: CasClient::new(&config, id),
            last_suspect: None,
            clock_rate_bad: None,
            next_rate_report_ns: 0,
            rate_reports: BTreeMap::new(),
            rate_decide_at: None,
            next_rebalance_ns: 0,
            clients_to_recover: false,
            id,
            standing: Standing::Member,
            lease_params,
            lease,
            reconfig,
            recovery: RecoveryFlow::new(id, &config),
            clock_failover: false,
            time_bound_ns: 0,
            takeover_bound_ns: 0,
            time_bound_asked_ns: 0,
            probed_empty_in: ConfigId(0),
            service_read: None,
            next_service_read_ns: 0,
            clock_was_disabled: false,
            proposal_sent_ns: 0,
            regions_active_reported: true,
            data_recovered_reported: true,
            lease_started: false,
            next_join_ns: 0,
            participant: Participant::new(id, &config),
            gateway,
            incarnation,
            next_coordinator_seq: 1,
            next_gc_ns: 0,
            armed_ns: None,
            deferred_reads: BTreeMap::new(),
            lock_waits: BTreeMap::new(),
            lock_waits_dirty: false,
            #[cfg(feature = "sim-bugs")]
            bugs: meridian_bugs::Bugs::none(),
            deferred_seq: 0,
            read_holds: ReadHoldStats::default(),
            executes: BTreeMap::new(),
            next_call: 1,
            loopback: VecDeque::new(),
            requests: 0,
            log_seq: 0,
            since_checkpoint: 0,
            checkpoint_objects: 0,
            force_checkpoint: false,
            node_records: Vec::new(),
            master_offset_ns: 0,
            restored: false,
            lock_replies_free: None,
            effects: Vec::new(),
            config,
        })
        .map(|mut p| {
            if p.config.durability.mode == meridian_config::DurabilityMode::Disk {
                p.participant.enable_journal();
            }
            p
        })
    }

    /// Node `id` restarted from disk (a new `incarnation`): its participant
    /// is rebuilt from the last checkpoint and the log records after it
    /// (records at or below the checkpoint's sequence number are skipped),
    /// its configuration is the last one it applied, and a clock master
    /// keeps its offset. It rejoins that configuration as a member; if it
    /// was its CM it proposes a fresh configuration at once, so every
    /// transaction of the crashed one recovers (FaRM §5.3). If the cluster
    /// moved on meanwhile, the CAS or the leases tell it, and it rejoins
    /// empty like a node that lost its memory.
    ///
    /// Errors: [`RestoreError`] for a corrupt checkpoint or log.
    pub fn restore(
        initial: Configuration,
        id: NodeId,
        incarnation: u32,
        checkpoint: Option<(u64, &[u8])>,
        log: &[(u64, DurableRecord)],
    ) -> Result<Self, RestoreError> {
        let (cp_seq, participant_cp, mut offset) = match checkpoint {
            Some((seq, bytes)) => {
                let c: NodeCheckpoint = bincode::deserialize(bytes).map_err(|e| {
                    meridian_txn::DurabilityError::Corrupt(format!("node checkpoint: {e}"))
                })?;
                (seq, Some(c.participant), c.master_offset_ns)
            }
            None => (0, None, 0),
        };
        let tail: Vec<&(u64, DurableRecord)> = log.iter().filter(|(s, _)| *s > cp_seq).collect();
        let mutations: Vec<meridian_txn::Mutation> = tail
            .iter()
            .filter_map(|(_, r)| match r {
                DurableRecord::Participant(m) => Some(m.clone()),
                DurableRecord::MasterClock { .. } => None,
            })
            .collect();
        for (_, r) in &tail {
            if let DurableRecord::MasterClock { offset_ns } = r {
                offset = *offset_ns;
            }
        }
        let participant =
            Participant::restore(id, &initial, participant_cp.as_deref(), &mutations)?;
        let config = participant.config().clone();
        let mut p = Self::new(config, id, incarnation)?;
        p.participant = participant;
        p.participant.enable_journal();
        p.log_seq = log.last().map_or(cp_seq, |(s, _)| (*s).max(cp_seq));
        p.master_offset_ns = offset;
        p.restored = true;
        // Its recovery of the restored configuration died with the old
        // incarnation: it gathered no NEED-RECOVERY since, so it must not
        // vote, decide or apply anything in it. Its flow stays stopped
        // until the next configuration it applies (a restored CM proposes
        // one at once). Swarm seed 21794: restored CM n0, primary of a
        // region, answered the configuration's REQUEST-VOTE for a committed
        // transaction with its surviving LOCK record's evidence but no
        // record, so the coordinator truncated it without sending n0 the
        // COMMIT-RECOVERY, and n0 never installed the writes.
        assert!(
            p.recovery.running_config().is_none(),
            "a restored node's recovery flow runs before any configuration started it"
        );
        // Every restored clock waits for a clock master's takeover: a
        // restored CM becomes the master again when its renewal commits,
        // starting at the time bound the CAS returned (FaRMv2 §4.3 FF, and
        // the stored bound for what no surviving FF value remembers).
        let drift = p.config.clock.drift_ppm;
        p.gateway.clock_mut().follow_new_master(0, drift);
        p.clock_failover = true;
        if p.config.cm() != id {
            // Outside any configuration until the restarted CM renews this
            // one (whole-cluster restart) or this node joins again with
            // empty replicas (the cluster went on without it; its data is
            // stale). Meanwhile it serves nothing.
            p.standing = Standing::Restarted;
            p.lease.set_serving(false);
        }
        Ok(p)
    }

    /// Resume this node's coordination replica from the state it last
    /// persisted ([`NodeEffect::PersistCoordination`]); call before the
    /// first input.
    ///
    /// Errors: [`ServiceError`] if the state is corrupt or this node holds
    /// no replica.
    pub fn restore_coordination(&mut self, state: &[u8]) -> Result<(), ServiceError> {
        if self.service.is_none() {
            return Err(ServiceError::NotAReplica(self.id));
        }
        // The group and initial register come from the cluster's first
        // configuration; the persisted state replaces them.
        self.service = Some(ServiceReplica::new(&self.config, self.id, Some(state))?);
        Ok(())
    }

    /// The coordination replica hosted here, if any.
    pub fn coordination(&self) -> Option<&ServiceReplica> {
        self.service.as_ref()
    }

    /// Carry out the coordination replica's outputs.
    fn after_service(&mut self) {
        let outs = match &mut self.service {
            Some(s) => s.drain(),
            None => return,
        };
        for o in outs {
            match o {
                ServiceOutput::Send { to, msg } => self.send_oneway(to, Request::Coord(msg)),
                ServiceOutput::Persist(state) => {
                    self.effects.push(NodeEffect::PersistCoordination(state))
                }
            }
        }
    }

    /// Carry out the CAS client's outputs.
    fn after_cas(&mut self, now: u64) {
        for o in self.cas.drain() {
            match o {
                CasOutput::Send { to, msg } => self.send_oneway(to, Request::Coord(msg)),
                CasOutput::Done(result) => self.on_cas_result(now, result),
                CasOutput::TimeBound { bound_ns, cm } => self.on_time_bound(now, bound_ns, cm),
                CasOutput::Current(c) => {
                    if self.standing == Standing::Member && c.id() > self.reconfig.config().id() {
                        self.reconfig.on_stored((*c).clone());
                        self.after_engines(now);
                    }
                    if c.id() > self.config.id()
                        && self.service_read.as_ref().is_none_or(|s| s.id() < c.id())
                    {
                        self.service_read = Some(c);
                    }
                    if self.standing == Standing::Restarted && self.restored {
                        self.renew_unapplied_proposal(now);
                    }
                }
            }
        }
    }

    /// A coordination-service message: Raft and CAS requests go to the
    /// replica hosted here, answers to the CAS client.
    fn on_coord(&mut self, now: u64, m: CoordMessage) {
        match m {
            CoordMessage::Raft { .. }
            | CoordMessage::Cas { .. }
            | CoordMessage::Read { .. }
            | CoordMessage::RaiseTimeBound { .. } => {
                if let Some(s) = &mut self.service {
                    s.on_message(now, m);
                }
                self.after_service();
            }
            CoordMessage::CasReply { .. }
            | CoordMessage::NotLeader { .. }
            | CoordMessage::TimeBound { .. } => {
                self.cas.on_message(now, &m);
                self.after_cas(now);
            }
        }
    }

    /// Node `id` restarted with its memory lost (a new `incarnation`): it
    /// answers, syncs its clock and serves the CM role, but holds no region
    /// replicas, so it can never serve a read from an empty store. Giving it
    /// regions again is reconfiguration and data recovery (FaRM §5.2, §5.4).
    ///
    /// Errors: as [`NodeProcess::new`].
    pub fn restarted(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        let mut p = Self::new(config, id, incarnation)?;
        p.reset_participant();
        if !p.config.is_member(id) {
            p.reconfig.outside();
        }
        p.standing = Standing::Restarted;
        p.lease.set_serving(false);
        // Its clock is nobody's master any more: it synchronises once a
        // configuration takes it back.
        let drift = p.config.clock.drift_ppm;
        p.gateway.clock_mut().follow_new_master(0, drift);
        Ok(p)
    }

    /// The node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The incarnation.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The participant engine (read access, for status and checks).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The participant engine (write access, for loading test data).
    pub fn participant_mut(&mut self) -> &mut Participant {
        &mut self.participant
    }

    /// The embedded thin-client coordinator (read access, for checks).
    pub fn gateway(&self) -> &ClientProcess {
        &self.gateway
    }

    /// True for the clock master.
    pub fn is_clock_master(&self) -> bool {
        self.config.cm() == self.id
    }

    /// FaRMv2 §4.3's FF value at `now`: every time this process handed
    /// out, by itself or through its lease thread
    /// ([`LeaseDesk::master_time`]), is at most this.
    fn ff_value(&mut self, now: u64) -> u64 {
        let handed = self.lease.master_clock_handed_ns();
        self.gateway.clock_mut().fast_forward_value(now).max(handed)
    }

    /// What the lease thread may hand out time from now: `Some` while the
    /// process itself would answer a CLOCK-SYNC with its time (the Sync
    /// arm of `on_message`): a member, the CM, its clock the master's,
    /// enabled, below the stored time bound less the reserve. The lease
    /// majority is checked by the thread at each answer.
    pub fn master_clock_view(&self) -> Option<MasterClockView> {
        let clock = self.gateway.clock();
        let eligible = self.standing == Standing::Member
            && self.is_clock_master()
            && clock.is_master()
            && !clock.is_disabled();
        eligible.then(|| MasterClockView {
            offset_ns: clock.master_offset_ns(),
            limit_ns: clock.time_bound_ns().map_or(u64::MAX, |b| {
                b.saturating_sub(time_bound_reserve_ns(&self.config))
            }),
        })
    }

    /// Publish [`NodeProcess::master_clock_view`] for the lease thread
    /// (after every input; withdrawn earlier where the clock may stop).
    fn publish_master_clock(&mut self) {
        let view = self.master_clock_view();
        self.lease.set_master_clock(view);
    }

    /// The clock's interval at `now`, if synchronised.
    pub fn clock_time(&mut self, now: u64) -> Option<meridian_time::Interval> {
        self.gateway.clock_time(now)
    }

    /// Clock synchronisations rejected as inconsistent.
    pub fn clock_rejected(&self) -> u64 {
        self.gateway.stats().clock_rejected
    }

    /// Thin-client transactions running now.
    pub fn executing(&self) -> usize {
        self.executes.len()
    }

    /// Take the effects produced so far, in order.
    pub fn drain_effects(&mut self) -> Vec<NodeEffect> {
        self.publish_master_clock();
        let disabled = self.gateway.clock_is_disabled();
        if disabled != self.clock_was_disabled {
            self.clock_was_disabled = disabled;
            let c = self.config.id();
            self.effects.push(NodeEffect::Event(if disabled {
                NodeEvent::ClockDisabled(c)
            } else {
                NodeEvent::ClockEnabled(c)
            }));
        }
        let discarded = self.participant.take_discarded();
        if !discarded.is_empty() {
            self.effects.push(NodeEffect::Discard(Discarded(discarded)));
        }
        let mutations = self.participant.drain_journal();
        if mutations.is_empty() && self.node_records.is_empty() && !self.force_checkpoint {
            return std::mem::take(&mut self.effects);
        }
        let mut records = std::mem::take(&mut self.node_records);
        records.extend(mutations.into_iter().map(DurableRecord::Participant));
        let first_seq = self.log_seq + 1;
        self.log_seq += records.len() as u64;
        self.since_checkpoint += records.len() as u64;
        let mut out = Vec::with_capacity(self.effects.len() + 2);
        if !records.is_empty() {
            out.push(NodeEffect::AppendLog { first_seq, records });
        }
        if self.force_checkpoint
            || self.since_checkpoint
                >= self
                    .config
                    .durability
                    .checkpoint_records
                    .max(self.checkpoint_objects)
                    .max(1)
        {
            // A checkpoint that cannot be written leaves the log growing;
            // it is retried after the next batch.
            if let Ok(state) = self.snapshot() {
                self.since_checkpoint = 0;
                self.checkpoint_objects = state.objects() as u64;
                self.force_checkpoint = false;
                out.push(NodeEffect::Checkpoint {
                    through_seq: self.log_seq,
                    state,
                });
            }
        }
        out.append(&mut self.effects);
        out
    }

    /// Replace the participant by an empty one (a node that rejoins with
    /// its memory lost, or whose restored data is stale), journaling as
    /// the old one did: the old one's undrained records are kept in order
    /// and a checkpoint of the empty one follows them. (Replacing it
    /// without its journal lost every later write from the disk log, and a
    /// whole-cluster restart brought back stale replicas: swarm seed 401.)
    fn reset_participant(&mut self) {
        let journaling = self.participant.journaling();
        let pending = self.participant.drain_journal();
        self.node_records
            .extend(pending.into_iter().map(DurableRecord::Participant));
        let mut old = std::mem::replace(
            &mut self.participant,
            Participant::without_regions(self.id, &self.config),
        );
        #[cfg(feature = "sim-bugs")]
        self.participant.set_bugs(old.bugs().clone());
        let stores = old.take_all_stores();
        drop(old);
        if !stores.is_empty() {
            self.effects.push(NodeEffect::Discard(Discarded(stores)));
        }
        if journaling {
            self.participant.enable_journal();
            self.force_checkpoint = true;
        }
    }

    /// The node's state frozen now, for a checkpoint (cheap: objects are
    /// shared with the live state until either side changes them).
    ///
    /// Errors: [`meridian_txn::DurabilityError::Config`] if the
    /// configuration does not serialise.
    pub fn snapshot(&self) -> Result<NodeSnapshot, meridian_txn::DurabilityError> {
        Ok(NodeSnapshot {
            participant: std::sync::Arc::new(self.participant.snapshot()?),
            master_offset_ns: self.master_offset_ns,
        })
    }

    fn send(&mut self, to: Peer, frame: Frame) {
        if to == Peer::Node(self.id) {
            self.loopback.push_back(frame);
        } else {
            self.effects.push(NodeEffect::Send { to, frame });
        }
    }

    fn reply(&mut self, to: Peer, id: Option<u64>, resp: Response) {
        if let Some(id) = id {
            self.send(to, Frame::Response { id, resp });
        }
    }

    /// Disk durability: a COMMIT-PRIMARY this node carried out (`resp` is
    /// its `Ack`) is answered twice, first [`TxnResponse::Installed`] and
    /// then the `Ack`. [`split_held`] sends the first before the record's
    /// fsync while every region has a complete backup, and holds the
    /// `Ack` until the record is durable; the coordinator reports the
    /// commit at the first and truncates after the second. Without the
    /// log (memory mode), or with `durability.report_after_primary_fsync`,
    /// the `Ack` alone goes.
    fn installed_first(&mut self, to: Peer, id: Option<u64>, req: &TxnRequest, resp: &Response) {
        if matches!(req, TxnRequest::CommitPrimary { .. })
            && matches!(resp, Response::Txn(TxnResponse::Ack))
            && self.participant.journaling()
            && !self.config.durability.report_after_primary_fsync
        {
            self.reply(to, id, TxnResponse::Installed.into());
        }
    }

    /// Start the lease role at the first input, on the shell's clock.
    fn start_leases(&mut self, now: u64) {
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

    /// A CM restored from disk renews its configuration (retried after a
    /// failed attempt): every transaction of the crashed one then recovers
    /// and every member re-establishes its leases.
    fn renew_after_restart(&mut self, now: u64) {
        if self.restored
            && self.standing == Standing::Member
            && self.config.cm() == self.id
            && self.reconfig.may_start()
            && self.reconfig.config().id() == self.config.id()
        {
            // The service may hold this CM's own last proposal, which the
            // crash kept it from applying (swarm seed 750): renew that one.
            match self.reconfig.service_config().cloned() {
                Some(base) if base.cm() == self.id => {
                    let mut next = base.renewed();
                    next.clock_epoch = next.config_id;
                    self.reconfig.propose_over(now, &base, next);
                }
                _ => {
                    let mut next = self.config.renewed();
                    next.clock_epoch = next.config_id;
                    self.reconfig.propose(now, next);
                }
            }
            self.after_engines(now);
        }
    }

    /// A node restored from disk that the coordination service names as the
    /// CM of a configuration newer than the one it was restored in renews
    /// that configuration (whole-cluster restart). It won that CAS just
    /// before the crash and never applied the configuration (else it would
    /// have been restored in it), so it never sent its NEW-CONFIG, and
    /// nobody else will replace it: the other members were restored in
    /// older configurations whose CM's renewal CAS now fails, and they do
    /// not suspect a CM they never heard of (swarm seed 854: n1 stored 6,
    /// cm n1, then the cluster crashed; n0, the CM of 5, retried its CAS
    /// over 5 forever). It proposes `base` renewed over it, as a restored
    /// CM does with its own last proposal (`renew_after_restart`), and only
    /// if every complete replica that gives it was complete when it was
    /// restored (none at all if it was filling everywhere), the rule every
    /// restored member applies to the NEW-CONFIG (see `on_reconfig`), so
    /// its own restored data is current (FaRM §5.2
    /// precise membership: no configuration after the restored one ran a
    /// transaction on those replicas without it).
    fn renew_unapplied_proposal(&mut self, now: u64) {
        // The service's configuration: the replica hosted here, else what
        // a read of the service returned (a node without a replica never
        // sees the register otherwise: swarm seed 4033, where n3's CAS of
        // 2 won, its answer was lost, and n3 crashed and was restored).
        let Some(base) = self
            .service
            .as_ref()
            .map(|s| s.current().clone())
            .or_else(|| self.service_read.as_deref().cloned())
        else {
            return;
        };
        if base.cm() != self.id || base.id() <= self.config.id() || !self.reconfig.may_start() {
            return;
        }
        let mut next = base.renewed();
        // A restored CM's clock starts afresh: members and clients fail
        // over to it (`Configuration::clock_epoch`).
        next.clock_epoch = next.config_id;
        if !complete_replicas(&next, self.id).is_subset(&self.restored_complete()) {
            return;
        }
        self.reconfig.propose_over(now, &base, next);
        self.after_engines(now);
    }

    /// The regions of which this node holds a complete replica under the
    /// configuration it holds: those the configuration lists complete, and
    /// those it lists as filling here whose data recovery had finished
    /// ([`Participant::is_filled`], journaled). A restored node that filled
    /// a region and reported it ready before a whole-cluster crash is
    /// listed complete by the next configuration; without the second part
    /// it refused that NEW-CONFIG forever (swarm seed 2802).
    fn restored_complete(&self) -> BTreeSet<RegionId> {
        let mut had = complete_replicas(&self.config, self.id);
        had.extend(self.filled_here(&self.config));
        had
    }

    /// The regions configuration `c` lists as filling on this node whose
    /// data recovery finished under it ([`Participant::is_filled`]; the
    /// participant resets that when a configuration lists the region as
    /// filling anew). Empty if the participant runs another configuration.
    fn filled_here(&self, c: &Configuration) -> BTreeSet<RegionId> {
        if self.participant.config().id() != c.id() {
            return BTreeSet::new();
        }
        c.placement
            .iter()
            .filter(|r| r.filling.contains(&self.id) && self.participant.is_filled(r.id))
            .map(|r| r.id)
            .collect()
    }

    /// Tell the reconfiguration engine which regions this node finished
    /// filling in the configuration it runs ([`Reconfig::set_filled`]),
    /// before it answers or runs a probe.
    fn sync_filled(&mut self) {
        let c = self.reconfig.config();
        let filled = self.filled_here(c);
        let id = c.id();
        self.reconfig.set_filled(id, filled);
    }

    /// A frame from `from`.
    pub fn on_message(&mut self, now: u64, from: Peer, frame: Frame) {
        self.start_leases(now);
        self.handle(now, from, frame);
        self.pump(now);
    }

    /// The clock master's answer to this node's own CLOCK-SYNC, stamped by
    /// the shell when it arrived (`received_local_ns` ≤ `now`; the node's
    /// lease thread receives it while the process may be busy): the sample
    /// ends at the arrival ([`ClientProcess::on_message_received`]). Any
    /// other frame is handled as by [`NodeProcess::on_message`].
    pub fn on_clock_reply(&mut self, now: u64, received_local_ns: u64, from: NodeId, frame: Frame) {
        self.start_leases(now);
        match frame {
            f @ Frame::Response { .. } => {
                self.gateway
                    .on_message_received(now, received_local_ns, from, f)
            }
            other => self.handle(now, Peer::Node(from), other),
        }
        self.pump(now);
    }

    fn handle(&mut self, now: u64, from: Peer, frame: Frame) {
        let (id, config, truncate, req) = match frame {
            Frame::Request {
                id,
                config,
                truncate,
                req,
            } => (Some(id), config, truncate, req),
            Frame::OneWay {
                config,
                truncate,
                req,
            } => (None, config, truncate, req),
            Frame::Response { id, resp } => {
                // Responses are for the embedded coordinator's requests.
                if let Peer::Node(n) = from {
                    self.gateway
                        .on_message(now, n, Frame::Response { id, resp });
                }
                return;
            }
        };
        self.requests += 1;
        let mine = self.config.id();
        // Piggybacked TRUNCATEs ride on frames of any protocol, but only
        // from this node's configuration (precise membership).
        if config == mine && self.standing == Standing::Member {
            self.participant.truncate_piggybacked(&truncate);
        }
        let resp = match req {
            Request::Txn(r) => match self.hold_until_read_ts_passed(now, from, id, config, r) {
                Some(
                    r @ (TxnRequest::Read { .. }
                    | TxnRequest::Scan { .. }
                    | TxnRequest::ReadLatest { .. }),
                ) => {
                    return self.serve_or_wait(now, from, id, config, r, now);
                }
                Some(r) if lock_may_wait(&r) => {
                    return self.serve_or_wait(now, from, id, config, r, now);
                }
                Some(r) => {
                    // COMMIT-PRIMARY and ABORT release locks.
                    self.lock_waits_dirty |= !self.lock_waits.is_empty()
                        && matches!(
                            r,
                            TxnRequest::CommitPrimary { .. } | TxnRequest::Abort { .. }
                        );
                    let resp = self.txn_request(now, config, &r);
                    self.installed_first(from, id, &r, &resp);
                    resp
                }
                None => return,
            },
            Request::Clock(ClockRequest::Sync) => {
                // A master that lost its lease majority stops handing out
                // time (its successor's FF only covers it until then).
                let master = self.is_clock_master();
                let serving = master && self.may_serve(now);
                let clock = self.gateway.clock_mut();
                if !master {
                    self.wrong_role("the clock master")
                } else if !serving {
                    Response::Rejected(Rejection::WrongRole(
                        "the clock master holds no lease majority now (FaRM §5.1): it hands \
                         out no time until it does"
                            .into(),
                    ))
                } else if clock.is_disabled() {
                    Response::Rejected(Rejection::WrongRole(
                        "the clock is disabled during a CM change (FaRMv2 §4.3)".into(),
                    ))
                } else {
                    match clock.time(now) {
                        Ok(iv) if clock.is_master() => ClockResponse::MasterTime {
                            master_ns: iv.upper,
                        }
                        .into(),
                        Ok(_) => Response::Rejected(Rejection::WrongRole(
                            "the clock master has not taken over yet (FaRMv2 §4.3)".into(),
                        )),
                        Err(e) => Response::Rejected(Rejection::WrongRole(format!(
                            "the clock master hands out no time now: {e}"
                        ))),
                    }
                }
            }
            Request::Cm(CmRequest::RegisterClient) => self.register_client(),
            Request::Cm(CmRequest::GetConfig) => match self.config.to_toml() {
                Ok(config_toml) => CmResponse::Config { config_toml }.into(),
                Err(e) => Response::Error(e.to_string()),
            },
            Request::Admin(AdminRequest::Ping) => AdminResponse::Pong.into(),
            Request::Lease(m) => return self.on_lease(now, from, m),
            Request::Coord(m) => return self.on_coord(now, m),
            Request::Reconfig(m) => {
                // A new configuration refuses the waiting reads of the old.
                self.lock_waits_dirty |= !self.lock_waits.is_empty();
                return self.on_reconfig(now, from, m);
            }
            Request::Recovery(meridian_wire::RecoveryMessage::ReplicaReady {
                config,
                region,
                from: node,
            }) => {
                if config == self.config.id() && self.config.cm() == self.id {
                    self.reconfig.mark_ready(region, node);
                }
                return;
            }
            Request::Recovery(m) => {
                // COMMIT- and ABORT-RECOVERY release locks (FaRM §5.3).
                self.lock_waits_dirty |= !self.lock_waits.is_empty();
                if self.standing == Standing::Member {
                    self.recovery.on_message(now, m, &mut self.participant);
                    self.after_engines(now);
                }
                return;
            }
            Request::Admin(AdminRequest::Status) => self.status(now),
            Request::Thin(ThinRequest::Execute { ops }) => match id {
                Some(id) => return self.start_execute(now, from, id, ops),
                None => return,
            },
        };
        self.reply(from, id, resp)
    }

    /// A transaction-protocol request sent in configuration `config`.
    fn txn_request(&mut self, now: u64, config: ConfigId, r: &TxnRequest) -> Response {
        if self.standing != Standing::Member {
            return Response::Rejected(Rejection::NotMember(format!(
                "{} is not a member of any configuration",
                self.id
            )));
        }
        let mine = self.config.id();
        if config != mine {
            return Response::Rejected(Rejection::ConfigMismatch {
                sent: config,
                current: mine,
            });
        }
        if let Some(c) = r.tx().map(|tx| tx.config) {
            // A transaction commits within the configuration it began in;
            // an older one is recovery's (FaRM §5.3).
            if c != mine {
                return Response::Rejected(Rejection::ConfigMismatch {
                    sent: c,
                    current: mine,
                });
            }
        }
        // Reads, locks and validations need a lease (FaRM §5.1): a node cut
        // off from the CM stops serving them before it can be replaced.
        if !self.may_serve(now) {
            if let Some(resp) = unavailable(r) {
                return resp;
            }
        }
        self.participant.handle(&[], r)
    }

    /// Serve a READ or SCAN whose `read_ts` has passed, or a LOCK that may
    /// wait ([`lock_may_wait`]); it arrived at `since`. A READ or SCAN
    /// that meets another transaction's lock whose holder may still commit
    /// at or below `read_ts` waits for the lock to go, at most
    /// `limits.read_lock_wait_us` from `since`, instead of aborting at once
    /// as FaRMv2 §4.7 does: it is answered as soon as the holder's
    /// COMMIT-PRIMARY, ABORT or recovery releases the lock
    /// ([`NodeProcess::retry_lock_waits`]), served at its `read_ts` then.
    /// Such a LOCK waits the same way, at most `limits.blind_lock_wait_us`.
    ///
    /// Why waiting is as safe as aborting: a read touches no state, so
    /// serving it later is serving a new read at the same `read_ts`, whose
    /// wait for `read_ts` has passed already; its answer is the version at
    /// `read_ts` among those installed then, and any writer still to come
    /// at or below `read_ts` holds a lock it meets again. A failed LOCK
    /// changed nothing either, and a blind one checks no version, so
    /// granting it later is granting a LOCK that came later. The wait
    /// cannot deadlock: a lock holder is committing and waits for nobody's
    /// read (reads precede a transaction's own locks), a waiting LOCK's
    /// transaction holds no lock, and the wait is bounded.
    fn serve_or_wait(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        r: TxnRequest,
        since: u64,
    ) {
        #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
        let mut resp = self.txn_request(now, config, &r);
        if let TxnRequest::ReadLatest { region, key } = &r {
            if meridian_bugs::bug!(self.bugs, LatestReadsPastLocks, if met_lock(&resp)) {
                #[cfg(feature = "sim-bugs")]
                {
                    resp = self.participant.read_latest_past_locks(*region, key).into();
                }
                let _ = (region, key);
            }
        }
        let is_lock = r.lock_record().is_some();
        let wait_us = if is_lock {
            self.config.limits.blind_lock_wait_us
        } else {
            self.config.limits.read_lock_wait_us
        };
        let wait_ns = wait_us.saturating_mul(1000);
        let until = since.saturating_add(wait_ns);
        if met_lock(&resp)
            && until > now
            && self.deferred_reads.len() + self.lock_waits.len()
                < self.config.limits.max_deferred_reads
        {
            self.deferred_seq += 1;
            self.lock_waits.insert(
                self.deferred_seq,
                (
                    until,
                    DeferredRead {
                        from,
                        id,
                        config,
                        req: r,
                        since,
                        after: None,
                    },
                ),
            );
            self.arm(now, until);
            return;
        }
        // A read whose wait already ran out (it was held for its read_ts
        // that long) is an expiry; one refused because the bound is full
        // is not counted here.
        if met_lock(&resp) && wait_ns > 0 && until <= now {
            if is_lock {
                self.read_holds.blind_lock_wait_expired += 1;
            } else {
                self.read_holds.lock_wait_expired += 1;
            }
        }
        self.reply(from, id, resp);
    }

    /// Try every READ, SCAN and LOCK waiting for a lock again (a lock may
    /// have gone, or the configuration changed): answer those served now
    /// or whose wait ran out, keep the rest (in arrival order) and ask for
    /// a tick when the next wait runs out. A LOCK whose key another
    /// transaction still holds is kept without being tried, so a wait
    /// journals one failed LOCK at most, not one per retry.
    fn retry_lock_waits(&mut self, now: u64) {
        self.lock_waits_dirty = false;
        let waits = std::mem::take(&mut self.lock_waits);
        let mut next: Option<u64> = None;
        for (seq, (until, d)) in waits {
            let lock = d.req.lock_record().map(|(rec, _)| rec);
            if until > now
                && d.config == self.config.id()
                && lock.is_some_and(|rec| self.participant.locked_by_another(rec))
            {
                next = Some(next.map_or(until, |n| n.min(until)));
                self.lock_waits.insert(seq, (until, d));
                continue;
            }
            #[cfg_attr(not(feature = "sim-bugs"), allow(unused_mut))]
            let mut resp = self.txn_request(now, d.config, &d.req);
            if let TxnRequest::Read {
                region,
                key,
                read_ts,
            } = &d.req
            {
                if meridian_bugs::bug!(self.bugs, LockWaitsReadPastLocks, if met_lock(&resp)) {
                    #[cfg(feature = "sim-bugs")]
                    {
                        resp = self
                            .participant
                            .read_past_locks(*region, key, *read_ts)
                            .into();
                    }
                    let _ = (region, key, read_ts);
                }
            }
            if met_lock(&resp) {
                if until > now {
                    next = Some(next.map_or(until, |n| n.min(until)));
                    self.lock_waits.insert(seq, (until, d));
                    continue;
                }
                if lock.is_some() {
                    self.read_holds.blind_lock_wait_expired += 1;
                } else {
                    self.read_holds.lock_wait_expired += 1;
                }
            } else if matches!(
                resp,
                Response::Txn(
                    TxnResponse::Read(Ok(_))
                        | TxnResponse::ReadLatest(Ok(_))
                        | TxnResponse::Scan(Ok(_))
                )
            ) {
                // Served (a rejection after a configuration change or a
                // lost lease is not counted as a wait that paid off).
                self.read_holds.lock_waited += 1;
                self.read_holds.lock_wait_ns += now.saturating_sub(d.since);
            } else if matches!(resp, Response::Txn(TxnResponse::Lock(Ok(())))) {
                self.read_holds.blind_locks_waited += 1;
                self.read_holds.blind_lock_wait_ns += now.saturating_sub(d.since);
            }
            self.reply(d.from, d.id, resp);
        }
        if let Some(at) = next {
            self.arm(now, at);
        }
    }

    /// FaRMv2 §4.1's `read_ts` wait, at the server
    /// (`clock.reads_wait_at_server`): a READ or SCAN whose `read_ts` this
    /// node's clock cannot yet show to be past (its lower bound is not
    /// above it) is held until it can, then served (by
    /// [`NodeProcess::tick`]); `Some(r)` to serve now.
    ///
    /// Why this is the guarantee the coordinator's wait gave: a writer
    /// that locks after the read is served takes its `write_ts` from
    /// GET_TS after locking, so above global time then, which is above
    /// `read_ts`; a writer that locked before finds its lock seen by the
    /// read. A node without a usable clock, holding too many reads, or
    /// asked for a `read_ts` further ahead than a clock sample lives
    /// (`clock.max_sample_age_us`: no coordinator's upper bound is)
    /// answers `Unavailable`, a retryable abort.
    fn hold_until_read_ts_passed(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        r: TxnRequest,
    ) -> Option<TxnRequest> {
        if let TxnRequest::AfterWriteTs { .. } = r {
            return self.hold_until_write_ts_passed(now, from, id, config, r);
        }
        let read_ts = match &r {
            TxnRequest::Read { read_ts, .. } | TxnRequest::Scan { read_ts, .. } => *read_ts,
            _ => return Some(r),
        };
        if !self.config.clock.reads_wait_at_server
            || config != self.config.id()
            || self.standing != Standing::Member
        {
            // Refused (or served) at once by `txn_request`.
            return Some(r);
        }
        let at = match self.passed_at_within_sample_life(now, read_ts) {
            Some(at) if at <= now => {
                self.read_holds.served_at_once += 1;
                return Some(r);
            }
            Some(at) if self.hold_room() => at,
            _ => {
                self.read_holds.refused += 1;
                if let Some(resp) = unavailable(&r) {
                    self.reply(from, id, resp);
                }
                return None;
            }
        };
        let d = DeferredRead {
            from,
            id,
            config,
            req: r,
            since: now,
            after: None,
        };
        self.defer(now, at, d);
        None
    }

    /// Hold `d` until local time `at` ([`NodeProcess::serve_deferred_reads`]).
    fn defer(&mut self, now: u64, at: u64, d: DeferredRead) {
        self.deferred_seq += 1;
        self.deferred_reads.insert((at, self.deferred_seq), d);
        self.arm(now, at);
    }

    /// FaRMv2 §4.2's `write_ts` wait, at the server
    /// (`clock.writes_wait_at_server`): a VALIDATE or COMMIT-BACKUP sent
    /// in a [`TxnRequest::AfterWriteTs`] is handled only once this node's
    /// clock shows its `write_ts` past (its lower bound above it), held
    /// until then; `Some(req)` to handle now. A malformed one is rejected.
    ///
    /// One that cannot be held (no usable clock, a `write_ts` further
    /// ahead than a clock sample lives, the hold bound full) is answered
    /// [`TxnResponse::NotHeld`] and changes nothing: its coordinator waits
    /// `write_ts` out on its own clock and sends it again unwrapped. It is
    /// not refused: a COMMIT-BACKUP may belong to a transaction that its
    /// other backups' records already commit (FaRM §5.3), and a node whose
    /// clock is out (swarm seed 90: 700 ms without an accepted sync) must
    /// not stall commits its clock has no part in.
    fn hold_until_write_ts_passed(
        &mut self,
        now: u64,
        from: Peer,
        id: Option<u64>,
        config: ConfigId,
        r: TxnRequest,
    ) -> Option<TxnRequest> {
        let (write_ts, req) = match (r.held_write_ts(), r) {
            (Some(w), TxnRequest::AfterWriteTs { req, .. }) => (w, *req),
            _ => {
                self.reply(from, id, Response::Rejected(Rejection::MalformedHold));
                return None;
            }
        };
        let tx_config = req.tx().map_or(config, |tx| tx.config);
        if config != self.config.id()
            || tx_config != self.config.id()
            || self.standing != Standing::Member
        {
            // Refused at once by `txn_request`.
            return Some(req);
        }
        if meridian_bugs::bug!(self.bugs, WritesUnwaited)
            || meridian_bugs::bug!(
                self.bugs,
                ValidatesUnwaited,
                if matches!(req, TxnRequest::Validate { .. })
            )
        {
            // Served at once, before `write_ts` has passed.
            return Some(req);
        }
        let at = match self.passed_at_within_sample_life(now, write_ts) {
            Some(at) if at <= now => {
                self.read_holds.write_ts_served_at_once += 1;
                return Some(req);
            }
            at => at,
        };
        let Some(at) = at.filter(|_| self.hold_room()) else {
            self.read_holds.write_ts_not_held += 1;
            self.reply(from, id, TxnResponse::NotHeld.into());
            return None;
        };
        let d = DeferredRead {
            from,
            id,
            config,
            req,
            since: now,
            after: Some(write_ts),
        };
        self.defer(now, at, d);
        None
    }

    /// The local time at which this node's clock shows `ts` past, if its
    /// clock can tell and that is within a clock sample's life
    /// (`clock.max_sample_age_us`: no coordinator's upper bound is further
    /// ahead); both holds, of a `read_ts` and of a `write_ts`, use it.
    fn passed_at_within_sample_life(&mut self, now: u64, ts: Timestamp) -> Option<u64> {
        let horizon_ns = self.config.clock.max_sample_age_us * 1000;
        match self.gateway.clock_mut().passed_at(now, ts) {
            Ok(at) if at <= now.saturating_add(horizon_ns) => Some(at),
            _ => None,
        }
    }

    /// Room for one more held request (`limits.max_deferred_reads`,
    /// shared by every kind of hold and lock wait).
    fn hold_room(&self) -> bool {
        self.deferred_reads.len() + self.lock_waits.len() < self.config.limits.max_deferred_reads
    }

    /// A held VALIDATE or COMMIT-BACKUP whose time came: handled if this
    /// node's clock shows its `write_ts` past (or its configuration is
    /// gone, which `txn_request` refuses), held again if its clock moved
    /// the time later (within a sample's life of its arrival), and
    /// answered [`TxnResponse::NotHeld`] if the clock lost its samples
    /// meanwhile or the time moved beyond that.
    fn serve_held_write(&mut self, now: u64, write_ts: Timestamp, d: DeferredRead) {
        // Held at most a clock sample's life in all, however often its
        // clock moved the time later (then sent back).
        let horizon_ns = self.config.clock.max_sample_age_us * 1000;
        let at = self
            .passed_at_within_sample_life(now, write_ts)
            .filter(|at| *at <= d.since.saturating_add(horizon_ns));
        if at.is_some_and(|at| at <= now) || d.config != self.config.id() {
            self.read_holds.write_ts_held += 1;
            self.read_holds.write_ts_held_ns += now.saturating_sub(d.since);
            let resp = self.txn_request(now, d.config, &d.req);
            self.installed_first(d.from, d.id, &d.req, &resp);
            self.reply(d.from, d.id, resp);
            return;
        }
        let Some(at) = at else {
            self.read_holds.write_ts_not_held += 1;
            self.reply(d.from, d.id, TxnResponse::NotHeld.into());
            return;
        };
        self.defer(now, at, d);
    }

    /// Serve the held reads whose `read_ts` has passed (in the order they
    /// became servable), and the held VALIDATEs and COMMIT-BACKUPs whose
    /// `write_ts` has.
    fn serve_deferred_reads(&mut self, now: u64) {
        while let Some(entry) = self.deferred_reads.first_entry() {
            let (at, _) = *entry.key();
            if at > now {
                self.arm(now, at);
                break;
            }
            let d = entry.remove();
            if let Some(write_ts) = d.after {
                self.serve_held_write(now, write_ts, d);
                continue;
            }
            let held_ns = now.saturating_sub(d.since);
            self.read_holds.held += 1;
            self.read_holds.held_ns += held_ns;
            self.read_holds.held_long += u64::from(held_ns > READ_HOLD_LONG_NS);
            self.serve_or_wait(now, d.from, d.id, d.config, d.req, d.since);
        }
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

    fn send_oneway(&mut self, to: NodeId, req: Request) {
        let frame = Frame::OneWay {
            config: self.config.id(),
            truncate: Default::default(),
            req,
        };
        self.send(Peer::Node(to), frame);
    }

    /// A lease message (FaRM §5.1), through the same [`LeaseDesk`] path
    /// the shell's lease thread takes; what the desk cannot decide alone
    /// comes back here.
    fn on_lease(&mut self, now: u64, from: Peer, m: LeaseMessage) {
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

    fn on_reconfig(&mut self, now: u64, from: Peer, m: ReconfigMessage) {
        let claimed = match &m {
            ReconfigMessage::SuspectCm { from, .. }
            | ReconfigMessage::Probe { from, .. }
            | ReconfigMessage::ProbeReply { from, .. }
            | ReconfigMessage::ProbeFailed { from, .. }
            | ReconfigMessage::NewConfig { from, .. }
            | ReconfigMessage::NewConfigAck { from, .. }
            | ReconfigMessage::NewConfigCommit { from, .. }
            | ReconfigMessage::NewConfigCommitAck { from, .. }
            | ReconfigMessage::Join { from, .. }
            | ReconfigMessage::ClockRate { from, .. }
            | ReconfigMessage::ClockReady { from, .. } => *from,
        };
        let Some(from) = sender(from, Some(claimed)) else {
            return;
        };
        if !matches!(
            m,
            ReconfigMessage::ClockRate { .. } | ReconfigMessage::Join { .. }
        ) {
            // The lease thread hands out no time while a reconfiguration
            // message is handled: it may disable the clock, and the FF
            // value this input reports must cover every time handed out
            // (FaRMv2 §4.3). The view is published again at the end of the
            // input (`drain_effects`) if the clock still serves.
            self.lease.withdraw_master_clock();
        }
        if self.standing != Standing::Member {
            // Outside the configuration: a probe is answered as empty (if
            // memory was lost), and only a NEW-CONFIG that adds this node
            // back matters (it starts from scratch: memory is gone or
            // stale).
            if let ReconfigMessage::Probe { config, seq, .. } = &m {
                // A removed node too, for a configuration newer than any it
                // applied: one that added it back (a join) but whose
                // NEW-CONFIG never reached it before its CM failed. It holds
                // nothing that configuration can use (a removed node comes
                // back only with filling replicas, and drops what it had),
                // and it never granted that configuration's CM a lease, so
                // its answer counts toward the prober's majority like a
                // restarted one's (FaRM §5.2 step 2) and it is left out of
                // the next configuration, then joins again. Without it a
                // configuration of four whose CM died right after its CAS,
                // with the joining member never told, could not be replaced
                // by the two others (swarm seed 748).
                let removed_unaware = self.standing == Standing::Removed
                    && *config > self.config.id()
                    && !self.restored;
                // A node restored from disk, probed in the configuration it
                // was restored in, answers as empty too: its old incarnation
                // is gone just as a memory-less restart's is, so it is on no
                // side of a partition and grants the old CM nothing, and the
                // prober leaves it out of the next configuration, after which
                // it joins again (as a restored node the CM removed with a
                // majority of its own already does). Silent, it left a CM of
                // four whose two other members crashed and came back from
                // disk without a majority for good (swarm seed 17431). Only
                // its own configuration: a probe of a newer one comes from a
                // member that applied a proposal this node never
                // acknowledged, such as its CM's renewal after a
                // whole-cluster restart, where staying silent lets the CM
                // resend that NEW-CONFIG and keep this node's restored data,
                // while an empty answer would have the CM drop it.
                let restored_same = self.standing == Standing::Restarted
                    && self.restored
                    && *config == self.config.id();
                if (self.standing == Standing::Restarted && !self.restored)
                    || removed_unaware
                    || restored_same
                {
                    // Never again accept a NEW-CONFIG of this configuration
                    // (from its old CM): having counted toward a successor's
                    // probe, this node must not grant that CM a lease.
                    self.probed_empty_in = self.probed_empty_in.max(*config);
                    let reply = ReconfigMessage::ProbeReply {
                        config: *config,
                        from: self.id,
                        seq: *seq,
                        empty: true,
                        filled: Vec::new(),
                    };
                    self.send_oneway(from, Request::Reconfig(reply));
                }
                return;
            }
            if let ReconfigMessage::NewConfig {
                config_toml,
                config,
                ..
            } = &m
            {
                // It must add this node as a *new* member: every replica it
                // holds there still filling. A configuration that lists it
                // with complete replicas predates its crash (its memory is
                // gone); the CM removes it once its lease runs out, and then
                // it joins.
                let me = self.id;
                // A restarted CM renewing the configuration this node was
                // restored in (whole-cluster restart): same members and
                // placement, next id. The node keeps its restored data.
                // Also a later one, as long as every complete replica it
                // gives this node was a complete replica when it was
                // restored (others come as filling): every configuration
                // after the restored one that committed needed this node's
                // ACK (which it would have journaled) unless it removed the
                // node, and after a removal the node comes back only as a
                // filling replica. So its data is current (swarm seed 750:
                // the CM's own proposal was stored but never applied; seed
                // 133: that proposal removed a member, so its renewal
                // promoted this node's backups and refilled elsewhere).
                // That argument does not depend on who the CM is: every
                // configuration the service stores is derived from the one
                // it replaces (the CAS's expected id), so a complete replica
                // of this node in it was complete in every configuration
                // since the restored one, and a transaction writing it there
                // needed this node in that configuration (FaRM §5.2 precise
                // membership), which it would have journaled. So the later
                // one may come from another CM (swarm seed 854: the CM of
                // the stored configuration, which it never applied before
                // the whole cluster crashed, renews it; see
                // `renew_unapplied_proposal`).
                let had = self.restored_complete();
                let renews_mine = self.restored
                    && *config > self.config.id()
                    && Configuration::from_toml(config_toml).is_ok_and(|c| {
                        let exact = config.0 == self.config.id().0 + 1
                            && c.members() == self.config.members()
                            && c.regions() == self.config.regions()
                            && c.cm() == self.config.cm();
                        exact
                            || restored_replicas_hold(&c, &had, me)
                            || meridian_bugs::bug!(
                                self.bugs,
                                ReaddedKeepsLog,
                                if !had.is_empty() && complete_replicas(&c, me).is_empty()
                            )
                    });
                if renews_mine {
                    self.reconfig.rejoin();
                    let upper = self.ff_value(now);
                    self.reconfig.on_message(now, m, upper, 0);
                    self.after_engines(now);
                    return;
                }
                let adds_me = *config > self.config.id()
                    && *config > self.probed_empty_in
                    && Configuration::from_toml(config_toml).is_ok_and(|c| {
                        c.is_member(me)
                            && c.regions().iter().all(|r| {
                                (r.primary != me && !r.backups.contains(&me))
                                    || (r.primary != me && r.filling.contains(&me))
                            })
                    });
                if adds_me {
                    self.reset_participant();
                    self.reconfig.rejoin();
                    let upper = self.ff_value(now);
                    self.reconfig.on_message(now, m, upper, 0);
                    self.after_engines(now);
                }
            }
            return;
        }
        if let ReconfigMessage::Join { from: joiner, .. } = &m {
            self.on_join(now, *joiner);
            return;
        }
        if let ReconfigMessage::ClockRate { config, from, ppm } = m {
            self.on_clock_rate(now, config, from, ppm);
            return;
        }
        let counted_answer = matches!(m, ReconfigMessage::ProbeReply { .. })
            && self.reconfig.counts_probe_answers_of(from);
        if !self.config.is_member(from) && !counted_answer {
            // A stale node that a configuration removed: tell it, with the
            // CM's NEW-CONFIG (it then asks to join again). (Not a probe
            // answer from a member of the newer configuration the service
            // stores, whose majority the probe may count: swarm seed
            // 17050, a node that configuration added back.)
            return self.tell_removed(from);
        }
        if let ReconfigMessage::NewConfigAck { config, .. } = &m {
            let (cfg, sent) = (self.config.id(), self.proposal_sent_ns);
            self.lease.with(now, |r, _| {
                if let LeaseRole::Cm(mgr) = r {
                    if *config == cfg {
                        mgr.granted_by(from, sent);
                    }
                }
            });
        }
        let upper = self.ff_value(now);
        // Grants to CMs other than the one proposing (NEW-CONFIG's sender).
        let asking = match &m {
            ReconfigMessage::NewConfig { from, .. } => *from,
            _ => self.config.cm(),
        };
        let left = self.lease.with(now, |r, now| match r {
            LeaseRole::Member(c) => c.cm_lease_left_ns(now, asking),
            _ => 0,
        });
        let acks_new_config = matches!(m, ReconfigMessage::NewConfig { .. });
        if matches!(
            m,
            ReconfigMessage::Probe { .. } | ReconfigMessage::ProbeReply { .. }
        ) {
            self.sync_filled();
        }
        if self.reconfig.on_message(now, m, upper, left) {
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.pause_renewals(now);
                }
            });
        }
        if self.reconfig.take_resume_renewals() {
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.resume_renewals(now);
                }
            });
        }
        self.after_engines(now);
        if acks_new_config {
            // A NEW-CONFIG-ACK this may have sent grants its CM a lease
            // (counted from the CM's send time): a later CM must outwait
            // it, even if no `GrantAck` follows (the CM dies first).
            self.lease.with(now, |r, now| {
                if let LeaseRole::Member(c) = r {
                    c.note_grant(now);
                }
            });
        }
    }

    /// FaRM §5.2: a node asks to join; the CM adds it (as a backup of
    /// regions short of replicas, filled by data recovery).
    fn on_join(&mut self, now: u64, joiner: NodeId) {
        if self.config.cm() != self.id {
            return;
        }
        if self.config.is_member(joiner) {
            // A member that asks to join lost its memory: once removed it
            // is added back as a new member.
            self.lease.with(now, |r, now| {
                if let LeaseRole::Cm(m) = r {
                    m.forfeit_grace(joiner, now);
                }
            });
            return;
        }
        let Ok(node) = self.config.node(joiner).cloned() else {
            return; // not in the address book: unknown nodes are refused
        };
        if let Ok(next) = self.reconfig.config().with_joined(node) {
            self.reconfig.propose(now, next);
            self.after_engines(now);
        }
    }

    /// Send `node` (not a member) the current configuration, so that it
    /// learns it was removed.
    fn tell_removed(&mut self, node: NodeId) {
        if let Ok(config_toml) = self.config.to_toml() {
            let msg = ReconfigMessage::NewConfig {
                config: self.config.id(),
                from: self.config.cm(),
                config_toml,
            };
            self.send_oneway(node, Request::Reconfig(msg));
        }
    }

    /// The coordination service stored a time bound of `bound_ns` (global
    /// ns) with a configuration whose CM is `cm`: from a CAS answer or a
    /// raise's. Only this node as that CM uses it — a clock master may
    /// hand out time up to it (less the reserve), and a new master starts
    /// at the bound its CAS returned. A master a CAS replaced ignores
    /// bounds stored after it (its successor may raise them at once), so
    /// every time it hands out stays below the bound its successor starts
    /// at, whatever FF says (swarm seed 956: a member that never synced
    /// reported no upper bound).
    pub fn on_time_bound(&mut self, now: u64, bound_ns: u64, cm: NodeId) {
        if cm != self.id {
            return;
        }
        if bound_ns >= self.time_bound_asked_ns {
            self.time_bound_asked_ns = 0;
        }
        self.time_bound_ns = self.time_bound_ns.max(bound_ns);
        let reserve = time_bound_reserve_ns(&self.config);
        let clock = self.gateway.clock_mut();
        if clock.is_master() {
            clock.set_time_bound(self.time_bound_ns, reserve);
        }
        self.keep_time_bound_ahead(now);
    }

    /// The clock master keeps the stored time bound at least half a window
    /// ahead of its time plus the reserve, raising it to a whole window
    /// ahead. A new CM whose CAS won raises it at once from the bound the
    /// CAS returned (where its time will start), so that its clock serves
    /// as soon as the configuration commits.
    fn keep_time_bound_ahead(&mut self, now: u64) {
        // Applied with this node as CM, clock failover at the commit.
        let taking_over = self.clock_failover && self.config.cm() == self.id;
        let clock = self.gateway.clock_mut();
        let base = if clock.is_master() && self.config.cm() == self.id && !clock.is_disabled() {
            clock.master_time(now)
        } else if taking_over {
            self.takeover_bound_ns
        } else {
            return;
        };
        let reserve = time_bound_reserve_ns(&self.config);
        let window = self.config.clock.time_bound_window_ms.max(1) * 1_000_000;
        let enough = base.saturating_add(reserve + window / 2);
        if self.time_bound_ns >= enough {
            return;
        }
        let to_ns = base.saturating_add(reserve + window);
        if self.cas.is_external() {
            if self.time_bound_asked_ns < enough {
                self.time_bound_asked_ns = to_ns;
                self.effects.push(NodeEffect::RaiseTimeBound { to_ns });
            }
        } else if self.cas.raising_time_bound_to().is_none_or(|t| t < enough) {
            self.cas
                .hint_leader(self.service.as_ref().and_then(|r| r.leader()));
            self.cas.raise_time_bound(now, to_ns);
            self.after_cas(now);
        }
    }

    /// The coordination service answered this node's CAS.
    pub fn on_cas_result(&mut self, now: u64, result: Result<(), Box<Configuration>>) {
        if result.is_ok() {
            // The CAS answer's bound came first (on_time_bound).
            self.takeover_bound_ns = self.time_bound_ns;
            let next = ConfigId(self.reconfig.config().id().0 + 1);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ConfigCas(next)));
        }
        let me = self.id;
        let nodes: Vec<NodeId> = self
            .reconfig
            .config()
            .nodes
            .iter()
            .map(|n| NodeId(n.id))
            .collect();
        let (surely, left) = self.lease.with(now, |r, now| {
            let surely: BTreeMap<NodeId, u64> = nodes
                .iter()
                .map(|&n| {
                    let t = match r {
                        LeaseRole::Cm(m) => m.surely_expired_at(LeaseHolder::Node(n), now),
                        _ => now,
                    };
                    (n, t)
                })
                .collect();
            // This node too may have granted the replaced CM a lease.
            let left = match r {
                LeaseRole::Member(c) => Some(c.cm_lease_left_ns(now, me)),
                _ => None,
            };
            (surely, left)
        });
        self.reconfig.on_cas(now, result.map_err(|c| *c), |n| {
            surely.get(&n).copied().unwrap_or(now)
        });
        if let Some(left) = left {
            self.reconfig.extend_commit_wait(now, left);
        }
        self.after_engines(now);
        self.keep_time_bound_ahead(now);
        self.pump(now);
    }

    /// Carry out what the reconfiguration and recovery engines asked for.
    fn after_engines(&mut self, now: u64) {
        loop {
            let outs = self.reconfig.drain();
            if outs.is_empty() {
                break;
            }
            for o in outs {
                match o {
                    ReconfigOutput::Send { to, msg } => {
                        self.send_oneway(to, Request::Reconfig(msg))
                    }
                    ReconfigOutput::Cas { expected, proposed } => {
                        if self.cas.is_external() {
                            self.effects.push(NodeEffect::Cas { expected, proposed })
                        } else {
                            self.cas
                                .hint_leader(self.service.as_ref().and_then(|r| r.leader()));
                            self.cas.start(now, expected, *proposed);
                            self.after_cas(now);
                        }
                    }
                    ReconfigOutput::Applied { config, .. } => self.apply_config(now, *config),
                    ReconfigOutput::ReadStored => {
                        // An external service (the shell's) answers CASes
                        // only; its members learn a newer configuration
                        // from their next CAS.
                        if !self.cas.is_external() {
                            self.cas.read(now);
                            self.after_cas(now);
                        }
                    }
                    ReconfigOutput::RegionLost { config, detail } => {
                        self.effects
                            .push(NodeEffect::Event(NodeEvent::RegionLost(config, detail)));
                    }
                    ReconfigOutput::Removed { config } => {
                        // Whatever it holds is stale now (a restored CM
                        // whose cluster went on, or a removed member).
                        if self.restored {
                            self.reset_participant();
                            self.restored = false;
                        }
                        self.standing = Standing::Removed;
                        self.lease.set_serving(false);
                        self.next_join_ns = now;
                        self.effects
                            .push(NodeEffect::Event(NodeEvent::Removed(config)));
                    }
                    ReconfigOutput::Committed {
                        config,
                        clock_ff_ns,
                    } => self.commit_config(now, config, clock_ff_ns),
                    ReconfigOutput::ClockReady { clock_ff_ns, .. } => {
                        self.take_over_clock(now, clock_ff_ns)
                    }
                }
            }
        }
        for (to, msg) in self.recovery.drain() {
            self.send_oneway(to, Request::Recovery(msg));
        }
        let cfg = self.config.id();
        if !self.regions_active_reported && self.participant.blocked_regions().is_empty() {
            self.regions_active_reported = true;
            self.effects
                .push(NodeEffect::Event(NodeEvent::RegionsActive(cfg)));
        }
        if !self.data_recovered_reported && self.recovery.filling_regions().is_empty() {
            self.data_recovered_reported = true;
            self.effects
                .push(NodeEffect::Event(NodeEvent::DataRecovered(cfg)));
        }
    }

    /// FaRM §5.2 step 6: run configuration `config` (blocked regions until
    /// recovery; clocks disabled until the commit's FF and a sync with the
    /// master).
    ///
    /// A clock failover happens when the CM changes and also when a CM
    /// restarted from disk renews its configuration
    /// ([`Configuration::clock_master_changed_from`]): its clock starts
    /// afresh at the bound its CAS returned, and a member that kept the
    /// samples of its previous incarnation stayed on the old timeline.
    /// Swarm seed 1909: a client on the old samples committed a write at a
    /// `write_ts` below a `read_ts` a client on the new master had already
    /// read at. (Failing clocks over at every configuration fixed that too,
    /// but swarm seed 8883 then stuck in an abort storm.)
    fn apply_config(&mut self, now: u64, config: Configuration) {
        self.effects
            .push(NodeEffect::Event(NodeEvent::Applied(config.id())));
        self.participant.reconfigure(&config);
        // The previous configuration's recovery ends here: it would vote
        // and apply decisions on a participant that left it (seed 9253).
        self.recovery.stop();
        self.gateway.set_config(now, &config);
        self.rate_reports.clear();
        self.rate_decide_at = None;
        let members = config.members();
        if config.cm() == self.id {
            self.proposal_sent_ns = now;
            let (params, me) = (self.lease_params, self.id);
            self.lease.with(now, |r, now| match r {
                LeaseRole::Cm(m) => m.set_config(now, config.id(), &members),
                _ => {
                    *r = LeaseRole::Cm(
                        LeaseManager::new(params, config.id(), me, &members, now)
                            .with_max_clients(config.limits.max_client_leases),
                    )
                }
            });
        } else {
            let (params, me) = (self.lease_params, self.id);
            self.lease.with(now, |r, now| match r {
                LeaseRole::Member(c) => c.reset(now, config.id(), config.cm()),
                _ => {
                    *r = LeaseRole::Member(LeaseClient::new(
                        params,
                        LeaseHolder::Node(me),
                        config.id(),
                        config.cm(),
                        now,
                    ))
                }
            });
        }
        let failover = config.clock_master_changed_from(&self.config);
        if failover {
            self.lease.withdraw_master_clock();
            self.gateway.clock_mut().disable();
        }
        self.clock_failover |= failover;
        self.standing = Standing::Member;
        self.lease.set_members(config.members());
        self.lease.set_serving(true);
        self.restored = false;
        self.regions_active_reported = false;
        // Armed by the commit, which starts data recovery: before it no
        // replica is being filled, and reporting then (as this did) put
        // "data recovered" before the configuration even committed.
        self.data_recovered_reported = true;
        self.config = config;
    }

    /// FaRM §5.2 step 7 and FaRMv2 §4.3: the configuration committed.
    fn commit_config(&mut self, now: u64, config: ConfigId, clock_ff_ns: u64) {
        self.effects
            .push(NodeEffect::Event(NodeEvent::Committed(config)));
        self.take_over_clock(now, clock_ff_ns);
        self.recovery
            .start(now, &self.config, &mut self.participant);
        self.data_recovered_reported = false;
        self.keep_time_bound_ahead(now);
    }

    /// FaRMv2 §4.3: after a CM change, the new CM becomes clock master at
    /// FF (at least the bound its CAS returned) and the others follow it.
    /// Once per CM change: at [`ReconfigOutput::ClockReady`] when the
    /// commit still waits for removed members' leases, else at the commit.
    fn take_over_clock(&mut self, now: u64, clock_ff_ns: u64) {
        if std::mem::take(&mut self.clock_failover) {
            let drift = self.config.clock.drift_ppm;
            let reserve = time_bound_reserve_ns(&self.config);
            let bound = self.time_bound_ns;
            let start = self.takeover_bound_ns;
            let clock = self.gateway.clock_mut();
            if self.config.cm() == self.id {
                // Start at or above the bound stored when this CM's CAS
                // won: above every time any earlier master handed out, even
                // what no FF value remembers (a whole-cluster restart).
                // Later raises are covered by FF, as in FaRMv2 §4.3.
                clock.become_master(now, clock_ff_ns.max(start));
                clock.set_time_bound(bound, reserve);
                let offset = clock.master_offset_ns();
                self.master_offset_ns = offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                if self.participant.journaling() {
                    self.node_records.push(DurableRecord::MasterClock {
                        offset_ns: self.master_offset_ns,
                    });
                }
            } else {
                clock.follow_new_master(clock_ff_ns, drift);
            }
            self.keep_time_bound_ahead(now);
        }
    }

    fn wrong_role(&self, role: &str) -> Response {
        Response::Rejected(Rejection::WrongRole(format!(
            "{} is not {role} (that is {})",
            self.id,
            self.config.cm()
        )))
    }

    fn register_client(&mut self) -> Response {
        if self.config.cm() != self.id {
            return self.wrong_role("the CM");
        }
        // Unique across CMs, restarts and configurations: (this node, its
        // incarnation, a counter), 15 + 16 + 32 bits; the top bit stays
        // clear for embedded coordinators. (It used to be the incarnation
        // and counter only, which a new CM after a failover repeated: two
        // clients then shared transaction ids.)
        let (node, inc) = (self.id.0 as u64, self.incarnation as u64);
        if self.next_coordinator_seq == u32::MAX || node >= 1 << 15 || inc >= 1 << 16 {
            return Response::Error("coordinator ids exhausted at this CM".into());
        }
        let coordinator = (node << 48) | (inc << 32) | self.next_coordinator_seq as u64;
        match self.config.to_toml() {
            Ok(config_toml) => {
                self.next_coordinator_seq += 1;
                CmResponse::Registered {
                    coordinator,
                    config_toml,
                }
                .into()
            }
            Err(e) => Response::Error(e.to_string()),
        }
    }

    fn status(&mut self, now: u64) -> Response {
        let uncertainty_ns = self
            .gateway
            .clock_time(now)
            .map(|iv| iv.uncertainty_ns())
            .unwrap_or(u64::MAX);
        let p = &self.participant;
        AdminResponse::Status(NodeStatus {
            node: self.id,
            config: self.config.id(),
            uncertainty_ns,
            syncs: self.gateway.clock_stats().syncs,
            primary_regions: p.primary_regions().to_vec(),
            backup_regions: p.backup_regions().to_vec(),
            objects: p.object_count() as u64,
            log_records: p.log_len() as u64,
            requests: self.requests,
        })
        .into()
    }

    // ----- the embedded coordinator ---------------------------------------

    fn start_execute(&mut self, now: u64, peer: Peer, id: u64, ops: Vec<ClientOp>) {
        let max = self.config.limits.max_concurrent_executes;
        if self.executes.len() >= max {
            let resp = ThinResponse::Executed(Err(ExecuteError::Busy { max })).into();
            return self.reply(peer, Some(id), resp);
        }
        let exec = Exec {
            peer,
            id,
            ops,
            attempt: 1,
            txn: None,
            results: Vec::new(),
            observed: None,
        };
        self.begin_attempt(now, exec);
    }

    fn new_call(&mut self, exec: Exec) -> CallId {
        let call = self.next_call;
        self.next_call += 1;
        self.executes.insert(call, exec);
        call
    }

    fn begin_attempt(&mut self, now: u64, mut exec: Exec) {
        exec.txn = None;
        exec.results.clear();
        exec.observed = None;
        let read_only = !exec
            .ops
            .iter()
            .any(|op| matches!(op, ClientOp::Put(..) | ClientOp::Delete(_)));
        // A lone GET is a single read (FaRM §3's lock-free read; an
        // ordinary read-only transaction under `clock.lock_free_reads =
        // false`): no GET_TS, no hold until a `read_ts` passed. Its
        // `Executed::read_ts` is then the version it saw, the snapshot
        // its answer is.
        let single_read = matches!(exec.ops[..], [ClientOp::Get(_)]);
        let call = self.new_call(exec);
        self.gateway.begin(
            now,
            call,
            0,
            TxnOptions {
                read_only,
                single_read,
            },
        );
    }

    /// Issue the next operation of `exec` (buffered writes need no call),
    /// or commit when all are done.
    fn next_op(&mut self, now: u64, mut exec: Exec) {
        let Some(txn) = exec.txn else {
            return self.begin_attempt(now, exec);
        };
        while let Some(op) = exec.ops.get(exec.results.len()) {
            let buffered = match op {
                ClientOp::Put(k, v) => self.gateway.put(txn, k.clone(), v.clone()),
                ClientOp::Delete(k) => self.gateway.delete(txn, k.clone()),
                ClientOp::Get(k) => {
                    let k = k.clone();
                    let call = self.new_call(exec);
                    return self.gateway.get(now, call, txn, &k);
                }
                ClientOp::Scan { start, end, limit } => {
                    let (start, end, limit) = (start.clone(), end.clone(), *limit);
                    let call = self.new_call(exec);
                    return self
                        .gateway
                        .scan(now, call, txn, &start, end.as_deref(), limit);
                }
            };
            match buffered {
                Ok(()) => exec.results.push(ClientOpResult::Done),
                Err(e) => {
                    self.gateway.abort(txn);
                    return self.finish_execute(exec, Err(e));
                }
            }
        }
        let call = self.new_call(exec);
        self.gateway.commit(now, call, txn);
    }

    fn on_call_result(&mut self, now: u64, call: CallId, result: CallResult) {
        let Some(mut exec) = self.executes.remove(&call) else {
            return;
        };
        match result {
            CallResult::Began { txn, .. } => {
                exec.txn = Some(txn);
                self.next_op(now, exec)
            }
            CallResult::Read(v) => {
                exec.observed = exec.txn.and_then(|t| self.gateway.observed_version(t));
                exec.results
                    .push(ClientOpResult::Value(v.map(|(_, value)| value)));
                self.next_op(now, exec)
            }
            CallResult::Rows(rows) => {
                exec.results.push(ClientOpResult::Rows(rows));
                self.next_op(now, exec)
            }
            CallResult::Committed(info) => {
                // A single read wrote nothing: both times are the version
                // it saw.
                let (read_ts, write_ts) = match exec.observed {
                    Some(v) => (v, v),
                    None => (info.read_ts, info.write_ts),
                };
                let done = Executed {
                    results: std::mem::take(&mut exec.results),
                    tx: info.tx,
                    read_ts,
                    write_ts,
                    attempts: exec.attempt,
                };
                self.finish_execute(exec, Ok(done))
            }
            // Back-off over: the next attempt.
            CallResult::Slept => {
                exec.attempt += 1;
                self.begin_attempt(now, exec)
            }
            CallResult::Failed(e) => {
                if let Some(txn) = exec.txn.take() {
                    self.gateway.abort(txn);
                }
                // Aborts are retried, as `Session::run` does; so is a clock
                // not yet synchronised (a node that just started).
                let retry = e.is_abort() || e == TxnError::ClockUnavailable;
                if retry && exec.attempt < self.config.limits.retry_attempts {
                    let attempt = exec.attempt;
                    let call = self.new_call(exec);
                    self.gateway.backoff(now, call, attempt);
                } else {
                    self.finish_execute(exec, Err(e))
                }
            }
            other => {
                let e = TxnError::Protocol {
                    node: self.id,
                    detail: format!("embedded coordinator answered {other:?}"),
                };
                self.finish_execute(exec, Err(e))
            }
        }
    }

    fn finish_execute(&mut self, exec: Exec, r: Result<Executed, TxnError>) {
        let r = r.map_err(|e| match e {
            TxnError::Aborted(reason) => ExecuteError::Aborted {
                attempts: exec.attempt,
                reason: reason.to_string(),
            },
            TxnError::Indeterminate { tx, write_ts, .. } => {
                ExecuteError::Indeterminate { tx, write_ts }
            }
            e @ (TxnError::KeyTooLarge { .. }
            | TxnError::ValueTooLarge { .. }
            | TxnError::TooManyOps { .. }) => ExecuteError::Invalid(e.to_string()),
            e => ExecuteError::Unavailable(e.to_string()),
        });
        self.reply(exec.peer, Some(exec.id), ThinResponse::Executed(r).into());
    }

    /// The sequence number of the last log record this process appended
    /// (0: none yet); [`split_held`] holds the replies of a drain that
    /// logged nothing until the log is durable through it, while a region
    /// has no complete backup.
    pub fn log_end_seq(&self) -> u64 {
        self.log_seq
    }

    /// Move the embedded coordinator's effects and the loopback frames
    /// until both are quiet.
    fn pump(&mut self, now: u64) {
        loop {
            if self.lock_waits_dirty {
                self.retry_lock_waits(now);
            }
            let effects = self.gateway.drain_effects();
            let frame = if effects.is_empty() {
                self.loopback.pop_front()
            } else {
                None
            };
            if effects.is_empty() && frame.is_none() {
                return;
            }
            for e in effects {
                match e {
                    Effect::Send { to, frame } => self.send(Peer::Node(to), frame),
                    Effect::Wake { at_local_ns } => self.arm(now, at_local_ns),
                    Effect::Reply { call, result } => self.on_call_result(now, call, result),
                }
            }
            if let Some(f) = frame {
                self.handle(now, Peer::Node(self.id), f);
            }
        }
    }

    /// Ask for a tick at `at` unless one at or before it is pending.
    fn arm(&mut self, now: u64, at: u64) {
        if self.armed_ns.is_none_or(|a| at < a || a < now) {
            self.armed_ns = Some(at);
            self.effects.push(NodeEffect::Wake { at_local_ns: at });
        }
    }

    /// The link to node `node` broke: the embedded coordinator's RPCs to it
    /// fail now.
    pub fn on_disconnect(&mut self, now: u64, node: NodeId) {
        self.gateway.on_disconnect(now, node);
        self.pump(now);
    }

    /// Time passes: GC, the embedded coordinator's timers and clock sync.
    pub fn tick(&mut self, now: u64) {
        self.start_leases(now);
        if self.armed_ns.is_some_and(|a| a <= now) {
            self.armed_ns = None;
        }
        self.serve_deferred_reads(now);
        // Lock waits are tried again (in `pump`): those whose time ran
        // out are answered, and recovery below may release locks.
        self.lock_waits_dirty |= !self.lock_waits.is_empty();
        if now >= self.next_gc_ns {
            self.next_gc_ns = now + self.config.limits.gc_interval_us.max(1) * 1000;
            let window_ns = self.config.limits.gc_window_ms * 1_000_000;
            if let Some(iv) = self.gateway.clock_time(now) {
                self.participant
                    .gc(Timestamp(iv.lower.saturating_sub(window_ns)));
            }
        }
        self.gateway.tick(now);
        // The coordination service serves whatever this node's standing.
        if let Some(s) = &mut self.service {
            s.tick(now);
        }
        self.after_service();
        self.cas.tick(now, &self.config);
        self.after_cas(now);
        if self.standing == Standing::Restarted && self.restored {
            if self.service.is_none() && !self.cas.is_external() && now >= self.next_service_read_ns
            {
                self.next_service_read_ns = now + self.lease_params.lease_ns;
                self.cas.read(now);
                self.after_cas(now);
            }
            self.renew_unapplied_proposal(now);
        }
        if self.standing == Standing::Member {
            self.renew_after_restart(now);
            self.lease_tick(now);
            self.clock_rate_tick(now);
            self.rebalance_tick(now);
            self.keep_time_bound_ahead(now);
            let upper = self.ff_value(now);
            if self.reconfig.probing() {
                self.sync_filled();
            }
            self.reconfig.tick(now, upper);
            self.recovery.tick(now);
            self.after_engines(now);
        }
        if self.standing != Standing::Member
            && now >= self.next_join_ns
            && self.clock_rate_bad.is_none()
        {
            self.next_join_ns = now + self.lease_params.lease_ns;
            let msg = ReconfigMessage::Join {
                config: self.config.id(),
                from: self.id,
            };
            let others: Vec<NodeId> = self
                .config
                .nodes
                .iter()
                .map(|n| NodeId(n.id))
                .filter(|n| *n != self.id)
                .collect();
            for n in others {
                self.send_oneway(n, Request::Reconfig(msg.clone()));
            }
        }
        self.pump(now);
        // The earliest future timer (a timer already past, like a suspected
        // CM's expired lease, must not make the node spin).
        let mut timers = vec![self.next_gc_ns];
        timers.extend(self.service.as_ref().and_then(|s| s.next_wake_ns()));
        timers.extend(self.cas.next_wake_ns());
        if self.standing != Standing::Member {
            timers.push(self.next_join_ns);
            if self.restored && self.service.is_none() {
                timers.push(self.next_service_read_ns);
            }
        } else {
            timers.push(self.lease.read(|r| match r {
                LeaseRole::Member(c) => c.next_wake_ns(),
                LeaseRole::Cm(m) => m.next_wake_ns().unwrap_or(u64::MAX),
                LeaseRole::None => u64::MAX,
            }));
            timers.extend(self.reconfig.next_wake_ns());
            timers.extend(self.recovery.next_wake_ns());
            timers.extend(self.rate_decide_at);
        }
        let next = timers
            .into_iter()
            .filter(|t| *t > now)
            .min()
            .unwrap_or(now + self.lease_params.renew_ns());
        self.arm(now, next);
    }

    /// FaRM §5.1: renew, grant, suspect. (In the tokio shell the lease
    /// thread renews too; a renewal is due once, whichever thread asks.)
    fn lease_tick(&mut self, now: u64) {
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

    /// A member whose clock rate is off the master's reports it to the CM
    /// every lease until a configuration without it (or with another
    /// master) comes; the CM decides what to do with the reports.
    fn clock_rate_tick(&mut self, now: u64) {
        if self.config.cm() == self.id {
            if self.rate_decide_at.is_some_and(|t| now >= t) {
                self.decide_clock_rates(now);
            }
            return;
        }
        let Some(r) = self.gateway.clock_mut().rate_exceeded() else {
            return;
        };
        if self.clock_rate_bad.is_none() {
            self.clock_rate_bad = Some(r.ppm);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                    node: self.id,
                    ppm: r.ppm,
                }));
        }
        if now >= self.next_rate_report_ns {
            self.next_rate_report_ns = now + self.lease_params.lease_ns;
            let msg = ReconfigMessage::ClockRate {
                config: self.config.id(),
                from: self.id,
                ppm: r.ppm,
            };
            self.send_oneway(self.config.cm(), Request::Reconfig(msg));
        }
    }

    /// FaRM §5.4 at the CM: once nothing is being reconfigured, recovered
    /// or filled, install the next half of a make-before-break move
    /// ([`Configuration::rebalance_step`]: add a filling replica on a
    /// lightly loaded member, or, once it is filled, drop the old one), so
    /// a node that joined gets regions while every region keeps f + 1
    /// complete replicas. One step at a time: the next waits until the new
    /// replica is filled (data recovery is paced) and a lease has passed.
    fn rebalance_tick(&mut self, now: u64) {
        if self.config.cm() != self.id
            || now < self.next_rebalance_ns
            || !self.reconfig.may_start()
            || self.reconfig.config().id() != self.config.id()
            || self.recovery.busy()
            || self
                .reconfig
                .config()
                .regions()
                .iter()
                .any(|r| !r.filling.is_empty())
        {
            return;
        }
        self.next_rebalance_ns = now + self.lease_params.lease_ns;
        if let Some((next, step)) = self.reconfig.config().rebalance_step() {
            self.effects.push(NodeEffect::Event(NodeEvent::Rebalance {
                config: next.id(),
                step,
            }));
            self.reconfig.propose(now, next);
            self.after_engines(now);
        }
    }

    /// CM: a member reports its clock rate off the master's.
    fn on_clock_rate(&mut self, now: u64, config: ConfigId, from: NodeId, ppm: i64) {
        if config != self.config.id() || self.config.cm() != self.id || from == self.id {
            return;
        }
        self.rate_reports.insert(from, ppm);
        let window_ns = self.config.clock.rate_window_ms.max(1) * 1_000_000;
        self.rate_decide_at.get_or_insert(now + window_ns);
    }

    /// CM: one rate window after the first report. If most other members
    /// report the master's clock off, the odd clock is this one: the CM
    /// stops granting leases, so a backup CM (another clock master) takes
    /// over. Otherwise the reporting members are suspected and removed.
    fn decide_clock_rates(&mut self, now: u64) {
        self.rate_decide_at = None;
        let reports = std::mem::take(&mut self.rate_reports);
        let others = self.config.members().len().saturating_sub(1);
        if reports.len() * 2 > others {
            let ppm = reports.values().copied().sum::<i64>() / reports.len().max(1) as i64;
            self.clock_rate_bad = Some(-ppm);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                    node: self.id,
                    ppm: -ppm,
                }));
            self.lease.set_serving(false);
            return;
        }
        let mut bad = Vec::new();
        for (n, ppm) in reports {
            if self.config.is_member(n) {
                self.effects
                    .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                        node: n,
                        ppm,
                    }));
                bad.push(n);
            }
        }
        if !bad.is_empty() && self.reconfig.may_suspect_members() {
            self.note_suspect(now, bad.clone());
            self.reconfig.suspect_members(now, &bad);
        }
    }

    /// Report a suspicion once per set of suspects and lease (retries of
    /// the same suspicion every tick are not news).
    fn note_suspect(&mut self, now: u64, who: Vec<NodeId>) {
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

    /// This node with the injected bugs `bugs` (tests only; see
    /// `meridian_bugs`), given right after construction or restore. The
    /// node and its participant consult them; a restored node with
    /// `RestoredRecoveryVotes` keeps a running recovery flow for the
    /// configuration it was restored in.
    #[cfg(feature = "sim-bugs")]
    pub fn with_bugs(mut self, bugs: meridian_bugs::Bugs) -> Self {
        if self.restored && bugs.on(meridian_bugs::Bug::RestoredRecoveryVotes) {
            bugs.count(meridian_bugs::Bug::RestoredRecoveryVotes);
            self.recovery.run_unstarted();
        }
        self.participant.set_bugs(bugs.clone());
        self.bugs = bugs;
        self
    }

    /// What the `read_ts` wait at this node did since it started
    /// (`clock.reads_wait_at_server`, FaRMv2 §4.1). The node shell writes
    /// it to `stats.jsonl` once a second; `meridian bench` reports it.
    pub fn read_hold_stats(&self) -> ReadHoldStats {
        self.read_holds
    }

    /// The configuration this node runs.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// Disk durability: whether this node's LOCK-REPLYs may leave before
    /// the LOCK record is durable ([`independent_of_log`]). True when
    /// every region of the current configuration has a complete backup
    /// (one not still being filled by data recovery).
    ///
    /// Why that is enough (FaRM §4, §5.3): a transaction is reported
    /// committed only after every backup of every region it writes has
    /// made its COMMIT-BACKUP record durable (those ACKs wait for their
    /// fsync) and one primary has installed its writes (its
    /// [`TxnResponse::Installed`] goes on this same condition; with
    /// `durability.report_after_primary_fsync`, once its COMMIT-PRIMARY
    /// is durable). If
    /// every node then loses what it had not fsynced, each written region
    /// still votes commit-backup from its backups, whose records carry
    /// the writes, so recovery commits the transaction; the LOCK record
    /// adds nothing. Before that point nothing was reported, and no other
    /// transaction could see the writes (COMMIT-PRIMARY exposes them, and
    /// it is sent only after the COMMIT-BACKUP ACKs). The log is written
    /// in order, so COMMIT-PRIMARY's fsync at a primary covers its LOCK;
    /// coordinators truncate only after that fsync (the COMMIT-PRIMARY
    /// ACK), so a backup never applies a write a primary could still lose.
    /// A region with no complete backup keeps the LOCK record as the only
    /// durable copy of the writes until COMMIT-PRIMARY: then every
    /// LOCK-REPLY waits for its fsync, as before. The simulator loses
    /// un-fsynced records at every crash, so this argument is tested, not
    /// only argued.
    pub fn lock_replies_skip_fsync(&mut self) -> bool {
        let id = self.config.id();
        match self.lock_replies_free {
            Some((c, free)) if c == id => free,
            _ => {
                let free = self
                    .config
                    .regions()
                    .iter()
                    .all(|r| r.backups.iter().any(|b| !r.filling.contains(b)));
                self.lock_replies_free = Some((id, free));
                free
            }
        }
    }

    /// True once a configuration removed this node, or after a restart
    /// (memory lost; it is not a member until it joins again).
    pub fn is_member(&self) -> bool {
        self.standing == Standing::Member
    }

    /// Recovery counters.
    pub fn recovery_stats(&self) -> crate::recovery::RecoveryStats {
        self.recovery.stats()
    }

    /// The reconfiguration engine's and recovery's state, one line (to
    /// read a stuck simulation).
    pub fn describe_recovery(&self) -> String {
        format!(
            "reconfig {}, recovery busy {}",
            self.reconfig.describe(),
            self.recovery.busy()
        )
    }

    /// True while reconfiguration or recovery work is pending here.
    pub fn recovering(&self) -> bool {
        self.reconfig.reconfiguring() || self.recovery.busy()
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        if let Some(s) = &self.service {
            s.check_invariants();
        }
        self.reconfig.check_invariants();
        self.recovery.check_invariants();
        if let Some(c) = self.recovery.running_config() {
            // FaRM §5.2 step 6: a node in a newer configuration refuses
            // the older one's messages, its recovery's too (seed 9253).
            assert_eq!(
                c,
                self.config.id(),
                "configuration {}'s recovery runs on a node in configuration {}",
                c.0,
                self.config.id().0
            );
        }
        self.lease.check_invariants();
        assert!(
            self.standing != Standing::Member || self.config.is_member(self.id),
            "a member running a configuration without itself"
        );
        assert_eq!(
            self.config.id(),
            self.reconfig.config().id(),
            "node and reconfiguration engine disagree on the configuration"
        );
        self.participant.check_invariants();
        self.gateway.check_invariants();
        assert!(self.executes.len() <= self.config.limits.max_concurrent_executes);
        assert!(
            self.deferred_reads.len() + self.lock_waits.len()
                <= self.config.limits.max_deferred_reads,
            "more reads held than limits.max_deferred_reads"
        );
        assert!(
            self.gateway.open_txns() <= self.executes.len(),
            "an open thin-client transaction without its execute"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Configuration {
        Configuration::local(3, 7000, 3, 6, std::path::Path::new("/nonexistent"))
    }

    /// LOCK-REPLYs skip the fsync wait only while every region has a
    /// complete backup: yes with 3 copies, no with 1, and no once a
    /// region's only backup is still being filled.
    #[test]
    fn lock_replies_skip_the_fsync_only_with_a_complete_backup_everywhere() {
        let mut p = NodeProcess::new(config(), NodeId(0), 1).unwrap();
        assert!(p.lock_replies_skip_fsync(), "3 copies of every region");
        let one = Configuration::local(3, 7000, 1, 6, std::path::Path::new("/nonexistent"));
        let mut q = NodeProcess::new(one, NodeId(0), 1).unwrap();
        assert!(!q.lock_replies_skip_fsync(), "1 copy: no backup");
    }

    /// A drain's records need an fsync of their own only when something
    /// held waits for them: its log markers alone wait for nothing, a
    /// COMMIT-BACKUP's ACK does, and a LOCK-REPLY that goes before its
    /// fsync leaves only the marker held.
    #[test]
    fn only_held_replies_ask_for_an_fsync() {
        let marker = || NodeEffect::AppendLog {
            first_seq: 7,
            records: Vec::new(),
        };
        let reply = |resp: TxnResponse| NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id: 1,
                resp: Response::Txn(resp),
            },
        };
        let lock = reply(TxnResponse::Lock(Ok(())));
        let (free, held) = split_held(vec![marker(), lock], true, true, 7);
        let (seq, held) = held.expect("logged");
        assert_eq!((seq, free.len()), (7, 1), "the LOCK-REPLY goes at once");
        assert!(!held_waits_for_log(&held), "nothing waits: no fsync asked");
        let lock = reply(TxnResponse::Lock(Ok(())));
        let (_, held) = split_held(vec![marker(), lock], true, false, 7);
        assert!(
            held_waits_for_log(&held.expect("logged").1),
            "no complete backup: the reply waits"
        );
        let (_, held) = split_held(vec![marker(), reply(TxnResponse::Ack)], true, true, 7);
        assert!(
            held_waits_for_log(&held.expect("logged").1),
            "an ACK waits for its record"
        );
        assert!(
            DurableRecord::MasterClock { offset_ns: 1 }.wants_prompt_sync()
                && !DurableRecord::Participant(meridian_txn::Mutation::Gc(Timestamp(1)))
                    .wants_prompt_sync()
        );
    }

    /// A drain that logged nothing: its READ reply goes at once while
    /// every region has a complete backup (or nothing was ever logged),
    /// and otherwise waits until the log is durable through its end, since
    /// it may show a write whose COMMIT-PRIMARY record is not durable yet.
    #[test]
    fn without_a_complete_backup_a_read_waits_for_the_logs_end() {
        let read = || NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id: 2,
                resp: Response::Txn(TxnResponse::ReadLatest(Ok(meridian_wire::LatestRead {
                    version: Timestamp(5),
                    value: Some(b"v".to_vec()),
                }))),
            },
        };
        let wake = || NodeEffect::Wake { at_local_ns: 1 };
        let (free, held) = split_held(vec![read(), wake()], true, true, 12);
        assert_eq!((free.len(), held), (2, None), "complete backups: at once");
        let (free, held) = split_held(vec![read(), wake()], true, false, 0);
        assert_eq!((free.len(), held), (2, None), "nothing logged yet: at once");
        let (free, held) = split_held(vec![read(), wake()], false, false, 12);
        assert_eq!((free.len(), held), (2, None), "memory mode: at once");
        let (free, held) = split_held(vec![read(), wake()], true, false, 12);
        assert_eq!(free, vec![wake()], "the wake-up goes");
        let (seq, held) = held.expect("the read waits");
        assert_eq!((seq, held), (12, vec![read()]), "for the log's end");
        assert!(held_waits_for_log(&[read()]));
        let (free, held) = split_held(vec![wake()], true, false, 12);
        assert_eq!((free.len(), held), (1, None), "nothing to hold");
    }

    /// A COMMIT-PRIMARY's two answers: `Installed` goes before the fsync
    /// while every region has a complete backup, and the `Ack` after it
    /// without asking for one (it only lets the coordinator truncate).
    /// Without a complete backup both wait, and the drain asks for the
    /// fsync; an `Ack` with no `Installed` ahead of it (COMMIT-BACKUP's)
    /// always asks.
    #[test]
    fn a_commit_primarys_durable_ack_asks_for_no_fsync_of_its_own() {
        let marker = || NodeEffect::AppendLog {
            first_seq: 9,
            records: Vec::new(),
        };
        let reply = |id: u64, resp: TxnResponse| NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id,
                resp: Response::Txn(resp),
            },
        };
        let drain = || {
            vec![
                marker(),
                reply(3, TxnResponse::Installed),
                reply(3, TxnResponse::Ack),
            ]
        };
        let (free, held) = split_held(drain(), true, true, 9);
        let (_, held) = held.expect("logged");
        assert_eq!(
            free,
            vec![reply(3, TxnResponse::Installed)],
            "Installed goes"
        );
        assert!(held_waits_for_log(&held), "the Ack waits for the record");
        assert!(!held_asks_fsync(&free, &held), "but asks no fsync");
        let (free, held) = split_held(drain(), true, false, 9);
        let (_, held) = held.expect("logged");
        assert!(free.is_empty(), "no complete backup: both wait");
        assert!(held_asks_fsync(&free, &held), "and the fsync is asked for");
        let (free, held) = split_held(
            vec![
                marker(),
                reply(3, TxnResponse::Installed),
                reply(4, TxnResponse::Ack),
            ],
            true,
            true,
            9,
        );
        assert!(
            held_asks_fsync(&free, &held.expect("logged").1),
            "another request's Ack asks"
        );
    }

    /// The streamed checkpoint is `encode`'s bytes exactly, written from
    /// the writer's position on (after the shell's header), and restores.
    #[test]
    fn a_streamed_checkpoint_is_the_encoded_one() {
        let p = NodeProcess::new(config(), NodeId(0), 1).unwrap();
        let snap = p.snapshot().unwrap();
        let whole = snap.encode().unwrap();
        let mut out = std::io::Cursor::new(b"header!!".to_vec());
        out.set_position(8);
        let n = snap.encode_into(&mut out).unwrap();
        let out = out.into_inner();
        assert_eq!(n as usize, whole.len());
        assert_eq!(&out[..8], b"header!!");
        assert_eq!(&out[8..], &whole[..]);
        NodeProcess::restore(config(), NodeId(0), 2, Some((0, &out[8..])), &[]).unwrap();
    }

    fn register(p: &mut NodeProcess) -> u64 {
        p.on_message(
            0,
            Peer::Conn(1),
            Frame::Request {
                id: 1,
                config: ConfigId(1),
                truncate: Default::default(),
                req: Request::Cm(CmRequest::RegisterClient),
            },
        );
        match p.drain_effects().pop() {
            Some(NodeEffect::Send {
                frame:
                    Frame::Response {
                        resp: Response::Cm(CmResponse::Registered { coordinator, .. }),
                        ..
                    },
                ..
            }) => coordinator,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Review finding 6: coordinator ids came from an in-memory counter at
    /// the CM and restarted with it, so a restarted CM handed out ids whose
    /// transactions nodes still held records for.
    /// The simulator (seed 149) found the next flaw: a backup CM that took
    /// over handed out the ids the failed CM had, since both counted from
    /// the same incarnation.
    #[test]
    fn coordinator_ids_are_unique_across_cm_restarts() {
        let mut seen = std::collections::BTreeSet::new();
        for cm_node in 0..2 {
            let mut c = config();
            c.cm = cm_node;
            for incarnation in 1..=3 {
                let mut cm = NodeProcess::new(c.clone(), NodeId(cm_node), incarnation).unwrap();
                for _ in 0..5 {
                    assert!(seen.insert(register(&mut cm)), "coordinator id reused");
                }
            }
        }
        for n in 0..3 {
            for incarnation in 1..=3 {
                assert!(seen.insert(embedded_coordinator_id(NodeId(n), incarnation)));
            }
        }
    }

    /// Swarm seed 4033: n3 won the CAS of 2 (CM n3, members 2-4), its
    /// answer was lost, and n3 crashed before applying 2. Restored in 1, it
    /// hosts no coordination replica (the group is n0-n2), so it never saw
    /// that the service names it the CM of 2; the old CM (removed by 2) and
    /// the survivors (a minority of 1 without the restored, silent nodes)
    /// could not replace it either. It must read the service and renew 2.
    #[test]
    fn a_restored_node_without_a_replica_renews_the_configuration_it_won() {
        let c1 = Configuration::local(5, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        assert!(!c1.coordination_group().contains(&NodeId(3)));
        let alive = [2, 3, 4].into_iter().map(NodeId).collect();
        let c2 = c1.remap(&alive, NodeId(3)).unwrap();
        let mut n3 = NodeProcess::restore(c1.clone(), NodeId(3), 2, None, &[]).unwrap();
        n3.tick(1_000);
        let read = n3.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Send {
                to: Peer::Node(to),
                frame:
                    Frame::OneWay {
                        req: Request::Coord(CoordMessage::Read { req, .. }),
                        ..
                    },
            } => Some((to, req)),
            _ => None,
        });
        let (to, req) = read.expect("a restored node without a replica reads the service");
        let answer = CoordMessage::CasReply {
            req,
            swapped: false,
            current_toml: c2.to_toml().unwrap(),
            time_bound_ns: 0,
            cm: NodeId(3),
        };
        n3.on_message(
            2_000,
            Peer::Node(to),
            Frame::OneWay {
                config: ConfigId(1),
                truncate: Default::default(),
                req: Request::Coord(answer),
            },
        );
        let cas = n3.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Send {
                frame:
                    Frame::OneWay {
                        req:
                            Request::Coord(CoordMessage::Cas {
                                expected,
                                proposed_toml,
                                ..
                            }),
                        ..
                    },
                ..
            } => Some((expected, proposed_toml)),
            _ => None,
        });
        let (expected, proposed) = cas.expect("it renews the stored configuration");
        assert_eq!(expected, ConfigId(2));
        let next = Configuration::from_toml(&proposed).unwrap();
        assert_eq!((next.id(), next.cm()), (ConfigId(3), NodeId(3)));
        assert_eq!(next.members(), c2.members());
    }

    /// Swarm seed 17431: n0, CM of a configuration of four, saw n2 and n4
    /// crash and come back restored from disk. Restored nodes never answered
    /// a probe, so n0 and n3 (two of four) could never replace the
    /// configuration. A restored node answers a probe of the configuration
    /// it was restored in as empty (it counts toward the majority and is
    /// left out, then joins again); a probe of a newer configuration stays
    /// unanswered (its CM's renewal may still come for it).
    #[test]
    fn a_restored_node_answers_a_probe_of_its_configuration_as_empty() {
        let c1 = Configuration::local(5, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        let mut n3 = NodeProcess::restore(c1.clone(), NodeId(3), 2, None, &[]).unwrap();
        n3.drain_effects();
        let probe = |n3: &mut NodeProcess, config: ConfigId, seq: u64| {
            n3.on_message(
                1_000 + seq,
                Peer::Node(NodeId(0)),
                Frame::OneWay {
                    config,
                    truncate: Default::default(),
                    req: Request::Reconfig(ReconfigMessage::Probe {
                        config,
                        from: NodeId(0),
                        seq,
                    }),
                },
            );
            n3.drain_effects()
                .into_iter()
                .filter_map(|e| match e {
                    NodeEffect::Send {
                        to: Peer::Node(to),
                        frame:
                            Frame::OneWay {
                                req: Request::Reconfig(r @ ReconfigMessage::ProbeReply { .. }),
                                ..
                            },
                    } => Some((to, r)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let same = probe(&mut n3, c1.id(), 1);
        assert_eq!(
            same,
            vec![(
                NodeId(0),
                ReconfigMessage::ProbeReply {
                    config: c1.id(),
                    from: NodeId(3),
                    seq: 1,
                    empty: true,
                    filled: Vec::new(),
                }
            )],
            "a restored node answers a probe of its own configuration as empty"
        );
        let newer = probe(&mut n3, ConfigId(c1.id().0 + 1), 2);
        assert!(
            newer.is_empty(),
            "a probe of a newer configuration got {newer:?}"
        );
    }

    /// Swarm seed 21794: CM n0 crashed during its configuration's
    /// recovery and came back from disk, still a member (a restored CM
    /// renews its configuration). It answered the recovery coordinator's
    /// REQUEST-VOTE at once, without the lock recovery its old incarnation
    /// never finished, so the vote carried its surviving LOCK record's
    /// evidence but not the record; the coordinator committed and truncated
    /// the transaction without sending n0 its COMMIT-RECOVERY, and n0, the
    /// region's primary, never installed the writes. A restored node takes
    /// no part in the recovery of the configuration it was restored in.
    #[test]
    fn a_restored_cm_does_not_vote_in_the_configuration_it_was_restored_in() {
        let c1 = Configuration::local(5, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        assert_eq!(c1.cm(), NodeId(0));
        let region = c1
            .regions()
            .iter()
            .find(|r| r.primary == NodeId(0))
            .map(|r| r.id)
            .expect("n0 is a primary");
        let mut n0 = NodeProcess::restore(c1.clone(), NodeId(0), 2, None, &[]).unwrap();
        n0.drain_effects();
        use meridian_wire::{RecoveryMessage, TxId};
        let tx = TxId {
            config: c1.id(),
            coordinator: 7,
            thread: 0,
            local: 1,
        };
        n0.on_message(
            1_000,
            Peer::Node(NodeId(2)),
            Frame::OneWay {
                config: c1.id(),
                truncate: Default::default(),
                req: Request::Recovery(RecoveryMessage::RequestVote {
                    config: c1.id(),
                    tx,
                    region,
                    from: NodeId(2),
                }),
            },
        );
        let votes: Vec<_> = n0
            .drain_effects()
            .into_iter()
            .filter(|e| {
                matches!(
                    e,
                    NodeEffect::Send {
                        frame: Frame::OneWay {
                            req: Request::Recovery(RecoveryMessage::Vote { .. }),
                            ..
                        },
                        ..
                    }
                )
            })
            .collect();
        assert!(votes.is_empty(), "a restored CM voted: {votes:?}");
    }

    /// The hold cap of `serve_held_write`: a held VALIDATE is held a clock
    /// sample's life (`clock.max_sample_age_us`) from its arrival in all.
    /// With a steady clock a re-check only moves the time earlier (the best
    /// lower bound only rises), so the cap needs a clock reset: here the
    /// node follows a new master under a far wider drift bound, whose first
    /// sample puts `write_ts` past the cap, though still within a sample's
    /// life of the re-check. The request goes back (`NotHeld`) instead of
    /// being held again.
    #[test]
    fn a_held_request_goes_back_once_a_clock_reset_moves_its_time_past_the_cap() {
        let c = config();
        let horizon_ns = c.clock.max_sample_age_us * 1000;
        let mut p = NodeProcess::new(c, NodeId(1), 1).unwrap();
        let clock = p.gateway.clock_mut();
        assert!(!clock.is_master(), "n1 follows the clock master");
        clock
            .on_sync(meridian_time::SyncSample {
                send_local_ns: 0,
                master_ns: 1_000_000,
                recv_local_ns: 10_000,
            })
            .unwrap();
        let arrival = 100_000;
        // A write_ts the clock shows past 8 ms after the arrival.
        let write_ts = Timestamp(clock.time(arrival + 8_000_000).unwrap().lower);
        let validate = TxnRequest::Validate {
            tx: meridian_wire::TxId {
                config: ConfigId(1),
                coordinator: 7,
                thread: 0,
                local: 1,
            },
            read_ts: Timestamp(1),
            keys: vec![(meridian_wire::RegionId(0), vec![0, 1])],
            ranges: Vec::new(),
        };
        p.on_message(
            arrival,
            Peer::Conn(3),
            Frame::Request {
                id: 5,
                config: ConfigId(1),
                truncate: Default::default(),
                req: Request::Txn(TxnRequest::AfterWriteTs {
                    write_ts,
                    req: Box::new(validate),
                }),
            },
        );
        let wake = p.drain_effects().into_iter().find_map(|e| match e {
            NodeEffect::Wake { at_local_ns } => Some(at_local_ns),
            NodeEffect::Send { frame, .. } => panic!("answered at once: {frame:?}"),
            _ => None,
        });
        let wake = wake.expect("held until write_ts passed");
        assert!(wake > arrival + 7_000_000 && wake < arrival + horizon_ns);
        // A new master (FaRMv2 §4.3) with a 50 % drift bound: the lower
        // bound now rises at half speed from the new sample.
        let clock = p.gateway.clock_mut();
        let reset_at = arrival + 5_000_000;
        let master_ns = clock.time(reset_at).unwrap().lower;
        clock.follow_new_master(0, 500_000);
        clock
            .on_sync(meridian_time::SyncSample {
                send_local_ns: reset_at,
                master_ns,
                recv_local_ns: reset_at + 10,
            })
            .unwrap();
        let later = clock.passed_at(wake, write_ts).unwrap();
        assert!(
            later > arrival + horizon_ns && later <= wake + horizon_ns,
            "the new estimate passes the cap but not a sample's life of the re-check"
        );
        p.tick(wake);
        let replies: Vec<_> = p
            .drain_effects()
            .into_iter()
            .filter_map(|e| match e {
                NodeEffect::Send {
                    to: Peer::Conn(3),
                    frame: Frame::Response { id, resp },
                } => Some((id, resp)),
                _ => None,
            })
            .collect();
        assert_eq!(replies, vec![(5, Response::Txn(TxnResponse::NotHeld))]);
    }

    #[test]
    fn non_cm_refuses_registration_and_clock_sync_with_a_typed_error() {
        let mut p = NodeProcess::new(config(), NodeId(1), 1).unwrap();
        for req in [
            Request::Cm(CmRequest::RegisterClient),
            Request::Clock(ClockRequest::Sync),
        ] {
            p.on_message(
                0,
                Peer::Conn(7),
                Frame::Request {
                    id: 9,
                    config: ConfigId(1),
                    truncate: Default::default(),
                    req,
                },
            );
            assert!(matches!(
                p.drain_effects().as_slice(),
                [NodeEffect::Send {
                    to: Peer::Conn(7),
                    frame: Frame::Response {
                        id: 9,
                        resp: Response::Rejected(Rejection::WrongRole(_))
                    }
                }]
            ));
        }
    }
}
