//! Write the seed corpus of every fuzz target into `fuzz/corpus/<target>/`
//! from real frames, request sequences, log files and configurations:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_corpus
//! ```
//!
//! Deterministic: running it again rewrites the same files.

use meridian_config::Configuration;
use meridian_fuzz::participant::{KeySel, Op, RegionSel, Script, Step, TxSel, WriteSel};
use meridian_fuzz::wal::{Checkpoint, Files};
use meridian_process::node::{DurableRecord, NodeProcess};
use meridian_wire::*;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    write_all(&root.join("frame_decoder"), frames()?)?;
    write_all(&root.join("participant"), scripts()?)?;
    write_all(&root.join("wal_reader"), wal_files()?)?;
    write_all(&root.join("config_parser"), configs()?)?;
    Ok(())
}

/// Replace `dir`'s files with `seeds`, named `seed-NN`.
fn write_all(dir: &PathBuf, seeds: Vec<Vec<u8>>) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), s)?;
    }
    println!("{}: {} seeds", dir.display(), seeds.len());
    Ok(())
}

fn tx(local: u64) -> TxId {
    TxId {
        config: ConfigId(1),
        coordinator: 1,
        thread: 0,
        local,
    }
}

fn record(local: u64, key: &[u8], value: Option<&[u8]>) -> LockRecord {
    LockRecord {
        tx: tx(local),
        read_ts: Timestamp(5),
        regions: vec![RegionId(0)],
        writes: vec![WriteOp {
            region: RegionId(0),
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        }],
    }
}

/// Real frames: one of each transaction request and response, and the
/// other protocols' messages; three frames back to back; raft-rs messages
/// as the coordination service sends them.
fn frames() -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    use protobuf::Message as _;
    let request = |id: u64, req: Request| Frame::Request {
        id,
        config: ConfigId(1),
        truncate: Truncation {
            txs: vec![tx(1)],
            low: Some(TruncateLow {
                coordinator: 1,
                local: 1,
            }),
        },
        req,
    };
    let response = |id: u64, resp: Response| Frame::Response { id, resp };
    let versioned = Versioned {
        version: Timestamp(7),
        value: b"value".to_vec(),
    };
    let mut raft_msg = raft::eraftpb::Message::default();
    raft_msg.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    raft_msg.from = 1;
    raft_msg.to = 2;
    raft_msg.term = 3;
    raft_msg.index = 4;
    let entry = raft::eraftpb::Entry {
        index: 5,
        term: 3,
        data: b"config_id = 2".to_vec().into(),
        ..Default::default()
    };
    raft_msg.mut_entries().push(entry);
    let raft_bytes = raft_msg.write_to_bytes()?;
    let mut heartbeat = raft::eraftpb::Message::default();
    heartbeat.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    heartbeat.from = 2;
    heartbeat.to = 1;
    let frames = vec![
        request(
            1,
            Request::Txn(TxnRequest::Read {
                region: RegionId(0),
                key: b"k".to_vec(),
                read_ts: Timestamp(9),
            }),
        ),
        request(
            2,
            Request::Txn(TxnRequest::Scan {
                region: RegionId(0),
                range: KeyRange {
                    start: b"a".to_vec(),
                    end: Some(b"z".to_vec()),
                },
                limit: 10,
                read_ts: Timestamp(9),
            }),
        ),
        request(
            3,
            Request::Txn(TxnRequest::Lock(record(2, b"k", Some(b"v")))),
        ),
        request(
            4,
            Request::Txn(TxnRequest::LockBlind {
                record: record(3, b"k", None),
                blind: vec![true],
            }),
        ),
        request(
            5,
            Request::Txn(TxnRequest::Validate {
                tx: tx(2),
                read_ts: Timestamp(5),
                keys: vec![(RegionId(0), b"r".to_vec())],
                ranges: vec![(
                    RegionId(0),
                    KeyRange {
                        start: b"a".to_vec(),
                        end: None,
                    },
                )],
            }),
        ),
        request(
            6,
            Request::Txn(TxnRequest::AfterWriteTs {
                write_ts: Timestamp(8),
                req: Box::new(TxnRequest::CommitBackup {
                    record: record(2, b"k", Some(b"v")),
                    write_ts: Timestamp(8),
                }),
            }),
        ),
        request(
            7,
            Request::Txn(TxnRequest::CommitPrimary {
                tx: tx(2),
                write_ts: Timestamp(8),
            }),
        ),
        request(8, Request::Txn(TxnRequest::Abort { tx: tx(3) })),
        Frame::OneWay {
            config: ConfigId(1),
            truncate: Truncation::of(vec![tx(2), tx(3)]),
            req: Request::Txn(TxnRequest::Truncate { txs: Vec::new() }),
        },
        request(
            9,
            Request::Txn(TxnRequest::ReadLatest {
                region: RegionId(0),
                key: b"k".to_vec(),
            }),
        ),
        request(10, Request::Clock(ClockRequest::Sync)),
        request(11, Request::Cm(CmRequest::RegisterClient)),
        request(
            12,
            Request::Thin(ThinRequest::Execute {
                ops: vec![
                    ClientOp::Put(b"k".to_vec(), b"v".to_vec()),
                    ClientOp::Get(b"k".to_vec()),
                    ClientOp::Scan {
                        start: b"a".to_vec(),
                        end: None,
                        limit: 5,
                    },
                ],
            }),
        ),
        request(13, Request::Admin(AdminRequest::Status)),
        Frame::OneWay {
            config: ConfigId(1),
            truncate: Truncation::default(),
            req: Request::Lease(LeaseMessage::Request {
                config: ConfigId(1),
                holder: LeaseHolder::Node(NodeId(1)),
                seq: 4,
            }),
        },
        Frame::OneWay {
            config: ConfigId(1),
            truncate: Truncation::default(),
            req: Request::Reconfig(ReconfigMessage::Probe {
                config: ConfigId(1),
                from: NodeId(0),
                seq: 2,
            }),
        },
        Frame::OneWay {
            config: ConfigId(1),
            truncate: Truncation::default(),
            req: Request::Coord(CoordMessage::Raft {
                from: NodeId(1),
                bytes: raft_bytes.clone(),
            }),
        },
        response(
            1,
            Response::Txn(TxnResponse::Read(Ok(Some(versioned.clone())))),
        ),
        response(
            2,
            Response::Txn(TxnResponse::Scan(Ok((
                vec![(b"k".to_vec(), versioned)],
                false,
            )))),
        ),
        response(3, Response::Txn(TxnResponse::Lock(Err(Conflict::Locked)))),
        response(4, Response::Txn(TxnResponse::LockedAbove(Timestamp(12)))),
        response(7, Response::Txn(TxnResponse::Ack)),
        response(
            10,
            Response::Clock(ClockResponse::MasterTime { master_ns: 123_456 }),
        ),
        response(11, Response::Rejected(Rejection::EmptyRecord)),
        response(12, Response::Error("unavailable".to_string())),
    ];
    let mut seeds = Vec::new();
    for f in &frames {
        let mut b = Vec::new();
        encode_frame(f, &mut b)?;
        seeds.push(b);
    }
    let mut stream = Vec::new();
    for f in &frames[..3] {
        encode_frame(f, &mut stream)?;
    }
    seeds.push(stream);
    seeds.push(raft_bytes);
    seeds.push(heartbeat.write_to_bytes()?);
    Ok(seeds)
}

fn t(local: u8) -> TxSel {
    TxSel {
        config: 0,
        coordinator: 1,
        local,
    }
}

fn w(key: u8, value: Option<u8>) -> WriteSel {
    WriteSel {
        region: RegionSel::OfKey,
        key: KeySel::Small(key),
        value,
    }
}

fn step(op: Op) -> Step {
    Step {
        truncate: Vec::new(),
        op,
    }
}

fn read(key: u8, read_ts: u8) -> Step {
    step(Op::Read {
        region: RegionSel::OfKey,
        key: KeySel::Small(key),
        read_ts,
    })
}

fn lock(local: u8, read_ts: u8, writes: Vec<WriteSel>) -> Step {
    step(Op::Lock {
        tx: t(local),
        read_ts,
        writes,
        blind: None,
    })
}

fn commit(local: u8, write_ts: u8) -> Step {
    step(Op::CommitPrimary {
        tx: t(local),
        write_ts,
    })
}

/// Request sequences as coordinators send them, each for both nodes.
fn scripts() -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let scan = |read_ts| {
        step(Op::Scan {
            region: RegionSel::OfKey,
            start: KeySel::Small(0),
            end: None,
            limit: 10,
            read_ts,
        })
    };
    let runs: Vec<Vec<Step>> = vec![
        // LOCK, COMMIT-PRIMARY, reads, TRUNCATE.
        vec![
            lock(1, 3, vec![w(0, Some(1)), w(4, Some(2))]),
            commit(1, 6),
            read(0, 7),
            read(4, 5),
            step(Op::ReadLatest {
                region: RegionSel::OfKey,
                key: KeySel::Small(0),
            }),
            scan(9),
            step(Op::Truncate { txs: vec![t(1)] }),
        ],
        // COMMIT-BACKUP, applied at a piggybacked TRUNCATE.
        vec![
            step(Op::CommitBackup {
                tx: t(2),
                read_ts: 2,
                writes: vec![w(1, Some(3)), w(5, None)],
                write_ts: 4,
            }),
            Step {
                truncate: vec![t(2)],
                op: Op::Read {
                    region: RegionSel::OfKey,
                    key: KeySel::Small(1),
                    read_ts: 5,
                },
            },
            read(5, 6),
        ],
        // Two transactions on one key: a conflict, ABORT, a retry.
        vec![
            lock(1, 2, vec![w(2, Some(1))]),
            lock(2, 2, vec![w(2, Some(2))]),
            step(Op::Abort { tx: t(1) }),
            lock(2, 2, vec![w(2, Some(2))]),
            commit(2, 5),
            lock(1, 2, vec![w(2, Some(3))]),
            read(2, 6),
        ],
        // A blind LOCK above a newer version, then its commit.
        vec![
            lock(1, 1, vec![w(3, Some(1))]),
            commit(1, 9),
            step(Op::Lock {
                tx: t(2),
                read_ts: 4,
                writes: vec![w(3, Some(2)), w(7, Some(2))],
                blind: Some(vec![true, false]),
            }),
            commit(2, 12),
            read(3, 20),
        ],
        // VALIDATE before and after a conflicting commit.
        vec![
            step(Op::Validate {
                tx: t(3),
                read_ts: 4,
                keys: vec![(RegionSel::OfKey, KeySel::Small(0))],
                ranges: vec![(RegionSel::OfKey, KeySel::Small(0), None)],
            }),
            lock(1, 4, vec![w(0, Some(9))]),
            commit(1, 6),
            step(Op::Validate {
                tx: t(3),
                read_ts: 4,
                keys: vec![(RegionSel::OfKey, KeySel::Small(0))],
                ranges: Vec::new(),
            }),
        ],
        // Versions, a delete, GC, reads below the safe point.
        vec![
            lock(1, 1, vec![w(6, Some(1))]),
            commit(1, 2),
            lock(2, 2, vec![w(6, Some(2))]),
            commit(2, 4),
            lock(3, 4, vec![w(6, None)]),
            commit(3, 6),
            step(Op::Gc { advance: 3 }),
            step(Op::Gc { advance: 3 }),
            step(Op::Truncate {
                txs: vec![t(1), t(2), t(3)],
            }),
            read(6, 3),
            read(6, 7),
        ],
        // A coordinator's low bound passes a LOCK left behind.
        vec![
            lock(1, 1, vec![w(0, Some(1))]),
            step(Op::Piggyback {
                txs: Vec::new(),
                low: Some((1, 3)),
            }),
            lock(2, 1, vec![w(0, Some(2))]),
            lock(4, 1, vec![w(0, Some(2))]),
        ],
        // Malformed requests: AFTER-WRITE-TS reaching the participant,
        // duplicate keys, a wrong region, a COMMIT-PRIMARY with no LOCK.
        vec![
            step(Op::AfterWriteTs {
                tx: t(1),
                write_ts: 5,
            }),
            lock(2, 1, vec![w(0, Some(1)), w(0, Some(2))]),
            lock(
                3,
                1,
                vec![WriteSel {
                    region: RegionSel::Id(3),
                    key: KeySel::Small(0),
                    value: Some(1),
                }],
            ),
            commit(4, 9),
            step(Op::Read {
                region: RegionSel::Id(5),
                key: KeySel::Raw(b"x".to_vec()),
                read_ts: 1,
            }),
        ],
    ];
    let mut seeds = Vec::new();
    for steps in runs {
        for node in 0..2 {
            let s = Script {
                node,
                steps: steps.clone(),
            };
            meridian_fuzz::participant::run_script(&s);
            seeds.push(meridian_fuzz::script(&s)?);
        }
    }
    Ok(seeds)
}

/// Real data directories: a node's log and checkpoint after real
/// requests, whole, cut, padded, damaged, and split into segments.
fn wal_files() -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let cfg = meridian_fuzz::wal::configuration();
    let mut node = NodeProcess::new(cfg.clone(), NodeId(0), 1)?;
    let p = node.participant_mut();
    p.enable_journal();
    let region = p.region_of(&[0x10]);
    let rec = |local: u64, key: u8, value: Option<&[u8]>| LockRecord {
        tx: tx(local),
        read_ts: Timestamp(2),
        regions: vec![region],
        writes: vec![WriteOp {
            region,
            key: vec![0x10, key],
            value: value.map(<[u8]>::to_vec),
        }],
    };
    let lock_commit = |p: &mut meridian_txn::Participant, local, key, value, wts| {
        let _ = p.handle(&[], &TxnRequest::Lock(rec(local, key, value)));
        let _ = p.handle(
            &[],
            &TxnRequest::CommitPrimary {
                tx: tx(local),
                write_ts: Timestamp(wts),
            },
        );
    };
    lock_commit(p, 1, 1, Some(b"one"), 5);
    lock_commit(p, 2, 2, None, 6);
    let first: Vec<DurableRecord> = p
        .drain_journal()
        .into_iter()
        .map(DurableRecord::Participant)
        .collect();
    let state = node.snapshot()?.encode()?;
    let p = node.participant_mut();
    lock_commit(p, 3, 1, Some(b"three"), 8);
    p.truncate_piggybacked(&Truncation::of(vec![tx(1), tx(2)]));
    let _ = p.handle(&[], &TxnRequest::Lock(rec(4, 3, Some(b"four"))));
    let mut second: Vec<DurableRecord> = p
        .drain_journal()
        .into_iter()
        .map(DurableRecord::Participant)
        .collect();
    second.push(DurableRecord::MasterClock { offset_ns: -42 });
    let n1 = first.len() as u64;
    let head = meridian_node::wal::encode(1, &first)?;
    let tail = meridian_node::wal::encode(n1 + 1, &second)?;
    let whole = [head.clone(), tail.clone()].concat();
    let files =
        |checkpoint: Checkpoint, segments: Vec<(u8, Vec<u8>)>, log: Option<Vec<u8>>| Files {
            fix_checksums: false,
            checkpoint,
            segments,
            log,
        };
    let framed = |seq: u64| Checkpoint::Framed {
        seq,
        state: state.clone(),
    };
    let mut legacy = n1.to_le_bytes().to_vec();
    legacy.extend_from_slice(&state);
    let mut padded = whole.clone();
    padded.resize(whole.len() + 256, 0);
    let mut torn = whole.clone();
    torn.truncate(whole.len() - 3);
    let mut flipped = whole.clone();
    let mid = head.len() + 20;
    flipped[mid] ^= 0x40;
    let mut garbage_tail = whole.clone();
    garbage_tail.extend_from_slice(&[0, 0, 0, 0, 7, 7]);
    let mut bad_sum = [0u8; 8].to_vec();
    bad_sum.extend_from_slice(b"MRDNCKP2");
    let mut cp_bad = b"MRDNCKP2".to_vec();
    cp_bad.extend_from_slice(&n1.to_le_bytes());
    cp_bad.extend_from_slice(&state);
    cp_bad.extend_from_slice(&0u64.to_le_bytes());
    let all = vec![
        files(Checkpoint::Absent, Vec::new(), Some(whole.clone())),
        files(Checkpoint::Absent, Vec::new(), Some(padded)),
        files(Checkpoint::Absent, Vec::new(), Some(torn)),
        files(Checkpoint::Absent, Vec::new(), Some(flipped.clone())),
        Files {
            fix_checksums: true,
            ..files(Checkpoint::Absent, Vec::new(), Some(flipped))
        },
        files(Checkpoint::Absent, Vec::new(), Some(garbage_tail)),
        files(framed(n1), Vec::new(), Some(tail.clone())),
        files(framed(n1), Vec::new(), Some(whole.clone())),
        files(framed(n1), Vec::new(), None),
        files(Checkpoint::Raw(legacy), Vec::new(), Some(tail.clone())),
        files(Checkpoint::Raw(cp_bad), Vec::new(), Some(tail.clone())),
        files(
            Checkpoint::Absent,
            vec![(n1 as u8, head.clone())],
            Some(tail.clone()),
        ),
        files(framed(n1), vec![(n1 as u8, head)], Some(tail)),
        files(Checkpoint::Absent, Vec::new(), Some(vec![0; 64])),
        files(Checkpoint::Raw(b"MRDNCKP2".to_vec()), Vec::new(), None),
    ];
    let mut seeds = Vec::new();
    for f in &all {
        meridian_fuzz::wal::run_files(f);
        seeds.push(meridian_fuzz::script(f)?);
    }
    Ok(seeds)
}

/// Configurations as operators write them and as the CM derives them.
fn configs() -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    const SAMPLE: &str = r#"config_id = 1
cm = 0
replication = 3
region_count = 12
[[nodes]]
id = 0
addr = "127.0.0.1:7000"
failure_domain = "a"
[[nodes]]
id = 1
addr = "127.0.0.1:7001"
failure_domain = "b"
[[nodes]]
id = 2
addr = "127.0.0.1:7002"
failure_domain = "c"
[limits]
max_key_bytes = 100
"#;
    let dir = Path::new("/var/lib/meridian");
    let mut out = vec![SAMPLE.to_string()];
    for (n, r, regions) in [(1, 1, 1), (3, 3, 12), (5, 3, 16), (2, 2, 4), (7, 3, 256)] {
        let c = Configuration::local(n, 7000, r, regions, dir);
        out.push(c.to_toml()?);
    }
    let mut disk = Configuration::local(3, 7000, 3, 12, dir);
    disk.durability.mode = meridian_config::DurabilityMode::Disk;
    disk.clock.drift_ppm = 50;
    out.push(disk.to_toml()?);
    let five = Configuration::local(5, 7000, 3, 12, dir);
    let alive = [0, 1, 2, 3].into_iter().map(NodeId).collect();
    let remapped = five.remap(&alive, NodeId(1))?;
    out.push(remapped.to_toml()?);
    out.push(remapped.renewed().to_toml()?);
    let joined = five.with_joined(meridian_config::NodeConfig {
        id: 5,
        addr: "127.0.0.1:7005".to_string(),
        failure_domain: "fd5".to_string(),
        data_dir: None,
    })?;
    out.push(joined.to_toml()?);
    if let Some((step, _)) = joined.rebalance_step() {
        out.push(step.to_toml()?);
    }
    out.push(format!("drift_ppm=100\n{SAMPLE}"));
    let mut seeds = Vec::new();
    for s in out {
        meridian_fuzz::config::run(s.as_bytes());
        seeds.push(s.into_bytes());
    }
    Ok(seeds)
}
