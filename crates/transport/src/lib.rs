//! # TCP transport
//!
//! **Problem.** FaRM's speed comes from RDMA: one-sided reads and log
//! appends that never interrupt the remote CPU, and NICs that batch. Over
//! TCP the costs are system calls and wake-ups, so the transport's job is to
//! spend as few of them per message as possible.
//!
//! **Design.**
//! - Frames are length-prefixed `bincode` ([`meridian_wire::encode_frame`]).
//! - Writes are coalesced: every connection has one writer task fed by a
//!   bounded channel of encoded frames; it drains everything queued (up to
//!   `max_batch_bytes`) into one buffer and issues a single `write_all`.
//! - Reads are batched: [`FrameReader::next_batch`] decodes every complete
//!   frame in the receive buffer, so a server handles a whole batch under one
//!   lock and answers it with one write.
//! - Requests are pipelined: [`Connection`] tags each request with an id and
//!   matches responses out of order, so any number of requests can be
//!   outstanding on one socket (bounded by `max_inflight`).
//! - Process shells (the client's and the node's) talk to nodes over
//!   [`run_link`]: a reconnecting link that writes queued frames in
//!   batches and hands every received batch, and every loss of the
//!   connection, to its owner; a lost connection is re-established.
//!
//! Malformed or oversized frames are a [`TransportError`]: the connection is
//! closed and the error logged; nothing else is affected.

pub mod lease_udp;

use meridian_wire::{
    decode_frame, encode_frame, Frame, Request, Response, Truncation, TxId, WireError,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Transport errors.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Socket error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// Bad frame from the peer.
    #[error("bad frame: {0}")]
    Wire(#[from] WireError),
    /// The connection is closed.
    #[error("connection to {0} closed")]
    Closed(String),
    /// No response within the timeout.
    #[error("request to {peer} timed out after {ms} ms")]
    Timeout {
        /// Peer address.
        peer: String,
        /// Timeout, ms.
        ms: u64,
    },
    /// A frame the peer began did not complete within the limit
    /// (`meridian_config::FRAME_TIMEOUT_MS` at a node): a stalled or trickling sender, whose
    /// connection is closed so it holds no buffer for good.
    #[error("a frame did not complete within {ms} ms")]
    FrameTimeout {
        /// The limit, ms.
        ms: u64,
    },
}

/// Reads frames in batches from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    buf: bytes::BytesMut,
    /// How long a begun frame may take to complete; `None`: no bound.
    frame_timeout: Option<std::time::Duration>,
    /// When the bytes of the incomplete frame in `buf` began to arrive.
    frame_started: Option<tokio::time::Instant>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wrap a read half.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            buf: bytes::BytesMut::with_capacity(64 << 10),
            frame_timeout: None,
            frame_started: None,
        }
    }

    /// Bound how long a frame may take from its first byte to its last
    /// (`0`: no bound): past it, [`FrameReader::next_batch`] fails with
    /// [`TransportError::FrameTimeout`]. A connection idle between frames
    /// is not bounded.
    pub fn with_frame_timeout_ms(mut self, ms: u64) -> Self {
        self.frame_timeout = (ms > 0).then(|| std::time::Duration::from_millis(ms));
        self
    }

    /// Wait for at least one frame, then append every complete frame in the
    /// buffer to `out`. Returns `Ok(false)` on a clean end of stream.
    ///
    /// Errors: I/O errors, malformed or oversized frames.
    pub async fn next_batch(&mut self, out: &mut Vec<Frame>) -> Result<bool, TransportError> {
        loop {
            let mut consumed = 0;
            while let Some((frame, n)) = decode_frame(&self.buf[consumed..])? {
                out.push(frame);
                consumed += n;
            }
            if consumed > 0 {
                let _ = self.buf.split_to(consumed);
                self.frame_started = (!self.buf.is_empty()).then(tokio::time::Instant::now);
                return Ok(true);
            }
            if self.buf.capacity() - self.buf.len() < 16 << 10 {
                self.buf.reserve(64 << 10);
            }
            let read = self.inner.read_buf(&mut self.buf);
            let n = match (self.frame_timeout, self.frame_started) {
                (Some(limit), Some(started)) => {
                    match tokio::time::timeout_at(started + limit, read).await {
                        Ok(r) => r?,
                        Err(_) => {
                            return Err(TransportError::FrameTimeout {
                                ms: limit.as_millis() as u64,
                            })
                        }
                    }
                }
                _ => read.await?,
            };
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(false)
                } else {
                    Err(TransportError::Closed("peer (mid-frame)".into()))
                };
            }
            if self.frame_started.is_none() {
                self.frame_started = Some(tokio::time::Instant::now());
            }
        }
    }
}

/// A writer task that coalesces queued byte buffers into single writes.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Vec<u8>>,
}

impl Outbox {
    /// Spawn the writer task for `w`, queueing at most `depth` buffers and
    /// writing at most `max_batch_bytes` per system call (soft bound).
    pub fn spawn<W: AsyncWrite + Unpin + Send + 'static>(
        mut w: W,
        depth: usize,
        max_batch_bytes: usize,
        on_close: Option<Arc<AtomicBool>>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(depth.max(1));
        tokio::spawn(async move {
            let mut batch: Vec<u8> = Vec::with_capacity(64 << 10);
            while let Some(first) = rx.recv().await {
                // As in `run_link`: one write for every frame ready now.
                tokio::task::yield_now().await;
                fill_batch(&mut batch, &first, &mut rx, max_batch_bytes);
                if let Err(e) = w.write_all(&batch).await {
                    tracing::debug!("write failed: {e}");
                    break;
                }
            }
            if let Some(flag) = on_close {
                flag.store(true, Ordering::Release);
            }
        });
        Outbox { tx }
    }

    /// Queue an encoded buffer (waits if the queue is full).
    ///
    /// Errors: [`TransportError::Closed`] once the writer has stopped.
    pub async fn send(&self, bytes: Vec<u8>) -> Result<(), TransportError> {
        self.tx
            .send(bytes)
            .await
            .map_err(|_| TransportError::Closed("outbox".into()))
    }
}

/// A request sent with [`Connection::start`], awaiting its response.
pub struct PendingReply {
    id: u64,
    rx: oneshot::Receiver<Response>,
}

type PendingMap = Arc<Mutex<HashMap<u64, oneshot::Sender<Response>>>>;

/// A client connection with pipelined request/response matching.
pub struct Connection {
    peer: String,
    outbox: Outbox,
    pending: PendingMap,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    timeout_ms: u64,
}

impl Connection {
    /// Connect to `addr`.
    ///
    /// Errors: [`TransportError::Io`] if the connection fails.
    pub async fn connect(
        addr: &str,
        depth: usize,
        max_batch_bytes: usize,
        timeout_ms: u64,
    ) -> Result<Arc<Self>, TransportError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let closed = Arc::new(AtomicBool::new(false));
        let outbox = Outbox::spawn(w, depth, max_batch_bytes, Some(closed.clone()));
        let pending: PendingMap = Arc::new(Mutex::new(HashMap::new()));
        let conn = Arc::new(Connection {
            peer: addr.to_string(),
            outbox,
            pending: pending.clone(),
            next_id: AtomicU64::new(1),
            closed: closed.clone(),
            timeout_ms,
        });
        let peer = addr.to_string();
        tokio::spawn(async move {
            let mut reader = FrameReader::new(r);
            let mut frames = Vec::new();
            loop {
                frames.clear();
                match reader.next_batch(&mut frames).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        tracing::warn!("connection to {peer}: {e}");
                        break;
                    }
                }
                let mut map = match pending.lock() {
                    Ok(m) => m,
                    Err(p) => p.into_inner(),
                };
                for f in frames.drain(..) {
                    if let Frame::Response { id, resp } = f {
                        if let Some(tx) = map.remove(&id) {
                            let _ = tx.send(resp);
                        }
                    }
                }
            }
            closed.store(true, Ordering::Release);
            // Fail everything outstanding.
            if let Ok(mut map) = pending.lock() {
                map.clear();
            }
        });
        Ok(conn)
    }

    /// The peer address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// True once the connection is known to be closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Send a request; returns a handle for its response.
    ///
    /// Errors: [`TransportError::Closed`], encoding errors.
    pub async fn start(
        &self,
        truncate: Vec<TxId>,
        req: Request,
    ) -> Result<PendingReply, TransportError> {
        if self.is_closed() {
            return Err(TransportError::Closed(self.peer.clone()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let mut buf = Vec::with_capacity(64);
        encode_frame(
            &Frame::Request {
                id,
                // A thin caller knows no configuration (wire docs).
                config: meridian_wire::ConfigId(0),
                truncate: Truncation::of(truncate),
                req,
            },
            &mut buf,
        )?;
        match self.pending.lock() {
            Ok(mut m) => m.insert(id, tx),
            Err(p) => p.into_inner().insert(id, tx),
        };
        if let Err(e) = self.outbox.send(buf).await {
            self.forget(id);
            return Err(e);
        }
        Ok(PendingReply { id, rx })
    }

    fn forget(&self, id: u64) {
        match self.pending.lock() {
            Ok(mut m) => m.remove(&id),
            Err(p) => p.into_inner().remove(&id),
        };
    }

    /// Await a response started with [`Connection::start`], with the
    /// timeout. A timed-out request is removed from the pending map, so
    /// the map cannot grow without bound.
    ///
    /// Errors: [`TransportError::Timeout`], [`TransportError::Closed`].
    pub async fn finish(&self, pending: PendingReply) -> Result<Response, TransportError> {
        let PendingReply { id, rx } = pending;
        match tokio::time::timeout(std::time::Duration::from_millis(self.timeout_ms), rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(TransportError::Closed(self.peer.clone())),
            Err(_) => {
                self.forget(id);
                Err(TransportError::Timeout {
                    peer: self.peer.clone(),
                    ms: self.timeout_ms,
                })
            }
        }
    }

    /// Requests awaiting a response.
    pub fn pending_len(&self) -> usize {
        match self.pending.lock() {
            Ok(m) => m.len(),
            Err(p) => p.into_inner().len(),
        }
    }

    /// Request/response round trip.
    ///
    /// Errors: as [`Connection::start`] and [`Connection::finish`].
    pub async fn call(
        &self,
        truncate: Vec<TxId>,
        req: Request,
    ) -> Result<Response, TransportError> {
        let rx = self.start(truncate, req).await?;
        self.finish(rx).await
    }

    /// Send a one-way request (no response).
    ///
    /// Errors: [`TransportError::Closed`], encoding errors.
    pub async fn send_oneway(
        &self,
        truncate: Vec<TxId>,
        req: Request,
    ) -> Result<(), TransportError> {
        let mut buf = Vec::with_capacity(64);
        encode_frame(
            &Frame::OneWay {
                config: meridian_wire::ConfigId(0),
                truncate: Truncation::of(truncate),
                req,
            },
            &mut buf,
        )?;
        self.outbox.send(buf).await
    }
}

/// Coalesce `first` and whatever else is queued on `rx`, up to
/// `max_batch_bytes`, into `batch` (cleared first): one write for many
/// frames.
fn fill_batch(
    batch: &mut Vec<u8>,
    first: &[u8],
    rx: &mut mpsc::Receiver<Vec<u8>>,
    max_batch_bytes: usize,
) {
    batch.clear();
    batch.extend_from_slice(first);
    while batch.len() < max_batch_bytes {
        match rx.try_recv() {
            Ok(more) => batch.extend_from_slice(&more),
            Err(_) => break,
        }
    }
}

/// A reconnecting link to one peer, run as a task by a process shell.
///
/// Connects to `addr` (retrying with back-off from 1 ms to 1 s), writes
/// the encoded frames queued on `rx` in batches of up to
/// `max_batch_bytes`, and calls `on_frames` with every batch of frames
/// received. Whenever the connection cannot be made or is lost, frames
/// queued meanwhile are dropped (their RPCs would only time out) and
/// `on_down` is called, so the owner fails what was outstanding; then the
/// link reconnects. While it backs off, every frame sent is dropped as it
/// arrives, with `on_down` again, so an RPC to a dead peer fails at once. `on_frames` and `on_down` return `false` once their
/// owner is gone, and the link ends; it also ends when `rx` closes.
/// `name` labels log lines.
pub async fn run_link(
    name: String,
    addr: String,
    mut rx: mpsc::Receiver<Vec<u8>>,
    max_batch_bytes: usize,
    on_frames: impl Fn(&mut Vec<Frame>) -> bool + Send + Sync + 'static,
    on_down: impl Fn() -> bool + Send + Sync + 'static,
) {
    let on_frames = Arc::new(on_frames);
    let mut backoff_ms = 1;
    loop {
        let stream = match TcpStream::connect(&addr).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("cannot reach {name} at {addr}: {e}");
                while rx.try_recv().is_ok() {}
                if !on_down() {
                    return;
                }
                // Back off, but fail what is sent meanwhile at once: an RPC
                // to a dead peer waited for the next attempt (up to a
                // second), which stretched every failover on real
                // processes by ~150 ms.
                let wake = tokio::time::sleep(std::time::Duration::from_millis(backoff_ms));
                tokio::pin!(wake);
                loop {
                    tokio::select! {
                        _ = &mut wake => break,
                        frame = rx.recv() => {
                            if frame.is_none() {
                                return;
                            }
                            while rx.try_recv().is_ok() {}
                            if !on_down() {
                                return;
                            }
                        }
                    }
                }
                backoff_ms = (backoff_ms * 2).min(1000);
                continue;
            }
        };
        backoff_ms = 1;
        let _ = stream.set_nodelay(true);
        let (r, mut w) = stream.into_split();
        let deliver = on_frames.clone();
        let mut reader = tokio::spawn(async move {
            let mut reader = FrameReader::new(r);
            let mut frames = Vec::new();
            loop {
                frames.clear();
                match reader.next_batch(&mut frames).await {
                    Ok(true) => {}
                    Ok(false) => return Ok(()),
                    Err(e) => return Err(e),
                }
                if !deliver(&mut frames) {
                    return Ok(());
                }
            }
        });
        let mut batch: Vec<u8> = Vec::with_capacity(64 << 10);
        let outcome: Result<(), TransportError> = loop {
            tokio::select! {
                first = rx.recv() => {
                    let Some(first) = first else {
                        // The owner is gone.
                        reader.abort();
                        return;
                    };
                    // Let the tasks that are ready queue their frames
                    // first, so that one write carries them all.
                    tokio::task::yield_now().await;
                    fill_batch(&mut batch, &first, &mut rx, max_batch_bytes);
                    if let Err(e) = w.write_all(&batch).await {
                        break Err(e.into());
                    }
                }
                r = &mut reader => {
                    break match r {
                        Ok(Ok(())) => Err(TransportError::Closed(addr.clone())),
                        Ok(Err(e)) => Err(e),
                        Err(e) => Err(TransportError::Closed(format!("{addr}: {e}"))),
                    };
                }
            }
        };
        reader.abort();
        if let Err(e) = outcome {
            tracing::warn!("link to {name} lost: {e}; reconnecting");
        }
        if !on_down() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::AdminRequest;

    /// A frame sent while the link backs off from an unreachable peer is
    /// failed (`on_down`) when it arrives, not at the next connection
    /// attempt, which comes up to a second later.
    #[tokio::test]
    async fn a_frame_to_an_unreachable_peer_fails_at_once_during_back_off() {
        // A port nobody listens on: bind, note it, close.
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let downs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (tx, rx) = mpsc::channel(16);
        let d = downs.clone();
        let link = tokio::spawn(run_link(
            "dead".into(),
            addr,
            rx,
            1 << 16,
            |_| true,
            move || {
                d.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                true
            },
        ));
        // Attempts come at ~1, 3, 7, ..., 511, 1023 ms: at 600 ms the link
        // is in a back-off of 512 ms.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        let before = downs.load(std::sync::atomic::Ordering::SeqCst);
        assert!(before >= 5, "{before} failed attempts");
        tx.send(vec![0u8; 8]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let after = downs.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(after, before + 1, "the frame was failed on arrival");
        drop(tx);
        link.await.unwrap();
    }

    /// A request that times out must not stay in the
    /// pending map forever.
    /// A frame that never completes (a stalled or trickling sender) ends
    /// the read with `FrameTimeout` once the limit passed since its first
    /// byte, while a connection idle between frames is not bounded, and
    /// whole frames still decode.
    #[tokio::test]
    async fn a_frame_that_never_completes_times_out_but_idleness_does_not() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut reader = FrameReader::new(server).with_frame_timeout_ms(100);
        let mut out = Vec::new();
        // Idle for longer than the limit: still waiting, no error.
        let idle = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            reader.next_batch(&mut out),
        )
        .await;
        assert!(idle.is_err(), "an idle connection was cut: {idle:?}");
        // A whole frame decodes.
        let mut buf = Vec::new();
        encode_frame(
            &Frame::Request {
                id: 1,
                config: meridian_wire::ConfigId(1),
                truncate: meridian_wire::Truncation::default(),
                req: Request::Admin(AdminRequest::Ping),
            },
            &mut buf,
        )
        .unwrap();
        client.write_all(&buf).await.unwrap();
        assert!(reader.next_batch(&mut out).await.unwrap());
        assert_eq!(out.len(), 1);
        // Half a frame, then one byte a while: cut at the limit.
        client.write_all(&buf[..6]).await.unwrap();
        let trickle = tokio::spawn(async move {
            for b in &buf[6..9] {
                tokio::time::sleep(std::time::Duration::from_millis(40)).await;
                let _ = client.write_all(&[*b]).await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        });
        let started = std::time::Instant::now();
        let r = reader.next_batch(&mut out).await;
        assert!(
            matches!(r, Err(TransportError::FrameTimeout { ms: 100 })),
            "{r:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        trickle.abort();
    }

    #[tokio::test]
    async fn a_timed_out_request_leaves_the_pending_map() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // A peer that accepts and never answers.
        let silent = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            drop(s);
        });
        let c = Connection::connect(&addr, 16, 4096, 50).await.unwrap();
        for _ in 0..3 {
            let r = c.call(Vec::new(), Request::Admin(AdminRequest::Ping)).await;
            assert!(matches!(r, Err(TransportError::Timeout { .. })), "{r:?}");
        }
        assert_eq!(c.pending_len(), 0, "timed-out requests leaked");
        silent.abort();
    }
}
