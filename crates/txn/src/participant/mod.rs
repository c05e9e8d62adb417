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
//!
//! **Layout.** This module holds the state ([`Participant`] and its
//! [`DurableState`]), construction, reconfiguration (FaRM §5.2 step 6,
//! §5.3 step 1) and the invariant check; one module per concern holds the
//! rest:
//! - `commit`: the commit protocol, reads, truncation and GC (FaRM §4);
//! - `journal`: the [`Mutation`] journal, checkpoints and restore;
//! - `recovery`: lock recovery, evidence, votes and decisions (FaRM §5.3);
//! - `fill`: data recovery, copies, merges and the fill fence (FaRM §5.4).

mod commit;
mod fill;
mod journal;
mod recovery;
#[cfg(test)]
mod testing;

pub use journal::{DurabilityError, Mutation, ParticipantSnapshot};

use meridian_config::{Configuration, Limits, RegionMap};
use meridian_storage::log::{LockState, TxLog};
use meridian_storage::RegionStore;
use meridian_wire::{Key, NodeId, RegionId, Timestamp, TxId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How a transaction finished at this participant (FaRM §5.3 step 6 tells
/// "aborted" from "truncated" apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Finish {
    Aborted,
    Truncated,
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
    /// write is not in place here, so a read could miss it. The truncated
    /// branch of
    /// [`Participant::commit_recovery`] is safe only while no hold outlives
    /// the truncation of a write it guards; the simulator fails a run in
    /// which this is not 0. Keys absent here (a collected tombstone) are
    /// not counted: their history cannot be told.
    pub holds_released_unapplied: u64,
    /// Keys held by lock recovery with no object here that this replica's
    /// copies carried to a new replica as keys with no versions (a
    /// recovering insert; [`RegionStore::copy_after`], the fill fence).
    pub copied_recovery_holds: u64,
    /// COMMIT-PRIMARYs refused because their `write_ts` was not above a
    /// key's newest version ([`Rejection::WriteTsNotAboveHead`]): only a
    /// faulty or forged coordinator sends one.
    pub refused_below_head: u64,
}

/// Add `w` to `rec`'s writes unless `rec` already writes its key.
fn add_write_once(rec: &mut meridian_wire::LockRecord, w: meridian_wire::WriteOp) {
    if !rec
        .writes
        .iter()
        .any(|x| x.region == w.region && x.key == w.key)
    {
        rec.writes.push(w);
    }
}

/// One node's participant engine.
#[derive(Debug)]
pub struct Participant {
    node: NodeId,
    map: Arc<RegionMap>,
    limits: Limits,
    /// Everything a checkpoint holds besides the node and its
    /// configuration.
    durable: DurableState,
    /// Replicas this participant let go of (a refilled replica's old copy,
    /// a region no longer held), kept until the shell takes them
    /// ([`Participant::take_discarded`]) to free them off the process lock:
    /// freeing a replica of millions of objects takes seconds, long enough
    /// for the node's leases to lapse.
    discarded: Vec<RegionStore>,
    /// Disk durability: the keys whose newest version changed since the
    /// shell last took them ([`Participant::take_installed`]), by
    /// COMMIT-PRIMARY, a backup's apply or COMMIT-RECOVERY; empty when not
    /// journaling. A reply that shows such a key waits for the record that
    /// changed it (`meridian_process::node::ReadDeps`).
    installed: Vec<(RegionId, Key)>,
    stats: ParticipantStats,
    /// The configuration last applied ([`Participant::reconfigure`]), kept
    /// for checkpoints.
    config: Configuration,
    /// Disk durability: every state-changing input since the last drain, in
    /// order ([`Participant::enable_journal`]); `None` when off.
    journal: Option<Vec<Mutation>>,
    /// Rebuilt from disk ([`Participant::restore`]) and no configuration
    /// applied since: the next [`Participant::reconfigure`] blocks every
    /// region this node is primary of, replicas changed or not. A restart
    /// loses what the disk did not hold: LOCK records answered before
    /// their fsync (they are free while every region has a complete
    /// backup) and COMMIT-PRIMARY installs. A backup's COMMIT-BACKUP record
    /// then commits the transaction in recovery, and until lock recovery
    /// holds its keys here a read would miss its write. A whole-cluster
    /// restart renews the configuration with the same replicas, so no
    /// replica change blocks those regions.
    restored: bool,
    /// Injected bugs (tests only; `meridian_bugs`).
    #[cfg(feature = "sim-bugs")]
    bugs: meridian_bugs::Bugs,
}

/// A participant's durable state: what a checkpoint holds besides the node
/// and its configuration ([`ParticipantSnapshot`]), one struct for the live
/// participant and its snapshot.
///
/// The checkpoint format: bincode encodes these fields in this order,
/// without names, so their order and types are fixed (deployed nodes'
/// checkpoints must still restore); a new field goes last.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct DurableState {
    stores: BTreeMap<RegionId, RegionStore>,
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
    /// The last GC safe point journaled (GC calls that change nothing are
    /// not journaled).
    journaled_gc: Timestamp,
    /// (transaction, region) pairs whose writes COMMIT-RECOVERY put in
    /// place here: until a region's pair is here, that region's recovery
    /// holds stay, so that no read misses the region's committed writes
    /// while another region's decision has already been applied.
    #[serde(default)]
    recovered_regions: std::collections::BTreeSet<(TxId, RegionId)>,
    /// Regions this node was filling (FaRM §5.4) and finished filling under
    /// the configuration it holds ([`Participant::mark_filled`]). Durable,
    /// so that a node restored from disk knows its copy was complete when
    /// a later configuration lists it so.
    #[serde(default)]
    filled: std::collections::BTreeSet<RegionId>,
}

impl Participant {
    /// Replicas let go of since the last call (by [`Participant::reconfigure`]),
    /// for the shell to free where freeing does not stall the node: the
    /// tokio node hands them to a thread of their own, the simulator drops
    /// them at once. Dropping them is all there is to do with them.
    pub fn take_discarded(&mut self) -> Vec<RegionStore> {
        std::mem::take(&mut self.discarded)
    }

    /// The keys whose newest version changed since the last call, as
    /// `(region, key)` in the order they changed (empty when not
    /// journaling): COMMIT-PRIMARY installs, backup applies and
    /// COMMIT-RECOVERY. Their records were journaled before this returns.
    pub fn take_installed(&mut self) -> Vec<(RegionId, Key)> {
        std::mem::take(&mut self.installed)
    }

    /// Note that `key` of `region` changed, if journaling
    /// ([`Participant::take_installed`]).
    pub(super) fn note_installed(&mut self, region: RegionId, key: &[u8]) {
        if self.journal.is_some() {
            self.installed.push((region, key.to_vec()));
        }
    }

    /// Every replica this participant holds or let go of, taking them out
    /// (a participant about to be replaced by an empty one; see
    /// [`Participant::take_discarded`]).
    pub fn take_all_stores(&mut self) -> Vec<RegionStore> {
        let mut out = std::mem::take(&mut self.discarded);
        out.extend(std::mem::take(&mut self.durable.stores).into_values());
        out
    }

    /// The configuration last applied.
    pub fn config(&self) -> &Configuration {
        &self.config
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
            durable: DurableState {
                stores,
                primary_for,
                backup_for,
                log: TxLog::default(),
                finished: BTreeMap::new(),
                finished_order: std::collections::VecDeque::new(),
                low_bounds: BTreeMap::new(),
                blocked: Default::default(),
                recovery_held: BTreeMap::new(),
                recovered: BTreeMap::new(),
                journaled_gc: Timestamp::ZERO,
                recovered_regions: Default::default(),
                filled: Default::default(),
            },
            discarded: Vec::new(),
            installed: Vec::new(),
            stats: ParticipantStats::default(),
            config: cfg.clone(),
            journal: None,
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
        // next one, built on it, carries its LastReplicaChange: a region
        // promoted in the lost configuration is blocked here too, so it
        // serves no read before lock recovery.
        let previous = self.config.id();
        self.config = cfg.clone();
        let map = Arc::new(RegionMap::new(cfg));
        let (mut primary_for, mut backup_for, mut added) = (Vec::new(), Vec::new(), Vec::new());
        // A region still blocked here never had its lock recovery: the
        // configuration that blocked it never committed at this node, and
        // a next configuration that keeps the placement and its
        // LastReplicaChange must block it again. (A restored participant's
        // blocks are the restore rule's.)
        let unrecovered = std::mem::take(&mut self.durable.blocked);
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
                    self.durable.blocked.insert(r.id);
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
            // of configurations long gone. A fill
            // interrupted by a configuration change restarts from scratch
            // anyway, and everything it applied is at the primary too
            // (backups apply at truncation, after the primary installed).
            // The node's log is kept, and a record of it may be put in
            // place after the primary deleted the key and collected the
            // tombstone: the new copy's fill fence drops such a write
            // (`RegionStore::merge_chunk`).
            let refill = r.filling.contains(&self.node);
            if refill || !self.durable.stores.contains_key(&r.id) {
                let empty = RegionStore::new(self.limits.max_versions_per_object);
                if let Some(old) = self.durable.stores.insert(r.id, empty) {
                    self.discarded.push(old);
                }
                // Recovery holds lived in the dropped copy (a restored
                // node whose renewed configuration refills a region it led
                // during an earlier recovery).
                let id = r.id;
                self.durable
                    .recovery_held
                    .retain(|(_, region), _| *region != id);
                self.durable.filled.remove(&id);
                // So did the writes this node's committed LOCK records
                // installed in it.
                self.unplace_committed_lock_writes(id);
                added.push(r.id);
            } else if is_primary && self.durable.backup_for.contains(&r.id) {
                if let Some(s) = self.durable.stores.get_mut(&r.id) {
                    s.reset_floors_to_head();
                }
            }
        }
        let held: std::collections::BTreeSet<RegionId> =
            primary_for.iter().chain(&backup_for).copied().collect();
        let gone: Vec<RegionId> = self
            .durable
            .stores
            .keys()
            .filter(|r| !held.contains(r))
            .copied()
            .collect();
        for r in gone {
            if let Some(old) = self.durable.stores.remove(&r) {
                self.discarded.push(old);
            }
        }
        self.durable.filled.retain(|r| held.contains(r));
        let needed =
            |rec: &meridian_wire::LockRecord| rec.writes.iter().any(|w| held.contains(&w.region));
        self.durable.log.primary.retain(|_, (rec, _)| needed(rec));
        self.durable.log.backup.retain(|_, (rec, _)| needed(rec));
        self.durable
            .log
            .replicated
            .retain(|_, (rec, _, _)| needed(rec));
        self.durable
            .recovery_held
            .retain(|(_, r), _| held.contains(r));
        self.map = map;
        self.limits = cfg.limits.clone();
        self.durable.primary_for = primary_for;
        self.durable.backup_for = backup_for;
        self.restored = false;
        added
    }

    /// `region`'s copy here was just replaced by an empty one (a refill, or
    /// a region held again): the writes in it of this node's committed
    /// LOCK records (COMMIT-PRIMARY or COMMIT-RECOVERY installed them in
    /// the dropped copy) are no longer in place. They move to the
    /// replicated log as commit-primary evidence with their `write_ts`,
    /// as COMMIT-RECOVERY keeps a replica's writes: the
    /// node reports the same evidence, and COMMIT-RECOVERY or truncation
    /// puts them in place in the new copy, behind its fill fence
    /// ([`RegionStore::apply_backup`]), like a COMMIT-BACKUP record kept
    /// across a refill. Left in the LOCK record, they would be skipped by
    /// COMMIT-RECOVERY as installed here and dropped unapplied by
    /// truncation, so a copy taken from a source that had not applied the
    /// transaction yet would miss its writes for good. A member that missed
    /// a stored configuration removing it and applies the next, which adds
    /// it back with filling replicas, keeps its log, and so refills under
    /// such a record. A `Locked` record is left as it is:
    /// COMMIT-RECOVERY applies all of its writes.
    fn unplace_committed_lock_writes(&mut self, region: RegionId) {
        let txs: Vec<TxId> = self
            .durable
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
            let Some((rec, LockState::Committed(write_ts))) = self.durable.log.primary.get_mut(&tx)
            else {
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
                self.durable.log.primary.remove(&tx);
            }
            let e = self
                .durable
                .log
                .replicated
                .entry(tx)
                .or_insert_with(|| (header, meridian_wire::Evidence::CommitPrimary, None));
            for w in moved {
                add_write_once(&mut e.0, w);
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
        self.durable.blocked.iter().copied().collect()
    }

    /// The participant of `node` holding no replicas: every request for a
    /// region is refused with [`Conflict::UnknownRegion`] (a node that lost
    /// its memory and has not been given regions again).
    pub fn without_regions(node: NodeId, cfg: &Configuration) -> Self {
        let mut p = Self::new(node, cfg);
        p.durable.stores.clear();
        p.durable.primary_for.clear();
        p.durable.backup_for.clear();
        p
    }

    /// The node id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Regions this node is primary for.
    pub fn primary_regions(&self) -> &[RegionId] {
        &self.durable.primary_for
    }

    /// Regions this node is a backup for.
    pub fn backup_regions(&self) -> &[RegionId] {
        &self.durable.backup_for
    }

    /// Counters.
    pub fn stats(&self) -> ParticipantStats {
        self.stats
    }

    /// Objects held across all replicas.
    pub fn object_count(&self) -> usize {
        self.durable.stores.values().map(|s| s.len()).sum()
    }

    /// Log records not yet truncated.
    pub fn log_len(&self) -> usize {
        self.durable.log.len()
    }

    /// The replica of `region`, if held.
    pub fn store(&self, region: RegionId) -> Option<&RegionStore> {
        self.durable.stores.get(&region)
    }

    /// The key's region per this node's map.
    pub fn region_of(&self, key: &[u8]) -> RegionId {
        self.map.region_of(key).id
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        let mut locks = 0usize;
        for (region, store) in &self.durable.stores {
            store.check_invariants();
            for (key, obj) in store.iter() {
                if let Some(&tx) = obj.lock.as_deref() {
                    locks += 1;
                    let rec = self.durable.log.primary.get(&tx);
                    assert!(
                        matches!(rec, Some((r, LockState::Locked)) if r.writes.iter().any(|w| w.region == *region && &w.key == key)),
                        "lock on {key:?} held by {tx} without a Locked LOCK record"
                    );
                }
            }
        }
        let expected: usize = self
            .durable
            .log
            .primary
            .values()
            .filter(|(_, s)| *s == LockState::Locked)
            .map(|(r, _)| {
                r.writes
                    .iter()
                    .filter(|w| self.durable.primary_for.contains(&w.region))
                    .count()
            })
            .sum();
        for ((tx, region), keys) in &self.durable.recovery_held {
            let store = self.durable.stores.get(region);
            assert!(
                keys.iter()
                    .all(|k| store.is_some_and(|s| s.holds_recovery_lock(*tx, k))),
                "{tx} lost a recovery lock in {region} at {}",
                self.node
            );
        }
        assert!(
            self.durable
                .blocked
                .iter()
                .all(|r| self.durable.primary_for.contains(r)),
            "a blocked region this node is not primary of"
        );
        assert_eq!(
            locks,
            expected,
            "locks in storage and Locked LOCK records disagree at {} (primary of {:?}): {:?}",
            self.node,
            self.durable.primary_for,
            self.durable
                .stores
                .iter()
                .flat_map(|(r, s)| s.iter().filter_map(move |(k, o)| o
                    .lock
                    .as_deref()
                    .copied()
                    .map(|t| (*r, k.to_vec(), t))))
                .collect::<Vec<_>>()
        );
        assert!(
            self.durable.log.len() <= 2 * self.limits.max_log_records,
            "log over its bound"
        );
        // A record kept as commit-primary evidence (COMMIT-RECOVERY, or a
        // region's commit replicated in step 5) carries its write_ts: it
        // is applied with it at truncation and holds GC below it.
        for (tx, (_, e, w)) in &self.durable.log.replicated {
            assert!(
                *e != meridian_wire::Evidence::CommitPrimary || w.is_some(),
                "{tx} kept as committed without write_ts at {}",
                self.node
            );
        }
        assert!(self.durable.finished.len() == self.durable.finished_order.len());
        assert!(self.durable.finished_order.len() <= self.limits.max_finished_ids);
        assert!(self.durable.low_bounds.len() <= self.limits.max_finished_ids);
        // No LOCK record below its coordinator's low bound: the coordinator
        // has finished those transactions.
        for tx in self.durable.log.primary.keys() {
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
    use crate::participant::testing::two_nodes;
    use meridian_wire::{Conflict, TxnResponse};

    /// A configuration renewed with the same replicas blocks nothing at a
    /// live primary, but every region a primary restored from disk leads:
    /// the restart may have lost LOCK records and COMMIT-PRIMARY installs
    /// that a backup's COMMIT-BACKUP record will commit in recovery. The
    /// injected bug `RestoreForgotten` blocks nothing.
    #[test]
    fn a_restored_primary_blocks_every_region_it_leads_until_lock_recovery() {
        let two = two_nodes();
        let renewed = two.renewed();
        let node = NodeId(0);
        let mut live = Participant::new(node, &two);
        assert!(!live.durable.primary_for.is_empty());
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
            restored.durable.primary_for,
            "serving before a config"
        );
        restored.reconfigure(&renewed);
        assert_eq!(restored.blocked_regions(), restored.durable.primary_for);
        restored.check_invariants();
        // Lock recovery then opens them, as in any configuration.
        for r in restored.durable.primary_for.clone() {
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
    /// LastReplicaChange: otherwise the promoted node serves a read from
    /// its old copy, missing a committed transaction's COMMIT-BACKUP
    /// write.
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
}
