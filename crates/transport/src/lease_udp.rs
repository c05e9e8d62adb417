//! # The lease thread: leases over UDP on a thread of their own (FaRM §5.1)
//!
//! **Problem.** A lease is only as good as the promptness of its renewals.
//! When renewals and grants wait behind a node's transaction work (a
//! checkpoint, an fsync, a batch of thousands of frames, or simply three
//! node processes and a load generator on two cores), a healthy machine
//! looks dead and the CM reconfigures for nothing: a false positive.
//!
//! **Design** (FaRM §5.1: "a dedicated lease manager thread ... at the
//! highest user-space priority", lease messages on unreliable datagrams of
//! their own, not behind other traffic). Each node process and each client
//! process runs one lease thread that does nothing else:
//! - it owns a UDP socket (a node's on its own address, the TCP port's
//!   number; a client's on an ephemeral port), so lease messages never
//!   queue behind transaction frames in a TCP stream;
//! - it runs at real-time priority (`SCHED_RR` 1) where the OS allows,
//!   else at the highest `nice`, so load does not starve it;
//! - it answers every lease message at once and sends renewals when due,
//!   through a [`LeaseEndpoint`] that touches only the process's lease
//!   engine (`meridian_process::lease::LeaseDesk`), never the process lock.
//!
//! A datagram carries one frame (`encode_frame`); a malformed one is
//! dropped and counted in the log, like any lost lease message — leases
//! are built to survive loss (five renewals per lease).

use meridian_wire::{decode_frame, encode_frame, ConfigId, Frame, LeaseMessage, NodeId, Request};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// The largest lease datagram (a lease frame is tens of bytes).
pub const MAX_LEASE_DATAGRAM_BYTES: usize = 1024;

/// The longest the thread sleeps without looking at its timers (it also
/// notices a stopped endpoint this often), ns.
const MAX_IDLE_NS: u64 = 20_000_000;

/// What a lease thread serves: a process's lease engine and address book.
pub trait LeaseEndpoint: Send + 'static {
    /// A lease frame arrived from `src` at local time `now_ns`; push what
    /// to send, and where, onto `out`.
    fn on_frame(&mut self, now_ns: u64, src: SocketAddr, frame: Frame, out: &mut Outgoing);
    /// Timers at `now_ns` (renewals due): push what to send onto `out`.
    /// Returns the next local time to look again, or `None` once the
    /// process is gone (the thread then ends).
    fn on_timer(&mut self, now_ns: u64, out: &mut Outgoing) -> Option<u64>;
}

/// Frames a lease thread sends, with their destinations.
pub type Outgoing = Vec<(SocketAddr, Frame)>;

/// A lease message as a one-way frame (a lease message names its own
/// configuration; a release names none, 0).
pub fn lease_frame(msg: LeaseMessage) -> Frame {
    let config = match &msg {
        LeaseMessage::Request { config, .. }
        | LeaseMessage::Grant { config, .. }
        | LeaseMessage::GrantAck { config, .. } => *config,
        LeaseMessage::Release { .. } => ConfigId(0),
    };
    Frame::OneWay {
        config,
        truncate: Default::default(),
        req: Request::Lease(msg),
    }
}

/// The lease thread's address book: each node's `host:port`, resolved.
/// An address that does not resolve is logged and left out (no leases
/// with that node; its lease frames go nowhere, like lost datagrams).
pub fn resolve_nodes<'a>(
    nodes: impl IntoIterator<Item = (NodeId, &'a str)>,
) -> BTreeMap<NodeId, SocketAddr> {
    let mut out = BTreeMap::new();
    for (id, addr) in nodes {
        match addr.to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(a)) => {
                out.insert(id, a);
            }
            _ => {
                tracing::warn!(node = %id, %addr, "cannot resolve a node's address; no leases with it")
            }
        }
    }
    out
}

/// Send `frame` to `to` on `socket`, one datagram. Errors are logged, not
/// returned: a lost lease message is a normal event.
pub fn send_frame(socket: &UdpSocket, to: SocketAddr, frame: &Frame) {
    let mut buf = Vec::with_capacity(64);
    if let Err(e) = encode_frame(frame, &mut buf) {
        tracing::error!("cannot encode a lease frame: {e}");
        return;
    }
    if buf.len() > MAX_LEASE_DATAGRAM_BYTES {
        tracing::error!(bytes = buf.len(), "lease frame too large for a datagram");
        return;
    }
    if let Err(e) = socket.send_to(&buf, to) {
        tracing::debug!(%to, "lease datagram not sent: {e}");
    }
}

/// Raise the calling thread's priority: `SCHED_RR` priority 1 where the
/// OS allows it (root, or `CAP_SYS_NICE`), else `nice` −20, else as is.
/// Returns which one it got, for the log.
pub fn raise_priority() -> &'static str {
    // SAFETY: sched_setscheduler(0, ...) changes only the calling thread's
    // policy; the sched_param is a valid, initialised struct.
    let rr = unsafe {
        let param = libc::sched_param { sched_priority: 1 };
        libc::sched_setscheduler(0, libc::SCHED_RR, &param)
    };
    if rr == 0 {
        return "SCHED_RR 1";
    }
    // SAFETY: setpriority on this thread's tid (PRIO_PROCESS with a tid
    // names one thread on Linux); no memory is passed.
    let nice = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, -20)
    };
    if nice == 0 {
        "nice -20"
    } else {
        "normal (no permission to raise it)"
    }
}

/// Lower the calling thread's priority to `nice` 19, for background work
/// (a checkpoint's encoding) that must not take the CPU from the threads
/// that serve requests on a busy machine, yet must finish (a `SCHED_IDLE`
/// thread could starve for as long as the load lasts). Returns whether
/// it did, for the log.
pub fn lower_priority() -> bool {
    // SAFETY: setpriority on this thread's tid (PRIO_PROCESS with a tid
    // names one thread on Linux); no memory is passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19) == 0
    }
}

/// True for a datagram socket's receive error its reader simply goes on
/// after: a read timeout, an interrupt, or ICMP port unreachable from an
/// earlier send (a peer that is down: not this socket's failure).
pub fn receive_goes_on(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
            | std::io::ErrorKind::ConnectionRefused
    )
}

/// Start the lease thread `name` on `socket`, serving `endpoint` until its
/// [`LeaseEndpoint::on_timer`] returns `None`. `now` reads the local
/// monotonic clock, ns.
///
/// Errors: the thread could not be spawned, or the socket not configured.
pub fn spawn(
    name: &str,
    socket: UdpSocket,
    mut endpoint: impl LeaseEndpoint,
    now: fn() -> u64,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    socket.set_nonblocking(false)?;
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let got = raise_priority();
            tracing::debug!(priority = got, "lease thread started");
            let mut buf = vec![0u8; MAX_LEASE_DATAGRAM_BYTES * 2];
            let mut out: Outgoing = Vec::new();
            loop {
                let t = now();
                let Some(next) = endpoint.on_timer(t, &mut out) else {
                    return;
                };
                for (to, f) in out.drain(..) {
                    send_frame(&socket, to, &f);
                }
                let wait = next.saturating_sub(now()).clamp(100_000, MAX_IDLE_NS);
                if let Err(e) = socket.set_read_timeout(Some(Duration::from_nanos(wait))) {
                    tracing::error!("lease socket: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                match socket.recv_from(&mut buf) {
                    Ok((n, src)) => match decode_frame(&buf[..n]) {
                        Ok(Some((frame, used))) if used == n => {
                            endpoint.on_frame(now(), src, frame, &mut out);
                            for (to, f) in out.drain(..) {
                                send_frame(&socket, to, &f);
                            }
                        }
                        Ok(_) => {
                            tracing::debug!(%src, bytes = n, "malformed lease datagram dropped")
                        }
                        Err(e) => tracing::debug!(%src, "malformed lease datagram dropped: {e}"),
                    },
                    Err(e) if receive_goes_on(&e) => {}
                    Err(e) => {
                        tracing::warn!("lease socket receive failed: {e}");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::{ConfigId, LeaseHolder, LeaseMessage, Request};
    use std::sync::mpsc;

    fn lease_frame(seq: u64) -> Frame {
        Frame::OneWay {
            config: ConfigId(1),
            truncate: Default::default(),
            req: Request::Lease(LeaseMessage::Request {
                config: ConfigId(1),
                holder: LeaseHolder::Client(7),
                seq,
            }),
        }
    }

    /// Echoes every frame back, and stops after `stop_after` frames.
    struct Echo {
        seen: mpsc::Sender<Frame>,
        left: usize,
    }

    impl LeaseEndpoint for Echo {
        fn on_frame(&mut self, _now: u64, src: SocketAddr, frame: Frame, out: &mut Outgoing) {
            self.left = self.left.saturating_sub(1);
            out.push((src, frame.clone()));
            let _ = self.seen.send(frame);
        }
        fn on_timer(&mut self, now: u64, _out: &mut Outgoing) -> Option<u64> {
            (self.left > 0).then_some(now + 1_000_000)
        }
    }

    fn mono() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    #[test]
    fn a_lease_frame_is_answered_and_garbage_is_dropped() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        let h = spawn("lease-test", server, Echo { seen: tx, left: 2 }, mono).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // Garbage first: dropped, the thread goes on.
        client.send_to(&[0xff; 9], addr).unwrap();
        send_frame(&client, addr, &lease_frame(1));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            lease_frame(1)
        );
        let mut buf = [0u8; 256];
        let (n, _) = client.recv_from(&mut buf).unwrap();
        let (back, _) = decode_frame(&buf[..n]).unwrap().unwrap();
        assert_eq!(back, lease_frame(1));
        // The second frame ends the endpoint, and with it the thread.
        send_frame(&client, addr, &lease_frame(2));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            lease_frame(2)
        );
        h.join().unwrap();
    }
}
