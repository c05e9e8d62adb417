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

/// One entry of the replicated log.
#[derive(Serialize, Deserialize)]
enum Command {
    /// Replace the configuration `expected` by `proposed_toml`.
    Cas {
        from: NodeId,
        req: u64,
        expected: ConfigId,
        proposed_toml: String,
    },
    /// Raise the time bound to at least `to_ns`.
    RaiseTimeBound { from: NodeId, req: u64, to_ns: u64 },
}

/// The register as a snapshot holds it: the configuration exactly as
/// proposed, and the time bound (global time never reaches it unless it was
/// raised first; see [`CoordMessage::RaiseTimeBound`]).
#[derive(Serialize, Deserialize)]
struct RegisterImage {
    config_toml: String,
    time_bound_ns: u64,
}

impl RegisterImage {
    fn encode(&self) -> Result<Vec<u8>, ServiceError> {
        bincode::serialize(self).map_err(|e| ServiceError::Corrupt(e.to_string()))
    }

    fn decode(bytes: &[u8]) -> Result<(Self, Configuration), ServiceError> {
        let image: RegisterImage =
            bincode::deserialize(bytes).map_err(|e| ServiceError::Corrupt(e.to_string()))?;
        let config = Configuration::from_toml(&image.config_toml)
            .map_err(|e| ServiceError::Corrupt(e.to_string()))?;
        Ok((image, config))
    }
}

/// The persisted form of a replica: protobuf bytes of raft-rs's types.
#[derive(Serialize, Deserialize)]
struct Persisted {
    hard: Vec<u8>,
    snapshot: Vec<u8>,
    entries: Vec<Vec<u8>>,
}

/// Raft storage kept in memory and persisted whole through
/// [`ServiceOutput::Persist`]: hard state, the last snapshot (whose data is
/// the configuration TOML as of its index) and the log after it.
struct RaftStore {
    hard: HardState,
    snapshot: Snapshot,
    entries: Vec<Entry>,
}

impl RaftStore {
    fn snap_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn first(&self) -> u64 {
        self.snap_index() + 1
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.snap_index(), |e| e.index)
    }

    fn append(&mut self, ents: &[Entry]) {
        let Some(first) = ents.first() else {
            return;
        };
        // Raft never rewrites applied (snapshotted) entries; entries from
        // `first.index` on are replaced.
        let keep = first.index.saturating_sub(self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
    }

    fn encode(&self) -> Result<Vec<u8>, ServiceError> {
        let enc = |m: &dyn protobuf::Message| {
            m.write_to_bytes()
                .map_err(|e| ServiceError::Corrupt(e.to_string()))
        };
        let p = Persisted {
            hard: enc(&self.hard)?,
            snapshot: enc(&self.snapshot)?,
            entries: self
                .entries
                .iter()
                .map(|e| enc(e))
                .collect::<Result<_, _>>()?,
        };
        bincode::serialize(&p).map_err(|e| ServiceError::Corrupt(e.to_string()))
    }

    fn decode(bytes: &[u8]) -> Result<Self, ServiceError> {
        let bad = |e: &dyn std::fmt::Display| ServiceError::Corrupt(e.to_string());
        let p: Persisted = bincode::deserialize(bytes).map_err(|e| bad(&e))?;
        let hard = HardState::parse_from_bytes(&p.hard).map_err(|e| bad(&e))?;
        let snapshot = Snapshot::parse_from_bytes(&p.snapshot).map_err(|e| bad(&e))?;
        let entries = p
            .entries
            .iter()
            .map(|b| Entry::parse_from_bytes(b).map_err(|e| bad(&e)))
            .collect::<Result<Vec<_>, _>>()?;
        let store = RaftStore {
            hard,
            snapshot,
            entries,
        };
        let contiguous = store
            .entries
            .iter()
            .enumerate()
            .all(|(i, e)| e.index == store.first() + i as u64);
        if !contiguous {
            return Err(ServiceError::Corrupt(
                "log entries are not contiguous".into(),
            ));
        }
        Ok(store)
    }
}

impl Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard.clone(),
            conf_state: self.snapshot.get_metadata().get_conf_state().clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let lo = (low - self.first()) as usize;
        let hi = (high - self.first()) as usize;
        let mut ents = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snap_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        Ok(self.snapshot.clone())
    }
}

fn raft_id(n: NodeId) -> u64 {
    n.0 as u64 + 1
}

fn node_of(raft_id: u64) -> Option<NodeId> {
    raft_id
        .checked_sub(1)
        .and_then(|i| u32::try_from(i).ok())
        .map(NodeId)
}

/// One replica of the coordination service, hosted by a node process.
pub struct ServiceReplica {
    me: NodeId,
    group: Vec<NodeId>,
    params: RaftParams,
    raw: RawNode<RaftStore>,
    /// The register: the configuration as of the last applied entry.
    current: Configuration,
    /// `current` as TOML, exactly as proposed (answers and snapshots).
    current_toml: String,
    /// The register's time bound, global ns (FaRMv2 §4.3 across restarts:
    /// no clock master hands out time at or past it).
    time_bound_ns: u64,
    applied: u64,
    /// Requests this replica proposed, answered when applied: (requester,
    /// its request number) → when proposed, ns.
    waiting: BTreeMap<(NodeId, u64), u64>,
    next_tick_ns: Option<u64>,
    swaps: u64,
    out: Vec<ServiceOutput>,
}

impl std::fmt::Debug for ServiceReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceReplica")
            .field("me", &self.me)
            .field("current", &self.current.id())
            .field("applied", &self.applied)
            .field("leader", &self.leader())
            .finish()
    }
}

impl ServiceReplica {
    /// The replica of node `me`, starting from its persisted state, or from
    /// `initial` (the cluster's first configuration, identical on every
    /// replica) when there is none.
    ///
    /// Errors: [`ServiceError::NotAReplica`] if `me` is not in `initial`'s
    /// coordination group; `Corrupt` or `Raft` if the state is unusable.
    pub fn new(
        initial: &Configuration,
        me: NodeId,
        persisted: Option<&[u8]>,
    ) -> Result<Self, ServiceError> {
        let group = initial.coordination_group();
        let rank = group
            .iter()
            .position(|n| *n == me)
            .ok_or(ServiceError::NotAReplica(me))?;
        let params = RaftParams::from_config(initial);
        let store = match persisted {
            Some(bytes) => RaftStore::decode(bytes)?,
            None => {
                let mut snapshot = Snapshot::default();
                let config_toml = initial
                    .to_toml()
                    .map_err(|e| ServiceError::Corrupt(e.to_string()))?;
                let image = RegisterImage {
                    config_toml,
                    time_bound_ns: 0,
                };
                snapshot.set_data(image.encode()?.into());
                let mut cs = ConfState::default();
                cs.set_voters(group.iter().map(|n| raft_id(*n)).collect());
                snapshot.mut_metadata().set_conf_state(cs);
                RaftStore {
                    hard: HardState::default(),
                    snapshot,
                    entries: Vec::new(),
                }
            }
        };
        let (image, current) = RegisterImage::decode(store.snapshot.get_data())?;
        let applied = store.snap_index();
        let election = params.election_ticks + 2 * rank;
        let cfg = raft::Config {
            id: raft_id(me),
            election_tick: params.election_ticks,
            heartbeat_tick: params.heartbeat_ticks,
            min_election_tick: election,
            max_election_tick: election + 1,
            applied,
            pre_vote: true,
            check_quorum: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 64,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&cfg, store, &logger)?;
        Ok(ServiceReplica {
            me,
            group,
            params,
            raw,
            current,
            current_toml: image.config_toml,
            time_bound_ns: image.time_bound_ns,
            applied,
            waiting: BTreeMap::new(),
            next_tick_ns: None,
            swaps: 0,
            out: Vec::new(),
        })
    }

    /// The configuration the register holds (as applied here).
    pub fn current(&self) -> &Configuration {
        &self.current
    }

    /// The register's time bound as applied here, global ns.
    pub fn time_bound_ns(&self) -> u64 {
        self.time_bound_ns
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<NodeId> {
        match self.raw.raft.leader_id {
            0 => None,
            id => node_of(id),
        }
    }

    /// True if this replica leads the group.
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The index of the last snapshot the log was compacted into.
    pub fn snapshot_index(&self) -> u64 {
        self.raw.store().snap_index()
    }

    /// Swaps this replica applied since it started.
    pub fn swaps(&self) -> u64 {
        self.swaps
    }

    /// When the next Raft tick is due, ns.
    pub fn next_wake_ns(&self) -> Option<u64> {
        self.next_tick_ns
    }

    /// Advance Raft's logical clock by the ticks elapsed up to `now`.
    pub fn tick(&mut self, now: u64) {
        let next = *self.next_tick_ns.get_or_insert(now + self.params.tick_ns);
        if now >= next {
            // Several missed ticks count as one: a stalled host must not
            // fire an election burst on waking.
            self.raw.tick();
            self.shed_leadership();
            self.next_tick_ns = Some(now + self.params.tick_ns);
            let horizon = now.saturating_sub(self.params.request_timeout_ns());
            self.waiting.retain(|_, since| *since >= horizon);
        }
        self.on_ready(now);
    }

    /// A leader on the CM's node hands leadership to a caught-up replica
    /// on another node, so that killing the CM does not also kill the
    /// service's leader: the CAS of the CM's successor then needs no Raft
    /// election first (it cost one election timeout, about 100 ms, in
    /// every CM failover on real processes). The first such replica in
    /// group order is chosen, so runs replay exactly.
    ///
    /// Only to a member of the stored configuration that fills no region:
    /// a node just removed, or added back empty and filling, is busy
    /// (freeing its old replicas, taking in new ones) though it answers
    /// Raft. Leadership handed to such a node (the first in group order
    /// after a CM failover on a 1M-subscriber load) committed the new
    /// clock master's time-bound raises seconds late, and clients could
    /// not sync meanwhile. Without a healthy target the leader stays.
    ///
    /// For the same reason a leader that is itself not healthy (the old
    /// CM, woken from a stall, can win an election while the new CM is
    /// busy) hands leadership on: to a healthy replica other than the
    /// CM's, else to the CM's.
    fn shed_leadership(&mut self) {
        let raft = &self.raw.raft;
        if raft.state != StateRole::Leader || raft.lead_transferee.is_some() {
            return;
        }
        let cm = self.current.cm();
        let regions = self.current.regions();
        let healthy = |n: NodeId| {
            self.current.is_member(n) && !regions.iter().any(|r| r.filling.contains(&n))
        };
        let unhealthy = !healthy(self.me);
        if cm != self.me && !unhealthy {
            return;
        }
        let last = raft.raft_log.last_index();
        let ready = |n: &NodeId| {
            *n != self.me
                && healthy(*n)
                && raft
                    .prs()
                    .get(raft_id(*n))
                    .is_some_and(|p| p.matched == last && p.recent_active)
        };
        let target = self
            .group
            .iter()
            .copied()
            .find(|n| *n != cm && ready(n))
            .or_else(|| self.group.iter().copied().find(|n| unhealthy && ready(n)));
        if let Some(t) = target {
            self.raw.transfer_leader(raft_id(t));
        }
    }

    /// A message of the service.
    pub fn on_message(&mut self, now: u64, msg: CoordMessage) {
        match msg {
            CoordMessage::Raft { from, bytes } => {
                if !self.group.contains(&from) || from == self.me {
                    return;
                }
                let Ok(m) = Message::parse_from_bytes(&bytes) else {
                    return;
                };
                if node_of(m.from) != Some(from) || m.to != raft_id(self.me) {
                    return;
                }
                // A message raft-rs refuses (stale, from an unknown peer)
                // is dropped, as the network might have dropped it.
                let _ = self.raw.step(m);
            }
            CoordMessage::Cas {
                from,
                req,
                expected,
                proposed_toml,
            } => self.on_cas(now, from, req, expected, proposed_toml),
            CoordMessage::RaiseTimeBound { from, req, to_ns } => {
                if !self.is_leader() {
                    let leader = self.leader();
                    self.send(from, CoordMessage::NotLeader { req, leader });
                } else if to_ns <= self.time_bound_ns {
                    // Already that high: the bound only grows, so this
                    // answer stays true without a log entry. (A deposed
                    // leader may answer from an older state: its bound and
                    // CM were stored together then, which is all a master
                    // needs; see `CasClient`.)
                    let bound_ns = self.time_bound_ns;
                    let cm = self.current.cm();
                    self.send(from, CoordMessage::TimeBound { req, bound_ns, cm });
                } else {
                    self.propose(now, from, req, Command::RaiseTimeBound { from, req, to_ns });
                }
            }
            // Any replica answers from its applied state: every value it
            // applied was committed, so stored (a stale one only delays
            // the reader, who asks again).
            CoordMessage::Read { from, req } => self.reply(from, req, false),
            // Answers go to CasClient, not here.
            CoordMessage::CasReply { .. }
            | CoordMessage::NotLeader { .. }
            | CoordMessage::TimeBound { .. } => {}
        }
        self.on_ready(now);
    }

    fn on_cas(
        &mut self,
        now: u64,
        from: NodeId,
        req: u64,
        expected: ConfigId,
        proposed_toml: String,
    ) {
        if !self.is_leader() {
            let leader = self.leader();
            self.send(from, CoordMessage::NotLeader { req, leader });
            return;
        }
        if expected != self.current.id() {
            // Decided already: no need to go through the log (the register
            // only grows, so this answer stays true).
            self.reply(from, req, false);
            return;
        }
        let cmd = Command::Cas {
            from,
            req,
            expected,
            proposed_toml,
        };
        self.propose(now, from, req, cmd);
    }

    /// Propose `cmd` (this replica leads) and remember to answer it.
    fn propose(&mut self, now: u64, from: NodeId, req: u64, cmd: Command) {
        let Ok(data) = bincode::serialize(&cmd) else {
            return;
        };
        if self.raw.propose(Vec::new(), data).is_ok() {
            if self.waiting.len() >= MAX_WAITING {
                if let Some(oldest) = self
                    .waiting
                    .iter()
                    .min_by_key(|(k, since)| (**since, **k))
                    .map(|(k, _)| *k)
                {
                    self.waiting.remove(&oldest);
                }
            }
            self.waiting.insert((from, req), now);
        } else {
            self.send(
                from,
                CoordMessage::NotLeader {
                    req,
                    leader: self.leader(),
                },
            );
        }
    }

    fn reply(&mut self, to: NodeId, req: u64, swapped: bool) {
        let current_toml = self.current_toml.clone();
        let time_bound_ns = self.time_bound_ns;
        let cm = self.current.cm();
        self.send(
            to,
            CoordMessage::CasReply {
                req,
                swapped,
                current_toml,
                time_bound_ns,
                cm,
            },
        );
    }

    fn send(&mut self, to: NodeId, msg: CoordMessage) {
        self.out.push(ServiceOutput::Send { to, msg });
    }

    fn send_raft(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            let (Some(to), Ok(bytes)) = (node_of(m.to), m.write_to_bytes()) else {
                continue;
            };
            let from = self.me;
            self.send(to, CoordMessage::Raft { from, bytes });
        }
    }

    fn apply(&mut self, entries: Vec<Entry>) {
        for e in entries {
            self.applied = e.index;
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                continue;
            }
            let Ok(cmd) = bincode::deserialize::<Command>(&e.data) else {
                continue;
            };
            match cmd {
                Command::Cas {
                    from,
                    req,
                    expected,
                    proposed_toml,
                } => {
                    let proposed = Configuration::from_toml(&proposed_toml).ok();
                    let swapped = match proposed {
                        Some(p) if expected == self.current.id() && p.id().0 == expected.0 + 1 => {
                            self.current = p;
                            self.current_toml = proposed_toml;
                            self.swaps += 1;
                            true
                        }
                        _ => false,
                    };
                    if self.waiting.remove(&(from, req)).is_some() {
                        self.reply(from, req, swapped);
                    }
                }
                Command::RaiseTimeBound { from, req, to_ns } => {
                    self.time_bound_ns = self.time_bound_ns.max(to_ns);
                    if self.waiting.remove(&(from, req)).is_some() {
                        let bound_ns = self.time_bound_ns;
                        let cm = self.current.cm();
                        self.send(from, CoordMessage::TimeBound { req, bound_ns, cm });
                    }
                }
            }
        }
    }

    /// Compact the log into a snapshot of the register once enough
    /// applied entries pile up. Returns true if it did.
    fn maybe_compact(&mut self) -> bool {
        let store = self.raw.store();
        if self.applied < store.first() + COMPACT_ENTRIES {
            return false;
        }
        let Ok(term) = store.term(self.applied) else {
            return false;
        };
        let image = RegisterImage {
            config_toml: self.current_toml.clone(),
            time_bound_ns: self.time_bound_ns,
        };
        let Ok(data) = image.encode() else {
            return false;
        };
        let applied = self.applied;
        let store = self.raw.mut_store();
        let conf = store.snapshot.get_metadata().get_conf_state().clone();
        let mut snap = Snapshot::default();
        snap.set_data(data.into());
        let meta = snap.mut_metadata();
        meta.index = applied;
        meta.term = term;
        meta.set_conf_state(conf);
        let drop = (applied + 1 - store.first()) as usize;
        store.entries.drain(..drop.min(store.entries.len()));
        store.snapshot = snap;
        true
    }

    fn persist(&mut self) {
        match self.raw.store().encode() {
            Ok(bytes) => self.out.push(ServiceOutput::Persist(bytes)),
            // Raft's safety rests on this state surviving; a replica that
            // cannot write it must stop, as on a failed disk.
            Err(e) => panic!(
                "coordination replica {} cannot encode its state: {e}",
                self.me
            ),
        }
    }

    /// raft-rs's `Ready` loop: send, persist, then send what needed the
    /// persisted state, apply, advance.
    fn on_ready(&mut self, _now: u64) {
        if !self.raw.has_ready() {
            return;
        }
        let mut rd = self.raw.ready();
        self.send_raft(rd.take_messages());
        let mut dirty = false;
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            if let Ok((image, c)) = RegisterImage::decode(snap.get_data()) {
                if c.id() >= self.current.id() {
                    self.current = c;
                    self.current_toml = image.config_toml;
                }
                self.time_bound_ns = self.time_bound_ns.max(image.time_bound_ns);
            }
            let store = self.raw.mut_store();
            let idx = snap.get_metadata().index;
            store.entries.retain(|e| e.index > idx);
            if store.entries.first().is_some_and(|e| e.index != idx + 1) {
                store.entries.clear();
            }
            store.hard.term = store.hard.term.max(snap.get_metadata().term);
            store.hard.commit = store.hard.commit.max(idx);
            store.snapshot = snap;
            self.applied = self.applied.max(idx);
            dirty = true;
        }
        let committed = rd.take_committed_entries();
        self.apply(committed);
        if !rd.entries().is_empty() {
            self.raw.mut_store().append(rd.entries());
            dirty = true;
        }
        if let Some(hs) = rd.hs() {
            self.raw.mut_store().hard = hs.clone();
            dirty = true;
        }
        if dirty {
            self.persist();
        }
        self.send_raft(rd.take_persisted_messages());
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().hard.commit = commit;
        }
        self.send_raft(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(committed);
        self.raw.advance_apply();
        if self.maybe_compact() || light.commit_index().is_some() {
            self.persist();
        }
    }

    /// Outputs produced so far, in order.
    pub fn drain(&mut self) -> Vec<ServiceOutput> {
        std::mem::take(&mut self.out)
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        let store = self.raw.store();
        assert!(
            self.applied.saturating_sub(store.snap_index()) <= COMPACT_ENTRIES,
            "log not compacted"
        );
        assert!(
            store
                .entries
                .iter()
                .enumerate()
                .all(|(i, e)| e.index == store.first() + i as u64),
            "raft log has a gap"
        );
        assert!(self.waiting.len() <= MAX_WAITING);
        assert!(
            self.applied >= store.snap_index(),
            "applied behind the snapshot"
        );
    }
}

/// A compare-and-swap in flight from this node.
#[derive(Clone, Debug)]
struct CasRequest {
    req: u64,
    expected: ConfigId,
    proposed_toml: String,
    target: usize,
    deadline_ns: u64,
    tries: u32,
}

/// One request to the service in flight from this node (a time-bound
/// raise or a read): its id, the group member it goes to (index), when it
/// times out (ns), and how often it was sent.
#[derive(Clone, Debug)]
struct Attempt {
    req: u64,
    target: usize,
    deadline_ns: u64,
    tries: u32,
}

impl Attempt {
    /// Count one more send at `now`: the destination, if `target` names one.
    fn arm(&mut self, group: &[NodeId], now: u64, timeout_ns: u64) -> Option<NodeId> {
        let to = *group.get(self.target)?;
        self.deadline_ns = now + timeout_ns;
        self.tries += 1;
        Some(to)
    }

    /// At a tick: `None` while not timed out; `Some(false)` to give up
    /// after `max_tries`; else `Some(true)` with the next member targeted.
    fn timed_out(&mut self, now: u64, max_tries: usize, group_len: usize) -> Option<bool> {
        if now < self.deadline_ns {
            return None;
        }
        if self.tries as usize >= max_tries {
            return Some(false);
        }
        self.target = (self.target + 1) % group_len.max(1);
        Some(true)
    }
}

/// A time-bound raise in flight from this node.
#[derive(Clone, Debug)]
struct BoundRequest {
    to_ns: u64,
    at: Attempt,
}

/// What [`CasClient`] asks of its node.
#[derive(Clone, Debug, PartialEq)]
pub enum CasOutput {
    /// The answer to [`CasClient::read`]: a configuration the service
    /// stored.
    Current(Box<Configuration>),
    /// Send `msg` to group member `to`.
    Send {
        /// Destination.
        to: NodeId,
        /// The message.
        msg: CoordMessage,
    },
    /// The CAS is decided: `Ok` if this node's proposal is the
    /// configuration now, else the service's configuration (or, after
    /// giving up, the expected one back).
    Done(Result<(), Box<Configuration>>),
    /// The service stored this time bound, global ns, together with a
    /// configuration whose CM is `cm` (from a CAS answer or a raise's).
    TimeBound {
        /// The bound, global ns.
        bound_ns: u64,
        /// The CM of the configuration stored with it.
        cm: NodeId,
    },
}

/// The requesting side of the service, on every node (FaRM §5.2 step 3).
#[derive(Debug)]
pub struct CasClient {
    me: NodeId,
    group: Vec<NodeId>,
    params: RaftParams,
    leader_hint: Option<NodeId>,
    next_req: u64,
    pending: Option<(CasRequest, Configuration)>,
    bound: Option<BoundRequest>,
    reading: Option<Attempt>,
    out: Vec<CasOutput>,
}

impl CasClient {
    /// The client of node `me` for `config`'s coordination group.
    pub fn new(config: &Configuration, me: NodeId) -> Self {
        CasClient {
            me,
            group: config.coordination_group(),
            params: RaftParams::from_config(config),
            leader_hint: None,
            next_req: 1,
            pending: None,
            bound: None,
            reading: None,
            out: Vec::new(),
        }
    }

    /// True if an outside service answers instead (no group configured).
    pub fn is_external(&self) -> bool {
        self.group.is_empty()
    }

    /// The leader as this node's own replica knows it (if it hosts one):
    /// fresher than the hint from the last answer, which a leadership
    /// transfer or an election may have outdated.
    pub fn hint_leader(&mut self, leader: Option<NodeId>) {
        if let Some(l) = leader.filter(|l| self.group.contains(l)) {
            self.leader_hint = Some(l);
        }
    }

    /// Ask the service to replace `expected` by `proposed`. A request
    /// still in flight is abandoned (its answer is ignored).
    pub fn start(&mut self, now: u64, expected: ConfigId, proposed: Configuration) {
        let proposed_toml = match proposed.to_toml() {
            Ok(t) => t,
            Err(_) => {
                self.out.push(CasOutput::Done(Err(Box::new(proposed))));
                return;
            }
        };
        let target = self
            .leader_hint
            .and_then(|l| self.group.iter().position(|n| *n == l))
            .unwrap_or(0);
        let req = self.next_req;
        self.next_req += 1;
        self.pending = Some((
            CasRequest {
                req,
                expected,
                proposed_toml,
                target,
                deadline_ns: now,
                tries: 0,
            },
            proposed,
        ));
        self.send_pending(now);
    }

    /// Ask the service to raise its time bound to at least `to_ns` (global
    /// ns); answered by [`CasOutput::TimeBound`]. A raise in flight to at
    /// least as much is kept; a lower one is replaced. A raise that finds
    /// no leader is dropped after the same number of tries as a CAS (the
    /// clock master asks again).
    pub fn raise_time_bound(&mut self, now: u64, to_ns: u64) {
        if self.bound.as_ref().is_some_and(|b| b.to_ns >= to_ns) {
            return;
        }
        let at = self.new_attempt(now);
        self.bound = Some(BoundRequest { to_ns, at });
        self.send_bound(now);
    }

    /// Ask a replica for the configuration the service stores; answered
    /// by [`CasOutput::Current`]. Any replica answers (no leader needed);
    /// a read in flight is kept; one that goes unanswered is dropped after
    /// the same number of tries as a CAS (the caller asks again).
    pub fn read(&mut self, now: u64) {
        if self.reading.is_some() || self.group.is_empty() {
            return;
        }
        self.reading = Some(self.new_attempt(now));
        self.send_read(now);
    }

    /// A new request id, aimed at the last known leader (else the first
    /// member).
    fn new_attempt(&mut self, now: u64) -> Attempt {
        let target = self
            .leader_hint
            .and_then(|l| self.group.iter().position(|n| *n == l))
            .unwrap_or(0);
        let req = self.next_req;
        self.next_req += 1;
        Attempt {
            req,
            target,
            deadline_ns: now,
            tries: 0,
        }
    }

    fn send_read(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some(r) = &mut self.reading else {
            return;
        };
        let Some(to) = r.arm(&self.group, now, timeout) else {
            return;
        };
        let msg = CoordMessage::Read {
            from: self.me,
            req: r.req,
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    /// The bound a raise in flight asks for, global ns.
    pub fn raising_time_bound_to(&self) -> Option<u64> {
        self.bound.as_ref().map(|b| b.to_ns)
    }

    fn send_bound(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some(b) = &mut self.bound else {
            return;
        };
        let Some(to) = b.at.arm(&self.group, now, timeout) else {
            return;
        };
        let msg = CoordMessage::RaiseTimeBound {
            from: self.me,
            req: b.at.req,
            to_ns: b.to_ns,
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    fn send_pending(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some((r, _)) = &mut self.pending else {
            return;
        };
        let Some(&to) = self.group.get(r.target) else {
            return;
        };
        r.deadline_ns = now + timeout;
        r.tries += 1;
        let msg = CoordMessage::Cas {
            from: self.me,
            req: r.req,
            expected: r.expected,
            proposed_toml: r.proposed_toml.clone(),
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    /// An answer from the service.
    pub fn on_message(&mut self, now: u64, msg: &CoordMessage) {
        if let CoordMessage::CasReply {
            time_bound_ns, cm, ..
        } = msg
        {
            // Any answer, even a late one, tells a bound that is stored.
            self.out.push(CasOutput::TimeBound {
                bound_ns: *time_bound_ns,
                cm: *cm,
            });
        }
        if let (
            Some(r),
            CoordMessage::CasReply {
                req, current_toml, ..
            },
        ) = (&self.reading, msg)
        {
            if *req == r.req {
                self.reading = None;
                if let Ok(c) = Configuration::from_toml(current_toml) {
                    self.out.push(CasOutput::Current(Box::new(c)));
                }
                return;
            }
        }
        if let Some(b) = &mut self.bound {
            match msg {
                CoordMessage::TimeBound { req, bound_ns, cm } if *req == b.at.req => {
                    if let Some(l) = self.group.get(b.at.target) {
                        self.leader_hint = Some(*l);
                    }
                    self.bound = None;
                    self.out.push(CasOutput::TimeBound {
                        bound_ns: *bound_ns,
                        cm: *cm,
                    });
                    return;
                }
                CoordMessage::NotLeader { req, leader } if *req == b.at.req => {
                    let next = leader.and_then(|l| self.group.iter().position(|n| *n == l));
                    match next {
                        Some(i) if i != b.at.target => {
                            b.at.target = i;
                            self.leader_hint = *leader;
                            self.send_bound(now);
                        }
                        _ => {
                            b.at.target = (b.at.target + 1) % self.group.len().max(1);
                            b.at.deadline_ns =
                                now + self.params.heartbeat_ticks as u64 * self.params.tick_ns;
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
        if let CoordMessage::TimeBound { bound_ns, cm, .. } = msg {
            // A late answer to a replaced raise: still a stored bound.
            self.out.push(CasOutput::TimeBound {
                bound_ns: *bound_ns,
                cm: *cm,
            });
            return;
        }
        let Some((r, proposed)) = &mut self.pending else {
            return;
        };
        match msg {
            CoordMessage::CasReply {
                req,
                swapped,
                current_toml,
                ..
            } if *req == r.req => {
                let mine = *swapped || *current_toml == r.proposed_toml;
                let result = if mine {
                    Ok(())
                } else {
                    match Configuration::from_toml(current_toml) {
                        Ok(c) => Err(Box::new(c)),
                        Err(_) => Err(Box::new(proposed.clone())),
                    }
                };
                if let Some(l) = self.group.get(r.target) {
                    self.leader_hint = Some(*l);
                }
                self.pending = None;
                self.out.push(CasOutput::Done(result));
            }
            CoordMessage::NotLeader { req, leader } if *req == r.req => {
                match leader.and_then(|l| self.group.iter().position(|n| *n == l)) {
                    Some(i) if i != r.target => {
                        r.target = i;
                        self.leader_hint = *leader;
                        self.send_pending(now);
                    }
                    _ => {
                        // No leader yet (an election is on): try the next
                        // replica after a heartbeat.
                        r.target = (r.target + 1) % self.group.len().max(1);
                        r.deadline_ns =
                            now + self.params.heartbeat_ticks as u64 * self.params.tick_ns;
                    }
                }
            }
            _ => {}
        }
    }

    /// Resend after a timeout, or give up (the reconfiguration starts over).
    pub fn tick(&mut self, now: u64, expected_config: &Configuration) {
        let tries = 4 * self.group.len().max(1);
        let n = self.group.len();
        match self
            .bound
            .as_mut()
            .and_then(|b| b.at.timed_out(now, tries, n))
        {
            Some(true) => self.send_bound(now),
            Some(false) => self.bound = None,
            None => {}
        }
        match self
            .reading
            .as_mut()
            .and_then(|r| r.timed_out(now, tries, n))
        {
            Some(true) => self.send_read(now),
            Some(false) => self.reading = None,
            None => {}
        }
        let Some((r, _)) = &mut self.pending else {
            return;
        };
        if now < r.deadline_ns {
            return;
        }
        if r.tries as usize >= 4 * self.group.len().max(1) {
            self.pending = None;
            self.out
                .push(CasOutput::Done(Err(Box::new(expected_config.clone()))));
            return;
        }
        r.target = (r.target + 1) % self.group.len().max(1);
        self.send_pending(now);
    }

    /// When the pending request times out, ns.
    pub fn next_wake_ns(&self) -> Option<u64> {
        let cas = self.pending.as_ref().map(|(r, _)| r.deadline_ns);
        let bound = self.bound.as_ref().map(|b| b.at.deadline_ns);
        let read = self.reading.as_ref().map(|r| r.deadline_ns);
        [cas, bound, read].into_iter().flatten().min()
    }

    /// Outputs so far, in order.
    pub fn drain(&mut self) -> Vec<CasOutput> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, VecDeque};

    const MS: u64 = 1_000_000;

    /// Three replicas and a CAS client per node, on a network that can cut
    /// nodes off. Messages are delivered in order.
    struct Net {
        replicas: Vec<ServiceReplica>,
        clients: Vec<CasClient>,
        queue: VecDeque<(NodeId, NodeId, CoordMessage)>,
        cut: BTreeSet<NodeId>,
        disks: Vec<Option<Vec<u8>>>,
        done: Vec<Vec<Result<(), Box<Configuration>>>>,
        bounds: Vec<Vec<u64>>,
        reads: Vec<Vec<ConfigId>>,
        now: u64,
    }

    fn config() -> Configuration {
        let mut c = Configuration::local(3, 7000, 3, 3, std::path::Path::new("/tmp/raft"));
        c.coordination.tick_ms = 1;
        // The timelines below are written for a 10-tick election.
        c.coordination.election_ticks = 10;
        c
    }

    impl Net {
        fn new() -> Self {
            let c = config();
            Net {
                replicas: (0..3)
                    .map(|i| ServiceReplica::new(&c, NodeId(i), None).unwrap())
                    .collect(),
                clients: (0..3).map(|i| CasClient::new(&c, NodeId(i))).collect(),
                queue: VecDeque::new(),
                cut: BTreeSet::new(),
                disks: vec![None; 3],
                done: vec![Vec::new(); 3],
                bounds: vec![Vec::new(); 3],
                reads: vec![Vec::new(); 3],
                now: 0,
            }
        }

        fn collect(&mut self) {
            for i in 0..3 {
                for o in self.replicas[i].drain() {
                    match o {
                        ServiceOutput::Send { to, msg } => {
                            self.queue.push_back((NodeId(i as u32), to, msg))
                        }
                        ServiceOutput::Persist(b) => self.disks[i] = Some(b),
                    }
                }
                for o in self.clients[i].drain() {
                    match o {
                        CasOutput::Send { to, msg } => {
                            self.queue.push_back((NodeId(i as u32), to, msg))
                        }
                        CasOutput::Done(r) => self.done[i].push(r),
                        CasOutput::TimeBound { bound_ns, .. } => self.bounds[i].push(bound_ns),
                        CasOutput::Current(c) => self.reads[i].push(c.id()),
                    }
                }
            }
        }

        /// Run `ms` milliseconds of ticks and deliveries.
        fn run(&mut self, ms: u64) {
            let expected = config();
            for _ in 0..ms * 4 {
                self.now += MS / 4;
                for i in 0..3 {
                    self.replicas[i].tick(self.now);
                    self.clients[i].tick(self.now, &expected);
                }
                self.collect();
                while let Some((from, to, msg)) = self.queue.pop_front() {
                    if self.cut.contains(&from) != self.cut.contains(&to) {
                        continue;
                    }
                    let t = to.0 as usize;
                    match msg {
                        CoordMessage::Raft { .. }
                        | CoordMessage::Cas { .. }
                        | CoordMessage::Read { .. }
                        | CoordMessage::RaiseTimeBound { .. } => {
                            self.replicas[t].on_message(self.now, msg)
                        }
                        m => self.clients[t].on_message(self.now, &m),
                    }
                    self.collect();
                }
            }
        }

        fn leader(&self) -> Option<usize> {
            let leaders: Vec<usize> = (0..3)
                .filter(|i| self.replicas[*i].is_leader() && !self.cut.contains(&NodeId(*i as u32)))
                .collect();
            leaders.first().copied()
        }
    }

    fn successor(by: u32) -> Configuration {
        let c = config();
        let alive = [0, 1, 2].iter().map(|i| NodeId(*i)).collect();
        c.remap(&alive, NodeId(by)).unwrap()
    }

    #[test]
    fn exactly_one_of_two_racing_swaps_wins_and_the_loser_learns_the_winner() {
        let mut net = Net::new();
        net.run(40);
        let leader = net.leader().expect("a leader within 40 ms");
        assert_eq!(
            leader, 1,
            "rank 0 campaigns first (deterministic timeouts), then hands \
             leadership off the CM's node (0) to the first caught-up replica"
        );
        let (a, b) = (successor(1), successor(2));
        net.clients[1].start(net.now, ConfigId(1), a.clone());
        net.clients[2].start(net.now, ConfigId(1), b);
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        assert_eq!(net.done[2].len(), 1);
        let lost = net.done[2][0].clone().unwrap_err();
        assert_eq!(lost.id(), ConfigId(2));
        assert_eq!(
            lost.cm(),
            a.cm(),
            "the loser learns the winner's configuration"
        );
        for r in &net.replicas {
            assert_eq!(
                r.current().id(),
                ConfigId(2),
                "every replica applied the swap"
            );
            r.check_invariants();
        }
    }

    /// A read returns the stored configuration, from a follower too (the
    /// group's replicas here; a node restored from disk that reads it may
    /// host no replica).
    #[test]
    fn a_read_returns_the_stored_configuration_from_any_replica() {
        let mut net = Net::new();
        net.run(40);
        net.clients[1].start(net.now, ConfigId(1), successor(1));
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        let leader = net.leader().unwrap();
        let follower = (leader + 1) % 3;
        // Point the reader at the follower: it answers without the leader.
        net.clients[2].hint_leader(Some(NodeId(follower as u32)));
        net.cut.insert(NodeId(leader as u32));
        net.clients[2].read(net.now);
        net.run(5);
        assert_eq!(net.reads[2], vec![ConfigId(2)]);
    }

    #[test]
    fn a_minority_cannot_swap_and_the_majority_elects_a_new_leader() {
        let mut net = Net::new();
        net.run(40);
        let old = net.leader().expect("a leader within 40 ms");
        let other = (old + 1) % 3;
        // The leader is cut off with its own client.
        net.cut.insert(NodeId(old as u32));
        net.clients[old].start(net.now, ConfigId(1), successor(old as u32));
        net.run(200);
        assert_eq!(net.done[old].len(), 1, "the minority's CAS gives up");
        assert!(net.done[old][0].is_err());
        assert!(
            !net.replicas[old].is_leader(),
            "check-quorum: a cut-off leader steps down"
        );
        assert_eq!(net.replicas[old].current().id(), ConfigId(1));
        let l = net.leader().expect("the majority elects a leader");
        assert_ne!(l, old);
        net.clients[other].start(net.now, ConfigId(1), successor(other as u32));
        net.run(30);
        assert_eq!(net.done[other], vec![Ok(())]);
        // Healed, the old leader catches up.
        net.cut.clear();
        net.run(60);
        assert_eq!(net.replicas[old].current().id(), ConfigId(2));
    }

    #[test]
    fn the_leader_moves_off_the_cms_node_and_follows_a_cm_change() {
        let mut net = Net::new();
        net.run(40);
        assert_eq!(config().cm(), NodeId(0));
        assert_eq!(net.leader(), Some(1), "off node 0, the CM");
        // Node 1 becomes the CM: leadership moves again, to node 0 (the
        // first caught-up replica in group order that is not node 1).
        net.clients[2].start(net.now, ConfigId(1), successor(1));
        net.run(40);
        assert_eq!(net.done[2], vec![Ok(())]);
        assert_eq!(net.replicas[1].current().cm(), NodeId(1));
        assert_eq!(net.leader(), Some(0));
        // Killing the CM's node now leaves the service its leader: a CAS
        // succeeds at once, with no election.
        net.cut.insert(NodeId(1));
        let next = net.replicas[0]
            .current()
            .remap(&[NodeId(0), NodeId(2)].into_iter().collect(), NodeId(0));
        let hint = net.replicas[2].leader();
        net.clients[2].hint_leader(hint);
        net.clients[2].start(net.now, ConfigId(2), next.unwrap());
        net.run(5);
        assert_eq!(net.done[2].len(), 2, "answered within 5 ms");
        assert_eq!(net.done[2][1], Ok(()));
    }

    /// After a CM change the leader moves only to a healthy replica: not
    /// to a node the stored configuration removed, nor to one it added
    /// back empty (filling), though both answer Raft and are caught up.
    #[test]
    fn the_leader_moves_only_to_a_member_that_fills_no_region() {
        let mut net = Net::new();
        net.run(40);
        assert_eq!(net.leader(), Some(1), "off node 0, the CM");
        let alive = |ids: &[u32]| ids.iter().map(|i| NodeId(*i)).collect();
        // Node 1 becomes the CM and node 0 is removed: leadership goes to
        // node 2, not to node 0 (first in group order).
        let without_0 = config().remap(&alive(&[1, 2]), NodeId(1)).unwrap();
        assert!(!without_0.is_member(NodeId(0)));
        net.clients[1].start(net.now, ConfigId(1), without_0.clone());
        net.run(40);
        assert_eq!(net.done[1], vec![Ok(())]);
        assert_eq!(net.leader(), Some(2), "not to the removed node 0");
        // Node 2 becomes the CM with node 0 back, filling: node 1 leads.
        let back = without_0.remap(&alive(&[0, 1, 2]), NodeId(2)).unwrap();
        assert!(back.is_member(NodeId(0)));
        assert!(back
            .regions()
            .iter()
            .any(|r| r.filling.contains(&NodeId(0))));
        net.clients[2].start(net.now, ConfigId(2), back);
        net.run(40);
        assert_eq!(net.done[2], vec![Ok(())]);
        assert_eq!(net.leader(), Some(1), "not to node 0, filling");
        // Node 0, filling, wins leadership anyway (here: handed to it): it
        // hands it on to a healthy replica that is not the CM's, node 1.
        net.replicas[1].raw.transfer_leader(raft_id(NodeId(0)));
        net.collect();
        for _ in 0..40 {
            net.run(1);
            if net.leader() == Some(0) {
                break;
            }
        }
        assert_eq!(net.leader(), Some(0), "the transfer to node 0 happened");
        net.run(40);
        assert_eq!(net.leader(), Some(1), "node 0 does not keep it");
    }

    #[test]
    fn the_time_bound_is_raised_replicated_survives_restarts_and_never_drops() {
        let mut net = Net::new();
        net.run(40);
        let leader = net.leader().expect("a leader within 40 ms");
        net.clients[0].raise_time_bound(net.now, 5_000);
        net.run(10);
        assert_eq!(net.bounds[0].last(), Some(&5_000), "the raise is answered");
        assert_eq!(net.clients[0].raising_time_bound_to(), None, "and done");
        // A lower raise is answered with the stored, higher bound.
        net.clients[2].raise_time_bound(net.now, 3_000);
        net.run(10);
        assert_eq!(net.bounds[2].last(), Some(&5_000));
        // A CAS answer carries the bound too (a new CM starts above it).
        net.clients[1].start(net.now, ConfigId(1), successor(1));
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        assert_eq!(net.bounds[1].last(), Some(&5_000));
        // The leader restarts from its disk: the bound is still there, on
        // every replica.
        let disk = net.disks[leader].clone().expect("persisted");
        net.replicas[leader] =
            ServiceReplica::new(&config(), NodeId(leader as u32), Some(&disk)).unwrap();
        net.run(60);
        for r in &net.replicas {
            assert_eq!(r.time_bound_ns(), 5_000);
            r.check_invariants();
        }
        net.clients[0].raise_time_bound(net.now, 9_000);
        net.run(20);
        assert_eq!(net.bounds[0].last(), Some(&9_000));
        assert!(
            net.bounds.iter().flatten().all(|b| *b >= 3_000),
            "no answer below a bound already stored: {:?}",
            net.bounds
        );
    }

    #[test]
    fn a_restarted_replica_resumes_from_its_persisted_state() {
        let mut net = Net::new();
        net.run(40);
        net.clients[1].start(net.now, ConfigId(1), successor(1));
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        let disk = net.disks[1].clone().expect("replica 1 persisted its state");
        let back = ServiceReplica::new(&config(), NodeId(1), Some(&disk)).unwrap();
        // The swap is in the log (or the snapshot) and applies again.
        net.replicas[1] = back;
        net.run(40);
        assert_eq!(net.replicas[1].current().id(), ConfigId(2));
        // A corrupt state is refused with a typed error, not a panic.
        assert!(matches!(
            ServiceReplica::new(&config(), NodeId(1), Some(b"garbage")),
            Err(ServiceError::Corrupt(_))
        ));
    }

    #[test]
    fn many_swaps_compact_the_log_and_a_lagging_replica_catches_up_by_snapshot() {
        let mut net = Net::new();
        net.run(40);
        net.cut.insert(NodeId(2));
        let mut cfg = config();
        for _ in 0..(COMPACT_ENTRIES + 10) {
            let alive = [0, 1, 2].iter().map(|i| NodeId(*i)).collect();
            let next = cfg.remap(&alive, NodeId(0)).unwrap();
            net.clients[0].start(net.now, cfg.id(), next.clone());
            net.run(3);
            cfg = next;
        }
        assert_eq!(net.replicas[0].current().id(), cfg.id());
        assert!(
            net.replicas[0].snapshot_index() > 0,
            "the log was compacted"
        );
        assert_eq!(net.replicas[2].snapshot_index(), 0);
        for r in &net.replicas {
            r.check_invariants();
        }
        net.cut.clear();
        net.run(100);
        assert_eq!(net.replicas[2].current().id(), cfg.id(), "caught up");
        assert!(net.replicas[2].snapshot_index() > 0, "through a snapshot");
    }
}
