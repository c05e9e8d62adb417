//! # Recovery after a configuration change: transaction state and data (FaRM §5.3, §5.4)
//!
//! **Problem.** When configuration `c` commits, some transactions that
//! began committing in an earlier configuration have records on some
//! replicas and not others, and their coordinators can no longer finish
//! them (requests of older configurations are refused). Regions whose
//! replicas changed must not serve until the locks of those transactions
//! are back at their primary; the transactions must be decided the same
//! way everywhere; and new replicas must receive the region's objects.
//!
//! **Algorithm** (one [`RecoveryFlow`] per node, started on
//! NEW-CONFIG-COMMIT):
//! 1. *Block* (FaRM §5.3 step 1): [`meridian_txn::Participant::reconfigure`]
//!    blocked every region whose replicas changed in `c` at its primary.
//! 2. *Drain and find* (steps 2–3): every replica sends its region's
//!    primary NEED-RECOVERY with its records of transactions with
//!    `tx.config < c` (possibly none); resent until acknowledged. Every such
//!    transaction recovers: Meridian refuses transaction requests of older
//!    configurations, so unlike FaRM no coordinator finishes one.
//! 3. *Lock recovery* (step 4): once every replica of a region reported,
//!    its primary holds every key those transactions wrote
//!    ([`meridian_txn::Participant::recover_locks`]) and the region serves
//!    again. Regions whose replicas did not change never stop.
//! 4. *Replicate* (step 5): the primary sends each replica that reported
//!    no record of a recovering transaction, or weaker evidence than the
//!    region's, the region's record of it (REPLICATE-TX-STATE, with the
//!    strongest evidence the region had and `write_ts`), resent until
//!    acknowledged; a primary in that case keeps it itself
//!    ([`meridian_txn::Participant::replicate_tx_state`]). A replica
//!    reports the strongest evidence it holds: a restored primary's
//!    surviving LOCK record sits beside a replicated COMMIT-BACKUP, and
//!    reporting the weaker one would let a later configuration abort what
//!    an earlier one committed. A new replica thus holds what the region's
//!    old replicas held before it can be counted complete.
//! 5. *Vote* (step 6): the primary sends each transaction's region vote
//!    ([`meridian_txn::recovery::region_vote`] over the replicas' evidence
//!    and its own) to the transaction's recovery coordinator
//!    ([`meridian_txn::recovery::recovery_coordinator`], rendezvous hashing
//!    over the members), resending until the decision arrives. The
//!    coordinator sends REQUEST-VOTE to the primaries of written regions
//!    it has not heard from; a primary without records answers from its
//!    own memory (aborted, truncated, or unknown).
//! 6. *Decide* (step 7): [`meridian_txn::recovery::decide`]; then
//!    COMMIT-RECOVERY (with the region's writes and `write_ts`) or
//!    ABORT-RECOVERY to every replica of every written region, resent until
//!    acknowledged; then TRUNCATE-RECOVERY, resent until acknowledged.
//!    Records carry the writes, so a new replica gets the writes with the
//!    decision even if step 5 did not reach it.
//! 7. *Data recovery* (§5.4): a new replica (listed as `filling` in the
//!    placement) fetches the region's objects from the primary in chunks,
//!    which the primary serves only after the region's lock recovery and
//!    once that replica acknowledged every step-5 record (FaRM starts data
//!    recovery after lock recovery),
//!    pausing `limits.data_recovery_pace_us` between chunks unless the
//!    region is down to its last complete replica, merges them with the
//!    commits it already received, and tells the CM, which may promote it
//!    from then on ([`meridian_config::Configuration::mark_ready`]).
//!
//! Everything restarts from scratch in the next configuration: the scan of
//! step 2 finds whatever is still undecided, and the decision rules give the
//! same answer again (commit-recovery counts as commit-primary evidence).
//!
//! **Invariants** ([`RecoveryFlow::check_invariants`]): every message names
//! the configuration it belongs to and one of another configuration is
//! ignored; a transaction is decided at most once per configuration; the
//! number of transactions coordinated is bounded by
//! `limits.max_recovering_txns`.

use meridian_config::{Configuration, RegionInfo};
use meridian_txn::recovery::{decide, recovery_coordinator, region_vote, Decision};
use meridian_txn::Participant;
use meridian_wire::{
    ConfigId, FinishedIds, Key, LockRecord, NodeId, ObjectCopy, RecoveringTx, RecoveryMessage,
    RecoveryVote, RegionId, Timestamp, TxId, WriteOp,
};
use std::collections::{BTreeMap, BTreeSet};

/// One region's vote at its primary, resent until the decision arrives.
#[derive(Clone, Debug)]
struct MyVote {
    vote: RecoveryVote,
    record: Option<LockRecord>,
    write_ts: Option<Timestamp>,
    decided: bool,
}

/// One transaction being recovered by this node as its coordinator.
#[derive(Clone, Debug, Default)]
struct TxRecovery {
    regions: Vec<RegionId>,
    votes: BTreeMap<RegionId, RecoveryVote>,
    records: BTreeMap<RegionId, LockRecord>,
    read_ts: Timestamp,
    write_ts: Option<Timestamp>,
    decision: Option<Decision>,
    /// Replicas still to acknowledge the decision, per region.
    unacked: BTreeSet<(RegionId, NodeId)>,
    /// Regions the decision has been sent to (a commit decided early on a
    /// commit-primary vote still needs every region's vote for its writes).
    sent: BTreeSet<RegionId>,
    /// Replicas still to acknowledge TRUNCATE-RECOVERY.
    untruncated: BTreeSet<NodeId>,
    truncating: bool,
}

/// A region this node is filling (data recovery, new replica side).
#[derive(Clone, Debug)]
struct Fill {
    after: Option<Key>,
    /// When to (re)send the next FETCH, local ns.
    next_ns: u64,
}

/// Counters of recovery at this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Transactions this node decided to commit as recovery coordinator.
    pub committed: u64,
    /// Transactions this node decided to abort as recovery coordinator.
    pub aborted: u64,
    /// Regions whose lock recovery ended at this primary.
    pub regions_recovered: u64,
    /// Objects received by data recovery.
    pub objects_copied: u64,
    /// Regions this node finished filling.
    pub regions_filled: u64,
    /// Votes refused as malformed: a commit vote (`CommitPrimary`,
    /// `CommitBackup`) without the `write_ts` its record carries. Only a
    /// faulty or forged sender sends one.
    pub malformed_votes: u64,
}

/// One node's recovery engine (see the module essay).
#[derive(Debug)]
pub struct RecoveryFlow {
    me: NodeId,
    config: ConfigId,
    regions: Vec<RegionInfo>,
    members: Vec<NodeId>,
    cm: NodeId,
    resend_ns: u64,
    pace_ns: u64,
    max_txns: usize,
    /// NEED-RECOVERY not yet acknowledged: region → (primary, records).
    need: BTreeMap<RegionId, (NodeId, Vec<RecoveringTx>)>,
    /// Regions this node is primary of, waiting for replicas' reports.
    gathering: BTreeMap<RegionId, BTreeMap<NodeId, Vec<RecoveringTx>>>,
    /// Step 5 records not yet acknowledged: (region, replica) → records.
    replicating: BTreeMap<(RegionId, NodeId), BTreeMap<TxId, RecoveringTx>>,
    votes: BTreeMap<(TxId, RegionId), MyVote>,
    /// Transactions whose COMMIT- or ABORT-RECOVERY of *this*
    /// configuration reached this node (at most `max_txns`): their votes
    /// need not be resent. A decision of an earlier configuration does not
    /// count: this configuration's coordinator has not decided, and the
    /// transaction's records stay until it does and truncates.
    decisions: BTreeSet<TxId>,
    coord: BTreeMap<TxId, TxRecovery>,
    done: BTreeSet<TxId>,
    filling: BTreeMap<RegionId, Fill>,
    filled: BTreeSet<RegionId>,
    next_resend_ns: u64,
    out: Vec<(NodeId, RecoveryMessage)>,
    stats: RecoveryStats,
    /// A newer configuration was applied here: idle until the next start.
    stopped: bool,
}

impl RecoveryFlow {
    /// An idle engine for node `me`, stopped until
    /// [`RecoveryFlow::start`]: until then it ignores every message, so a
    /// node votes, decides and applies recovery only in a configuration
    /// whose lock recovery it ran. A node restored from disk that is still
    /// a member would otherwise answer REQUEST-VOTE from an unstarted flow
    /// without its record, and a commit could skip its region.
    pub fn new(me: NodeId, config: &Configuration) -> Self {
        RecoveryFlow {
            me,
            config: config.id(),
            regions: config.regions(),
            members: config.members(),
            cm: config.cm(),
            resend_ns: config.lease.resend_ms.max(1) * 1_000_000,
            pace_ns: config.limits.data_recovery_pace_us * 1000,
            max_txns: config.limits.max_recovering_txns,
            need: BTreeMap::new(),
            gathering: BTreeMap::new(),
            replicating: BTreeMap::new(),
            votes: BTreeMap::new(),
            decisions: BTreeSet::new(),
            coord: BTreeMap::new(),
            done: BTreeSet::new(),
            filling: BTreeMap::new(),
            filled: BTreeSet::new(),
            next_resend_ns: 0,
            out: Vec::new(),
            stats: RecoveryStats::default(),
            stopped: true,
        }
    }

    /// Run without having started: the injected bug
    /// `RestoredRecoveryVotes` (tests only).
    #[cfg(any(test, feature = "sim-bugs"))]
    pub(crate) fn run_unstarted(&mut self) {
        self.stopped = false;
    }

    /// A newer configuration was applied at this node (FaRM §5.2 step 6:
    /// from then on it refuses messages of older configurations). Its
    /// participant no longer holds this configuration's state (regions and
    /// records dropped, or the whole participant replaced when the node was
    /// added back), so this engine must not vote, decide or apply anything
    /// more; recovery restarts from scratch at the next commit
    /// ([`RecoveryFlow::start`]). A node removed while configuration
    /// `c`'s recovery is half done and added back later with a fresh
    /// participant would otherwise answer its own REQUEST-VOTE of `c`
    /// "unknown", decide to abort a committed transaction and apply the
    /// ABORT-RECOVERY to its own new replica.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.need.clear();
        self.gathering.clear();
        self.replicating.clear();
        self.votes.clear();
        self.decisions.clear();
        self.coord.clear();
        self.done.clear();
        self.filling.clear();
        self.filled.clear();
        self.regions.clear();
        self.members.clear();
    }

    /// The configuration this flow recovers, unless it was stopped
    /// ([`RecoveryFlow::stop`]): `None` then.
    pub fn running_config(&self) -> Option<ConfigId> {
        (!self.stopped).then_some(self.config)
    }

    /// Counters.
    pub fn stats(&self) -> RecoveryStats {
        self.stats
    }

    /// True while this node still has recovery work in the current
    /// configuration (as replica, primary, coordinator or new replica).
    pub fn busy(&self) -> bool {
        !self.need.is_empty()
            || !self.gathering.is_empty()
            || !self.replicating.is_empty()
            || !self.coord.is_empty()
            || !self.filling.is_empty()
            || self.votes.values().any(|v| !v.decided)
    }

    /// Regions this node is still filling.
    pub fn filling_regions(&self) -> Vec<RegionId> {
        self.filling.keys().copied().collect()
    }

    /// Take the messages produced so far: (destination, message).
    pub fn drain(&mut self) -> Vec<(NodeId, RecoveryMessage)> {
        std::mem::take(&mut self.out)
    }

    fn region(&self, r: RegionId) -> Option<&RegionInfo> {
        self.regions.get(r.0 as usize).filter(|i| i.id == r)
    }

    fn replicas(&self, r: RegionId) -> Vec<NodeId> {
        self.region(r)
            .map(|i| {
                std::iter::once(i.primary)
                    .chain(i.backups.iter().copied())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn primary(&self, r: RegionId) -> Option<NodeId> {
        self.region(r).map(|i| i.primary)
    }

    fn send(&mut self, to: NodeId, msg: RecoveryMessage) {
        self.out.push((to, msg));
    }

    /// Configuration `config` committed (FaRM §5.2 step 7): start recovery
    /// from scratch in it.
    pub fn start(&mut self, now: u64, config: &Configuration, p: &mut Participant) {
        *self = RecoveryFlow {
            stats: self.stats,
            stopped: false,
            ..RecoveryFlow::new(self.me, config)
        };
        let me = self.me;
        for info in self.regions.clone() {
            let replicas: Vec<NodeId> = std::iter::once(info.primary)
                .chain(info.backups.iter().copied())
                .collect();
            if !replicas.contains(&me) {
                continue;
            }
            if info.primary == me {
                self.gathering.insert(info.id, BTreeMap::new());
            }
            let txs = p.recovering_records(self.config, info.id);
            self.need.insert(info.id, (info.primary, txs));
            if info.filling.contains(&me) {
                self.filling.insert(
                    info.id,
                    Fill {
                        after: None,
                        next_ns: now,
                    },
                );
            }
        }
        self.resend(now);
    }

    /// The regions the current configuration still lists this node as
    /// filling although it finished (so the CM hears again).
    fn report_ready(&mut self) {
        let cm = self.cm;
        let (config, me) = (self.config, self.me);
        let again: Vec<RegionId> = self
            .regions
            .iter()
            .filter(|i| i.filling.contains(&me) && self.filled.contains(&i.id))
            .map(|i| i.id)
            .collect();
        for region in again {
            self.send(
                cm,
                RecoveryMessage::ReplicaReady {
                    config,
                    region,
                    from: me,
                },
            );
        }
    }

    /// Resend what is unanswered, if due; start due fetches.
    pub fn tick(&mut self, now: u64) {
        if self.stopped {
            return;
        }
        if now >= self.next_resend_ns {
            self.resend(now);
        } else {
            self.fetch_due(now);
        }
    }

    fn fetch_due(&mut self, now: u64) {
        let (config, me) = (self.config, self.me);
        let due: Vec<(RegionId, Option<Key>)> = self
            .filling
            .iter_mut()
            .filter(|(_, f)| now >= f.next_ns)
            .map(|(r, f)| {
                f.next_ns = now.saturating_add(4 * self.resend_ns);
                (*r, f.after.clone())
            })
            .collect();
        for (region, after) in due {
            if let Some(primary) = self.primary(region) {
                self.send(
                    primary,
                    RecoveryMessage::Fetch {
                        config,
                        region,
                        from: me,
                        after,
                    },
                );
            }
        }
    }

    fn resend(&mut self, now: u64) {
        self.next_resend_ns = now.saturating_add(self.resend_ns);
        let (config, me) = (self.config, self.me);
        for (region, (primary, txs)) in self.need.clone() {
            let msg = RecoveryMessage::NeedRecovery {
                config,
                region,
                from: me,
                txs,
            };
            self.send(primary, msg);
        }
        for ((region, to), txs) in self.replicating.clone() {
            for tx in txs.into_values() {
                self.send(
                    to,
                    RecoveryMessage::ReplicateTxState {
                        config,
                        region,
                        from: me,
                        tx,
                    },
                );
            }
        }
        for ((tx, region), v) in self.votes.clone() {
            if !v.decided {
                self.send_vote(tx, region, &v);
            }
        }
        for tx in self.coord.keys().copied().collect::<Vec<_>>() {
            self.drive(tx);
        }
        self.fetch_due(now);
        self.report_ready();
    }

    fn send_vote(&mut self, tx: TxId, region: RegionId, v: &MyVote) {
        let Some(to) = recovery_coordinator(tx, &self.members) else {
            return;
        };
        let (regions, writes, read_ts): (Vec<RegionId>, Vec<WriteOp>, Timestamp) = match &v.record {
            Some(r) => (r.regions.clone(), r.writes.clone(), r.read_ts),
            None => (Vec::new(), Vec::new(), Timestamp::ZERO),
        };
        let msg = RecoveryMessage::Vote {
            config: self.config,
            tx,
            region,
            vote: v.vote,
            regions,
            writes,
            read_ts,
            write_ts: v.write_ts,
        };
        self.send(to, msg);
    }

    /// A recovery message. Messages of another configuration are ignored.
    ///
    /// One match over the message kinds of FaRM §5.3 and §5.4 recovery,
    /// so that every message's configuration guard reads in one place;
    /// each kind's step is a handler of its own, or a few lines here.
    pub fn on_message(&mut self, now: u64, msg: RecoveryMessage, p: &mut Participant) {
        if self.stopped {
            return;
        }
        let (config, me) = (self.config, self.me);
        match msg {
            RecoveryMessage::NeedRecovery {
                config: c,
                region,
                from,
                txs,
            } if c == config => self.on_need_recovery(region, from, txs, p),
            RecoveryMessage::NeedRecoveryAck { config: c, region } if c == config => {
                self.need.remove(&region);
            }
            RecoveryMessage::ReplicateTxState {
                config: c,
                region,
                from,
                tx,
            } if c == config => self.on_replicate_tx_state(region, from, &tx, p),
            RecoveryMessage::ReplicateTxStateAck {
                config: c,
                region,
                tx,
                from,
            } if c == config => {
                if let Some(txs) = self.replicating.get_mut(&(region, from)) {
                    txs.remove(&tx);
                    if txs.is_empty() {
                        self.replicating.remove(&(region, from));
                    }
                }
            }
            RecoveryMessage::Vote {
                config: c,
                tx,
                region,
                vote,
                regions,
                writes,
                read_ts,
                write_ts,
            } if c == config => self.on_vote(tx, region, vote, regions, writes, read_ts, write_ts),
            RecoveryMessage::RequestVote {
                config: c,
                tx,
                region,
                ..
            } if c == config => self.on_request_vote(tx, region, p),
            RecoveryMessage::CommitRecovery {
                config: c,
                tx,
                region,
                record,
                write_ts,
                from,
            } if c == config => {
                p.commit_recovery(region, &record, write_ts);
                self.decided_here(tx);
                self.ack_decision(tx, region, from);
            }
            RecoveryMessage::AbortRecovery {
                config: c,
                tx,
                region,
                from,
            } if c == config => {
                p.abort_recovery(tx, region);
                self.decided_here(tx);
                self.ack_decision(tx, region, from);
            }
            RecoveryMessage::DecisionAck {
                config: c,
                tx,
                region,
                from,
            } if c == config => {
                if let Some(t) = self.coord.get_mut(&tx) {
                    t.unacked.remove(&(region, from));
                }
                self.drive(tx);
            }
            RecoveryMessage::TruncateRecovery {
                config: c,
                tx,
                from,
            } if c == config => {
                p.truncate_recovery(tx);
                self.send(
                    from,
                    RecoveryMessage::TruncateAck {
                        config,
                        tx,
                        from: me,
                    },
                );
            }
            RecoveryMessage::TruncateAck {
                config: c,
                tx,
                from,
            } if c == config => {
                if let Some(t) = self.coord.get_mut(&tx) {
                    t.untruncated.remove(&from);
                }
                self.drive(tx);
            }
            RecoveryMessage::Fetch {
                config: c,
                region,
                from,
                after,
            } if c == config => self.on_fetch(region, from, after, p),
            RecoveryMessage::Chunk {
                config: c,
                region,
                after,
                objects,
                done,
                source_safe_point,
                finished,
            } if c == config => self.on_chunk(
                now,
                region,
                after,
                (objects, done, source_safe_point, finished),
                p,
            ),
            _ => {}
        }
    }

    /// Steps 2-4 at `region`'s primary: replica `from`'s records of
    /// recovering transactions there, acknowledged; once every replica
    /// reported, lock recovery runs.
    fn on_need_recovery(
        &mut self,
        region: RegionId,
        from: NodeId,
        txs: Vec<RecoveringTx>,
        p: &mut Participant,
    ) {
        let config = self.config;
        let replicas = self.replicas(region);
        if !replicas.contains(&from) {
            return;
        }
        self.send(from, RecoveryMessage::NeedRecoveryAck { config, region });
        let Some(got) = self.gathering.get_mut(&region) else {
            return;
        };
        got.insert(from, txs);
        if replicas.iter().all(|n| got.contains_key(n)) {
            if let Some(got) = self.gathering.remove(&region) {
                self.lock_recovery_done(region, got, p);
            }
        }
    }

    /// Step 5 at a replica of `region`: the record its primary `from` sends
    /// of a recovering transaction is kept, and acknowledged.
    fn on_replicate_tx_state(
        &mut self,
        region: RegionId,
        from: NodeId,
        tx: &RecoveringTx,
        p: &mut Participant,
    ) {
        let (config, me) = (self.config, self.me);
        if self.primary(region) != Some(from) || !self.replicas(region).contains(&me) {
            return;
        }
        let id = tx.record.tx;
        p.replicate_tx_state(region, tx);
        self.send(
            from,
            RecoveryMessage::ReplicateTxStateAck {
                config,
                region,
                tx: id,
                from: me,
            },
        );
    }

    /// Step 6 at `region`'s primary: a recovery coordinator asks for the
    /// region's vote on `tx`; a primary without records of it votes from
    /// what it knows. Not answered before lock recovery is done there (the
    /// coordinator asks again later).
    fn on_request_vote(&mut self, tx: TxId, region: RegionId, p: &mut Participant) {
        if self.primary(region) != Some(self.me) || self.gathering.contains_key(&region) {
            return; // not the primary, or lock recovery not done: asked again later
        }
        let v = self.votes.entry((tx, region)).or_insert_with(|| MyVote {
            vote: p.vote_without_records(tx, region),
            record: None,
            write_ts: None,
            decided: false,
        });
        let v = v.clone();
        self.send_vote(tx, region, &v);
    }

    /// §5.4 at `region`'s primary: new replica `from` asks for the chunk of
    /// objects after `after`. Not answered before lock recovery and step 5
    /// reached `from` (it asks again).
    fn on_fetch(
        &mut self,
        region: RegionId,
        from: NodeId,
        after: Option<Key>,
        p: &mut Participant,
    ) {
        let (config, me) = (self.config, self.me);
        if self.primary(region) != Some(me) || !self.replicas(region).contains(&from) {
            return;
        }
        if self.gathering.contains_key(&region) || self.replicating.contains_key(&(region, from)) {
            // Before lock recovery and step 5 reached `from`: the
            // copy could be complete without a recovering
            // transaction's record. It asks again.
            meridian_bugs::mark!("a FETCH waits for lock recovery and step 5");
            return;
        }
        if let Some((objects, done, source_safe_point)) = p.copy_region(region, after.as_deref()) {
            // The last chunk carries what this replica knows of
            // finished transactions: the copy holds their writes
            // without their records.
            let finished = if done {
                p.finished_ids()
            } else {
                Default::default()
            };
            self.send(
                from,
                RecoveryMessage::Chunk {
                    config,
                    region,
                    after,
                    objects,
                    done,
                    source_safe_point,
                    finished,
                },
            );
        }
    }

    /// §5.4 at a new replica of `region`: the chunk answering the fetch
    /// after `after` (its objects, whether it is the last, the source's
    /// safe point and, on the last, the finished transactions it knows)
    /// is merged; the last one fills the region, any other schedules the
    /// next fetch.
    fn on_chunk(
        &mut self,
        now: u64,
        region: RegionId,
        after: Option<Key>,
        (objects, done, source_safe_point, finished): (
            Vec<ObjectCopy>,
            bool,
            Timestamp,
            FinishedIds,
        ),
        p: &mut Participant,
    ) {
        let Some(f) = self.filling.get_mut(&region) else {
            return;
        };
        if f.after != after {
            return; // a duplicate or a stale answer
        }
        p.merge_copies(region, after.as_deref(), &objects, done, source_safe_point);
        self.stats.objects_copied += objects.len() as u64;
        if done {
            p.learn_finished(&finished);
            p.mark_filled(region);
            self.filling.remove(&region);
            self.filled.insert(region);
            self.stats.regions_filled += 1;
            self.report_ready();
            return;
        }
        f.after = objects.last().map(|o| o.key.clone()).or(after);
        // Full speed when the region is down to its last complete
        // replica (FaRM §5.4); paced otherwise.
        let complete = self.region(region).map_or(0, |i| {
            1 + i.backups.iter().filter(|b| !i.filling.contains(b)).count()
        });
        let pause = if complete <= 1 { 0 } else { self.pace_ns };
        if let Some(f) = self.filling.get_mut(&region) {
            f.next_ns = now.saturating_add(pause);
        }
        self.fetch_due(now);
    }

    fn decided_here(&mut self, tx: TxId) {
        // The decision reached this node: stop resending any vote of ours
        // for this transaction, including one lock recovery makes later.
        if self.decisions.len() < self.max_txns {
            self.decisions.insert(tx);
        }
        let keys: Vec<(TxId, RegionId)> = self
            .votes
            .range((tx, RegionId(0))..=(tx, RegionId(u32::MAX)))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(v) = self.votes.get_mut(&k) {
                v.decided = true;
            }
        }
    }

    fn ack_decision(&mut self, tx: TxId, region: RegionId, to: NodeId) {
        let msg = RecoveryMessage::DecisionAck {
            config: self.config,
            tx,
            region,
            from: self.me,
        };
        self.send(to, msg);
    }

    /// Step 4 at `region`'s primary: every replica reported.
    fn lock_recovery_done(
        &mut self,
        region: RegionId,
        got: BTreeMap<NodeId, Vec<RecoveringTx>>,
        p: &mut Participant,
    ) {
        let mut by_tx: BTreeMap<TxId, (Vec<meridian_wire::Evidence>, RecoveringTx)> =
            BTreeMap::new();
        // What each replica reported of each transaction: step 5 below
        // sends the region's record to every replica whose own evidence is
        // weaker than the vote's, not only to those without any (a
        // restored primary with a surviving LOCK record but no
        // COMMIT-PRIMARY reports Lock while its backups report
        // COMMIT-BACKUP).
        let mut reported: BTreeMap<(TxId, NodeId), meridian_wire::Evidence> = BTreeMap::new();
        for (from, txs) in got {
            for t in txs {
                let r = reported.entry((t.record.tx, from)).or_insert(t.evidence);
                *r = (*r).min(t.evidence);
                let e = by_tx
                    .entry(t.record.tx)
                    .or_insert_with(|| (Vec::new(), t.clone()));
                e.0.push(t.evidence);
                if e.1.write_ts.is_none() {
                    e.1.write_ts = t.write_ts;
                }
                if e.1.record.writes.is_empty() {
                    e.1.record = t.record.clone();
                }
            }
        }
        let records: Vec<RecoveringTx> = by_tx.values().map(|(_, t)| t.clone()).collect();
        p.recover_locks(region, &records);
        self.stats.regions_recovered += 1;
        for (tx, (mut evidence, t)) in by_tx {
            evidence.push(p.evidence(tx, region));
            let v = MyVote {
                vote: region_vote(&evidence),
                record: Some(t.record.clone()),
                write_ts: t.write_ts,
                // This configuration's decision may have reached this
                // replica before its lock recovery ended: no vote to resend
                // then. One of an earlier configuration does not count
                // (`decisions`): if this vote were sent once and lost, the
                // transaction would stay undecided and untruncated for the
                // whole configuration, its records holding GC back.
                decided: self.decisions.contains(&tx),
            };
            // Step 5: the region's record to every replica without one.
            let evidence = match v.vote {
                RecoveryVote::CommitPrimary => Some(meridian_wire::Evidence::CommitPrimary),
                RecoveryVote::CommitBackup => Some(meridian_wire::Evidence::CommitBackup),
                RecoveryVote::Lock => Some(meridian_wire::Evidence::Lock),
                _ => None,
            };
            if let (Some(evidence), false) = (evidence, v.decided) {
                let rt = RecoveringTx {
                    record: t.record.clone(),
                    evidence,
                    write_ts: t.write_ts,
                };
                for n in self.replicas(region) {
                    if reported.get(&(tx, n)).is_some_and(|r| *r <= evidence) {
                        continue;
                    }
                    if n == self.me {
                        p.replicate_tx_state(region, &rt);
                        continue;
                    }
                    self.replicating
                        .entry((region, n))
                        .or_default()
                        .insert(tx, rt.clone());
                    self.send(
                        n,
                        RecoveryMessage::ReplicateTxState {
                            config: self.config,
                            region,
                            from: self.me,
                            tx: rt.clone(),
                        },
                    );
                }
            }
            self.send_vote(tx, region, &v);
            self.votes.insert((tx, region), v);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_vote(
        &mut self,
        tx: TxId,
        region: RegionId,
        vote: RecoveryVote,
        regions: Vec<RegionId>,
        writes: Vec<WriteOp>,
        read_ts: Timestamp,
        write_ts: Option<Timestamp>,
    ) {
        if recovery_coordinator(tx, &self.members) != Some(self.me) || self.done.contains(&tx) {
            return;
        }
        // A commit vote comes from a COMMIT-BACKUP or COMMIT-PRIMARY record,
        // which carries `write_ts`; one without it would let `drive` decide
        // a commit it cannot send.
        if matches!(
            vote,
            RecoveryVote::CommitPrimary | RecoveryVote::CommitBackup
        ) && write_ts.is_none()
        {
            self.stats.malformed_votes += 1;
            return;
        }
        if !self.coord.contains_key(&tx) && self.coord.len() >= self.max_txns {
            return; // bounded: the primary resends, and the next configuration retries
        }
        let t = self.coord.entry(tx).or_default();
        if t.regions.is_empty() && !regions.is_empty() {
            t.regions = regions.clone();
        }
        if read_ts > t.read_ts {
            t.read_ts = read_ts;
        }
        t.write_ts = t.write_ts.or(write_ts);
        if !writes.is_empty() {
            t.records.insert(
                region,
                LockRecord {
                    tx,
                    read_ts,
                    regions,
                    writes,
                },
            );
        }
        t.votes.insert(region, vote);
        self.drive(tx);
    }

    /// Move transaction `tx` on as far as it goes: ask for missing votes,
    /// decide, send the decision, truncate, finish.
    fn drive(&mut self, tx: TxId) {
        let Some(mut t) = self.coord.remove(&tx) else {
            return;
        };
        let (config, me) = (self.config, self.me);
        if t.regions.is_empty() {
            self.coord.insert(tx, t);
            return;
        }
        // Ask every written region that has not voted: before the decision
        // to decide, after a commit decision for the region's writes.
        let missing: Vec<RegionId> = t
            .regions
            .iter()
            .copied()
            .filter(|r| !t.votes.contains_key(r))
            .collect();
        if t.decision.is_none() {
            match decide(&t.regions, &t.votes) {
                None => {}
                Some(d) => {
                    // A commit needs a COMMIT-BACKUP or COMMIT-PRIMARY vote,
                    // and `on_vote` takes those only with their write_ts.
                    assert!(
                        d == Decision::Abort || t.write_ts.is_some(),
                        "recovery decided to commit {tx} without a write_ts"
                    );
                    match d {
                        Decision::Commit => self.stats.committed += 1,
                        Decision::Abort => self.stats.aborted += 1,
                    }
                    t.decision = Some(d);
                }
            }
        }
        let needs_votes = t.decision != Some(Decision::Abort);
        if needs_votes {
            for r in &missing {
                if let Some(primary) = self.primary(*r) {
                    self.send(
                        primary,
                        RecoveryMessage::RequestVote {
                            config,
                            tx,
                            region: *r,
                            from: me,
                        },
                    );
                }
            }
        }
        let Some(decision) = t.decision else {
            self.coord.insert(tx, t);
            return;
        };
        // Regions the decision can go to now: every region for an abort;
        // for a commit, each region whose writes are known (a region that
        // voted truncated or unknown has nothing to apply).
        for r in t.regions.clone() {
            if t.sent.contains(&r) {
                continue;
            }
            let ready = match decision {
                Decision::Abort => true,
                Decision::Commit => t.votes.contains_key(&r),
            };
            if !ready {
                continue;
            }
            t.sent.insert(r);
            if decision == Decision::Commit && !t.records.contains_key(&r) {
                continue;
            }
            for n in self.replicas(r) {
                t.unacked.insert((r, n));
            }
        }
        if !t.unacked.is_empty() {
            for (r, n) in t.unacked.clone() {
                let msg = match decision {
                    Decision::Commit => match (t.records.get(&r), t.write_ts) {
                        (Some(rec), Some(write_ts)) => RecoveryMessage::CommitRecovery {
                            config,
                            tx,
                            region: r,
                            record: rec.clone(),
                            write_ts,
                            from: me,
                        },
                        _ => continue,
                    },
                    Decision::Abort => RecoveryMessage::AbortRecovery {
                        config,
                        tx,
                        region: r,
                        from: me,
                    },
                };
                self.send(n, msg);
            }
        }
        // Truncate only once every region has the decision applied: a
        // region truncated before another got its writes would vote
        // "truncated" or "unknown" in a later configuration.
        if !t.unacked.is_empty() || t.sent.len() < t.regions.len() {
            self.coord.insert(tx, t);
            return;
        }
        if !t.truncating {
            t.truncating = true;
            t.untruncated = t.regions.iter().flat_map(|r| self.replicas(*r)).collect();
        }
        if !t.untruncated.is_empty() {
            for n in t.untruncated.clone() {
                self.send(
                    n,
                    RecoveryMessage::TruncateRecovery {
                        config,
                        tx,
                        from: me,
                    },
                );
            }
            if !t.untruncated.is_empty() {
                self.coord.insert(tx, t);
                return;
            }
        }
        self.done.insert(tx);
    }

    /// The next local time a timer here fires, if any work is pending.
    pub fn next_wake_ns(&self) -> Option<u64> {
        if !self.busy() && !self.regions.iter().any(|i| i.filling.contains(&self.me)) {
            return None;
        }
        let fetch = self.filling.values().map(|f| f.next_ns).min();
        Some(fetch.map_or(self.next_resend_ns, |f| f.min(self.next_resend_ns)))
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        assert!(self.coord.len() <= self.max_txns.max(1));
        assert!(self.decisions.len() <= self.max_txns);
        for (tx, t) in &self.coord {
            assert!(
                !self.done.contains(tx),
                "{tx} recovered twice in one configuration"
            );
            if t.decision == Some(Decision::Commit) {
                assert!(t.write_ts.is_some(), "{tx} committed without write_ts");
            }
        }
        for r in self.gathering.keys() {
            assert_eq!(
                self.primary(*r),
                Some(self.me),
                "gathering a region not led here"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::Evidence;

    /// Configuration 2 of a 4-node, 3-way cluster after node 3 failed: a
    /// region that node 3 held now has a new replica being filled.
    /// Returns (configuration 2, region, primary, old backup, new replica).
    fn refilled() -> (Configuration, RegionId, NodeId, NodeId, NodeId) {
        let c1 = Configuration::local(4, 7000, 3, 4, std::path::Path::new("/nonexistent"));
        let alive: BTreeSet<NodeId> = [0, 1, 2].into_iter().map(NodeId).collect();
        let c2 = c1.remap(&alive, NodeId(0)).expect("remap");
        let r = c2
            .regions()
            .into_iter()
            .find(|r| r.filling.len() == 1)
            .expect("a refilled region");
        let fill = r.filling[0];
        let old = r.backups.iter().copied().find(|b| *b != fill).expect("old");
        (c2, r.id, r.primary, old, fill)
    }

    /// Deliver each replica's NEED-RECOVERY report of `region` to `flow`.
    fn need_recovery<const N: usize>(
        flow: &mut RecoveryFlow,
        p: &mut Participant,
        c: &Configuration,
        region: RegionId,
        reports: [(NodeId, Vec<RecoveringTx>); N],
    ) {
        for (from, txs) in reports {
            let msg = RecoveryMessage::NeedRecovery {
                config: c.id(),
                region,
                from,
                txs,
            };
            flow.on_message(0, msg, p);
        }
    }

    fn committed_backup_record(region: RegionId) -> RecoveringTx {
        let tx = TxId {
            config: ConfigId(1),
            coordinator: 7,
            thread: 0,
            local: 1,
        };
        RecoveringTx {
            record: LockRecord {
                tx,
                read_ts: Timestamp(10),
                regions: vec![region],
                writes: vec![WriteOp {
                    region,
                    key: b"k".to_vec(),
                    value: Some(b"v".to_vec()),
                }],
            },
            evidence: Evidence::CommitBackup,
            write_ts: Some(Timestamp(20)),
        }
    }

    /// A crafted VOTE claiming `CommitPrimary` with no `write_ts` (no
    /// honest replica sends one: the record it votes from carries it) is
    /// refused and counted at the recovery coordinator, instead of letting
    /// `drive` decide a commit it cannot send and panic.
    #[test]
    fn a_commit_vote_without_write_ts_is_refused() {
        let (c2, region, _, _, _) = refilled();
        let rt = committed_backup_record(region);
        let tx = rt.record.tx;
        let members = c2.members();
        let coordinator =
            meridian_txn::recovery::recovery_coordinator(tx, &members).expect("a coordinator");
        let mut p = Participant::new(coordinator, &c2);
        p.reconfigure(&c2);
        let mut flow = RecoveryFlow::new(coordinator, &c2);
        flow.start(0, &c2, &mut p);
        flow.drain();
        let vote = |write_ts| RecoveryMessage::Vote {
            config: c2.id(),
            tx,
            region,
            vote: RecoveryVote::CommitPrimary,
            regions: vec![region],
            writes: rt.record.writes.clone(),
            read_ts: rt.record.read_ts,
            write_ts,
        };
        flow.on_message(0, vote(None), &mut p);
        assert_eq!(flow.stats().malformed_votes, 1);
        assert_eq!(flow.stats().committed, 0, "nothing decided");
        // The same vote with its write_ts decides the commit.
        flow.on_message(0, vote(Some(Timestamp(20))), &mut p);
        assert_eq!(flow.stats().committed, 1);
    }

    /// FaRM §5.3 step 5: after lock recovery the primary
    /// replicates a recovering transaction's record to the replicas that
    /// reported none (itself included), and serves the new replica's
    /// data-recovery FETCH only once it acknowledged. Without step 5 the
    /// new replica is counted complete without the record, and once
    /// promoted it votes unknown for a committed transaction.
    #[test]
    fn lock_recovery_replicates_records_before_the_copy() {
        let waited = meridian_bugs::marks::watch("a FETCH waits for lock recovery and step 5");
        let (c2, region, primary, old, fill) = refilled();
        let mut p = Participant::new(primary, &c2);
        p.reconfigure(&c2);
        let mut flow = RecoveryFlow::new(primary, &c2);
        flow.start(0, &c2, &mut p);
        flow.drain();
        let fetch = |flow: &mut RecoveryFlow, p: &mut Participant| {
            flow.on_message(
                0,
                RecoveryMessage::Fetch {
                    config: c2.id(),
                    region,
                    from: fill,
                    after: None,
                },
                p,
            );
            flow.drain()
                .into_iter()
                .any(|(to, m)| to == fill && matches!(m, RecoveryMessage::Chunk { .. }))
        };
        assert!(!fetch(&mut flow, &mut p), "copied before lock recovery");
        let rt = committed_backup_record(region);
        let reports = [(primary, vec![]), (old, vec![rt.clone()]), (fill, vec![])];
        need_recovery(&mut flow, &mut p, &c2, region, reports);
        let out = flow.drain();
        let replicated: Vec<NodeId> = out
            .iter()
            .filter_map(|(to, m)| match m {
                RecoveryMessage::ReplicateTxState { tx, .. } => {
                    assert_eq!(tx.evidence, Evidence::CommitBackup);
                    assert_eq!(tx.write_ts, Some(Timestamp(20)));
                    Some(*to)
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            replicated,
            vec![fill],
            "step 5 goes to the replicas without the record"
        );
        assert_eq!(p.evidence(rt.record.tx, region), Evidence::CommitBackup);
        assert!(
            !fetch(&mut flow, &mut p),
            "copied before step 5 was acknowledged"
        );
        flow.on_message(
            0,
            RecoveryMessage::ReplicateTxStateAck {
                config: c2.id(),
                region,
                tx: rt.record.tx,
                from: fill,
            },
            &mut p,
        );
        assert!(fetch(&mut flow, &mut p), "no copy after step 5");
        flow.check_invariants();
        waited.assert_hit();
    }

    /// A primary that applied an earlier configuration's COMMIT-RECOVERY
    /// of a transaction still votes on it in this configuration, resending
    /// until this configuration's decision arrives: otherwise one lost vote
    /// leaves the transaction undecided and untruncated for the whole
    /// configuration, its records holding GC back.
    #[test]
    fn an_earlier_decision_does_not_silence_this_configurations_vote() {
        let (c2, region, primary, old, fill) = refilled();
        let mut p = Participant::new(primary, &c2);
        p.reconfigure(&c2);
        let rt = committed_backup_record(region);
        let tx = rt.record.tx;
        // Configuration 1's recovery committed it here; its truncation
        // never came.
        p.commit_recovery(region, &rt.record, Timestamp(20));
        assert!(p.decided_in(tx, region));
        let mut flow = RecoveryFlow::new(primary, &c2);
        flow.start(0, &c2, &mut p);
        flow.drain();
        let mine = p.recovering_records(c2.id(), region);
        assert_eq!(mine.len(), 1, "the primary reports its kept record");
        let reports = [(primary, mine), (old, vec![]), (fill, vec![])];
        need_recovery(&mut flow, &mut p, &c2, region, reports);
        let votes = |out: Vec<(NodeId, RecoveryMessage)>| {
            out.into_iter()
                .filter(|(_, m)| {
                    matches!(m, RecoveryMessage::Vote { tx: t, vote: RecoveryVote::CommitPrimary, .. } if *t == tx)
                })
                .count()
        };
        assert_eq!(votes(flow.drain()), 1, "voted commit-primary");
        flow.tick(u64::MAX / 4);
        assert_eq!(
            votes(flow.drain()),
            1,
            "the vote is resent: this configuration has not decided"
        );
        flow.on_message(
            0,
            RecoveryMessage::CommitRecovery {
                config: c2.id(),
                tx,
                region,
                record: rt.record.clone(),
                write_ts: Timestamp(20),
                from: primary,
            },
            &mut p,
        );
        flow.drain();
        flow.tick(u64::MAX / 2);
        assert_eq!(
            votes(flow.drain()),
            0,
            "decided in this configuration: no more votes"
        );
        flow.check_invariants();
        p.check_invariants();
    }

    /// Once a newer configuration is applied, the old configuration's
    /// recovery neither answers nor applies anything.
    #[test]
    fn a_stopped_flow_ignores_its_configuration() {
        let (c2, region, primary, _, fill) = refilled();
        let mut p = Participant::new(fill, &c2);
        p.reconfigure(&c2);
        let mut flow = RecoveryFlow::new(fill, &c2);
        flow.start(0, &c2, &mut p);
        flow.drain();
        let rt = committed_backup_record(region);
        let tx = rt.record.tx;
        p.replicate_tx_state(region, &rt);
        flow.stop();
        assert!(!flow.busy());
        for msg in [
            RecoveryMessage::AbortRecovery {
                config: c2.id(),
                tx,
                region,
                from: primary,
            },
            RecoveryMessage::RequestVote {
                config: c2.id(),
                tx,
                region,
                from: primary,
            },
        ] {
            flow.on_message(0, msg, &mut p);
        }
        flow.tick(u64::MAX / 2);
        assert!(flow.drain().is_empty());
        assert_eq!(p.evidence(tx, region), Evidence::CommitBackup);
        flow.start(1, &c2, &mut p);
        assert!(!flow.drain().is_empty(), "the next start runs again");
    }

    /// A flow that was never started (a node restored
    /// from disk into the configuration its old incarnation was
    /// recovering) ran no lock recovery there, so it answers no
    /// REQUEST-VOTE, here from the region's primary holding a LOCK record,
    /// and applies no decision.
    #[test]
    fn an_unstarted_flow_neither_votes_nor_applies() {
        let (c2, region, primary, old, _) = refilled();
        let mut p = Participant::new(primary, &c2);
        p.reconfigure(&c2);
        let rt = committed_backup_record(region);
        let tx = rt.record.tx;
        p.replicate_tx_state(region, &rt);
        let mut flow = RecoveryFlow::new(primary, &c2);
        assert_eq!(flow.running_config(), None);
        for msg in [
            RecoveryMessage::RequestVote {
                config: c2.id(),
                tx,
                region,
                from: old,
            },
            RecoveryMessage::TruncateRecovery {
                config: c2.id(),
                tx,
                from: old,
            },
        ] {
            flow.on_message(0, msg, &mut p);
        }
        flow.tick(u64::MAX / 2);
        assert!(flow.drain().is_empty(), "an unstarted flow answered");
        assert_eq!(p.evidence(tx, region), Evidence::CommitBackup);
        flow.run_unstarted();
        flow.on_message(
            0,
            RecoveryMessage::RequestVote {
                config: c2.id(),
                tx,
                region,
                from: old,
            },
            &mut p,
        );
        assert!(
            flow.drain()
                .iter()
                .any(|(_, m)| matches!(m, RecoveryMessage::Vote { .. })),
            "the broken variant votes"
        );
    }

    /// The new replica's side of step 5: it keeps the record with the
    /// region's evidence, reports it in the next configuration, and applies
    /// it on COMMIT-RECOVERY (or drops it on ABORT-RECOVERY).
    #[test]
    fn a_replicated_record_is_kept_reported_and_decided() {
        let (c2, region, primary, _, fill) = refilled();
        let mut p = Participant::new(fill, &c2);
        p.reconfigure(&c2);
        let mut flow = RecoveryFlow::new(fill, &c2);
        flow.start(0, &c2, &mut p);
        flow.drain();
        let rt = committed_backup_record(region);
        let tx = rt.record.tx;
        flow.on_message(
            0,
            RecoveryMessage::ReplicateTxState {
                config: c2.id(),
                region,
                from: primary,
                tx: rt.clone(),
            },
            &mut p,
        );
        assert!(flow.drain().iter().any(|(to, m)| *to == primary
            && matches!(m, RecoveryMessage::ReplicateTxStateAck { tx: t, .. } if *t == tx)));
        assert_eq!(p.evidence(tx, region), Evidence::CommitBackup);
        let next = p.recovering_records(ConfigId(3), region);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].record, rt.record);
        assert_eq!(next[0].write_ts, Some(Timestamp(20)));
        let mut aborted = Participant::new(fill, &c2);
        aborted.replicate_tx_state(region, &rt);
        assert_eq!(aborted.evidence(tx, region), Evidence::CommitBackup);
        aborted.abort_recovery(tx, region);
        assert_eq!(aborted.evidence(tx, region), Evidence::Aborted);
        assert!(aborted.recovering_records(ConfigId(3), region).is_empty());
        p.commit_recovery(region, &rt.record, Timestamp(20));
        let store = p.store(region).expect("the new replica's copy");
        assert!(matches!(
            store.read(b"k", Timestamp(25)),
            Ok(Some(v)) if v.value == b"v".to_vec()
        ));
        // The record stays, now commit-primary evidence, until truncation:
        // a later configuration whose primary missed this decision must
        // still hear of the commit from this replica.
        let after = p.recovering_records(ConfigId(3), region);
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].record, rt.record);
        assert_eq!(after[0].evidence, Evidence::CommitPrimary);
        assert_eq!(after[0].write_ts, Some(Timestamp(20)));
        p.truncate_recovery(tx);
        assert!(p.recovering_records(ConfigId(3), region).is_empty());
        assert_eq!(p.evidence(tx, region), Evidence::Truncated);
        p.check_invariants();
    }
}
