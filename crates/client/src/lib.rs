//! # Client library: the client is the coordinator
//!
//! As in FaRM, RAMP and RIFL, the application's process coordinates its own
//! transactions: it reads from primaries, buffers writes, keeps its clock
//! synchronised with the clock master and runs commit itself. No server
//! coordinates on its behalf (thin clients are the exception: a node runs
//! this library for them, see `Request::Execute`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = meridian_client::Client::connect("127.0.0.1:7400").await?;
//! let mut session = client.session();
//! let total = session
//!     .run(Default::default(), |tx| Box::pin(async move {
//!         tx.put(b"\x00hello".to_vec(), b"world".to_vec()).await?;
//!         Ok(tx.get(b"\x00hello").await?.map(|v| v.len()))
//!     }))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! **Pieces.**
//! - [`Client`]: connections to every node (pipelined, batched), the
//!   coordinator id from the CM, the clock engine fed by a background sync
//!   task, and the queue of pending TRUNCATEs that ride on later requests.
//! - [`Session`]: FaRM's coordinator thread `t` of a transaction id; runs one
//!   transaction at a time and owns the retry helper [`Session::run`].
//! - [`Txn`]: one transaction, driving the [`meridian_txn::Transaction`]
//!   engine: `get`, `put`, `delete`, `scan`, `commit`, `abort`.
//! - [`wait::wait_until`]: precise sleeps for uncertainty waits (tokio's
//!   timer has millisecond granularity; waits are tens of microseconds).

pub mod wait;

use meridian_config::{Configuration, Limits, RegionMap};
use meridian_time::{ClockSync, SyncSample};
use meridian_transport::{Connection, TransportError};
use meridian_txn::{CommitStep, GetStep, ScanStep, Transaction, TxnError, TxnOptions};
use meridian_wire::{ConfigId, Key, NodeId, Request, Response, Timestamp, TxId, Value};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use meridian_txn::{AbortReason, TxnOptions as Options};

/// Errors connecting a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Network failure.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The CM sent something unexpected.
    #[error("unexpected reply from {0}: {1}")]
    Protocol(String, String),
    /// The configuration the CM sent does not parse.
    #[error(transparent)]
    Config(#[from] meridian_config::ConfigError),
    /// The clock did not synchronise in time.
    #[error("clock did not synchronise with the clock master within {0} ms")]
    ClockTimeout(u64),
}

/// The local monotonic clock, ns (CLOCK_MONOTONIC).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the provided timespec; CLOCK_MONOTONIC is always valid.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Timestamp statistics, for reporting.
#[derive(Debug, Default)]
pub struct TsStats {
    /// Timestamps taken.
    pub count: AtomicU64,
    /// Sum of uncertainties at GET_TS, ns.
    pub uncertainty_ns: AtomicU64,
    /// Sum of time actually waited, ns.
    pub waited_ns: AtomicU64,
}

impl TsStats {
    /// (count, mean uncertainty ns, mean wait ns).
    pub fn snapshot(&self) -> (u64, u64, u64) {
        let n = self.count.load(Ordering::Relaxed);
        let d = n.max(1);
        (
            n,
            self.uncertainty_ns.load(Ordering::Relaxed) / d,
            self.waited_ns.load(Ordering::Relaxed) / d,
        )
    }
}

struct Inner {
    config: Configuration,
    map: Arc<RegionMap>,
    limits: Arc<Limits>,
    conns: HashMap<NodeId, Arc<Connection>>,
    clock: Mutex<ClockSync>,
    coordinator: u64,
    next_thread: AtomicU32,
    truncates: Mutex<HashMap<NodeId, Vec<TxId>>>,
    ts_stats: TsStats,
}

/// A connected client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Client {
    /// Connect through the CM at `cm_addr`: register for a coordinator id,
    /// fetch the configuration, connect to every node and synchronise the
    /// clock.
    ///
    /// Errors: [`ClientError`] on network failure, a bad configuration or a
    /// clock that does not synchronise within 5 s.
    pub async fn connect(cm_addr: &str) -> Result<Client, ClientError> {
        let limits = Limits::default();
        let cm = Connection::connect(
            cm_addr,
            limits.max_inflight_per_connection,
            limits.max_batch_bytes,
            limits.rpc_timeout_ms,
        )
        .await?;
        let (coordinator, config_toml) = match cm.call(Vec::new(), Request::RegisterClient).await? {
            Response::Registered {
                coordinator,
                config_toml,
            } => (coordinator, config_toml),
            other => return Err(ClientError::Protocol(cm_addr.into(), format!("{other:?}"))),
        };
        let config = Configuration::from_toml(&config_toml)?;
        Self::connect_with(config, coordinator).await
    }

    /// Connect with a known configuration and coordinator id (used by nodes
    /// that coordinate for thin clients).
    ///
    /// Errors: as [`Client::connect`].
    pub async fn connect_with(
        config: Configuration,
        coordinator: u64,
    ) -> Result<Client, ClientError> {
        let limits = Arc::new(config.limits.clone());
        let mut conns = HashMap::new();
        for n in &config.nodes {
            let c = Connection::connect(
                &n.addr,
                limits.max_inflight_per_connection,
                limits.max_batch_bytes,
                limits.rpc_timeout_ms,
            )
            .await?;
            conns.insert(NodeId(n.id), c);
        }
        // A dedicated connection for clock sync, so batches do not delay it.
        let cm_addr = config.node(config.cm())?.addr.clone();
        let clock_conn = Connection::connect(&cm_addr, 16, 4096, limits.rpc_timeout_ms).await?;
        let inner = Arc::new(Inner {
            map: Arc::new(RegionMap::new(&config)),
            limits,
            conns,
            clock: Mutex::new(ClockSync::new(config.clock.drift_ppm)),
            coordinator,
            next_thread: AtomicU32::new(0),
            truncates: Mutex::new(HashMap::new()),
            ts_stats: TsStats::default(),
            config,
        });
        let client = Client { inner };
        client.spawn_background(clock_conn);
        let deadline = mono_ns() + 5_000_000_000;
        while !lock(&client.inner.clock).is_synchronised() {
            if mono_ns() > deadline {
                return Err(ClientError::ClockTimeout(5000));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(client)
    }

    fn spawn_background(&self, clock_conn: Arc<Connection>) {
        let weak = Arc::downgrade(&self.inner);
        let interval = Duration::from_micros(self.inner.config.clock.sync_interval_us.max(100));
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { break };
                let send = mono_ns();
                match clock_conn.call(Vec::new(), Request::ClockSync).await {
                    Ok(Response::MasterTime { master_ns }) => {
                        let recv = mono_ns();
                        if let Err(e) = lock(&inner.clock).on_sync(SyncSample {
                            send_local_ns: send,
                            master_ns,
                            recv_local_ns: recv,
                        }) {
                            tracing::error!("clock sync rejected: {e}");
                        }
                    }
                    Ok(other) => tracing::warn!("unexpected clock reply {other:?}"),
                    Err(e) => {
                        tracing::warn!("clock sync failed: {e}");
                        if clock_conn.is_closed() {
                            break;
                        }
                    }
                }
                drop(inner);
                tokio::time::sleep(interval).await;
            }
        });
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let Some(inner) = weak.upgrade() else { break };
                let pending: Vec<(NodeId, Vec<TxId>)> = lock(&inner.truncates)
                    .drain()
                    .filter(|(_, v)| !v.is_empty())
                    .collect();
                for (n, txs) in pending {
                    if let Some(c) = inner.conns.get(&n) {
                        if let Err(e) = c.send_oneway(Vec::new(), Request::Truncate { txs }).await {
                            tracing::warn!("truncate to {n} failed: {e}");
                        }
                    }
                }
            }
        });
    }

    /// The configuration.
    pub fn config(&self) -> &Configuration {
        &self.inner.config
    }

    /// This client's coordinator id (the `m` of its transaction ids).
    pub fn coordinator_id(&self) -> u64 {
        self.inner.coordinator
    }

    /// Timestamp statistics (uncertainty and waiting).
    pub fn ts_stats(&self) -> &TsStats {
        &self.inner.ts_stats
    }

    /// A new session (one coordinator thread).
    pub fn session(&self) -> Session {
        Session {
            client: self.clone(),
            thread: self.inner.next_thread.fetch_add(1, Ordering::Relaxed),
            next_local: 0,
        }
    }

    /// The clock's current uncertainty, ns (`None` if not synchronised).
    pub fn uncertainty_ns(&self) -> Option<u64> {
        lock(&self.inner.clock)
            .time(mono_ns())
            .ok()
            .map(|iv| iv.uncertainty_ns())
    }

    /// GET_TS (FaRMv2 Figure 4): a timestamp, returned once it is in the past.
    ///
    /// Errors: [`TxnError::ClockUnavailable`] if the clock is not synchronised.
    pub async fn get_ts(&self) -> Result<Timestamp, TxnError> {
        // The clock is read under the clock mutex, so no synchronisation can
        // be applied between the reading and its use (review finding 4; the
        // engine also refuses samples newer than the reading).
        let (start, ticket) = {
            let mut clock = lock(&self.inner.clock);
            let start = mono_ns();
            (
                start,
                clock
                    .get_ts(start)
                    .map_err(|_| TxnError::ClockUnavailable)?,
            )
        };
        wait::wait_until(ticket.ready_local_ns).await;
        let s = &self.inner.ts_stats;
        s.count.fetch_add(1, Ordering::Relaxed);
        s.uncertainty_ns
            .fetch_add(ticket.uncertainty_ns, Ordering::Relaxed);
        s.waited_ns
            .fetch_add(mono_ns().saturating_sub(start), Ordering::Relaxed);
        Ok(ticket.ts)
    }

    fn conn(&self, node: NodeId) -> Result<&Arc<Connection>, TxnError> {
        self.inner
            .conns
            .get(&node)
            .ok_or_else(|| TxnError::Transport(format!("no connection to {node}")))
    }

    fn take_truncates(&self, node: NodeId) -> Vec<TxId> {
        lock(&self.inner.truncates)
            .get_mut(&node)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Queue TRUNCATE of `tx` for `nodes`; piggybacked on the next request,
    /// or flushed by the background task. A queue that reaches
    /// `limits.max_pending_truncations` is flushed at once.
    fn queue_truncates(&self, tx: TxId, nodes: &[NodeId]) {
        let max = self.inner.limits.max_pending_truncations;
        let mut full = Vec::new();
        {
            let mut t = lock(&self.inner.truncates);
            for n in nodes {
                let q = t.entry(*n).or_default();
                q.push(tx);
                if q.len() >= max {
                    full.push((*n, std::mem::take(q)));
                }
            }
        }
        for (n, txs) in full {
            if let Ok(c) = self.conn(n) {
                let c = c.clone();
                tokio::spawn(async move {
                    if let Err(e) = c.send_oneway(Vec::new(), Request::Truncate { txs }).await {
                        tracing::warn!("truncate to {n} failed: {e}");
                    }
                });
            }
        }
    }

    /// Send `req` to `node` with piggybacked truncations; returns the reply.
    ///
    /// Errors: [`TxnError::Transport`].
    pub async fn call(&self, node: NodeId, req: Request) -> Result<Response, TxnError> {
        let c = self.conn(node)?;
        let t = self.take_truncates(node);
        c.call(t, req)
            .await
            .map_err(|e| TxnError::Transport(e.to_string()))
    }

    async fn start(
        &self,
        node: NodeId,
        req: Request,
    ) -> Result<tokio::sync::oneshot::Receiver<Response>, TxnError> {
        let c = self.conn(node)?;
        let t = self.take_truncates(node);
        c.start(t, req)
            .await
            .map_err(|e| TxnError::Transport(e.to_string()))
    }

    async fn finish(
        &self,
        node: NodeId,
        rx: tokio::sync::oneshot::Receiver<Response>,
    ) -> Result<Response, TxnError> {
        self.conn(node)?
            .finish(rx)
            .await
            .map_err(|e| TxnError::Transport(e.to_string()))
    }
}

/// A boxed future borrowed from a transaction, for [`Session::run`].
pub type TxnFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TxnError>> + Send + 'a>>;

/// One coordinator thread: runs one transaction at a time.
pub struct Session {
    client: Client,
    thread: u32,
    next_local: u64,
}

/// What a committed transaction reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// The transaction id.
    pub tx: TxId,
    /// `read_ts`.
    pub read_ts: Timestamp,
    /// `write_ts` (equals `read_ts` for read-only transactions).
    pub write_ts: Timestamp,
    /// Whether it wrote.
    pub wrote: bool,
}

impl Session {
    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Begin a transaction: `read_ts = GET_TS()` (uncertainty waited out).
    ///
    /// Errors: [`TxnError::ClockUnavailable`].
    pub async fn begin(&mut self, opts: TxnOptions) -> Result<Txn, TxnError> {
        let read_ts = self.client.get_ts().await?;
        let id = TxId {
            config: ConfigId(self.client.inner.config.config_id),
            coordinator: self.client.inner.coordinator,
            thread: self.thread,
            local: self.next_local,
        };
        self.next_local += 1;
        let engine = Transaction::new(
            id,
            read_ts,
            opts,
            self.client.inner.map.clone(),
            self.client.inner.limits.clone(),
        );
        Ok(Txn {
            client: self.client.clone(),
            engine,
            invoke_ns: 0,
        })
    }

    /// The retry helper: run `f` in a transaction and commit, retrying aborts
    /// with exponential back-off and jitter, up to `limits.retry_attempts`
    /// tries. Operational errors are returned at once.
    ///
    /// Errors: the last abort once the budget is spent, or the first
    /// operational error.
    pub async fn run<T, F>(&mut self, opts: TxnOptions, mut f: F) -> Result<T, TxnError>
    where
        F: for<'a> FnMut(&'a mut Txn) -> TxnFuture<'a, T>,
    {
        let limits = self.client.inner.limits.clone();
        let mut backoff = limits.retry_backoff_us;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.begin(opts).await?;
            let r = f(&mut tx).await;
            let r = match r {
                Ok(v) => tx.commit().await.map(|_| v),
                Err(e) => {
                    tx.abort();
                    Err(e)
                }
            };
            match r {
                Err(e) if e.is_abort() && attempt < limits.retry_attempts => {
                    let jitter = rand::random::<u64>() % backoff.max(1);
                    tokio::time::sleep(Duration::from_micros(backoff / 2 + jitter)).await;
                    backoff = (backoff * 2).min(limits.retry_backoff_max_us);
                }
                other => return other,
            }
        }
    }
}

/// An open transaction.
pub struct Txn {
    client: Client,
    engine: Transaction,
    /// Free for the caller's bookkeeping (e.g. history recording).
    pub invoke_ns: u64,
}

impl Txn {
    /// The id.
    pub fn id(&self) -> TxId {
        self.engine.id()
    }

    /// The snapshot timestamp.
    pub fn read_ts(&self) -> Timestamp {
        self.engine.read_ts()
    }

    /// Read `key` with its version (`write_ts`); `None` if absent. Buffered
    /// writes are returned with version `Timestamp::ZERO`.
    ///
    /// Errors: `Aborted` (retry), `KeyTooLarge`, `Transport`, …
    pub async fn get_versioned(
        &mut self,
        key: &[u8],
    ) -> Result<Option<(Timestamp, Value)>, TxnError> {
        match self.engine.get(key)? {
            GetStep::Local(v) => Ok(v.map(|v| (Timestamp::ZERO, v))),
            GetStep::Remote(node, req) => {
                let resp = self.client.call(node, req).await?;
                Ok(self
                    .engine
                    .on_read_reply(node, key, resp)?
                    .map(|v| (v.version, v.value)))
            }
        }
    }

    /// Read `key`; `None` if absent.
    ///
    /// Errors: as [`Txn::get_versioned`].
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, TxnError> {
        Ok(self.get_versioned(key).await?.map(|(_, v)| v))
    }

    /// Buffer a write.
    ///
    /// Errors: `KeyTooLarge`, `ValueTooLarge`, `ReadOnly`, …
    pub async fn put(&mut self, key: Key, value: Value) -> Result<(), TxnError> {
        self.engine.put(key, value)
    }

    /// Buffer a delete.
    ///
    /// Errors: `KeyTooLarge`, `ReadOnly`, …
    pub async fn delete(&mut self, key: Key) -> Result<(), TxnError> {
        self.engine.delete(key)
    }

    /// Up to `limit` live pairs with `start <= key < end` (`end = None`: to
    /// the end of the key space), in key order, including this
    /// transaction's own writes. The ranges scanned are validated against
    /// phantoms at commit.
    ///
    /// Errors: as [`Txn::get_versioned`].
    pub async fn scan(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) -> Result<Vec<(Key, Value)>, TxnError> {
        let mut step = self.engine.scan(start, end, limit)?;
        loop {
            match step {
                ScanStep::Done(rows) => return Ok(rows),
                ScanStep::Send(node, req) => {
                    let resp = self.client.call(node, req).await?;
                    step = self.engine.on_scan_reply(node, resp)?;
                }
            }
        }
    }

    /// Abort (nothing is locked before commit, so no messages are needed).
    pub fn abort(mut self) {
        self.engine.abort();
    }

    /// Commit: read-only transactions finish at once; others run Lock →
    /// GET_TS → Validate → CommitBackup → CommitPrimary and return after the
    /// first COMMIT-PRIMARY ack. The remaining acks are collected in the
    /// background, after which TRUNCATE is queued to piggyback.
    ///
    /// Errors: `Aborted` (retry), `Transport`, `Protocol`.
    pub async fn commit(mut self) -> Result<CommitInfo, TxnError> {
        let mut step = self.engine.commit()?;
        let wrote = !self.engine.is_read_only();
        loop {
            step = match step {
                CommitStep::Done(Ok(write_ts)) => {
                    return Ok(CommitInfo {
                        tx: self.engine.id(),
                        read_ts: self.engine.read_ts(),
                        write_ts,
                        wrote,
                    });
                }
                CommitStep::Done(Err(reason)) => {
                    for (n, req) in self.engine.abort_messages() {
                        let t = self.client.take_truncates(n);
                        if let Ok(c) = self.client.conn(n) {
                            if let Err(e) = c.send_oneway(t, req).await {
                                tracing::warn!("abort to {n} failed: {e}");
                            }
                        }
                    }
                    return Err(TxnError::Aborted(reason));
                }
                CommitStep::GetWriteTs => {
                    let ts = self.client.get_ts().await?;
                    self.engine.on_write_ts(ts)?
                }
                CommitStep::Send(msgs) => {
                    let mut rxs = Vec::with_capacity(msgs.len());
                    for (n, req) in msgs {
                        rxs.push((n, self.client.start(n, req).await?));
                    }
                    let mut next = None;
                    let mut rest = rxs.into_iter();
                    for (n, rx) in rest.by_ref() {
                        let resp = self.client.finish(n, rx).await?;
                        if let Some(s) = self.engine.on_reply(n, resp)? {
                            next = Some(s);
                            break;
                        }
                    }
                    let Some(next) = next else {
                        return Err(TxnError::Protocol {
                            node: NodeId(u32::MAX),
                            detail: "phase ended without a decision".into(),
                        });
                    };
                    let remaining: Vec<_> = rest.collect();
                    if let CommitStep::Done(Ok(write_ts)) = next {
                        // Only COMMIT-PRIMARY reports before every reply is in:
                        // collect the other acks in the background, then queue
                        // TRUNCATE to piggyback on later traffic.
                        let client = self.client.clone();
                        let mut engine = self.engine;
                        let info = CommitInfo {
                            tx: engine.id(),
                            read_ts: engine.read_ts(),
                            write_ts,
                            wrote,
                        };
                        tokio::spawn(async move {
                            for (n, rx) in remaining {
                                match client.finish(n, rx).await {
                                    Ok(resp) => {
                                        if let Err(e) = engine.on_reply(n, resp) {
                                            tracing::warn!("commit-primary ack: {e}");
                                        }
                                    }
                                    Err(e) => tracing::warn!("commit-primary ack from {n}: {e}"),
                                }
                            }
                            if engine.is_fully_acknowledged() {
                                client.queue_truncates(engine.id(), &engine.truncation_targets());
                            }
                        });
                        return Ok(info);
                    }
                    next
                }
            };
        }
    }
}

impl meridian_workload::ops::TxnOps for Txn {
    type Error = TxnError;
    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, TxnError> {
        Txn::get(self, key).await
    }
    async fn put(&mut self, key: Key, value: Value) -> Result<(), TxnError> {
        Txn::put(self, key, value).await
    }
    async fn delete(&mut self, key: Key) -> Result<(), TxnError> {
        Txn::delete(self, key).await
    }
    async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, TxnError> {
        Txn::scan(self, start, Some(end), limit.min(u32::MAX as usize) as u32).await
    }
}
