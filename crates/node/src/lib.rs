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
//! - a link to the clock master carries the node's own clock syncs;
//! - a timer calls `tick` when the process asks to be woken;
//! - `Execute` (thin clients) runs on an embedded client whose coordinator
//!   id is unique to this node and incarnation; the process bounds how many
//!   run at once.
//!
//! The incarnation (unique across restarts, review finding 6) is a counter
//! in the node's data directory, incremented and fsynced before the node
//! serves anything.
//!
//! The runtime is single-threaded (tokio current-thread): a node is one
//! core's worth of work, and three nodes plus clients share two cores here.

use meridian_client::Client;
use meridian_config::Configuration;
use meridian_process::node::{embedded_coordinator_id, NodeEffect, NodeProcess, Peer};
use meridian_runtime::{mono_ns, wait};
use meridian_transport::{FrameReader, Outbox};
use meridian_wire::{encode_frame, ClientOp, ClientOpResult, Frame, NodeId, Response};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OnceCell};

/// Node errors.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
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
    /// The incarnation counter in the data directory could not be used.
    #[error("incarnation file {path}: {source}")]
    Incarnation {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

struct Shell {
    process: Mutex<NodeProcess>,
    conns: Mutex<BTreeMap<u64, Outbox>>,
    master_link: Option<mpsc::Sender<Vec<u8>>>,
    next_conn: AtomicU64,
    config: Configuration,
    embedded: OnceCell<Client>,
    coordinator: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Read, increment and durably store the node's incarnation counter in
/// `dir/incarnation`. Without a data directory, the wall clock in seconds
/// stands in (unique unless two starts fall in the same second).
fn next_incarnation(dir: Option<&std::path::Path>) -> Result<u32, NodeError> {
    use std::io::Write;
    let Some(dir) = dir else {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1);
        tracing::warn!("no data_dir: incarnation taken from the wall clock");
        return Ok((secs as u32).max(1));
    };
    let path = dir.join("incarnation");
    let err = |source| NodeError::Incarnation {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let prev: u32 = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map_err(|e| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a number: {e}"),
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(err(e)),
    };
    let next = prev.checked_add(1).ok_or_else(|| {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "incarnation counter exhausted",
        ))
    })?;
    let tmp = dir.join("incarnation.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(next.to_string().as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(next)
}

/// Run node `id` of `config` until the process is killed.
///
/// Errors: [`NodeError`] if the node is unknown, cannot listen, or cannot
/// keep its incarnation counter.
pub async fn run(config: Configuration, id: NodeId) -> Result<(), NodeError> {
    let me = config.node(id)?.clone();
    let incarnation = next_incarnation(me.data_dir.as_deref())?;
    let listener = TcpListener::bind(&me.addr)
        .await
        .map_err(|source| NodeError::Bind {
            addr: me.addr.clone(),
            source,
        })?;
    let process = NodeProcess::new(config.clone(), id, incarnation)?;
    let is_master = process.is_clock_master();
    let (master_link, master_rx) = if is_master {
        (None, None)
    } else {
        let (tx, rx) = mpsc::channel(64);
        (Some(tx), Some(rx))
    };
    let shell = Arc::new(Shell {
        process: Mutex::new(process),
        conns: Mutex::new(BTreeMap::new()),
        master_link,
        next_conn: AtomicU64::new(1),
        coordinator: embedded_coordinator_id(id, incarnation),
        embedded: OnceCell::new(),
        config,
    });
    tracing::info!(node = %id, addr = %me.addr, master = is_master, incarnation, "node listening");
    if let Some(rx) = master_rx {
        let addr = shell.config.node(shell.config.cm())?.addr.clone();
        tokio::spawn(master_link_task(shell.clone(), addr, rx));
    }
    let effects = {
        let mut p = lock(&shell.process);
        p.tick(mono_ns());
        p.drain_effects()
    };
    route(&shell, effects).await;
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
    let mut out: BTreeMap<Peer, Vec<u8>> = BTreeMap::new();
    for e in effects {
        match e {
            NodeEffect::Send { to, frame } => {
                let buf = out.entry(to).or_default();
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
            NodeEffect::Wake { at_local_ns } => {
                let sh = shell.clone();
                tokio::spawn(async move {
                    wait::wait_until(at_local_ns).await;
                    let effects = {
                        let mut p = lock(&sh.process);
                        p.tick(mono_ns());
                        p.drain_effects()
                    };
                    route(&sh, effects).await;
                });
            }
            NodeEffect::Execute { peer, id, ops } => {
                let sh = shell.clone();
                tokio::spawn(async move {
                    let resp = execute(&sh, ops).await;
                    let effects = {
                        let mut p = lock(&sh.process);
                        p.executed(peer, id, resp);
                        p.drain_effects()
                    };
                    route(&sh, effects).await;
                });
            }
        }
    }
    for (to, bytes) in out {
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
            Peer::Node(_) => {
                if let Some(l) = &shell.master_link {
                    if let Err(e) = l.try_send(bytes) {
                        tracing::warn!("clock link full or closed: {e}");
                    }
                }
            }
        }
    }
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
    let mut reader = FrameReader::new(r);
    let mut frames = Vec::with_capacity(64);
    let result = loop {
        frames.clear();
        match reader.next_batch(&mut frames).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
        let effects = {
            let mut p = lock(&shell.process);
            let now = mono_ns();
            for f in frames.drain(..) {
                p.on_message(now, Peer::Conn(conn), f);
            }
            p.drain_effects()
        };
        route(&shell, effects).await;
    };
    lock(&shell.conns).remove(&conn);
    result
}

/// The node's own link to the clock master: connect (retrying), send the
/// process's clock syncs, feed replies back.
async fn master_link_task(shell: Arc<Shell>, addr: String, mut rx: mpsc::Receiver<Vec<u8>>) {
    use tokio::io::AsyncWriteExt;
    let master = shell.config.cm();
    loop {
        let stream = match TcpStream::connect(&addr).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("clock master not reachable yet: {e}");
                while rx.try_recv().is_ok() {}
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (r, mut w) = stream.into_split();
        let sh = shell.clone();
        let mut reader = tokio::spawn(async move {
            let mut reader = FrameReader::new(r);
            let mut frames = Vec::new();
            while let Ok(true) = reader.next_batch(&mut frames).await {
                let effects = {
                    let mut p = lock(&sh.process);
                    let now = mono_ns();
                    for f in frames.drain(..) {
                        p.on_message(now, Peer::Node(master), f);
                    }
                    p.drain_effects()
                };
                route(&sh, effects).await;
            }
        });
        loop {
            tokio::select! {
                b = rx.recv() => {
                    let Some(b) = b else { reader.abort(); return };
                    if w.write_all(&b).await.is_err() {
                        break;
                    }
                }
                _ = &mut reader => break,
            }
        }
        reader.abort();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Run a thin client's one-shot transaction with the embedded client.
async fn execute(shell: &Arc<Shell>, ops: Vec<ClientOp>) -> Response {
    let client = match shell
        .embedded
        .get_or_try_init(|| Client::connect_with(shell.config.clone(), shell.coordinator))
        .await
    {
        Ok(c) => c,
        Err(e) => return Response::Executed(Err(format!("cannot start coordinator: {e}"))),
    };
    let mut session = client.session();
    let r = session
        .run(Default::default(), |tx| {
            let ops = ops.clone();
            Box::pin(async move {
                let mut out = Vec::with_capacity(ops.len());
                for op in ops {
                    out.push(match op {
                        ClientOp::Get(k) => ClientOpResult::Value(tx.get(&k).await?),
                        ClientOp::Put(k, v) => {
                            tx.put(k, v).await?;
                            ClientOpResult::Done
                        }
                        ClientOp::Delete(k) => {
                            tx.delete(k).await?;
                            ClientOpResult::Done
                        }
                        ClientOp::Scan { start, end, limit } => {
                            ClientOpResult::Rows(tx.scan(&start, end.as_deref(), limit).await?)
                        }
                    });
                }
                Ok(out)
            })
        })
        .await;
    Response::Executed(r.map_err(|e| e.to_string()))
}
