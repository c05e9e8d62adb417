//! # The node process: participant, CM duties, clock, GC, thin-client coordinator (FaRM §3–4, FaRMv2 §4.1)
//!
//! **Problem.** A node answers the transaction protocol for the regions it
//! holds, and also plays the roles around it:
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
//! **Coordinator ids.** Transaction ids embed the
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

use crate::client::ClientProcess;
use crate::lease::{LeaseClient, LeaseDesk, LeaseManager, LeaseParams, LeaseRole};
use crate::raft_service::{CasClient, ServiceReplica};
use crate::reconfig::{Reconfig, ReconfigParams};
use crate::recovery::RecoveryFlow;
use crate::{CallId, Effect};
use meridian_config::Configuration;
use meridian_txn::Participant;
use meridian_wire::{
    AdminRequest, AdminResponse, ClockRequest, CmRequest, CmResponse, ConfigId, Frame, LeaseHolder,
    NodeId, NodeStatus, ReconfigMessage, Rejection, Request, Response, ThinRequest, Timestamp,
    TxnRequest,
};
use std::collections::{BTreeMap, VecDeque};

mod clock;
mod durability;
mod leases;
mod membership;
mod read_deps;
mod serve;
mod service;
mod thin;

use clock::time_bound_reserve_ns;
use durability::Wal;
use serve::{lock_may_wait, Holds};
use thin::Exec;

pub use clock::answer_clock_sync;
pub use durability::{
    held_asks_fsync, held_waits_for_log, independent_of_log, installed_reply, split_held,
    DurableRecord, NodeSnapshot, RestoreError,
};
pub use read_deps::ReadDeps;
pub use serve::{ReadHoldStats, READ_HOLD_LONG_NS};
pub use thin::embedded_coordinator_id;

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
    /// Disk durability: the drain's read replies (READ, single read,
    /// SCAN, VALIDATE) show keys changed by records through `through_seq`:
    /// they wait until the log is durable that far ([`split_held`],
    /// [`ReadDeps`]). At most one per drain, after its `AppendLog`.
    HoldReads {
        /// The last record they depend on.
        through_seq: u64,
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
/// replica of millions of objects takes seconds (a 1M-subscriber TATP
/// node added back to its configuration would hold its process lock for
/// seconds doing it inline, while its lease requests wait for the lock
/// and the CM suspects it again and again). The tokio node frees them on
/// a thread of its own; the simulator drops them at once.
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
    /// Held requests and lock waits ([`Holds`]).
    holds: Holds,
    /// Injected bugs (tests only; [`NodeProcess::with_bugs`]).
    #[cfg(feature = "sim-bugs")]
    bugs: meridian_bugs::Bugs,
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
    /// Disk durability: the log's sequence and checkpoint pacing
    /// ([`Wal`]).
    wal: Wal,
    /// The clock master offset last logged.
    master_offset_ns: i64,
    /// Restored from disk: the leases get the formation grace, and the CM
    /// proposes a fresh configuration at once (so every transaction of the
    /// one it crashed in recovers).
    restored: bool,
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
            #[cfg(feature = "sim-bugs")]
            bugs: meridian_bugs::Bugs::none(),
            executes: BTreeMap::new(),
            next_call: 1,
            loopback: VecDeque::new(),
            requests: 0,
            holds: Holds::default(),
            wal: Wal::default(),
            master_offset_ns: 0,
            restored: false,
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

    fn send(&mut self, to: Peer, frame: Frame) {
        if to == Peer::Node(self.id) {
            self.loopback.push_back(frame);
        } else {
            self.effects.push(NodeEffect::Send { to, frame });
        }
    }

    fn reply(&mut self, to: Peer, id: Option<u64>, resp: Response) {
        if let Some(id) = id {
            let granted = matches!(
                resp,
                Response::Txn(
                    meridian_wire::TxnResponse::Lock(Ok(()))
                        | meridian_wire::TxnResponse::LockedAbove(_)
                )
            );
            self.send(to, Frame::Response { id, resp });
            if granted {
                self.lock_durable_follows(to, id);
            }
        }
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
                    self.holds.lock_waits_dirty |= !self.holds.lock_waits.is_empty()
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
            Request::Clock(ClockRequest::Sync) => self.answer_sync(now),
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
                self.holds.lock_waits_dirty |= !self.holds.lock_waits.is_empty();
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
                self.holds.lock_waits_dirty |= !self.holds.lock_waits.is_empty();
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

    fn send_oneway(&mut self, to: NodeId, req: Request) {
        let frame = Frame::OneWay {
            config: self.config.id(),
            truncate: Default::default(),
            req,
        };
        self.send(Peer::Node(to), frame);
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
        // clear for embedded coordinators. The node is part of it: a new
        // CM after a failover may run in the same incarnation number as
        // the old, and two clients must never share transaction ids.
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

    /// Move the embedded coordinator's effects and the loopback frames
    /// until both are quiet.
    fn pump(&mut self, now: u64) {
        loop {
            if self.holds.lock_waits_dirty {
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
        self.holds.lock_waits_dirty |= !self.holds.lock_waits.is_empty();
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

    /// The configuration this node runs.
    pub fn config(&self) -> &Configuration {
        &self.config
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
            // the older one's messages, its recovery's too.
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
            self.holds.deferred_reads.len() + self.holds.lock_waits.len()
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

    pub(super) fn config() -> Configuration {
        Configuration::local(3, 7000, 3, 6, std::path::Path::new("/nonexistent"))
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

    /// Coordinator ids stay unique when the CM restarts (a counter in
    /// memory alone would hand out ids whose transactions nodes still hold
    /// records for) and when a backup CM takes over in the same
    /// incarnation number as the failed CM.
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
