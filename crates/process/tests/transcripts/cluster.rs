//! A three-node cluster of [`NodeProcess`]es for the failure transcripts:
//! `reconfig.txt`, `recovery.txt` and `failover.txt`.
//!
//! The harness is the shell: it keeps one global time, gives each node a
//! local clock `global + offset` (the offsets are fixed, no drift), ticks
//! every live node every `step` (1 ms), and delivers every frame between
//! nodes at once (a reliable, instant network), except to and from
//! crashed or isolated nodes, whose frames are dropped. The
//! configuration service is a [`MemoryService`]: a `Cas` effect is
//! answered at once, with the stored time bound first (as the simulator
//! does), and so is a `RaiseTimeBound`.
//!
//! `run ms=N` prints what happened, one line per effect, prefixed with
//! the global time in ms. Lease and clock-sync frames, wakes and log
//! effects are left out unless `all` is given (they come every few ms);
//! `status` shows what they achieved (leases, clocks).
//!
//! Commands:
//! - `run ms=N [step_us=S] [all] [hide=W]`: advance N ms (`hide`: count
//!   the lines naming W instead of showing them).
//! - `crash n=N`: node N stops (no ticks; frames to it are dropped).
//! - `isolate n=N` / `heal`: cut every link of node N, which keeps
//!   running; `heal` restores them.
//! - `status`: per live node: configuration, CM, standing, lease, clock.
//! - `placement [n=N]`: node N's configuration's regions.
//! - `lock`, `commit-backup`, `commit-primary`, `abort`, `read-latest`:
//!   transaction requests from a client connection (as in
//!   `participant.txt`), with `config=C` (default 1).
//! - `recovery`: each node's recovery counters.

use super::{key_of, short_ids, transcript, tx, writes, Args};
use meridian_config::{Configuration, RegionMap};
use meridian_process::coordination::{CoordinationService, MemoryService};
use meridian_process::node::{NodeEffect, NodeProcess, Peer};
use meridian_wire::{
    ClockRequest, ConfigId, Frame, LockRecord, NodeId, ReconfigMessage, RecoveryMessage, RegionId,
    Request, Response, Timestamp, TxId, TxnRequest,
};
use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write;

const MS: u64 = 1_000_000;

pub(super) struct Cluster {
    nodes: Vec<NodeProcess>,
    /// Local clock of node i = global + offset[i].
    offset: Vec<u64>,
    down: BTreeSet<u32>,
    isolated: BTreeSet<u32>,
    net: VecDeque<(NodeId, NodeId, Frame)>,
    svc: MemoryService,
    map: RegionMap,
    /// Global time, ns.
    now: u64,
    /// Frames wait for the next step (`run`) instead of arriving at once.
    latency: bool,
}

/// Frames that come every few ms and are summarised by `status` instead.
fn noise(frame: &Frame) -> bool {
    match frame {
        Frame::Request { req, .. } | Frame::OneWay { req, .. } => {
            matches!(req, Request::Lease(_) | Request::Clock(_))
        }
        Frame::Response { resp, .. } => matches!(resp, Response::Clock(_)),
    }
}

fn ms(ns: u64) -> String {
    if ns % MS == 0 {
        format!("{}", ns / MS)
    } else {
        format!("{}.{:06}", ns / MS, ns % MS)
    }
}

fn region_list(c: &Configuration) -> String {
    c.regions()
        .iter()
        .map(|r| {
            let mut s = format!(
                "r{}: primary n{} backups {:?}",
                r.id.0,
                r.primary.0,
                r.backups.iter().map(|b| b.0).collect::<Vec<_>>()
            );
            if !r.filling.is_empty() {
                let f: Vec<u32> = r.filling.iter().map(|b| b.0).collect();
                let _ = write!(s, " filling {f:?}");
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `NodeId(3)` → `n3`, `Timestamp(5)` → `ts5`, transaction ids short
/// (`tx(c2:5)`: the test client's transaction 5 of configuration 2).
fn tidy(s: &str) -> String {
    let mut s = short_ids(s);
    for c in 2..10 {
        let pat = format!("TxId {{ config: ConfigId({c}), coordinator: 7, thread: 0, local: ");
        while let Some(i) = s.find(&pat) {
            let rest = &s[i + pat.len()..];
            let Some(end) = rest.find(" }") else { break };
            s = format!("{}tx(c{c}:{}){}", &s[..i], &rest[..end], &rest[end + 2..]);
        }
    }
    for (pat, rep) in [
        ("NodeId(", "n"),
        ("Timestamp(", "ts"),
        ("ConfigId(", "c"),
        ("RegionId(", "r"),
    ] {
        while let Some(i) = s.find(pat) {
            let rest = &s[i + pat.len()..];
            let Some(end) = rest.find(')') else { break };
            s = format!("{}{rep}{}{}", &s[..i], &rest[..end], &rest[end + 1..]);
        }
    }
    s
}

fn show_reconfig(m: &ReconfigMessage) -> String {
    match m {
        ReconfigMessage::NewConfig {
            config,
            from,
            config_toml,
        } => {
            let c = Configuration::from_toml(config_toml).expect("NEW-CONFIG's configuration");
            let members: Vec<u32> = c.members().iter().map(|n| n.0).collect();
            format!(
                "NewConfig {{ config: c{}, from: n{}, cm: n{}, members: {members:?}, {} }}",
                config.0,
                from.0,
                c.cm().0,
                region_list(&c)
            )
        }
        other => tidy(&format!("{other:?}")),
    }
}

fn show_recovery(m: &RecoveryMessage) -> String {
    match m {
        RecoveryMessage::Chunk {
            config,
            region,
            objects,
            done,
            ..
        } => format!(
            "Chunk {{ config: c{}, region: r{}, objects: {}, done: {done} }}",
            config.0,
            region.0,
            objects.len()
        ),
        other => tidy(&format!("{other:?}")),
    }
}

fn show_frame(frame: &Frame) -> String {
    match frame {
        Frame::OneWay {
            req: Request::Reconfig(m),
            ..
        } => show_reconfig(m),
        Frame::OneWay {
            req: Request::Recovery(m),
            ..
        } => show_recovery(m),
        Frame::Request {
            id, config, req, ..
        } => tidy(&format!("req #{id} (c{}) {req:?}", config.0)),
        Frame::OneWay { config, req, .. } => tidy(&format!("oneway (c{}) {req:?}", config.0)),
        Frame::Response { id, resp } => tidy(&format!("resp #{id} {resp:?}")),
    }
}

impl Cluster {
    pub(super) fn new(config: Configuration, offset: Vec<u64>) -> Self {
        let nodes = (0..3)
            .map(|i| NodeProcess::new(config.clone(), NodeId(i), 1).expect("member"))
            .collect();
        Cluster {
            nodes,
            offset,
            down: BTreeSet::new(),
            isolated: BTreeSet::new(),
            net: VecDeque::new(),
            svc: MemoryService::new(config.clone()),
            map: RegionMap::new(&config),
            now: 0,
            latency: false,
        }
    }

    fn local(&self, n: usize) -> u64 {
        self.now + self.offset[n]
    }

    fn linked(&self, a: u32, b: u32) -> bool {
        !self.isolated.contains(&a) && !self.isolated.contains(&b)
    }

    /// Drain node `n`'s effects: print them (`all`: the noisy ones too)
    /// and carry them out.
    fn effects(&mut self, n: usize, all: bool, out: &mut String) {
        let at = ms(self.now);
        let me = self.nodes[n].id();
        let mut answers: Vec<Box<dyn FnOnce(&mut NodeProcess, u64)>> = Vec::new();
        for e in self.nodes[n].drain_effects() {
            match e {
                NodeEffect::Send { to, frame } => {
                    // Answers to the test's own client connection always show.
                    if all || !noise(&frame) || matches!(to, Peer::Conn(_)) {
                        let to_s = match to {
                            Peer::Node(m) => format!("{m}"),
                            Peer::Conn(c) => format!("conn{c}"),
                        };
                        let _ = writeln!(out, "@{at} {me} -> {to_s}: {}", show_frame(&frame));
                    }
                    if let Peer::Node(m) = to {
                        self.net.push_back((me, m, frame));
                    }
                }
                NodeEffect::Wake { at_local_ns } => {
                    if all {
                        let _ = writeln!(out, "@{at} {me} wake @{}", ms(at_local_ns));
                    }
                }
                NodeEffect::Cas { expected, proposed } => {
                    let id = proposed.id();
                    let result = self.svc.compare_and_swap(expected, *proposed);
                    let _ = writeln!(
                        out,
                        "@{at} {me} cas c{} -> c{}: {}",
                        expected.0,
                        id.0,
                        if result.is_ok() { "stored" } else { "lost" }
                    );
                    let (bound, cm) = (self.svc.time_bound_ns(), self.svc.current().cm());
                    answers.push(Box::new(move |p, local| {
                        p.on_time_bound(local, bound, cm);
                        p.on_cas_result(local, result);
                    }));
                }
                NodeEffect::RaiseTimeBound { to_ns } => {
                    let bound = self.svc.raise_time_bound(to_ns);
                    let cm = self.svc.current().cm();
                    if all {
                        let _ = writeln!(out, "@{at} {me} raise time bound to {to_ns}");
                    }
                    answers.push(Box::new(move |p, local| p.on_time_bound(local, bound, cm)));
                }
                NodeEffect::Event(ev) => {
                    let _ = writeln!(out, "@{at} {me} event {}", tidy(&format!("{ev:?}")));
                }
                NodeEffect::PersistCoordination(_)
                | NodeEffect::AppendLog { .. }
                | NodeEffect::HoldReads { .. }
                | NodeEffect::Checkpoint { .. } => {}
                NodeEffect::Discard(d) => {
                    let _ = writeln!(out, "@{at} {me} discard {} replicas", d.replicas());
                }
            }
        }
        let local = self.local(n);
        for a in answers {
            a(&mut self.nodes[n], local);
            self.effects(n, all, out);
        }
    }

    /// Deliver every frame in flight, and those they cause.
    fn deliver(&mut self, all: bool, out: &mut String) {
        while let Some((from, to, frame)) = self.net.pop_front() {
            if self.down.contains(&to.0) || !self.linked(from.0, to.0) {
                if all || !noise(&frame) {
                    let _ = writeln!(
                        out,
                        "@{} drop {from} -> {to}: {}",
                        ms(self.now),
                        show_frame(&frame)
                    );
                }
                continue;
            }
            let m = to.0 as usize;
            let local = self.local(m);
            self.nodes[m].on_message(local, Peer::Node(from), frame);
            self.nodes[m].check_invariants();
            self.effects(m, all, out);
        }
    }

    /// Deliver the frames sent before this step; what they cause waits
    /// for the next one.
    fn deliver_one_round(&mut self, all: bool, out: &mut String) {
        for (from, to, frame) in std::mem::take(&mut self.net) {
            if self.down.contains(&to.0) || !self.linked(from.0, to.0) {
                if all || !noise(&frame) {
                    let at = ms(self.now);
                    let _ = writeln!(out, "@{at} drop {from} -> {to}: {}", show_frame(&frame));
                }
                continue;
            }
            let m = to.0 as usize;
            let local = self.local(m);
            self.nodes[m].on_message(local, Peer::Node(from), frame);
            self.nodes[m].check_invariants();
            self.effects(m, all, out);
        }
    }

    fn run(&mut self, span_ns: u64, step_ns: u64, all: bool) -> String {
        let mut out = String::new();
        let end = self.now + span_ns;
        while self.now < end {
            self.now = (self.now + step_ns).min(end);
            if self.latency {
                self.deliver_one_round(all, &mut out);
            }
            for n in 0..self.nodes.len() {
                if self.down.contains(&(n as u32)) {
                    continue;
                }
                let local = self.local(n);
                self.nodes[n].tick(local);
                self.nodes[n].check_invariants();
                self.effects(n, all, &mut out);
                if !self.latency {
                    self.deliver(all, &mut out);
                }
            }
        }
        collapse(&out)
    }

    fn status(&mut self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "@{} stored c{}", ms(self.now), self.svc.current().id().0);
        for n in 0..self.nodes.len() {
            if self.down.contains(&(n as u32)) {
                let _ = writeln!(s, "n{n} down");
                continue;
            }
            let local = self.local(n);
            let p = &mut self.nodes[n];
            let c = p.config();
            let (id, cm) = (c.id().0, c.cm().0);
            let member = p.is_member();
            let serve = p.may_serve(local);
            let master = p.is_clock_master();
            let recovering = p.recovering();
            let clock = match p.clock_time(local) {
                Some(iv) => format!("[{}, {}]", iv.lower, iv.upper),
                None => "none".into(),
            };
            let _ = writeln!(
                s,
                "n{n} c{id} cm=n{cm} member={member} serves={serve} clock_master={master} \
                 clock={clock} busy={recovering}"
            );
        }
        s
    }

    fn request(&mut self, cmd: &str, a: &Args) -> String {
        let n = a.opt("n").map_or(0, |v| v.parse().expect("n")) as usize;
        let id = a.opt("id").map_or(1, |v| v.parse().expect("id"));
        let map = &self.map;
        // `txc=C`: the configuration the transaction started in (its id's
        // first field), 1 unless given.
        let tx = |a: &Args| TxId {
            config: ConfigId(a.opt("txc").map_or(1, |v| v.parse().expect("txc"))),
            ..tx(a.num("tx"))
        };
        let req = match cmd {
            // A client's clock sync: the master answers with its time, or
            // refuses while it hands out none.
            "clock-sync" => Request::Clock(ClockRequest::Sync),
            "lock" | "commit-backup" => {
                let w = writes(map, a.get("k"));
                // `regions=0,1`: every region the transaction wrote (a
                // record holds one region's writes); default: these.
                let mut regions: Vec<_> = match a.opt("regions") {
                    Some(r) => r
                        .split(',')
                        .map(|r| RegionId(r.parse().expect("region")))
                        .collect(),
                    None => w.iter().map(|w| w.region).collect(),
                };
                regions.dedup();
                let record = LockRecord {
                    tx: tx(a),
                    read_ts: Timestamp(a.num("read_ts")),
                    regions,
                    writes: w,
                };
                Request::Txn(if cmd == "lock" {
                    TxnRequest::Lock(record)
                } else {
                    TxnRequest::CommitBackup {
                        record,
                        write_ts: Timestamp(a.num("write_ts")),
                    }
                })
            }
            "commit-primary" => Request::Txn(TxnRequest::CommitPrimary {
                tx: tx(a),
                write_ts: Timestamp(a.num("write_ts")),
            }),
            "abort" => Request::Txn(TxnRequest::Abort { tx: tx(a) }),
            "read-latest" => {
                let key = key_of(a.get("k"));
                Request::Txn(TxnRequest::ReadLatest {
                    region: map.region_of(&key).id,
                    key,
                })
            }
            other => panic!("unknown command {other}"),
        };
        let config = ConfigId(a.opt("config").map_or(1, |v| v.parse().expect("config")));
        let frame = Frame::Request {
            id,
            config,
            truncate: Default::default(),
            req,
        };
        let local = self.local(n);
        self.nodes[n].on_message(local, Peer::Conn(1), frame);
        self.nodes[n].check_invariants();
        let mut out = String::new();
        self.effects(n, false, &mut out);
        self.deliver(false, &mut out);
        out
    }

    pub(super) fn command(&mut self, cmd: &str, a: &Args) -> String {
        let all = a.opt("all").is_some();
        let s = match cmd {
            "run" => {
                let step = a
                    .opt("step_us")
                    .map_or(1000, |v| v.parse().expect("step_us"))
                    * 1000;
                let out = self.run(a.num("ms") * MS, step, all);
                // `hide=W`: lines naming W are counted instead of shown.
                match a.opt("hide") {
                    None => out,
                    Some(w) => {
                        let hidden = out.lines().filter(|l| l.contains(w)).count();
                        let mut kept: String = out
                            .lines()
                            .filter(|l| !l.contains(w))
                            .map(|l| format!("{l}\n"))
                            .collect();
                        let _ = writeln!(kept, "({hidden} lines with {w} hidden)");
                        kept
                    }
                }
            }
            "crash" => {
                self.down.insert(a.num("n") as u32);
                String::new()
            }
            "isolate" => {
                self.isolated.insert(a.num("n") as u32);
                String::new()
            }
            "heal" => {
                self.isolated.clear();
                String::new()
            }
            "status" => self.status(),
            "placement" => {
                let n = a.opt("n").map_or(0, |v| v.parse().expect("n")) as usize;
                let c = self.nodes[n].config();
                let members: Vec<u32> = c.members().iter().map(|m| m.0).collect();
                format!(
                    "n{n}: c{} cm=n{} members={members:?}\n{}\n",
                    c.id().0,
                    c.cm().0,
                    region_list(c).replace("; ", "\n")
                )
            }
            "recovery" => {
                let mut s = String::new();
                for (n, p) in self.nodes.iter().enumerate() {
                    if !self.down.contains(&(n as u32)) {
                        let _ = writeln!(s, "n{n} {:?}", p.recovery_stats());
                    }
                }
                s
            }
            _ => self.request(cmd, a),
        };
        if s.is_empty() {
            "(no effects)\n".into()
        } else {
            s
        }
    }
}

/// Identical consecutive lines as one, with `(xN)`.
fn collapse(s: &str) -> String {
    let mut out = String::new();
    let mut lines = s.lines().peekable();
    while let Some(l) = lines.next() {
        let mut k = 1;
        while lines.peek() == Some(&l) {
            lines.next();
            k += 1;
        }
        out.push_str(l);
        if k > 1 {
            let _ = write!(out, " (x{k})");
        }
        out.push('\n');
    }
    out
}

/// Run `file` against a fresh cluster: `tune` adjusts the configuration;
/// `offset` gives each node's local clock offset from global time.
pub(super) fn cluster_transcript(
    file: &str,
    offset: Vec<u64>,
    latency: bool,
    tune: impl FnOnce(&mut Configuration),
) {
    let mut config = super::config();
    tune(&mut config);
    let mut c = Cluster::new(config, offset);
    c.latency = latency;
    transcript(file, |cmd, a| c.command(cmd, a));
}
