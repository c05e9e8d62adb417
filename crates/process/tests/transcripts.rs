//! Transcript tests in etcd's data-driven style: each file under
//! `tests/transcripts/` is a list of commands, each followed by `----`, the
//! effects the engine emitted, printed, and a blank line. The test replays the commands
//! and compares the printout with the checked-in expectation. Run with
//! `UPDATE_TRANSCRIPTS=1` to rewrite the expectations after an intended
//! change, then review the diff like code.
//!
//! - `participant.txt`: a [`NodeProcess`] per node (the participant: Lock,
//!   Validate, CommitBackup, CommitPrimary, Abort, Truncate, reads, typed
//!   rejections of bad input).
//! - `cm.txt`: the CM role of a [`NodeProcess`] (client registration,
//!   clock master, node clock sync, client leases and the configuration
//!   renewal that recovers a dead client's transactions).
//! - `thin.txt`: a thin client's `Execute` on a node's embedded
//!   coordinator (a `ClientProcess` inside the `NodeProcess`), with the
//!   frames between nodes delivered by the `deliver` command.
//! - `coordinator.txt`: a [`ClientProcess`] (begin, reads, commit phases,
//!   timeouts, abort sending, truncation).
//! - `clock.txt`: [`ClockSync`] (samples, intervals, GET_TS).
//! - `leases.txt`: the lease engines on their own ([`LeaseClient`] at a
//!   holder, [`LeaseManager`] at the CM; FaRM §5.1), in `leases.rs`.
//! - `reconfig.txt`, `recovery.txt`, `failover.txt`: three
//!   [`NodeProcess`]es with crashes and partitions (FaRM §5.2 and §5.3,
//!   FaRMv2 §4.3), in `cluster.rs`.
//!
//! [`LeaseClient`]: meridian_process::lease::LeaseClient
//! [`LeaseManager`]: meridian_process::lease::LeaseManager

#[path = "transcripts/cluster.rs"]
mod cluster;
#[path = "transcripts/leases.rs"]
mod leases;

use meridian_config::{Configuration, RegionMap};
use meridian_process::client::{ClientProcess, TxnHandle};
use meridian_process::node::{NodeEffect, NodeProcess, Peer};
use meridian_process::Effect;
use meridian_time::{ClockSync, SyncSample};
use meridian_txn::TxnOptions;
use meridian_wire::{
    AdminRequest, ClientOp, ClockRequest, ClockResponse, CmRequest, CmResponse, ConfigId, Conflict,
    Frame, KeyRange, LeaseHolder, LeaseMessage, LockRecord, NodeId, Request, Response, ThinRequest,
    Timestamp, Truncation, TxId, TxnRequest, TxnResponse, Versioned, WriteOp,
};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;

/// Parsed `key=value` arguments of a command.
struct Args(BTreeMap<String, String>);

impl Args {
    fn get(&self, k: &str) -> &str {
        self.0
            .get(k)
            .unwrap_or_else(|| panic!("missing argument {k}"))
    }
    fn num(&self, k: &str) -> u64 {
        self.get(k)
            .parse()
            .unwrap_or_else(|_| panic!("{k} is not a number"))
    }
    fn opt(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
}

/// Run every block of `file` through `run` and compare (or rewrite).
fn transcript(file: &str, mut run: impl FnMut(&str, &Args) -> String) {
    let path = format!("{}/tests/transcripts/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or_default();
        let args = Args(
            words
                .map(|w| match w.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (w.to_string(), String::new()),
                })
                .collect(),
        );
        // Skip the old expectation: `----`, the output, a blank line.
        if lines.peek() == Some(&"----") {
            lines.next();
            while lines.next().is_some_and(|l| !l.trim().is_empty()) {}
        }
        let result = run(cmd, &args);
        out.push_str(line);
        out.push_str("\n----\n");
        out.push_str(&result);
        if !result.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    if std::env::var_os("UPDATE_TRANSCRIPTS").is_some() {
        std::fs::write(&path, &out).unwrap_or_else(|e| panic!("{path}: {e}"));
        return;
    }
    if out != text {
        let diff: Vec<String> = text
            .lines()
            .zip(out.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  expected: {a}\n  actual:   {b}", i + 1))
            .collect();
        panic!(
            "{file} differs from the engine's output (UPDATE_TRANSCRIPTS=1 rewrites it):\n{}",
            diff.join("\n")
        );
    }
}

fn config() -> Configuration {
    let mut c = Configuration::local(3, 7000, 2, 2, std::path::Path::new("/nonexistent"));
    c.limits.max_value_bytes = 16;
    c.limits.rpc_timeout_ms = 1;
    c.limits.max_concurrent_executes = 2;
    // The transcripts' timelines are written for a 100 ms lease (pinned,
    // so a change of the default does not move them).
    c.lease.lease_ms = 100;
    // Likewise the time-bound window and the Raft election (their
    // defaults are sized for a real cluster's VM stalls).
    c.clock.time_bound_window_ms = 500;
    c.coordination.election_ticks = 10;
    // The configuration CAS shows as a `cas` effect (an outside service);
    // the embedded Raft group has its own tests in `raft_service`.
    c.coordination.replicas = 0;
    // The transcripts show the protocol; disk durability's log effects are
    // tested in the participant and the simulator.
    c.durability.mode = meridian_config::DurabilityMode::Memory;
    c
}

fn tx(local: u64) -> TxId {
    TxId {
        config: ConfigId(1),
        coordinator: 7,
        thread: 0,
        local,
    }
}

/// `k=a:v1,b:v2` → writes; a value `-` is a delete.
fn writes(map: &RegionMap, spec: &str) -> Vec<WriteOp> {
    spec.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap_or((kv, ""));
            let key = key_of(k);
            WriteOp {
                region: map.region_of(&key).id,
                key,
                value: (v != "-").then(|| v.as_bytes().to_vec()),
            }
        })
        .collect()
}

/// Keys are named by a letter and a region: `a0` is in region 0 (first
/// byte 0x00), `a1` in region 1 (first byte 0x80).
fn key_of(name: &str) -> Vec<u8> {
    let (letter, region) = name.split_at(1);
    let first = if region == "1" { 0x80 } else { 0x00 };
    vec![first, letter.as_bytes()[0]]
}

/// Print transaction ids as `tx(local)` for coordinator 7 (the test
/// client) and `tx(coordinator:thread:local)` otherwise (the nodes'
/// embedded coordinators).
fn short_ids(s: &str) -> String {
    const PREFIX: &str = "TxId { config: ConfigId(1), coordinator: ";
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(PREFIX) {
        out.push_str(&rest[..i]);
        let after = &rest[i + PREFIX.len()..];
        let Some(end) = after.find(" }") else {
            out.push_str(PREFIX);
            rest = after;
            continue;
        };
        let fields: Vec<&str> = after[..end]
            .split(", ")
            .map(|f| f.rsplit(' ').next().unwrap_or(f))
            .collect();
        match fields.as_slice() {
            ["7", "0", local] => out.push_str(&format!("tx({local})")),
            [c, t, local] => out.push_str(&format!("tx({c}:{t}:{local})")),
            _ => out.push_str(&after[..end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

fn show_truncation(t: &Truncation) -> String {
    let mut s = format!(" truncate={:?}", t.txs);
    if let Some(low) = t.low {
        s.push_str(&format!(" low={}", low.local));
    }
    s
}

fn show(frame: &Frame) -> String {
    let s = match frame {
        Frame::Request {
            id, truncate, req, ..
        } => {
            format!("req #{id} {req:?}{}", show_truncation(truncate))
        }
        Frame::OneWay { truncate, req, .. } => {
            format!("oneway {req:?}{}", show_truncation(truncate))
        }
        Frame::Response { id, resp } => format!("resp #{id} {resp:?}"),
    };
    short_ids(&s)
}

/// Frames between nodes not yet delivered: (from, to, frame).
type Net = VecDeque<(NodeId, NodeId, Frame)>;

/// Print `n`'s effects; frames to other nodes also go into `net`, for the
/// `deliver` command.
fn node_effects(n: &mut NodeProcess, net: &mut Net) -> String {
    let mut s = String::new();
    let mut raised = Vec::new();
    for e in n.drain_effects() {
        match e {
            NodeEffect::Send { to, frame } => {
                let _ = writeln!(s, "{} -> {to:?}: {}", n.id(), show(&frame));
                if let Peer::Node(m) = to {
                    net.push_back((n.id(), m, frame));
                }
            }
            NodeEffect::Wake { at_local_ns } => {
                let _ = writeln!(s, "{} wake @{at_local_ns}", n.id());
            }
            NodeEffect::Cas { expected, proposed } => {
                let _ = writeln!(s, "{} cas {expected:?} -> {:?}", n.id(), proposed.id());
            }
            NodeEffect::RaiseTimeBound { to_ns } => {
                // The outside service stores it at once.
                let _ = writeln!(s, "{} raise time bound to {to_ns}", n.id());
                raised.push(to_ns);
            }
            NodeEffect::Event(ev) => {
                let _ = writeln!(s, "{} event {ev:?}", n.id());
            }
            NodeEffect::PersistCoordination(state) => {
                let _ = writeln!(s, "{} persist coordination ({} bytes)", n.id(), state.len());
            }
            NodeEffect::AppendLog { first_seq, records } => {
                let _ = writeln!(
                    s,
                    "{} log #{first_seq}..#{}",
                    n.id(),
                    first_seq + records.len() as u64 - 1
                );
            }
            NodeEffect::Checkpoint { through_seq, .. } => {
                let _ = writeln!(s, "{} checkpoint through #{through_seq}", n.id());
            }
            NodeEffect::HoldReads { through_seq } => {
                let _ = writeln!(s, "{} reads wait for #{through_seq}", n.id());
            }
            NodeEffect::Discard(d) => {
                let _ = writeln!(
                    s,
                    "{} discard {} replicas ({} objects)",
                    n.id(),
                    d.replicas(),
                    d.objects()
                );
            }
        }
    }
    for to_ns in raised {
        let me = n.id();
        n.on_time_bound(0, to_ns, me);
        let more = node_effects(n, net);
        if more != "(no effects)\n" {
            s.push_str(&more);
        }
    }
    if s.is_empty() {
        s.push_str("(no effects)\n");
    }
    s
}

/// Form the leases (FaRM §5.1) before the transcript starts: two renewal
/// rounds, the first of which only gives the CM its majority. Returns the
/// local time at which every node serves; the effects are not part of the
/// transcript.
fn settle_leases(nodes: &mut [NodeProcess], net: &mut Net) -> u64 {
    let renew_ns = config().lease.lease_ms * 1_000_000 / 5;
    for t in [0, renew_ns] {
        for n in nodes.iter_mut() {
            n.tick(t);
            node_effects(n, net);
        }
        while let Some((from, to, frame)) = net.pop_front() {
            let m = &mut nodes[to.0 as usize];
            m.on_message(t, Peer::Node(from), frame);
            node_effects(m, net);
        }
    }
    assert!(nodes.iter().all(|n| n.may_serve(renew_ns)), "leases formed");
    renew_ns
}

/// `read_lock_wait_us`: the nodes' `limits.read_lock_wait_us` (0 aborts a
/// read that meets a lock at once, as FaRMv2 §4.7 does; the default waits).
fn node_transcript(file: &str, read_lock_wait_us: u64) {
    node_transcript_with(file, |c| c.limits.read_lock_wait_us = read_lock_wait_us)
}

fn node_transcript_with(file: &str, tune: impl FnOnce(&mut Configuration)) {
    let mut config = config();
    tune(&mut config);
    let map = RegionMap::new(&config);
    let mut nodes: Vec<NodeProcess> = (0..3)
        .map(|i| NodeProcess::new(config.clone(), NodeId(i), 1).expect("member"))
        .collect();
    let mut net = Net::new();
    let base = settle_leases(&mut nodes, &mut net);
    transcript(file, |cmd, a| {
        let n = a.opt("n").map_or(0, |v| v.parse().expect("n")) as usize;
        let id = a.opt("id").map_or(1, |v| v.parse().expect("id"));
        // Command times are relative to the end of lease formation.
        let now = base + a.opt("now").map_or(0, |v| v.parse::<u64>().expect("now"));
        let from = match a.opt("from") {
            Some(f) if f.starts_with('n') => Peer::Node(NodeId(f[1..].parse().expect("node"))),
            _ => Peer::Conn(1),
        };
        let req = match cmd {
            "ping" => Request::Admin(AdminRequest::Ping),
            "register" => Request::Cm(CmRequest::RegisterClient),
            "clock-sync" => Request::Clock(ClockRequest::Sync),
            "read" => {
                let key = key_of(a.get("k"));
                Request::Txn(TxnRequest::Read {
                    region: map.region_of(&key).id,
                    key,
                    read_ts: Timestamp(a.num("read_ts")),
                })
            }
            "read-latest" => {
                let key = key_of(a.get("k"));
                Request::Txn(TxnRequest::ReadLatest {
                    region: map.region_of(&key).id,
                    key,
                })
            }
            "scan" => {
                let start = key_of(a.get("from_key"));
                Request::Txn(TxnRequest::Scan {
                    region: map.region_of(&start).id,
                    range: KeyRange {
                        start,
                        end: a.opt("to_key").map(key_of),
                    },
                    limit: a.num("limit") as u32,
                    read_ts: Timestamp(a.num("read_ts")),
                })
            }
            "lock" | "commit-backup" => {
                let w = writes(&map, a.get("k"));
                let mut regions: Vec<_> = w.iter().map(|w| w.region).collect();
                regions.dedup();
                let record = LockRecord {
                    tx: tx(a.num("tx")),
                    read_ts: Timestamp(a.num("read_ts")),
                    regions,
                    writes: w,
                };
                if cmd == "lock" {
                    // `blind=1,0`: per write, written without being read
                    // (TxnRequest::LockBlind); absent: a plain LOCK.
                    match a.opt("blind") {
                        Some(flags) => Request::Txn(TxnRequest::LockBlind {
                            record,
                            blind: flags.split(',').map(|f| f == "1").collect(),
                        }),
                        None => Request::Txn(TxnRequest::Lock(record)),
                    }
                } else {
                    Request::Txn(TxnRequest::CommitBackup {
                        record,
                        write_ts: Timestamp(a.num("write_ts")),
                    })
                }
            }
            "validate" => Request::Txn(TxnRequest::Validate {
                tx: tx(a.num("tx")),
                read_ts: Timestamp(a.num("read_ts")),
                keys: a
                    .get("k")
                    .split(',')
                    .map(|k| {
                        let key = key_of(k);
                        (map.region_of(&key).id, key)
                    })
                    .collect(),
                ranges: Vec::new(),
            }),
            "commit-primary" => Request::Txn(TxnRequest::CommitPrimary {
                tx: tx(a.num("tx")),
                write_ts: Timestamp(a.num("write_ts")),
            }),
            "abort" => Request::Txn(TxnRequest::Abort {
                tx: tx(a.num("tx")),
            }),
            "truncate" => Request::Txn(TxnRequest::Truncate {
                txs: vec![tx(a.num("tx"))],
            }),
            // A client's lease request (or release) on connection 1.
            "client-lease" | "client-release" => {
                let holder = LeaseHolder::Client(a.num("holder"));
                let m = if cmd == "client-lease" {
                    LeaseMessage::Request {
                        config: ConfigId(1),
                        holder,
                        seq: a.num("seq"),
                    }
                } else {
                    LeaseMessage::Release { holder }
                };
                let frame = Frame::OneWay {
                    config: ConfigId(1),
                    truncate: Default::default(),
                    req: Request::Lease(m),
                };
                nodes[n].on_message(now, from, frame);
                nodes[n].check_invariants();
                return node_effects(&mut nodes[n], &mut net);
            }
            "tick" => {
                nodes[n].tick(now);
                return node_effects(&mut nodes[n], &mut net);
            }
            // Deliver every frame between nodes, and those they cause, in
            // order (a reliable, instant network).
            "deliver" => {
                let mut s = String::new();
                while let Some((from, to, frame)) = net.pop_front() {
                    let _ = writeln!(s, "deliver {from} -> {to}");
                    let m = &mut nodes[to.0 as usize];
                    m.on_message(now, Peer::Node(from), frame);
                    m.check_invariants();
                    s.push_str(&node_effects(m, &mut net));
                }
                return s;
            }
            // A thin client's transaction: ops=get:a,put:b=1,del:c,scan:a-z
            "execute" => Request::Thin(ThinRequest::Execute {
                ops: a
                    .get("ops")
                    .split(',')
                    .map(|op| match op.split_once(':') {
                        Some(("get", k)) => ClientOp::Get(key_of(k)),
                        Some(("del", k)) => ClientOp::Delete(key_of(k)),
                        Some(("put", kv)) => {
                            let (k, v) = kv.split_once('=').expect("put:k=v");
                            ClientOp::Put(key_of(k), v.as_bytes().to_vec())
                        }
                        Some(("scan", r)) => {
                            let (lo, hi) = r.split_once('-').expect("scan:lo-hi");
                            ClientOp::Scan {
                                start: key_of(lo),
                                end: Some(key_of(hi)),
                                limit: 10,
                            }
                        }
                        _ => panic!("bad op {op}"),
                    })
                    .collect(),
            }),
            "master-time" => {
                let frame = Frame::Response {
                    id,
                    resp: Response::Clock(ClockResponse::MasterTime {
                        master_ns: a.num("master"),
                    }),
                };
                nodes[n].on_message(now, Peer::Node(NodeId(0)), frame);
                let mut s = node_effects(&mut nodes[n], &mut net);
                let _ = writeln!(s, "clock: {:?}", nodes[n].clock_time(now));
                return s;
            }
            "log" => {
                let p = nodes[n].participant();
                return format!("{}: {} log records\n", nodes[n].id(), p.log_len());
            }
            other => panic!("unknown command {other}"),
        };
        // `held=W`: sent to be held until write_ts W passed
        // (`TxnRequest::AfterWriteTs`, `clock.writes_wait_at_server`).
        let req = match (a.opt("held"), req) {
            (Some(w), Request::Txn(r)) => Request::Txn(TxnRequest::AfterWriteTs {
                write_ts: Timestamp(w.parse().expect("held=write_ts")),
                req: Box::new(r),
            }),
            (_, req) => req,
        };
        // `config=C`: the frame's configuration (default 1, the current one).
        let config = ConfigId(a.opt("config").map_or(1, |v| v.parse().expect("config")));
        let frame = if cmd == "truncate" && a.opt("oneway").is_some() {
            Frame::OneWay {
                config,
                truncate: Default::default(),
                req,
            }
        } else {
            Frame::Request {
                id,
                config,
                truncate: Default::default(),
                req,
            }
        };
        nodes[n].on_message(now, from, frame);
        nodes[n].check_invariants();
        node_effects(&mut nodes[n], &mut net)
    });
}

#[test]
fn participant_transcript() {
    // Reads that meet a lock wait for it here (the opt-in rule).
    node_transcript("participant.txt", 5_000);
}

#[test]
fn cm_transcript() {
    node_transcript("cm.txt", 0);
}

#[test]
fn thin_client_transcript() {
    // The embedded coordinator waits out `write_ts` itself here, so the
    // transcript follows a commit step by step without ticking the
    // backups' clocks; the nodes' holds have their own lines in
    // participant.txt, and the simulator's thin clients run the default.
    node_transcript_with("thin.txt", |c| {
        c.limits.read_lock_wait_us = 0;
        c.clock.writes_wait_at_server = false;
    });
}

fn client_effects(p: &mut ClientProcess) -> String {
    let mut s = String::new();
    for e in p.drain_effects() {
        match e {
            Effect::Send { to, frame } => {
                let _ = writeln!(s, "-> {to}: {}", show(&frame));
            }
            Effect::Wake { at_local_ns } => {
                let _ = writeln!(s, "wake @{at_local_ns}");
            }
            Effect::Reply { call, result } => {
                let r = short_ids(&format!("{result:?}"));
                let _ = writeln!(s, "reply call {call}: {r}");
            }
        }
    }
    p.check_invariants();
    if s.is_empty() {
        s.push_str("(no effects)\n");
    }
    s
}

#[test]
fn coordinator_transcript() {
    // FaRMv2 Algorithm 1 as written: the coordinator waits out read_ts's
    // uncertainty (the default moves that wait to the nodes).
    let mut config = config();
    config.clock.reads_wait_at_server = false;
    let mut p = ClientProcess::new(&config, 7, 1);
    transcript("coordinator.txt", |cmd, a| {
        let now = a.opt("now").map_or(0, |v| v.parse().expect("now"));
        let call = a.opt("call").map_or(0, |v| v.parse().expect("call"));
        let txn = TxnHandle(a.opt("txn").map_or(1, |v| v.parse().expect("txn")));
        match cmd {
            "tick" => p.tick(now),
            "begin" => p.begin(now, call, 0, TxnOptions::default()),
            "get" => p.get(now, call, txn, &key_of(a.get("k"))),
            "put" => {
                let r = p.put(txn, key_of(a.get("k")), a.get("v").as_bytes().to_vec());
                return format!("{r:?}\n");
            }
            "delete" => {
                let r = p.delete(txn, key_of(a.get("k")));
                return format!("{r:?}\n");
            }
            "commit" => p.commit(now, call, txn),
            "close" => p.close(now, call),
            "recv" => {
                let from = NodeId(a.num("from") as u32);
                let id = a.num("id");
                let conflict = |s: &str| match s {
                    "locked" => Conflict::Locked,
                    "changed" => Conflict::Changed,
                    "too-old" => Conflict::TooOld,
                    other => panic!("unknown conflict {other}"),
                };
                let resp = match a.get("resp") {
                    "master-time" => Response::Clock(ClockResponse::MasterTime {
                        master_ns: a.num("master"),
                    }),
                    "registered" => Response::Cm(CmResponse::Registered {
                        coordinator: a.num("coordinator"),
                        config_toml: String::new(),
                    }),
                    "read" => Response::Txn(TxnResponse::Read(Ok(a.opt("v").map(|v| Versioned {
                        version: Timestamp(a.num("version")),
                        value: v.as_bytes().to_vec(),
                    })))),
                    "lock-ok" => Response::Txn(TxnResponse::Lock(Ok(()))),
                    "lock-conflict" => {
                        Response::Txn(TxnResponse::Lock(Err(conflict(a.get("conflict")))))
                    }
                    "validate-ok" => Response::Txn(TxnResponse::Validate(Ok(()))),
                    "ack" => Response::Txn(TxnResponse::Ack),
                    other => panic!("unknown response {other}"),
                };
                let frame = Frame::Response { id, resp };
                match a.opt("received") {
                    // Stamped by the shell on arrival, before the process
                    // took it (`on_message_received`).
                    Some(r) => {
                        p.on_message_received(now, r.parse().expect("received"), from, frame)
                    }
                    None => p.on_message(now, from, frame),
                }
            }
            "disconnect" => p.on_disconnect(now, NodeId(a.num("from") as u32)),
            other => panic!("unknown command {other}"),
        }
        client_effects(&mut p)
    });
}

#[test]
fn clock_transcript() {
    let mut master = ClockSync::master();
    let mut c = ClockSync::new(1000);
    transcript("clock.txt", |cmd, a| {
        let clock = if a.opt("master").is_some() {
            &mut master
        } else {
            &mut c
        };
        match cmd {
            "sync" => {
                let s = SyncSample {
                    send_local_ns: a.num("send"),
                    master_ns: a.num("master_ns"),
                    recv_local_ns: a.num("recv"),
                };
                format!("{:?}\n", clock.on_sync(s))
            }
            "time" => format!("{:?}\n", clock.time(a.num("now"))),
            "get-ts" => format!("{:?}\n", clock.get_ts(a.num("now"))),
            other => panic!("unknown command {other}"),
        }
    });
}

#[test]
fn reconfig_transcript() {
    cluster::cluster_transcript("reconfig.txt", vec![0, 0, 0], false, |_| {});
}

#[test]
fn recovery_transcript() {
    // Frames take one step (100 us in the recovery block) here, so each
    // round of the protocol shows at its own time.
    cluster::cluster_transcript("recovery.txt", vec![0, 0, 0], true, |_| {});
}

#[test]
fn clock_failover_transcript() {
    // Local clocks: n0 (the first clock master) runs 10 ms ahead of global
    // time, n1 on it, n2 3 ms ahead; a new master that started from its
    // own clock would go back in time.
    cluster::cluster_transcript(
        "failover.txt",
        vec![10_000_000, 0, 3_000_000],
        false,
        |_| {},
    );
}
