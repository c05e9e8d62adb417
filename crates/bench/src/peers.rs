//! # Peers driven by Meridian's own workload code (issue 7)
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
//! PostgreSQL and etcd are not wired yet (issue 7).

use crate::run::{progress, summarize_core, Acc, BenchResult, Ran};
use meridian_client::mono_ns;
use meridian_workload::ops::{Key, TxnOps, Value};
use meridian_workload::ycsb;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Load YCSB's records into Redis (after FLUSHALL).
///
/// Errors: a connection or command error.
pub async fn load_ycsb_redis(peer: &RedisPeer, cfg: &ycsb::YcsbConfig) -> Result<u64, PeerError> {
    let mut s = peer.session().await?;
    s.flush().await?;
    s.load(ycsb::population(cfg, 1)).await
}

/// YCSB against Redis for `secs` with `clients` sessions: the same
/// generator, operation bodies ([`ycsb::execute`]), closed loop and
/// histograms as the Meridian run.
///
/// Errors: the generator's configuration, or a session that cannot
/// connect.
pub async fn ycsb_redis(
    peer: &RedisPeer,
    cfg: ycsb::YcsbConfig,
    clients: usize,
    secs: u64,
) -> Result<Ran, String> {
    let start_ns = mono_ns();
    let generator = Arc::new(ycsb::YcsbGenerator::new(&cfg)?);
    let value_bytes = cfg.value_bytes;
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut sessions = Vec::with_capacity(clients);
    for _ in 0..clients {
        sessions.push(peer.session().await.map_err(|e| e.to_string())?);
    }
    let bar = progress("ycsb (redis)", secs, count.clone(), stop.clone());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let generator = generator.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let mut acc = Acc::default();
                let mut rng = SmallRng::seed_from_u64(0x5c5b ^ i as u64);
                while Instant::now() < deadline {
                    let op = generator.next_op(&mut rng);
                    let t0 = mono_ns();
                    loop {
                        let mut tx = s.begin();
                        let r = match ycsb::execute(&mut tx, op, value_bytes, &mut rng).await {
                            Ok(()) => tx.commit().await,
                            Err(e) => {
                                tx.abort();
                                Err(e)
                            }
                        };
                        match r {
                            Ok(()) => {
                                acc.committed += 1;
                                acc.record(op.name(), (mono_ns() - t0) / 1000);
                                count.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            Err(e) if e.is_abort() => {
                                acc.aborts += 1;
                                if Instant::now() >= deadline {
                                    break;
                                }
                            }
                            Err(e) => {
                                tracing::error!("ycsb (redis): {e}");
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                break;
                            }
                        }
                    }
                }
                acc
            })
        })
        .collect();
    let mut acc = Acc::default();
    for t in tasks {
        if let Ok(a) = t.await {
            acc.merge(a);
        }
    }
    let el = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = bar.await;
    let commits_ns = std::mem::take(&mut acc.commits_ns);
    let mut result: BenchResult = summarize_core(
        &format!("ycsb-{} (redis)", cfg.workload.name()),
        el,
        clients,
        acc,
    );
    result.extra.insert("theta".into(), cfg.theta);
    result.extra.insert("records".into(), cfg.records as f64);
    Ok(Ran {
        result,
        commits_ns,
        start_ns,
        end_ns: mono_ns(),
    })
}
