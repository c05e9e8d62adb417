//! Disk durability of a participant: the [`Mutation`] journal, checkpoints
//! ([`ParticipantSnapshot`]) and restoring from them. The participant is
//! deterministic, so a checkpoint and the mutations logged after it
//! rebuild its state exactly (FaRM §5's durable log, here on local disk).

use super::{DurableState, Participant, ParticipantStats};
use meridian_config::{Configuration, RegionMap};
use meridian_storage::RegionStore;
use meridian_wire::{NodeId, RegionId, Timestamp, TxId, TxnRequest};
use std::sync::Arc;

/// One input that changed a participant's state: the unit of the
/// write-ahead log of disk durability. The participant is
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
/// snapshot on its own thread while the node goes on serving requests,
/// and the process lock (with it the Raft round that raises the clock's
/// time bound) is never held for the encoding of the whole state.
///
/// The checkpoint format is bincode's encoding of this struct: fields in
/// order, without names, a nested struct's fields inline. The node, the
/// configuration as TOML, then [`DurableState`]'s fields in its order.
#[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParticipantSnapshot {
    node: NodeId,
    config_toml: String,
    durable: DurableState,
}

/// Shapes only: the state itself may be gigabytes.
impl std::fmt::Debug for ParticipantSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParticipantSnapshot")
            .field("node", &self.node)
            .field("regions", &self.durable.stores.len())
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
        self.durable.stores.values().map(RegionStore::len).sum()
    }
}

impl Participant {
    /// Start journaling every state-changing input ([`Mutation`]) for
    /// [`Participant::drain_journal`] (disk durability).
    pub fn enable_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
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

    pub(super) fn journal(&mut self, m: impl FnOnce() -> Mutation) {
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
            durable: self.durable.clone(),
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
                    durable: c.durable,
                    discarded: Vec::new(),
                    installed: Vec::new(),
                    stats: ParticipantStats::default(),
                    config,
                    journal: None,
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
        p.durable.blocked = p.durable.primary_for.iter().copied().collect();
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

    /// True if `self` and `other` hold the same state (statistics and the
    /// journaled GC safe point aside: replay runs with journaling off):
    /// for tests of checkpoint and replay.
    #[cfg(test)]
    pub(super) fn same_state(&self, other: &Participant) -> bool {
        self.node == other.node
            && DurableState {
                journaled_gc: other.durable.journaled_gc,
                ..self.durable.clone()
            } == other.durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::participant::testing::{commit_at_primary, commit_backup, record, two_nodes, tx};

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
            // blocked; the rest is the live state exactly.
            let unblocked = |mut r: Participant| {
                let leads: std::collections::BTreeSet<RegionId> =
                    r.durable.primary_for.iter().copied().collect();
                assert!(
                    r.restored && r.durable.blocked == leads,
                    "restored but serving at {node}"
                );
                r.durable.blocked = p.durable.blocked.clone();
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
    /// A participant whose every durable field holds something: LOCK
    /// records committed and locked, a COMMIT-BACKUP record, aborted and
    /// truncated ids, a low bound, recovery holds, a recovered commit, a
    /// filled region, a journaled GC safe point and a blocked region.
    fn every_field_set() -> (Configuration, Participant) {
        let two = two_nodes();
        let mut p = Participant::new(NodeId(0), &two);
        p.enable_journal();
        let key_in = |p: &Participant, regions: &[RegionId], skip: usize| -> Vec<u8> {
            (0..=255u8)
                .map(|b| vec![b, 1])
                .filter(|k| regions.contains(&p.region_of(k)))
                .nth(skip)
                .expect("a key")
        };
        let primary = p.primary_regions().to_vec();
        let backup = p.backup_regions().to_vec();
        let k: Vec<Vec<u8>> = (0..6).map(|i| key_in(&p, &primary, i)).collect();
        let r = record(&p, tx(1), 1, &[&k[0]]);
        commit_at_primary(&mut p, r, 5);
        let r = record(&p, tx(2), 6, &[&k[1]]);
        commit_at_primary(&mut p, r, 8);
        let r = record(&p, tx(3), 9, &[&k[2]]);
        p.handle(&[], &TxnRequest::Lock(r));
        let r = record(&p, tx(4), 9, &[&k[3]]);
        p.handle(&[], &TxnRequest::Lock(r));
        p.handle(&[], &TxnRequest::Abort { tx: tx(4) });
        let kb = key_in(&p, &backup, 0);
        let r = record(&p, tx(5), 2, &[&kb]);
        commit_backup(&mut p, r, 7);
        p.handle(&[tx(1)], &TxnRequest::Truncate { txs: vec![] });
        p.truncate_piggybacked(&meridian_wire::Truncation {
            txs: Vec::new(),
            low: Some(meridian_wire::TruncateLow {
                coordinator: 3,
                local: 11,
            }),
        });
        let held = record(&p, tx(6), 10, &[&k[4]]);
        p.recover_locks(
            held.writes[0].region,
            &[meridian_wire::RecoveringTx {
                record: held,
                evidence: meridian_wire::Evidence::CommitBackup,
                write_ts: Some(Timestamp(12)),
            }],
        );
        let rec = record(&p, tx(7), 10, &[&k[5]]);
        p.commit_recovery(rec.writes[0].region, &rec, Timestamp(13));
        p.mark_filled(backup[0]);
        p.gc(Timestamp(3));
        p.durable.blocked.insert(primary[0]);
        (two, p)
    }

    /// A checkpoint of [`every_field_set`] in the format deployed nodes
    /// write, as hex: bincode's encoding of the node, the configuration as
    /// TOML, and [`DurableState`]'s fields in their order.
    const DEPLOYED_CHECKPOINT: &str = include_str!("testdata/checkpoint.hex");

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The checkpoint format is the fields' order and types: a checkpoint
    /// of a participant whose every durable field holds something is the
    /// deployed format to the byte.
    #[test]
    fn a_checkpoint_is_written_in_the_deployed_format() {
        let (_, p) = every_field_set();
        let d = &p.durable;
        assert!(!d.stores.is_empty() && !d.primary_for.is_empty() && !d.backup_for.is_empty());
        assert!(!d.log.primary.is_empty() && !d.log.backup.is_empty());
        assert!(!d.log.replicated.is_empty());
        assert!(!d.finished.is_empty() && !d.finished_order.is_empty());
        assert!(!d.low_bounds.is_empty() && !d.blocked.is_empty());
        assert!(!d.recovery_held.is_empty() && !d.recovered.is_empty());
        assert!(d.journaled_gc != Timestamp::ZERO);
        assert!(!d.recovered_regions.is_empty() && !d.filled.is_empty());
        let bytes = p.checkpoint().expect("checkpoint");
        assert_eq!(hex(&bytes), DEPLOYED_CHECKPOINT.trim());
    }

    /// A checkpoint a deployed node wrote restores to the state it was
    /// taken of (every region it leads blocked until lock recovery).
    #[test]
    fn a_checkpoint_in_the_deployed_format_restores() {
        let (two, p) = every_field_set();
        let bytes = unhex(DEPLOYED_CHECKPOINT);
        let mut r = Participant::restore(NodeId(0), &two, Some(&bytes), &[]).expect("restore");
        let leads: std::collections::BTreeSet<RegionId> =
            r.durable.primary_for.iter().copied().collect();
        assert!(r.restored && r.durable.blocked == leads);
        r.durable.blocked = p.durable.blocked.clone();
        assert!(r.same_state(&p));
        assert_eq!(r.durable.journaled_gc, p.durable.journaled_gc);
        assert_eq!(r.checkpoint().expect("checkpoint"), bytes);
        r.check_invariants();
    }
}
