//! # Node runtime
//!
//! A node process owns the sockets, the threads and the real clock, and
//! drives the I/O-free engines:
//!
//! - the [`meridian_txn::Participant`] (regions, log, commit protocol),
//!   behind one mutex: each connection's reader decodes a whole batch of
//!   frames, handles it under a single lock acquisition and answers with a
//!   single write. Reads and scans are answered straight from storage.
//! - the clock: node 0 (the CM) is the clock master and answers `ClockSync`
//!   with its monotonic clock; every other node synchronises with it every
//!   `clock.sync_interval_us` (FaRMv2 §4.1).
//! - GC: every 50 ms the participant's GC safe point is advanced to the
//!   clock's lower bound minus `limits.gc_window_ms`.
//! - thin clients: `Execute` runs a one-shot transaction with an embedded
//!   [`meridian_client::Client`], so the node coordinates for the CLI.
//! - the CM role (node 0): `RegisterClient` hands out coordinator ids.
//!
//! The runtime is single-threaded (tokio current-thread): a node is one
//! core's worth of work, and three nodes plus clients share two cores here.

use meridian_client::{mono_ns, Client};
use meridian_config::Configuration;
use meridian_time::{ClockSync, SyncSample};
use meridian_transport::{Connection, FrameReader, Outbox};
use meridian_txn::Participant;
use meridian_wire::{
    encode_frame, ClientOp, ClientOpResult, Frame, NodeId, NodeStatus, Request, Response, Timestamp,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::OnceCell;

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
}

struct State {
    id: NodeId,
    config: Configuration,
    participant: Mutex<Participant>,
    clock: Mutex<ClockSync>,
    next_coordinator: AtomicU64,
    requests: AtomicU64,
    embedded: OnceCell<Client>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Run node `id` of `config` until the process is killed.
///
/// Errors: [`NodeError`] if the node is unknown or cannot listen.
pub async fn run(config: Configuration, id: NodeId) -> Result<(), NodeError> {
    let addr = config.node(id)?.addr.clone();
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| NodeError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let is_master = config.cm() == id;
    let state = Arc::new(State {
        id,
        participant: Mutex::new(Participant::new(id, &config)),
        clock: Mutex::new(if is_master {
            ClockSync::master()
        } else {
            ClockSync::new(config.clock.drift_ppm)
        }),
        // Coordinator ids: the CM hands them out; ids below 1000 are left for
        // nodes coordinating for thin clients (node n uses 1 + n).
        next_coordinator: AtomicU64::new(1000),
        requests: AtomicU64::new(0),
        embedded: OnceCell::new(),
        config,
    });
    tracing::info!(node = %id, %addr, master = is_master, "node listening");
    if !is_master {
        tokio::spawn(clock_sync_loop(state.clone()));
    }
    tokio::spawn(gc_loop(state.clone()));
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
        let st = state.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(st, stream).await {
                tracing::warn!(%peer, "connection closed: {e}");
            }
        });
    }
}

async fn clock_sync_loop(state: Arc<State>) {
    let interval = Duration::from_micros(state.config.clock.sync_interval_us.max(100));
    loop {
        let cm_addr = match state.config.node(state.config.cm()) {
            Ok(n) => n.addr.clone(),
            Err(e) => {
                tracing::error!("no clock master: {e}");
                return;
            }
        };
        let conn = match Connection::connect(&cm_addr, 16, 4096, 1000).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("clock master not reachable yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while !conn.is_closed() {
            let send = mono_ns();
            if let Ok(Response::MasterTime { master_ns }) =
                conn.call(Vec::new(), Request::ClockSync).await
            {
                let recv = mono_ns();
                if let Err(e) = lock(&state.clock).on_sync(SyncSample {
                    send_local_ns: send,
                    master_ns,
                    recv_local_ns: recv,
                }) {
                    tracing::error!("clock sync rejected: {e}");
                }
            }
            tokio::time::sleep(interval).await;
        }
    }
}

async fn gc_loop(state: Arc<State>) {
    let window_ns = state.config.limits.gc_window_ms * 1_000_000;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let lower = lock(&state.clock).time(mono_ns()).map(|iv| iv.lower);
        if let Ok(lower) = lower {
            let mut p = lock(&state.participant);
            p.gc(Timestamp(lower.saturating_sub(window_ns)));
        }
    }
}

async fn serve(
    state: Arc<State>,
    stream: tokio::net::TcpStream,
) -> Result<(), meridian_transport::TransportError> {
    let limits = &state.config.limits;
    let (r, w) = stream.into_split();
    let outbox = Outbox::spawn(
        w,
        limits.max_inflight_per_connection,
        limits.max_batch_bytes,
        None,
    );
    let mut reader = FrameReader::new(r);
    let mut frames = Vec::with_capacity(64);
    let mut out = Vec::with_capacity(64 << 10);
    loop {
        frames.clear();
        if !reader.next_batch(&mut frames).await? {
            return Ok(());
        }
        out.clear();
        state
            .requests
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        {
            let mut p = lock(&state.participant);
            for f in frames.drain(..) {
                let (id, truncate, req) = match f {
                    Frame::Request { id, truncate, req } => (Some(id), truncate, req),
                    Frame::OneWay { truncate, req } => (None, truncate, req),
                    Frame::Response { .. } => continue,
                };
                let resp = match p.handle(&truncate, &req) {
                    Some(r) => r,
                    None => match local_request(&state, &p, req) {
                        Local::Now(r) => r,
                        Local::Later(req) => {
                            let (st, ob) = (state.clone(), outbox.clone());
                            tokio::spawn(async move {
                                let resp = execute(&st, req).await;
                                if let Some(id) = id {
                                    let mut buf = Vec::new();
                                    if encode_frame(&Frame::Response { id, resp }, &mut buf).is_ok()
                                    {
                                        let _ = ob.send(buf).await;
                                    }
                                }
                            });
                            continue;
                        }
                    },
                };
                if let Some(id) = id {
                    if let Err(e) = encode_frame(&Frame::Response { id, resp }, &mut out) {
                        tracing::warn!("cannot encode response: {e}");
                    }
                }
            }
        }
        if !out.is_empty() {
            outbox.send(std::mem::take(&mut out)).await?;
            out = Vec::with_capacity(64 << 10);
        }
    }
}

enum Local {
    Now(Response),
    Later(Vec<ClientOp>),
}

fn local_request(state: &State, p: &Participant, req: Request) -> Local {
    Local::Now(match req {
        Request::Ping => Response::Pong,
        Request::ClockSync => {
            if state.config.cm() == state.id {
                Response::MasterTime {
                    master_ns: mono_ns(),
                }
            } else {
                Response::Error(format!("{} is not the clock master", state.id))
            }
        }
        Request::RegisterClient => {
            if state.config.cm() != state.id {
                return Local::Now(Response::Error(format!(
                    "{} is not the CM; register with {}",
                    state.id,
                    state.config.cm()
                )));
            }
            match state.config.to_toml() {
                Ok(config_toml) => Response::Registered {
                    coordinator: state.next_coordinator.fetch_add(1, Ordering::Relaxed),
                    config_toml,
                },
                Err(e) => Response::Error(e.to_string()),
            }
        }
        Request::Status => {
            let (uncertainty_ns, syncs) = {
                let mut c = lock(&state.clock);
                (
                    c.time(mono_ns())
                        .map(|iv| iv.uncertainty_ns())
                        .unwrap_or(u64::MAX),
                    c.stats().syncs,
                )
            };
            Response::Status(NodeStatus {
                node: state.id,
                config: state.config.id(),
                uncertainty_ns,
                syncs,
                primary_regions: p.primary_regions().to_vec(),
                backup_regions: p.backup_regions().to_vec(),
                objects: p.object_count() as u64,
                log_records: p.log_len() as u64,
                requests: state.requests.load(Ordering::Relaxed),
            })
        }
        Request::Execute { ops } => return Local::Later(ops),
        other => Response::Error(format!("unsupported request {other:?}")),
    })
}

/// Run a thin client's one-shot transaction with the embedded client.
async fn execute(state: &Arc<State>, ops: Vec<ClientOp>) -> Response {
    let client = match state
        .embedded
        .get_or_try_init(|| Client::connect_with(state.config.clone(), 1 + state.id.0 as u64))
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
