//! # Peers driven by Meridian's own workload code
//!
//! **Problem.** A comparison with another store is only fair if both are
//! driven by the same client code: the same key generator, the same
//! transaction bodies, the same closed loop, the same histograms. Each
//! workload is written against [`TxnOps`] (get, put, delete, scan), so a
//! peer only needs a transaction type that implements it.
//!
//! **Redis** ([`RedisTxn`]): optimistic transactions with WATCH/MULTI/EXEC,
//! Redis's own serializable path. Every read WATCHes its key before the
//! GET; writes are buffered (a read of a buffered key sees it) and sent as
//! one MULTI/EXEC at commit; EXEC answering nil means a watched key changed
//! and is reported as [`PeerError::Conflict`], an abort the driver retries.
//! A transaction that only read one key needs no EXEC (the GET was
//! linearizable; its watch is dropped by an UNWATCH in the next read's
//! round trip); one that read several runs an empty MULTI/EXEC so that
//! its watches validate the reads together. Each session owns one
//! connection, since WATCH state is per connection. Redis keeps keys
//! unordered, so `scan` is [`PeerError::Unsupported`] (YCSB A/B/C/F and
//! the read-modify-write mix do not scan). Durability is Redis's as
//! started by `scripts/peers.sh` (no persistence), the match of Meridian's
//! memory mode.
//!
//! PostgreSQL is in [`crate::pg`], etcd in [`crate::etcd`]; [`Peer`] runs
//! any of them through [`crate::drive`]'s closed loop.

use crate::drive::{
    run_sessions, session_loop, BenchSession, BenchTxn, Classify, Failure, Mix, Shape,
};
use crate::etcd::EtcdPeer;
use crate::pg::PgPeer;
use crate::run::{summarize_core, Acc, Ran};
use meridian_client::mono_ns;
use meridian_workload::ops::{Key, TxnOps, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a peer operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The peer refused the commit because of a concurrent change (an
    /// abort, retried by the driver).
    #[error("conflict: a concurrent transaction changed what this one read")]
    Conflict,
    /// The peer cannot do this operation.
    #[error("{0} is not supported by this peer")]
    Unsupported(&'static str),
    /// A connection or protocol error.
    #[error("peer error: {0}")]
    Io(String),
}

impl PeerError {
    /// True for an abort the driver should retry.
    pub fn is_abort(&self) -> bool {
        matches!(self, PeerError::Conflict)
    }
}

impl Classify for PeerError {
    fn failure(&self) -> Failure {
        if self.is_abort() {
            Failure::Abort
        } else {
            Failure::Fatal
        }
    }
}

impl From<redis::RedisError> for PeerError {
    fn from(e: redis::RedisError) -> Self {
        PeerError::Io(e.to_string())
    }
}

/// A Redis server, by URL (`redis://127.0.0.1:6379/`).
#[derive(Clone)]
pub struct RedisPeer {
    client: redis::Client,
}

impl RedisPeer {
    /// Open (lazily) the server at `url`.
    ///
    /// Errors: a URL that does not parse.
    pub fn new(url: &str) -> Result<Self, PeerError> {
        Ok(RedisPeer {
            client: redis::Client::open(url)?,
        })
    }

    /// A session: one connection of its own (WATCH is per connection).
    ///
    /// Errors: the connection failed.
    pub async fn session(&self) -> Result<RedisSession, PeerError> {
        Ok(RedisSession {
            conn: self.client.get_multiplexed_async_connection().await?,
            stale_watch: false,
        })
    }
}

/// One Redis connection running one transaction at a time.
pub struct RedisSession {
    conn: redis::aio::MultiplexedConnection,
    /// A finished transaction left watches that no EXEC cleared: the next
    /// read sends UNWATCH in the same round trip.
    stale_watch: bool,
}

impl RedisSession {
    /// Begin a transaction.
    pub fn begin(&mut self) -> RedisTxn<'_> {
        RedisTxn {
            session: self,
            reads: 0,
            writes: BTreeMap::new(),
        }
    }

    /// Remove every key (before loading).
    ///
    /// Errors: the command failed.
    pub async fn flush(&mut self) -> Result<(), PeerError> {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(())
    }

    /// Store `rows` with pipelined SETs, 1,000 a round trip; returns how
    /// many.
    ///
    /// Errors: a command failed.
    pub async fn load(
        &mut self,
        rows: impl Iterator<Item = (Key, Value)>,
    ) -> Result<u64, PeerError> {
        let mut n = 0u64;
        let mut pipe = redis::pipe();
        let mut queued = 0;
        for (k, v) in rows {
            pipe.set(k, v).ignore();
            queued += 1;
            n += 1;
            if queued == 1000 {
                pipe.query_async::<()>(&mut self.conn).await?;
                pipe = redis::pipe();
                queued = 0;
            }
        }
        if queued > 0 {
            pipe.query_async::<()>(&mut self.conn).await?;
        }
        Ok(n)
    }
}

/// An open Redis transaction (see the module essay).
pub struct RedisTxn<'a> {
    session: &'a mut RedisSession,
    reads: usize,
    /// Buffered writes; `None` deletes.
    writes: BTreeMap<Key, Option<Value>>,
}

impl RedisTxn<'_> {
    /// Commit: the buffered writes in one MULTI/EXEC under the reads'
    /// watches.
    ///
    /// Errors: [`PeerError::Conflict`] if a watched key changed;
    /// [`PeerError::Io`] otherwise.
    pub async fn commit(self) -> Result<(), PeerError> {
        if self.writes.is_empty() && self.reads <= 1 {
            // One read was linearizable by itself; its watch is dropped
            // with the next read's round trip.
            self.session.stale_watch |= self.reads == 1;
            return Ok(());
        }
        // One round trip: [UNWATCH (a finished transaction's watches, which
        // must not fail this one)], MULTI, the writes, EXEC.
        let mut pipe = redis::pipe();
        if std::mem::take(&mut self.session.stale_watch) {
            pipe.cmd("UNWATCH").ignore();
        }
        pipe.cmd("MULTI").ignore();
        for (k, v) in &self.writes {
            match v {
                Some(v) => pipe.cmd("SET").arg(k).arg(v).ignore(),
                None => pipe.cmd("DEL").arg(k).ignore(),
            };
        }
        // EXEC clears every watch, whatever it answers.
        pipe.cmd("EXEC");
        let (r,): (redis::Value,) = pipe.query_async(&mut self.session.conn).await?;
        match r {
            redis::Value::Nil => Err(PeerError::Conflict),
            _ => Ok(()),
        }
    }

    /// Give up: the watches are dropped with the next read's round trip.
    pub fn abort(self) {
        self.session.stale_watch = true;
    }
}

impl TxnOps for RedisTxn<'_> {
    type Error = PeerError;

    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, PeerError> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        self.reads += 1;
        // WATCH then GET: a change after the WATCH fails the EXEC, so the
        // value read is the one the commit validates.
        let mut pipe = redis::pipe();
        if std::mem::take(&mut self.session.stale_watch) {
            pipe.cmd("UNWATCH").ignore();
        }
        pipe.cmd("WATCH").arg(key).ignore().cmd("GET").arg(key);
        let (v,): (Option<Vec<u8>>,) = pipe.query_async(&mut self.session.conn).await?;
        Ok(v)
    }

    async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, PeerError> {
        // One round trip: WATCH every key not written here, then MGET.
        let remote: Vec<&Key> = keys
            .iter()
            .filter(|k| !self.writes.contains_key(*k))
            .collect();
        let mut fetched: BTreeMap<&Key, Option<Value>> = BTreeMap::new();
        if !remote.is_empty() {
            self.reads += remote.len();
            let mut pipe = redis::pipe();
            if std::mem::take(&mut self.session.stale_watch) {
                pipe.cmd("UNWATCH").ignore();
            }
            pipe.cmd("WATCH")
                .arg(&remote)
                .ignore()
                .cmd("MGET")
                .arg(&remote);
            let (vs,): (Vec<Option<Vec<u8>>>,) = pipe.query_async(&mut self.session.conn).await?;
            fetched.extend(remote.iter().copied().zip(vs));
        }
        Ok(crate::peers::own_or_fetched(keys, &self.writes, &fetched))
    }

    async fn put(&mut self, key: Key, value: Value) -> Result<(), PeerError> {
        self.writes.insert(key, Some(value));
        Ok(())
    }

    async fn delete(&mut self, key: Key) -> Result<(), PeerError> {
        self.writes.insert(key, None);
        Ok(())
    }

    async fn scan(
        &mut self,
        _start: &[u8],
        _end: &[u8],
        _limit: usize,
    ) -> Result<Vec<(Key, Value)>, PeerError> {
        Err(PeerError::Unsupported("an ordered scan"))
    }
}

impl BenchSession for RedisSession {
    type Error = PeerError;
    type Txn<'a> = RedisTxn<'a>;
    async fn begin(&mut self, _shape: Shape) -> Result<RedisTxn<'_>, PeerError> {
        Ok(RedisSession::begin(self))
    }
}

impl BenchTxn for RedisTxn<'_> {
    async fn commit(self) -> Result<(), PeerError> {
        RedisTxn::commit(self).await
    }
    async fn abort(self) {
        RedisTxn::abort(self)
    }
}

/// The values of `keys` as a transaction that buffers its writes sees
/// them: its own write (or delete) of a key, else what was fetched.
pub(crate) fn own_or_fetched(
    keys: &[Key],
    writes: &BTreeMap<Key, Option<Value>>,
    fetched: &BTreeMap<&Key, Option<Value>>,
) -> Vec<Option<Value>> {
    keys.iter()
        .map(|k| match writes.get(k) {
            Some(v) => v.clone(),
            None => fetched.get(k).cloned().flatten(),
        })
        .collect()
}

/// `rows` in chunks of at most `n`, for the peers' bulk loads.
pub(crate) fn chunks<I: Iterator<Item = (Key, Value)>>(
    rows: I,
    n: usize,
) -> impl Iterator<Item = Vec<(Key, Value)>> {
    let mut rows = rows.peekable();
    std::iter::from_fn(move || {
        rows.peek()?;
        Some(rows.by_ref().take(n).collect())
    })
}

/// A peer system, driven by the same closed loop as Meridian.
#[derive(Clone)]
pub enum Peer {
    /// Redis (no persistence).
    Redis(RedisPeer),
    /// PostgreSQL (SERIALIZABLE, fsync on).
    Postgres(PgPeer),
    /// etcd (fsync always).
    Etcd(EtcdPeer),
}

impl Peer {
    /// The peer's name.
    pub fn name(&self) -> &'static str {
        match self {
            Peer::Redis(_) => "redis",
            Peer::Postgres(_) => "postgres",
            Peer::Etcd(_) => "etcd",
        }
    }

    /// The peer's server processes, by the name its Debian package runs
    /// them under (PostgreSQL's postmaster and every backend are
    /// `postgres`), for the CPU per transaction ([`crate::cpu`]). A peer
    /// on another machine matches none.
    pub fn servers(&self) -> crate::cpu::Servers {
        crate::cpu::Servers::Named(match self {
            Peer::Redis(_) => "redis-server",
            Peer::Postgres(_) => "postgres",
            Peer::Etcd(_) => "etcd",
        })
    }

    /// Empty the peer's store, then store `rows`; returns how many.
    /// `progress` gets the running count.
    ///
    /// Errors: a connection or command error.
    pub async fn load(
        &self,
        rows: impl Iterator<Item = (Key, Value)>,
        progress: impl Fn(u64),
    ) -> Result<u64, PeerError> {
        match self {
            Peer::Redis(p) => {
                let mut s = p.session().await?;
                s.flush().await?;
                s.load(rows).await
            }
            Peer::Postgres(p) => p.load(rows, progress).await,
            Peer::Etcd(p) => p.load(rows, progress).await,
        }
    }

    /// Run `mix` for `secs` with `clients` sessions (each its own
    /// connection), the same closed loop as Meridian's run.
    ///
    /// Errors: a session could not connect.
    pub async fn run(
        &self,
        mix: Arc<Mix>,
        clients: usize,
        secs: u64,
        seed: u64,
    ) -> Result<Ran, String> {
        let label = format!("{} ({})", mix.name(), self.name());
        self.run_labeled(label, mix, clients, secs, seed).await
    }

    /// [`Peer::run`] for `secs` keeping no figures: the same warm-up as
    /// Meridian's ([`crate::run::warm_up`]). `secs` = 0 does nothing.
    /// Returns the transactions it committed.
    ///
    /// Errors: a session could not connect.
    pub async fn warm_up(&self, mix: Arc<Mix>, clients: usize, secs: u64) -> Result<u64, String> {
        if secs == 0 {
            return Ok(0);
        }
        let label = format!("{} ({}) warm-up", mix.name(), self.name());
        let ran = self
            .run_labeled(label.clone(), mix, clients, secs, crate::run::WARM_UP_SEED)
            .await?;
        tracing::info!(
            "{label}: {:.0} tx/s for {secs} s, not counted",
            ran.result.committed_per_s
        );
        Ok(ran.result.committed)
    }

    async fn run_labeled(
        &self,
        label: String,
        mix: Arc<Mix>,
        clients: usize,
        secs: u64,
        seed: u64,
    ) -> Result<Ran, String> {
        let start_ns = mono_ns();
        let servers = self.servers();
        let err = |e: PeerError| format!("{}: {e}", self.name());
        // One arm per peer: the session loop must be spawned where its
        // session type is concrete (see `crate::drive`).
        macro_rules! run_on {
            ($p:expr) => {{
                let mut v = Vec::with_capacity(clients);
                for _ in 0..clients {
                    v.push($p.session().await.map_err(err)?);
                }
                run_sessions(&label, v, mix.clone(), seed, secs, &servers, |s, c| {
                    tokio::spawn(session_loop(s, c))
                })
                .await
            }};
        }
        let (acc, el) = match self {
            Peer::Redis(p) => run_on!(p),
            Peer::Postgres(p) => run_on!(p),
            Peer::Etcd(p) => run_on!(p),
        };
        Ok(finish(&label, el, clients, acc, &mix, start_ns))
    }

    /// TPC-C's consistency check (see [`crate::drive::check_tpcc`]) through
    /// a fresh session.
    ///
    /// Errors: a connection or read error, or a violated condition.
    pub async fn check_tpcc(
        &self,
        cfg: &meridian_workload::tpcc::TpccConfig,
        progress: impl Fn(u64),
    ) -> Result<u64, String> {
        let e = |e: PeerError| format!("{}: {e}", self.name());
        match self {
            Peer::Redis(_) => Err("redis: keys are unordered, no scan to check with".into()),
            Peer::Postgres(p) => {
                crate::drive::check_tpcc(&mut p.session().await.map_err(e)?, cfg, progress).await
            }
            Peer::Etcd(p) => {
                crate::drive::check_tpcc(&mut p.session().await.map_err(e)?, cfg, progress).await
            }
        }
    }

    /// The RMW audit (see [`crate::drive::audit_rmw`]) through a fresh
    /// session.
    ///
    /// Errors: a connection or read error, or a missing counter.
    pub async fn audit_rmw(&self, cfg: &meridian_workload::rmw::RmwConfig) -> Result<u64, String> {
        let e = |e: PeerError| format!("{}: {e}", self.name());
        match self {
            Peer::Redis(p) => {
                crate::drive::audit_rmw(&mut p.session().await.map_err(e)?, cfg).await
            }
            Peer::Postgres(p) => {
                crate::drive::audit_rmw(&mut p.session().await.map_err(e)?, cfg).await
            }
            Peer::Etcd(p) => crate::drive::audit_rmw(&mut p.session().await.map_err(e)?, cfg).await,
        }
    }
}

/// The result of a closed-loop run of `mix` (any target).
pub(crate) fn finish(
    label: &str,
    el: f64,
    clients: usize,
    mut acc: Acc,
    mix: &Mix,
    start_ns: u64,
) -> Ran {
    let successful = acc.successful;
    let commits_ns = std::mem::take(&mut acc.commits_ns);
    let mut result = summarize_core(label, el, clients, acc);
    mix.describe(&mut result.extra);
    if matches!(mix, Mix::Tatp(_)) {
        result.successful_per_s = Some(successful as f64 / el);
    }
    if matches!(mix, Mix::Tpcc(_)) {
        // tpmC counts completed NEW_ORDERs, the 1% rolled back by the spec
        // included (they are the only rollbacks).
        let new_orders = result
            .latency
            .get(meridian_workload::tpcc::TpccKind::NewOrder.name())
            .map_or(0, |l| l.committed)
            + result.extra.get("rollbacks").copied().unwrap_or(0.0) as u64;
        result
            .extra
            .insert("new_order_per_s".into(), new_orders as f64 / el);
        result
            .extra
            .insert("tpmC".into(), new_orders as f64 / el * 60.0);
    }
    Ran {
        result,
        commits_ns,
        start_ns,
        end_ns: mono_ns(),
    }
}
