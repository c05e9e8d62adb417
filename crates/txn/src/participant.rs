//! # Participant (FaRM §4 steps 1–5, FaRMv2 §4.2)
//!
//! **Problem.** A node is primary for some regions and backup for others.
//! As primary it serves reads at `read_ts`, locks write sets, validates read
//! sets and installs committed writes; as backup it accepts COMMIT-BACKUP
//! records and applies them lazily.
//!
//! **Algorithm.** Each request gets one synchronous response:
//! - `Read`/`Scan`: straight from storage, no transaction state touched (the
//!   TCP analogue of FaRM's one-sided RDMA read; [`Participant::read`] takes
//!   `&self`).
//! - `Lock`: LockAtTs every written key (locked or newer than `read_ts`
//!   fails); all-or-nothing per request; the LOCK record is logged.
//! - `Validate`: every key unlocked (or locked by the validator) and with no
//!   version newer than `read_ts`; every scanned range free of such keys.
//! - `CommitBackup`: logged and acknowledged on receipt, applied at TRUNCATE.
//! - `CommitPrimary`: install the logged writes at `write_ts`, unlock.
//! - `Abort`: unlock, drop the LOCK record.
//! - TRUNCATE (piggybacked on any frame): drop records, apply backup records.
//!
//! **Invariants** ([`Participant::check_invariants`]): every lock in storage
//! belongs to a `Locked` LOCK record in the log and vice versa; committed or
//! truncated transactions hold no locks; the log stays within its bound.

use meridian_config::{Configuration, Limits, RegionMap};
use meridian_storage::log::{LockState, TxLog};
use meridian_storage::RegionStore;
use meridian_wire::{
    Conflict, KeyRange, NodeId, RegionId, Rejection, Response, Timestamp, TxId, TxnRequest,
    TxnResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a transaction finished at this participant (FaRM §5.3 step 6 tells
/// "aborted" from "truncated" apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Finish {
    Aborted,
    Truncated,
}

/// FaRMv2 §4.2: a transaction's `write_ts` is after its `read_ts`.
fn check_write_ts(read_ts: Timestamp, write_ts: Timestamp) -> Result<(), Rejection> {
    if write_ts <= read_ts {
        return Err(Rejection::WriteTsNotAfterReadTs { read_ts, write_ts });
    }
    Ok(())
}

/// Counters of a participant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParticipantStats {
    /// Requests handled.
    pub requests: u64,
    /// Lock requests refused.
    pub lock_conflicts: u64,
    /// Validations failed.
    pub validation_failures: u64,
    /// Transactions committed here as primary.
    pub commits: u64,
    /// Backup records applied.
    pub backup_applied: u64,
    /// Keys whose lock-recovery hold a COMMIT-RECOVERY of an already
    /// truncated transaction released although this replica's copy of
    /// the key is older than the transaction's `write_ts`: its committed
    /// write is not in place here, so a read could miss it (the shape of
    /// swarm seed 4779). The truncated branch of
    /// [`Participant::commit_recovery`] is safe only while no hold outlives
    /// the truncation of a write it guards; the simulator fails a run in
    /// which this is not 0. Keys absent here (a collected tombstone) are
    /// not counted: their history cannot be told.
    pub holds_released_unapplied: u64,
    /// Keys held by lock recovery with no object here that this replica's
    /// copies carried to a new replica as keys with no versions (a
    /// recovering insert; [`RegionStore::copy_after`], the fill fence).
    pub copied_recovery_holds: u64,
}

/// One node's participant engine.
#[derive(Debug)]
pub struct Participant {
    node: NodeId,
    map: Arc<RegionMap>,
    limits: Limits,
    stores: BTreeMap<RegionId, RegionStore>,
    /// Replicas this participant let go of (a refilled replica's old copy,
    /// a region no longer held), kept until the shell takes them
    /// ([`Participant::take_discarded`]) to free them off the process lock:
    /// freeing a replica of millions of objects takes seconds (a
    /// 1M-subscriber TATP node added back to its configuration held its
    /// process lock 4.4 s doing it, and its leases lapsed meanwhile).
    discarded: Vec<RegionStore>,
    primary_for: Vec<RegionId>,
    backup_for: Vec<RegionId>,
    log: TxLog,
    /// Recently finished (aborted or truncated) transactions, oldest first,
    /// at most `limits.max_finished_ids`: a late or duplicated LOCK or
    /// COMMIT-BACKUP for one of them must not re-lock or re-log.
    finished: BTreeMap<TxId, Finish>,
    finished_order: std::collections::VecDeque<TxId>,
    /// Each coordinator's low bound on non-truncated ids (FaRM Table 1),
    /// the highest received; at most `limits.max_finished_ids` coordinators
    /// (the lowest coordinator ids are forgotten first; forgetting only
    /// loses the early refusal of stale records).
    low_bounds: BTreeMap<u64, u64>,
    /// Regions whose replicas changed in the current configuration, blocked
    /// at this primary until their lock recovery ends (FaRM §5.3 step 1).
    blocked: std::collections::BTreeSet<RegionId>,
    /// Recovery locks held here, per (transaction, region): the keys.
    recovery_held: BTreeMap<(TxId, RegionId), Vec<meridian_wire::Key>>,
    /// Transactions committed here by COMMIT-RECOVERY and not yet
    /// truncated, with their `write_ts` (their evidence is commit-primary).
    recovered: BTreeMap<TxId, Timestamp>,
    /// (transaction, region) pairs whose writes COMMIT-RECOVERY put in
    /// place here: until a region's pair is here, that region's recovery
    /// holds stay (swarm seed 4779).
    recovered_regions: std::collections::BTreeSet<(TxId, RegionId)>,
    /// Regions this node was filling (FaRM §5.4) and finished filling under
    /// the configuration it holds ([`Participant::mark_filled`]). Durable,
    /// so that a node restored from disk knows its copy was complete when
    /// a later configuration lists it so (swarm seed 2802).
    filled: std::collections::BTreeSet<RegionId>,
    stats: ParticipantStats,
    /// The configuration last applied ([`Participant::reconfigure`]), kept
    /// for checkpoints.
    config: Configuration,
    /// Disk durability: every state-changing input since the last drain, in
    /// order ([`Participant::enable_journal`]); `None` when off.
    journal: Option<Vec<Mutation>>,
    /// The last GC safe point journaled (GC calls that change nothing are
    /// not journaled).
    journaled_gc: Timestamp,
    /// Rebuilt from disk ([`Participant::restore`]) and no configuration
    /// applied since: the next [`Participant::reconfigure`] blocks every
    /// region this node is primary of, replicas changed or not. A restart
    /// loses what the disk did not hold: LOCK records answered before
    /// their fsync (they are free while every region has a complete
    /// backup) and COMMIT-PRIMARY installs. A backup's COMMIT-BACKUP record
    /// then commits the transaction in recovery, and until lock recovery
    /// holds its keys here a read would miss its write (swarm seed 561: a
    /// whole-cluster restart renews the configuration with the same
    /// replicas; a transfer read the old balance and 41 units vanished).
    restored: bool,
    /// Injected bugs (tests only; `meridian_bugs`).
    #[cfg(feature = "sim-bugs")]
    bugs: meridian_bugs::Bugs,
}

/// One input that changed a participant's state: the unit of the
/// write-ahead log of disk durability (issue 6). The participant is
/// deterministic, so replaying the mutations logged after a checkpoint, in
/// order, on that checkpoint ([`Participant::restore`]) rebuilds the state
/// exactly. Configurations travel as TOML (their serde form is TOML's).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Mutation {
    /// [`Participant::handle`] of a state-changing request (LOCK,
    /// COMMIT-BACKUP, COMMIT-PRIMARY, ABORT, TRUNCATE, or any request with
    /// piggybacked truncations).
    Request {
        /// Piggybacked truncations.
        truncate: Vec<TxId>,
        /// The request.
        req: TxnRequest,
    },
    /// [`Participant::truncate_piggybacked`].
    Truncation(meridian_wire::Truncation),
    /// [`Participant::reconfigure`], the configuration as TOML.
    Reconfigure(String),
    /// [`Participant::recover_locks`].
    RecoverLocks {
        /// Region.
        region: RegionId,
        /// The recovering transactions' records.
        txs: Vec<meridian_wire::RecoveringTx>,
    },
    /// [`Participant::commit_recovery`].
    CommitRecovery {
        /// Region.
        region: RegionId,
        /// The record.
        record: meridian_wire::LockRecord,
        /// Its `write_ts`.
        write_ts: Timestamp,
    },
    /// [`Participant::abort_recovery`].
    AbortRecovery {
        /// Transaction.
        tx: TxId,
        /// Region.
        region: RegionId,
    },
    /// [`Participant::truncate_recovery`].
    TruncateRecovery(TxId),
    /// [`Participant::replicate_tx_state`].
    ReplicateTxState {
        /// Region.
        region: RegionId,
        /// The record, with the evidence and `write_ts` to keep.
        tx: meridian_wire::RecoveringTx,
    },
    /// [`Participant::merge_copies`].
    MergeCopies {
        /// Region.
        region: RegionId,
        /// The chunk's resume point.
        after: Option<meridian_wire::Key>,
        /// Copied objects.
        objects: Vec<meridian_wire::ObjectCopy>,
        /// The chunk ends the region.
        done: bool,
        /// The source's GC safe point when it copied them.
        source_safe_point: Timestamp,
    },
    /// [`Participant::gc`].
    Gc(Timestamp),
    /// [`Participant::mark_filled`].
    Filled(RegionId),
    /// [`Participant::learn_finished`].
    LearnFinished(meridian_wire::FinishedIds),
}

/// Errors of checkpoints and their restoration.
#[derive(Debug, thiserror::Error)]
pub enum DurabilityError {
    /// The checkpoint or a logged mutation does not decode.
    #[error("corrupt checkpoint or log: {0}")]
    Corrupt(String),
    /// The configuration inside does not parse.
    #[error("checkpoint configuration: {0}")]
    Config(String),
    /// The checkpoint belongs to another node.
    #[error("checkpoint of {found}, not of {expected}")]
    WrongNode {
        /// This node.
        expected: NodeId,
        /// The checkpoint's node.
        found: NodeId,
    },
}

/// A participant's whole state frozen at one moment: what a checkpoint
/// writes ([`Participant::snapshot`], [`ParticipantSnapshot::encode`]).
///
/// Taking one is cheap: each region's objects are a persistent map
/// ([`RegionStore`] shares its tree nodes with the live one until either
/// side changes them), so the node's shell encodes and writes the
/// snapshot on its own thread while the node goes on serving requests.
/// (Encoding the whole state inside the process lock stalled a disk-mode
/// node for 530-810 ms per checkpoint at 100k TATP subscribers, and with
/// it the Raft round that raises the clock's time bound: issue 7.)
#[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParticipantSnapshot {
    node: NodeId,
    config_toml: String,
    stores: BTreeMap<RegionId, RegionStore>,
    primary_for: Vec<RegionId>,
    backup_for: Vec<RegionId>,
    log: TxLog,
    finished: BTreeMap<TxId, Finish>,
    finished_order: std::collections::VecDeque<TxId>,
    low_bounds: BTreeMap<u64, u64>,
    blocked: std::collections::BTreeSet<RegionId>,
    recovery_held: BTreeMap<(TxId, RegionId), Vec<meridian_wire::Key>>,
    recovered: BTreeMap<TxId, Timestamp>,
    journaled_gc: Timestamp,
    #[serde(default)]
    recovered_regions: std::collections::BTreeSet<(TxId, RegionId)>,
    #[serde(default)]
    filled: std::collections::BTreeSet<RegionId>,
}

/// Shapes only: the state itself may be gigabytes.
impl std::fmt::Debug for ParticipantSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParticipantSnapshot")
            .field("node", &self.node)
            .field("regions", &self.stores.len())
            .field("objects", &self.objects())
            .finish_non_exhaustive()
    }
}

impl ParticipantSnapshot {
    /// The snapshot as checkpoint bytes (bincode), which
    /// [`Participant::restore`] reads.
    ///
    /// Errors: [`DurabilityError::Corrupt`] if the state does not encode.
    pub fn encode(&self) -> Result<Vec<u8>, DurabilityError> {
        bincode::serialize(self).map_err(|e| DurabilityError::Corrupt(e.to_string()))
    }

    /// Objects held, over every region (for logs and progress).
    pub fn objects(&self) -> usize {
        self.stores.values().map(RegionStore::len).sum()
    }
}

impl Participant {
    /// Start journaling every state-changing input ([`Mutation`]) for
    /// [`Participant::drain_journal`] (disk durability).
    pub fn enable_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// Replicas let go of since the last call (by [`Participant::reconfigure`]),
    /// for the shell to free where freeing does not stall the node: the
    /// tokio node hands them to a thread of their own, the simulator drops
    /// them at once. Dropping them is all there is to do with them.
    pub fn take_discarded(&mut self) -> Vec<RegionStore> {
        std::mem::take(&mut self.discarded)
    }

    /// Every replica this participant holds or let go of, taking them out
    /// (a participant about to be replaced by an empty one; see
    /// [`Participant::take_discarded`]).
    pub fn take_all_stores(&mut self) -> Vec<RegionStore> {
        let mut out = std::mem::take(&mut self.discarded);
        out.extend(std::mem::take(&mut self.stores).into_values());
        out
    }

    /// The configuration last applied.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// Stop journaling (memory durability).
    pub fn disable_journal(&mut self) {
        self.journal = None;
    }

    /// True while journaling.
    pub fn journaling(&self) -> bool {
        self.journal.is_some()
    }

    /// The mutations since the last drain, in order (empty when not
    /// journaling). They must be durable before any reply that followed
    /// them is sent.
    pub fn drain_journal(&mut self) -> Vec<Mutation> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn journal(&mut self, m: impl FnOnce() -> Mutation) {
        if let Some(j) = self.journal.as_mut() {
            j.push(m());
        }
    }

    /// The whole state, frozen now, for a checkpoint: mutations drained
    /// before it are covered by it. O(regions + finished ids + log
    /// records): the objects are shared, not copied.
    ///
    /// Errors: [`DurabilityError::Config`] if the configuration does not
    /// serialise.
    pub fn snapshot(&self) -> Result<ParticipantSnapshot, DurabilityError> {
        Ok(ParticipantSnapshot {
            node: self.node,
            config_toml: self
                .config
                .to_toml()
                .map_err(|e| DurabilityError::Config(e.to_string()))?,
            stores: self.stores.clone(),
            primary_for: self.primary_for.clone(),
            backup_for: self.backup_for.clone(),
            log: self.log.clone(),
            finished: self.finished.clone(),
            finished_order: self.finished_order.clone(),
            low_bounds: self.low_bounds.clone(),
            blocked: self.blocked.clone(),
            recovery_held: self.recovery_held.clone(),
            recovered: self.recovered.clone(),
            journaled_gc: self.journaled_gc,
            recovered_regions: self.recovered_regions.clone(),
            filled: self.filled.clone(),
        })
    }

    /// The whole state as checkpoint bytes: [`Participant::snapshot`]
    /// encoded at once.
    ///
    /// Errors: as [`Participant::snapshot`] and
    /// [`ParticipantSnapshot::encode`].
    pub fn checkpoint(&self) -> Result<Vec<u8>, DurabilityError> {
        self.snapshot()?.encode()
    }

    /// Rebuild node `node`'s participant from a checkpoint (`None`: from
    /// the empty participant of `initial`) and the mutations logged after
    /// it, in order. Journaling is off in the result.
    ///
    /// Errors: [`DurabilityError`] for a checkpoint that does not decode,
    /// belongs to another node, or holds a configuration that does not
    /// parse.
    pub fn restore(
        node: NodeId,
        initial: &Configuration,
        checkpoint: Option<&[u8]>,
        log: &[Mutation],
    ) -> Result<Self, DurabilityError> {
        let mut p = match checkpoint {
            None => Participant::new(node, initial),
            Some(bytes) => {
                let c: ParticipantSnapshot = bincode::deserialize(bytes)
                    .map_err(|e| DurabilityError::Corrupt(e.to_string()))?;
                if c.node != node {
                    return Err(DurabilityError::WrongNode {
                        expected: node,
                        found: c.node,
                    });
                }
                let config = Configuration::from_toml(&c.config_toml)
                    .map_err(|e| DurabilityError::Config(e.to_string()))?;
                Participant {
                    node,
                    map: Arc::new(RegionMap::new(&config)),
                    limits: config.limits.clone(),
                    stores: c.stores,
                    discarded: Vec::new(),
                    primary_for: c.primary_for,
                    backup_for: c.backup_for,
                    log: c.log,
                    finished: c.finished,
                    finished_order: c.finished_order,
                    low_bounds: c.low_bounds,
                    blocked: c.blocked,
                    recovery_held: c.recovery_held,
                    recovered: c.recovered,
                    filled: c.filled,
                    recovered_regions: c.recovered_regions,
                    stats: ParticipantStats::default(),
                    config,
                    journal: None,
                    journaled_gc: c.journaled_gc,
                    restored: false,
                    #[cfg(feature = "sim-bugs")]
                    bugs: meridian_bugs::Bugs::none(),
                }
            }
        };
        for m in log {
            p.replay(m)?;
        }
        // Serve nothing until the next configuration's lock recovery (see
        // the field `restored`).
        p.restored = true;
        p.blocked = p.primary_for.iter().copied().collect();
        Ok(p)
    }

    /// Apply one logged mutation (journaling is suspended meanwhile).
    ///
    /// Errors: [`DurabilityError::Config`] for a configuration that does
    /// not parse.
    pub fn replay(&mut self, m: &Mutation) -> Result<(), DurabilityError> {
        let journal = self.journal.take();
        let r = match m {
            Mutation::Request { truncate, req } => {
                self.handle(truncate, req);
                Ok(())
            }
            Mutation::Truncation(t) => {
                self.truncate_piggybacked(t);
                Ok(())
            }
            Mutation::Reconfigure(toml) => match Configuration::from_toml(toml) {
                Ok(c) => {
                    self.reconfigure(&c);
                    Ok(())
                }
                Err(e) => Err(DurabilityError::Config(e.to_string())),
            },
            Mutation::RecoverLocks { region, txs } => {
                self.recover_locks(*region, txs);
                Ok(())
            }
            Mutation::CommitRecovery {
                region,
                record,
                write_ts,
            } => {
                self.commit_recovery(*region, record, *write_ts);
                Ok(())
            }
            Mutation::AbortRecovery { tx, region } => {
                self.abort_recovery(*tx, *region);
                Ok(())
            }
            Mutation::TruncateRecovery(tx) => {
                self.truncate_recovery(*tx);
                Ok(())
            }
            Mutation::ReplicateTxState { region, tx } => {
                self.replicate_tx_state(*region, tx);
                Ok(())
            }
            Mutation::MergeCopies {
                region,
                after,
                objects,
                done,
                source_safe_point,
            } => {
                self.merge_copies(
                    *region,
                    after.as_deref(),
                    objects,
                    *done,
                    *source_safe_point,
                );
                Ok(())
            }
            Mutation::Gc(sp) => {
                self.gc(*sp);
                Ok(())
            }
            Mutation::Filled(region) => {
                self.mark_filled(*region);
                Ok(())
            }
            Mutation::LearnFinished(f) => {
                self.learn_finished(f);
                Ok(())
            }
        };
        self.journal = journal;
        r
    }

    /// True if `self` and `other` hold the same state (statistics aside):
    /// for tests of checkpoint and replay.
    #[cfg(test)]
    fn same_state(&self, other: &Participant) -> bool {
        self.node == other.node
            && self.stores == other.stores
            && self.primary_for == other.primary_for
            && self.backup_for == other.backup_for
            && self.log == other.log
            && self.finished == other.finished
            && self.finished_order == other.finished_order
            && self.low_bounds == other.low_bounds
            && self.blocked == other.blocked
            && self.recovery_held == other.recovery_held
            && self.recovered == other.recovered
            && self.filled == other.filled
            && self.recovered_regions == other.recovered_regions
    }

    /// The participant of `node` under configuration `cfg`, holding empty
    /// replicas of every region the node is primary or backup for.
    pub fn new(node: NodeId, cfg: &Configuration) -> Self {
        let map = Arc::new(RegionMap::new(cfg));
        let mut stores = BTreeMap::new();
        let (mut primary_for, mut backup_for) = (Vec::new(), Vec::new());
        for r in map.regions() {
            if r.primary == node {
                primary_for.push(r.id);
            } else if r.backups.contains(&node) {
                backup_for.push(r.id);
            } else {
                continue;
            }
            stores.insert(r.id, RegionStore::new(cfg.limits.max_versions_per_object));
        }
        Participant {
            node,
            map,
            limits: cfg.limits.clone(),
            stores,
            discarded: Vec::new(),
            primary_for,
            backup_for,
            log: TxLog::default(),
            finished: BTreeMap::new(),
            finished_order: std::collections::VecDeque::new(),
            low_bounds: BTreeMap::new(),
            blocked: Default::default(),
            recovery_held: BTreeMap::new(),
            recovered: BTreeMap::new(),
            filled: Default::default(),
            recovered_regions: Default::default(),
            stats: ParticipantStats::default(),
            config: cfg.clone(),
            journal: None,
            journaled_gc: Timestamp::ZERO,
            restored: false,
            #[cfg(feature = "sim-bugs")]
            bugs: meridian_bugs::Bugs::none(),
        }
    }

    /// Adopt configuration `cfg` (FaRM §5.2 step 6, §5.3 step 1): new
    /// regions get empty replicas (data recovery fills them), regions no
    /// longer held are dropped with the log records only they needed, a
    /// backup promoted to primary resets its floors to its heads (FaRMv2
    /// §4.7), and every region whose replicas changed is blocked here until
    /// [`Participant::recover_locks`] (if this node is its primary).
    /// Returns the regions this node newly holds.
    pub fn reconfigure(&mut self, cfg: &Configuration) -> Vec<RegionId> {
        if self.journal.is_some() {
            // A configuration that cannot be written as TOML was never
            // valid; checkpoint() reports it.
            if let Ok(t) = cfg.to_toml() {
                self.journal(|| Mutation::Reconfigure(t));
            }
        }
        // Regions changed since the configuration this node held before:
        // not only in `cfg` itself. A configuration that committed nowhere
        // (its CM died after the CAS) may have made the change, and the
        // next one, built on it, carries its LastReplicaChange (swarm seed
        // 424: region 5 was promoted in 11, installed as 12, and served
        // reads before lock recovery).
        let previous = self.config.id();
        self.config = cfg.clone();
        let map = Arc::new(RegionMap::new(cfg));
        let (mut primary_for, mut backup_for, mut added) = (Vec::new(), Vec::new(), Vec::new());
        // A region still blocked here never had its lock recovery: the
        // configuration that blocked it never committed at this node
        // (swarm seed 4639: promoted in 2, which never committed, and kept
        // with LastReplicaChange 2 by 3, it served reads before recovery).
        // (A restored participant's blocks are the restore rule's.)
        let unrecovered = std::mem::take(&mut self.blocked);
        for r in map.regions() {
            let is_primary = r.primary == self.node;
            if is_primary {
                primary_for.push(r.id);
                let restore_rule =
                    self.restored && !meridian_bugs::bug!(self.bugs, RestoreForgotten);
                let replicas_changed = r.last_replica_change == cfg.id()
                    || r.last_replica_change > previous
                    || (!self.restored && unrecovered.contains(&r.id));
                if restore_rule && !replicas_changed {
                    meridian_bugs::mark!("restored primary blocks an unchanged region");
                }
                if restore_rule || replicas_changed {
                    self.blocked.insert(r.id);
                }
            } else if r.backups.contains(&self.node) {
                backup_for.push(r.id);
            } else {
                continue;
            }
            // A replica listed as filling starts empty and is filled by data
            // recovery, even if this node still holds an old copy: a node
            // removed and added back (or one that missed configurations)
            // would otherwise serve stale versions and keep stale locks
            // (seed 27: a lock of config 6 survived into config 8). A fill
            // interrupted by a configuration change restarts from scratch
            // anyway, and everything it applied is at the primary too
            // (backups apply at truncation, after the primary installed).
            // The node's log is kept, and a record of it may be put in
            // place after the primary deleted the key and collected the
            // tombstone: the new copy's fill fence drops such a write
            // (`RegionStore::merge_chunk`, swarm seed 2447).
            let refill = r.filling.contains(&self.node);
            if refill || !self.stores.contains_key(&r.id) {
                let empty = RegionStore::new(self.limits.max_versions_per_object);
                if let Some(old) = self.stores.insert(r.id, empty) {
                    self.discarded.push(old);
                }
                // Recovery holds lived in the dropped copy (a restored
                // node whose renewed configuration refills a region it led
                // during an earlier recovery: swarm seed 577, with an
                // experimental commit protocol that shifted its timing).
                let id = r.id;
                self.recovery_held.retain(|(_, region), _| *region != id);
                self.filled.remove(&id);
                // So did the writes this node's committed LOCK records
                // installed in it (review hazard (c)).
                self.unplace_committed_lock_writes(id);
                added.push(r.id);
            } else if is_primary && self.backup_for.contains(&r.id) {
                if let Some(s) = self.stores.get_mut(&r.id) {
                    s.reset_floors_to_head();
                }
            }
        }
        let held: std::collections::BTreeSet<RegionId> =
            primary_for.iter().chain(&backup_for).copied().collect();
        let gone: Vec<RegionId> = self
            .stores
            .keys()
            .filter(|r| !held.contains(r))
            .copied()
            .collect();
        for r in gone {
            if let Some(old) = self.stores.remove(&r) {
                self.discarded.push(old);
            }
        }
        self.filled.retain(|r| held.contains(r));
        let needed =
            |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| held.contains(&w.region));
        self.log.primary.retain(|_, (rec, _)| needed(rec));
        self.log.backup.retain(|_, (rec, _)| needed(rec));
        self.log.replicated.retain(|_, (rec, _, _)| needed(rec));
        self.recovery_held.retain(|(_, r), _| held.contains(r));
        self.map = map;
        self.limits = cfg.limits.clone();
        self.primary_for = primary_for;
        self.backup_for = backup_for;
        self.restored = false;
        added
    }

    /// `region`'s copy here was just replaced by an empty one (a refill, or
    /// a region held again): the writes in it of this node's committed
    /// LOCK records (COMMIT-PRIMARY or COMMIT-RECOVERY installed them in
    /// the dropped copy) are no longer in place. They move to the
    /// replicated log as commit-primary evidence with their `write_ts`,
    /// as COMMIT-RECOVERY keeps a replica's writes (swarm seed 854): the
    /// node reports the same evidence, and COMMIT-RECOVERY or truncation
    /// puts them in place in the new copy, behind its fill fence
    /// ([`RegionStore::apply_backup`]), like a COMMIT-BACKUP record kept
    /// across a refill (swarm seed 2447). Left in the LOCK record, they
    /// were skipped by COMMIT-RECOVERY as installed here and dropped
    /// unapplied by truncation, so a copy taken from a source that had not
    /// applied the transaction yet missed its writes for good (review
    /// hazard (c)). A member that missed a stored configuration removing
    /// it and applies the next, which adds it back with filling replicas,
    /// keeps its log (swarm seed 6649 and `rows --faults` seed 848 refill
    /// under such a record). A `Locked` record is left as it is:
    /// COMMIT-RECOVERY applies all of its writes.
    fn unplace_committed_lock_writes(&mut self, region: RegionId) {
        let txs: Vec<TxId> = self
            .log
            .primary
            .iter()
            .filter(|(_, (rec, st))| {
                matches!(st, LockState::Committed(_))
                    && rec.writes.iter().any(|w| w.region == region)
            })
            .map(|(tx, _)| *tx)
            .collect();
        for tx in txs {
            let Some((rec, LockState::Committed(write_ts))) = self.log.primary.get_mut(&tx) else {
                continue;
            };
            let write_ts = *write_ts;
            let (moved, kept): (Vec<meridian_wire::WriteOp>, Vec<meridian_wire::WriteOp>) =
                std::mem::take(&mut rec.writes)
                    .into_iter()
                    .partition(|w| w.region == region);
            rec.writes = kept;
            let header = meridian_wire::LockRecord {
                writes: Vec::new(),
                ..rec.clone()
            };
            if rec.writes.is_empty() {
                self.log.primary.remove(&tx);
            }
            let e = self
                .log
                .replicated
                .entry(tx)
                .or_insert_with(|| (header, meridian_wire::Evidence::CommitPrimary, None));
            for w in moved {
                if !e
                    .0
                    .writes
                    .iter()
                    .any(|x| x.region == w.region && x.key == w.key)
                {
                    e.0.writes.push(w);
                }
            }
            e.1 = meridian_wire::Evidence::CommitPrimary;
            e.2 = Some(write_ts);
        }
    }

    /// Give this participant the injected bugs `bugs` (tests only; see
    /// `meridian_bugs`). The participant consults `RestoreForgotten` (the
    /// first configuration after a restore blocks only the regions whose
    /// replicas changed), `LocksUnchecked` (every LOCK skips LockAtTs's
    /// version check, a lost update) and `RefillUnfenced` (a new replica
    /// merges chunks without the fill fence).
    #[cfg(feature = "sim-bugs")]
    pub fn set_bugs(&mut self, bugs: meridian_bugs::Bugs) {
        self.bugs = bugs;
    }

    /// The injected bugs this participant consults (tests only).
    #[cfg(feature = "sim-bugs")]
    pub fn bugs(&self) -> &meridian_bugs::Bugs {
        &self.bugs
    }

    /// Regions blocked by recovery at this primary.
    pub fn blocked_regions(&self) -> Vec<RegionId> {
        self.blocked.iter().copied().collect()
    }

    /// FaRM §5.3 steps 2–3: this replica's records in `region` of
    /// transactions that began committing before configuration `config`
    /// (every such transaction recovers: requests of older configurations
    /// are refused, so their coordinators cannot finish them).
    pub fn recovering_records(
        &self,
        config: meridian_wire::ConfigId,
        region: RegionId,
    ) -> Vec<meridian_wire::RecoveringTx> {
        let mut out: BTreeMap<TxId, meridian_wire::RecoveringTx> = BTreeMap::new();
        let restrict = |rec: &meridian_wire::LockRecord| meridian_wire::LockRecord {
            writes: rec
                .writes
                .iter()
                .filter(|w| w.region == region)
                .cloned()
                .collect(),
            ..rec.clone()
        };
        let primary = self.log.primary.iter().map(|(tx, (rec, st))| {
            let wts = match st {
                LockState::Committed(w) => Some(*w),
                LockState::Locked => None,
            };
            (tx, rec, wts)
        });
        let backup = self
            .log
            .backup
            .iter()
            .map(|(tx, (rec, w))| (tx, rec, Some(*w)));
        let replicated = self
            .log
            .replicated
            .iter()
            .map(|(tx, (rec, _, w))| (tx, rec, *w));
        for (tx, rec, wts) in primary.chain(backup).chain(replicated) {
            if tx.config >= config || !rec.writes.iter().any(|w| w.region == region) {
                continue;
            }
            let e = out
                .entry(*tx)
                .or_insert_with(|| meridian_wire::RecoveringTx {
                    record: restrict(rec),
                    evidence: self.evidence(*tx, region),
                    write_ts: None,
                });
            e.write_ts = e.write_ts.or(wts).or(self.recovered.get(tx).copied());
        }
        out.into_values().collect()
    }

    /// FaRM §5.3 step 4 at `region`'s primary: hold every key the
    /// recovering transactions wrote there, then unblock the region.
    pub fn recover_locks(&mut self, region: RegionId, txs: &[meridian_wire::RecoveringTx]) {
        self.journal(|| Mutation::RecoverLocks {
            region,
            txs: txs.to_vec(),
        });
        // Decided in this region here already: COMMIT-RECOVERY put the
        // region's writes in place, or the transaction finished. A commit
        // applied in another region only does not count: this region's
        // writes are not in place yet (swarm seed 4779).
        let (recovered, finished) = (&self.recovered_regions, &self.finished);
        let known = |tx: &TxId| recovered.contains(&(*tx, region)) || finished.contains_key(tx);
        if let Some(store) = self.stores.get_mut(&region) {
            for t in txs {
                if known(&t.record.tx) {
                    // Decided here already (COMMIT- or ABORT-RECOVERY came
                    // before this region's lock recovery ended, or the
                    // transaction was truncated here): holding its keys
                    // now would keep them locked for good.
                    continue;
                }
                let keys: Vec<meridian_wire::Key> = t
                    .record
                    .writes
                    .iter()
                    .filter(|w| w.region == region)
                    .map(|w| w.key.clone())
                    .collect();
                for k in &keys {
                    store.recovery_lock(t.record.tx, k);
                }
                self.recovery_held.insert((t.record.tx, region), keys);
            }
        }
        self.blocked.remove(&region);
    }

    /// True once this replica knows `tx`'s outcome: committed by recovery,
    /// aborted, or truncated.
    pub fn outcome_known(&self, tx: TxId) -> bool {
        self.recovered.contains_key(&tx) || self.finished.contains_key(&tx)
    }

    /// True once `tx` is decided in `region` here: COMMIT-RECOVERY put the
    /// region's writes in place, or it aborted or was truncated.
    pub fn decided_in(&self, tx: TxId, region: RegionId) -> bool {
        self.recovered_regions.contains(&(tx, region)) || self.finished.contains_key(&tx)
    }

    /// FaRM §5.3 step 7: COMMIT-RECOVERY of `record` (writes in `region`)
    /// at `write_ts`: apply the writes at their place in each chain,
    /// release the transaction's locks in the region. Idempotent; a no-op
    /// for a transaction already truncated here.
    pub fn commit_recovery(
        &mut self,
        region: RegionId,
        record: &meridian_wire::LockRecord,
        write_ts: Timestamp,
    ) {
        self.journal(|| Mutation::CommitRecovery {
            region,
            record: record.clone(),
            write_ts,
        });
        let tx = record.tx;
        if self.finished.get(&tx) == Some(&Finish::Truncated) {
            // Applied and truncated here already; the holds lock recovery
            // took from other replicas' reports still go (seed 369 kept a
            // key locked forever).
            let unapplied = self
                .recovery_held
                .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
                .map(|((_, r), keys)| {
                    let store = self.stores.get(r);
                    keys.iter()
                        .filter(|k| {
                            store
                                .and_then(|s| s.object(k))
                                .is_some_and(|o| o.head_ts() < write_ts)
                        })
                        .count() as u64
                })
                .sum::<u64>();
            self.stats.holds_released_unapplied += unapplied;
            self.release_recovery_holds(tx);
            return;
        }
        assert!(
            self.finished.get(&tx) != Some(&Finish::Aborted),
            "COMMIT-RECOVERY of {tx}, which this replica saw aborted"
        );
        // Every write of the transaction this node knows (the record sent,
        // its own LOCK or COMMIT-BACKUP record): the decision is per
        // transaction, so all of them are applied and released now, and a
        // later COMMIT-RECOVERY for another region is a no-op.
        //
        // Writes this node already installed as primary (COMMIT-PRIMARY
        // reached it before the configuration changed) are not installed
        // again: GC may have collected a later tombstone of the key since,
        // and the old write would bring the deleted key back (seed 2).
        let installed_here = |w: &meridian_wire::WriteOp| match self.log.primary.get(&tx) {
            Some((rec, LockState::Committed(_))) => rec
                .writes
                .iter()
                .any(|i| i.region == w.region && i.key == w.key),
            _ => false,
        };
        let mut writes: Vec<meridian_wire::WriteOp> = record
            .writes
            .iter()
            .filter(|w| w.region == region && !installed_here(w))
            .cloned()
            .collect();
        if let Some((rec, LockState::Locked)) = self.log.primary.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        if let Some((rec, _)) = self.log.backup.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        if let Some((rec, _, _)) = self.log.replicated.get(&tx) {
            writes.extend(rec.writes.iter().cloned());
        }
        let mut applied: std::collections::BTreeSet<RegionId> = [region].into_iter().collect();
        if let Some((rec, LockState::Committed(_))) = self.log.primary.get(&tx) {
            applied.extend(rec.writes.iter().map(|w| w.region));
        }
        for w in &writes {
            applied.insert(w.region);
            if let Some(store) = self.stores.get_mut(&w.region) {
                store.apply_backup(&w.key, write_ts, w.value.clone());
                store.recovery_unlock(tx, &w.key);
            }
        }
        // Release only the holds of regions whose writes are in place now:
        // a hold lock recovery took from another replica's report for a
        // region whose writes this node does not know (its own LOCK record
        // was lost in a restart) stays until that region's COMMIT-RECOVERY
        // (swarm seed 4779: the hold on the debited key went with the
        // credited region's decision, a transfer read the old balance and
        // committed over the debit).
        for r in &applied {
            if let Some(keys) = self.recovery_held.remove(&(tx, *r)) {
                if let Some(store) = self.stores.get_mut(r) {
                    for k in &keys {
                        store.recovery_unlock(tx, k);
                    }
                }
            }
            self.recovered_regions.insert((tx, *r));
        }
        if let Some((_, st)) = self.log.primary.get_mut(&tx) {
            *st = LockState::Committed(write_ts);
        }
        // Keep a record of the commit until truncation, so that this
        // replica reports it (commit-primary evidence) if a later
        // configuration recovers the transaction again: a replica whose
        // only record was step 5's (or none) otherwise reported nothing
        // and the region voted from the others' weaker evidence (swarm
        // seed 854: COMMIT-RECOVERY of 6 reached n2 but not the primary
        // n0, which had applied 7; n0's LOCK record alone voted lock in 7
        // and recovery aborted a transaction n2 had committed).
        let mine = |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| w.region == region);
        if !self.stores.contains_key(&region) {
            // Not a replica of the region here (a decision sent by a
            // stale placement): nothing to report for it later.
        } else if !self.log.primary.get(&tx).is_some_and(|(r, _)| mine(r))
            && !self.log.backup.get(&tx).is_some_and(|(r, _)| mine(r))
        {
            let e = self.log.replicated.entry(tx).or_insert_with(|| {
                (
                    meridian_wire::LockRecord {
                        writes: Vec::new(),
                        ..record.clone()
                    },
                    meridian_wire::Evidence::CommitPrimary,
                    None,
                )
            });
            for w in record.writes.iter().filter(|w| w.region == region) {
                if !e
                    .0
                    .writes
                    .iter()
                    .any(|x| x.region == w.region && x.key == w.key)
                {
                    e.0.writes.push(w.clone());
                }
            }
            e.1 = meridian_wire::Evidence::CommitPrimary;
            e.2 = Some(write_ts);
        } else if let Some(e) = self.log.replicated.get_mut(&tx) {
            e.1 = meridian_wire::Evidence::CommitPrimary;
            e.2 = Some(write_ts);
        }
        self.recovered.insert(tx, write_ts);
    }

    /// FaRM §5.3 step 7: ABORT-RECOVERY in `region`: release every lock of
    /// the transaction, drop its records, remember it aborted.
    ///
    /// Panics (release builds too) if this replica committed it: recovery
    /// never aborts a transaction a primary exposed.
    pub fn abort_recovery(&mut self, tx: TxId, region: RegionId) {
        self.journal(|| Mutation::AbortRecovery { tx, region });
        assert!(
            !matches!(
                self.log.primary.get(&tx),
                Some((_, LockState::Committed(_)))
            ) && !self.recovered.contains_key(&tx),
            "ABORT-RECOVERY of {tx}, which committed at this replica"
        );
        let _ = region; // the decision is per transaction: release everywhere
        self.release_recovery_holds(tx);
        self.abort(tx);
        self.log.backup.remove(&tx);
        self.log.replicated.remove(&tx);
    }

    fn release_recovery_holds(&mut self, tx: TxId) {
        let held: Vec<(RegionId, Vec<meridian_wire::Key>)> = self
            .recovery_held
            .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
            .map(|((_, r), keys)| (*r, keys.clone()))
            .collect();
        for (r, keys) in held {
            self.recovery_held.remove(&(tx, r));
            if let Some(store) = self.stores.get_mut(&r) {
                for k in &keys {
                    store.recovery_unlock(tx, k);
                }
            }
        }
    }

    /// FaRM §5.3 step 7: TRUNCATE-RECOVERY: drop the transaction's records
    /// (applying a backup record first) and remember it truncated.
    pub fn truncate_recovery(&mut self, tx: TxId) {
        self.journal(|| Mutation::TruncateRecovery(tx));
        if self.finished.get(&tx) == Some(&Finish::Aborted) {
            return;
        }
        self.truncate(&[tx]);
    }

    /// FaRM §5.3 step 5, at a replica of `region` that reported no record
    /// of `t.record.tx`: keep the record the region's primary replicated,
    /// with the evidence the region had (`t.evidence`: `CommitPrimary`,
    /// `CommitBackup` or `Lock`; others are ignored) and `t.write_ts`, until
    /// the decision. A new replica thus votes in later configurations as
    /// the region's old replicas would have (swarm seed 3935: without it,
    /// a promoted new replica voted unknown and recovery aborted a
    /// committed transaction). Idempotent; a no-op if this node already
    /// holds a record of the transaction or knows its outcome.
    pub fn replicate_tx_state(&mut self, region: RegionId, t: &meridian_wire::RecoveringTx) {
        use meridian_wire::Evidence;
        let tx = t.record.tx;
        if !matches!(
            t.evidence,
            Evidence::CommitPrimary | Evidence::CommitBackup | Evidence::Lock
        ) || self.outcome_known(tx)
            || self.is_finished(tx)
            || !self.stores.contains_key(&region)
        {
            return;
        }
        // Kept unless this replica's own records already say as much: a
        // restored primary whose LOCK record survived the crash but whose
        // COMMIT-PRIMARY did not holds evidence Lock, and must keep the
        // COMMIT-BACKUP evidence its backups reported, or a later
        // configuration without those backups votes lock and aborts a
        // transaction an earlier recovery committed (swarm seed 1945).
        if self.evidence(tx, region) <= t.evidence {
            return;
        }
        self.journal(|| Mutation::ReplicateTxState {
            region,
            tx: t.clone(),
        });
        let writes: Vec<meridian_wire::WriteOp> = t
            .record
            .writes
            .iter()
            .filter(|w| w.region == region)
            .cloned()
            .collect();
        let e = self.log.replicated.entry(tx).or_insert_with(|| {
            (
                meridian_wire::LockRecord {
                    writes: Vec::new(),
                    ..t.record.clone()
                },
                t.evidence,
                None,
            )
        });
        for w in writes {
            if !e
                .0
                .writes
                .iter()
                .any(|x| x.region == w.region && x.key == w.key)
            {
                e.0.writes.push(w);
            }
        }
        // Evidence orders strongest first.
        e.1 = e.1.min(t.evidence);
        e.2 = e.2.or(t.write_ts);
    }

    /// The primary's own vote-relevant evidence when asked for a vote on a
    /// transaction it found no records of (FaRM §5.3 step 6, REQUEST-VOTE).
    pub fn vote_without_records(&self, tx: TxId, region: RegionId) -> meridian_wire::RecoveryVote {
        use meridian_wire::{Evidence, RecoveryVote};
        match self.evidence(tx, region) {
            Evidence::CommitPrimary => RecoveryVote::CommitPrimary,
            Evidence::CommitBackup => RecoveryVote::CommitBackup,
            Evidence::Lock => RecoveryVote::Lock,
            Evidence::Aborted => RecoveryVote::Abort,
            Evidence::Truncated => RecoveryVote::Truncated,
            Evidence::Nothing => RecoveryVote::Unknown,
        }
    }

    /// FaRM §5.4, source: objects of `region` after `after`, whether the
    /// region ends there, and the replica's GC safe point (the new
    /// replica's fill fence, [`RegionStore::merge_chunk`]).
    pub fn copy_region(
        &mut self,
        region: RegionId,
        after: Option<&[u8]>,
    ) -> Option<(Vec<meridian_wire::ObjectCopy>, bool, Timestamp)> {
        let s = self.stores.get(&region)?;
        let (objects, done, held) =
            s.copy_after_counted(after, self.limits.data_recovery_chunk_objects);
        let safe_point = s.safe_point();
        self.stats.copied_recovery_holds += held as u64;
        Some((objects, done, safe_point))
    }

    /// FaRM §5.4, new replica: merge one chunk of copied objects into
    /// `region` ([`RegionStore::merge_chunk`]: the chunk's range, and the
    /// fill fence at the source's safe point).
    pub fn merge_copies(
        &mut self,
        region: RegionId,
        after: Option<&[u8]>,
        objects: &[meridian_wire::ObjectCopy],
        done: bool,
        source_safe_point: Timestamp,
    ) {
        self.journal(|| Mutation::MergeCopies {
            region,
            after: after.map(<[u8]>::to_vec),
            objects: objects.to_vec(),
            done,
            source_safe_point,
        });
        if let Some(s) = self.stores.get_mut(&region) {
            if meridian_bugs::bug!(self.bugs, RefillUnfenced) {
                #[cfg(feature = "sim-bugs")]
                s.merge_chunk_unfenced(objects);
            } else {
                s.merge_chunk(after, objects, done, source_safe_point);
            }
        }
    }

    /// FaRM §5.4, new replica: data recovery of `region` finished here (the
    /// last chunk merged). Journaled: a node restored from disk in a
    /// configuration that lists it as filling `region` knows from this that
    /// its copy was complete before the crash, as a later configuration
    /// (whose CM heard its REPLICA-READY) may record.
    pub fn mark_filled(&mut self, region: RegionId) {
        if !self.stores.contains_key(&region) || self.filled.contains(&region) {
            return;
        }
        self.journal(|| Mutation::Filled(region));
        self.filled.insert(region);
    }

    /// FaRM §5.4, source: what this replica knows of finished
    /// transactions, for a new replica whose copy is complete
    /// ([`Participant::learn_finished`]): the ids truncated here and every
    /// coordinator's low bound, in order.
    pub fn finished_ids(&self) -> meridian_wire::FinishedIds {
        meridian_wire::FinishedIds {
            truncated: self
                .finished
                .iter()
                .filter(|(_, f)| **f == Finish::Truncated)
                .map(|(tx, _)| *tx)
                .collect(),
            low_bounds: self
                .low_bounds
                .iter()
                .map(|(c, l)| meridian_wire::TruncateLow {
                    coordinator: *c,
                    local: *l,
                })
                .collect(),
        }
    }

    /// FaRM §5.3 step 6 and §5.4, new replica: adopt what the source of a
    /// completed copy knows of finished transactions. The copy holds the
    /// writes of transactions the source truncated, without their records;
    /// without this, the new replica, once primary, voted `unknown` on such
    /// a transaction where the source would have voted `truncated`, and
    /// recovery aborted a transaction that had committed (swarm seed 9253:
    /// its write stayed in one region and vanished from the other). An id
    /// this node holds records of keeps them (their evidence is stronger);
    /// a low bound is taken as a piggybacked one would be.
    pub fn learn_finished(&mut self, f: &meridian_wire::FinishedIds) {
        if f.truncated.is_empty() && f.low_bounds.is_empty() {
            return;
        }
        self.journal(|| Mutation::LearnFinished(f.clone()));
        let journal = self.journal.take();
        for tx in &f.truncated {
            let held = self.log.primary.contains_key(tx)
                || self.log.backup.contains_key(tx)
                || self.log.replicated.contains_key(tx)
                || self.recovered.contains_key(tx);
            if !held && !self.finished.contains_key(tx) {
                self.finish(*tx, Finish::Truncated);
            }
        }
        for low in &f.low_bounds {
            self.truncate_piggybacked(&meridian_wire::Truncation {
                txs: Vec::new(),
                low: Some(*low),
            });
        }
        self.journal = journal;
    }

    /// True if this node finished filling `region` under the configuration
    /// it holds ([`Participant::mark_filled`]).
    pub fn is_filled(&self, region: RegionId) -> bool {
        self.filled.contains(&region)
    }

    /// The participant of `node` holding no replicas: every request for a
    /// region is refused with [`Conflict::UnknownRegion`] (a node that lost
    /// its memory and has not been given regions again).
    pub fn without_regions(node: NodeId, cfg: &Configuration) -> Self {
        let mut p = Self::new(node, cfg);
        p.stores.clear();
        p.primary_for.clear();
        p.backup_for.clear();
        p
    }

    /// The node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Regions this node is primary for.
    pub fn primary_regions(&self) -> &[RegionId] {
        &self.primary_for
    }

    /// Regions this node is a backup for.
    pub fn backup_regions(&self) -> &[RegionId] {
        &self.backup_for
    }

    /// Counters.
    pub fn stats(&self) -> ParticipantStats {
        self.stats
    }

    /// Objects held across all replicas.
    pub fn object_count(&self) -> usize {
        self.stores.values().map(|s| s.len()).sum()
    }

    /// Log records not yet truncated.
    pub fn log_len(&self) -> usize {
        self.log.len()
    }

    /// Writes and copied versions the fill fence dropped, over the
    /// replicas held ([`RegionStore::merge_chunk`]).
    pub fn stale_fill_writes(&self) -> u64 {
        self.stores
            .values()
            .map(|s| s.stats().stale_fill_writes)
            .sum()
    }

    /// The replica of `region`, if held.
    pub fn store(&self, region: RegionId) -> Option<&RegionStore> {
        self.stores.get(&region)
    }

    fn primary_store(&self, region: RegionId) -> Result<&RegionStore, Conflict> {
        if !self.blocked.is_empty() && self.blocked.contains(&region) {
            return Err(Conflict::Unavailable);
        }
        if !self.primary_for.contains(&region) {
            return Err(if self.stores.contains_key(&region) {
                Conflict::NotPrimary
            } else {
                Conflict::UnknownRegion
            });
        }
        self.stores.get(&region).ok_or(Conflict::UnknownRegion)
    }

    /// Serve a read straight from storage (no transaction state involved).
    pub fn read(&self, region: RegionId, key: &[u8], read_ts: Timestamp) -> TxnResponse {
        TxnResponse::Read(
            self.primary_store(region)
                .and_then(|s| s.read(key, read_ts)),
        )
    }

    /// A single-read transaction's read of `key`'s newest version at the
    /// primary of `region` ([`RegionStore::read_latest`]; FaRM §3).
    pub fn read_latest(&self, region: RegionId, key: &[u8]) -> TxnResponse {
        TxnResponse::ReadLatest(self.primary_store(region).and_then(|s| s.read_latest(key)))
    }

    /// [`Participant::read_latest`] without its lock check: the injected
    /// bug `LatestReadsPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_latest_past_locks(&self, region: RegionId, key: &[u8]) -> TxnResponse {
        TxnResponse::ReadLatest(
            self.primary_store(region)
                .map(|s| s.read_latest_past_locks(key)),
        )
    }

    /// [`Participant::read`] without its lock checks
    /// (`RegionStore::read_past_locks`): the injected bug
    /// `LockWaitsReadPastLocks` (feature `sim-bugs` only).
    #[cfg(feature = "sim-bugs")]
    pub fn read_past_locks(&self, region: RegionId, key: &[u8], read_ts: Timestamp) -> TxnResponse {
        TxnResponse::Read(
            self.primary_store(region)
                .and_then(|s| s.read_past_locks(key, read_ts)),
        )
    }

    /// True if another transaction (or lock recovery) holds the lock of a
    /// key `rec` writes here: a LOCK of `rec` would fail with
    /// `Conflict::Locked` now. For a waiting LOCK, which is tried again
    /// only once this is false (and journals nothing meanwhile).
    pub fn locked_by_another(&self, rec: &meridian_wire::LockRecord) -> bool {
        rec.writes.iter().any(|w| {
            self.stores
                .get(&w.region)
                .is_some_and(|s| s.locked_by_another(rec.tx, &w.key))
        })
    }

    /// Serve a scan straight from storage, clamped to the region's range.
    pub fn scan(
        &self,
        region: RegionId,
        range: &KeyRange,
        limit: u32,
        read_ts: Timestamp,
    ) -> TxnResponse {
        let limit = limit.min(self.limits.max_scan_rows) as usize;
        TxnResponse::Scan(
            self.primary_store(region)
                .and_then(|s| s.scan(range, read_ts, limit, self.limits.max_scan_bytes)),
        )
    }

    /// Handle a transaction-protocol request; piggybacked `truncate` ids
    /// are processed first. A malformed request is answered with
    /// [`Response::Rejected`] before it touches any state.
    pub fn handle(&mut self, truncate: &[TxId], req: &TxnRequest) -> Response {
        self.stats.requests += 1;
        let mutates = !truncate.is_empty()
            || matches!(
                req,
                TxnRequest::Lock(_)
                    | TxnRequest::LockBlind { .. }
                    | TxnRequest::CommitBackup { .. }
                    | TxnRequest::CommitPrimary { .. }
                    | TxnRequest::Abort { .. }
                    | TxnRequest::Truncate { .. }
            );
        if mutates {
            self.journal(|| Mutation::Request {
                truncate: truncate.to_vec(),
                req: req.clone(),
            });
        }
        if !truncate.is_empty() {
            self.truncate(truncate);
        }
        let ok = |r: TxnResponse| Response::Txn(r);
        match req {
            TxnRequest::Read {
                region,
                key,
                read_ts,
            } => ok(self.read(*region, key, *read_ts)),
            TxnRequest::ReadLatest { region, key } => ok(self.read_latest(*region, key)),
            TxnRequest::Scan {
                region,
                range,
                limit,
                read_ts,
            } => ok(self.scan(*region, range, *limit, *read_ts)),
            TxnRequest::Lock(rec) => match self.check_record(rec, true) {
                Ok(()) => ok(TxnResponse::Lock(self.lock(rec, &[]))),
                Err(r) => Response::Rejected(r),
            },
            TxnRequest::LockBlind { record, blind } => {
                let flags = if blind.len() == record.writes.len() {
                    Ok(())
                } else {
                    Err(Rejection::BlindFlagsMismatch {
                        writes: record.writes.len(),
                        flags: blind.len(),
                    })
                };
                match self.check_record(record, true).and(flags) {
                    Ok(()) => ok(TxnResponse::Lock(self.lock(record, blind))),
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::Validate {
                tx,
                read_ts,
                keys,
                ranges,
            } => ok(TxnResponse::Validate(
                self.validate(*tx, *read_ts, keys, ranges),
            )),
            TxnRequest::CommitBackup { record, write_ts } => {
                match self
                    .check_record(record, false)
                    .and_then(|()| check_write_ts(record.read_ts, *write_ts))
                {
                    Ok(()) => {
                        self.commit_backup(record, *write_ts);
                        ok(TxnResponse::Ack)
                    }
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::CommitPrimary { tx, write_ts } => {
                match self.commit_primary(*tx, *write_ts) {
                    Ok(()) => ok(TxnResponse::Ack),
                    Err(r) => Response::Rejected(r),
                }
            }
            TxnRequest::Abort { tx } => {
                self.abort(*tx);
                ok(TxnResponse::Ack)
            }
            TxnRequest::Truncate { txs } => {
                self.truncate(txs);
                ok(TxnResponse::Ack)
            }
            // The node holds it until its `write_ts` passed and hands the
            // participant only what it carries.
            TxnRequest::AfterWriteTs { .. } => Response::Rejected(Rejection::MalformedHold),
        }
    }

    /// Process a piggybacked TRUNCATE record: its ids, then its low bound.
    pub fn truncate_piggybacked(&mut self, t: &meridian_wire::Truncation) {
        if !t.txs.is_empty() || t.low.is_some() {
            self.journal(|| Mutation::Truncation(t.clone()));
        }
        if !t.txs.is_empty() {
            self.truncate(&t.txs);
        }
        if let Some(low) = t.low {
            if low.local <= self.low_bound(low.coordinator) {
                return;
            }
            self.low_bounds.insert(low.coordinator, low.local);
            while self.low_bounds.len() > self.limits.max_finished_ids {
                self.low_bounds.pop_first();
            }
            // Records below the bound can only be stale duplicates (a LOCK
            // re-delivered after its ABORT once the finished set forgot
            // it) or records of a transaction whose ABORT this node refused
            // (its configuration had changed): the coordinator has finished
            // those transactions, so release them.
            let stale: Vec<TxId> = self
                .log
                .primary
                .keys()
                .filter(|tx| tx.coordinator == low.coordinator && tx.local < low.local)
                .copied()
                .collect();
            for tx in stale {
                if matches!(self.log.primary.get(&tx), Some((_, LockState::Locked))) {
                    self.release_aborted_holds(tx);
                }
                self.abort(tx);
                self.truncate(&[tx]);
            }
        }
    }

    /// Release lock recovery's holds (FaRM §5.3 step 4) of `tx`, whose
    /// LOCK record here is still `Locked` below its coordinator's low bound
    /// (FaRM Table 1), in every region.
    ///
    /// Such a transaction was aborted by its coordinator: the bound passes
    /// a committed transaction only once its TRUNCATEs went out, and those
    /// go only after every COMMIT-PRIMARY was acknowledged (FaRM §4 step
    /// 5), which leaves no LOCK record `Locked`; and a coordinator aborts
    /// only before any COMMIT-BACKUP is sent
    /// ([`crate::Transaction::abandon`]). So no replica holds COMMIT-BACKUP
    /// or COMMIT-PRIMARY evidence of it and recovery can only decide abort
    /// (FaRM §5.3 steps 6–7): its holds guard no write a read could miss
    /// (unlike swarm seed 4779's, whose transaction committed). They must
    /// go with the records, not wait for ABORT-RECOVERY: once the records
    /// are gone everywhere, no later configuration finds the transaction
    /// to recover, and a hold left behind would stay for good (swarm seed
    /// 291 dropped such a record while holding its key; ABORT-RECOVERY
    /// happened to follow in the same configuration).
    fn release_aborted_holds(&mut self, tx: TxId) {
        self.release_recovery_holds(tx);
    }

    /// The low bound received from `coordinator` (0 if none).
    pub fn low_bound(&self, coordinator: u64) -> u64 {
        self.low_bounds.get(&coordinator).copied().unwrap_or(0)
    }

    /// What this replica knows of `tx` in `region` (FaRM §5.3 step 6): a
    /// LOCK record (committed or not) if this node is the region's primary
    /// and locked for it, a COMMIT-BACKUP record if a backup, else how it
    /// finished here (aborted, truncated, or below the coordinator's low
    /// bound, which FaRM counts as truncated), else nothing.
    pub fn evidence(&self, tx: TxId, region: RegionId) -> meridian_wire::Evidence {
        use meridian_wire::Evidence;
        let touches =
            |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| w.region == region);
        if self.recovered.contains_key(&tx) {
            return Evidence::CommitPrimary;
        }
        // The strongest of the records held: a LOCK record (a restored
        // primary's, whose COMMIT-PRIMARY the crash took) can sit beside
        // a stronger replicated record (`replicate_tx_state`).
        let primary = self
            .log
            .primary
            .get(&tx)
            .filter(|(rec, _)| touches(rec))
            .map(|(_, state)| match state {
                LockState::Committed(_) => Evidence::CommitPrimary,
                LockState::Locked => Evidence::Lock,
            });
        let backup = self
            .log
            .backup
            .get(&tx)
            .filter(|(rec, _)| touches(rec))
            .map(|_| Evidence::CommitBackup);
        let replicated = self
            .log
            .replicated
            .get(&tx)
            .filter(|(rec, _, _)| touches(rec))
            .map(|(_, e, _)| *e);
        if let Some(e) = [primary, backup, replicated].into_iter().flatten().min() {
            return e;
        }
        match self.finished.get(&tx) {
            Some(Finish::Aborted) => Evidence::Aborted,
            Some(Finish::Truncated) => Evidence::Truncated,
            None if tx.local < self.low_bound(tx.coordinator) => Evidence::Truncated,
            None => Evidence::Nothing,
        }
    }

    /// True if `tx` is finished here: aborted or truncated recently, or
    /// below its coordinator's low bound.
    fn is_finished(&self, tx: TxId) -> bool {
        self.finished.contains_key(&tx) || tx.local < self.low_bound(tx.coordinator)
    }

    /// Validate a LOCK (`as_primary`) or COMMIT-BACKUP record before it
    /// touches any state: non-empty, every key once, every key inside the
    /// region it names, sizes within [`Limits`]. A record that fails would
    /// otherwise reach a release-build assertion halfway through installing
    /// it (review finding 5).
    fn check_record(
        &self,
        rec: &meridian_wire::LockRecord,
        as_primary: bool,
    ) -> Result<(), Rejection> {
        if rec.writes.is_empty() {
            return Err(Rejection::EmptyRecord);
        }
        let mut seen = std::collections::BTreeSet::new();
        for w in &rec.writes {
            if w.key.len() > self.limits.max_key_bytes {
                return Err(Rejection::KeyTooLarge {
                    len: w.key.len(),
                    max: self.limits.max_key_bytes,
                });
            }
            if let Some(v) = &w.value {
                if v.len() > self.limits.max_value_bytes {
                    return Err(Rejection::ValueTooLarge {
                        len: v.len(),
                        max: self.limits.max_value_bytes,
                    });
                }
            }
            if self.map.region_of(&w.key).id != w.region {
                return Err(Rejection::WrongRegion {
                    key: w.key.clone(),
                    region: w.region,
                });
            }
            if !seen.insert(w.key.as_slice()) {
                return Err(Rejection::DuplicateKey { key: w.key.clone() });
            }
            let held = if as_primary {
                self.primary_for.contains(&w.region)
            } else {
                self.backup_for.contains(&w.region)
            };
            if !held {
                return Err(Rejection::WrongRole(format!(
                    "{} is not {} of {}",
                    self.node,
                    if as_primary { "primary" } else { "a backup" },
                    w.region
                )));
            }
        }
        Ok(())
    }

    fn finish(&mut self, tx: TxId, how: Finish) {
        if self.finished.insert(tx, how).is_none() {
            self.finished_order.push_back(tx);
            while self.finished_order.len() > self.limits.max_finished_ids {
                if let Some(old) = self.finished_order.pop_front() {
                    self.finished.remove(&old);
                }
            }
        }
    }

    /// LOCK (FaRM §4 step 1, FaRMv2 Algorithm 2 LockAtTs): lock every
    /// write of `rec` or none. A write whose `blind` flag is set (missing
    /// flags count as unset: plain [`TxnRequest::Lock`]) is locked without
    /// the check against `rec.read_ts` ([`TxnRequest::LockBlind`]).
    fn lock(&mut self, rec: &meridian_wire::LockRecord, blind: &[bool]) -> Result<(), Conflict> {
        if self.log.primary.contains_key(&rec.tx) {
            return Ok(()); // duplicate delivery
        }
        if self.is_finished(rec.tx) {
            // Aborted (the coordinator gave up and its ABORT overtook this
            // LOCK) or already truncated: never lock for it again.
            return Err(Conflict::Finished);
        }
        if self.log.len() >= self.limits.max_log_records {
            return Err(Conflict::Overloaded);
        }
        if !self.blocked.is_empty() && rec.writes.iter().any(|w| self.blocked.contains(&w.region)) {
            return Err(Conflict::Unavailable);
        }
        let mut locked = 0;
        let mut result = Ok(());
        for (i, w) in rec.writes.iter().enumerate() {
            let store = self
                .stores
                .get_mut(&w.region)
                .ok_or(Conflict::UnknownRegion)?;
            let blind_write = blind.get(i).copied().unwrap_or(false);
            let unchecked =
                blind_write || meridian_bugs::bug!(self.bugs, LocksUnchecked, if !blind_write);
            let check = (!unchecked).then_some(rec.read_ts);
            if let Err(c) = store.lock(rec.tx, &w.key, check) {
                result = Err(c);
                break;
            }
            locked += 1;
        }
        if let Err(c) = result {
            for w in &rec.writes[..locked] {
                if let Some(s) = self.stores.get_mut(&w.region) {
                    s.unlock(rec.tx, &w.key);
                }
            }
            self.stats.lock_conflicts += 1;
            return Err(c);
        }
        self.log
            .primary
            .insert(rec.tx, (rec.clone(), LockState::Locked));
        Ok(())
    }

    fn validate(
        &mut self,
        tx: TxId,
        read_ts: Timestamp,
        keys: &[(RegionId, Vec<u8>)],
        ranges: &[(RegionId, KeyRange)],
    ) -> Result<(), Conflict> {
        let r = (|| {
            for (region, key) in keys {
                self.primary_store(*region)?
                    .validate_key(tx, key, read_ts)?;
            }
            for (region, range) in ranges {
                self.primary_store(*region)?
                    .validate_range(tx, range, read_ts)?;
            }
            Ok(())
        })();
        if r.is_err() {
            self.stats.validation_failures += 1;
        }
        r
    }

    fn commit_backup(&mut self, record: &meridian_wire::LockRecord, write_ts: Timestamp) {
        if self.is_finished(record.tx) {
            return; // a duplicate after TRUNCATE: already applied
        }
        if self.log.backup.len() >= self.limits.max_log_records {
            // Log full: apply the record now instead of lazily. The coordinator
            // only sends COMMIT-BACKUP after deciding to commit.
            self.apply_backup(record, write_ts);
            return;
        }
        self.log
            .backup
            .insert(record.tx, (record.clone(), write_ts));
    }

    fn apply_backup(&mut self, record: &meridian_wire::LockRecord, write_ts: Timestamp) {
        for w in &record.writes {
            if let Some(s) = self.stores.get_mut(&w.region) {
                s.apply_backup(&w.key, write_ts, w.value.clone());
            }
        }
        self.stats.backup_applied += 1;
    }

    fn commit_primary(&mut self, tx: TxId, write_ts: Timestamp) -> Result<(), Rejection> {
        let Some((rec, state)) = self.log.primary.get_mut(&tx) else {
            return Err(Rejection::NoLockRecord);
        };
        if *state != LockState::Locked {
            return Ok(()); // duplicate
        }
        // Checked before any install: the lock guarantees every head is at or
        // below read_ts, so write_ts > read_ts makes every install legal.
        check_write_ts(rec.read_ts, write_ts)?;
        *state = LockState::Committed(write_ts);
        for w in &rec.writes {
            if let Some(s) = self.stores.get_mut(&w.region) {
                s.install(tx, &w.key, write_ts, w.value.clone());
            }
        }
        self.stats.commits += 1;
        Ok(())
    }

    fn abort(&mut self, tx: TxId) {
        if matches!(
            self.log.primary.get(&tx),
            Some((_, LockState::Committed(_)))
        ) {
            return; // committed here: an ABORT cannot undo it
        }
        self.finish(tx, Finish::Aborted);
        if let Some((rec, LockState::Locked)) = self.log.primary.get(&tx) {
            for w in &rec.writes {
                if let Some(s) = self.stores.get_mut(&w.region) {
                    s.unlock(tx, &w.key);
                }
            }
            self.log.primary.remove(&tx);
        }
    }

    fn truncate(&mut self, txs: &[TxId]) {
        for tx in txs {
            self.finish(*tx, Finish::Truncated);
            // COMMIT-RECOVERY's marks end with any truncation, not only
            // TRUNCATE-RECOVERY: the finished set now says the same
            // (evidence `Truncated`, which recovery counts as committed),
            // and a plain TRUNCATE whose TRUNCATE-RECOVERY never came
            // used to leave them here for good.
            self.recovered.remove(tx);
            if !self.recovered_regions.is_empty() {
                let done: Vec<(TxId, RegionId)> = self
                    .recovered_regions
                    .range((*tx, RegionId(0))..=(*tx, RegionId(u32::MAX)))
                    .copied()
                    .collect();
                for k in done {
                    self.recovered_regions.remove(&k);
                }
            }
            // Regions whose writes of `tx` are in place here once the
            // records below are applied.
            let mut applied: std::collections::BTreeSet<RegionId> =
                std::collections::BTreeSet::new();
            if let Some((_, LockState::Committed(_))) = self.log.primary.get(tx) {
                if let Some((rec, _)) = self.log.primary.remove(tx) {
                    applied.extend(rec.writes.iter().map(|w| w.region));
                }
            }
            if let Some((rec, wts)) = self.log.backup.remove(tx) {
                applied.extend(rec.writes.iter().map(|w| w.region));
                self.apply_backup(&rec, wts);
            }
            // Only committed transactions are truncated: a replicated
            // record is applied like a COMMIT-BACKUP record. One without
            // `write_ts` (evidence Lock) is never left here holding a key:
            // the coordinator's TRUNCATE names only transactions whose
            // every COMMIT-PRIMARY was acknowledged, so in their
            // configuration every replica of every written region logged
            // a COMMIT-BACKUP or committed LOCK record with `write_ts`, and
            // every later report and REPLICATE-TX-STATE of them carries it
            // (FaRM §5.3 steps 3–5); any other transaction is truncated
            // only by TRUNCATE-RECOVERY, sent once every replica of every
            // region with a record acknowledged its COMMIT-RECOVERY, which
            // takes the replicated record, installs it and releases its
            // regions' holds (step 7); and the low bound's release of an
            // aborted transaction's records releases its holds first
            // (`release_aborted_holds`).
            if let Some((rec, _, Some(wts))) = self.log.replicated.remove(tx) {
                applied.extend(rec.writes.iter().map(|w| w.region));
                self.apply_backup(&rec, wts);
            }
            // A truncated transaction committed (its coordinator truncates
            // only after every COMMIT-PRIMARY was acknowledged), so lock
            // recovery's holds of it in regions whose writes are now in
            // place here go: the recovery that took them may never decide
            // it (its coordinator left before deciding, and the next
            // configuration finds no record of it here to vote on: swarm
            // seed 1569 kept a key held for good). A hold in a region
            // whose writes this node does not know stays until that
            // region's COMMIT-RECOVERY (swarm seed 4779).
            for r in applied {
                if let Some(keys) = self.recovery_held.remove(&(*tx, r)) {
                    if let Some(store) = self.stores.get_mut(&r) {
                        for k in &keys {
                            store.recovery_unlock(*tx, k);
                        }
                    }
                }
            }
        }
    }

    /// Advance GC on every replica to `safe_point` (time-window GC: the
    /// runtime passes its clock's lower bound minus `gc_window_ms`).
    ///
    /// The safe point is held below the oldest COMMIT-BACKUP record not yet
    /// applied: backups apply at truncation, in any order across
    /// coordinators, and a tombstone collected before an older write
    /// arrives would let that write resurrect the deleted key (found by the
    /// simulator, seed 233).
    pub fn gc(&mut self, safe_point: Timestamp) {
        if self.journal.is_some() && safe_point != self.journaled_gc {
            self.journaled_gc = safe_point;
            self.journal(|| Mutation::Gc(safe_point));
        }
        let oldest_pending = self
            .log
            .backup
            .values()
            .map(|(_, wts)| *wts)
            .chain(self.log.replicated.values().filter_map(|(_, _, w)| *w))
            .min()
            .map_or(safe_point, |w| Timestamp(w.0.saturating_sub(1)));
        let safe_point = safe_point.min(oldest_pending);
        for s in self.stores.values_mut() {
            s.gc(safe_point);
        }
    }

    /// The key's region per this node's map.
    pub fn region_of(&self, key: &[u8]) -> RegionId {
        self.map.region_of(key).id
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        let mut locks = 0usize;
        for (region, store) in &self.stores {
            store.check_invariants();
            for (key, obj) in store.iter() {
                if let Some(&tx) = obj.lock.as_deref() {
                    locks += 1;
                    let rec = self.log.primary.get(&tx);
                    assert!(
                        matches!(rec, Some((r, LockState::Locked)) if r.writes.iter().any(|w| w.region == *region && &w.key == key)),
                        "lock on {key:?} held by {tx} without a Locked LOCK record"
                    );
                }
            }
        }
        let expected: usize = self
            .log
            .primary
            .values()
            .filter(|(_, s)| *s == LockState::Locked)
            .map(|(r, _)| {
                r.writes
                    .iter()
                    .filter(|w| self.primary_for.contains(&w.region))
                    .count()
            })
            .sum();
        for ((tx, region), keys) in &self.recovery_held {
            let store = self.stores.get(region);
            assert!(
                keys.iter()
                    .all(|k| store.is_some_and(|s| s.holds_recovery_lock(*tx, k))),
                "{tx} lost a recovery lock in {region} at {}",
                self.node
            );
        }
        assert!(
            self.blocked.iter().all(|r| self.primary_for.contains(r)),
            "a blocked region this node is not primary of"
        );
        assert_eq!(
            locks,
            expected,
            "locks in storage and Locked LOCK records disagree at {} (primary of {:?}): {:?}",
            self.node,
            self.primary_for,
            self.stores
                .iter()
                .flat_map(|(r, s)| s.iter().filter_map(move |(k, o)| o
                    .lock
                    .as_deref()
                    .copied()
                    .map(|t| (*r, k.to_vec(), t))))
                .collect::<Vec<_>>()
        );
        assert!(
            self.log.len() <= 2 * self.limits.max_log_records,
            "log over its bound"
        );
        // A record kept as commit-primary evidence (COMMIT-RECOVERY, or a
        // region's commit replicated in step 5) carries its write_ts: it
        // is applied with it at truncation and holds GC below it.
        for (tx, (_, e, w)) in &self.log.replicated {
            assert!(
                *e != meridian_wire::Evidence::CommitPrimary || w.is_some(),
                "{tx} kept as committed without write_ts at {}",
                self.node
            );
        }
        assert!(self.finished.len() == self.finished_order.len());
        assert!(self.finished_order.len() <= self.limits.max_finished_ids);
        assert!(self.low_bounds.len() <= self.limits.max_finished_ids);
        // No LOCK record below its coordinator's low bound: the coordinator
        // has finished those transactions.
        for tx in self.log.primary.keys() {
            assert!(
                tx.local >= self.low_bound(tx.coordinator),
                "{tx} has a LOCK record below its coordinator's low bound"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::{ConfigId, LockRecord, WriteOp};

    fn cfg() -> Configuration {
        // One node holding every region as primary keeps the tests short.
        Configuration::local(1, 7000, 1, 4, std::path::Path::new("/nonexistent"))
    }

    fn tx(l: u64) -> TxId {
        TxId {
            config: ConfigId(1),
            coordinator: 9,
            thread: 0,
            local: l,
        }
    }

    /// Two nodes, replication 2, four regions.
    fn two_nodes() -> Configuration {
        Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"))
    }

    /// A configuration renewed with the same replicas blocks nothing at a
    /// live primary, but every region a primary restored from disk leads:
    /// the restart may have lost LOCK records and COMMIT-PRIMARY installs
    /// that a backup's COMMIT-BACKUP record will commit in recovery (swarm
    /// seed 561). The broken variant blocks nothing.
    #[test]
    fn a_restored_primary_blocks_every_region_it_leads_until_lock_recovery() {
        let two = two_nodes();
        let renewed = two.renewed();
        let node = NodeId(0);
        let mut live = Participant::new(node, &two);
        assert!(!live.primary_for.is_empty());
        live.reconfigure(&renewed);
        assert!(
            live.blocked_regions().is_empty(),
            "a live primary blocked regions"
        );
        let cp = Participant::new(node, &two)
            .checkpoint()
            .expect("checkpoint");
        let mut restored = Participant::restore(node, &two, Some(&cp), &[]).expect("restore");
        assert_eq!(
            restored.blocked_regions(),
            restored.primary_for,
            "serving before a config"
        );
        restored.reconfigure(&renewed);
        assert_eq!(restored.blocked_regions(), restored.primary_for);
        restored.check_invariants();
        // Lock recovery then opens them, as in any configuration.
        for r in restored.primary_for.clone() {
            restored.recover_locks(r, &[]);
        }
        assert!(restored.blocked_regions().is_empty());
        // Only the first configuration after the restore.
        restored.reconfigure(&renewed.renewed());
        assert!(restored.blocked_regions().is_empty());
        #[cfg(feature = "sim-bugs")]
        {
            use meridian_bugs::{Bug, Bugs};
            let mut broken = Participant::restore(node, &two, Some(&cp), &[]).expect("restore");
            let bugs = Bugs::of(&[Bug::RestoreForgotten]);
            broken.set_bugs(bugs.clone());
            broken.reconfigure(&renewed);
            assert!(broken.blocked_regions().is_empty());
            assert!(bugs.hits(Bug::RestoreForgotten) > 0);
        }
    }

    /// A backup promoted to primary by a configuration that never
    /// committed (so no lock recovery ran) stays blocked in the next
    /// configuration even when that one keeps the placement and its
    /// LastReplicaChange (swarm seed 4639: region 2 promoted at node 3 in
    /// config 2, which never committed; config 3 kept it with
    /// LastReplicaChange 2 and node 3 served a read from its old copy,
    /// missing a committed transaction's COMMIT-BACKUP write).
    #[test]
    fn a_promotion_that_never_committed_stays_blocked_until_lock_recovery() {
        let one = two_nodes();
        let node = NodeId(1);
        let mut p = Participant::new(node, &one);
        let r = one
            .regions()
            .iter()
            .find(|i| i.primary == NodeId(0) && i.backups.contains(&node))
            .expect("a region node 1 backs up")
            .id;
        let key: Vec<u8> = (0u8..=255)
            .map(|k| vec![k, 7])
            .find(|k| p.region_of(k) == r)
            .expect("a key of the region");
        // Config 2 promotes node 1 (it never commits: no recover_locks).
        let mut two = one.renewed();
        let id = two.id();
        let info = two.placement.iter_mut().find(|i| i.id == r).unwrap();
        info.primary = node;
        info.backups = vec![NodeId(0)];
        info.last_primary_change = id;
        info.last_replica_change = id;
        p.reconfigure(&two);
        assert!(p.blocked_regions().contains(&r));
        // Config 3 keeps the placement (LastReplicaChange stays 2).
        let three = two.renewed();
        p.reconfigure(&three);
        assert!(
            p.blocked_regions().contains(&r),
            "unblocked without lock recovery"
        );
        assert_eq!(
            p.read(r, &key, Timestamp(100)),
            TxnResponse::Read(Err(Conflict::Unavailable))
        );
        p.check_invariants();
        p.recover_locks(r, &[]);
        assert!(!p.blocked_regions().contains(&r));
    }

    /// Recovery holds live in a region's store: a configuration that
    /// refills a region (its copy here starts empty) drops them with the
    /// old copy, or the participant's invariants see a hold without its
    /// lock (swarm seed 577, under an experimental commit protocol: a
    /// restored node that had led the region in an earlier recovery).
    #[test]
    fn a_refilled_region_drops_its_recovery_holds() {
        let two = two_nodes();
        let node = NodeId(0);
        let mut p = Participant::new(node, &two);
        let r = p.primary_for[0];
        let key: Vec<u8> = (0u8..=255)
            .map(|k| vec![k, 7])
            .find(|k| p.region_of(k) == r)
            .expect("a key of the region");
        let rec = record(&p, tx(1), 10, &[&key]);
        let held = meridian_wire::RecoveringTx {
            record: rec,
            evidence: meridian_wire::Evidence::Lock,
            write_ts: None,
        };
        p.recover_locks(r, &[held]);
        assert!(!p.recovery_held.is_empty());
        p.check_invariants();
        let mut next = two.renewed();
        next.config_id += 1;
        refill_as_backup(&mut p, &mut next, r, node);
        assert!(
            p.recovery_held.is_empty(),
            "holds outlived the dropped copy"
        );
        p.check_invariants();
    }

    /// The key reads as absent at a late timestamp: a deleted key stayed
    /// deleted.
    fn assert_deleted(p: &Participant, region: RegionId, key: &[u8]) {
        let store = p.stores.get(&region).expect("the region's store");
        assert_eq!(
            store.read(key, Timestamp(3_000)),
            Ok(None),
            "the deleted key stays deleted"
        );
    }

    /// COMMIT-BACKUP of `rec` at `write_ts` at backup `p`, acknowledged.
    fn commit_backup(p: &mut Participant, rec: LockRecord, write_ts: u64) {
        let r = p.handle(
            &[],
            &TxnRequest::CommitBackup {
                record: rec,
                write_ts: Timestamp(write_ts),
            },
        );
        assert_eq!(r, Response::Txn(TxnResponse::Ack));
    }

    /// LOCK then COMMIT-PRIMARY of `rec` at `write_ts`, both acknowledged.
    fn commit_at_primary(p: &mut Participant, rec: LockRecord, write_ts: u64) {
        let tx = rec.tx;
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let commit = TxnRequest::CommitPrimary {
            tx,
            write_ts: Timestamp(write_ts),
        };
        assert_eq!(p.handle(&[], &commit), Response::Txn(TxnResponse::Ack));
    }

    fn record(p: &Participant, t: TxId, read_ts: u64, keys: &[&[u8]]) -> LockRecord {
        LockRecord {
            tx: t,
            read_ts: Timestamp(read_ts),
            regions: vec![p.region_of(keys[0])],
            writes: keys
                .iter()
                .map(|k| WriteOp {
                    region: p.region_of(k),
                    key: k.to_vec(),
                    value: Some(b"v".to_vec()),
                })
                .collect(),
        }
    }

    /// Review finding 5, first case: a LOCK record naming one key twice used
    /// to lock it (idempotently), then panic in `install` at COMMIT-PRIMARY
    /// halfway through the record, leaving the node dead and keys locked.
    #[test]
    fn lock_record_with_a_duplicate_key_is_rejected_untouched() {
        let mut p = Participant::new(NodeId(0), &cfg());
        let rec = record(&p, tx(1), 10, &[b"a", b"a"]);
        let r = p.handle(&[], &TxnRequest::Lock(rec));
        assert_eq!(
            r,
            Response::Rejected(Rejection::DuplicateKey { key: b"a".to_vec() })
        );
        assert_eq!(p.log_len(), 0);
        assert_eq!(p.object_count(), 0, "nothing locked");
        // Even if a coordinator now sends COMMIT-PRIMARY, nothing panics.
        let r = p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        assert_eq!(r, Response::Rejected(Rejection::NoLockRecord));
        p.check_invariants();
    }

    /// Review finding 5, second case: COMMIT-PRIMARY with `write_ts <=
    /// read_ts` reached the `install` assertion. It is now refused before any
    /// state changes; the lock stays until the coordinator aborts.
    #[test]
    fn commit_primary_with_write_ts_not_after_read_ts_is_rejected_untouched() {
        let mut p = Participant::new(NodeId(0), &cfg());
        // A committed version at 50 on "b"; a transaction that read at 60.
        let w = record(&p, tx(1), 40, &[b"b"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(w)),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let c = TxnRequest::CommitPrimary {
            tx: tx(1),
            write_ts: Timestamp(50),
        };
        assert_eq!(p.handle(&[], &c), Response::Txn(TxnResponse::Ack));
        let rec = record(&p, tx(2), 60, &[b"a", b"b"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let bad = TxnRequest::CommitPrimary {
            tx: tx(2),
            write_ts: Timestamp(30),
        };
        assert_eq!(
            p.handle(&[], &bad),
            Response::Rejected(Rejection::WriteTsNotAfterReadTs {
                read_ts: Timestamp(60),
                write_ts: Timestamp(30)
            })
        );
        p.check_invariants();
        // The abort releases both locks; the old version is intact.
        assert_eq!(
            p.handle(&[], &TxnRequest::Abort { tx: tx(2) }),
            Response::Txn(TxnResponse::Ack)
        );
        p.check_invariants();
        assert_eq!(
            p.read(p.region_of(b"b"), b"b", Timestamp(70)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(50),
                value: b"v".to_vec()
            })))
        );
    }

    #[test]
    fn misdirected_and_oversized_records_are_rejected() {
        let mut p = Participant::new(NodeId(0), &cfg());
        let mut rec = record(&p, tx(1), 10, &[b"a"]);
        rec.writes[0].region = RegionId(p.region_of(b"a").0 + 1);
        assert!(matches!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Rejected(Rejection::WrongRegion { .. })
        ));
        let mut rec = record(&p, tx(2), 10, &[b"a"]);
        rec.writes[0].value = Some(vec![0; p.limits.max_value_bytes + 1]);
        assert!(matches!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Rejected(Rejection::ValueTooLarge { .. })
        ));
        let rec = record(&p, tx(3), 10, &[b"a"]);
        assert!(matches!(
            p.handle(
                &[],
                &TxnRequest::CommitBackup {
                    record: rec,
                    write_ts: Timestamp(10)
                }
            ),
            Response::Rejected(_)
        ));
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
    }

    /// A LOCK that arrives after the coordinator's ABORT (the coordinator
    /// timed out and abandoned the transaction; the network reordered the
    /// two) must not lock anything: nobody would ever release it.
    #[test]
    fn a_lock_overtaken_by_its_abort_is_refused() {
        let mut p = Participant::new(NodeId(0), &cfg());
        assert_eq!(
            p.handle(&[], &TxnRequest::Abort { tx: tx(1) }),
            Response::Txn(TxnResponse::Ack)
        );
        let rec = record(&p, tx(1), 10, &[b"a"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec)),
            Response::Txn(TxnResponse::Lock(Err(Conflict::Finished)))
        );
        assert_eq!(p.object_count(), 0);
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
    }

    /// FaRM Table 1's low bound: a stale LOCK below it is refused, and a
    /// record below it (a duplicate LOCK that re-locked after its ABORT was
    /// forgotten) is released when the bound arrives.
    #[test]
    fn a_low_bound_refuses_and_releases_stale_records() {
        let mut c = cfg();
        c.limits.max_finished_ids = 1;
        let mut p = Participant::new(NodeId(0), &c);
        let lock = |p: &mut Participant, l: u64| {
            let rec = record(p, tx(l), 10, &[b"a"]);
            p.handle(&[], &TxnRequest::Lock(rec))
        };
        // tx 1 aborted; tx 2 finished pushes it out of the finished set; a
        // duplicate LOCK of tx 1 then locks again.
        assert_eq!(lock(&mut p, 1), Response::Txn(TxnResponse::Lock(Ok(()))));
        p.handle(&[], &TxnRequest::Abort { tx: tx(1) });
        p.handle(&[], &TxnRequest::Abort { tx: tx(2) });
        assert_eq!(lock(&mut p, 1), Response::Txn(TxnResponse::Lock(Ok(()))));
        assert_eq!(p.log_len(), 1);
        // The coordinator says everything below 3 is finished.
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(0).coordinator,
                local: 3,
            }),
        });
        assert_eq!(p.low_bound(tx(0).coordinator), 3);
        assert_eq!(p.log_len(), 0, "the stale record is released");
        p.check_invariants();
        assert_eq!(
            lock(&mut p, 1),
            Response::Txn(TxnResponse::Lock(Err(Conflict::Finished)))
        );
        assert_eq!(lock(&mut p, 3), Response::Txn(TxnResponse::Lock(Ok(()))));
        p.check_invariants();
    }

    /// A scan reply stays far below the frame limit: rows beyond
    /// `max_scan_bytes` are left for the next request (review finding 8).
    #[test]
    fn scan_replies_are_bounded_in_bytes() {
        let mut c = cfg();
        c.limits.max_scan_bytes = 250;
        let mut p = Participant::new(NodeId(0), &c);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            let mut rec = record(&p, tx(i as u64), 10, &[*k]);
            rec.writes[0].value = Some(vec![7; 100]);
            assert_eq!(
                p.handle(&[], &TxnRequest::Lock(rec)),
                Response::Txn(TxnResponse::Lock(Ok(())))
            );
            let c = TxnRequest::CommitPrimary {
                tx: tx(i as u64),
                write_ts: Timestamp(20),
            };
            assert_eq!(p.handle(&[], &c), Response::Txn(TxnResponse::Ack));
        }
        let range = KeyRange {
            start: b"a".to_vec(),
            end: Some(b"d".to_vec()),
        };
        match p.scan(p.region_of(b"a"), &range, 100, Timestamp(30)) {
            TxnResponse::Scan(Ok((rows, more))) => {
                assert_eq!(rows.len(), 2);
                assert!(more);
            }
            other => panic!("{other:?}"),
        }
    }

    /// FaRM §5.3 step 6: what a replica reports about a transaction, for
    /// each state its records can be in.
    #[test]
    fn evidence_tells_every_record_state_apart() {
        use meridian_wire::Evidence as E;
        let mut p = Participant::new(NodeId(0), &cfg());
        let ra = p.region_of(b"a");
        let rz = p.region_of(&[0xff]);
        assert_ne!(ra, rz);
        let lock = |p: &mut Participant, l: u64| {
            let rec = record(p, tx(l), 10, &[b"a"]);
            p.handle(&[], &TxnRequest::Lock(rec))
        };
        assert_eq!(p.evidence(tx(1), ra), E::Nothing);
        lock(&mut p, 1);
        assert_eq!(p.evidence(tx(1), ra), E::Lock);
        assert_eq!(p.evidence(tx(1), rz), E::Nothing, "another region");
        p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        assert_eq!(p.evidence(tx(1), ra), E::CommitPrimary);
        p.handle(&[tx(1)], &TxnRequest::Abort { tx: tx(99) });
        assert_eq!(p.evidence(tx(1), ra), E::Truncated);
        lock(&mut p, 2);
        p.handle(&[], &TxnRequest::Abort { tx: tx(2) });
        assert_eq!(p.evidence(tx(2), ra), E::Aborted);
        // Swarm seed 1945: a restored primary kept its LOCK record but lost
        // its COMMIT-PRIMARY; lock recovery replicated the backups'
        // COMMIT-BACKUP evidence to it. It must report the stronger one,
        // or a later configuration without those backups aborts what an
        // earlier recovery committed.
        let rec4 = record(&p, tx(4), 30, &[b"a"]);
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec4.clone())),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        assert_eq!(p.evidence(tx(4), ra), E::Lock);
        let rt = |e: E| meridian_wire::RecoveringTx {
            record: rec4.clone(),
            evidence: e,
            write_ts: Some(Timestamp(35)),
        };
        p.replicate_tx_state(ra, &rt(E::Lock));
        assert_eq!(p.evidence(tx(4), ra), E::Lock, "nothing stronger");
        p.replicate_tx_state(ra, &rt(E::CommitBackup));
        assert_eq!(
            p.evidence(tx(4), ra),
            E::CommitBackup,
            "the stronger evidence"
        );
        // Node 1 of two is the backup of region 0.
        let two = Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"));
        let mut b = Participant::new(NodeId(1), &two);
        let rec = record(&b, tx(3), 30, &[&[1]]);
        let r0 = rec.writes[0].region;
        commit_backup(&mut b, rec, 40);
        assert_eq!(b.evidence(tx(3), r0), E::CommitBackup);
        assert_eq!(b.evidence(tx(3), RegionId(1)), E::Nothing);
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(0).coordinator,
                local: 50,
            }),
        });
        assert_eq!(p.evidence(tx(40), ra), E::Truncated, "below the low bound");
        p.check_invariants();
    }

    /// Simulator seed 233: a backup applied a delete (truncated first), GC
    /// collected the tombstone, then an older write of the same key was
    /// truncated and applied — resurrecting the deleted key. GC now stays
    /// below the oldest COMMIT-BACKUP record not yet applied.
    #[test]
    fn gc_never_lets_an_older_backup_write_resurrect_a_deleted_key() {
        let two = Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"));
        let mut b = Participant::new(NodeId(1), &two);
        let key: &[u8] = &[1];
        let older = record(&b, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        let mut delete = record(&b, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        for (rec, wts) in [(older, 10), (delete, 20)] {
            commit_backup(&mut b, rec, wts);
        }
        // The delete's coordinator truncates first; GC runs far ahead.
        b.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(1_000));
        // Then the older write is truncated and applied.
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(2_000));
        assert_deleted(&b, region, key);
        b.check_invariants();
    }

    /// Seed 2: a transaction committed at its primary (COMMIT-PRIMARY) but
    /// not truncated was recovered after a configuration change; a later
    /// delete of the same key had been collected by GC meanwhile, and
    /// COMMIT-RECOVERY installed the old write again — the deleted key came
    /// back. A primary does not reinstall writes it already installed.
    #[test]
    fn commit_recovery_never_reinstalls_a_write_the_primary_installed() {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let key: &[u8] = &[1];
        let older = record(&p, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        let mut delete = record(&p, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        commit_at_primary(&mut p, older.clone(), 10);
        commit_at_primary(&mut p, delete, 20);
        // The delete is truncated and collected; the older write is not
        // truncated (its TRUNCATE was lost) and is recovered later.
        p.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        p.gc(Timestamp(1_000));
        p.commit_recovery(region, &older, Timestamp(10));
        assert_deleted(&p, region, key);
        p.check_invariants();
    }

    /// Swarm seed 854: a replica with no record of a transaction (or only
    /// a step-5 replicated one) applies its COMMIT-RECOVERY. Until the
    /// transaction is truncated it keeps the writes as commit-primary
    /// evidence and reports them to the next configuration: if the
    /// region's primary missed the decision, its LOCK record alone would
    /// vote lock and recovery would abort a committed transaction. The
    /// kept record holds GC below its `write_ts`, so applying it again at
    /// truncation cannot bring back a key a later delete removed.
    #[test]
    fn commit_recovery_keeps_commit_evidence_until_truncation() {
        let mut b = Participant::new(NodeId(1), &two_nodes());
        let key: &[u8] = &[1];
        let older = record(&b, tx(1), 5, &[key]);
        let region = older.writes[0].region;
        assert_eq!(b.evidence(tx(1), region), meridian_wire::Evidence::Nothing);
        b.commit_recovery(region, &older, Timestamp(10));
        let next = b.recovering_records(ConfigId(2), region);
        assert_eq!(
            next.len(),
            1,
            "the commit is reported to the next configuration"
        );
        assert_eq!(next[0].record, older);
        assert_eq!(next[0].evidence, meridian_wire::Evidence::CommitPrimary);
        assert_eq!(next[0].write_ts, Some(Timestamp(10)));
        // A later delete of the key commits and is truncated; GC runs far
        // ahead, but stays below the kept record's write_ts.
        let mut delete = record(&b, tx(2), 15, &[key]);
        delete.writes[0].value = None;
        commit_backup(&mut b, delete, 20);
        b.handle(&[tx(2)], &TxnRequest::Truncate { txs: vec![] });
        b.gc(Timestamp(1_000));
        b.truncate_recovery(tx(1));
        b.gc(Timestamp(2_000));
        assert!(b.recovering_records(ConfigId(2), region).is_empty());
        assert_eq!(
            b.evidence(tx(1), region),
            meridian_wire::Evidence::Truncated
        );
        assert_deleted(&b, region, key);
        b.check_invariants();
    }

    /// A transaction COMMIT-RECOVERY committed here and that then ends with
    /// a plain TRUNCATE (its coordinator finished it; no TRUNCATE-RECOVERY
    /// follows) leaves no recovery mark behind: the marks used to stay for
    /// good, one map entry and one set entry per such transaction and
    /// region. Its evidence is then the finished set's `Truncated`.
    #[test]
    fn a_plain_truncate_ends_commit_recoverys_marks() {
        let mut b = Participant::new(NodeId(1), &two_nodes());
        let rec = record(&b, tx(1), 5, &[&[1], &[2]]);
        let region = rec.writes[0].region;
        b.commit_recovery(region, &rec, Timestamp(10));
        assert_eq!(
            (b.recovered.len(), b.recovered_regions.len()),
            (1, 1),
            "COMMIT-RECOVERY marks the transaction"
        );
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        assert!(
            b.recovered.is_empty() && b.recovered_regions.is_empty(),
            "left after TRUNCATE: {:?} {:?}",
            b.recovered,
            b.recovered_regions
        );
        assert_eq!(
            b.evidence(tx(1), region),
            meridian_wire::Evidence::Truncated
        );
        assert!(b.outcome_known(tx(1)) && b.decided_in(tx(1), region));
        b.check_invariants();
    }

    /// Seed 369: lock recovery held the keys of a transaction a backup
    /// still reported; the primary then truncated it (a late TRUNCATE), and
    /// COMMIT-RECOVERY returned early for the truncated transaction, so the
    /// hold was never released (readers saw `Locked` forever).
    #[test]
    fn commit_recovery_of_a_truncated_transaction_releases_its_recovery_holds() {
        let (mut p, rec) = committed_and_held(meridian_wire::Evidence::CommitBackup);
        p.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        p.commit_recovery(rec.writes[0].region, &rec, Timestamp(10));
        assert_hold_released(&p, &rec);
    }

    /// A primary that committed `tx(1)` (a write of key `[1]` at 10), and
    /// lock recovery's hold on that key, reported with `evidence`: a read
    /// meets the hold.
    fn committed_and_held(
        evidence: meridian_wire::Evidence,
    ) -> (Participant, meridian_wire::LockRecord) {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let rec = record(&p, tx(1), 5, &[&[1]]);
        let region = rec.writes[0].region;
        commit_at_primary(&mut p, rec.clone(), 10);
        p.recover_locks(
            region,
            &[meridian_wire::RecoveringTx {
                record: rec.clone(),
                evidence,
                write_ts: Some(Timestamp(10)),
            }],
        );
        let store = p.stores.get(&region).expect("store");
        assert_eq!(store.read(&[1], Timestamp(20)), Err(Conflict::Locked));
        (p, rec)
    }

    fn assert_hold_released(p: &Participant, rec: &meridian_wire::LockRecord) {
        let store = p.stores.get(&rec.writes[0].region).expect("store");
        assert!(
            matches!(store.read(&[1], Timestamp(20)), Ok(Some(_))),
            "the hold is released"
        );
        p.check_invariants();
    }

    /// Swarm seed 1569: lock recovery held the key of a transaction this
    /// primary had committed (COMMIT-PRIMARY) but not yet truncated; its
    /// recovery coordinator left before deciding, the client's TRUNCATE
    /// arrived in the next configuration, and that configuration's
    /// recovery found no record to vote on, so no COMMIT-RECOVERY ever
    /// came and readers waited on the hold forever. The truncation
    /// releases the holds of regions whose writes are in place.
    #[test]
    fn truncation_releases_the_recovery_holds_of_a_transaction_in_place() {
        let (mut p, rec) = committed_and_held(meridian_wire::Evidence::CommitPrimary);
        p.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        assert_hold_released(&p, &rec);
    }

    /// A one-node participant and two keys in different regions it leads.
    fn two_region_keys() -> (
        Participant,
        &'static [u8],
        RegionId,
        &'static [u8],
        RegionId,
    ) {
        let p = Participant::new(NodeId(0), &cfg());
        let (ka, kb): (&'static [u8], &'static [u8]) = (&[1], &[200]);
        let (ra, rb) = (p.region_of(ka), p.region_of(kb));
        assert_ne!(ra, rb);
        (p, ka, ra, kb, rb)
    }

    /// The count behind the simulator's check on COMMIT-RECOVERY's
    /// truncated branch (`ParticipantStats::holds_released_unapplied`): a
    /// hold that outlived the truncation of a transaction, in a region
    /// whose write this replica never had, released by a COMMIT-RECOVERY
    /// for another region while the key is still older than `write_ts`,
    /// is counted; the release itself is unchanged.
    #[test]
    fn a_hold_released_over_a_missing_write_is_counted() {
        let (mut p, ka, ra, kb, rb) = two_region_keys();
        // kb has an old version (5) here.
        let old = record(&p, tx(1), 1, &[kb]);
        p.handle(&[], &TxnRequest::Lock(old));
        p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(5),
            },
        );
        // Transaction 2 wrote ka and kb at 10; lock recovery holds kb here
        // from another replica's report, and this node knows only ka.
        let in_b = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(2), 6, &[kb])
        };
        p.recover_locks(
            rb,
            &[meridian_wire::RecoveringTx {
                record: in_b,
                evidence: meridian_wire::Evidence::Lock,
                write_ts: None,
            }],
        );
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: vec![tx(2)],
            low: None,
        });
        assert_eq!(p.stats().holds_released_unapplied, 0);
        let in_a = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(2), 6, &[ka])
        };
        p.commit_recovery(ra, &in_a, Timestamp(10));
        assert_eq!(p.stats().holds_released_unapplied, 1, "kb is still at 5");
    }

    /// Swarm seed 291: lock recovery held the keys of a transaction whose
    /// LOCK record this primary still had (evidence Lock) and, in another
    /// region, of one known here only from a replicated record without
    /// `write_ts` (FaRM §5.3 step 5); the coordinator had aborted it (its
    /// ABORT refused in the new configuration) and its low bound passed
    /// it. The bound drops the records; the holds must go too, or no later
    /// configuration finds a record to recover and the keys stay held.
    #[test]
    fn a_low_bound_releases_the_recovery_holds_of_an_aborted_transaction() {
        let (mut p, ka, ra, kb, rb) = two_region_keys();
        let rec = LockRecord {
            regions: vec![ra, rb],
            ..record(&p, tx(1), 5, &[ka])
        };
        assert_eq!(
            p.handle(&[], &TxnRequest::Lock(rec.clone())),
            Response::Txn(TxnResponse::Lock(Ok(())))
        );
        let in_b = LockRecord {
            writes: record(&p, tx(1), 5, &[kb]).writes,
            ..rec.clone()
        };
        let lock_evidence = |record: LockRecord| meridian_wire::RecoveringTx {
            record,
            evidence: meridian_wire::Evidence::Lock,
            write_ts: None,
        };
        p.recover_locks(ra, &[lock_evidence(rec)]);
        p.replicate_tx_state(rb, &lock_evidence(in_b.clone()));
        p.recover_locks(rb, &[lock_evidence(in_b)]);
        for (r, k) in [(ra, ka), (rb, kb)] {
            assert_eq!(
                p.read(r, k, Timestamp(20)),
                TxnResponse::Read(Err(Conflict::Locked))
            );
        }
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: tx(1).coordinator,
                local: 2,
            }),
        });
        assert_eq!(p.log_len(), 0, "the stale records are dropped");
        for (r, k) in [(ra, ka), (rb, kb)] {
            assert_eq!(
                p.read(r, k, Timestamp(20)),
                TxnResponse::Read(Ok(None)),
                "{k:?} still held"
            );
        }
        p.check_invariants();
    }

    /// Swarm seed 9253: a replica filled by copy holds the writes of
    /// transactions its source truncated, without their records. It learns
    /// the source's finished ids with the last chunk, so once primary it
    /// votes `truncated` on them as the source would, not `unknown` (which
    /// made recovery abort a committed transaction). Records it holds keep
    /// their evidence; the knowledge is journaled and replays.
    #[test]
    fn a_filled_replica_votes_truncated_where_its_source_would() {
        use meridian_wire::Evidence as E;
        let mut src = Participant::new(NodeId(0), &cfg());
        let ra = src.region_of(b"a");
        let rec = record(&src, tx(1), 10, &[b"a"]);
        src.handle(&[], &TxnRequest::Lock(rec));
        src.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(1),
                write_ts: Timestamp(20),
            },
        );
        src.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        src.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: 77,
                local: 5,
            }),
        });
        assert_eq!(src.evidence(tx(1), ra), E::Truncated);
        let known = src.finished_ids();
        assert!(known.truncated.contains(&tx(1)));
        // The new replica never saw the transaction.
        let mut new = Participant::new(NodeId(0), &cfg());
        new.enable_journal();
        let rec2 = record(&new, tx(2), 30, &[b"a"]);
        new.handle(&[], &TxnRequest::Lock(rec2));
        let _ = new.drain_journal();
        assert_eq!(
            new.vote_without_records(tx(1), ra),
            meridian_wire::RecoveryVote::Unknown
        );
        let cp = new.snapshot().expect("snapshot").encode().expect("encode");
        new.learn_finished(&known);
        assert_eq!(
            new.vote_without_records(tx(1), ra),
            meridian_wire::RecoveryVote::Truncated
        );
        let other = TxId {
            coordinator: 77,
            ..tx(3)
        };
        assert_eq!(
            new.evidence(other, ra),
            E::Truncated,
            "below the learnt low bound"
        );
        // A transaction it holds records of keeps its evidence.
        let mut with_tx2 = known.clone();
        with_tx2.truncated.push(tx(2));
        new.learn_finished(&with_tx2);
        assert_eq!(new.evidence(tx(2), ra), E::Lock);
        // The checkpoint before plus the journal after rebuild the state.
        let log = new.drain_journal();
        assert!(matches!(
            log.as_slice(),
            [Mutation::LearnFinished(_), Mutation::LearnFinished(_)]
        ));
        let mut replayed =
            Participant::restore(NodeId(0), &cfg(), Some(&cp), &log).expect("restore");
        // A restored primary blocks its regions until recovery (seed 561).
        replayed.blocked = new.blocked.clone();
        assert!(replayed.same_state(&new));
    }

    /// Seed 27: a node removed from the configuration and added back kept
    /// its old copy of a region, with a lock taken two configurations
    /// earlier. A replica listed as filling starts from an empty store.
    #[test]
    fn a_replica_listed_as_filling_starts_empty() {
        let two = two_nodes();
        let mut b = Participant::new(NodeId(1), &two);
        let key: &[u8] = &[1];
        let rec = record(&b, tx(1), 5, &[key]);
        let region = rec.writes[0].region;
        b.handle(
            &[],
            &TxnRequest::CommitBackup {
                record: rec,
                write_ts: Timestamp(10),
            },
        );
        b.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        let store = b.stores.get(&region).expect("backup store");
        assert!(matches!(store.read(key, Timestamp(20)), Ok(Some(_))));
        let mut next = two.clone();
        next.placement = two.regions();
        next.config_id = 3;
        for r in next.placement.iter_mut().filter(|r| r.id == region) {
            r.filling = vec![NodeId(1)];
        }
        let added = b.reconfigure(&next);
        assert!(added.contains(&region));
        let store = b.stores.get(&region).expect("backup store");
        assert_eq!(
            store.read(key, Timestamp(20)),
            Ok(None),
            "stale copy dropped"
        );
        // The stale copy is handed out to be freed off the process lock,
        // once.
        let gone = b.take_discarded();
        assert_eq!(gone.len(), 1, "the stale copy, and nothing else");
        assert!(matches!(gone[0].read(key, Timestamp(20)), Ok(Some(_))));
        assert!(b.take_discarded().is_empty());
        b.check_invariants();
        // A region no longer held here is handed out too.
        let mut after = next.clone();
        after.config_id = 4;
        for r in after.placement.iter_mut() {
            r.filling.clear();
            r.backups.retain(|n| *n != NodeId(1));
            if r.primary == NodeId(1) {
                r.primary = NodeId(0);
            }
        }
        let held_before = b.stores.len();
        b.reconfigure(&after);
        assert!(b.stores.is_empty(), "node 1 holds nothing in 4");
        assert_eq!(b.take_discarded().len(), held_before);
        // A participant about to be replaced gives up all it holds.
        let mut c = Participant::new(NodeId(1), &two);
        let held = c.stores.len();
        assert!(held > 0);
        assert_eq!(c.take_all_stores().len(), held);
        assert!(c.stores.is_empty());
    }

    /// Reconfigure `p` with `next`, in which node 1 becomes `r`'s primary
    /// and `node` its only, filling backup (its copy starts empty).
    fn refill_as_backup(p: &mut Participant, next: &mut Configuration, r: RegionId, node: NodeId) {
        let id = next.id();
        let info = next
            .placement
            .iter_mut()
            .find(|i| i.id == r)
            .expect("the region");
        info.primary = NodeId(1);
        info.backups = vec![node];
        info.filling = vec![node];
        info.last_primary_change = id;
        info.last_replica_change = id;
        p.reconfigure(next);
    }

    /// Node 0, primary of a region, committed three transactions there,
    /// none truncated yet: `tx(1)` writes key `a` at 10, `tx(2)` key `b`
    /// at 12 and `tx(3)` deletes `b` at 14. Then a configuration lists it
    /// as a filling backup of the region (a member that missed a stored
    /// configuration removing it and was re-added by the next, keeping its
    /// log: swarm seed 6649), so its copy starts empty. Returns the
    /// participant, the records, the region and the keys `a`, `b`.
    fn refilled_under_committed_lock_records(
    ) -> (Participant, [LockRecord; 3], RegionId, [Vec<u8>; 2]) {
        let two = two_nodes();
        let node = NodeId(0);
        let mut p = Participant::new(node, &two);
        let r = p.primary_for[0];
        let mut keys = (0u8..=255)
            .map(|k| vec![k, 7])
            .filter(|k| p.region_of(k) == r);
        let mut key = || keys.next().expect("a key of the region");
        let keys = [key(), key()];
        let write_a = record(&p, tx(1), 5, &[&keys[0]]);
        let write_b = record(&p, tx(2), 11, &[&keys[1]]);
        let mut delete_b = record(&p, tx(3), 13, &[&keys[1]]);
        delete_b.writes[0].value = None;
        commit_at_primary(&mut p, write_a.clone(), 10);
        commit_at_primary(&mut p, write_b.clone(), 12);
        commit_at_primary(&mut p, delete_b.clone(), 14);
        let mut next = two.renewed();
        refill_as_backup(&mut p, &mut next, r, node);
        assert_eq!(p.store(r).map(RegionStore::len), Some(0), "refilled");
        p.check_invariants();
        (p, [write_a, write_b, delete_b], r, keys)
    }

    /// The new primary's copy of the region, taken before it (a backup of
    /// the three transactions, its COMMIT-BACKUP records not yet applied)
    /// had any of them: key `a` at 3 only, safe point 2.
    fn merge_copy_without_the_writes(p: &mut Participant, r: RegionId, a: &[u8]) {
        let old = meridian_wire::ObjectCopy {
            key: a.to_vec(),
            versions: vec![(Timestamp(3), Some(b"old".to_vec()))],
            floor_ts: Timestamp(3),
        };
        p.merge_copies(r, None, &[old], true, Timestamp(2));
    }

    /// The value of `key` in `region` at a late timestamp.
    fn value_at(p: &Participant, region: RegionId, key: &[u8]) -> Option<Vec<u8>> {
        let store = p.stores.get(&region).expect("the region's store");
        store
            .read(key, Timestamp(3_000))
            .expect("unlocked")
            .map(|v| v.value)
    }

    /// Review hazard (c): COMMIT-RECOVERY skipped the writes this node's
    /// own LOCK record said it had installed, although the refill had
    /// dropped the copy they were installed in, so the new copy, filled
    /// from a source that did not have them yet, kept missing a committed
    /// write (`a` stayed at its old value). The refill moves them to the
    /// replicated log as commit-primary evidence: the node still reports
    /// the commit, and COMMIT-RECOVERY puts them in place.
    #[test]
    fn commit_recovery_puts_a_refilled_copy_s_own_committed_writes_in_place() {
        let (mut p, [write_a, ..], r, [a, _]) = refilled_under_committed_lock_records();
        merge_copy_without_the_writes(&mut p, r, &a);
        let reported = p.recovering_records(ConfigId(9), r);
        let mine = reported
            .iter()
            .find(|t| t.record.tx == tx(1))
            .expect("the commit is still reported");
        assert_eq!(mine.evidence, meridian_wire::Evidence::CommitPrimary);
        assert_eq!(mine.write_ts, Some(Timestamp(10)));
        p.commit_recovery(r, &write_a, Timestamp(10));
        assert_eq!(
            value_at(&p, r, &a),
            Some(b"v".to_vec()),
            "the committed write is missing from the refilled copy"
        );
        p.check_invariants();
        p.truncate_recovery(tx(1));
        assert_eq!(value_at(&p, r, &a), Some(b"v".to_vec()));
        p.check_invariants();
    }

    /// Hazard (c)'s sibling: a plain TRUNCATE dropped the refilled node's
    /// committed LOCK record unapplied (its writes were "in place"), with
    /// the same result. Truncation now applies the moved writes, behind
    /// the new copy's fill fence: where the source had applied them all
    /// and collected the delete's tombstone (safe point 40), the old write
    /// of the deleted key stays out, as for any record kept across a
    /// refill (swarm seed 2447), so a refilled copy does not need seed 2's
    /// rule that a primary never reinstalls what it installed.
    #[test]
    fn truncation_puts_a_refilled_copy_s_own_committed_writes_in_place() {
        let (mut p, _, r, [a, b]) = refilled_under_committed_lock_records();
        merge_copy_without_the_writes(&mut p, r, &a);
        p.handle(
            &[tx(1), tx(2), tx(3)],
            &TxnRequest::Truncate { txs: vec![] },
        );
        assert_eq!(
            value_at(&p, r, &a),
            Some(b"v".to_vec()),
            "the committed write is missing from the refilled copy"
        );
        assert_eq!(value_at(&p, r, &b), None);
        assert_eq!(p.log_len(), 0);
        p.check_invariants();
        let (mut q, _, r, [a, b]) = refilled_under_committed_lock_records();
        let copied = meridian_wire::ObjectCopy {
            key: a.clone(),
            versions: vec![(Timestamp(10), Some(b"v".to_vec()))],
            floor_ts: Timestamp(10),
        };
        q.merge_copies(r, None, &[copied], true, Timestamp(40));
        q.handle(
            &[tx(1), tx(2), tx(3)],
            &TxnRequest::Truncate { txs: vec![] },
        );
        assert_eq!(value_at(&q, r, &a), Some(b"v".to_vec()));
        assert_eq!(value_at(&q, r, &b), None, "a deleted key came back");
        assert!(q.store(r).is_some_and(|s| s.object(&b).is_none()));
        q.check_invariants();
    }

    /// Disk durability: a checkpoint plus the mutations journaled after it
    /// rebuild exactly the state a participant reached, whatever the mix
    /// of LOCK, COMMIT-PRIMARY, COMMIT-BACKUP, ABORT, TRUNCATE, GC and
    /// recovery calls; so does the full journal from an empty start.
    #[test]
    fn a_checkpoint_and_the_journal_after_it_rebuild_the_state() {
        let two = two_nodes();
        for node in [NodeId(0), NodeId(1)] {
            let mut p = Participant::new(node, &two);
            p.enable_journal();
            let mut all: Vec<Mutation> = Vec::new();
            let mut after: Vec<Mutation> = Vec::new();
            let mut checkpoint = None;
            // A snapshot taken at the same moment and encoded only at the
            // end, after 200 more steps changed the live state: it must
            // still be the state of that moment (the shell encodes it on
            // its own thread while the node goes on).
            let mut snapshot = None;
            let mut z: u64 = 0x9e37_79b9 + u64::from(node.0);
            let mut next = || {
                z ^= z << 13;
                z ^= z >> 7;
                z ^= z << 17;
                z
            };
            for i in 1..400u64 {
                let key = [(next() % 8) as u8 * 32, (next() % 4) as u8];
                let mut rec = record(&p, tx(i), 10 * i, &[&key]);
                if next() % 5 == 0 {
                    rec.writes[0].value = None;
                }
                let wts = Timestamp(10 * i + 5);
                match next() % 6 {
                    0 | 1 => {
                        p.handle(&[], &TxnRequest::Lock(rec.clone()));
                        let req = if next() % 3 == 0 {
                            TxnRequest::Abort { tx: tx(i) }
                        } else {
                            TxnRequest::CommitPrimary {
                                tx: tx(i),
                                write_ts: wts,
                            }
                        };
                        p.handle(&[], &req);
                    }
                    2 | 3 => {
                        p.handle(
                            &[],
                            &TxnRequest::CommitBackup {
                                record: rec,
                                write_ts: wts,
                            },
                        );
                    }
                    4 => {
                        let old = tx(1 + next() % i);
                        p.handle(&[old], &TxnRequest::Truncate { txs: vec![] });
                    }
                    _ => p.gc(Timestamp(10 * i.saturating_sub(50))),
                }
                let drained = p.drain_journal();
                all.extend(drained.iter().cloned());
                after.extend(drained);
                if i == 200 {
                    checkpoint = Some(p.checkpoint().expect("checkpoint"));
                    snapshot = Some(p.snapshot().expect("snapshot"));
                    after.clear();
                }
            }
            assert!(all.len() > 300, "journal too short: {}", all.len());
            let late = snapshot.expect("snapshot").encode().expect("encode");
            assert!(
                late == *checkpoint.as_ref().expect("checkpoint"),
                "a snapshot changed with the live state at {node}"
            );
            assert!(
                p.checkpoint().expect("checkpoint") != late,
                "the steps after the snapshot changed nothing at {node}"
            );
            // A restored participant serves nothing until the next
            // configuration's lock recovery: every region it leads is
            // blocked (swarm seed 561); the rest is the live state exactly.
            let unblocked = |mut r: Participant| {
                let leads: std::collections::BTreeSet<RegionId> =
                    r.primary_for.iter().copied().collect();
                assert!(
                    r.restored && r.blocked == leads,
                    "restored but serving at {node}"
                );
                r.blocked = p.blocked.clone();
                r
            };
            let from_start =
                unblocked(Participant::restore(node, &two, None, &all).expect("replay"));
            assert!(from_start.same_state(&p), "full replay differs at {node}");
            let from_cp = unblocked(
                Participant::restore(node, &two, checkpoint.as_deref(), &after).expect("restore"),
            );
            assert!(
                from_cp.same_state(&p),
                "checkpoint + tail differs at {node}"
            );
            from_cp.check_invariants();
            // A checkpoint of another node is refused.
            let other = NodeId(1 - node.0);
            assert!(matches!(
                Participant::restore(other, &two, checkpoint.as_deref(), &[]),
                Err(DurabilityError::WrongNode { .. })
            ));
            assert!(matches!(
                Participant::restore(node, &two, Some(b"garbage"), &[]),
                Err(DurabilityError::Corrupt(_))
            ));
        }
    }

    /// A decision that reaches a primary before its region's lock recovery
    /// ends (the recovery coordinator decided on another region's
    /// commit-primary vote) must not be undone by that lock recovery: the
    /// keys would stay held for good.
    #[test]
    fn lock_recovery_after_the_decision_holds_nothing() {
        let mut p = Participant::new(NodeId(0), &two_nodes());
        let key: &[u8] = &[1];
        let rec = record(&p, tx(1), 5, &[key]);
        let region = rec.writes[0].region;
        p.commit_recovery(region, &rec, Timestamp(10));
        assert!(p.outcome_known(tx(1)));
        p.recover_locks(
            region,
            &[meridian_wire::RecoveringTx {
                record: rec,
                evidence: meridian_wire::Evidence::CommitBackup,
                write_ts: Some(Timestamp(10)),
            }],
        );
        let store = p.stores.get(&region).expect("store");
        assert!(
            matches!(store.read(key, Timestamp(20)), Ok(Some(_))),
            "the committed write is readable, not held"
        );
        p.check_invariants();
    }

    /// A primary of two regions (keys `ka` in `ra`, `kb` in `rb`; `kb` has
    /// version 5) and tx 2's record writing both at read_ts 6: the
    /// participant, the keys, the regions, and the record restricted to a
    /// region (for seed 4779's tests).
    #[allow(clippy::type_complexity)]
    fn two_region_recovery() -> (
        Participant,
        (&'static [u8], &'static [u8]),
        (RegionId, RegionId),
        impl Fn(RegionId) -> LockRecord,
    ) {
        let mut p = Participant::new(NodeId(0), &cfg());
        let (ka, kb): (&'static [u8], &'static [u8]) = (&[1], &[200]);
        let (ra, rb) = (p.region_of(ka), p.region_of(kb));
        assert_ne!(ra, rb);
        let old = record(&p, tx(1), 1, &[kb]);
        commit_at_primary(&mut p, old, 5);
        let rec = record(&p, tx(2), 6, &[ka, kb]);
        let only = move |r: RegionId| LockRecord {
            writes: rec
                .writes
                .iter()
                .filter(|w| w.region == r)
                .cloned()
                .collect(),
            ..rec.clone()
        };
        (p, (ka, kb), (ra, rb), only)
    }

    /// Swarm seed 4779: a restored primary of two regions lost its LOCK
    /// record of a transaction; lock recovery held the transaction's keys
    /// in both regions from a backup's report. COMMIT-RECOVERY for the first
    /// region must not release the hold on the second region's key before
    /// that key's write is applied (its own COMMIT-RECOVERY), or a read at
    /// a later read_ts sees the old version and a new writer commits over it.
    #[test]
    fn commit_recovery_of_one_region_keeps_the_holds_of_another() {
        let (mut p, (_, kb), (ra, rb), only) = two_region_recovery();
        for r in [ra, rb] {
            p.recover_locks(
                r,
                &[meridian_wire::RecoveringTx {
                    record: only(r),
                    evidence: meridian_wire::Evidence::CommitBackup,
                    write_ts: Some(Timestamp(10)),
                }],
            );
        }
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked))
        );
        p.commit_recovery(ra, &only(ra), Timestamp(10));
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked)),
            "kb released before its write was applied"
        );
        p.commit_recovery(rb, &only(rb), Timestamp(10));
        assert!(matches!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(10),
                ..
            })))
        ));
    }

    /// Seed 4779, the other order: COMMIT-RECOVERY for region A reaches a
    /// primary that lost its record before region B's lock recovery ends;
    /// B's lock recovery must still hold B's key until B's COMMIT-RECOVERY.
    #[test]
    fn lock_recovery_after_another_regions_decision_still_holds() {
        let (mut p, (_, kb), (ra, rb), only) = two_region_recovery();
        let rt = |r: RegionId| meridian_wire::RecoveringTx {
            record: only(r),
            evidence: meridian_wire::Evidence::CommitBackup,
            write_ts: Some(Timestamp(10)),
        };
        p.recover_locks(ra, &[rt(ra)]);
        p.commit_recovery(ra, &only(ra), Timestamp(10));
        p.recover_locks(rb, &[rt(rb)]);
        assert_eq!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Err(Conflict::Locked)),
            "kb served before its write was applied"
        );
        p.commit_recovery(rb, &only(rb), Timestamp(10));
        assert!(matches!(
            p.read(rb, kb, Timestamp(20)),
            TxnResponse::Read(Ok(Some(meridian_wire::Versioned {
                version: Timestamp(10),
                ..
            })))
        ));
        p.check_invariants();
    }
}
