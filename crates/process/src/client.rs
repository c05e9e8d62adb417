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
    // shifts the values of a node (unboxed, those moves take about 7 % of
    // the bench client's CPU in TATP at 32 sessions).
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
            // Never hand out a timestamp below one handed out before.
            let ff = self.clock.fast_forward_value(now);
            self.clock.follow_new_master(ff, config.clock.drift_ppm);
            self.next_sync_ns = None;
            // A sync still in flight to the old master is abandoned: it
            // would hold off every sync with the new one until its RPC
            // timeout (10 s by default; found killing the CM of a real
            // cluster), and a late answer must not be taken as the new
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
        format!(
            "config {} cm {} synced {} (syncs {} rejected {} inconsistent {}) txns {} finishing {} rpcs [{}] waits {} (first {:?}) truncations {} closing {}",
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

    /// FaRM Table 1's low bound on non-truncated transaction ids: every
    /// transaction of this coordinator with a smaller `TxId::local` is
    /// finished, and its ABORT or TRUNCATE was acknowledged by every node
    /// it concerned. It stops below any transaction whose records may
    /// remain (unknown outcome, ABORT or TRUNCATE given up), for recovery
    /// to resolve. Monotone. O(open work); recomputed at each truncation
    /// flush and sent with truncations.
    pub fn truncate_low(&self) -> u64 {
        let mut low = self.next_local;
        let mut see = |tx: &TxId| low = low.min(tx.local);
        self.txns.values().for_each(|t| see(&t.id));
        self.finishing.keys().for_each(&mut see);
        self.truncates.values().flatten().for_each(&mut see);
        for r in self.rpcs.values() {
            r.truncate.iter().for_each(&mut see);
            if let Purpose::Abort(tx) | Purpose::PostCommit(tx) = &r.purpose {
                see(tx);
            }
        }
        low.min(self.unresolved_low.unwrap_or(u64::MAX))
    }

    /// TRUNCATEs queued and not yet sent.
    pub fn queued_truncations(&self) -> usize {
        self.truncates.values().map(Vec::len).sum()
    }

    /// Take the effects produced so far, in order.
    pub fn drain_effects(&mut self) -> Vec<Effect<CallResult>> {
        std::mem::take(&mut self.effects)
    }

    // ----- application calls -------------------------------------------

    /// Begin a transaction on coordinator thread `thread` (FaRM's `t`):
    /// `read_ts = GET_TS()`. Replies [`CallResult::Began`] once `read_ts` is
    /// in the past. A single read ([`TxnOptions::single_read`]) takes no
    /// `read_ts` while the clock is usable and is answered at once, with
    /// `read_ts` `Timestamp::ZERO`.
    pub fn begin(&mut self, now: u64, call: CallId, thread: u32, mut opts: TxnOptions) {
        // `clock.lock_free_reads = false`: a single read is an ordinary
        // read-only transaction (the promise to read once still holds).
        if opts.single_read && !self.lock_free_reads {
            opts = TxnOptions::read_only();
        }
        if self.closing.is_some() {
            return self.reply(call, CallResult::Failed(TxnError::Closed));
        }
        if self.txns.len() >= self.limits.max_open_txns {
            return self.reply(
                call,
                CallResult::Failed(TxnError::TooManyOps {
                    max: self.limits.max_open_txns,
                }),
            );
        }
        let handle = TxnHandle(self.next_handle);
        self.next_handle += 1;
        let id = TxId {
            config: self.config_id,
            coordinator: self.coordinator,
            thread,
            local: self.next_local,
        };
        self.next_local += 1;
        self.txns.insert(
            handle,
            Box::new(OpenTxn {
                engine: None,
                id,
                opts,
                op: Op::Begin,
                call: Some(call),
                rpcs: Vec::new(),
                stage: (CommitStage::Executing, now),
                stage_ns: [0; CommitStage::TIMED],
            }),
        );
        if opts.single_read && self.clock.time(now).is_ok() {
            // A single read needs no `read_ts`: its one read is answered
            // with the newest committed version at the primary, which is
            // the key's state at the global time it is served (FaRM §3's
            // lock-free read; `TxnRequest::ReadLatest`). It begins at once,
            // without GET_TS. Its `read_ts` is reported as
            // `Timestamp::ZERO`; where it sits in time is the version it
            // saw (`observed_version`). Only while the clock is usable,
            // though: a process that cannot synchronise (cut off from the
            // clock master, or clocks disabled by a failover) begins it
            // like any transaction, so it fails fast with
            // `ClockUnavailable` when cut off instead of waiting out an
            // RPC timeout to an unreachable primary (a 2-of-5 partition's
            // minority answered a lone GET only after 10 s otherwise).
            self.stats.single_read_begins += 1;
            let (map, limits) = (self.map.clone(), self.limits.clone());
            if let Some(t) = self.txns.get_mut(&handle) {
                t.engine = Some(Transaction::new(id, Timestamp::ZERO, opts, map, limits));
            }
            self.answer(
                handle,
                CallResult::Began {
                    txn: handle,
                    tx: id,
                    read_ts: Timestamp::ZERO,
                },
                false,
            );
            return;
        }
        if let Err(e) = self.start_ts_wait(now, handle, false, true) {
            self.ts_failed(now, handle, false, e);
        }
        self.arm(now);
    }

    /// Read `key` in transaction `txn`. Replies [`CallResult::Read`].
    pub fn get(&mut self, now: u64, call: CallId, txn: TxnHandle, key: &[u8]) {
        let step = match self.idle_engine(txn).and_then(|e| e.get(key)) {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        match step {
            GetStep::Local(v) => {
                self.reply(call, CallResult::Read(v.map(|v| (Timestamp::ZERO, v))))
            }
            GetStep::Remote(node, req) => {
                self.set_op(txn, call, Op::Get { key: key.to_vec() });
                self.send_rpc(now, node, req, Purpose::Read(txn));
            }
        }
        self.arm(now);
    }

    /// Read every key of `keys` in `txn` at once: one READ per key not
    /// written by the transaction, all outstanding together, so a
    /// transaction that knows its read set up front pays one round trip
    /// instead of one per key (the issue-7 "fewer round trips" lever; each
    /// read is the same FaRMv2 read at `read_ts` as [`ClientProcess::get`]).
    /// Replies [`CallResult::Reads`] once every reply is in; the first
    /// conflict aborts the transaction (the other replies are then
    /// ignored).
    pub fn get_many(&mut self, now: u64, call: CallId, txn: TxnHandle, keys: Vec<Key>) {
        let steps: Result<Vec<GetStep>, TxnError> = match self.idle_engine(txn) {
            Ok(e) => keys.iter().map(|k| e.get(k)).collect(),
            Err(e) => Err(e),
        };
        let steps = match steps {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        let mut results = vec![None; keys.len()];
        let mut remote = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                GetStep::Local(v) => results[i] = Some(v.map(|v| (Timestamp::ZERO, v))),
                GetStep::Remote(node, req) => remote.push((i, node, req)),
            }
        }
        if remote.is_empty() {
            let done = results.into_iter().map(|r| r.flatten()).collect();
            self.reply(call, CallResult::Reads(done));
            return;
        }
        let mut rpcs = BTreeMap::new();
        for (i, node, req) in remote {
            rpcs.insert(self.next_rpc, i);
            self.send_rpc(now, node, req, Purpose::Read(txn));
        }
        self.set_op(
            txn,
            call,
            Op::GetMany {
                keys,
                results,
                rpcs,
            },
        );
        self.arm(now);
    }

    /// Scan `[start, end)` for up to `limit` pairs in `txn`. Replies
    /// [`CallResult::Rows`].
    pub fn scan(
        &mut self,
        now: u64,
        call: CallId,
        txn: TxnHandle,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) {
        let step = match self
            .idle_engine(txn)
            .and_then(|e| e.scan(start, end, limit))
        {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        self.set_op(txn, call, Op::Scan);
        self.on_scan_step(now, txn, step);
        self.arm(now);
    }

    /// Buffer a write (no messages).
    ///
    /// Errors: as [`Transaction::put`], or `Finished` for an unknown handle.
    pub fn put(&mut self, txn: TxnHandle, key: Key, value: Value) -> Result<(), TxnError> {
        self.idle_engine(txn)?.put(key, value)
    }

    /// Buffer a delete (no messages).
    ///
    /// Errors: as [`Transaction::delete`].
    pub fn delete(&mut self, txn: TxnHandle, key: Key) -> Result<(), TxnError> {
        self.idle_engine(txn)?.delete(key)
    }

    /// The buffered writes of `txn` (for history recording).
    pub fn writes(&self, txn: TxnHandle) -> Option<&BTreeMap<Key, Option<Value>>> {
        self.txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .map(|e| e.writes())
    }

    /// Abort `txn` during execution (it holds no locks then).
    pub fn abort(&mut self, txn: TxnHandle) {
        if let Some(t) = self.txns.get_mut(&txn) {
            if matches!(t.op, Op::Idle) {
                if let Some(e) = t.engine.as_mut() {
                    e.abort();
                }
                self.txns.remove(&txn);
            }
        }
    }

    /// Forget read-only transaction `txn`, which the application committed
    /// without a call: every read was answered and nothing was written, so
    /// it committed at `read_ts` with nothing to send (FaRMv2 §4.2;
    /// [`Transaction::commit`] does the same). A transaction already gone
    /// (ended by the process meanwhile) is ignored.
    ///
    /// Panics (release builds too) if `txn` buffered a write or has a call
    /// in progress: the client library's bookkeeping is then wrong, and
    /// forgetting the transaction would lose its writes.
    pub fn finish_read_only(&mut self, txn: TxnHandle) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        assert!(
            matches!(t.op, Op::Idle) && t.engine.as_ref().is_none_or(|e| e.is_read_only()),
            "{} committed as read-only, but it wrote or is busy",
            t.id
        );
        self.end_txn(txn);
    }

    /// Commit `txn`. Replies [`CallResult::Committed`] on the first
    /// COMMIT-PRIMARY ack (at once for read-only transactions), or
    /// `Failed(Aborted | Indeterminate | …)`.
    pub fn commit(&mut self, now: u64, call: CallId, txn: TxnHandle) {
        let step = match self.idle_engine(txn).and_then(|e| e.commit()) {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        self.set_op(txn, call, Op::Commit);
        self.drive_commit(now, txn, step);
        self.arm(now);
    }

    /// Reply [`CallResult::Slept`] after `duration_ns` of local time.
    pub fn sleep(&mut self, now: u64, call: CallId, duration_ns: u64) {
        self.add_wait(now.saturating_add(duration_ns), Wait::Sleep(call));
        self.arm(now);
    }

    /// The retry helper's back-off before attempt `attempt` (1-based):
    /// exponential from `retry_backoff_us` to `retry_backoff_max_us`, half
    /// fixed and half jitter from this process's seeded RNG. Replies
    /// [`CallResult::Slept`].
    pub fn backoff(&mut self, now: u64, call: CallId, attempt: u32) {
        let rng = &mut self.rng;
        let us = self
            .limits
            .retry_backoff_us(attempt, |exp| rng.gen_range(0..exp));
        self.sleep(now, call, us * 1000);
    }

    /// Null RPC to `node` (for the RPC-rate baseline). Replies
    /// [`CallResult::Pong`].
    pub fn ping(&mut self, now: u64, call: CallId, node: NodeId) {
        self.send_rpc(
            now,
            node,
            Request::Admin(AdminRequest::Ping),
            Purpose::Ping(call),
        );
        self.arm(now);
    }

    /// Ask node `node` to run `ops` as one transaction for us (the thin
    /// client's path: the node's embedded coordinator runs it and retries
    /// its aborts). Replies [`CallResult::Executed`], or
    /// [`CallResult::ExecuteLost`] if no answer comes within
    /// `rpc_timeout_ms × rpc_attempts`: Execute is sent once, never retried.
    pub fn execute(
        &mut self,
        now: u64,
        call: CallId,
        node: NodeId,
        ops: Vec<meridian_wire::ClientOp>,
    ) {
        // The node runs a whole transaction, retries included: allow it the
        // budget of `rpc_attempts` round trips.
        let timeout_ns =
            self.limits.rpc_timeout_ms * 1_000_000 * u64::from(self.limits.rpc_attempts.max(1));
        self.send_rpc_within(
            now,
            node,
            meridian_wire::ThinRequest::Execute { ops }.into(),
            Purpose::Execute(call),
            timeout_ns,
        );
        self.arm(now);
    }

    /// Ask the CM for a coordinator id unique in the cluster (FaRM §4's
    /// `m`; unique across CM restarts) and adopt it.
    /// Replies [`CallResult::Registered`]. Begin no transaction before it
    /// is answered; the RPC is retried up to `rpc_attempts` times.
    pub fn register(&mut self, now: u64, call: CallId) {
        self.send_rpc(
            now,
            self.cm,
            Request::Cm(CmRequest::RegisterClient),
            Purpose::Register(call),
        );
        self.arm(now);
    }

    /// Stop taking new transactions, flush every queued TRUNCATE, and reply
    /// [`CallResult::Closed`] once no truncation, abort or commit ack is
    /// outstanding (truncations are not dropped with the client).
    pub fn close(&mut self, now: u64, call: CallId) {
        self.closing = Some(call);
        self.flush_truncates(now);
        self.maybe_closed();
        self.arm(now);
    }

    // ----- inputs from the network and time ------------------------------

    /// A frame from node `from`.
    /// [`ClientProcess::on_message`] for a frame the shell stamped on
    /// arrival at `received_local_ns` (≤ `now`), before it could hand it to
    /// the process: a clock sync's sample then ends at the arrival, not at
    /// `now` (FaRMv2 §4.1: the master's time was read before the reply
    /// arrived, so the bounds hold either way; the earlier stamp only
    /// makes the lower bound tighter). A stamp after `now` is taken as
    /// `now`.
    pub fn on_message_received(
        &mut self,
        now: u64,
        received_local_ns: u64,
        from: NodeId,
        frame: Frame,
    ) {
        self.received_at = Some(received_local_ns.min(now));
        self.on_message(now, from, frame);
        self.received_at = None;
    }

    pub fn on_message(&mut self, now: u64, from: NodeId, frame: Frame) {
        match frame {
            Frame::Response { id, resp } => self.on_response(now, from, id, resp),
            Frame::OneWay {
                req: Request::Lease(m),
                ..
            } => self.on_lease(now, from, &m),
            _ => {}
        }
        self.maybe_closed();
        self.arm(now);
    }

    /// End every wait whose time has come, oldest first. Called by every
    /// input (a tick, a message, an application call; through [`Self::arm`]):
    /// under load an input arrives every few microseconds, so most
    /// uncertainty waits end at the first input after their deadline
    /// instead of at the ticker's wake-up, which comes later on a busy
    /// machine.
    fn end_due_waits(&mut self, now: u64) {
        while let Some((&(ready, seq), _)) = self.waits.iter().next() {
            if ready > now {
                break;
            }
            if let Some(w) = self.waits.remove(&(ready, seq)) {
                self.wait_done(now, ready, w);
            }
        }
    }

    /// The local time the earliest wait (an uncertainty wait, a parked
    /// clock wait, a sleep) ends at, if any. The shell re-reads its clock
    /// against it before it lets go of the process, so a wait that came
    /// due while an input was being processed ends there and then, not
    /// at the ticker's next wake-up.
    pub fn next_wait_ns(&self) -> Option<u64> {
        self.waits.keys().next().map(|&(ready, _)| ready)
    }

    /// End every wait due at `now` and route nothing else: the cheap part
    /// of [`Self::tick`], for a shell that finds a wait due between inputs.
    pub fn end_waits_due(&mut self, now: u64) {
        self.end_due_waits(now);
        self.maybe_closed();
        self.arm(now);
    }

    /// The connection to `node` is lost: every RPC to it fails now.
    pub fn on_disconnect(&mut self, now: u64, node: NodeId) {
        let ids: Vec<u64> = self
            .rpcs
            .iter()
            .filter(|(_, r)| r.to == node)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.rpc_failed(now, id, "connection lost");
        }
        self.maybe_closed();
        self.arm(now);
    }

    /// Time passes: expire RPCs, end waits, sync the clock, flush truncations.
    pub fn tick(&mut self, now: u64) {
        self.armed_ns = None;
        while let Some(&(deadline, id)) = self.deadlines.iter().next() {
            if deadline > now {
                break;
            }
            self.rpc_failed(now, id, "timed out");
        }
        self.end_due_waits(now);
        let sync_due = self.next_sync_ns.is_none_or(|t| now >= t);
        if sync_due && !self.sync_inflight && !self.clock.is_master() {
            self.next_sync_ns = Some(now + self.sync_interval_ns);
            self.sync_inflight = true;
            // A reply later than half the sample age is hardly usable
            // (its round trip is its uncertainty), and a lost datagram
            // must not hold the next sync back for `rpc_timeout_ms`.
            let timeout_ns = (self.clock_park_ns / 2).max(2 * self.sync_interval_ns);
            self.send_rpc_within(
                now,
                self.cm,
                Request::Clock(ClockRequest::Sync),
                Purpose::ClockSync { send_local_ns: now },
                timeout_ns,
            );
        }
        if now >= self.next_flush_ns {
            self.flush_truncates(now);
            self.next_flush_ns = now + self.limits.truncate_flush_us * 1000;
        }
        self.lease_tick(now);
        self.maybe_closed();
        self.arm(now);
    }

    /// FaRM §5.1 for a client: renew every `lease / 5` with the CM. A CM
    /// that has not granted for a lease may have been replaced: ask for
    /// the configuration. (The client does not stop when its lease lapses:
    /// its requests carry its configuration id, and the configuration that
    /// recovers its transactions refuses them.)
    fn lease_tick(&mut self, now: u64) {
        if self.coordinator != 0 && self.closing.is_none() {
            if let Some(p) = self.lease_params {
                let (me, config, cm) = (
                    LeaseHolder::Client(self.coordinator),
                    self.config_id,
                    self.cm,
                );
                self.lease.with(now, |r, now| {
                    if let LeaseRole::None = r {
                        *r = LeaseRole::Member(LeaseClient::new(p, me, config, cm, now));
                    }
                });
            }
        }
        let suspected = self.lease.with(now, |r, now| match r {
            LeaseRole::Member(l) => l.cm_suspected(now),
            _ => false,
        });
        if let Some((cm, m)) = self.lease.renew(now) {
            self.send_oneway(cm, Request::Lease(m));
            if suspected {
                self.refresh_config(now, None);
            }
        }
    }

    /// A lease grant from the CM; one for a newer configuration means this
    /// client missed a reconfiguration.
    fn on_lease(&mut self, now: u64, from: NodeId, m: &LeaseMessage) {
        if let LeaseMessage::Grant { config, .. } = m {
            if *config > self.config_id {
                self.refresh_config(now, Some(from));
                return;
            }
        }
        // The CM holds no lease at a client: no GrantAck. A grant for a
        // newer configuration than the lease's comes back as Forward.
        if let LeaseOutcome::Forward = self.lease.on_message(now, LeaseFrom::Node(from), m) {
            self.refresh_config(now, Some(from));
        }
    }

    fn send_oneway(&mut self, to: NodeId, req: Request) {
        self.effects.push(Effect::Send {
            to,
            frame: Frame::OneWay {
                config: self.config_id,
                truncate: Default::default(),
                req,
            },
        });
    }

    // ----- internals -----------------------------------------------------

    fn reply(&mut self, call: CallId, result: CallResult) {
        if let CallResult::Failed(TxnError::Aborted(
            AbortReason::Read(Conflict::TooOld)
            | AbortReason::Lock(Conflict::TooOld)
            | AbortReason::Validate(Conflict::TooOld),
        )) = &result
        {
            self.stats.aborts_too_old += 1;
        }
        self.effects.push(Effect::Reply { call, result });
    }

    /// One reply of a `get_many`: record it; answer once all are in.
    fn on_get_many_reply(
        &mut self,
        now: u64,
        txn: TxnHandle,
        from: NodeId,
        id: u64,
        resp: Response,
    ) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        let (Op::GetMany { keys, rpcs, .. }, Some(engine)) = (&mut t.op, t.engine.as_mut()) else {
            return;
        };
        let Some(i) = rpcs.remove(&id) else {
            return;
        };
        let Some(key) = keys.get(i) else {
            return;
        };
        match engine.on_read_reply(from, key, resp) {
            Ok(v) => {
                let done = match &mut t.op {
                    Op::GetMany { results, rpcs, .. } => {
                        if let Some(slot) = results.get_mut(i) {
                            *slot = Some(v.map(|v| (v.version, v.value)));
                        }
                        rpcs.is_empty().then(|| std::mem::take(results))
                    }
                    _ => None,
                };
                if let Some(results) = done {
                    let all = results.into_iter().map(|r| r.flatten()).collect();
                    self.answer(txn, CallResult::Reads(all), false);
                }
            }
            Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
            Err(e) => self.abandon(now, txn, e),
        }
    }

    fn idle_engine(&mut self, txn: TxnHandle) -> Result<&mut Transaction, TxnError> {
        match self.txns.get_mut(&txn).map(|t| &mut **t) {
            Some(OpenTxn {
                engine: Some(e),
                op: Op::Idle,
                ..
            }) => Ok(e),
            _ => Err(TxnError::Finished),
        }
    }

    fn set_op(&mut self, txn: TxnHandle, call: CallId, op: Op) {
        if let Some(t) = self.txns.get_mut(&txn) {
            t.op = op;
            t.call = Some(call);
        }
    }

    /// A call on `txn` failed before any message: the transaction is over
    /// if the engine says so (an abort), otherwise it stays usable.
    fn fail_call(&mut self, txn: TxnHandle, call: CallId, e: TxnError) {
        let over = self
            .txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .is_none_or(|e| e.is_finished());
        if over {
            self.txns.remove(&txn);
        }
        self.reply(call, CallResult::Failed(e));
    }

    /// Answer the call in progress on `txn` and return it to idle, or end it.
    fn answer(&mut self, txn: TxnHandle, result: CallResult, end: bool) {
        let call = match self.txns.get_mut(&txn) {
            Some(t) => {
                t.op = Op::Idle;
                t.call.take()
            }
            None => None,
        };
        if end {
            self.end_txn(txn);
        }
        if let Some(call) = call {
            self.reply(call, result);
        }
    }

    /// Forget `txn` and every RPC still outstanding for it (late replies are
    /// then ignored).
    fn end_txn(&mut self, txn: TxnHandle) {
        self.end_txn_keep_call(txn);
        self.txns.remove(&txn);
    }

    /// GET_TS for `txn` (FaRMv2 Algorithm 1): a [`Wait::Ts`] until the
    /// uncertainty has passed. Without a usable clock sample the
    /// transaction first waits for one ([`Wait::Clock`], once: `park`).
    ///
    /// Errors: [`TxnError::ClockUnavailable`] (counted by cause in
    /// [`ClientStats`]).
    fn start_ts_wait(
        &mut self,
        now: u64,
        txn: TxnHandle,
        write: bool,
        park: bool,
    ) -> Result<(), TxnError> {
        let ticket = match self.clock.get_ts(now) {
            Ok(t) => t,
            Err(
                ClockError::Expired { .. }
                | ClockError::NotSynchronised
                | ClockError::StaleLocalTime { .. },
            ) if park && !self.clock.is_master() && self.clock_park_ns > 0 => {
                self.stats.clock_parked += 1;
                self.clock_parked += 1;
                self.add_wait(
                    now.saturating_add(self.clock_park_ns),
                    Wait::Clock { txn, write },
                );
                // Ask now if no sync is on its way.
                if !self.sync_inflight {
                    self.next_sync_ns = Some(now);
                }
                return Ok(());
            }
            Err(e) => {
                match e {
                    ClockError::Expired { .. } => self.stats.clock_expired += 1,
                    ClockError::PastTimeBound { .. } => self.stats.clock_past_bound += 1,
                    ClockError::NotSynchronised
                    | ClockError::StaleLocalTime { .. }
                    | ClockError::Inconsistent { .. }
                    | ClockError::Disabled => self.stats.clock_not_ready += 1,
                }
                return Err(TxnError::ClockUnavailable);
            }
        };
        // `clock.reads_wait_at_server`: the nodes hold each read until
        // `read_ts` has passed, so the coordinator hands `read_ts` out now.
        // Its clock may not yet show `read_ts` as past, and a tighter
        // sample may have lowered its upper bound since, so a `write_ts`
        // is raised above `read_ts` if need be (FaRMv2 needs
        // `write_ts > read_ts`; a larger `write_ts` is as safe, its wait
        // below covers it).
        let mut ticket = ticket;
        if write && self.reads_wait_at_server {
            let floor = self
                .txns
                .get(&txn)
                .and_then(|t| t.engine.as_ref())
                .map(|e| Timestamp(e.read_ts().0 + 1));
            if let Some(floor) = floor.filter(|f| *f > ticket.ts) {
                match self.clock.passed_at(now, floor) {
                    Ok(ready) => {
                        ticket.ts = floor;
                        ticket.ready_local_ns = ready;
                    }
                    Err(_) => {
                        self.stats.clock_not_ready += 1;
                        return Err(TxnError::ClockUnavailable);
                    }
                }
            }
        }
        let unwaited = write
            && self.writes_wait_at_server
            && self
                .txns
                .get(&txn)
                .and_then(|t| t.engine.as_ref())
                .is_some_and(|e| e.may_wait_at_server());
        let at = if !write && self.reads_wait_at_server {
            self.stats.read_ts_unwaited += 1;
            now
        } else if unwaited {
            self.stats.write_ts_unwaited += 1;
            self.stats.write_ts_unwaited_uncertainty_ns_sum += ticket.uncertainty_ns;
            now
        } else {
            self.stats.ts_count += 1;
            self.stats.uncertainty_ns_sum += ticket.uncertainty_ns;
            ticket.ready_local_ns
        };
        self.add_wait(
            at,
            Wait::Ts {
                txn,
                ts: ticket.ts,
                write,
                unwaited,
                start_local_ns: now,
            },
        );
        Ok(())
    }

    /// GET_TS failed for `txn`: a Begin fails (nothing was read), a
    /// commit is abandoned before its commit point (its locks released;
    /// retryable, as FaRM does for any failure before it).
    fn ts_failed(&mut self, now: u64, txn: TxnHandle, write: bool, e: TxnError) {
        if write {
            self.abandon(now, txn, TxnError::Aborted(AbortReason::ClockUnavailable));
        } else if let Some(t) = self.txns.remove(&txn) {
            if let Some(call) = t.call {
                self.reply(call, CallResult::Failed(e));
            }
        }
    }

    /// A clock sample was accepted: every transaction waiting for one
    /// asks for its timestamp now.
    fn unpark_clock_waits(&mut self, now: u64) {
        if self.clock_parked == 0 {
            return;
        }
        let parked: Vec<(u64, u64)> = self
            .waits
            .iter()
            .filter(|(_, w)| matches!(w, Wait::Clock { .. }))
            .map(|(k, _)| *k)
            .collect();
        for key in parked {
            if let Some(w) = self.waits.remove(&key) {
                self.waits.insert((now, key.1), w);
            }
        }
        self.end_due_waits(now);
    }

    fn add_wait(&mut self, at: u64, w: Wait) {
        self.next_wait += 1;
        self.waits.insert((at, self.next_wait), w);
    }

    /// `w`, due at local time `ready`, ends at `now`.
    fn wait_done(&mut self, now: u64, ready: u64, w: Wait) {
        match w {
            Wait::Resend { txn, seq, write_ts } => self.resend_when_passed(now, txn, seq, write_ts),
            Wait::Sleep(call) => self.reply(call, CallResult::Slept),
            Wait::Clock { txn, write } => {
                self.clock_parked = self.clock_parked.saturating_sub(1);
                if !self.txns.contains_key(&txn) {
                    return;
                }
                if let Err(e) = self.start_ts_wait(now, txn, write, false) {
                    self.ts_failed(now, txn, write, e);
                }
            }
            Wait::Ts {
                txn,
                ts,
                write,
                unwaited,
                start_local_ns,
            } => {
                if (write && !unwaited) || (!write && !self.reads_wait_at_server) {
                    self.stats.ts_wait_ns_sum += now.saturating_sub(start_local_ns);
                    let late = now.saturating_sub(ready);
                    self.stats.ts_late_ns_sum += late;
                    if late > 100_000 {
                        self.stats.ts_late_over_100us += 1;
                    }
                }
                if write {
                    let step = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                        Some(e) if unwaited => e.on_write_ts_unwaited(ts),
                        Some(e) => e.on_write_ts(ts),
                        None => return,
                    };
                    match step {
                        Ok(s) => self.drive_commit(now, txn, s),
                        Err(e) => self.abandon(now, txn, e),
                    }
                    return;
                }
                let map = self.map.clone();
                let limits = self.limits.clone();
                let Some(t) = self.txns.get_mut(&txn) else {
                    return;
                };
                t.engine = Some(Transaction::new(t.id, ts, t.opts, map, limits));
                let tx = t.id;
                self.answer(
                    txn,
                    CallResult::Began {
                        txn,
                        tx,
                        read_ts: ts,
                    },
                    false,
                );
            }
        }
    }

    fn send_rpc(&mut self, now: u64, to: NodeId, req: impl Into<Request>, purpose: Purpose) {
        let timeout_ns = self.limits.rpc_timeout_ms * 1_000_000;
        self.send_rpc_within(now, to, req.into(), purpose, timeout_ns)
    }

    fn send_rpc_within(
        &mut self,
        now: u64,
        to: NodeId,
        req: Request,
        purpose: Purpose,
        timeout_ns: u64,
    ) {
        let id = self.next_rpc;
        self.next_rpc += 1;
        // Clock syncs carry no truncations: the master's lease thread
        // answers them without the process (`node::answer_clock_sync`).
        let truncate = match req {
            Request::Clock(_) => Vec::new(),
            _ => self.truncates.remove(&to).unwrap_or_default(),
        };
        let deadline_ns = now + timeout_ns;
        // The low bound rides with truncations (FaRM Table 1).
        let low = (self.low > 0 && (!truncate.is_empty() || purpose == Purpose::Truncate))
            .then_some(meridian_wire::TruncateLow {
                coordinator: self.coordinator,
                local: self.low,
            });
        self.effects.push(Effect::Send {
            to,
            frame: Frame::Request {
                id,
                config: self.config_id,
                truncate: meridian_wire::Truncation {
                    txs: truncate.clone(),
                    low,
                },
                req: req.clone(),
            },
        });
        self.deadlines.insert((deadline_ns, id));
        self.rpcs.insert(
            id,
            Box::new(Rpc {
                to,
                req,
                truncate,
                deadline_ns,
                attempt: 1,
                lag_refusals: 0,
                purpose,
            }),
        );
        if let Purpose::Read(h) | Purpose::Scan(h) | Purpose::Commit(h) = purpose {
            if let Some(t) = self.txns.get_mut(&h) {
                t.rpcs.push(id);
            }
        }
    }

    fn remove_rpc(&mut self, id: u64) -> Option<Box<Rpc>> {
        let r = self.rpcs.remove(&id)?;
        self.deadlines.remove(&(r.deadline_ns, id));
        Some(r)
    }

    /// True if `resp` refuses a COMMIT-BACKUP or COMMIT-PRIMARY of a
    /// transaction past its commit decision because the participant has
    /// not yet applied the transaction's configuration (`current < sent`).
    ///
    /// Such a node is a member of that configuration that missed its
    /// NEW-CONFIG so far (a one-way partition): members apply a
    /// configuration on NEW-CONFIG, before it commits (FaRM §5.2 step 5),
    /// so the others already locked and logged the transaction in it. The
    /// configuration cannot commit without this node's NEW-CONFIG-ACK, so
    /// the node either applies it (the resent request then succeeds) or a
    /// later configuration removes it, and that one's recovery (FaRM §5.3)
    /// decides the transaction. Giving up instead (treating the refusal
    /// as a protocol error, so the transaction ends indeterminate) would
    /// leave its LOCK records holding their objects for good once the
    /// configuration commits with the node: nothing recovers a transaction
    /// of the current configuration whose coordinator is alive, and every
    /// later writer of the key would abort. The safety of the commit does
    /// not depend on this: the request is sent again as it was, and the
    /// commit is reported only on a COMMIT-PRIMARY ack.
    fn lagging_commit_participant(&self, id: u64, resp: &Response) -> bool {
        let Response::Rejected(Rejection::ConfigMismatch { sent, current }) = resp else {
            return false;
        };
        if current >= sent {
            return false;
        }
        let Some(Purpose::Commit(txn)) = self.rpcs.get(&id).map(|r| r.purpose) else {
            return false;
        };
        self.txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .is_some_and(|e| e.is_decided())
    }

    /// Give up on the COMMIT-PRIMARY acks of reported transaction `tx`:
    /// forget it together with every ack RPC still outstanding for it
    /// (a rejected ack must not leave its siblings behind).
    /// Its records wait for recovery (FaRM §5.3).
    /// `tx`'s records may remain at some node: hold the low bound below it.
    fn unresolved(&mut self, tx: TxId) {
        let l = self.unresolved_low.get_or_insert(tx.local);
        *l = (*l).min(tx.local);
    }

    fn drop_finishing(&mut self, tx: TxId) {
        self.unresolved(tx);
        self.finishing.remove(&tx);
        let ids: Vec<u64> = self
            .rpcs
            .iter()
            .filter(|(_, r)| r.purpose == Purpose::PostCommit(tx))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.remove_rpc(id);
        }
    }

    /// RPC `id` was answered [`meridian_wire::TxnResponse::NotHeld`]: if it is a commit's
    /// request held until its `write_ts` passed, wait `write_ts` out on
    /// this clock and send it again unwrapped (the node did nothing with
    /// it; `clock.writes_wait_at_server`). False for any other RPC, whose
    /// answer then goes its usual way (a protocol error).
    fn held_back_at(&mut self, now: u64, id: u64) -> bool {
        let held = self.rpcs.get(&id).is_some_and(|r| {
            matches!(
                (&r.purpose, &r.req),
                (
                    Purpose::Commit(_),
                    Request::Txn(TxnRequest::AfterWriteTs { .. })
                )
            )
        });
        let Some(rpc) = held.then(|| self.remove_rpc(id)).flatten() else {
            return false;
        };
        let (Purpose::Commit(txn), Request::Txn(TxnRequest::AfterWriteTs { write_ts, req })) =
            (rpc.purpose, rpc.req)
        else {
            return false;
        };
        self.stats.write_ts_sent_back += 1;
        self.next_wait += 1;
        let seq = self.next_wait;
        self.held_back.insert(seq, (rpc.to, Request::Txn(*req)));
        self.resend_when_passed(now, txn, seq, write_ts);
        true
    }

    /// Send held-back request `seq` of `txn` once this clock shows
    /// `write_ts` past. Without a usable clock, a VALIDATE's transaction
    /// is abandoned (before its commit point, as a failed GET_TS is), and
    /// a COMMIT-BACKUP looks again after `clock_park_ns` with a sync asked
    /// for: it may not be given up, since the transaction may be committed
    /// by its other backups' records (FaRM §5.3).
    fn resend_when_passed(&mut self, now: u64, txn: TxnHandle, seq: u64, write_ts: Timestamp) {
        if !self.txns.contains_key(&txn) {
            self.held_back.remove(&seq);
            return;
        }
        let at = match self.clock.passed_at(now, write_ts) {
            Ok(at) if at <= now => {
                if let Some((to, req)) = self.held_back.remove(&seq) {
                    self.send_rpc(now, to, req, Purpose::Commit(txn));
                }
                return;
            }
            Ok(at) => at,
            Err(_) => {
                let validate = matches!(
                    self.held_back.get(&seq),
                    Some((_, Request::Txn(TxnRequest::Validate { .. })))
                );
                if validate {
                    self.held_back.remove(&seq);
                    self.stats.clock_not_ready += 1;
                    self.abandon(now, txn, TxnError::Aborted(AbortReason::ClockUnavailable));
                    return;
                }
                if !self.sync_inflight {
                    self.next_sync_ns = Some(now);
                }
                now.saturating_add(self.clock_park_ns)
            }
        };
        self.add_wait(at, Wait::Resend { txn, seq, write_ts });
    }

    /// Send an idempotent RPC again, or report that the attempts are spent.
    fn retry(&mut self, now: u64, rpc: Box<Rpc>) -> bool {
        if rpc.attempt >= self.limits.rpc_attempts {
            return false;
        }
        self.stats.rpc_retries += 1;
        // The lag refusals carry over too: they bound the request's
        // resends, not one resend's, so a target stuck in an older
        // configuration is not resent to forever.
        let (attempt, lag_refusals) = (rpc.attempt + 1, rpc.lag_refusals);
        self.send_rpc(now, rpc.to, rpc.req, rpc.purpose);
        if let Some(r) = self.rpcs.get_mut(&(self.next_rpc - 1)) {
            r.attempt = attempt;
            r.lag_refusals = lag_refusals;
        }
        true
    }

    fn queue_truncate(&mut self, tx: TxId, nodes: &[NodeId]) {
        for n in nodes {
            self.truncates.entry(*n).or_default().push(tx);
        }
    }

    fn flush_truncates(&mut self, now: u64) {
        self.low = self.truncate_low();
        let pending: Vec<(NodeId, Vec<TxId>)> = std::mem::take(&mut self.truncates)
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect();
        for (n, txs) in pending {
            // The ids ride in the frame's truncate field, so a lost frame
            // re-queues them (see rpc_failed).
            self.truncates.insert(n, txs);
            self.send_rpc(
                now,
                n,
                Request::Txn(TxnRequest::Truncate { txs: Vec::new() }),
                Purpose::Truncate,
            );
        }
    }

    fn rpc_failed(&mut self, now: u64, id: u64, why: &str) {
        let Some(rpc) = self.remove_rpc(id) else {
            return;
        };
        self.stats.rpc_failures += 1;
        // Piggybacked truncations may not have arrived: queue them again
        // (TRUNCATE is idempotent).
        if !rpc.truncate.is_empty() {
            self.truncates
                .entry(rpc.to)
                .or_default()
                .extend(rpc.truncate.iter().copied());
        }
        let err = TxnError::Transport(format!("{} {why}", rpc.to));
        if rpc.purpose != Purpose::GetConfig {
            // The node may be gone: the configuration may have changed.
            self.refresh_config(now, None);
        }
        match rpc.purpose {
            Purpose::Read(txn) | Purpose::Scan(txn) => self.abandon(now, txn, err),
            Purpose::Commit(txn) => {
                let decided = self
                    .txns
                    .get(&txn)
                    .and_then(|t| t.engine.as_ref())
                    .is_some_and(|e| e.is_decided());
                if !decided {
                    return self.abandon(now, txn, err);
                }
                let (tx, write_ts) = self
                    .txns
                    .get(&txn)
                    .map(|t| (Some(t.id), t.engine.as_ref().and_then(|e| e.write_ts())))
                    .unwrap_or((None, None));
                if !self.retry(now, rpc) {
                    self.stats.indeterminate += 1;
                    let tx = tx.unwrap_or(TxId {
                        config: self.config_id,
                        coordinator: self.coordinator,
                        thread: 0,
                        local: 0,
                    });
                    self.unresolved(tx);
                    self.answer(
                        txn,
                        CallResult::Failed(TxnError::Indeterminate {
                            tx,
                            write_ts,
                            detail: err.to_string(),
                        }),
                        true,
                    );
                }
            }
            Purpose::PostCommit(tx) => {
                if !self.retry(now, rpc) {
                    // Reported already; its records wait for recovery.
                    self.drop_finishing(tx);
                }
            }
            Purpose::Abort(tx) => {
                if !self.retry(now, rpc) {
                    self.unresolved(tx);
                }
            }
            Purpose::Truncate => {
                // The ids were re-queued above and ride on the retry. Give up
                // on a node that never answers, to stay bounded.
                let to = rpc.to;
                if !self.retry(now, rpc) {
                    if let Some(q) = self.truncates.remove(&to) {
                        self.stats.truncations_dropped += q.len() as u64;
                        for tx in &q {
                            self.unresolved(*tx);
                        }
                    }
                }
            }
            Purpose::ClockSync { .. } => {
                self.sync_inflight = false;
                self.refresh_config(now, None);
            }
            Purpose::GetConfig => self.config_inflight = false,
            Purpose::Ping(call) => self.reply(call, CallResult::Failed(err)),
            Purpose::Execute(call) => self.reply(call, CallResult::ExecuteLost(err.to_string())),
            Purpose::Register(call) => {
                if !self.retry(now, rpc) {
                    self.reply(call, CallResult::Failed(err));
                }
            }
        }
    }

    /// Give up on `txn` after an operational failure before the commit
    /// decision: release its locks (ABORT to every LOCK target) and fail the
    /// call in progress. After the decision it is reported unknown instead.
    fn abandon(&mut self, now: u64, txn: TxnHandle, err: TxnError) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        let tx = t.id;
        let Some(engine) = t.engine.as_mut() else {
            return self.answer(txn, CallResult::Failed(err), true);
        };
        if !engine.abandon() {
            let write_ts = engine.write_ts();
            self.stats.indeterminate += 1;
            self.unresolved(tx);
            return self.answer(
                txn,
                CallResult::Failed(TxnError::Indeterminate {
                    tx,
                    write_ts,
                    detail: err.to_string(),
                }),
                true,
            );
        }
        let aborts = engine.abort_messages();
        self.end_txn_keep_call(txn);
        self.send_aborts(now, aborts);
        self.answer(txn, CallResult::Failed(err), true);
    }

    /// Drop the RPCs of `txn` but keep its entry (so its call can be answered).
    fn end_txn_keep_call(&mut self, txn: TxnHandle) {
        let ids = match self.txns.get_mut(&txn) {
            Some(t) => std::mem::take(&mut t.rpcs),
            None => return,
        };
        for id in ids {
            let ours = self.rpcs.get(&id).is_some_and(|r| {
                matches!(r.purpose, Purpose::Read(h) | Purpose::Scan(h) | Purpose::Commit(h) if h == txn)
            });
            if ours {
                self.remove_rpc(id);
            }
        }
    }

    fn send_aborts(&mut self, now: u64, aborts: Vec<(NodeId, TxnRequest)>) {
        for (n, req) in aborts {
            let tx = match &req {
                TxnRequest::Abort { tx } => *tx,
                _ => continue,
            };
            self.stats.aborts_sent += 1;
            self.send_rpc(now, n, req, Purpose::Abort(tx));
        }
    }

    fn on_scan_step(&mut self, now: u64, txn: TxnHandle, step: ScanStep) {
        match step {
            ScanStep::Done(rows) => self.answer(txn, CallResult::Rows(rows), false),
            ScanStep::Send(node, req) => self.send_rpc(now, node, req, Purpose::Scan(txn)),
        }
    }

    fn drive_commit(&mut self, now: u64, txn: TxnHandle, step: CommitStep) {
        // Every stage change of a commit comes through here; the report
        // ends the last stage (the engine stays in COMMIT-PRIMARY for its
        // remaining acks).
        if let Some(t) = self.txns.get_mut(&txn) {
            let stage = match (&step, &t.engine) {
                (CommitStep::Done(Ok(_)), _) => Some(CommitStage::Committed),
                (CommitStep::Done(Err(_)), _) => Some(CommitStage::Aborted),
                (_, Some(e)) => Some(e.stage()),
                (_, None) => None,
            };
            if let Some(stage) = stage {
                let (was, since) = t.stage;
                if stage != was {
                    if let Some(ns) = t.stage_ns.get_mut(was.index()) {
                        *ns += now.saturating_sub(since);
                    }
                    t.stage = (stage, now);
                }
            }
        }
        match step {
            CommitStep::Send(msgs) => {
                for (n, req) in msgs {
                    self.send_rpc(now, n, req, Purpose::Commit(txn));
                }
            }
            CommitStep::GetWriteTs => {
                if let Err(e) = self.start_ts_wait(now, txn, true, true) {
                    self.ts_failed(now, txn, true, e);
                }
            }
            CommitStep::Done(Ok(write_ts)) => {
                let Some(t) = self.txns.get_mut(&txn) else {
                    return;
                };
                let Some(engine) = t.engine.take() else {
                    return;
                };
                let info = CommitInfo {
                    tx: engine.id(),
                    read_ts: engine.read_ts(),
                    write_ts,
                    wrote: !engine.is_read_only(),
                };
                // Re-tag the outstanding COMMIT-PRIMARY acks before ending
                // the transaction, so they are collected, not dropped.
                for id in &t.rpcs {
                    if let Some(r) = self.rpcs.get_mut(id) {
                        if r.purpose == Purpose::Commit(txn) {
                            r.purpose = Purpose::PostCommit(info.tx);
                        }
                    }
                }
                if info.wrote {
                    self.stats.commit_stages_timed += 1;
                    for (sum, ns) in self.stats.commit_stage_ns_sum.iter_mut().zip(t.stage_ns) {
                        *sum += ns;
                    }
                    if engine.is_fully_acknowledged() {
                        self.queue_truncate(info.tx, &engine.truncation_targets());
                    } else {
                        self.finishing.insert(info.tx, Box::new(engine));
                    }
                }
                self.answer(txn, CallResult::Committed(info), true);
            }
            CommitStep::Done(Err(reason)) => {
                let aborts = self
                    .txns
                    .get(&txn)
                    .and_then(|t| t.engine.as_ref())
                    .map(|e| e.abort_messages())
                    .unwrap_or_default();
                self.end_txn_keep_call(txn);
                self.send_aborts(now, aborts);
                self.answer(txn, CallResult::Failed(TxnError::Aborted(reason)), true);
            }
        }
    }

    fn on_response(&mut self, now: u64, from: NodeId, id: u64, resp: Response) {
        match self.rpcs.get(&id) {
            Some(r) if r.to == from => {}
            _ => return, // late, duplicated, or for a finished purpose
        }
        match &resp {
            Response::Rejected(Rejection::ConfigMismatch { current, .. })
                if *current > self.config_id =>
            {
                self.refresh_config(now, Some(from))
            }
            Response::Rejected(Rejection::ConfigMismatch { .. } | Rejection::NotMember(_)) => {
                self.refresh_config(now, None)
            }
            r if unavailable(r) => self.refresh_config(now, None),
            _ => {}
        }
        if self.lagging_commit_participant(id, &resp) {
            // Keep the RPC: its timeout sends it again, and the attempt
            // this refusal cost is given back (the node answered, so it is
            // not the unreachable node `rpc_attempts` bounds), at most
            // `rpc_attempts` times: a node that never catches up is
            // removed by a later configuration, whose recovery decides
            // the transaction, and the resends must end.
            let limit = self.limits.rpc_attempts;
            if let Some(r) = self.rpcs.get_mut(&id) {
                if r.lag_refusals < limit {
                    r.lag_refusals += 1;
                    r.attempt = r.attempt.saturating_sub(1);
                }
            }
            return;
        }
        if matches!(resp, Response::Txn(meridian_wire::TxnResponse::NotHeld))
            && self.held_back_at(now, id)
        {
            return;
        }
        if matches!(resp, Response::Txn(meridian_wire::TxnResponse::Installed)) {
            // The primary's `Ack` follows once its record is durable: the
            // RPC stays for it (and for its timeout), and the engine
            // reports the commit now (`Coordinator::on_reply`).
            return self.on_installed(now, from, id);
        }
        let Some(rpc) = self.remove_rpc(id) else {
            return;
        };
        match rpc.purpose {
            Purpose::ClockSync { send_local_ns } => {
                self.sync_inflight = false;
                if let Response::Clock(ClockResponse::MasterTime { master_ns }) = resp {
                    let sample = SyncSample {
                        send_local_ns,
                        master_ns,
                        recv_local_ns: self.received_at.unwrap_or(now).max(send_local_ns),
                    };
                    if self.clock.on_sync(sample).is_err() {
                        self.stats.clock_rejected += 1;
                    } else {
                        self.unpark_clock_waits(now);
                    }
                } else if let Response::Rejected(Rejection::WrongRole(_)) = resp {
                    self.stats.clock_refused += 1;
                    // Not (or no longer) the clock master: the CM changed.
                    // A client whose samples expired starts no transaction,
                    // so this is how it learns the new configuration
                    // (without it, such a client stays stuck).
                    self.refresh_config(now, None);
                }
            }
            Purpose::GetConfig => {
                self.config_inflight = false;
                if let Response::Cm(CmResponse::Config { config_toml }) = resp {
                    match Configuration::from_toml(&config_toml) {
                        Ok(c) => {
                            self.set_config(now, &c);
                        }
                        Err(_) => self.stats.rpc_failures += 1,
                    }
                }
            }
            Purpose::Ping(call) => self.reply(call, CallResult::Pong),
            Purpose::Execute(call) => match resp {
                Response::Thin(meridian_wire::ThinResponse::Executed(r)) => {
                    self.reply(call, CallResult::Executed(r))
                }
                other => self.reply(
                    call,
                    CallResult::Failed(TxnError::Protocol {
                        node: from,
                        detail: format!("Execute answered with {other:?}"),
                    }),
                ),
            },
            Purpose::Register(call) => match resp {
                Response::Cm(CmResponse::Registered { coordinator, .. })
                    if self.next_local == 0 =>
                {
                    self.coordinator = coordinator;
                    self.reply(call, CallResult::Registered(coordinator))
                }
                other => self.reply(
                    call,
                    CallResult::Failed(TxnError::Protocol {
                        node: from,
                        detail: format!("registration answered with {other:?}"),
                    }),
                ),
            },
            Purpose::Abort(_) | Purpose::Truncate => {}
            Purpose::Read(txn) => {
                let key = match self.txns.get(&txn).map(|t| &t.op) {
                    Some(Op::Get { key }) => key.clone(),
                    Some(Op::GetMany { .. }) => {
                        return self.on_get_many_reply(now, txn, from, id, resp)
                    }
                    _ => return,
                };
                let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                    Some(e) => e.on_read_reply(from, &key, resp),
                    None => return,
                };
                match r {
                    Ok(v) => self.answer(
                        txn,
                        CallResult::Read(v.map(|v| (v.version, v.value))),
                        false,
                    ),
                    Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
                    Err(e) => self.abandon(now, txn, e),
                }
            }
            Purpose::Scan(txn) => {
                let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
                    Some(e) => e.on_scan_reply(from, resp),
                    None => return,
                };
                match r {
                    Ok(step) => self.on_scan_step(now, txn, step),
                    Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
                    Err(e) => self.abandon(now, txn, e),
                }
            }
            Purpose::Commit(txn) => self.commit_reply(now, txn, from, resp),
            Purpose::PostCommit(tx) => {
                let done = match self.finishing.get_mut(&tx) {
                    Some(e) => {
                        // A bad ack after the report cannot change the
                        // outcome; the records then wait for recovery.
                        if e.on_reply(from, resp).is_err() {
                            self.drop_finishing(tx);
                            return;
                        }
                        e.is_fully_acknowledged()
                    }
                    None => false,
                };
                if done {
                    if let Some(e) = self.finishing.remove(&tx) {
                        self.queue_truncate(tx, &e.truncation_targets());
                    }
                }
            }
        }
        // Queues that reached their bound are flushed at once.
        let full: Vec<NodeId> = self
            .truncates
            .iter()
            .filter(|(_, q)| q.len() >= self.limits.max_pending_truncations)
            .map(|(n, _)| *n)
            .collect();
        for n in full {
            self.send_rpc(
                now,
                n,
                Request::Txn(TxnRequest::Truncate { txs: Vec::new() }),
                Purpose::Truncate,
            );
        }
    }

    /// A COMMIT-PRIMARY's first answer, [`meridian_wire::TxnResponse::Installed`]: the
    /// commit is reported if it is the first, the RPC waits on for the
    /// durable `Ack`. After the report (`Purpose::PostCommit`) there is
    /// nothing more to do with it.
    fn on_installed(&mut self, now: u64, from: NodeId, id: u64) {
        if let Some(Purpose::Commit(txn)) = self.rpcs.get(&id).map(|r| r.purpose) {
            let installed = Response::Txn(meridian_wire::TxnResponse::Installed);
            self.commit_reply(now, txn, from, installed);
        }
    }

    /// Hand a reply to transaction `txn`'s commit engine and carry out
    /// the step it returns.
    fn commit_reply(&mut self, now: u64, txn: TxnHandle, from: NodeId, resp: Response) {
        let r = match self.txns.get_mut(&txn).and_then(|t| t.engine.as_mut()) {
            Some(e) => {
                let r = e.on_reply(from, resp);
                e.check_invariants();
                r
            }
            None => return,
        };
        match r {
            Ok(Some(step)) => self.drive_commit(now, txn, step),
            Ok(None) => {}
            Err(e) => self.abandon(now, txn, e),
        }
    }

    fn maybe_closed(&mut self) {
        let Some(call) = self.closing else { return };
        let busy = self.rpcs.values().any(|r| {
            matches!(
                r.purpose,
                Purpose::Truncate | Purpose::Abort(_) | Purpose::PostCommit(_)
            )
        });
        if !busy && self.truncates.values().all(Vec::is_empty) && self.finishing.is_empty() {
            self.closing = None;
            // A clean close releases the lease, unless a transaction's
            // outcome stayed unknown: then its lease runs out and the
            // configuration that follows recovers it (FaRM §5.3).
            self.lease_params = None;
            let role = self
                .lease
                .with(0, |r, _| std::mem::replace(r, LeaseRole::None));
            if let LeaseRole::Member(l) = role {
                if self.unresolved_low.is_none() {
                    self.send_oneway(
                        l.cm(),
                        Request::Lease(LeaseMessage::Release {
                            holder: LeaseHolder::Client(self.coordinator),
                        }),
                    );
                }
            }
            self.reply(call, CallResult::Closed);
        }
    }

    /// End the waits that are due, then ask for a wake-up at the earliest
    /// pending deadline, if it is earlier than the one already asked for.
    /// Every input ends with it.
    fn arm(&mut self, now: u64) {
        self.end_due_waits(now);
        let mut at = u64::MAX;
        if !self.sync_inflight && !self.clock.is_master() {
            at = self.next_sync_ns.unwrap_or(now);
        }
        if let Some(&(d, _)) = self.deadlines.iter().next() {
            at = at.min(d);
        }
        match self.lease.next_renew_ns() {
            Some(t) => at = at.min(t),
            None if self.lease_params.is_some() && self.coordinator != 0 => at = at.min(now),
            None => {}
        }
        if let Some((&(w, _), _)) = self.waits.iter().next() {
            at = at.min(w);
        }
        if self.truncates.values().any(|q| !q.is_empty()) {
            at = at.min(self.next_flush_ns.max(now));
        }
        if at == u64::MAX {
            return;
        }
        if self.armed_ns.is_none_or(|a| at < a) {
            self.armed_ns = Some(at);
            self.effects.push(Effect::Wake { at_local_ns: at });
        }
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
    use meridian_wire::TxnResponse;

    type Effects = Vec<Effect<CallResult>>;

    fn config() -> Configuration {
        let mut c = Configuration::local(3, 7000, 2, 2, std::path::Path::new("/nonexistent"));
        c.limits.rpc_timeout_ms = 1;
        c
    }

    /// Requests sent, as (node, rpc id, request, piggybacked truncations).
    fn sent(e: &Effects) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
        e.iter()
            .filter_map(|e| match e {
                Effect::Send {
                    to,
                    frame:
                        Frame::Request {
                            id, truncate, req, ..
                        },
                } => Some((*to, *id, req.clone(), truncate.txs.clone())),
                _ => None,
            })
            .collect()
    }

    fn replies(e: &Effects) -> Vec<(CallId, CallResult)> {
        e.iter()
            .filter_map(|e| match e {
                Effect::Reply { call, result } => Some((*call, result.clone())),
                _ => None,
            })
            .collect()
    }

    fn answer(
        p: &mut ClientProcess,
        now: u64,
        reqs: &[(NodeId, u64, Request, Vec<TxId>)],
        resp: Response,
    ) -> Effects {
        for (to, id, _, _) in reqs {
            p.on_message(
                now,
                *to,
                Frame::Response {
                    id: *id,
                    resp: resp.clone(),
                },
            );
        }
        p.drain_effects()
    }

    /// A synchronised client with transaction 1 open, writing a key in
    /// each region, and its commit started: returns the LOCK requests.
    fn locking(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
        open_txn(p);
        p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
            .unwrap();
        p.put(TxnHandle(1), vec![0x80, b'a'], b"y".to_vec())
            .unwrap();
        p.commit(200_300, 2, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        assert_eq!(locks.len(), 2);
        assert!(locks
            .iter()
            .all(|(_, _, r, _)| matches!(r, Request::Txn(t) if t.lock_record().is_some())));
        locks
    }

    /// `clock.writes_wait_at_server` (the default): once every LOCK is
    /// granted, `write_ts` is taken and the COMMIT-BACKUPs (the
    /// transaction validates nothing) leave at once, each wrapped to be
    /// held until `write_ts` passed; nothing waits at the coordinator.
    #[test]
    fn a_write_ts_left_to_the_nodes_rides_on_the_commit_backups() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = locks_granted(&mut p);
        assert_eq!(backups.len(), 2, "{backups:?}");
        for (_, _, r, _) in &backups {
            let Request::Txn(t @ TxnRequest::AfterWriteTs { req, .. }) = r else {
                panic!("not held: {r:?}");
            };
            assert!(matches!(**req, TxnRequest::CommitBackup { .. }), "{r:?}");
            assert!(t.held_write_ts().is_some(), "malformed: {r:?}");
        }
        assert_eq!(p.stats().write_ts_unwaited, 1);
        assert_eq!(p.stats().ts_count, 0, "no GET_TS wait at the coordinator");
        p.check_invariants();
    }

    /// A node that cannot hold a COMMIT-BACKUP until its `write_ts` passed
    /// answers NotHeld: the coordinator waits `write_ts` out on its own
    /// clock and only then sends the same COMMIT-BACKUP again, unwrapped,
    /// to the same node. The commit goes on when that node acknowledges.
    #[test]
    fn a_commit_backup_sent_back_goes_again_unwrapped_once_write_ts_passed() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = locks_granted(&mut p);
        let (to, _, held, _) = backups[0].clone();
        let Request::Txn(TxnRequest::AfterWriteTs { write_ts, req }) = held else {
            panic!("not held: {held:?}");
        };
        let e = answer(
            &mut p,
            200_500,
            &backups[..1],
            Response::Txn(TxnResponse::NotHeld),
        );
        assert!(
            sent(&e).is_empty(),
            "sent again before write_ts passed: {e:?}"
        );
        assert_eq!(p.stats().write_ts_sent_back, 1);
        let ready = p
            .clock
            .passed_at(200_500, write_ts)
            .expect("a usable clock");
        assert!(ready > 200_500, "write_ts {write_ts} already past");
        p.tick(ready - 1);
        assert!(sent(&p.drain_effects()).is_empty(), "sent again early");
        p.tick(ready);
        let again = sent(&p.drain_effects());
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(again[0].0, to);
        assert_eq!(again[0].2, Request::Txn(*req));
        // Both backups acknowledge: COMMIT-PRIMARY goes to the primaries.
        let mut acks = again.clone();
        acks.push(backups[1].clone());
        let primaries = sent(&answer(
            &mut p,
            ready + 100,
            &acks,
            Response::Txn(TxnResponse::Ack),
        ));
        assert_eq!(primaries.len(), 2, "{primaries:?}");
        assert!(primaries
            .iter()
            .all(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::CommitPrimary { .. }))));
        p.check_invariants();
    }

    /// A VALIDATE sent back (NotHeld) when the coordinator's own clock
    /// cannot show `write_ts` past either (here it lost its samples, as
    /// after following a new clock master) abandons the transaction,
    /// which is before its commit point: ABORT goes to every LOCK target
    /// and the call fails with a retryable `ClockUnavailable` abort,
    /// instead of holding the locks until the clock comes back.
    #[test]
    fn a_validate_sent_back_without_a_usable_clock_aborts() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        open_txn(&mut p);
        // Read b (region 0) and write a (region 1): b is validated.
        p.get(200_100, 5, TxnHandle(1), &[0x00, b'b']);
        let read = sent(&p.drain_effects());
        read_reply(&mut p, 200_150, read[0].0, read[0].1, Some(b"v"));
        p.put(TxnHandle(1), vec![0x80, b'a'], b"y".to_vec())
            .unwrap();
        p.commit(200_300, 6, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        let held = sent(&answer(
            &mut p,
            200_400,
            &locks,
            Response::Txn(TxnResponse::Lock(Ok(()))),
        ));
        assert!(
            matches!(unheld(&held[0].2), Some(TxnRequest::Validate { .. }))
                && matches!(held[0].2, Request::Txn(TxnRequest::AfterWriteTs { .. })),
            "{held:?}"
        );
        p.clock = ClockSync::new(1000);
        let e = answer(&mut p, 200_500, &held, Response::Txn(TxnResponse::NotHeld));
        let aborts: Vec<NodeId> = sent(&e)
            .into_iter()
            .filter(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Abort { .. })))
            .map(|(n, ..)| n)
            .collect();
        assert_eq!(aborts, vec![locks[0].0], "{e:?}");
        assert!(
            matches!(
                replies(&e)[..],
                [(
                    6,
                    CallResult::Failed(TxnError::Aborted(AbortReason::ClockUnavailable))
                )]
            ),
            "{e:?}"
        );
        p.check_invariants();
    }

    /// A synchronised client with read-write transaction 1 open.
    fn open_txn(p: &mut ClientProcess) {
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            p,
            1100,
            &sync,
            Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
        );
        p.begin(2000, 1, 0, TxnOptions::default());
        p.tick(200_000);
        assert!(matches!(
            replies(&p.drain_effects())[..],
            [(1, CallResult::Began { .. })]
        ));
    }

    fn read_reply(
        p: &mut ClientProcess,
        now: u64,
        to: NodeId,
        id: u64,
        v: Option<&[u8]>,
    ) -> Effects {
        let resp = Response::Txn(TxnResponse::Read(Ok(v.map(|v| meridian_wire::Versioned {
            version: Timestamp(7),
            value: v.to_vec(),
        }))));
        p.on_message(now, to, Frame::Response { id, resp });
        p.drain_effects()
    }

    /// A single read begins at once, with no GET_TS, while the clock is
    /// usable, and reads with one ReadLatest and nothing else. Without a
    /// usable clock (never synchronised, or cut off) it waits for a clock
    /// sample like any transaction.
    #[test]
    fn a_single_read_begins_without_read_ts_while_the_clock_is_usable() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        p.begin(500, 9, 0, TxnOptions::single_read());
        let e = p.drain_effects();
        assert!(replies(&e).is_empty(), "began without a clock: {e:?}");
        assert_eq!(p.stats().clock_parked, 1);
        assert_eq!(p.stats().single_read_begins, 0);
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            &mut p,
            1000,
            &sync,
            Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
        );
        p.finish_read_only(TxnHandle(1));
        let parked = p.stats();
        p.begin(1000, 1, 0, TxnOptions::single_read());
        let e = p.drain_effects();
        assert!(
            matches!(
                replies(&e)[..],
                [(
                    1,
                    CallResult::Began {
                        read_ts: Timestamp::ZERO,
                        ..
                    }
                )]
            ),
            "{e:?}"
        );
        let d = p.stats().since(&parked);
        assert_eq!(d.single_read_begins, 1);
        assert_eq!(d.read_ts_unwaited + d.ts_count, 0, "{d:?}");
        p.get(1100, 2, TxnHandle(2), &[0x00, b'a']);
        let reads = sent(&p.drain_effects());
        assert!(
            matches!(
                &reads[..],
                [(_, _, Request::Txn(TxnRequest::ReadLatest { .. }), _)]
            ),
            "{reads:?}"
        );
        let resp = Response::Txn(TxnResponse::ReadLatest(Ok(meridian_wire::LatestRead {
            version: Timestamp(9),
            value: Some(b"v".to_vec()),
        })));
        p.on_message(
            1200,
            reads[0].0,
            Frame::Response {
                id: reads[0].1,
                resp,
            },
        );
        let e = p.drain_effects();
        assert!(
            matches!(&replies(&e)[..], [(2, CallResult::Read(Some(_)))]),
            "{e:?}"
        );
        assert_eq!(p.observed_version(TxnHandle(2)), Some(Timestamp(9)));
        p.check_invariants();
    }

    /// A read-only transaction the client library committed without a call
    /// is forgotten by `finish_read_only`: nothing is sent and the process
    /// is quiet again; a transaction the process already ended is ignored.
    #[test]
    fn a_read_only_transaction_committed_without_a_call_is_forgotten() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        open_txn(&mut p);
        p.get(200_100, 5, TxnHandle(1), &[0x00, b'a']);
        let reads = sent(&p.drain_effects());
        assert_eq!(reads.len(), 1);
        let e = read_reply(&mut p, 200_200, reads[0].0, reads[0].1, Some(b"v"));
        assert!(matches!(replies(&e)[..], [(5, CallResult::Read(Some(_)))]));
        assert!(!p.is_quiet(), "the transaction is open");
        p.finish_read_only(TxnHandle(1));
        assert!(p.is_quiet(), "the transaction was not forgotten");
        assert!(
            sent(&p.drain_effects()).is_empty(),
            "a read-only commit sends nothing"
        );
        p.finish_read_only(TxnHandle(1));
        p.finish_read_only(TxnHandle(9));
        assert!(p.is_quiet());
    }

    /// Forgetting a transaction that buffered a write would lose the write:
    /// `finish_read_only` refuses it (release builds too).
    #[test]
    #[should_panic(expected = "committed as read-only, but it wrote")]
    fn finishing_a_writing_transaction_as_read_only_panics() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        open_txn(&mut p);
        p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
            .unwrap();
        p.finish_read_only(TxnHandle(1));
    }

    /// `get_many` sends every READ at once (one per key not written by the
    /// transaction), answers in the order asked whatever order the replies
    /// come in, serves its own writes locally, and the reads join the read
    /// set (validated at commit).
    #[test]
    fn get_many_sends_all_reads_at_once_and_answers_in_key_order() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        open_txn(&mut p);
        let (a, b, mine) = (vec![0x00, b'a'], vec![0x80, b'b'], vec![0x40, b'm']);
        p.put(TxnHandle(1), mine.clone(), b"own".to_vec()).unwrap();
        p.get_many(
            200_100,
            5,
            TxnHandle(1),
            vec![a.clone(), mine.clone(), b.clone()],
        );
        let reads = sent(&p.drain_effects());
        assert_eq!(
            reads.len(),
            2,
            "one READ per key not written here: {reads:?}"
        );
        assert!(reads
            .iter()
            .all(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Read { .. }))));
        // Replies in reverse order; nothing is answered until the last.
        let (to1, id1) = (reads[1].0, reads[1].1);
        assert!(replies(&read_reply(&mut p, 200_200, to1, id1, None)).is_empty());
        let (to0, id0) = (reads[0].0, reads[0].1);
        let done = replies(&read_reply(&mut p, 200_300, to0, id0, Some(b"A")));
        match &done[..] {
            [(5, CallResult::Reads(v))] => {
                assert_eq!(v.len(), 3);
                assert_eq!(v[0].as_ref().map(|(_, v)| v.as_slice()), Some(&b"A"[..]));
                assert_eq!(v[1].as_ref().map(|(_, v)| v.as_slice()), Some(&b"own"[..]));
                assert_eq!(v[2], None, "key b's reply said absent");
            }
            other => panic!("{other:?}"),
        }
        // The transaction is idle again: a commit runs (LOCK of `mine`).
        p.commit(200_400, 6, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        assert!(locks
            .iter()
            .any(|(_, _, r, _)| matches!(r, Request::Txn(t) if t.lock_record().is_some())));
        p.check_invariants();
    }

    /// A client (coordinator 7) synchronised once with the master at local
    /// time 1100 ns, with `clock.reads_wait_at_server = at_server`.
    fn synced_client(at_server: bool) -> ClientProcess {
        let mut c = config();
        c.clock.reads_wait_at_server = at_server;
        let mut p = ClientProcess::new(&c, 7, 1);
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            &mut p,
            1100,
            &sync,
            Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
        );
        p
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

    /// With `clock.reads_wait_at_server` the coordinator hands out
    /// `read_ts` without waiting, so a tighter sample arriving afterwards
    /// can put its clock's upper bound below `read_ts`; the commit's
    /// `write_ts` is then raised above `read_ts` (FaRMv2 needs
    /// `write_ts > read_ts`; without the raise the engine refuses the
    /// `write_ts` and the transaction is abandoned).
    #[test]
    fn write_ts_is_raised_above_a_read_ts_handed_out_unwaited() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        // A wide first sample (a 5 ms round trip): a high upper bound.
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            &mut p,
            5_001_000,
            &sync,
            Response::Clock(ClockResponse::MasterTime {
                master_ns: 2_600_000,
            }),
        );
        p.begin(5_001_100, 1, 0, TxnOptions::default());
        let read_ts = match &replies(&p.drain_effects())[..] {
            [(1, CallResult::Began { read_ts, .. })] => *read_ts,
            other => panic!("Began expected at once: {other:?}"),
        };
        // A tight second sample: the upper bound falls far below read_ts.
        p.tick(5_001_200);
        let sync = sent(&p.drain_effects());
        assert!(!sync.is_empty(), "a second sync is due");
        answer(
            &mut p,
            5_001_300,
            &sync,
            Response::Clock(ClockResponse::MasterTime {
                master_ns: 5_100_250,
            }),
        );
        let upper = p.clock_time(5_001_400).expect("synchronised").upper;
        assert!(
            upper < read_ts.0,
            "the setup needs upper {upper} < read_ts {read_ts:?}"
        );
        p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
            .unwrap();
        p.commit(5_001_400, 2, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        assert_eq!(locks.len(), 1);
        let mut e = answer(
            &mut p,
            5_001_500,
            &locks,
            Response::Txn(TxnResponse::Lock(Ok(()))),
        );
        p.tick(50_000_000);
        e.extend(p.drain_effects());
        let write_ts: Vec<Timestamp> = sent(&e)
            .into_iter()
            .filter_map(|(_, _, r, _)| match unheld(&r) {
                Some(TxnRequest::CommitBackup { write_ts, .. }) => Some(*write_ts),
                _ => None,
            })
            .collect();
        assert!(
            !write_ts.is_empty() && write_ts.iter().all(|w| *w > read_ts),
            "COMMIT-BACKUP with write_ts above read_ts {read_ts:?}: {write_ts:?} {:?}",
            replies(&e)
        );
    }

    /// With `clock.reads_wait_at_server` (the default) a Begin takes
    /// `read_ts` as the clock's upper bound and answers at once (the nodes
    /// hold the reads), and is counted as unwaited; without it, it waits.
    #[test]
    fn read_ts_is_waited_out_where_the_configuration_says() {
        for at_server in [true, false] {
            let mut p = synced_client(at_server);
            let upper = p.clock_time(2000).expect("synchronised").upper;
            p.begin(2000, 1, 0, TxnOptions::default());
            let began: Vec<_> = replies(&p.drain_effects())
                .into_iter()
                .filter_map(|(c, r)| match r {
                    CallResult::Began { read_ts, .. } if c == 1 => Some(read_ts),
                    _ => None,
                })
                .collect();
            if at_server {
                assert_eq!(began, vec![Timestamp(upper)], "answered at once");
                assert_eq!(p.stats().read_ts_unwaited, 1);
                assert_eq!(p.stats().ts_count, 0);
            } else {
                assert!(began.is_empty(), "the coordinator waits: {began:?}");
                assert_eq!(p.stats().read_ts_unwaited, 0);
                assert_eq!(p.stats().ts_count, 1);
            }
        }
    }

    /// An uncertainty wait ends at the first input at or after its
    /// deadline, whatever the input (here a stray reply, then an
    /// application call), not only at a tick: on a busy client the
    /// ticker's wake-up comes tens of microseconds late. An input before
    /// the deadline ends nothing.
    #[test]
    fn a_due_wait_ends_at_any_input_not_only_at_a_tick() {
        let stray = |p: &mut ClientProcess, now: u64| {
            p.on_message(
                now,
                NodeId(0),
                Frame::Response {
                    id: 999_999,
                    resp: Response::Txn(TxnResponse::Lock(Ok(()))),
                },
            );
            p.drain_effects()
        };
        for by_call in [false, true] {
            let mut p = synced_client(false);
            p.begin(2000, 1, 0, TxnOptions::default());
            let ready = p
                .drain_effects()
                .iter()
                .filter_map(|e| match e {
                    Effect::Wake { at_local_ns } => Some(*at_local_ns),
                    _ => None,
                })
                .last()
                .expect("the wait asks for a wake-up");
            assert!(ready > 2000, "a wait of zero length proves nothing");
            assert!(replies(&stray(&mut p, ready - 1)).is_empty(), "ended early");
            let e = if by_call {
                p.begin(ready, 2, 1, TxnOptions::default());
                p.drain_effects()
            } else {
                stray(&mut p, ready)
            };
            assert!(
                replies(&e)
                    .iter()
                    .any(|(c, r)| *c == 1 && matches!(r, CallResult::Began { .. })),
                "the due wait did not end at the input (by_call = {by_call}): {:?}",
                replies(&e)
            );
            p.check_invariants();
        }
    }

    /// A conflict on one of `get_many`'s reads aborts the transaction and
    /// the call; the other replies, arriving later, are ignored.
    #[test]
    fn a_conflict_in_get_many_aborts_and_later_replies_are_ignored() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        open_txn(&mut p);
        p.get_many(
            200_100,
            5,
            TxnHandle(1),
            vec![vec![0x00, b'a'], vec![0x80, b'b']],
        );
        let reads = sent(&p.drain_effects());
        assert_eq!(reads.len(), 2);
        let resp = Response::Txn(TxnResponse::Read(Err(Conflict::Locked)));
        p.on_message(
            200_200,
            reads[0].0,
            Frame::Response {
                id: reads[0].1,
                resp,
            },
        );
        match &replies(&p.drain_effects())[..] {
            [(5, CallResult::Failed(e))] => assert!(e.is_abort(), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(replies(&read_reply(
            &mut p,
            200_300,
            reads[1].0,
            reads[1].1,
            Some(b"B")
        ))
        .is_empty());
        p.check_invariants();
    }

    /// FaRM Table 1's low bound: it passes a transaction only once every
    /// node acknowledged its TRUNCATE, and it rides with truncations.
    #[test]
    fn the_low_bound_passes_a_transaction_only_after_its_truncations_are_acknowledged() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = committing_backups(&mut p);
        assert_eq!(p.truncate_low(), 0, "transaction 0 is not finished");
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        answer(&mut p, 600_200, &primaries, Response::Txn(TxnResponse::Ack));
        assert_eq!(p.truncate_low(), 0, "committed but not yet truncated");
        p.close(600_300, 3);
        let flushed: Vec<_> = p
            .drain_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Send {
                    to,
                    frame: Frame::Request { id, truncate, .. },
                } => Some((to, id, truncate)),
                _ => None,
            })
            .collect();
        assert!(!flushed.is_empty());
        assert_eq!(p.truncate_low(), 0, "truncations in flight");
        for (to, id, _) in &flushed {
            p.on_message(
                600_400,
                *to,
                Frame::Response {
                    id: *id,
                    resp: Response::Txn(TxnResponse::Ack),
                },
            );
        }
        assert_eq!(p.truncate_low(), 1, "every truncation acknowledged");
        p.check_invariants();
    }

    /// Disk durability: a primary answers COMMIT-PRIMARY first with
    /// `Installed` (before its fsync), then `Ack` (after). The commit is
    /// reported at `Installed`; the TRUNCATE waits for every `Ack`, since a
    /// backup applies at truncation and the primary's install is not yet
    /// durable.
    #[test]
    fn installed_reports_the_commit_and_the_ack_lets_it_truncate() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = committing_backups(&mut p);
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        assert!(!primaries.is_empty());
        let e = answer(
            &mut p,
            600_200,
            &primaries,
            Response::Txn(TxnResponse::Installed),
        );
        assert!(
            replies(&e)
                .iter()
                .any(|(_, r)| matches!(r, CallResult::Committed(_))),
            "reported at Installed: {e:?}"
        );
        // Where its time went: LOCK 200.3 → 200.4 µs, COMMIT-BACKUP (sent
        // at once, `write_ts` left to the nodes) → 600.1, COMMIT-PRIMARY
        // → 600.2, the report; the later Ack does not count.
        let st = p.stats();
        assert_eq!(st.commit_stages_timed, 1);
        let stage = |s: CommitStage| st.commit_stage_ns_sum[s.index()];
        assert_eq!(stage(CommitStage::Locking), 100);
        assert_eq!(stage(CommitStage::AwaitWriteTs), 0);
        assert_eq!(stage(CommitStage::Validating), 0);
        assert_eq!(stage(CommitStage::CommittingBackups), 399_700);
        assert_eq!(stage(CommitStage::CommittingPrimaries), 100);
        p.check_invariants();
        // Nothing is truncatable yet: a close flushes no TRUNCATE.
        p.close(600_300, 3);
        let truncations = |e: &Effects| {
            sent(e)
                .iter()
                .filter(|(_, _, r, txs)| {
                    matches!(r, Request::Txn(TxnRequest::Truncate { .. })) || !txs.is_empty()
                })
                .count()
        };
        assert_eq!(
            truncations(&p.drain_effects()),
            0,
            "truncated before the Ack"
        );
        let mut e = answer(&mut p, 600_400, &primaries, Response::Txn(TxnResponse::Ack));
        // Queued, and flushed at the next flush tick (or at once by the close).
        p.tick(5_000_000);
        e.extend(p.drain_effects());
        assert!(truncations(&e) > 0, "every Ack in: the TRUNCATE goes");
        assert_eq!(p.stats().commit_stage_ns_sum, st.commit_stage_ns_sum);
        p.check_invariants();
    }

    /// A transaction whose outcome is unknown holds the low bound below it:
    /// its records may remain until recovery resolves it.
    #[test]
    fn the_low_bound_stops_at_a_transaction_with_an_unknown_outcome() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let _backups_lost = committing_backups(&mut p);
        // COMMIT-BACKUP is never acknowledged: after `rpc_attempts` tries
        // the commit is reported unknown.
        let mut now = 600_000;
        for _ in 0..=p.limits.rpc_attempts {
            now += 2_000_000;
            p.tick(now);
        }
        let e = p.drain_effects();
        assert!(replies(&e)
            .iter()
            .any(|(_, r)| matches!(r, CallResult::Failed(TxnError::Indeterminate { .. }))));
        p.begin(now, 9, 0, TxnOptions::default());
        assert_eq!(p.truncate_low(), 0, "held below the unknown transaction");
    }

    /// A COMMIT-PRIMARY target stuck in an older configuration (removed
    /// by a later one, it never learned) refuses every resend with
    /// `ConfigMismatch`. The refusals' given-back attempts are bounded per
    /// request, across its resends: once `rpc_attempts` of them are spent,
    /// the attempts count again and the commit ends indeterminate, for
    /// recovery to decide. A count that started afresh at each resend
    /// would resend every 20 ms forever.
    #[test]
    fn a_lagging_commit_primary_target_is_resent_a_bounded_number_of_times() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = committing_backups(&mut p);
        let mut pending = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        assert!(pending
            .iter()
            .all(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitPrimary { .. }))));
        let lagging = Response::Rejected(Rejection::ConfigMismatch {
            sent: p.config_id,
            current: ConfigId(p.config_id.0 - 1),
        });
        let targets = pending.len() as u32;
        let (mut now, mut resends, mut outcome) = (600_200, 0u32, None);
        let bound = 4 * p.limits.rpc_attempts * targets + 4;
        while outcome.is_none() && resends <= bound {
            let e = answer(&mut p, now, &pending, lagging.clone());
            outcome = replies(&e).into_iter().next();
            now += 2_000_000;
            p.tick(now);
            let e = p.drain_effects();
            outcome = outcome.or_else(|| replies(&e).into_iter().next());
            pending = sent(&e)
                .into_iter()
                .filter(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitPrimary { .. })))
                .collect();
            resends += pending.len() as u32;
        }
        match outcome {
            Some((_, CallResult::Failed(TxnError::Indeterminate { .. }))) => {}
            other => panic!("after {resends} resends: {other:?}"),
        }
        // Per target: `rpc_attempts` refusals given back, then
        // `rpc_attempts` counted.
        assert!(
            resends <= 2 * p.limits.rpc_attempts * targets,
            "{resends} resends to {targets} targets for rpc_attempts = {}",
            p.limits.rpc_attempts
        );
        p.check_invariants();
    }

    /// [`locking`], every LOCK acknowledged: returns the COMMIT-BACKUP
    /// requests.
    fn committing_backups(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
        // Sent at once when `write_ts` is left to the nodes (the default),
        // at the tick that ends its wait otherwise.
        let mut backups = locks_granted(p);
        p.tick(600_000);
        backups.extend(sent(&p.drain_effects()));
        assert!(backups
            .iter()
            .all(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitBackup { .. }))));
        backups
    }

    /// [`locking`], every LOCK granted at 200.4 µs: what is sent then.
    fn locks_granted(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
        let locks = locking(p);
        sent(&answer(
            p,
            200_400,
            &locks,
            Response::Txn(TxnResponse::Lock(Ok(()))),
        ))
    }

    /// The transaction request `r` carries, unwrapped if it was sent to be
    /// held until its `write_ts` passed.
    fn unheld(r: &Request) -> Option<&TxnRequest> {
        match r {
            Request::Txn(TxnRequest::AfterWriteTs { req, .. }) => Some(req),
            Request::Txn(t) => Some(t),
            _ => None,
        }
    }

    /// A LOCK that times out must not leave the other
    /// LOCK target locked: ABORT goes to every LOCK target.
    #[test]
    fn a_lock_timeout_sends_abort_to_every_lock_target() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let locks = locking(&mut p);
        answer(
            &mut p,
            200_400,
            &locks[..1],
            Response::Txn(TxnResponse::Lock(Ok(()))),
        );
        p.tick(5_000_000);
        let e = p.drain_effects();
        let mut aborted: Vec<NodeId> = sent(&e)
            .into_iter()
            .filter(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Abort { .. })))
            .map(|(n, ..)| n)
            .collect();
        aborted.sort();
        let mut targets: Vec<NodeId> = locks.iter().map(|(n, ..)| *n).collect();
        targets.sort();
        assert_eq!(aborted, targets, "ABORT to every LOCK target");
        assert!(matches!(
            replies(&e)[..],
            [(2, CallResult::Failed(TxnError::Transport { .. }))]
        ));
        p.check_invariants();
    }

    /// Truncations are flushed on close, re-sent when the
    /// frame carrying them is lost, and close answers once they are acked.
    #[test]
    fn truncations_survive_a_lost_frame_and_are_flushed_on_close() {
        let mut p = ClientProcess::new(&config(), 7, 1);
        let backups = committing_backups(&mut p);
        let primaries = sent(&answer(
            &mut p,
            600_100,
            &backups,
            Response::Txn(TxnResponse::Ack),
        ));
        let e = answer(&mut p, 600_200, &primaries, Response::Txn(TxnResponse::Ack));
        assert!(matches!(replies(&e)[..], [(2, CallResult::Committed(_))]));
        assert!(p.queued_truncations() > 0);

        p.close(600_300, 3);
        let first = sent(&p.drain_effects());
        let carried: usize = first.iter().map(|(_, _, _, t)| t.len()).sum();
        assert!(carried > 0, "close flushes the truncation queue");
        // The frames are lost: the ids are re-queued and sent again.
        p.tick(5_000_000);
        let again = sent(&p.drain_effects());
        let carried_again: usize = again.iter().map(|(_, _, _, t)| t.len()).sum();
        assert_eq!(carried_again, carried, "lost truncations are sent again");
        let e = answer(&mut p, 5_000_100, &again, Response::Txn(TxnResponse::Ack));
        assert!(matches!(replies(&e)[..], [(3, CallResult::Closed)]));
        assert_eq!(p.queued_truncations(), 0);
        p.check_invariants();
    }
}
