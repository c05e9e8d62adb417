//! # Node runtime: a thin tokio shell around `NodeProcess`
//!
//! Every decision a node makes lives in
//! [`meridian_process::node::NodeProcess`] (participant, clock master or
//! clock sync, CM coordinator ids, GC). This shell only moves bytes and
//! time:
//!
//! - a listener accepts connections; each connection's reader decodes a
//!   whole batch of frames, feeds them to the process under one lock, and
//!   writes the replies for that connection with one write;
//! - reconnecting links to the other nodes carry the requests of the
//!   node's embedded coordinator (thin clients' `Execute`, which the process
//!   runs itself) and feed the responses back; a dedicated link to the
//!   clock master carries clock synchronisations, so batches of transaction
//!   traffic do not delay them;
//! - a timer calls `tick` when the process asks to be woken;
//! - a lease thread of its own (`meridian_transport::lease_udp`) answers
//!   lease messages and sends renewals over UDP on the node's address,
//!   touching only the process's `LeaseDesk`, never the process lock
//!   (FaRM §5.1: load must not starve leases).
//!
//! The incarnation (unique across restarts) is a counter
//! in the node's data directory, incremented and fsynced before the node
//! serves anything.
//!
//! The runtime is single-threaded (tokio current-thread): a node is one
//! core's worth of work, and three nodes plus clients share two cores here.

use meridian_config::Configuration;
use meridian_process::lease::{LeaseDesk, LeaseFrom, LeaseOutcome};
use meridian_process::node::{
    held_asks_fsync, held_waits_for_log, split_held, Discarded, DurableRecord, NodeEffect,
    NodeProcess, Peer,
};
use meridian_runtime::{mono_ns, wait};
use meridian_transport::lease_udp::{lease_frame, resolve_nodes, LeaseEndpoint, Outgoing};
use meridian_transport::{FrameReader, Outbox};
use meridian_wire::{encode_frame, ClockRequest, Frame, NodeId, Request, Response};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Node errors.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// `durability.mode = "disk"` and this node has no `data_dir`.
    #[error(
        "node {node}: durability.mode = \"disk\" needs a data_dir for the node \
         (set [[nodes]] data_dir, or durability.mode = \"memory\")"
    )]
    NoDataDir {
        /// The node.
        node: u32,
    },
    /// The node id is not in the configuration.
    #[error(transparent)]
    Config(#[from] meridian_config::ConfigError),
    /// Could not bind the listening socket.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The coordination replica's persisted state could not be read.
    #[error("coordination state {path}: {why}")]
    Coordination {
        /// The file.
        path: String,
        /// Cause.
        why: String,
    },
    /// The incarnation counter in the data directory could not be used.
    #[error("durable state in {path}: {why}")]
    Durability {
        /// The data directory.
        path: String,
        /// Cause.
        why: String,
    },
    /// A thread of the node could not be started.
    #[error("cannot start the {name} thread: {source}")]
    Thread {
        /// Which thread.
        name: &'static str,
        /// Cause.
        source: std::io::Error,
    },
    #[error("incarnation file {path}: {source}")]
    Incarnation {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

mod start;
pub mod wal;

struct Shell {
    process: Mutex<NodeProcess>,
    /// Disk durability's write-ahead log (none in memory mode or without a
    /// data directory).
    wal: Option<wal::Wal>,
    conns: Mutex<BTreeMap<u64, Outbox>>,
    /// Links to the other nodes (the embedded coordinator's requests).
    links: BTreeMap<NodeId, mpsc::Sender<Vec<u8>>>,
    /// A link of its own to the clock master for clock syncs (none while
    /// this node is the master). It follows the master: a sync to another
    /// node (after a CM change) starts a link to it and drops the old one
    /// (`clock_link_to`).
    clock_link: Mutex<Option<(NodeId, mpsc::Sender<Vec<u8>>)>>,
    /// Every node's address, for a clock link to a new master.
    node_addrs: BTreeMap<NodeId, String>,
    /// Where the coordination replica's state is kept (none: no data
    /// directory, so it lives in memory only).
    coordination_file: Option<std::path::PathBuf>,
    /// `events.jsonl` in the data directory: one line per reconfiguration
    /// or recovery milestone, stamped with the system-wide monotonic clock
    /// (the markers of a bench's throughput timeline, FaRM Figure 9).
    events: Mutex<Option<std::fs::File>>,
    node_id: NodeId,
    next_conn: AtomicU64,
    config: Configuration,
    /// The lease thread's UDP socket (a clone): lease frames to other
    /// nodes leave on it, whichever thread made them.
    lease_socket: std::net::UdpSocket,
    /// Every node's lease address (its `addr`, resolved).
    lease_addrs: BTreeMap<NodeId, std::net::SocketAddr>,
    /// Replicas the process let go of, to the thread that frees them
    /// ([`NodeEffect::Discard`], [`spawn_freer`]).
    discards: std::sync::mpsc::SyncSender<Discarded>,
}

/// Discards queued for the freeing thread at most; one more is freed
/// where it arrives, with a warning (a discard comes with a
/// reconfiguration, so a full queue means many in a row).
pub const MAX_DISCARDS_QUEUED: usize = 16;

/// The thread that frees replicas the process let go of, at the lowest
/// priority: freeing a replica of millions of objects takes seconds, which
/// must not be spent under the process lock or on the runtime's thread.
fn spawn_freer(id: NodeId) -> std::io::Result<std::sync::mpsc::SyncSender<Discarded>> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Discarded>(MAX_DISCARDS_QUEUED);
    std::thread::Builder::new()
        .name(format!("meridian-free-{}", id.0))
        .spawn(move || {
            if !meridian_transport::lease_udp::lower_priority() {
                tracing::debug!("the freeing thread runs at normal priority (nice 19 refused)");
            }
            while let Ok(d) = rx.recv() {
                let started = std::time::Instant::now();
                let (replicas, objects) = (d.replicas(), d.objects());
                drop(d);
                tracing::info!(
                    replicas,
                    objects,
                    ms = started.elapsed().as_millis() as u64,
                    "replicas let go of are freed"
                );
            }
        })?;
    Ok(tx)
}

/// Hand `d` to the freeing thread; free it here if its queue is full or
/// gone.
fn discard(shell: &Shell, d: Discarded) {
    match shell.discards.try_send(d) {
        Ok(()) => {}
        Err(
            std::sync::mpsc::TrySendError::Full(d) | std::sync::mpsc::TrySendError::Disconnected(d),
        ) => {
            tracing::warn!(
                objects = d.objects(),
                "the freeing thread is behind or gone; freeing replicas on the node's thread"
            );
            drop(d);
        }
    }
}

/// The node's side of the lease thread: its `LeaseDesk` and address book
/// (see [`meridian_transport::lease_udp`]).
struct NodeLeases {
    desk: LeaseDesk,
    shell: Weak<Shell>,
    rt: tokio::runtime::Handle,
    by_addr: BTreeMap<std::net::SocketAddr, NodeId>,
    addrs: BTreeMap<NodeId, std::net::SocketAddr>,
    /// The listener stalls already recorded ([`LeaseDesk::stalls`]).
    stalls_seen: meridian_process::lease::ListenerStalls,
}

impl LeaseEndpoint for NodeLeases {
    fn on_frame(&mut self, now: u64, src: std::net::SocketAddr, frame: Frame, out: &mut Outgoing) {
        // A CLOCK-SYNC, a client's or another node's: the master answers
        // here, at once, without the process lock (FaRMv2 §4.1;
        // `answer_clock_sync`).
        if let Some(reply) = meridian_process::node::answer_clock_sync(&self.desk, now, &frame) {
            if let Frame::Response {
                resp: meridian_wire::Response::Rejected(why),
                ..
            } = &reply
            {
                tracing::debug!(%src, "clock sync refused: {why:?}");
            }
            out.push((src, reply));
            return;
        }
        // The master's answer to this node's own CLOCK-SYNC (sent on this
        // socket by `send_effects`): into the process, like any reply.
        if let (Frame::Response { .. }, Some(node)) = (&frame, self.by_addr.get(&src).copied()) {
            let Some(sh) = self.shell.upgrade() else {
                return;
            };
            // Stamped here, on arrival: the process may be busy, and the
            // sample must end when the reply came, not when the process
            // took it (`NodeProcess::on_clock_reply`).
            let received = now;
            self.rt.spawn(async move {
                let effects = {
                    let mut p = lock_process(&sh, "clock reply");
                    p.on_clock_reply(mono_ns(), received, node, frame);
                    drain(&mut p, &sh)
                };
                route(&sh, effects).await;
            });
            return;
        }
        let Frame::OneWay {
            req: Request::Lease(m),
            ..
        } = frame
        else {
            tracing::debug!(%src, "a datagram that is not a lease message: dropped");
            return;
        };
        let from = self.by_addr.get(&src).copied();
        let via = from.map_or(LeaseFrom::Anonymous, LeaseFrom::Node);
        match self.desk.on_message(now, via, &m) {
            LeaseOutcome::Reply { to, msg } => {
                let dst = to.and_then(|n| self.addrs.get(&n).copied()).unwrap_or(src);
                out.push((dst, lease_frame(msg)));
            }
            LeaseOutcome::Nothing => {}
            LeaseOutcome::Forward => {
                let Some(sh) = self.shell.upgrade() else {
                    return;
                };
                self.rt.spawn(async move {
                    let effects = {
                        let mut p = lock_process(&sh, "lease forward");
                        p.on_lease_forward(mono_ns(), from, m);
                        drain(&mut p, &sh)
                    };
                    route(&sh, effects).await;
                });
            }
        }
    }

    fn on_timer(&mut self, now: u64, out: &mut Outgoing) -> Option<u64> {
        let shell = self.shell.upgrade()?;
        // Every loop of the thread is a look: a long gap since the last
        // one was a stall of this process or machine, forgiven by the
        // desk (`LeaseDesk::listen`) and recorded here.
        self.desk.listen(now);
        let stalls = self.desk.stalls();
        if stalls.count > self.stalls_seen.count {
            let gap_ns = stalls.total_ns - self.stalls_seen.total_ns;
            self.stalls_seen = stalls;
            record_stall(&shell, gap_ns);
        }
        if let Some((cm, m)) = self.desk.renew(now) {
            if let Some(a) = self.addrs.get(&cm) {
                out.push((*a, lease_frame(m)));
            }
        }
        Some(self.desk.next_look_ns(now))
    }
}

/// Append a lease listener stall of `gap_ns` to the node's
/// `events.jsonl` (event `LeaseStall`, with `gap_ns`), and log it: the
/// lease thread did not run for that long, so suspicion did not count it
/// (`LeaseDesk::listen`). `meridian-bench` reports them beside the lease
/// false positives.
fn record_stall(shell: &Shell, gap_ns: u64) {
    tracing::info!(
        gap_ms = gap_ns as f64 / 1e6,
        "the lease thread stalled; suspicion does not count the gap"
    );
    let detail = format!(
        "the lease thread did not run for {:.1} ms",
        gap_ns as f64 / 1e6
    );
    append_event(shell, "LeaseStall", detail, Some(gap_ns));
}

/// Append `ev` to the node's `events.jsonl` (see [`Shell::events`]).
fn record_event(shell: &Shell, ev: &meridian_process::node::NodeEvent) {
    if let meridian_process::node::NodeEvent::RegionLost(config, detail) = ev {
        tracing::error!(
            "configuration {config:?} cannot be replaced: {detail} (more than f replicas of a region failed)"
        );
    }
    let debug = format!("{ev:?}");
    let kind = debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("")
        .to_string();
    append_event(shell, &kind, debug, None);
}

/// Append one line to the node's `events.jsonl`: `{"mono_ns", "node",
/// "event", "detail"}`, and `"gap_ns"` when given.
fn append_event(shell: &Shell, kind: &str, detail: String, gap_ns: Option<u64>) {
    use std::io::Write;
    let mut line = serde_json::json!({
        "mono_ns": mono_ns(),
        "node": shell.node_id.0,
        "event": kind,
        "detail": detail,
    });
    if let Some(g) = gap_ns {
        line["gap_ns"] = g.into();
    }
    if let Some(f) = lock(&shell.events).as_mut() {
        if let Err(e) = writeln!(f, "{line}") {
            tracing::warn!("cannot append to events.jsonl: {e}");
        }
    }
}

/// How often a node appends its counters to `stats.jsonl`, ms.
pub const STATS_INTERVAL_MS: u64 = 1000;

/// Append the process's counters to `path` every [`STATS_INTERVAL_MS`]
/// when they changed, one JSON line each, stamped with the system-wide
/// monotonic clock: `{"mono_ns", "node", "read_holds": ReadHoldStats}`.
/// `meridian-bench` takes the difference over its measured window
/// (`meridian_cli::cluster::read_holds`). Stops with the node.
async fn write_stats(shell: std::sync::Weak<Shell>, path: std::path::PathBuf) {
    use std::io::Write;
    let mut file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("cannot open {}: {e}; counters not recorded", path.display());
            return;
        }
    };
    let mut every = tokio::time::interval(std::time::Duration::from_millis(STATS_INTERVAL_MS));
    let mut last = None;
    loop {
        every.tick().await;
        let Some(sh) = shell.upgrade() else {
            return;
        };
        let holds = lock_process(&sh, "stats").read_hold_stats();
        if last == Some(holds) {
            continue;
        }
        last = Some(holds);
        let line = serde_json::json!({
            "mono_ns": mono_ns(),
            "node": sh.node_id.0,
            "read_holds": holds,
        });
        if let Err(e) = writeln!(file, "{line}") {
            tracing::warn!("cannot append to {}: {e}", path.display());
            return;
        }
    }
}

/// Write `bytes` to `path` durably: a temporary file, fsync, rename, fsync
/// of the directory.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    write_durably_parts(path, &[bytes])
}

/// [`write_durably`] of the concatenation of `parts` (no copy of a large
/// checkpoint to put its header in front).
fn write_durably_parts(path: &std::path::Path, parts: &[&[u8]]) -> std::io::Result<()> {
    use std::io::Write;
    write_durably_with(path, |f| {
        for p in parts {
            f.write_all(p)?;
        }
        Ok(())
    })
}

/// [`write_durably_parts`] for content written by `fill` into the
/// temporary file (streamed, not built in memory first).
fn write_durably_with(
    path: &std::path::Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    // Readable too: a checkpoint's checksum is taken by reading it back.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    fill(&mut f)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The process lock, held no longer than [`SLOW_HOLD_MS`] without a
/// warning: a long hold stalls every request at the node (and, if it
/// outlasts a lease, its NEW-CONFIG-ACKs), so the log says what held it.
struct ProcessGuard<'a> {
    guard: std::sync::MutexGuard<'a, NodeProcess>,
    since: std::time::Instant,
    what: &'static str,
}

/// Process-lock holds longer than this are logged (`ProcessGuard`).
const SLOW_HOLD_MS: u128 = 20;

fn lock_process<'a>(shell: &'a Shell, what: &'static str) -> ProcessGuard<'a> {
    ProcessGuard {
        guard: lock(&shell.process),
        since: std::time::Instant::now(),
        what,
    }
}

impl std::ops::Deref for ProcessGuard<'_> {
    type Target = NodeProcess;
    fn deref(&self) -> &NodeProcess {
        &self.guard
    }
}

impl std::ops::DerefMut for ProcessGuard<'_> {
    fn deref_mut(&mut self) -> &mut NodeProcess {
        &mut self.guard
    }
}

impl Drop for ProcessGuard<'_> {
    fn drop(&mut self) {
        let ms = self.since.elapsed().as_millis();
        if ms > SLOW_HOLD_MS {
            tracing::warn!(
                held_ms = ms as u64,
                what = self.what,
                "the process lock was held long"
            );
        }
    }
}

/// Run node `id` of `config` until the process is killed.
///
/// Errors: [`NodeError`] if the node is unknown, cannot listen, or cannot
/// keep its incarnation counter.
pub async fn run(config: Configuration, id: NodeId) -> Result<(), NodeError> {
    let me = config.node(id)?.clone();
    let incarnation = start::next_incarnation(me.data_dir.as_deref())?;
    let listener = TcpListener::bind(&me.addr)
        .await
        .map_err(|source| NodeError::Bind {
            addr: me.addr.clone(),
            source,
        })?;
    // The lease thread's socket: UDP on the same address (FaRM §5.1).
    let lease_socket = std::net::UdpSocket::bind(&me.addr).map_err(|source| NodeError::Bind {
        addr: format!("{} (udp, leases)", me.addr),
        source,
    })?;
    let (mut process, wal) = start::restore_process(&config, id, &me, incarnation)?;
    start::restore_coordination(&mut process, start::coordination_file(&me).as_deref())?;
    let is_master = process.is_clock_master();
    let depth = config.limits.max_inflight_per_connection.max(16);
    let batch = config.limits.max_batch_bytes;
    let (links, receivers) = start::links(&config, id, is_master, depth)?;
    let shell = Arc::new(Shell::new(
        &config,
        id,
        &me,
        process,
        wal,
        links,
        &lease_socket,
    )?);
    start_lease_thread(&shell, lease_socket, id, &me.addr)?;
    tracing::info!(node = %id, addr = %me.addr, master = is_master, incarnation, "node listening");
    for (node, addr, rx) in receivers {
        tokio::spawn(link(Arc::downgrade(&shell), node, addr, rx, batch));
    }
    if let Some(dir) = &me.data_dir {
        tokio::spawn(write_stats(Arc::downgrade(&shell), dir.join("stats.jsonl")));
    }
    tokio::spawn(stop_on_sigterm(Arc::downgrade(&shell)));
    step(&shell, "first tick", |p| p.tick(mono_ns())).await;
    accept_connections(listener, shell).await;
    Ok(())
}

impl Shell {
    /// The shell around `process` of node `id` (`me` in `config`): its
    /// log, its links, a clone of the lease thread's `lease_socket`, the
    /// files of its data directory (the coordination state,
    /// `events.jsonl`), and the thread that frees discarded replicas.
    ///
    /// Errors: the lease socket cannot be cloned, or the freeing thread
    /// cannot start.
    fn new(
        config: &Configuration,
        id: NodeId,
        me: &meridian_config::NodeConfig,
        process: NodeProcess,
        wal: Option<wal::Wal>,
        links: start::Links,
        lease_socket: &std::net::UdpSocket,
    ) -> Result<Shell, NodeError> {
        Ok(Shell {
            wal,
            process: Mutex::new(process),
            conns: Mutex::new(BTreeMap::new()),
            links: links.nodes,
            clock_link: Mutex::new(links.clock),
            node_addrs: config
                .nodes
                .iter()
                .map(|n| (NodeId(n.id), n.addr.clone()))
                .collect(),
            coordination_file: start::coordination_file(me),
            events: Mutex::new(me.data_dir.as_ref().and_then(|d| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(d.join("events.jsonl"))
                    .map_err(|e| {
                        tracing::warn!("cannot open events.jsonl: {e}; markers not recorded")
                    })
                    .ok()
            })),
            node_id: id,
            next_conn: AtomicU64::new(1),
            config: config.clone(),
            lease_socket: lease_socket.try_clone().map_err(|source| NodeError::Bind {
                addr: format!("{} (udp, leases)", me.addr),
                source,
            })?,
            lease_addrs: resolve_nodes(
                config.nodes.iter().map(|n| (NodeId(n.id), n.addr.as_str())),
            ),
            discards: spawn_freer(id).map_err(|source| NodeError::Thread {
                name: "freeing",
                source,
            })?,
        })
    }
}

/// Start node `id`'s lease thread on `lease_socket` (FaRM §5.1), over the
/// process's `LeaseDesk`. From here on the process's own lease ticks no
/// longer count as looks (`LeaseDesk::attach_listener`).
///
/// Errors: the thread cannot start.
fn start_lease_thread(
    shell: &Arc<Shell>,
    lease_socket: std::net::UdpSocket,
    id: NodeId,
    addr: &str,
) -> Result<(), NodeError> {
    let leases = NodeLeases {
        desk: lock(&shell.process).lease_desk(),
        shell: Arc::downgrade(shell),
        rt: tokio::runtime::Handle::current(),
        by_addr: shell.lease_addrs.iter().map(|(n, a)| (*a, *n)).collect(),
        addrs: shell.lease_addrs.clone(),
        stalls_seen: Default::default(),
    };
    leases.desk.attach_listener(mono_ns());
    meridian_transport::lease_udp::spawn(&format!("lease-{id}"), lease_socket, leases, mono_ns)
        .map_err(|source| NodeError::Bind {
            addr: format!("{addr} (lease thread)"),
            source,
        })?;
    Ok(())
}

/// Accept connections for as long as the process runs, each served by a
/// task of its own ([`serve`]).
async fn accept_connections(listener: TcpListener, shell: Arc<Shell>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let sh = shell.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(sh, stream).await {
                tracing::warn!(%peer, "connection closed: {e}");
            }
        });
    }
}

/// Run `f` on the process under its lock (held for `what`), then route
/// the effects it queued.
async fn step(shell: &Arc<Shell>, what: &'static str, f: impl FnOnce(&mut NodeProcess)) {
    let effects = {
        let mut p = lock_process(shell, what);
        f(&mut p);
        drain(&mut p, shell)
    };
    route(shell, effects).await;
}

/// A clean stop (`SIGTERM`, as `meridian cluster stop` sends): fsync the
/// log's queued records, which no reply waited for and which would
/// otherwise be lost with the process (`wal` fsyncs on demand), then
/// exit. A `kill -9` loses them, as a crash does; that is allowed for.
async fn stop_on_sigterm(shell: std::sync::Weak<Shell>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot catch SIGTERM ({e}); a stop loses the log's unsynced tail");
            return;
        }
    };
    if term.recv().await.is_none() {
        return;
    }
    if let Some(wal) = shell.upgrade().as_ref().and_then(|s| s.wal.as_ref()) {
        // What was queued when the signal came (later appends may follow
        // while the flush runs; they are covered or lost as in a crash).
        let queued = wal.queued_seq();
        match tokio::time::timeout(std::time::Duration::from_secs(5), wal.flush()).await {
            Ok(()) => {
                tracing::info!("stopping (SIGTERM): the log is durable through record {queued}")
            }
            Err(_) => tracing::warn!(
                "stopping (SIGTERM): the log's fsync took over 5 s; records after the last \
                 fsync may be lost, as in a crash"
            ),
        }
    } else {
        tracing::info!("stopping (SIGTERM)");
    }
    std::process::exit(0);
}

/// Carry out effects: batch the frames per destination, then send them
/// (outside the process lock, so a slow peer only waits for itself).
fn route(
    shell: &Arc<Shell>,
    effects: Vec<NodeEffect>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    let shell = shell.clone();
    Box::pin(async move { route_now(&shell, effects).await })
}

async fn route_now(shell: &Arc<Shell>, effects: Vec<NodeEffect>) {
    let durable = shell.wal.as_ref().map_or(0, |w| w.durable_seq());
    match split_held(effects, shell.wal.is_some(), durable) {
        (free, Some((seq, held))) if held_waits_for_log(&held) => {
            let ask = held_asks_fsync(&free, &held);
            send_effects(shell, free).await;
            if let Some(wal) = &shell.wal {
                if ask {
                    wal.durable(seq).await;
                } else {
                    wal.durable_unasked(seq).await;
                }
            }
            send_effects(shell, held).await;
        }
        // Nothing waits for the records: no fsync is asked for.
        (free, Some(_)) => send_effects(shell, free).await,
        (all, None) => send_effects(shell, all).await,
    }
}

/// A connection's held effects, each batch's waiting for its own log
/// record, sent in the order the batches arrived (bounded:
/// `max_inflight_per_connection` batches; a full queue stops the
/// connection's reader until the log catches up).
type HeldQueue = mpsc::Sender<(u64, Vec<NodeEffect>)>;

/// Route one batch of a connection: what is free goes now, what waits for
/// the log joins the connection's [`HeldQueue`]. The reader goes on at
/// once and does not wait here for the fsync: waiting would queue a
/// read-only transaction's READ behind another session's LOCK, and no
/// second fsync could be asked for on a connection while one is in
/// progress (group commit would see one batch per client at a time).
async fn route_queued(shell: &Arc<Shell>, effects: Vec<NodeEffect>, held: &HeldQueue) {
    let durable = shell.wal.as_ref().map_or(0, |w| w.durable_seq());
    match split_held(effects, shell.wal.is_some(), durable) {
        (free, Some(h)) if held_waits_for_log(&h.1) => {
            // Asked here, not when the queue reaches the batch: a batch
            // that asks for no fsync (`held_asks_fsync`) must not keep
            // the ones behind it waiting for the idle sync.
            if held_asks_fsync(&free, &h.1) {
                if let Some(wal) = &shell.wal {
                    wal.sync(h.0);
                }
            }
            send_effects(shell, free).await;
            if held.send(h).await.is_err() {
                tracing::error!("a connection's sender stopped; stopping");
                std::process::exit(3);
            }
        }
        // Nothing waits for the records: no fsync is asked for, and
        // nothing joins the queue (a later batch's wait covers them).
        (free, Some(_)) => send_effects(shell, free).await,
        (all, None) => send_effects(shell, all).await,
    }
}

/// Serve a [`HeldQueue`]: wait for each batch's record to be durable, then
/// hand its effects to `send`, in queue order. The batches queued behind
/// it whose records are durable too (`durable_now`, the highest durable
/// record: one fsync covers many) go in the same `send`, so a group
/// commit wakes the connection's writer once, not once per batch.
async fn send_when_durable<F, Fut>(
    mut rx: mpsc::Receiver<(u64, Vec<NodeEffect>)>,
    durable: impl Fn(u64) -> F,
    durable_now: impl Fn() -> u64,
    mut send: impl FnMut(Vec<NodeEffect>) -> Fut,
) where
    F: std::future::Future<Output = ()>,
    Fut: std::future::Future<Output = ()>,
{
    let mut next = rx.recv().await;
    while let Some((seq, mut effects)) = next.take() {
        durable(seq).await;
        let through = durable_now().max(seq);
        loop {
            match rx.try_recv() {
                Ok((s, more)) if s <= through => effects.extend(more),
                Ok(b) => {
                    next = Some(b);
                    break;
                }
                Err(_) => break,
            }
        }
        send(effects).await;
        if next.is_none() {
            next = rx.recv().await;
        }
    }
}

/// Carry out `effects`: frames batched per destination and sent, the
/// other effects started (coordination answers, wake-ups) or done here
/// (events, discards). The log's effects were carried out by `drain`.
async fn send_effects(shell: &Arc<Shell>, effects: Vec<NodeEffect>) {
    let mut batches = Batches::default();
    for e in effects {
        match e {
            NodeEffect::Send { to, frame } => batches.add(shell, to, frame),
            // Queued by `drain` and waited for by `route_now`; written by
            // `drain`, under the process lock.
            NodeEffect::AppendLog { .. }
            | NodeEffect::PersistCoordination(_)
            | NodeEffect::Checkpoint { .. } => {}
            // Consumed by `split_held`.
            NodeEffect::HoldReads { .. } => {}
            NodeEffect::Cas { expected, proposed } => {
                // `[coordination] replicas = 0` names an outside service,
                // which the tokio node does not speak to: no configuration
                // can follow this one, so the CAS loses.
                tracing::warn!(
                    expected = expected.0,
                    proposed = proposed.id().0,
                    "reconfiguration needs a coordination service; set [coordination] replicas"
                );
                let sh = shell.clone();
                tokio::spawn(async move {
                    step(&sh, "coordination", |p| {
                        let current = Box::new(p.config().clone());
                        p.on_cas_result(mono_ns(), Err(current));
                    })
                    .await;
                });
            }
            NodeEffect::RaiseTimeBound { to_ns } => {
                // `[coordination] replicas = 0`: no service to store the
                // bound in, so it is granted here, unstored. Global time
                // then survives a CM change (FF) but not a crash of every
                // node; the warning at the CAS above applies here too.
                let sh = shell.clone();
                tokio::spawn(async move {
                    step(&sh, "coordination", |p| {
                        let me = p.id();
                        p.on_time_bound(mono_ns(), to_ns, me);
                    })
                    .await;
                });
            }
            NodeEffect::Event(ev) => {
                tracing::info!(?ev, "reconfiguration");
                record_event(shell, &ev);
            }
            NodeEffect::Discard(d) => discard(shell, d),
            NodeEffect::Wake { at_local_ns } => {
                let sh = shell.clone();
                tokio::spawn(async move {
                    wait::wait_until(at_local_ns).await;
                    step(&sh, "wake", |p| p.tick(mono_ns())).await;
                });
            }
        }
    }
    batches.send(shell).await;
}

/// Frames to send, encoded and batched per destination; clock syncs to
/// the clock master apart, for its link of their own.
#[derive(Default)]
struct Batches {
    /// Each destination's frames.
    out: BTreeMap<Peer, Vec<u8>>,
    /// Clock syncs for the clock link.
    clock: Vec<u8>,
    /// The master the clock syncs go to.
    clock_to: Option<NodeId>,
}

impl Batches {
    /// Add `frame` to `to`'s batch, unless it leaves at once as a datagram
    /// ([`send_datagram`]). A frame the codec refuses is logged, and a
    /// reply is replaced by an error reply saying why.
    fn add(&mut self, shell: &Shell, to: Peer, frame: Frame) {
        let sync = matches!(
            frame,
            Frame::Request {
                req: Request::Clock(ClockRequest::Sync),
                ..
            }
        );
        if send_datagram(shell, to, &frame, sync) {
            return;
        }
        let buf = match to {
            Peer::Node(m) if sync && shell.node_addrs.contains_key(&m) => {
                self.clock_to = Some(m);
                &mut self.clock
            }
            _ => self.out.entry(to).or_default(),
        };
        if let Err(e) = encode_frame(&frame, buf) {
            // A reply the codec refuses must not vanish: the peer
            // would wait out its timeout. Say why instead.
            tracing::error!("cannot encode a frame to {to:?}: {e}");
            if let Frame::Response { id, .. } = frame {
                let resp = Response::Error(format!("reply not encodable: {e}"));
                let _ = encode_frame(&Frame::Response { id, resp }, buf);
            }
        }
    }

    /// Send every batch: to its connection's writer, to its node's link,
    /// or (clock syncs) to the clock link.
    async fn send(self, shell: &Arc<Shell>) {
        for (to, bytes) in self.out {
            if bytes.is_empty() {
                continue;
            }
            match to {
                Peer::Conn(c) => {
                    let ob = lock(&shell.conns).get(&c).cloned();
                    if let Some(ob) = ob {
                        if let Err(e) = ob.send(bytes).await {
                            tracing::debug!("connection {c} gone: {e}");
                        }
                    }
                }
                Peer::Node(n) => match shell.links.get(&n) {
                    Some(l) => {
                        if let Err(e) = l.try_send(bytes) {
                            tracing::warn!(
                                "link to {n} cannot take frames ({e}); they will time out"
                            );
                        }
                    }
                    None => tracing::warn!("no link to {n}; frames dropped"),
                },
            }
        }
        if let (false, Some(m)) = (self.clock.is_empty(), self.clock_to) {
            if let Err(e) = clock_link_to(shell, m).try_send(self.clock) {
                tracing::warn!("clock link cannot take a sync ({e}); it will time out");
            }
        }
    }
}

/// Send `frame` to `to` as a datagram on the lease socket if it goes
/// there; true if it did. Lease messages to nodes go on the lease socket
/// (FaRM §5.1), not behind transaction frames. So do this node's own
/// CLOCK-SYNCs (`sync`; its embedded coordinator's, which carry no
/// truncations): they go to the master's lease thread as datagrams, as
/// clients' do, answered at once, without the master's process lock, so a
/// node's samples are as tight as a client's. The node holds every read
/// until its own clock shows `read_ts` past (`clock.reads_wait_at_server`),
/// so its uncertainty is on every read's path.
fn send_datagram(shell: &Shell, to: Peer, frame: &Frame, sync: bool) -> bool {
    let Peer::Node(n) = to else {
        return false;
    };
    let datagram = match frame {
        Frame::OneWay {
            req: Request::Lease(_),
            ..
        } => true,
        Frame::Request { truncate, .. } => sync && truncate.is_empty(),
        _ => false,
    };
    let Some(a) = shell.lease_addrs.get(&n).filter(|_| datagram) else {
        return false;
    };
    meridian_transport::lease_udp::send_frame(&shell.lease_socket, *a, frame);
    true
}

/// The dedicated clock link to `master`, started (and the link to the
/// previous master dropped, which ends it) if the master changed.
fn clock_link_to(shell: &Arc<Shell>, master: NodeId) -> mpsc::Sender<Vec<u8>> {
    let mut cl = lock(&shell.clock_link);
    if let Some((m, tx)) = cl.as_ref() {
        if *m == master {
            return tx.clone();
        }
    }
    let (tx, rx) = mpsc::channel(64);
    if let Some(addr) = shell.node_addrs.get(&master) {
        tracing::info!("clock link moves to {master}");
        tokio::spawn(link(
            Arc::downgrade(shell),
            master,
            addr.clone(),
            rx,
            shell.config.limits.max_batch_bytes,
        ));
    }
    *cl = Some((master, tx.clone()));
    tx
}

async fn serve(
    shell: Arc<Shell>,
    stream: TcpStream,
) -> Result<(), meridian_transport::TransportError> {
    let limits = &shell.config.limits;
    let (r, w) = stream.into_split();
    let outbox = Outbox::spawn(
        w,
        limits.max_inflight_per_connection,
        limits.max_batch_bytes,
        None,
    );
    let conn = shell.next_conn.fetch_add(1, Ordering::Relaxed);
    lock(&shell.conns).insert(conn, outbox);
    let mut reader = FrameReader::new(r).with_frame_timeout_ms(meridian_config::FRAME_TIMEOUT_MS);
    let mut frames = Vec::with_capacity(64);
    let (held, held_rx) = mpsc::channel(limits.max_inflight_per_connection.max(1));
    let sender = {
        let sh = shell.clone();
        let send_sh = shell.clone();
        let now_sh = shell.clone();
        tokio::spawn(async move {
            send_when_durable(
                held_rx,
                |seq| {
                    let sh = sh.clone();
                    async move {
                        // `route_queued` asked for the fsync if the batch
                        // wants one.
                        if let Some(wal) = &sh.wal {
                            wal.durable_unasked(seq).await;
                        }
                    }
                },
                move || now_sh.wal.as_ref().map_or(u64::MAX, |w| w.durable_seq()),
                |effects| {
                    let sh = send_sh.clone();
                    async move { send_effects(&sh, effects).await }
                },
            )
            .await
        })
    };
    let result = loop {
        frames.clear();
        match reader.next_batch(&mut frames).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        let effects = feed(&shell, Peer::Conn(conn), &mut frames);
        route_queued(&shell, effects, &held).await;
    };
    // What is queued still goes (its records are logged), then the
    // connection is forgotten.
    drop(held);
    let _ = sender.await;
    lock(&shell.conns).remove(&conn);
    result
}

/// Hand a batch of frames from `from` to the process under one lock;
/// returns the effects to route.
fn feed(shell: &Shell, from: Peer, frames: &mut Vec<Frame>) -> Vec<NodeEffect> {
    let mut p = lock_process(shell, "frames");
    let now = mono_ns();
    for f in frames.drain(..) {
        p.on_message(now, from, f);
    }
    drain(&mut p, shell)
}

/// The process's effects, with its coordination state already written
/// (under the process lock, so states land on disk in the order the
/// process produced them, before any frame that depends on them).
fn drain(p: &mut NodeProcess, shell: &Shell) -> Vec<NodeEffect> {
    let mut effects = p.drain_effects();
    effects.retain_mut(|e| match e {
        NodeEffect::AppendLog { first_seq, records } => {
            let Some(wal) = &shell.wal else {
                return false;
            };
            match wal::encode(*first_seq, records) {
                Ok(bytes) => {
                    let last = *first_seq + records.len() as u64 - 1;
                    wal.append(bytes, last);
                    if records.iter().any(DurableRecord::wants_prompt_sync) {
                        wal.sync(last);
                    }
                    // Kept (without its records) so `route` waits for it.
                    records.clear();
                    *first_seq = last;
                    true
                }
                Err(e) => {
                    tracing::error!("cannot encode a log record: {e}; stopping");
                    std::process::exit(3);
                }
            }
        }
        NodeEffect::Checkpoint { through_seq, state } => {
            if let Some(wal) = &shell.wal {
                wal.checkpoint(*through_seq, state.clone());
            }
            false
        }
        NodeEffect::PersistCoordination(state) => {
            if let Some(path) = &shell.coordination_file {
                if let Err(e) = write_durably(path, state) {
                    // A replica that cannot persist must not go on voting:
                    // stop the node, as on a failed disk.
                    tracing::error!(path = %path.display(), "cannot persist the coordination state: {e}; stopping");
                    std::process::exit(3);
                }
            }
            false
        }
        _ => true,
    });
    effects
}

/// One link to node `node` ([`meridian_transport::run_link`]): responses
/// go to the process as from `Peer::Node(node)`; a lost connection fails
/// the embedded coordinator's RPCs to it. Ends when the shell is gone.
async fn link(
    shell: Weak<Shell>,
    node: NodeId,
    addr: String,
    rx: mpsc::Receiver<Vec<u8>>,
    max_batch_bytes: usize,
) {
    let down = shell.clone();
    meridian_transport::run_link(
        node.to_string(),
        addr,
        rx,
        max_batch_bytes,
        move |frames| {
            let Some(sh) = shell.upgrade() else {
                return false;
            };
            let effects = feed(&sh, Peer::Node(node), frames);
            tokio::spawn(async move { route(&sh, effects).await });
            true
        },
        move || {
            let Some(sh) = down.upgrade() else {
                return false;
            };
            let effects = {
                let mut p = lock_process(&sh, "disconnect");
                p.on_disconnect(mono_ns(), node);
                drain(&mut p, &sh)
            };
            tokio::spawn(async move { route(&sh, effects).await });
            true
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::{Conflict, TxnResponse, Versioned};

    fn reply(resp: TxnResponse) -> NodeEffect {
        NodeEffect::Send {
            to: Peer::Node(NodeId(1)),
            frame: Frame::Response {
                id: 7,
                resp: Response::Txn(resp),
            },
        }
    }

    fn read_reply(id: u64) -> NodeEffect {
        NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id,
                resp: Response::Txn(TxnResponse::Read(Ok(None))),
            },
        }
    }

    fn ack_reply(id: u64) -> NodeEffect {
        NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id,
                resp: Response::Txn(TxnResponse::Ack),
            },
        }
    }

    fn lock_reply(id: u64) -> NodeEffect {
        NodeEffect::Send {
            to: Peer::Conn(1),
            frame: Frame::Response {
                id,
                resp: Response::Txn(TxnResponse::Lock(Ok(()))),
            },
        }
    }

    fn append(seq: u64) -> NodeEffect {
        NodeEffect::AppendLog {
            first_seq: seq,
            records: Vec::new(),
        }
    }

    fn ids(effects: &[NodeEffect]) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                NodeEffect::Send {
                    frame: Frame::Response { id, .. },
                    ..
                } => Some(*id),
                _ => None,
            })
            .collect()
    }

    /// A connection's batches: a READ in the second batch is answered
    /// while the first batch's ACK still waits for its fsync (the reader
    /// does not wait for the log), held replies go only once their own
    /// record is durable, and in the order their batches came.
    #[tokio::test]
    async fn a_read_is_not_held_behind_another_batchs_fsync() {
        // Every region has a complete backup. Batch 1: a COMMIT-BACKUP
        // logged as record 5. Batch 2: a READ, and a COMMIT-BACKUP logged
        // as record 6.
        let (free1, held1) = split_held(vec![append(5), ack_reply(1)], true, 4);
        assert!(ids(&free1).is_empty());
        let (free2, held2) = split_held(vec![read_reply(2), append(6), ack_reply(3)], true, 4);
        assert_eq!(ids(&free2), vec![2], "the READ goes at once");
        let (tx, rx) = mpsc::channel(4);
        tx.send(held1.expect("held")).await.expect("queue");
        tx.send(held2.expect("held")).await.expect("queue");
        drop(tx);
        let (durable_tx, durable_rx) = tokio::sync::watch::channel(0u64);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let sent = sent.clone();
            tokio::spawn(send_when_durable(
                rx,
                {
                    let durable_rx = durable_rx.clone();
                    move |seq| {
                        let mut d = durable_rx.clone();
                        async move {
                            let _ = d.wait_for(|v| *v >= seq).await;
                        }
                    }
                },
                move || *durable_rx.borrow(),
                move |effects| {
                    lock(&sent).extend(ids(&effects));
                    async {}
                },
            ))
        };
        let settle = || tokio::time::sleep(std::time::Duration::from_millis(20));
        settle().await;
        assert!(lock(&sent).is_empty(), "nothing is durable yet");
        durable_tx.send_replace(5);
        settle().await;
        assert_eq!(*lock(&sent), vec![1], "only record 5's reply");
        durable_tx.send_replace(6);
        task.await.expect("sender");
        assert_eq!(*lock(&sent), vec![1, 3]);
        // Memory mode (no log): nothing is held.
        let (all, held) = split_held(vec![append(7), lock_reply(4)], false, 7);
        assert!(held.is_none());
        assert_eq!(ids(&all), vec![4]);
    }

    /// Disk durability: replies that report only already-durable state go
    /// at once; every acknowledgement of a log record (the ACK of
    /// COMMIT-BACKUP, COMMIT-PRIMARY, ABORT, TRUNCATE, and a LOCK's
    /// `LockDurable`) and COMMIT-PRIMARY's `Installed` wait for the fsync.
    /// A LOCK-REPLY goes at once (COMMIT-PRIMARY waits for `LockDurable`),
    /// and the replies to READ, SCAN and VALIDATE wait unless what they
    /// show is durable here. Freeing an ACK early would let a commit be
    /// reported that a crash of every replica could lose.
    #[test]
    fn only_replies_that_log_nothing_skip_the_fsync_wait() {
        use meridian_process::node::independent_of_log;
        let v = Versioned {
            version: meridian_wire::Timestamp(3),
            value: vec![1],
        };
        for reads_free in [false, true] {
            for read in [
                TxnResponse::Read(Ok(Some(v.clone()))),
                TxnResponse::Read(Err(Conflict::Locked)),
                TxnResponse::Scan(Ok((Vec::new(), false))),
                TxnResponse::Validate(Ok(())),
            ] {
                assert_eq!(
                    independent_of_log(&reply(read.clone()), reads_free),
                    reads_free,
                    "{read:?}"
                );
            }
            for lock in [
                TxnResponse::Lock(Ok(())),
                TxnResponse::Lock(Err(Conflict::Changed)),
            ] {
                assert!(
                    independent_of_log(&reply(lock.clone()), reads_free),
                    "{lock:?}"
                );
            }
            for waits in [
                TxnResponse::Ack,
                TxnResponse::Installed,
                TxnResponse::LockDurable,
            ] {
                assert!(!independent_of_log(&reply(waits), reads_free));
            }
        }
    }
}
