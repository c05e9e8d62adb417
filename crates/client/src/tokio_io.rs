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
//! ([`Core::on_disconnect`]) and is re-established.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// The tokio implementation of [`Io`].
pub struct TokioIo {
    links: BTreeMap<NodeId, mpsc::Sender<Vec<u8>>>,
    /// `None` if its socket could not be made: syncs then go on the TCP
    /// links to the master's process (wider samples, still correct).
    clock_link: Option<Arc<ClockLink>>,
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
    /// The earliest local time asked for, ns (`u64::MAX`: none).
    next_at: AtomicU64,
    /// While the serving thread sleeps, the local time it sleeps until;
    /// 0 while it runs (it reads `next_at` again before it sleeps).
    sleeping_until: AtomicU64,
    /// The serving thread, to unpark; set when it starts.
    thread: std::sync::OnceLock<std::thread::Thread>,
    /// The thread sleeps until this long before the earliest time asked
    /// for and spins the rest, ns (0: it sleeps until the time itself).
    spin_ns: u64,
}

impl Ticker {
    fn new(spin_ns: u64) -> Ticker {
        Ticker {
            next_at: AtomicU64::new(u64::MAX),
            sleeping_until: AtomicU64::new(0),
            thread: std::sync::OnceLock::new(),
            spin_ns,
        }
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
    /// Ask for a tick at `at_local_ns`. An earlier request than the one
    /// the thread sleeps until wakes it at once; anything else is one
    /// atomic operation, with no system call: a later request, and any
    /// request while the thread runs (it reads `next_at` again before it
    /// sleeps). The thread's own requests, made from inside its tick,
    /// are of that kind. With a mutex and a condition variable every
    /// request took the mutex and every earlier one made a wake-up call
    /// even when nobody slept: the ticker was 44 % of a loaded bench
    /// client's futex calls (TATP, 32 sessions).
    fn request(&self, at_local_ns: u64) {
        let prev = self.next_at.fetch_min(at_local_ns, Ordering::SeqCst);
        // Dekker with `serve`: it stores `sleeping_until`, then reads
        // `next_at`; this stores `next_at`, then reads `sleeping_until`.
        // With both sequentially consistent, either it sees this request
        // and does not sleep, or this sees it asleep and unparks it (an
        // unpark before the park makes the park return at once).
        if at_local_ns < prev && at_local_ns < self.sleeping_until.load(Ordering::SeqCst) {
            if let Some(th) = self.thread.get() {
                th.unpark();
            }
        }
    }
}

/// The ticker's loop: call `tick` once the earliest requested time has
/// come; stop when `tick` or `alive` says the owner is gone. Runs on the
/// thread that [`Ticker::request`] unparks.
fn serve(t: &Ticker, mut tick: impl FnMut() -> bool, alive: impl Fn() -> bool) {
    let _ = t.thread.set(std::thread::current());
    loop {
        let now = mono_ns();
        let next = t.next_at.load(Ordering::SeqCst);
        if next <= now {
            // Requests can only lower `next_at`, so what this takes is due;
            // one made from here on is seen on the next turn.
            t.next_at.swap(u64::MAX, Ordering::SeqCst);
            if !tick() {
                return;
            }
            continue;
        }
        if next - now <= t.spin_ns {
            // Due within the spin margin: spin instead of sleeping, since a
            // woken thread waits for a core on a busy machine. Bounded:
            // `next_at` only moves earlier until the tick takes it.
            std::hint::spin_loop();
            continue;
        }
        // Nothing asked: sleep a second at most, to notice a closed core.
        let until = (next - t.spin_ns).min(now.saturating_add(1_000_000_000));
        t.sleeping_until.store(until, Ordering::SeqCst);
        if t.next_at.load(Ordering::SeqCst) >= until {
            std::thread::park_timeout(std::time::Duration::from_nanos(until - now));
        }
        t.sleeping_until.store(0, Ordering::SeqCst);
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
        // Syncs carry no truncations (the process keeps them for other
        // frames); one that did would go on the TCP link, where the node's
        // process applies them.
        let clock_link = self.clock_link.as_ref().filter(|l| l.knows(to));
        let clock = clock_link.is_some()
            && matches!(
                &frame,
                Frame::Request {
                    req: Request::Clock(ClockRequest::Sync),
                    truncate,
                    ..
                } if truncate.txs.is_empty() && truncate.low.is_none()
            );
        if let (true, Some(clock_link)) = (clock, clock_link) {
            let mut buf = Vec::with_capacity(64);
            match encode_frame(&frame, &mut buf) {
                Ok(()) => clock_link.send(to, &buf),
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
    let addrs =
        lease_udp::resolve_nodes(config.nodes.iter().map(|n| (NodeId(n.id), n.addr.as_str())));
    let clock_link = ClockLink::start(addrs.clone())
        .map_err(|e| tracing::warn!("no clock link ({e}); clock syncs over the TCP links"))
        .ok();
    let desk = process.lease_desk();
    let lease_thread = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = Arc::new(Ticker::new(
        config.limits.ticker_spin_us.saturating_mul(1000),
    ));
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
    if let Some(l) = &clock_link {
        let _ = l.core.set(Arc::downgrade(&core));
    }
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

/// The dedicated link to the clock master: CLOCK-SYNCs as UDP datagrams
/// to the master's lease thread, which answers them at once without its
/// process lock (`meridian_process::node::answer_clock_sync`), and a
/// reader thread of our own that hands each reply to the process the
/// moment it arrives.
///
/// A clock synchronisation's sample is `[send, receive]` in local time,
/// and the uncertainty of every timestamp this client takes is the width
/// of its best sample (FaRMv2 §4.1). Over the runtime's TCP links a sync
/// waited in the link task's queue, then behind the master's other work
/// for its process lock, then for a busy worker here: under load the
/// sample was 115–235 µs wide for a 30 µs exchange. Here the request is
/// sent in line by the process's own send, answered by the master's
/// real-time lease thread, and received by a thread blocked on the
/// socket. Either way the sample only widens, so the bounds stay valid;
/// only their width changes. The link follows the master by itself: each
/// sync goes to the node the process addresses (after a CM change, the new
/// master, FaRMv2 §4.3). A lost datagram is a lost message: the sync's RPC
/// times out and the next one is sent.
struct ClockLink {
    /// Every node's lease (UDP) address.
    addrs: BTreeMap<NodeId, SocketAddr>,
    socket: std::net::UdpSocket,
    core: std::sync::OnceLock<Weak<Core>>,
}

impl ClockLink {
    /// A link on a fresh UDP socket, and its reader thread (which ends with
    /// the core).
    fn start(addrs: BTreeMap<NodeId, SocketAddr>) -> std::io::Result<Arc<ClockLink>> {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
        let reader = socket.try_clone()?;
        let link = Arc::new(ClockLink {
            addrs,
            socket,
            core: std::sync::OnceLock::new(),
        });
        let me = Arc::downgrade(&link);
        std::thread::Builder::new()
            .name("meridian-clock-link".into())
            .spawn(move || read_clock_replies(me, reader))?;
        Ok(link)
    }

    /// Whether syncs to `node` can go on this link (its address is known).
    fn knows(&self, node: NodeId) -> bool {
        self.addrs.contains_key(&node)
    }

    /// Send `bytes` (one encoded sync) to `to`. Called under the process
    /// lock: it never calls into the process, and a full socket buffer
    /// drops the datagram (a lost message) rather than blocking.
    fn send(&self, to: NodeId, bytes: &[u8]) {
        let Some(addr) = self.addrs.get(&to) else {
            return;
        };
        if let Err(e) = self.socket.send_to(bytes, addr) {
            tracing::debug!("clock sync to {to} not sent: {e}");
        }
    }
}

/// The clock link's reader: deliver each reply to the process as it
/// arrives, from the node whose address sent it. Ends when the link (with
/// the core that owns it) is gone.
fn read_clock_replies(link: Weak<ClockLink>, socket: std::net::UdpSocket) {
    let mut buf = vec![0u8; lease_udp::MAX_LEASE_DATAGRAM_BYTES * 2];
    // Wake now and then to notice a closed client.
    let _ = socket.set_read_timeout(Some(std::time::Duration::from_millis(200)));
    loop {
        let got = socket.recv_from(&mut buf);
        let Some(me) = link.upgrade() else {
            return;
        };
        let (n, src) = match got {
            Ok(x) => x,
            Err(e) if lease_udp::receive_goes_on(&e) => continue,
            Err(e) => {
                tracing::warn!("clock link receive failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
        };
        let Some(node) = me
            .addrs
            .iter()
            .find_map(|(id, a)| (*a == src).then_some(*id))
        else {
            tracing::debug!(%src, "a clock reply from an unknown address: dropped");
            continue;
        };
        match meridian_wire::decode_frame(&buf[..n]) {
            Ok(Some((frame @ Frame::Response { .. }, used))) if used == n => {
                match me.core.get().and_then(|c| c.upgrade()) {
                    Some(c) => c.on_message(node, frame),
                    None => return,
                }
            }
            Ok(_) => tracing::debug!(%src, bytes = n, "malformed clock reply dropped"),
            Err(e) => tracing::debug!(%src, "malformed clock reply dropped: {e}"),
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
                c.on_messages(node, frames);
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

    /// The clock link follows the master: each sync goes to the node the
    /// process addresses (after a CM change, the new master), and only
    /// nodes of the address book are known.
    #[test]
    fn the_clock_link_follows_the_master() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
        }
        let link = ClockLink::start(
            [
                (NodeId(0), a.local_addr().unwrap()),
                (NodeId(1), b.local_addr().unwrap()),
            ]
            .into_iter()
            .collect(),
        )
        .unwrap();
        assert!(link.knows(NodeId(1)) && !link.knows(NodeId(7)));
        let mut buf = [0u8; 64];
        link.send(NodeId(0), b"sync-a");
        let (n, _) = a.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"sync-a");
        link.send(NodeId(1), b"sync-b");
        let (n, _) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"sync-b");
        link.send(NodeId(7), b"nowhere");
        a.set_nonblocking(true).unwrap();
        assert!(a.recv_from(&mut buf).is_err(), "nothing else arrived at a");
    }

    /// A ticker with a spin margin sleeps until the margin before the time
    /// asked, then spins, and still ticks no earlier than asked.
    #[test]
    fn a_spinning_ticker_ticks_no_earlier_than_asked() {
        let t = Arc::new(Ticker::new(3_000_000)); // 3 ms margin
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let th = {
            let (t, ticks) = (t.clone(), ticks.clone());
            std::thread::spawn(move || {
                serve(
                    &t,
                    || {
                        ticks.lock().unwrap().push(mono_ns());
                        false
                    },
                    || true,
                )
            })
        };
        let start = mono_ns();
        t.request(start + 40_000_000); // 40 ms
        th.join().unwrap();
        let first = ticks.lock().unwrap()[0];
        assert!(first >= start + 40_000_000, "ticked before it was asked to");
        assert!(
            first < start + 1_000_000_000,
            "no tick near the time asked ({} ms)",
            (first - start) / 1_000_000
        );
    }

    /// An earlier request wakes a ticker asleep until a later one, and each
    /// tick comes no earlier than asked. (A ticker that ignored earlier
    /// requests would tick first at the later time and fail this.)
    #[test]
    fn an_earlier_request_is_served_before_a_later_one() {
        let t = Arc::new(Ticker::new(0));
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
