//! # The client process: the coordinator (FaRM §4, FaRMv2 §4.1–4.2)
//!
//! **Problem.** The client coordinates its own transactions. Around the pure
//! [`Transaction`] engine sits driver logic that decides safety under
//! failures: what happens when a reply never comes, which locks must be
//! released, when a transaction may be reported committed, and which log
//! records must eventually be truncated. That logic must exist once, run in
//! production and in the simulator alike.
//!
//! **Algorithm.** [`ClientProcess`] owns:
//! - the open transactions (application calls `begin`, `get`, `scan`,
//!   `commit`, … each answered by an [`Effect::Reply`]);
//! - every outstanding RPC, with its deadline (`rpc_timeout_ms`) and purpose;
//! - the clock ([`ClockSync`]), synchronised with the clock master every
//!   `clock.sync_interval_us`; GET_TS waits become [`Effect::Wake`]s;
//! - the truncation queue: TRUNCATEs ride on the next request to a node, or
//!   are flushed every `truncate_flush_us`, and are re-queued if the frame
//!   that carried them is not acknowledged, so no LOCK record is left
//!   untruncated because a frame was lost.
//!
//! Failure rules: a timeout, a lost connection or a
//! protocol error *before* the commit decision abandons the transaction and
//! sends ABORT to every primary a LOCK went to, retried up to `rpc_attempts`
//! times. After the decision (COMMIT-BACKUP sent) the coordinator may not
//! abort: it retries the idempotent COMMIT-BACKUP / COMMIT-PRIMARY messages,
//! and if they still fail it reports [`TxnError::Indeterminate`]; recovery
//! (FaRM §5.3, `crate::recovery`) resolves such transactions. A
//! transaction is reported committed on the first COMMIT-PRIMARY ack, and
//! TRUNCATE is queued once every primary has acknowledged.
//!
//! **Invariants** ([`ClientProcess::check_invariants`]): every RPC belongs
//! to a live purpose (an open transaction, a finishing one, a truncation, an
//! abort, a clock sync or a ping); the deadline index matches the RPC table;
//! queues stay within `Limits`.
//!
//! **Layout.** This file holds the process's state, configuration and
//! accessors; `calls.rs` the application calls, `input.rs` messages, ticks
//! and wake-ups, `waits.rs` the timestamp waits, `rpc.rs` sending, retries
//! and failures, `replies.rs` the replies and the commit driver, and
//! `truncation.rs` truncation and a clean close.

mod calls;
mod input;
mod replies;
mod rpc;
#[cfg(test)]
mod testing;
mod truncation;
mod waits;

use crate::lease::{LeaseClient, LeaseDesk, LeaseFrom, LeaseOutcome, LeaseParams, LeaseRole};
use crate::{CallId, Effect};
use meridian_config::{Configuration, Limits, RegionMap};
use meridian_time::{ClockError, ClockSync, SyncSample};
use meridian_txn::{
    AbortReason, CommitStage, CommitStep, GetStep, ScanStep, Transaction, TxnError, TxnOptions,
};
use meridian_wire::{
    AdminRequest, ClockRequest, ClockResponse, CmRequest, CmResponse, ConfigId, Conflict, Frame,
    Key, LeaseHolder, LeaseMessage, NodeId, Rejection, Request, Response, Timestamp, TxId,
    TxnRequest, Value,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Handle of an open transaction inside one client process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnHandle(pub u64);

/// What a committed transaction reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// The transaction id.
    pub tx: TxId,
    /// `read_ts`.
    pub read_ts: Timestamp,
    /// `write_ts` (equals `read_ts` for read-only transactions).
    pub write_ts: Timestamp,
    /// Whether it wrote.
    pub wrote: bool,
}

/// The answer to an application call.
#[derive(Clone, Debug, PartialEq)]
pub enum CallResult {
    /// `begin`: the transaction and its `read_ts` (uncertainty waited out).
    Began {
        /// The handle for later calls.
        txn: TxnHandle,
        /// Its id.
        tx: TxId,
        /// Its snapshot.
        read_ts: Timestamp,
    },
    /// `get`: the value and its version; own buffered writes have version
    /// `Timestamp::ZERO`.
    Read(Option<(Timestamp, Value)>),
    /// `get_many`: each key's value and version, in the order asked.
    Reads(Vec<Option<(Timestamp, Value)>>),
    /// `scan`: rows in key order.
    Rows(Vec<(Key, Value)>),
    /// `commit` succeeded.
    Committed(CommitInfo),
    /// `sleep` / `backoff` elapsed.
    Slept,
    /// `ping` answered.
    Pong,
    /// `close`: every queued TRUNCATE was acknowledged (or given up on).
    Closed,
    /// `register`: the CM assigned this coordinator id.
    Registered(u64),
    /// `execute`: the node's answer. A reply that never came is
    /// [`CallResult::ExecuteLost`] instead.
    Executed(Result<meridian_wire::Executed, meridian_wire::ExecuteError>),
    /// `execute`: no answer in time (or the connection was
    /// lost). The node may or may not have committed it (Jepsen's `:info`);
    /// Execute is not retried, since running it twice is not idempotent
    /// (exactly-once retries need RIFL, which is not built).
    ExecuteLost(String),
    /// The call failed; [`TxnError::Aborted`] is the normal, retryable case.
    Failed(TxnError),
}

/// Counters of a client process, for reporting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Timestamps taken (GET_TS) whose uncertainty the coordinator waited
    /// out (every one, or only `write_ts` with
    /// `clock.reads_wait_at_server`).
    pub ts_count: u64,
    /// `read_ts` timestamps handed out without a wait, the nodes holding
    /// the reads instead (`clock.reads_wait_at_server`).
    pub read_ts_unwaited: u64,
    /// Single-read transactions begun without a `read_ts` (no GET_TS; FaRM
    /// §3's lock-free read, [`TxnOptions::single_read`]).
    pub single_read_begins: u64,
    /// `write_ts` timestamps used without a wait, the nodes holding the
    /// VALIDATEs or COMMIT-BACKUPs instead (`clock.writes_wait_at_server`).
    pub write_ts_unwaited: u64,
    /// Sum of the uncertainties of those `write_ts`, ns (the wait each
    /// would have had at the coordinator, less its lateness).
    pub write_ts_unwaited_uncertainty_ns_sum: u64,
    /// Of their held requests, those a node sent back
    /// ([`meridian_wire::TxnResponse::NotHeld`]): waited out here and sent again.
    pub write_ts_sent_back: u64,
    /// Sum of uncertainties at GET_TS, ns.
    pub uncertainty_ns_sum: u64,
    /// Sum of the local time from GET_TS to the end of its wait, ns.
    pub ts_wait_ns_sum: u64,
    /// Of `ts_wait_ns_sum`, the part after each wait's deadline (the local
    /// time its lower bound passed the timestamp): how late the input or
    /// tick that ended it came, ns. The rest is the wait the clock asks
    /// for.
    pub ts_late_ns_sum: u64,
    /// Waits counted in `ts_wait_ns_sum` that ended more than 100 µs
    /// after their deadline.
    pub ts_late_over_100us: u64,
    /// RPCs that timed out or whose connection was lost.
    pub rpc_failures: u64,
    /// RPCs sent again after a failure.
    pub rpc_retries: u64,
    /// ABORTs sent.
    pub aborts_sent: u64,
    /// Commits whose outcome was reported unknown.
    pub indeterminate: u64,
    /// TRUNCATE batches given up after `rpc_attempts`.
    pub truncations_dropped: u64,
    /// Clock synchronisations rejected as inconsistent.
    pub clock_rejected: u64,
    /// Clock synchronisations the master refused (not the master, no
    /// lease majority, disabled, or past its time bound; FaRMv2 §4.3).
    pub clock_refused: u64,
    /// GET_TS calls that found no usable clock sample and waited for the
    /// next sync instead of aborting at once.
    pub clock_parked: u64,
    /// GET_TS refused because every clock sample was too old (no sync
    /// answered within `clock.max_sample_age_us`; FaRMv2 §4.1).
    pub clock_expired: u64,
    /// GET_TS refused because this process is the clock master and its
    /// time reached the stored time bound (FaRMv2 §4.3).
    pub clock_past_bound: u64,
    /// GET_TS refused for any other clock reason: never synchronised,
    /// local time before the samples, an inconsistent sample, disabled.
    pub clock_not_ready: u64,
    /// Calls failed with a `TooOld` abort (snapshot below the GC safe
    /// point, FaRMv2 §5).
    pub aborts_too_old: u64,
    /// Newer configurations adopted (FaRM §5.2).
    pub config_changes: u64,
    /// Lease requests sent to the CM (FaRM §5.1).
    pub lease_requests: u64,
    /// Lease grants received.
    pub lease_grants: u64,
    /// Read-write transactions committed whose stages were timed: the
    /// count behind `commit_stage_ns_sum`.
    pub commit_stages_timed: u64,
    /// Local time those transactions spent in each [`CommitStage`]
    /// (indexed by [`CommitStage::index`]), summed, ns: from `begin` to
    /// the commit call (its `read_ts` wait, reads and scans), then LOCK,
    /// the `write_ts` wait, VALIDATE, COMMIT-BACKUP and COMMIT-PRIMARY up
    /// to the report.
    pub commit_stage_ns_sum: [u64; CommitStage::TIMED],
}

impl ClientStats {
    /// The counts since `base`, an earlier reading of the same process's
    /// counters: what a measured window did, without what came before it
    /// (a bench's load phase, say, whose waits would otherwise weigh in
    /// the window's mean GET_TS wait).
    pub fn since(&self, base: &ClientStats) -> ClientStats {
        ClientStats {
            ts_count: self.ts_count.saturating_sub(base.ts_count),
            read_ts_unwaited: self.read_ts_unwaited.saturating_sub(base.read_ts_unwaited),
            single_read_begins: self
                .single_read_begins
                .saturating_sub(base.single_read_begins),
            write_ts_unwaited: self
                .write_ts_unwaited
                .saturating_sub(base.write_ts_unwaited),
            write_ts_unwaited_uncertainty_ns_sum: self
                .write_ts_unwaited_uncertainty_ns_sum
                .saturating_sub(base.write_ts_unwaited_uncertainty_ns_sum),
            write_ts_sent_back: self
                .write_ts_sent_back
                .saturating_sub(base.write_ts_sent_back),
            uncertainty_ns_sum: self
                .uncertainty_ns_sum
                .saturating_sub(base.uncertainty_ns_sum),
            ts_wait_ns_sum: self.ts_wait_ns_sum.saturating_sub(base.ts_wait_ns_sum),
            ts_late_ns_sum: self.ts_late_ns_sum.saturating_sub(base.ts_late_ns_sum),
            ts_late_over_100us: self
                .ts_late_over_100us
                .saturating_sub(base.ts_late_over_100us),
            rpc_failures: self.rpc_failures.saturating_sub(base.rpc_failures),
            rpc_retries: self.rpc_retries.saturating_sub(base.rpc_retries),
            aborts_sent: self.aborts_sent.saturating_sub(base.aborts_sent),
            indeterminate: self.indeterminate.saturating_sub(base.indeterminate),
            truncations_dropped: self
                .truncations_dropped
                .saturating_sub(base.truncations_dropped),
            clock_rejected: self.clock_rejected.saturating_sub(base.clock_rejected),
            clock_refused: self.clock_refused.saturating_sub(base.clock_refused),
            clock_parked: self.clock_parked.saturating_sub(base.clock_parked),
            clock_expired: self.clock_expired.saturating_sub(base.clock_expired),
            clock_past_bound: self.clock_past_bound.saturating_sub(base.clock_past_bound),
            clock_not_ready: self.clock_not_ready.saturating_sub(base.clock_not_ready),
            aborts_too_old: self.aborts_too_old.saturating_sub(base.aborts_too_old),
            config_changes: self.config_changes.saturating_sub(base.config_changes),
            lease_requests: self.lease_requests.saturating_sub(base.lease_requests),
            lease_grants: self.lease_grants.saturating_sub(base.lease_grants),
            commit_stages_timed: self
                .commit_stages_timed
                .saturating_sub(base.commit_stages_timed),
            commit_stage_ns_sum: std::array::from_fn(|i| {
                self.commit_stage_ns_sum[i].saturating_sub(base.commit_stage_ns_sum[i])
            }),
        }
    }
}

#[derive(Debug)]
enum Op {
    /// Waiting for `read_ts` to be in the past.
    Begin,
    Idle,
    Get {
        key: Key,
    },
    /// `get_many`: one Read per key, all outstanding at once.
    GetMany {
        keys: Vec<Key>,
        /// Results by position; `None` until its reply is in.
        results: Vec<Option<Option<(Timestamp, Value)>>>,
        /// RPC id → position.
        rpcs: BTreeMap<u64, usize>,
    },
    Scan,
    Commit,
}

#[derive(Debug)]
struct OpenTxn {
    /// The engine; `None` until `read_ts` is ready.
    engine: Option<Transaction>,
    id: TxId,
    opts: TxnOptions,
    op: Op,
    call: Option<CallId>,
    /// Ids of the RPCs sent for this transaction (READ, SCAN and commit
    /// messages), so ending it finds them without scanning every RPC.
    /// Ids whose RPC already ended are skipped then.
    rpcs: Vec<u64>,
    /// The stage it is in and the local time it entered it, ns
    /// ([`ClientStats::commit_stage_ns_sum`]).
    stage: (CommitStage, u64),
    /// Local time spent in each stage so far, ns.
    stage_ns: [u64; CommitStage::TIMED],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Read(TxnHandle),
    Scan(TxnHandle),
    Commit(TxnHandle),
    /// COMMIT-PRIMARY acks after the report.
    PostCommit(TxId),
    Abort(TxId),
    Truncate,
    ClockSync {
        send_local_ns: u64,
    },
    Ping(CallId),
    Register(CallId),
    Execute(CallId),
    /// `CmRequest::GetConfig` after a [`Rejection::ConfigMismatch`] or a
    /// failure that may mean the configuration changed.
    GetConfig,
}

#[derive(Debug)]
struct Rpc {
    to: NodeId,
    req: Request,
    truncate: Vec<TxId>,
    deadline_ns: u64,
    attempt: u32,
    /// Refusals from a participant that had not yet applied the request's
    /// configuration, whose attempts were given back
    /// ([`ClientProcess::lagging_commit_participant`]): at most
    /// `rpc_attempts` of them, so the resends stay bounded.
    lag_refusals: u32,
    /// A granted LOCK's `LockDurable` came before its LOCK-REPLY (frames
    /// may arrive out of order): the RPC ends with the reply.
    durable_first: bool,
    /// A granted LOCK's LOCK-REPLY came, and the RPC waits for its
    /// `LockDurable`.
    answered_once: bool,
    purpose: Purpose,
}

#[derive(Clone, Copy, Debug)]
enum Wait {
    /// GET_TS for `read_ts` (`write = false`) or `write_ts`.
    Ts {
        txn: TxnHandle,
        ts: Timestamp,
        write: bool,
        /// A `write_ts` left to the nodes (`clock.writes_wait_at_server`):
        /// due at once, the engine sends it to be held.
        unwaited: bool,
        start_local_ns: u64,
    },
    Sleep(CallId),
    /// GET_TS found no usable clock sample (the last sync is older than
    /// `clock.max_sample_age_us`, or none yet): the transaction waits for
    /// the next accepted sync, until this wait's time at the latest, and
    /// then asks once more. A sync answered a few ms late (a busy
    /// machine, a lost datagram) then delays transactions instead of
    /// aborting them.
    Clock {
        txn: TxnHandle,
        write: bool,
    },
    /// A node answered [`meridian_wire::TxnResponse::NotHeld`] to a request held until
    /// `write_ts` passed: once this clock shows it past, the request
    /// (kept in `ClientProcess::held_back` under `seq`) goes again,
    /// unwrapped.
    Resend {
        txn: TxnHandle,
        seq: u64,
        write_ts: Timestamp,
    },
}

/// The coordinator process of one client (see the module essay).
#[derive(Debug)]
pub struct ClientProcess {
    config_id: ConfigId,
    cm: NodeId,
    /// The configuration's [`Configuration::clock_epoch`] (a CM restarted
    /// from disk took over the clock again when it changes).
    clock_epoch: u64,
    /// Members, to ask for the configuration in turn.
    members: Vec<NodeId>,
    /// The configuration is set by the node this coordinator is embedded
    /// in ([`ClientProcess::managed`]): never fetched, clock left alone.
    managed: bool,
    config_inflight: bool,
    next_config_ns: u64,
    ask_next: usize,
    refresh_ns: u64,
    map: Arc<RegionMap>,
    limits: Arc<Limits>,
    sync_interval_ns: u64,
    coordinator: u64,
    clock: ClockSync,
    rng: SmallRng,
    next_handle: u64,
    next_local: u64,
    next_rpc: u64,
    next_wait: u64,
    // The maps below hold their values boxed: an `OpenTxn` is about
    // 550 bytes and an `Rpc` about 230, and a B-tree insert or remove
    // shifts the values of a node (unboxed, those moves are a sizeable
    // share of a busy client's CPU).
    txns: BTreeMap<TxnHandle, Box<OpenTxn>>,
    finishing: BTreeMap<TxId, Box<Transaction>>,
    rpcs: BTreeMap<u64, Box<Rpc>>,
    deadlines: BTreeSet<(u64, u64)>,
    waits: BTreeMap<(u64, u64), Wait>,
    truncates: BTreeMap<NodeId, Vec<TxId>>,
    next_sync_ns: Option<u64>,
    sync_inflight: bool,
    /// When the frame being handled arrived, local ns, if the shell
    /// stamped it earlier than `now` ([`ClientProcess::on_message_received`]).
    received_at: Option<u64>,
    /// How long a GET_TS without a usable clock sample waits for one
    /// ([`Wait::Clock`]), ns: `clock.max_sample_age_us`.
    clock_park_ns: u64,
    /// [`Wait::Clock`] entries in `waits`.
    clock_parked: usize,
    /// `clock.reads_wait_at_server`, read once at creation (both sides of
    /// a cluster must agree, so it is fixed for the cluster's life).
    reads_wait_at_server: bool,
    /// `clock.writes_wait_at_server`, read once at creation.
    writes_wait_at_server: bool,
    /// `clock.lock_free_reads`, read once at creation: false turns every
    /// `TxnOptions::single_read` into a plain read-only transaction.
    lock_free_reads: bool,
    /// Requests a node would not hold until their `write_ts` passed
    /// ([`meridian_wire::TxnResponse::NotHeld`]), unwrapped, by [`Wait::Resend`] sequence:
    /// (destination, request). One per outstanding commit RPC at most.
    held_back: BTreeMap<u64, (NodeId, Request)>,
    next_flush_ns: u64,
    armed_ns: Option<u64>,
    closing: Option<CallId>,
    /// The lowest `local` of a transaction whose records may remain at
    /// some node (outcome unknown, ABORT or TRUNCATE given up): the low
    /// bound never passes it until recovery resolves it.
    unresolved_low: Option<u64>,
    /// The low bound last computed ([`ClientProcess::truncate_low`]),
    /// piggybacked with truncations.
    low: u64,
    effects: Vec<Effect<CallResult>>,
    stats: ClientStats,
    /// Lease timing; `None` for an embedded coordinator (its node's
    /// membership covers it) or after a clean close.
    lease_params: Option<LeaseParams>,
    /// This client's lease at the CM (FaRM §5.1: clients are coordinators,
    /// so the CM must learn of their failure); made at the first tick after
    /// the client has a coordinator id.
    lease: LeaseDesk,
}

impl ClientProcess {
    /// A client process with coordinator id `coordinator` (unique in the
    /// cluster, from the CM) under `config`. `seed` seeds its only source of
    /// randomness (retry jitter); the shell picks it.
    pub fn new(config: &Configuration, coordinator: u64, seed: u64) -> Self {
        ClientProcess {
            config_id: config.id(),
            cm: config.cm(),
            clock_epoch: config.clock_epoch,
            members: config.members(),
            managed: false,
            config_inflight: false,
            next_config_ns: 0,
            ask_next: 0,
            refresh_ns: config.lease.resend_ms.max(1) * 1_000_000,
            map: Arc::new(RegionMap::new(config)),
            limits: Arc::new(config.limits.clone()),
            sync_interval_ns: config.clock.sync_interval_us.max(100) * 1000,
            coordinator,
            clock: ClockSync::new(config.clock.drift_ppm)
                .with_max_sample_age(config.clock.max_sample_age_us * 1000),
            rng: SmallRng::seed_from_u64(seed),
            next_handle: 1,
            next_local: 0,
            next_rpc: 1,
            next_wait: 0,
            txns: BTreeMap::new(),
            finishing: BTreeMap::new(),
            rpcs: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            waits: BTreeMap::new(),
            truncates: BTreeMap::new(),
            next_sync_ns: None,
            sync_inflight: false,
            received_at: None,
            clock_park_ns: config.clock.max_sample_age_us * 1000,
            clock_parked: 0,
            reads_wait_at_server: config.clock.reads_wait_at_server,
            lock_free_reads: config.clock.lock_free_reads,
            writes_wait_at_server: config.clock.writes_wait_at_server,
            held_back: BTreeMap::new(),
            next_flush_ns: 0,
            armed_ns: None,
            closing: None,
            unresolved_low: None,
            low: 0,
            effects: Vec::new(),
            stats: ClientStats::default(),
            lease_params: (config.lease.lease_ms > 0)
                .then(|| LeaseParams::new(config.lease.lease_ms, config.clock.drift_ppm)),
            lease: LeaseDesk::new(LeaseRole::None, true),
        }
    }

    /// Synchronise with the clock master every `us` µs instead of
    /// `clock.sync_interval_us` (a node's embedded coordinator:
    /// `clock.node_sync_interval_us`).
    pub fn with_sync_interval_us(mut self, us: u64) -> Self {
        self.sync_interval_ns = us.max(100) * 1000;
        self
    }

    /// A coordinator embedded in a node: the node sets its configuration
    /// ([`ClientProcess::set_config`]) and manages its clock.
    pub fn managed(mut self) -> Self {
        self.managed = true;
        self.lease_params = None;
        self
    }

    /// The configuration id this coordinator sends with its requests.
    pub fn config_id(&self) -> ConfigId {
        self.config_id
    }

    /// Adopt configuration `config` (FaRM §5.2) if it is newer: requests
    /// carry its id and go to its primaries from now on. An unmanaged
    /// client whose clock master changed (another CM, or the same one
    /// restarted from disk: [`Configuration::clock_master_changed_from`])
    /// forgets the old master's samples and stays unsynchronised until the
    /// new one answers (FaRMv2 §4.3). Returns true if adopted.
    pub fn set_config(&mut self, now: u64, config: &Configuration) -> bool {
        if config.id() <= self.config_id {
            return false;
        }
        let failover = config.cm() != self.cm || config.clock_epoch != self.clock_epoch;
        self.config_id = config.id();
        self.cm = config.cm();
        self.clock_epoch = config.clock_epoch;
        self.members = config.members();
        self.map = Arc::new(RegionMap::new(config));
        self.lease.with(now, |r, now| {
            if let LeaseRole::Member(l) = r {
                l.reset(now, config.id(), config.cm());
            }
        });
        // A change of CM, or a CM restarted from disk that renewed its
        // configuration with a fresh clock (`Configuration::clock_epoch`):
        // either way the old clock's samples must go.
        if failover && !self.managed {
            if config.cm() == self.cm {
                meridian_bugs::mark!(
                    "a client fails its clock over at a new clock epoch of its CM"
                );
            }
            // Never hand out a timestamp below one handed out before.
            let ff = self.clock.fast_forward_value(now);
            self.clock.follow_new_master(ff, config.clock.drift_ppm);
            self.next_sync_ns = None;
            // A sync still in flight to the old master is abandoned: it
            // would hold off every sync with the new one until its RPC
            // timeout (10 s by default), and a late answer must not be taken as the new
            // master's time.
            let stale: Vec<u64> = self
                .rpcs
                .iter()
                .filter(|(_, r)| matches!(r.purpose, Purpose::ClockSync { .. }))
                .map(|(id, _)| *id)
                .collect();
            for id in stale {
                self.remove_rpc(id);
            }
            self.sync_inflight = false;
        }
        self.stats.config_changes += 1;
        true
    }

    /// True while the clock is disabled (FaRMv2 §4.3 fast-forward).
    pub fn clock_is_disabled(&self) -> bool {
        self.clock.is_disabled()
    }

    /// The clock engine (the embedding node drives FaRMv2 §4.3's
    /// fast-forward through it).
    pub fn clock(&self) -> &ClockSync {
        &self.clock
    }

    /// The clock, mutably.
    pub fn clock_mut(&mut self) -> &mut ClockSync {
        &mut self.clock
    }

    /// Ask for the configuration (from `hint`, else the next member in
    /// turn), at most one request at a time and one per `resend_ms`.
    fn refresh_config(&mut self, now: u64, hint: Option<NodeId>) {
        if self.managed || self.config_inflight || now < self.next_config_ns {
            return;
        }
        let to = match hint {
            Some(n) => n,
            None => {
                if self.members.is_empty() {
                    return;
                }
                self.ask_next = (self.ask_next + 1) % self.members.len();
                self.members[self.ask_next]
            }
        };
        self.config_inflight = true;
        self.next_config_ns = now + self.refresh_ns;
        self.send_rpc(
            now,
            to,
            Request::Cm(meridian_wire::CmRequest::GetConfig),
            Purpose::GetConfig,
        );
    }

    /// Make this process's clock the clock master's own clock (it then never
    /// synchronises): for the coordinator embedded in the clock master node.
    pub fn with_master_clock(mut self) -> Self {
        self.clock = ClockSync::master();
        self.next_sync_ns = None;
        self
    }

    /// The clock's interval at local time `now` (FaRMv2 §4.1 TIME()), or
    /// `None` before the first synchronisation.
    pub fn clock_time(&mut self, now: u64) -> Option<meridian_time::Interval> {
        self.clock.time(now).ok()
    }

    /// The clock's counters (synchronisations, rejections).
    pub fn clock_stats(&self) -> meridian_time::ClockStats {
        self.clock.stats()
    }

    /// This client's coordinator id (the `m` of its transaction ids).
    pub fn coordinator(&self) -> u64 {
        self.coordinator
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Counters.
    pub fn stats(&self) -> ClientStats {
        let (grants, requests) = self.lease.counts();
        ClientStats {
            lease_grants: grants,
            lease_requests: requests,
            ..self.stats
        }
    }

    /// The lease engine, for the shell's lease thread (FaRM §5.1).
    pub fn lease_desk(&self) -> LeaseDesk {
        self.lease.clone()
    }

    /// A lease message the shell's lease thread could not decide alone
    /// ([`LeaseOutcome::Forward`]): a grant for a newer configuration, so
    /// this client missed a reconfiguration.
    pub fn on_lease_forward(&mut self, now: u64, from: NodeId, m: LeaseMessage) {
        self.on_lease(now, from, &m);
        self.arm(now);
    }

    /// True once the clock has synchronised with the clock master.
    pub fn is_synchronised(&self) -> bool {
        self.clock.is_synchronised()
    }

    /// The clock's uncertainty at `now`, ns (`None` if not synchronised).
    pub fn uncertainty_ns(&mut self, now: u64) -> Option<u64> {
        self.clock.time(now).ok().map(|iv| iv.uncertainty_ns())
    }

    /// A single-read transaction's answered read: the `write_ts` of the
    /// newest version it saw ([`Transaction::observed_version`]); `None`
    /// for other transactions, before the answer, or an unknown handle.
    pub fn observed_version(&self, txn: TxnHandle) -> Option<Timestamp> {
        self.txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .and_then(Transaction::observed_version)
    }

    /// Transactions open (including those waiting for `read_ts`).
    pub fn open_txns(&self) -> usize {
        self.txns.len()
    }

    /// RPCs awaiting a reply.
    pub fn outstanding_rpcs(&self) -> usize {
        self.rpcs.len()
    }

    /// True when nothing but clock synchronisation is in progress: no open
    /// or finishing transaction, no queued TRUNCATE, no other RPC
    /// outstanding. (A node's embedded coordinator is quiet once its
    /// thin clients' transactions are fully truncated.)
    pub fn is_quiet(&self) -> bool {
        self.txns.is_empty()
            && self.finishing.is_empty()
            && self.queued_truncations() == 0
            && self
                .rpcs
                .values()
                .all(|r| matches!(r.purpose, Purpose::ClockSync { .. }))
    }

    /// What this process is waiting for, one line (to read a stuck
    /// simulation): open transactions, RPCs by purpose and destination,
    /// waits, queued truncations, configuration.
    pub fn describe_pending(&self) -> String {
        let rpcs: Vec<String> = self
            .rpcs
            .values()
            .filter(|r| !matches!(r.purpose, Purpose::ClockSync { .. }))
            .take(8)
            .map(|r| format!("{:?}->{}#{}", r.purpose, r.to, r.attempt))
            .collect();
        let stages: Vec<String> = self
            .txns
            .values()
            .take(4)
            .map(|t| format!("{:?}", t.engine.as_ref().map(|e| e.stage())))
            .collect();
        format!(
            "config {} cm {} synced {} (syncs {} rejected {} inconsistent {}) txns {} {stages:?} finishing {} rpcs [{}] waits {} (first {:?}) truncations {} closing {}",
            self.config_id.0,
            self.cm,
            self.clock.is_synchronised(),
            self.clock.stats().syncs,
            self.clock.stats().rejected,
            self.clock.stats().inconsistent,
            self.txns.len(),
            self.finishing.len(),
            rpcs.join(", "),
            self.waits.len(),
            self.waits.iter().next().map(|(w, kind)| {
                let what = match kind {
                    Wait::Ts { .. } => "GET_TS",
                    Wait::Sleep(_) => "sleep",
                    Wait::Clock { .. } => "clock",
                    Wait::Resend { .. } => "resend",
                };
                (what, w.0)
            }),
            self.queued_truncations(),
            self.closing.is_some()
        )
    }

    /// Take the effects produced so far, in order.
    pub fn drain_effects(&mut self) -> Vec<Effect<CallResult>> {
        std::mem::take(&mut self.effects)
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        assert_eq!(self.rpcs.len(), self.deadlines.len(), "deadline index");
        for (id, r) in &self.rpcs {
            assert!(
                self.deadlines.contains(&(r.deadline_ns, *id)),
                "deadline index"
            );
            match r.purpose {
                Purpose::Read(h) | Purpose::Scan(h) | Purpose::Commit(h) => {
                    assert!(
                        self.txns.contains_key(&h),
                        "RPC {id} for a finished transaction"
                    )
                }
                Purpose::PostCommit(tx) => {
                    assert!(
                        self.finishing.contains_key(&tx),
                        "ack RPC {id} without its transaction"
                    )
                }
                Purpose::Abort(_)
                | Purpose::Truncate
                | Purpose::ClockSync { .. }
                | Purpose::Ping(_)
                | Purpose::Register(_)
                | Purpose::Execute(_) => {}
                Purpose::GetConfig => assert!(self.config_inflight, "untracked GetConfig"),
            }
        }
        assert!(self.txns.len() <= self.limits.max_open_txns);
        for t in self.txns.values() {
            if let Some(e) = &t.engine {
                e.check_invariants();
            }
        }
    }
}

/// True for an answer meaning "this node cannot serve now" (no lease, or
/// the region is recovering): the configuration may have changed.
fn unavailable(r: &Response) -> bool {
    use meridian_wire::TxnResponse as T;
    let c = Err(meridian_wire::Conflict::Unavailable);
    match r {
        Response::Txn(T::Lock(x) | T::Validate(x)) => *x == c,
        Response::Txn(T::Read(Err(e))) | Response::Txn(T::Scan(Err(e))) => {
            *e == meridian_wire::Conflict::Unavailable
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn client_stats_since_an_earlier_reading_are_the_window_s_counts() {
        let base = ClientStats {
            ts_count: 10,
            ts_wait_ns_sum: 1_000,
            rpc_failures: 2,
            ..ClientStats::default()
        };
        let now = ClientStats {
            ts_count: 15,
            ts_wait_ns_sum: 1_600,
            rpc_failures: 2,
            lease_grants: 1,
            ..ClientStats::default()
        };
        let d = now.since(&base);
        assert_eq!(
            (d.ts_count, d.ts_wait_ns_sum, d.rpc_failures, d.lease_grants),
            (5, 600, 0, 1)
        );
        assert_eq!(base.since(&now), ClientStats::default());
    }

    /// A CM restarted from disk renews its configuration as CM again with
    /// a fresh clock (a new `clock_epoch`). A client adopting it must drop
    /// the samples of the master's previous incarnation and wait for a sync
    /// with the new one, as at a change of CM (FaRMv2 §4.3), rather than
    /// hand out timestamps from the old timeline. A renewal by a CM that
    /// did not restart keeps the clock.
    #[test]
    fn a_configuration_renewed_by_a_restarted_cm_resynchronises_the_clock() {
        let c = config();
        let mut p = synced_client(true);
        assert!(!p.clock_is_disabled(), "synchronised");
        let same = c.renewed();
        assert!(p.set_config(250_000, &same));
        assert!(!p.clock_is_disabled(), "the same clock master: kept");
        let mut renewed = same.renewed();
        renewed.clock_epoch = renewed.config_id;
        assert_eq!(renewed.cm(), c.cm(), "the same CM");
        assert!(p.set_config(300_000, &renewed));
        assert!(
            p.clock_is_disabled(),
            "the old master's samples are dropped until the new one answers"
        );
        p.tick(400_000);
        let sync = sent(&p.drain_effects());
        assert!(
            sync.iter()
                .any(|(to, _, r, _)| *to == renewed.cm() && matches!(r, Request::Clock(_))),
            "a sync goes to the master at once: {sync:?}"
        );
    }
}
