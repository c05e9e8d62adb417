//! The `participant` target: one node's `meridian_txn::Participant` fed a
//! sequence of transaction-protocol requests over a small key space (eight
//! keys in four regions), three coordinators, eight transaction ids each
//! and timestamps below 32, so that requests collide on keys, ids and
//! timestamps. The node is node 0 or 1 of a two-node configuration with
//! replication 2, so it is primary of some regions and backup of others.
//!
//! Inputs, in any order: READ, READ-LATEST, SCAN, LOCK, LOCK with blind
//! writes, VALIDATE, COMMIT-BACKUP, COMMIT-PRIMARY, ABORT, TRUNCATE (also
//! piggybacked on any request, and as a frame's TRUNCATE record with a
//! coordinator's low bound), an AFTER-WRITE-TS wrapper (which the node
//! unwraps, so the participant refuses it), and GC at a safe point that
//! only moves forward (the node's clock less its GC window).
//!
//! Checks, after every input: `Participant::check_invariants`; the reply
//! is a transaction response of the request's kind or a typed rejection
//! (never `Response::Error` or another protocol's); and the model:
//!
//! - every version a READ, READ-LATEST or SCAN returns was written by an
//!   accepted commit: its key, `write_ts` and value are those of a write
//!   of a LOCK record the participant granted for a transaction whose
//!   COMMIT-PRIMARY at that `write_ts` it acknowledged, or of a
//!   COMMIT-BACKUP record at that `write_ts` it acknowledged;
//! - a READ or SCAN at `read_ts` returns no version above `read_ts`; a
//!   SCAN returns keys in increasing order, inside its range, at most
//!   `limit` of them.
//!
//! At the end: the journal, replayed on a fresh participant
//! (`Participant::restore`), and the checkpoint, restored, both rebuild
//! the same state, byte for byte (the engine is deterministic; disk
//! durability depends on it).

use arbitrary::Arbitrary;
use meridian_config::Configuration;
use meridian_txn::Participant;
use meridian_wire::{
    ConfigId, KeyRange, LockRecord, NodeId, RegionId, Response, Timestamp, TruncateLow, Truncation,
    TxId, TxnRequest, TxnResponse, WriteOp,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// First key bytes of the four regions of the two-node configuration.
const REGION_BYTES: [u8; 4] = [0x10, 0x50, 0x90, 0xd0];

/// Requests per input, at most (longer inputs are cut).
const MAX_STEPS: usize = 96;

/// A key: one of eight (two per region), or any bytes.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub enum KeySel {
    /// Key `[REGION_BYTES[i % 4], (i / 4) % 2]`.
    Small(u8),
    /// These bytes.
    Raw(Vec<u8>),
}

/// The region a request names: the key's own, or any id.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub enum RegionSel {
    /// The region the key belongs to.
    OfKey,
    /// Region `id % 6` (ids 4 and 5 do not exist).
    Id(u8),
}

/// A transaction id: configuration 1 or 2, coordinator below 3, local id
/// below 8.
#[derive(Arbitrary, Clone, Copy, Debug, Serialize, Deserialize)]
pub struct TxSel {
    /// Configuration (`% 2 + 1`).
    pub config: u8,
    /// Coordinator (`% 3`).
    pub coordinator: u8,
    /// Local id (`% 8`).
    pub local: u8,
}

/// One write of a record: a key and a value (`None` deletes).
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub struct WriteSel {
    /// Region named.
    pub region: RegionSel,
    /// Key.
    pub key: KeySel,
    /// Value: `n` makes `n % 4 + 1` bytes of `n`.
    pub value: Option<u8>,
}

/// One input to the participant.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub enum Op {
    /// READ at `read_ts`.
    Read {
        /// Region.
        region: RegionSel,
        /// Key.
        key: KeySel,
        /// Snapshot time (`% 32`).
        read_ts: u8,
    },
    /// READ-LATEST.
    ReadLatest {
        /// Region.
        region: RegionSel,
        /// Key.
        key: KeySel,
    },
    /// SCAN of `[start, end)`.
    Scan {
        /// Region (of `start`).
        region: RegionSel,
        /// Start.
        start: KeySel,
        /// End, or the region's end.
        end: Option<KeySel>,
        /// Row limit.
        limit: u8,
        /// Snapshot time (`% 32`).
        read_ts: u8,
    },
    /// LOCK, or LOCK with blind writes when `blind` is given.
    Lock {
        /// Transaction.
        tx: TxSel,
        /// Its read time (`% 32`).
        read_ts: u8,
        /// Writes.
        writes: Vec<WriteSel>,
        /// Blind-write flags (a mismatched count is refused).
        blind: Option<Vec<bool>>,
    },
    /// VALIDATE.
    Validate {
        /// Transaction.
        tx: TxSel,
        /// Its read time (`% 32`).
        read_ts: u8,
        /// Keys read.
        keys: Vec<(RegionSel, KeySel)>,
        /// Ranges scanned.
        ranges: Vec<(RegionSel, KeySel, Option<KeySel>)>,
    },
    /// COMMIT-BACKUP.
    CommitBackup {
        /// Transaction.
        tx: TxSel,
        /// Its read time (`% 32`).
        read_ts: u8,
        /// Writes.
        writes: Vec<WriteSel>,
        /// Its write time (`% 32`).
        write_ts: u8,
    },
    /// COMMIT-PRIMARY.
    CommitPrimary {
        /// Transaction.
        tx: TxSel,
        /// Its write time (`% 32`).
        write_ts: u8,
    },
    /// ABORT.
    Abort {
        /// Transaction.
        tx: TxSel,
    },
    /// TRUNCATE, explicit.
    Truncate {
        /// Transactions.
        txs: Vec<TxSel>,
    },
    /// A frame's TRUNCATE record: ids and a coordinator's low bound.
    Piggyback {
        /// Transactions.
        txs: Vec<TxSel>,
        /// Low bound: coordinator (`% 3`) and local id (`% 10`).
        low: Option<(u8, u8)>,
    },
    /// AFTER-WRITE-TS around a COMMIT-PRIMARY (refused: the node unwraps
    /// what it holds before the participant sees it).
    AfterWriteTs {
        /// Transaction.
        tx: TxSel,
        /// Write time (`% 32`).
        write_ts: u8,
    },
    /// The clock moves on by `advance % 4` and GC runs at the new safe
    /// point.
    Gc {
        /// How far.
        advance: u8,
    },
}

/// One step: piggybacked truncations and a request.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    /// Transactions truncated by the frame that carries the request.
    pub truncate: Vec<TxSel>,
    /// The request.
    pub op: Op,
}

/// A whole input: which node, and the steps.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub struct Script {
    /// Node 0 or 1 (`% 2`).
    pub node: u8,
    /// The requests, in order.
    pub steps: Vec<Step>,
}

/// The configuration every run uses: two nodes, replication 2, four
/// regions.
pub fn configuration() -> Configuration {
    Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"))
}

/// The key `k` names.
pub fn key(k: &KeySel) -> Vec<u8> {
    match k {
        KeySel::Small(i) => vec![REGION_BYTES[(*i % 4) as usize], (*i / 4) % 2],
        KeySel::Raw(b) => b.clone(),
    }
}

/// The transaction id `t` names.
pub fn tx(t: TxSel) -> TxId {
    TxId {
        config: ConfigId(u64::from(t.config % 2 + 1)),
        coordinator: u64::from(t.coordinator % 3),
        thread: 0,
        local: u64::from(t.local % 8),
    }
}

fn ts(t: u8) -> Timestamp {
    Timestamp(u64::from(t % 32))
}

fn value(v: u8) -> Vec<u8> {
    vec![v; usize::from(v % 4) + 1]
}

/// What the model knows: versions that accepted commits wrote.
#[derive(Default)]
struct Model {
    /// Writes of every LOCK record granted, per transaction (all of them:
    /// a duplicate LOCK of the same transaction is acknowledged without
    /// replacing the first, so this over-approximates, which keeps the
    /// check sound).
    locked: std::collections::BTreeMap<TxId, Vec<WriteOp>>,
    /// (key, write_ts, value) of every accepted commit's writes.
    written: BTreeSet<(Vec<u8>, Timestamp, Option<Vec<u8>>)>,
}

impl Model {
    fn commit(&mut self, writes: &[WriteOp], write_ts: Timestamp) {
        for w in writes {
            self.written
                .insert((w.key.clone(), write_ts, w.value.clone()));
        }
    }

    fn assert_written(&self, key: &[u8], version: Timestamp, value: Option<&[u8]>) {
        assert!(
            self.written
                .contains(&(key.to_vec(), version, value.map(<[u8]>::to_vec))),
            "read {key:?} at version {version}: {value:?}, which no accepted commit wrote"
        );
    }
}

/// Run one input.
pub fn run(data: &[u8]) {
    let Some(script) = crate::structured::<Script>(data) else {
        return;
    };
    run_script(&script);
}

/// Run one script (also used by the corpus test).
pub fn run_script(script: &Script) {
    let cfg = configuration();
    let node = NodeId(u32::from(script.node % 2));
    let mut p = Participant::new(node, &cfg);
    p.enable_journal();
    let mut model = Model::default();
    let mut now = 0u64;
    let mut journal = Vec::new();
    for step in script.steps.iter().take(MAX_STEPS) {
        let truncate: Vec<TxId> = step.truncate.iter().map(|t| tx(*t)).collect();
        apply(&mut p, &mut model, &mut now, &truncate, &step.op);
        p.check_invariants();
        journal.extend(p.drain_journal());
    }
    // The journal rebuilds the state (regions unblocked as lock recovery
    // would, since a restored participant serves nothing until then).
    let replayed = Participant::restore(node, &cfg, None, &journal).expect("the journal replays");
    // Both sides end with a GC at the last safe point (see below).
    p.gc(Timestamp(now));
    let checkpoint = p.checkpoint().expect("a checkpoint encodes");
    let mut replayed = unblocked(replayed);
    // Replay runs with the journal off, so it does not note the last GC
    // safe point it journaled (`journaled_gc`, which only spares the
    // journal repeats): a GC at that safe point with the journal on notes
    // it, and the live participant ran the same GC.
    replayed.enable_journal();
    replayed.gc(Timestamp(now));
    assert_eq!(
        replayed.checkpoint().expect("a checkpoint encodes"),
        checkpoint,
        "the journal replayed rebuilds the same state"
    );
    let restored =
        Participant::restore(node, &cfg, Some(&checkpoint), &[]).expect("a checkpoint restores");
    assert_eq!(
        unblocked(restored)
            .checkpoint()
            .expect("a checkpoint encodes"),
        checkpoint,
        "a checkpoint restores the same state"
    );
}

/// A restored participant with its regions unblocked, as the lock
/// recovery of its next configuration leaves them.
fn unblocked(mut p: Participant) -> Participant {
    for r in p.blocked_regions() {
        p.recover_locks(r, &[]);
    }
    p.check_invariants();
    p
}

fn region(p: &Participant, r: &RegionSel, key: &[u8]) -> RegionId {
    match r {
        RegionSel::OfKey => p.region_of(key),
        RegionSel::Id(i) => RegionId(u32::from(*i % 6)),
    }
}

fn record(p: &Participant, t: TxSel, read_ts: u8, writes: &[WriteSel]) -> LockRecord {
    let writes: Vec<WriteOp> = writes
        .iter()
        .map(|w| {
            let k = key(&w.key);
            WriteOp {
                region: region(p, &w.region, &k),
                key: k,
                value: w.value.map(value),
            }
        })
        .collect();
    let regions: BTreeSet<RegionId> = writes.iter().map(|w| w.region).collect();
    LockRecord {
        tx: tx(t),
        read_ts: ts(read_ts),
        regions: regions.into_iter().collect(),
        writes,
    }
}

fn range(start: &KeySel, end: &Option<KeySel>) -> KeyRange {
    KeyRange {
        start: key(start),
        end: end.as_ref().map(key),
    }
}

fn apply(p: &mut Participant, model: &mut Model, now: &mut u64, truncate: &[TxId], op: &Op) {
    match op {
        Op::Gc { advance } => {
            *now += u64::from(*advance % 4);
            p.gc(Timestamp(*now));
            return;
        }
        Op::Piggyback { txs, low } => {
            let t = Truncation {
                txs: txs.iter().map(|t| tx(*t)).collect(),
                low: low.map(|(c, l)| TruncateLow {
                    coordinator: u64::from(c % 3),
                    local: u64::from(l % 10),
                }),
            };
            p.truncate_piggybacked(&t);
            return;
        }
        _ => {}
    }
    let req = request(p, op);
    let resp = p.handle(truncate, &req);
    let r = match resp {
        Response::Txn(r) => r,
        Response::Rejected(_) => return,
        other => panic!("{req:?} answered {other:?}: not a transaction response"),
    };
    match (&req, r) {
        (TxnRequest::Read { key, read_ts, .. }, TxnResponse::Read(r)) => {
            if let Ok(Some(v)) = r {
                assert!(v.version <= *read_ts, "a READ at {read_ts} saw {v:?}");
                model.assert_written(key, v.version, Some(&v.value));
            }
        }
        (TxnRequest::ReadLatest { key, .. }, TxnResponse::ReadLatest(r)) => {
            if let Ok(l) = r {
                if l.value.is_some() {
                    model.assert_written(key, l.version, l.value.as_deref());
                }
            }
        }
        (
            TxnRequest::Scan {
                range,
                limit,
                read_ts,
                ..
            },
            TxnResponse::Scan(r),
        ) => {
            if let Ok((rows, _)) = r {
                assert!(rows.len() <= *limit as usize, "a SCAN over its limit");
                for (i, (k, v)) in rows.iter().enumerate() {
                    assert!(range.contains(k), "a SCAN of {range:?} returned {k:?}");
                    assert!(i == 0 || rows[i - 1].0 < *k, "a SCAN out of key order");
                    assert!(v.version <= *read_ts, "a SCAN at {read_ts} saw {v:?}");
                    model.assert_written(k, v.version, Some(&v.value));
                }
            }
        }
        (TxnRequest::Lock(rec), TxnResponse::Lock(r)) => {
            if r.is_ok() {
                model
                    .locked
                    .entry(rec.tx)
                    .or_default()
                    .extend(rec.writes.clone());
            }
        }
        (TxnRequest::LockBlind { record, .. }, TxnResponse::Lock(Ok(())))
        | (TxnRequest::LockBlind { record, .. }, TxnResponse::LockedAbove(_)) => {
            model
                .locked
                .entry(record.tx)
                .or_default()
                .extend(record.writes.clone());
        }
        (TxnRequest::LockBlind { .. }, TxnResponse::Lock(Err(_))) => {}
        (TxnRequest::Validate { .. }, TxnResponse::Validate(_)) => {}
        (TxnRequest::CommitBackup { record, write_ts }, TxnResponse::Ack) => {
            model.commit(&record.writes, *write_ts);
        }
        (TxnRequest::CommitPrimary { tx, write_ts }, TxnResponse::Ack) => {
            let writes = model.locked.get(tx).cloned().unwrap_or_default();
            model.commit(&writes, *write_ts);
        }
        (TxnRequest::Abort { .. }, TxnResponse::Ack)
        | (TxnRequest::Truncate { .. }, TxnResponse::Ack) => {}
        (req, r) => panic!("{req:?} answered {r:?}: a response of another kind"),
    }
}

fn request(p: &Participant, op: &Op) -> TxnRequest {
    match op {
        Op::Read {
            region: r,
            key: k,
            read_ts,
        } => {
            let key = key(k);
            TxnRequest::Read {
                region: region(p, r, &key),
                key,
                read_ts: ts(*read_ts),
            }
        }
        Op::ReadLatest { region: r, key: k } => {
            let key = key(k);
            TxnRequest::ReadLatest {
                region: region(p, r, &key),
                key,
            }
        }
        Op::Scan {
            region: r,
            start,
            end,
            limit,
            read_ts,
        } => {
            let range = range(start, end);
            TxnRequest::Scan {
                region: region(p, r, &range.start),
                range,
                limit: u32::from(*limit),
                read_ts: ts(*read_ts),
            }
        }
        Op::Lock {
            tx: t,
            read_ts,
            writes,
            blind,
        } => {
            let record = record(p, *t, *read_ts, writes);
            match blind {
                None => TxnRequest::Lock(record),
                Some(blind) => TxnRequest::LockBlind {
                    record,
                    blind: blind.clone(),
                },
            }
        }
        Op::Validate {
            tx: t,
            read_ts,
            keys,
            ranges,
        } => TxnRequest::Validate {
            tx: tx(*t),
            read_ts: ts(*read_ts),
            keys: keys
                .iter()
                .map(|(r, k)| {
                    let k = key(k);
                    (region(p, r, &k), k)
                })
                .collect(),
            ranges: ranges
                .iter()
                .map(|(r, s, e)| {
                    let range = range(s, e);
                    (region(p, r, &range.start), range)
                })
                .collect(),
        },
        Op::CommitBackup {
            tx: t,
            read_ts,
            writes,
            write_ts,
        } => TxnRequest::CommitBackup {
            record: record(p, *t, *read_ts, writes),
            write_ts: ts(*write_ts),
        },
        Op::CommitPrimary { tx: t, write_ts } => TxnRequest::CommitPrimary {
            tx: tx(*t),
            write_ts: ts(*write_ts),
        },
        Op::Abort { tx: t } => TxnRequest::Abort { tx: tx(*t) },
        Op::Truncate { txs } => TxnRequest::Truncate {
            txs: txs.iter().map(|t| tx(*t)).collect(),
        },
        Op::AfterWriteTs { tx: t, write_ts } => TxnRequest::AfterWriteTs {
            write_ts: ts(*write_ts),
            req: Box::new(TxnRequest::CommitPrimary {
                tx: tx(*t),
                write_ts: ts(*write_ts),
            }),
        },
        // Handled before a request is built.
        Op::Gc { .. } | Op::Piggyback { .. } => TxnRequest::Truncate { txs: Vec::new() },
    }
}
