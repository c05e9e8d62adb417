//! # PostgreSQL as a peer
//!
//! **Schema.** One table, `kv (k bytea PRIMARY KEY, v bytea NOT NULL)`:
//! the workloads are written against an ordered key-value interface, and
//! a B-tree primary key is PostgreSQL's ordered key-value store. Every
//! workload row is one PostgreSQL row, every secondary index the workload
//! keeps (TATP's sub_nbr, TPC-C's customer by last name) is rows of the
//! same table, maintained in the same transaction, as in Meridian.
//!
//! **Isolation.** Every transaction is `SERIALIZABLE` (PostgreSQL's SSI);
//! read-only ones are also `READ ONLY`, which lets SSI skip their
//! predicate locks' rw-conflict tracking where safe. A serialization
//! failure (SQLSTATE 40001) or a deadlock (40P01), at any statement or at
//! COMMIT, is [`PeerError::Conflict`]: the driver rolls back and runs the
//! transaction again, as Meridian's aborts are retried.
//!
//! **Round trips.** Statements are prepared once per session (get, upsert,
//! delete, range scan). `BEGIN` is not a round trip of its own: it is
//! pipelined with the transaction's first statement (tokio-postgres sends
//! requests in the order their futures are first polled), which is what
//! JDBC does with `autoCommit = false`. A read-only transaction with one
//! read therefore costs two round trips (BEGIN+SELECT, COMMIT), like
//! BenchBase's. Writes go to the server as they happen (an upsert), not
//! buffered: that is how a PostgreSQL application writes.
//!
//! **Durability.** As `scripts/peers.sh` starts it: `fsync = on`,
//! `synchronous_commit = on` (a commit returns after its WAL record is on
//! disk), the match of Meridian's disk mode.

use crate::drive::{BenchSession, BenchTxn, Shape};
use crate::peers::PeerError;
use futures_util::future::join;
use futures_util::StreamExt;
use meridian_workload::ops::{Key, TxnOps, Value};
use std::collections::BTreeMap;
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Statement};

/// The default connection string (`scripts/peers.sh start postgres`).
pub const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres";

/// Rows per load statement.
const LOAD_BATCH: usize = 1000;
/// Load statements in flight at once.
const LOAD_IN_FLIGHT: usize = 4;

impl From<tokio_postgres::Error> for PeerError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code() {
            Some(c)
                if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                PeerError::Conflict
            }
            _ => PeerError::Io(match e.as_db_error() {
                Some(db) => format!("{}: {}", db.code().code(), db.message()),
                None => e.to_string(),
            }),
        }
    }
}

/// A PostgreSQL server, by connection string.
#[derive(Clone)]
pub struct PgPeer {
    url: String,
    /// The isolation level every transaction begins with.
    isolation: &'static str,
}

async fn connect(url: &str) -> Result<tokio_postgres::Client, PeerError> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("postgres connection ended: {e}");
        }
    });
    Ok(client)
}

impl PgPeer {
    /// The server at `url` (a libpq-style connection string); nothing is
    /// opened yet.
    pub fn new(url: &str) -> Self {
        PgPeer {
            url: url.into(),
            isolation: "SERIALIZABLE",
        }
    }

    /// A deliberately broken driver that runs at READ COMMITTED, for the
    /// tests that show the RMW audit catches lost updates.
    #[doc(hidden)]
    pub fn read_committed_for_tests(mut self) -> Self {
        self.isolation = "READ COMMITTED";
        self
    }

    /// A session: its own connection with the statements prepared.
    ///
    /// Errors: the connection or a PREPARE failed.
    pub async fn session(&self) -> Result<PgSession, PeerError> {
        let client = connect(&self.url).await?;
        let get = client.prepare("SELECT v FROM kv WHERE k = $1").await?;
        let get_many = client
            .prepare("SELECT k, v FROM kv WHERE k = ANY($1)")
            .await?;
        let put = client
            .prepare("INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
            .await?;
        let del = client.prepare("DELETE FROM kv WHERE k = $1").await?;
        let scan = client
            .prepare("SELECT k, v FROM kv WHERE k >= $1 AND k < $2 ORDER BY k LIMIT $3")
            .await?;
        let isolation = self.isolation;
        Ok(PgSession {
            client,
            begin_rw: format!("BEGIN ISOLATION LEVEL {isolation}"),
            begin_ro: format!("BEGIN ISOLATION LEVEL {isolation} READ ONLY"),
            get,
            get_many,
            put,
            del,
            scan,
        })
    }

    /// Create the table if it is missing and empty it.
    ///
    /// Errors: a statement failed.
    pub async fn reset(&self) -> Result<(), PeerError> {
        let c = connect(&self.url).await?;
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS kv (k bytea PRIMARY KEY, v bytea NOT NULL); TRUNCATE kv;",
        )
        .await?;
        Ok(())
    }

    /// Empty the table, then store `rows` with multi-row inserts
    /// (`unnest` of two arrays), `LOAD_IN_FLIGHT` statements pipelined on
    /// one connection; then ANALYZE. Returns the rows stored.
    ///
    /// Errors: a statement failed.
    pub async fn load(
        &self,
        rows: impl Iterator<Item = (Key, Value)>,
        progress: impl Fn(u64),
    ) -> Result<u64, PeerError> {
        self.reset().await?;
        let c = connect(&self.url).await?;
        let insert = c
            .prepare(
                "INSERT INTO kv (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
                 ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            )
            .await?;
        let chunks = futures_util::stream::iter(
            crate::peers::chunks(rows, LOAD_BATCH)
                .map(|c| c.into_iter().unzip::<Key, Value, Vec<Key>, Vec<Value>>()),
        );
        let (c, insert) = (&c, &insert);
        let mut done = chunks
            .map(|(ks, vs)| async move {
                let n = ks.len() as u64;
                c.execute(insert, &[&ks, &vs]).await.map(|_| n)
            })
            .buffer_unordered(LOAD_IN_FLIGHT);
        let mut total = 0u64;
        while let Some(r) = done.next().await {
            total += r?;
            progress(total);
        }
        c.batch_execute("ANALYZE kv").await?;
        Ok(total)
    }
}

/// One PostgreSQL connection with its prepared statements.
pub struct PgSession {
    client: tokio_postgres::Client,
    begin_rw: String,
    begin_ro: String,
    get: Statement,
    get_many: Statement,
    put: Statement,
    del: Statement,
    scan: Statement,
}

impl BenchSession for PgSession {
    type Error = PeerError;
    type Txn<'a> = PgTxn<'a>;
    async fn begin(&mut self, shape: Shape) -> Result<PgTxn<'_>, PeerError> {
        let read_only = shape.is_read_only();
        Ok(PgTxn {
            s: self,
            begin: true,
            read_only,
        })
    }
}

/// An open PostgreSQL transaction (see the module essay).
pub struct PgTxn<'a> {
    s: &'a mut PgSession,
    /// BEGIN is not sent yet: it goes with the first statement.
    begin: bool,
    read_only: bool,
}

impl PgTxn<'_> {
    /// The session, and the BEGIN to send with this statement if it is
    /// the transaction's first.
    fn parts(&mut self) -> (&PgSession, Option<&str>) {
        let first = std::mem::take(&mut self.begin);
        let s: &PgSession = self.s;
        let begin = first.then_some(if self.read_only {
            s.begin_ro.as_str()
        } else {
            s.begin_rw.as_str()
        });
        (s, begin)
    }
}

/// Run `op`, preceded in the same round trip by `begin` (the
/// transaction's BEGIN, when `op` is its first statement).
async fn pipelined<T>(
    client: &tokio_postgres::Client,
    begin: Option<&str>,
    op: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PeerError> {
    match begin {
        Some(sql) => {
            let (b, r) = join(client.batch_execute(sql), op).await;
            b?;
            Ok(r?)
        }
        None => Ok(op.await?),
    }
}

impl TxnOps for PgTxn<'_> {
    type Error = PeerError;

    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, PeerError> {
        let (s, begin) = self.parts();
        let row = pipelined(&s.client, begin, s.client.query_opt(&s.get, &[&key])).await?;
        Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
    }

    async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, PeerError> {
        // One statement: `k = ANY($1)`.
        let (s, begin) = self.parts();
        let keys_arg: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let rows = pipelined(&s.client, begin, s.client.query(&s.get_many, &[&keys_arg])).await?;
        let found: BTreeMap<Vec<u8>, Vec<u8>> = rows
            .into_iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
            .collect();
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }

    async fn put(&mut self, key: Key, value: Value) -> Result<(), PeerError> {
        let (s, begin) = self.parts();
        pipelined(&s.client, begin, s.client.execute(&s.put, &[&key, &value])).await?;
        Ok(())
    }

    async fn delete(&mut self, key: Key) -> Result<(), PeerError> {
        let (s, begin) = self.parts();
        pipelined(&s.client, begin, s.client.execute(&s.del, &[&key])).await?;
        Ok(())
    }

    async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, PeerError> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let (s, begin) = self.parts();
        let rows = pipelined(
            &s.client,
            begin,
            s.client.query(&s.scan, &[&start, &end, &limit]),
        )
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
            .collect())
    }
}

impl BenchTxn for PgTxn<'_> {
    async fn commit(self) -> Result<(), PeerError> {
        if self.begin {
            // Nothing was sent: nothing to commit.
            return Ok(());
        }
        // A COMMIT that fails ends the transaction too (as a rollback).
        self.s.client.batch_execute("COMMIT").await?;
        Ok(())
    }

    async fn abort(self) {
        if !self.begin {
            if let Err(e) = self.s.client.batch_execute("ROLLBACK").await {
                tracing::debug!("postgres ROLLBACK: {e}");
            }
        }
    }
}
