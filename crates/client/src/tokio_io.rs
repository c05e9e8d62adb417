//! The production [`Io`]: one TCP link per node (plus a dedicated link to
//! the clock master for clock synchronisation, so that batches of
//! transaction traffic do not delay it; it follows the master after a CM
//! change), reconnecting with back-off, and
//! precise wake-ups on the waiter thread of `meridian-runtime`.
//!
//! A link's frames queue in a bounded channel (`max_inflight_per_connection`);
//! a frame that does not fit is dropped and its RPC times out, exactly like
//! a lost message. Wake-ups the process asks for are served by one task
//! per client (`tick_thread`), which ticks the process itself. A broken connection fails every RPC outstanding on it
//! ([`Core::on_disconnect`]) and is re-established (review finding 8).
//!
//! Clients are coordinators, so they hold leases at the CM (FaRM §5.1).
//! Their renewals and the CM's grants go over UDP on a lease thread of
//! their own (`meridian_transport::lease_udp`), which touches only the
//! process's `LeaseDesk`: a busy client runtime does not make a live
//! client look dead.

use crate::{ClientError, Core, Io};
use meridian_config::Configuration;
use meridian_process::client::ClientProcess;
use meridian_process::lease::{LeaseDesk, LeaseFrom, LeaseOutcome};
use meridian_runtime::mono_ns;
use meridian_transport::lease_udp::{self, LeaseEndpoint, Outgoing};
use meridian_wire::{encode_frame, ClockRequest, Frame, NodeId, Request};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// The tokio implementation of [`Io`].
pub struct TokioIo {
    links: BTreeMap<NodeId, mpsc::Sender<Vec<u8>>>,
    clock_link: Arc<ClockLink>,
    /// The lease thread's socket (a clone) and the nodes' addresses.
    lease: Option<(std::net::UdpSocket, BTreeMap<NodeId, SocketAddr>)>,
    /// Set once the lease thread runs: only then do lease frames leave on
    /// its socket (its grants would otherwise arrive where nobody reads).
    lease_thread: Arc<std::sync::atomic::AtomicBool>,
    /// The earliest wake-up asked for, served by one thread ([`tick_thread`]).
    ticker: Arc<Ticker>,
}

/// The earliest local time the process asked to be ticked at
/// (`u64::MAX`: none), served by one thread of the client's own
/// ([`tick_thread`]) that sleeps until then with a 1 ns timer slack and
/// ticks the process itself. The uncertainty wait ends with that tick,
/// so every hop between the deadline and the tick lengthens it: a tokio
/// task woken by the runtime's waiter thread cost two hops (the waiter
/// thread's wake-up, then the task's scheduling on a busy worker), and a
/// task spawned per wake-up cost a tenth of a loaded client's CPU.
struct Ticker {
    next_at: std::sync::Mutex<u64>,
    earlier: std::sync::Condvar,
}

impl Ticker {
    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.next_at.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tick `core` at the earliest time asked for, until the core is gone.
fn tick_thread(core: Weak<Core>, t: Arc<Ticker>) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let alive = core.clone();
    serve(
        &t,
        move || match core.upgrade() {
            Some(c) => {
                c.tick();
                true
            }
            None => false,
        },
        move || alive.strong_count() > 0,
    );
}

impl Ticker {
    /// Ask for a tick at `at_local_ns` (an earlier request than the one
    /// pending wakes the thread at once; a later one changes nothing).
    fn request(&self, at_local_ns: u64) {
        let mut next = self.lock();
        if at_local_ns < *next {
            *next = at_local_ns;
            self.earlier.notify_one();
        }
    }
}

/// The ticker's loop: call `tick` once the earliest requested time has
/// come; stop when `tick` or `alive` says the owner is gone.
fn serve(t: &Ticker, mut tick: impl FnMut() -> bool, alive: impl Fn() -> bool) {
    let mut next = t.lock();
    loop {
        let now = mono_ns();
        if *next <= now {
            *next = u64::MAX;
            drop(next);
            if !tick() {
                return;
            }
            next = t.lock();
            continue;
        }
        // Nothing asked: sleep a second at most, to notice a closed core.
        let sleep_ns = (*next - now).min(1_000_000_000);
        next = match t
            .earlier
            .wait_timeout(next, std::time::Duration::from_nanos(sleep_ns))
        {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        if !alive() {
            return;
        }
    }
}

/// The client's side of the lease thread.
struct ClientLeases {
    desk: LeaseDesk,
    core: Weak<Core>,
    rt: tokio::runtime::Handle,
    by_addr: BTreeMap<SocketAddr, NodeId>,
    addrs: BTreeMap<NodeId, SocketAddr>,
}

impl LeaseEndpoint for ClientLeases {
    fn on_frame(&mut self, now: u64, src: SocketAddr, frame: Frame, _out: &mut Outgoing) {
        let Frame::OneWay {
            req: Request::Lease(m),
            ..
        } = frame
        else {
            return;
        };
        // Only nodes grant leases; anything else is not for us.
        let Some(&from) = self.by_addr.get(&src) else {
            return;
        };
        if let LeaseOutcome::Forward = self.desk.on_message(now, LeaseFrom::Node(from), &m) {
            let core = self.core.clone();
            self.rt.spawn(async move {
                if let Some(c) = core.upgrade() {
                    c.with(|p, now| p.on_lease_forward(now, from, m));
                }
            });
        }
    }

    fn on_timer(&mut self, now: u64, out: &mut Outgoing) -> Option<u64> {
        self.core.upgrade()?;
        if let Some((cm, m)) = self.desk.renew(now) {
            if let Some(a) = self.addrs.get(&cm) {
                out.push((*a, lease_udp::lease_frame(m)));
            }
        }
        Some(self.desk.next_renew_ns().unwrap_or(u64::MAX))
    }
}

impl Io for TokioIo {
    fn now_ns(&self) -> u64 {
        mono_ns()
    }

    fn send(&self, to: NodeId, frame: Frame) {
        if let (
            Frame::OneWay {
                req: Request::Lease(_),
                ..
            },
            Some((sock, addrs)),
        ) = (&frame, &self.lease)
        {
            let running = self.lease_thread.load(std::sync::atomic::Ordering::Acquire);
            if let (true, Some(a)) = (running, addrs.get(&to)) {
                lease_udp::send_frame(sock, *a, &frame);
                return;
            }
        }
        let clock = self.clock_link.knows(to)
            && matches!(
                frame,
                Frame::Request {
                    req: Request::Clock(ClockRequest::Sync),
                    ..
                }
            );
        if clock {
            let mut buf = Vec::with_capacity(64);
            match encode_frame(&frame, &mut buf) {
                Ok(()) => self.clock_link.send(to, &buf),
                Err(e) => tracing::error!("cannot encode a clock sync to {to}: {e}"),
            }
            return;
        }
        let link = self.links.get(&to);
        let Some(link) = link else {
            tracing::warn!("no link to {to}; frame dropped");
            return;
        };
        let mut buf = Vec::with_capacity(64);
        if let Err(e) = encode_frame(&frame, &mut buf) {
            tracing::error!("cannot encode a frame to {to}: {e}");
            return;
        }
        if let Err(e) = link.try_send(buf) {
            tracing::warn!("link to {to} cannot take a frame ({e}); it will time out");
        }
    }

    fn wake_at(&self, _core: Weak<Core>, at_local_ns: u64) {
        self.ticker.request(at_local_ns);
    }
}

/// Build a core over `process` with links to every node of `config`, and
/// start its clock synchronisation.
///
/// Errors: [`ClientError::Config`] if the clock master is not a member.
pub fn start(config: Configuration, process: ClientProcess) -> Result<Arc<Core>, ClientError> {
    let depth = config.limits.max_inflight_per_connection.max(16);
    let batch = config.limits.max_batch_bytes;
    let master = config.cm();
    config.node(master)?;
    let mut links = BTreeMap::new();
    let mut receivers = Vec::new();
    for n in &config.nodes {
        let (tx, rx) = mpsc::channel(depth);
        links.insert(NodeId(n.id), tx);
        receivers.push((NodeId(n.id), n.addr.clone(), rx));
    }
    let clock_link = Arc::new(ClockLink {
        addrs: config
            .nodes
            .iter()
            .map(|n| (NodeId(n.id), n.addr.clone()))
            .collect(),
        state: std::sync::Mutex::new(ClockState {
            master,
            conn: ClockConn::Down,
        }),
        core: std::sync::OnceLock::new(),
    });
    let addrs =
        lease_udp::resolve_nodes(config.nodes.iter().map(|n| (NodeId(n.id), n.addr.as_str())));
    let desk = process.lease_desk();
    let lease_thread = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = Arc::new(Ticker {
        next_at: std::sync::Mutex::new(u64::MAX),
        earlier: std::sync::Condvar::new(),
    });
    // Without a lease socket the lease goes over the TCP links (slower to
    // renew under load, but correct).
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| Ok((s.try_clone()?, s)))
        .map_err(|e| tracing::warn!("no lease socket ({e}); leases over TCP"))
        .ok();
    let io = TokioIo {
        links,
        clock_link: clock_link.clone(),
        lease: socket
            .as_ref()
            .and_then(|(s, _)| s.try_clone().ok())
            .map(|s| (s, addrs.clone())),
        lease_thread: lease_thread.clone(),
        ticker: ticker.clone(),
    };
    let core = Core::new(config, process, Box::new(io));
    let _ = clock_link.core.set(Arc::downgrade(&core));
    {
        let core = Arc::downgrade(&core);
        std::thread::Builder::new()
            .name("meridian-client-ticker".into())
            .spawn(move || tick_thread(core, ticker))
            .map_err(|e| ClientError::Os(format!("cannot start the ticker thread: {e}")))?;
    }
    if let Some((_, thread_socket)) = socket {
        let leases = ClientLeases {
            desk,
            core: Arc::downgrade(&core),
            rt: tokio::runtime::Handle::current(),
            by_addr: addrs.iter().map(|(n, a)| (*a, *n)).collect(),
            addrs,
        };
        match lease_udp::spawn("client-lease", thread_socket, leases, mono_ns) {
            Ok(_) => lease_thread.store(true, std::sync::atomic::Ordering::Release),
            Err(e) => {
                tracing::warn!("no lease thread ({e}); leases renewed on the runtime, over TCP")
            }
        }
    }
    for (node, addr, rx) in receivers {
        tokio::spawn(link(Arc::downgrade(&core), node, addr, rx, batch));
    }
    core.tick();
    Ok(core)
}

/// The dedicated link to the clock master, on threads of its own.
///
/// A clock synchronisation's sample is `[send, receive]` in local time,
/// and the uncertainty of every timestamp this client takes is the width
/// of its best sample (FaRMv2 §4.1). On the runtime, a sync waited in the
/// link task's queue before it was written and its reply waited for a
/// busy worker before it was timestamped: under load the sample was 115–
/// 235 µs wide for a 30 µs exchange. Here the request is written in line
/// by the process's own send (a short write on a `TCP_NODELAY` socket),
/// and a reader thread blocked on the socket hands the reply to the
/// process the moment it arrives. Either way the sample only widens, so
/// the bounds stay valid; only their width changes. The link follows the
/// master: a sync the process addresses to another node (its CM changed,
/// FaRMv2 §4.3) moves the link there. It used to stay bound to the first
/// master, so after a CM failover every sync went over the runtime links
/// and the uncertainty grew (313 against 191 µs in a TATP run at 1M
/// subscribers after a failover).
struct ClockLink {
    /// Every node's address: the link follows the clock master wherever
    /// the process sends its syncs (after a CM change, the new master).
    addrs: BTreeMap<NodeId, String>,
    state: std::sync::Mutex<ClockState>,
    core: std::sync::OnceLock<Weak<Core>>,
}

/// The master the link is for, and its connection.
struct ClockState {
    master: NodeId,
    conn: ClockConn,
}

enum ClockConn {
    /// Not connected; the next send starts a connector thread.
    Down,
    /// A connector thread is at work; what is sent meanwhile waits here
    /// (at most `CLOCK_PENDING_BYTES`; beyond that it is dropped, like a
    /// lost message).
    Connecting { pending: Vec<u8> },
    /// Connected: `gen` tells a stale reader's exit from the current one.
    Up {
        stream: std::net::TcpStream,
        gen: u64,
    },
}

/// Bytes of clock syncs held while the clock link connects.
const CLOCK_PENDING_BYTES: usize = 4096;

/// Connection generations: a reader or connector of an older one finds
/// the link moved on and leaves it alone.
static CLOCK_GEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl ClockLink {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether syncs to `node` can go on this link (its address is known).
    fn knows(&self, node: NodeId) -> bool {
        self.addrs.contains_key(&node)
    }

    /// Write `bytes` (one encoded sync to `to`), or hold it while
    /// connecting. A sync to another node than the link's master (the
    /// CM changed) moves the link there: the old connection is shut (its
    /// outstanding syncs time out, as lost messages do) and a new one is
    /// made. Called under the process lock: it never calls into the
    /// process.
    fn send(self: &Arc<Self>, to: NodeId, bytes: &[u8]) {
        use std::io::Write;
        let mut st = self.lock();
        if st.master != to {
            if let ClockConn::Up { stream, .. } = &st.conn {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            tracing::info!("clock link moves from {} to {to}", st.master);
            st.master = to;
            st.conn = ClockConn::Down;
        }
        let master = st.master;
        match &mut st.conn {
            ClockConn::Up { stream, .. } => {
                if let Err(e) = stream.write_all(bytes) {
                    tracing::debug!("clock link to {master} failed: {e}");
                    // The reader sees the shutdown, marks the link down
                    // and fails the outstanding syncs.
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
            }
            ClockConn::Connecting { pending } => {
                if pending.len() + bytes.len() <= CLOCK_PENDING_BYTES {
                    pending.extend_from_slice(bytes);
                }
            }
            ClockConn::Down => {
                let Some(addr) = self.addrs.get(&master).cloned() else {
                    return;
                };
                st.conn = ClockConn::Connecting {
                    pending: bytes.to_vec(),
                };
                let me = self.clone();
                let gen = CLOCK_GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let spawned = std::thread::Builder::new()
                    .name("meridian-clock-link".into())
                    .spawn(move || me.connect(master, addr, gen));
                if let Err(e) = spawned {
                    tracing::warn!("cannot start the clock link's thread: {e}");
                    st.conn = ClockConn::Down;
                }
            }
        }
    }

    /// The link to `master` is down: fail what is outstanding there (as
    /// the runtime links do), outside the link's lock.
    fn down(&self, master: NodeId) {
        if let Some(c) = self.core.get().and_then(|c| c.upgrade()) {
            c.on_disconnect(master);
        }
    }

    /// Whether the link still waits for this connector (same master, still
    /// connecting): a connector for a master the link left gives up.
    fn still_connecting(st: &ClockState, master: NodeId) -> bool {
        st.master == master && matches!(st.conn, ClockConn::Connecting { .. })
    }

    fn connect(self: Arc<Self>, master: NodeId, addr: String, gen: u64) {
        use std::io::Write;
        use std::net::ToSocketAddrs;
        let stream = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .and_then(|a| {
                std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(500)).ok()
            });
        let reader = stream.as_ref().and_then(|s| {
            let _ = s.set_nodelay(true);
            // Writes happen under the process lock: a master that stops
            // reading must cost a dropped sync, never a stalled client.
            let _ = s.set_write_timeout(Some(std::time::Duration::from_millis(1)));
            s.try_clone().ok()
        });
        let (Some(mut stream), Some(reader)) = (stream, reader) else {
            // Back off a little, so that a dead master is not dialled in a
            // tight loop, then fail the syncs that waited.
            std::thread::sleep(std::time::Duration::from_millis(10));
            let mut st = self.lock();
            if Self::still_connecting(&st, master) {
                st.conn = ClockConn::Down;
                drop(st);
                self.down(master);
            }
            return;
        };
        {
            let mut st = self.lock();
            if !Self::still_connecting(&st, master) {
                return;
            }
            if let ClockConn::Connecting { pending } = &mut st.conn {
                if stream.write_all(pending).is_err() {
                    st.conn = ClockConn::Down;
                    drop(st);
                    self.down(master);
                    return;
                }
            }
            st.conn = ClockConn::Up { stream, gen };
        }
        self.read_loop(master, reader, gen);
    }

    /// Deliver every reply to the process as it arrives; on EOF or an
    /// error, mark the link down (if it is still this connection).
    fn read_loop(&self, master: NodeId, mut r: std::net::TcpStream, gen: u64) {
        use std::io::Read;
        let mut buf: Vec<u8> = Vec::with_capacity(4096);
        let mut chunk = [0u8; 4096];
        'conn: loop {
            let n = match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            loop {
                match meridian_wire::decode_frame(&buf) {
                    Ok(Some((frame, used))) => {
                        buf.drain(..used);
                        match self.core.get().and_then(|c| c.upgrade()) {
                            Some(c) => c.on_message(master, frame),
                            None => return,
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("bad frame on the clock link to {master}: {e}");
                        break 'conn;
                    }
                }
            }
        }
        let current = {
            let mut st = self.lock();
            let current = matches!(&st.conn, ClockConn::Up { gen: g, .. } if *g == gen);
            if current {
                st.conn = ClockConn::Down;
            }
            current
        };
        if current {
            self.down(master);
        }
    }
}

/// One link to `node` ([`meridian_transport::run_link`]): replies go to
/// the core; a lost connection fails the RPCs outstanding on it. Ends when
/// the core is gone.
async fn link(
    core: Weak<Core>,
    node: NodeId,
    addr: String,
    rx: mpsc::Receiver<Vec<u8>>,
    max_batch_bytes: usize,
) {
    let down = core.clone();
    meridian_transport::run_link(
        node.to_string(),
        addr,
        rx,
        max_batch_bytes,
        move |frames| match core.upgrade() {
            Some(c) => {
                for f in frames.drain(..) {
                    c.on_message(node, f);
                }
                true
            }
            None => false,
        },
        move || match down.upgrade() {
            Some(c) => {
                c.on_disconnect(node);
                true
            }
            None => false,
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// The clock link follows the master: syncs addressed to another node
    /// (a CM change) close the old connection and go to the new master.
    #[test]
    fn the_clock_link_follows_the_master() {
        use std::io::Read;
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let link = Arc::new(ClockLink {
            addrs: [
                (NodeId(0), a.local_addr().unwrap().to_string()),
                (NodeId(1), b.local_addr().unwrap().to_string()),
            ]
            .into_iter()
            .collect(),
            state: std::sync::Mutex::new(ClockState {
                master: NodeId(0),
                conn: ClockConn::Down,
            }),
            core: std::sync::OnceLock::new(),
        });
        assert!(link.knows(NodeId(1)) && !link.knows(NodeId(7)));
        let read_exact = |s: &mut std::net::TcpStream, n: usize| {
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut buf = vec![0u8; n];
            s.read_exact(&mut buf).unwrap();
            buf
        };
        link.send(NodeId(0), b"sync-a");
        let (mut at_a, _) = a.accept().unwrap();
        assert_eq!(read_exact(&mut at_a, 6), b"sync-a");
        // Wait until the link is up, so the next send finds a connection
        // to close.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !matches!(link.lock().conn, ClockConn::Up { .. }) {
            assert!(std::time::Instant::now() < deadline, "never connected");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        link.send(NodeId(1), b"sync-b");
        let (mut at_b, _) = b.accept().unwrap();
        assert_eq!(read_exact(&mut at_b, 6), b"sync-b");
        // The old master's connection was closed.
        let mut rest = Vec::new();
        at_a.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        assert_eq!(at_a.read_to_end(&mut rest).unwrap(), 0);
        assert_eq!(link.lock().master, NodeId(1));
    }

    /// An earlier request wakes a ticker asleep until a later one, and each
    /// tick comes no earlier than asked. (A ticker that ignored earlier
    /// requests would tick first at the later time and fail this.)
    #[test]
    fn an_earlier_request_is_served_before_a_later_one() {
        let t = Arc::new(Ticker {
            next_at: std::sync::Mutex::new(u64::MAX),
            earlier: std::sync::Condvar::new(),
        });
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let th = {
            let (t, ticks, stop) = (t.clone(), ticks.clone(), stop.clone());
            std::thread::spawn(move || {
                serve(
                    &t,
                    || {
                        ticks.lock().unwrap().push(mono_ns());
                        !stop.load(Ordering::SeqCst)
                    },
                    || true,
                )
            })
        };
        let start = mono_ns();
        t.request(start + 2_000_000_000); // 2 s: the thread sleeps on it
        std::thread::sleep(std::time::Duration::from_millis(20));
        t.request(start + 50_000_000); // 50 ms: must wake it
        t.request(start + 3_000_000_000); // later: changes nothing
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ticks.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "no tick at all");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let first = ticks.lock().unwrap()[0];
        assert!(first >= start + 50_000_000, "ticked before it was asked to");
        assert!(
            first < start + 1_500_000_000,
            "the earlier request waited for the later one ({} ms)",
            (first - start) / 1_000_000
        );
        stop.store(true, Ordering::SeqCst);
        t.request(0);
        th.join().unwrap();
    }
}
