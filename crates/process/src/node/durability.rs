//! Disk durability (FaRM §4, §5.3): the write-ahead log's records
//! ([`DurableRecord`]) and sequence, checkpoints ([`NodeSnapshot`]), the
//! restore from them, and the rule for which effects of a drain wait for
//! its records to be durable ([`split_held`]).

use super::{Discarded, NodeEffect, NodeEvent, NodeProcess, Peer, Standing};
use meridian_config::Configuration;
use meridian_txn::Participant;
use meridian_wire::{Frame, NodeId, Request, Response, TxnRequest, TxnResponse};
use std::collections::BTreeSet;

/// Disk durability: whether effect `e`, from a drain that appended log
/// records, may be carried out before those records are durable.
///
/// The rule (`docs/internals/durability.md`): no reply that depends on a
/// record goes out before every configuration that can form next must
/// recover that record. After a whole-cluster crash a configuration may
/// form without a region's backups (they restart late and are suspected),
/// so a record counts only once it is durable *here*; the backups'
/// COMMIT-BACKUP records do not stand in for the primary's own.
///
/// - Lease and clock traffic never depends on the log (a slow fsync must
///   neither expire leases nor age clock samples).
/// - READ, SCAN, single-read and VALIDATE replies log nothing; what they
///   depend on is the record that last changed what they report
///   ([`super::ReadDeps`]): they go at once when that is durable
///   (`reads_free`), and otherwise wait for it.
/// - LOCK-REPLYs go at once: they expose nothing, and the coordinator
///   sends no COMMIT-PRIMARY
///   before this node's [`TxnResponse::LockDurable`], which waits for the
///   LOCK record like every other acknowledgement. So when anything of
///   the transaction is exposed, every written region's primary holds its
///   LOCK record durably and every backup its COMMIT-BACKUP record, and
///   recovery finds the writes in whatever replicas form the next
///   configuration.
/// - Everything else waits: the ACKs of COMMIT-BACKUP, COMMIT-PRIMARY,
///   ABORT and TRUNCATE, `LockDurable`, COMMIT-PRIMARY's
///   [`TxnResponse::Installed`] (a commit reported before the primary's
///   install is durable could be aborted by a recovery that sees only
///   primaries' LOCK records), and any frame the embedded coordinator
///   sends.
pub fn independent_of_log(e: &NodeEffect, reads_free: bool) -> bool {
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
                resp: Response::Txn(TxnResponse::Lock(_) | TxnResponse::LockedAbove(_)),
                ..
            } => true,
            Frame::Response {
                resp:
                    Response::Txn(
                        TxnResponse::Read(_)
                        | TxnResponse::ReadLatest(_)
                        | TxnResponse::Scan(_)
                        | TxnResponse::Validate(_),
                    ),
                ..
            } => reads_free,
            _ => false,
        },
        NodeEffect::Wake { .. } | NodeEffect::Event(_) | NodeEffect::Discard(_) => true,
        _ => false,
    }
}

/// Disk durability: split a drain's effects into those carried out at
/// once and those that wait until the log is durable through a sequence
/// number: `(free, Some((seq, held)))`, or `(all, None)` if nothing waits
/// or `logging` is false (memory mode). `durable_seq` is the last record
/// the log has made durable. The log effects themselves (`AppendLog`,
/// `Checkpoint`, `PersistCoordination`) are the shell's to carry out
/// before this split; any left in `effects` land in `held`. A
/// [`NodeEffect::HoldReads`] is consumed here: the read replies wait for
/// its record unless `durable_seq` covers it. Both the tokio shell and
/// the simulator use this one rule ([`independent_of_log`]).
#[allow(clippy::type_complexity)]
pub fn split_held(
    effects: Vec<NodeEffect>,
    logging: bool,
    durable_seq: u64,
) -> (Vec<NodeEffect>, Option<(u64, Vec<NodeEffect>)>) {
    let mut read_dep = 0;
    let mut last = None;
    let mut effects: Vec<NodeEffect> = effects
        .into_iter()
        .filter(|e| match e {
            NodeEffect::HoldReads { through_seq } => {
                read_dep = read_dep.max(*through_seq);
                false
            }
            NodeEffect::AppendLog { first_seq, records } => {
                last = Some(*first_seq + records.len().saturating_sub(1) as u64);
                true
            }
            _ => true,
        })
        .collect();
    if !logging {
        return (effects, None);
    }
    let reads_free = read_dep <= durable_seq;
    let seq = match (last, reads_free) {
        (Some(l), true) => l,
        (Some(l), false) => l.max(read_dep),
        (None, false) => read_dep,
        (None, true) => return (effects, None),
    };
    let (free, held): (Vec<NodeEffect>, Vec<NodeEffect>) = std::mem::take(&mut effects)
        .into_iter()
        .partition(|e| independent_of_log(e, reads_free));
    // A held effect that would go if reads were free is a read reply.
    if !reads_free && held.iter().any(|e| independent_of_log(e, true)) {
        meridian_bugs::mark!("a read reply waits for the record that changed what it shows");
    }
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

/// The write-ahead log's bookkeeping at a node (disk durability).
#[derive(Debug, Default)]
pub(super) struct Wal {
    /// The last log sequence number handed out, and records since the
    /// last checkpoint.
    pub(super) log_seq: u64,
    pub(super) since_checkpoint: u64,
    /// Objects the last checkpoint held: the next one waits for at least
    /// as many logged records ([`meridian_config::DurabilityConfig::checkpoint_records`]).
    pub(super) checkpoint_objects: u64,
    /// The participant was replaced by an empty one: the next drain
    /// writes a checkpoint of it, so a restore does not replay the new
    /// records onto the old state.
    pub(super) force_checkpoint: bool,
    /// Node-level records not yet drained.
    pub(super) node_records: Vec<DurableRecord>,
    /// The records read replies depend on.
    pub(super) read_deps: super::ReadDeps,
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
    /// length prefix patched in afterwards. Building them costs two
    /// state-sized buffers (the participant's bytes, then the checkpoint
    /// holding them: about 72 MB each with 100k TATP subscribers), and
    /// faulting in and zeroing their pages takes CPU under the process
    /// lock's neighbours; streaming bounds the node's peak memory during
    /// a checkpoint to the buffer. Returns the bytes written.
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

impl NodeProcess {
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
        p.wal.log_seq = log.last().map_or(cp_seq, |(s, _)| (*s).max(cp_seq));
        p.master_offset_ns = offset;
        p.restored = true;
        // Its recovery of the restored configuration died with the old
        // incarnation: it gathered no NEED-RECOVERY since, so it must not
        // vote, decide or apply anything in it. Its flow stays stopped
        // until the next configuration it applies (a restored CM proposes
        // one at once). A restored primary that voted would answer a
        // REQUEST-VOTE for a committed transaction with its surviving LOCK
        // record's evidence but no record, so the coordinator could
        // truncate it without sending this node the COMMIT-RECOVERY, and
        // the writes would never be installed here.
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
        self.absorb_installed();
        if mutations.is_empty() && self.wal.node_records.is_empty() && !self.wal.force_checkpoint {
            let dep = self
                .wal
                .read_deps
                .resolve(self.wal.log_seq, meridian_config::MAX_READ_DEPS);
            if dep > 0 {
                self.effects
                    .push(NodeEffect::HoldReads { through_seq: dep });
            }
            return std::mem::take(&mut self.effects);
        }
        let mut records = std::mem::take(&mut self.wal.node_records);
        records.extend(mutations.into_iter().map(DurableRecord::Participant));
        let first_seq = self.wal.log_seq + 1;
        self.wal.log_seq += records.len() as u64;
        self.wal.since_checkpoint += records.len() as u64;
        let mut out = Vec::with_capacity(self.effects.len() + 3);
        if !records.is_empty() {
            out.push(NodeEffect::AppendLog { first_seq, records });
        }
        let dep = self
            .wal
            .read_deps
            .resolve(self.wal.log_seq, meridian_config::MAX_READ_DEPS);
        if dep > 0 {
            out.push(NodeEffect::HoldReads { through_seq: dep });
        }
        if self.wal.force_checkpoint
            || self.wal.since_checkpoint
                >= self
                    .config
                    .durability
                    .checkpoint_records
                    .max(self.wal.checkpoint_objects)
                    .max(1)
        {
            // A checkpoint that cannot be written leaves the log growing;
            // it is retried after the next batch.
            if let Ok(state) = self.snapshot() {
                self.wal.since_checkpoint = 0;
                self.wal.checkpoint_objects = state.objects() as u64;
                self.wal.force_checkpoint = false;
                out.push(NodeEffect::Checkpoint {
                    through_seq: self.wal.log_seq,
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
    /// and a checkpoint of the empty one follows them, so every later
    /// write reaches the disk log and a whole-cluster restart restores no
    /// stale replica.
    pub(super) fn reset_participant(&mut self) {
        let journaling = self.participant.journaling();
        let pending = self.participant.drain_journal();
        self.wal
            .node_records
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
            meridian_bugs::mark!("a reset participant keeps journaling");
            self.participant.enable_journal();
            self.wal.force_checkpoint = true;
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

    /// Disk durability: a COMMIT-PRIMARY this node carried out (`resp` is
    /// its `Ack`) is answered twice, first [`TxnResponse::Installed`] and
    /// then the `Ack`. [`split_held`] sends the first before the record's
    /// fsync while every region has a complete backup, and holds the
    /// `Ack` until the record is durable; the coordinator reports the
    /// commit at the first and truncates after the second. Without the
    /// log (memory mode), or with `durability.report_after_primary_fsync`,
    /// the `Ack` alone goes.
    pub(super) fn installed_first(
        &mut self,
        to: Peer,
        id: Option<u64>,
        req: &TxnRequest,
        resp: &Response,
    ) {
        if matches!(req, TxnRequest::CommitPrimary { .. })
            && matches!(resp, Response::Txn(TxnResponse::Ack))
            && self.participant.journaling()
            && !self.config.durability.report_after_primary_fsync
        {
            self.reply(to, id, TxnResponse::Installed.into());
        }
    }

    /// Disk durability: a granted LOCK was just answered (request `id`
    /// from `to`); its [`TxnResponse::LockDurable`] follows, held until
    /// the log is durable through the drain's end, which covers the LOCK
    /// record (a resent LOCK logs nothing new, but its first record may
    /// not be durable yet).
    pub(super) fn lock_durable_follows(&mut self, to: Peer, id: u64) {
        if self.participant.journaling() {
            self.wal.read_deps.depend_on_drain();
            self.reply(to, Some(id), TxnResponse::LockDurable.into());
        }
    }

    /// Move the keys the participant changed into the read dependencies
    /// (disk durability: a read reply showing them waits for their record).
    pub(super) fn absorb_installed(&mut self) {
        let changed = self.participant.take_installed();
        if !changed.is_empty() {
            self.wal.read_deps.changed(changed);
        }
    }

    /// A reply to `r` is about to go: note the records it depends on
    /// ([`super::ReadDeps`]).
    pub(super) fn note_read_reply(&mut self, r: &TxnRequest) {
        if self.participant.journaling() {
            self.absorb_installed();
            self.wal.read_deps.note_reply(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::tests::config;
    use meridian_wire::Timestamp;

    /// A drain's records need an fsync of their own only when something
    /// held waits for them: its log markers alone wait for nothing, a
    /// COMMIT-BACKUP's ACK does, and a LOCK-REPLY goes before its fsync
    /// (its `LockDurable`, not here, waits).
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
        let (free, held) = split_held(vec![marker(), lock], true, 6);
        let (seq, held) = held.expect("logged");
        assert_eq!((seq, free.len()), (7, 1), "the LOCK-REPLY goes at once");
        assert!(!held_waits_for_log(&held), "nothing waits: no fsync asked");
        let (_, held) = split_held(vec![marker(), reply(TxnResponse::Ack)], true, 6);
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

    /// A drain that logged nothing: its READ reply goes at once unless
    /// it shows a key changed by a record that is not durable yet
    /// (`HoldReads` above the durable end); then it waits for that record.
    #[test]
    fn a_read_waits_for_the_record_that_changed_what_it_shows() {
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
        let hold = || NodeEffect::HoldReads { through_seq: 12 };
        let (free, held) = split_held(vec![read(), wake()], true, 0);
        assert_eq!((free.len(), held), (2, None), "depends on nothing: at once");
        let (free, held) = split_held(vec![read(), wake(), hold()], true, 12);
        assert_eq!((free.len(), held), (2, None), "durable already: at once");
        let (free, held) = split_held(vec![read(), wake(), hold()], false, 0);
        assert_eq!((free.len(), held), (2, None), "memory mode: at once");
        let (free, held) = split_held(vec![read(), wake(), hold()], true, 11);
        assert_eq!(free, vec![wake()], "the wake-up goes");
        let (seq, held) = held.expect("the read waits");
        assert_eq!((seq, held), (12, vec![read()]), "for its record");
        assert!(held_waits_for_log(&[read()]));
        let (free, held) = split_held(vec![wake(), hold()], true, 11);
        assert_eq!((free.len(), held), (1, None), "nothing to hold");
    }

    /// A COMMIT-PRIMARY's answers (`Installed` if asked for, then the
    /// `Ack`) and a granted LOCK's `LockDurable` wait for the record and
    /// ask for the fsync; the LOCK-REPLY itself goes at once.
    #[test]
    fn commit_primary_answers_and_lock_durable_wait_for_the_record() {
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
        let drain = vec![
            marker(),
            reply(3, TxnResponse::Installed),
            reply(3, TxnResponse::Ack),
            reply(4, TxnResponse::Lock(Ok(()))),
            reply(4, TxnResponse::LockDurable),
        ];
        let (free, held) = split_held(drain, true, 8);
        let (seq, held) = held.expect("logged");
        assert_eq!(seq, 9);
        assert_eq!(
            free,
            vec![reply(4, TxnResponse::Lock(Ok(())))],
            "the LOCK-REPLY goes"
        );
        assert!(held.contains(&reply(3, TxnResponse::Installed)));
        assert!(held.contains(&reply(4, TxnResponse::LockDurable)));
        assert!(held_waits_for_log(&held));
        assert!(held_asks_fsync(&free, &held), "and the fsync is asked for");
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

    /// CM n0 crashes during its configuration's recovery and comes back
    /// from disk, still a member (a restored CM renews its configuration).
    /// Were it to answer the recovery coordinator's REQUEST-VOTE at once,
    /// without the lock recovery its old incarnation never finished, the
    /// vote would carry its surviving LOCK record's evidence but not the
    /// record; the coordinator would commit and truncate the transaction
    /// without sending n0 its COMMIT-RECOVERY, and n0, the region's
    /// primary, would never install the writes. A restored node takes no
    /// part in the recovery of the configuration it was restored in.
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
}
