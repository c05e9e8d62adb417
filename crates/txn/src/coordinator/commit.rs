//! Commit (steps 2 to 8 of the algorithm in the module documentation):
//! LOCK, the `write_ts` wait, VALIDATE, COMMIT-BACKUP and COMMIT-PRIMARY,
//! and what follows the outcome (ABORT records, TRUNCATE targets).

use super::{
    refused_for_configuration, AbortReason, CommitStage, CommitStep, Transaction, TxnError,
};
use meridian_wire::{
    Key, KeyRange, LockRecord, NodeId, RegionId, Response, Timestamp, TxnRequest, TxnResponse,
    WriteOp,
};
use std::collections::{BTreeMap, BTreeSet};

fn is_lock_outcome(r: &Response) -> bool {
    matches!(
        r,
        Response::Txn(TxnResponse::Lock(_) | TxnResponse::LockedAbove(_))
    ) || refused_for_configuration(r)
}

fn is_validate_outcome(r: &Response) -> bool {
    matches!(r, Response::Txn(TxnResponse::Validate(_))) || refused_for_configuration(r)
}

impl Transaction {
    fn writes_by<F: Fn(&meridian_config::RegionInfo) -> Vec<NodeId>>(
        &self,
        targets: F,
    ) -> BTreeMap<NodeId, Vec<WriteOp>> {
        let mut by: BTreeMap<NodeId, Vec<WriteOp>> = BTreeMap::new();
        for (k, v) in &self.writes {
            let r = self.map.region_of(k);
            for n in targets(r) {
                by.entry(n).or_default().push(WriteOp {
                    region: r.id,
                    key: k.clone(),
                    value: v.clone(),
                });
            }
        }
        by
    }

    fn written_regions(&self) -> Vec<RegionId> {
        let set: BTreeSet<RegionId> = self
            .writes
            .keys()
            .map(|k| self.map.region_of(k).id)
            .collect();
        set.into_iter().collect()
    }

    /// Start commit (FaRM §4 step 1). Read-only transactions finish at once.
    ///
    /// Errors: `Aborted`/`Finished` if the transaction is already over.
    pub fn commit(&mut self) -> Result<CommitStep, TxnError> {
        self.check_executing()?;
        if self.writes.is_empty() {
            self.phase = CommitStage::Committed;
            return Ok(CommitStep::Done(Ok(self.read_ts)));
        }
        let regions = self.written_regions();
        let by = self.writes_by(|r| vec![r.primary]);
        let msgs: Vec<(NodeId, TxnRequest)> = by
            .into_iter()
            .map(|(n, writes)| {
                // A key written but never read (a blind write) needs no
                // check against `read_ts` (TxnRequest::LockBlind); FaRM's
                // plain LOCK goes when every written key was read.
                let blind: Vec<bool> = writes
                    .iter()
                    .map(|w| !self.reads.contains_key(&w.key))
                    .collect();
                let record = LockRecord {
                    tx: self.id,
                    read_ts: self.read_ts,
                    regions: regions.clone(),
                    writes,
                };
                let req = if blind.contains(&true) {
                    TxnRequest::LockBlind { record, blind }
                } else {
                    TxnRequest::Lock(record)
                };
                (n, req)
            })
            .collect();
        self.lock_targets = msgs.iter().map(|(n, _)| *n).collect();
        self.pending = self.lock_targets.clone();
        if self.map.disk_durable() {
            self.lock_undurable = self.lock_targets.clone();
        }
        self.phase = CommitStage::Locking;
        Ok(CommitStep::Send(msgs))
    }

    /// True if this transaction's `write_ts` wait can be left to the
    /// nodes (`clock.writes_wait_at_server`): it sends a VALIDATE (it read
    /// a key it does not write, or scanned), or a COMMIT-BACKUP (a written
    /// region has a backup), that can carry `write_ts` to be held. A
    /// transaction with neither must wait at the coordinator.
    pub fn may_wait_at_server(&self) -> bool {
        !self.scans.is_empty()
            || self.reads.keys().any(|k| !self.writes.contains_key(k))
            || self
                .writes
                .keys()
                .any(|k| !self.map.region_of(k).backups.is_empty())
    }

    /// The write timestamp has been taken (and its uncertainty waited out).
    ///
    /// Errors: `Protocol` if called out of phase.
    pub fn on_write_ts(&mut self, write_ts: Timestamp) -> Result<CommitStep, TxnError> {
        self.take_write_ts(write_ts, false)
    }

    /// The write timestamp has been taken from GET_TS and *not* waited
    /// out (`clock.writes_wait_at_server`, FaRMv2 §4.2's wait moved to the
    /// nodes): the VALIDATEs, or if there are none the COMMIT-BACKUPs, go
    /// wrapped in `TxnRequest::AfterWriteTs`, which each node holds until
    /// its clock shows `write_ts` past. Everything after them follows
    /// their replies, so validation, the release of the locks and the
    /// report all come after `write_ts` passed (FaRMv2 §7.3).
    ///
    /// Errors: `Protocol` if called out of phase, or for a transaction
    /// that has nothing to carry the wait ([`Self::may_wait_at_server`]).
    pub fn on_write_ts_unwaited(&mut self, write_ts: Timestamp) -> Result<CommitStep, TxnError> {
        if !self.may_wait_at_server() {
            return Err(TxnError::Protocol {
                node: NodeId(u32::MAX),
                detail: "write_ts left to the nodes by a transaction that sends no \
                         VALIDATE or COMMIT-BACKUP"
                    .into(),
            });
        }
        self.take_write_ts(write_ts, true)
    }

    fn take_write_ts(
        &mut self,
        write_ts: Timestamp,
        unwaited: bool,
    ) -> Result<CommitStep, TxnError> {
        if self.phase != CommitStage::AwaitWriteTs {
            return Err(TxnError::Protocol {
                node: NodeId(u32::MAX),
                detail: format!("write_ts in phase {:?}", self.phase),
            });
        }
        // The driver raises GET_TS to the floor (`write_ts_floor`).
        assert!(
            write_ts >= self.write_ts_floor(),
            "write_ts {write_ts} below the floor {} (read_ts {}, blind heads {}) for {}",
            self.write_ts_floor(),
            self.read_ts,
            self.blind_head,
            self.id
        );
        self.write_ts = Some(write_ts);
        self.write_ts_unwaited = unwaited;
        // Validate keys read but not written, and all scanned ranges.
        let mut by: BTreeMap<NodeId, (Vec<(RegionId, Key)>, Vec<(RegionId, KeyRange)>)> =
            BTreeMap::new();
        for (k, region) in &self.reads {
            if self.writes.contains_key(k) {
                continue; // the lock already checked it (LockAtTs)
            }
            let primary = self
                .map
                .get(*region)
                .map(|r| r.primary)
                .unwrap_or(NodeId(0));
            by.entry(primary).or_default().0.push((*region, k.clone()));
        }
        for (region, range) in &self.scans {
            let primary = self
                .map
                .get(*region)
                .map(|r| r.primary)
                .unwrap_or(NodeId(0));
            by.entry(primary)
                .or_default()
                .1
                .push((*region, range.clone()));
        }
        if by.is_empty() {
            return Ok(self.start_commit_backup());
        }
        self.phase = CommitStage::Validating;
        self.pending = by.keys().copied().collect();
        Ok(CommitStep::Send(
            by.into_iter()
                .map(|(n, (keys, ranges))| {
                    let validate = TxnRequest::Validate {
                        tx: self.id,
                        read_ts: self.read_ts,
                        keys,
                        ranges,
                    };
                    (n, self.held_if_unwaited(validate))
                })
                .collect(),
        ))
    }

    /// `req` wrapped to be held until `write_ts` passed, if it was not
    /// waited out; as is otherwise.
    fn held_if_unwaited(&self, req: TxnRequest) -> TxnRequest {
        match (self.write_ts_unwaited, self.write_ts) {
            (true, Some(write_ts)) => TxnRequest::AfterWriteTs {
                write_ts,
                req: Box::new(req),
            },
            _ => req,
        }
    }

    fn start_commit_backup(&mut self) -> CommitStep {
        let Some(write_ts) = self.write_ts else {
            return CommitStep::Done(Err(self.failure.unwrap_or(AbortReason::User)));
        };
        let regions = self.written_regions();
        let by = self.writes_by(|r| r.backups.clone());
        if by.is_empty() {
            return self.start_commit_primary();
        }
        // A VALIDATE held until `write_ts` passed answered already: the
        // COMMIT-BACKUPs need no hold of their own.
        let held = self.write_ts_unwaited && self.phase != CommitStage::Validating;
        self.backup_targets = by.keys().copied().collect();
        self.pending = self.backup_targets.clone();
        self.phase = CommitStage::CommittingBackups;
        CommitStep::Send(
            by.into_iter()
                .map(|(n, writes)| {
                    let backup = TxnRequest::CommitBackup {
                        record: LockRecord {
                            tx: self.id,
                            read_ts: self.read_ts,
                            regions: regions.clone(),
                            writes,
                        },
                        write_ts,
                    };
                    let req = if held {
                        self.held_if_unwaited(backup)
                    } else {
                        backup
                    };
                    (n, req)
                })
                .collect(),
        )
    }

    /// COMMIT-PRIMARY exposes the writes: under disk durability it goes
    /// only once every primary's LOCK record is durable
    /// ([`TxnResponse::LockDurable`]), so that whatever replicas form the
    /// configuration after a whole-cluster crash hold the writes (every
    /// backup's COMMIT-BACKUP record is durable too: its ACK waited).
    /// Until then nothing is sent.
    fn start_commit_primary(&mut self) -> CommitStep {
        if !self.lock_undurable.is_empty() {
            meridian_bugs::mark!("COMMIT-PRIMARY waits for a LOCK record to be durable");
            self.phase = CommitStage::CommittingBackups;
            self.pending.clear();
            self.primary_waits = true;
            return CommitStep::Send(Vec::new());
        }
        self.primary_waits = false;
        let Some(write_ts) = self.write_ts else {
            return CommitStep::Done(Err(self.failure.unwrap_or(AbortReason::User)));
        };
        // COMMIT-PRIMARY releases the locks: `write_ts` must have passed,
        // waited out here or shown past by a node that held a VALIDATE or
        // COMMIT-BACKUP whose reply is in (FaRMv2 §7.3).
        assert!(
            !self.write_ts_unwaited
                || matches!(
                    self.phase,
                    CommitStage::Validating | CommitStage::CommittingBackups
                ),
            "COMMIT-PRIMARY of {} before any node showed its unwaited write_ts {write_ts} past",
            self.id
        );
        self.phase = CommitStage::CommittingPrimaries;
        self.pending = self.lock_targets.clone();
        CommitStep::Send(
            self.lock_targets
                .iter()
                .map(|n| {
                    (
                        *n,
                        TxnRequest::CommitPrimary {
                            tx: self.id,
                            write_ts,
                        },
                    )
                })
                .collect(),
        )
    }

    /// Consume one reply of the current phase. Returns the next step when the
    /// phase completes (or, for COMMIT-PRIMARY, on the first ack), `None`
    /// while replies are still outstanding.
    ///
    /// Errors: `Protocol` for a reply that does not fit the phase.
    pub fn on_reply(
        &mut self,
        from: NodeId,
        resp: Response,
    ) -> Result<Option<CommitStep>, TxnError> {
        if matches!(resp, Response::Txn(TxnResponse::Installed)) {
            return self.on_installed(from);
        }
        if matches!(resp, Response::Txn(TxnResponse::LockDurable)) {
            return Ok(self.on_lock_durable(from));
        }
        if self.phase != CommitStage::Locking
            && self.lock_targets.contains(&from)
            && matches!(
                resp,
                Response::Txn(TxnResponse::Lock(Ok(())) | TxnResponse::LockedAbove(_))
            )
        {
            // A resent LOCK's answer again (its RPC waits for the
            // `LockDurable`): the grant was counted the first time.
            return Ok(None);
        }
        if !self.pending.remove(&from) {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!("unexpected reply in phase {:?}: {resp:?}", self.phase),
            });
        }
        match (self.phase, resp) {
            (CommitStage::Locking, resp) if is_lock_outcome(&resp) => {
                match resp {
                    Response::Txn(TxnResponse::Lock(Err(c))) => {
                        self.failure.get_or_insert(AbortReason::Lock(c));
                    }
                    Response::Txn(TxnResponse::Lock(Ok(()))) => {}
                    Response::Txn(TxnResponse::LockedAbove(head)) => {
                        self.blind_head = self.blind_head.max(head);
                    }
                    _ => {
                        // Refused for the configuration: this node logged
                        // nothing; the others' LOCKs get ABORT.
                        self.failure.get_or_insert(AbortReason::Reconfigured);
                    }
                }
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                if let Some(reason) = self.failure {
                    self.phase = CommitStage::Aborted;
                    return Ok(Some(CommitStep::Done(Err(reason))));
                }
                self.phase = CommitStage::AwaitWriteTs;
                Ok(Some(CommitStep::GetWriteTs))
            }
            (CommitStage::Validating, resp) if is_validate_outcome(&resp) => {
                match resp {
                    Response::Txn(TxnResponse::Validate(Err(c))) => {
                        self.failure.get_or_insert(AbortReason::Validate(c));
                    }
                    Response::Txn(TxnResponse::Validate(Ok(()))) => {}
                    _ => {
                        self.failure.get_or_insert(AbortReason::Reconfigured);
                    }
                }
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                if let Some(reason) = self.failure {
                    self.phase = CommitStage::Aborted;
                    return Ok(Some(CommitStep::Done(Err(reason))));
                }
                Ok(Some(self.start_commit_backup()))
            }
            (CommitStage::CommittingBackups, Response::Txn(TxnResponse::Ack)) => {
                if !self.pending.is_empty() {
                    return Ok(None);
                }
                Ok(Some(self.start_commit_primary()))
            }
            (CommitStage::CommittingPrimaries, Response::Txn(TxnResponse::Ack)) => {
                if self.pending.is_empty() {
                    self.phase = CommitStage::Committed;
                }
                if self.reported {
                    return Ok(None);
                }
                self.reported = true;
                Ok(self.write_ts.map(|ts| CommitStep::Done(Ok(ts))))
            }
            (phase, resp) => Err(TxnError::Protocol {
                node: from,
                detail: format!("reply {resp:?} in phase {phase:?}"),
            }),
        }
    }

    /// A primary's first answer to COMMIT-PRIMARY under disk durability
    /// ([`TxnResponse::Installed`]): it installed the writes, and its
    /// `Ack` follows once the record is durable. The first such answer (or
    /// `Ack`) reports the commit, as FaRM §4 step 4 reports at the first
    /// COMMIT-PRIMARY ack; the primary stays pending, so truncation
    /// ([`Self::is_fully_acknowledged`]) still waits for every `Ack`.
    fn on_installed(&mut self, from: NodeId) -> Result<Option<CommitStep>, TxnError> {
        if self.phase != CommitStage::CommittingPrimaries || !self.pending.contains(&from) {
            return Err(TxnError::Protocol {
                node: from,
                detail: format!(
                    "Installed from a node not awaited in phase {:?}",
                    self.phase
                ),
            });
        }
        if self.reported {
            return Ok(None);
        }
        self.reported = true;
        Ok(self.write_ts.map(|ts| CommitStep::Done(Ok(ts))))
    }

    /// A primary's second answer to LOCK under disk durability
    /// ([`TxnResponse::LockDurable`]): its LOCK record is durable. The
    /// last one lets a waiting COMMIT-PRIMARY go. Late or repeated ones
    /// (a resent LOCK, an aborted transaction) change nothing.
    fn on_lock_durable(&mut self, from: NodeId) -> Option<CommitStep> {
        self.lock_undurable.remove(&from);
        if self.primary_waits && self.lock_undurable.is_empty() {
            return Some(self.start_commit_primary());
        }
        None
    }

    /// ABORT records to send (one-way) after an aborted commit: every primary
    /// a LOCK was sent to.
    pub fn abort_messages(&self) -> Vec<(NodeId, TxnRequest)> {
        if self.phase != CommitStage::Aborted {
            return Vec::new();
        }
        self.lock_targets
            .iter()
            .map(|n| (*n, TxnRequest::Abort { tx: self.id }))
            .collect()
    }

    /// True once every COMMIT-PRIMARY has been acknowledged.
    pub fn is_fully_acknowledged(&self) -> bool {
        self.phase == CommitStage::Committed
    }

    /// Nodes that hold log records of this committed transaction and must
    /// receive its TRUNCATE: the write-set primaries and backups.
    pub fn truncation_targets(&self) -> Vec<NodeId> {
        let set: BTreeSet<NodeId> = self
            .lock_targets
            .union(&self.backup_targets)
            .copied()
            .collect();
        set.into_iter().collect()
    }
}
