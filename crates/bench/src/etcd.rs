//! # etcd as a peer
//!
//! **Transactions.** etcd's multi-key transactions are optimistic: a `Txn`
//! request applies its writes only if its compares hold. The driver uses
//! etcd's own software-transactional-memory scheme (clientv3/concurrency's
//! serializable snapshot STM):
//! - the first read is a linearizable range request; its response's header
//!   revision `R` fixes the snapshot;
//! - later reads are served at revision `R` (member-local, since a fixed
//!   revision reads the same data on any member that has applied it);
//! - writes are buffered (a read of a buffered key sees it);
//! - commit is one `Txn`: `mod_revision(k) < R + 1` for every key read
//!   (also true of a key absent at `R` and still absent), then the writes.
//!   A false compare (`succeeded = false`) is [`PeerError::Conflict`], an
//!   abort the driver retries.
//!
//! A read-only transaction needs no commit: its reads are one snapshot, and
//! the snapshot was current when its first read was linearized. A
//! transaction that only writes commits with no compares.
//!
//! **Scans** are range requests at `R` and are supported in read-only
//! transactions. In a transaction that writes, a scan would need a compare
//! over the range that also sees keys deleted since `R`, which a
//! `mod_revision` compare cannot; such a scan is
//! [`PeerError::Unsupported`] rather than silently weaker isolation. (The
//! issue compares etcd on YCSB and the RMW transaction, neither of which
//! scans.)
//!
//! **Durability.** etcd fsyncs its write-ahead log before it acknowledges a
//! write and cannot be told not to (outside `--unsafe-no-fsync`, which
//! `scripts/peers.sh` does not use): the match of Meridian's disk mode.

use crate::drive::{BenchSession, BenchTxn, Shape};
use crate::peers::PeerError;
use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, Txn, TxnOp};
use futures_util::StreamExt;
use meridian_workload::ops::{Key, TxnOps, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The default endpoint (`scripts/peers.sh start etcd`).
pub const DEFAULT_URL: &str = "127.0.0.1:2379";

/// Puts per load `Txn` (etcd's default `--max-txn-ops` is 128).
const LOAD_BATCH: usize = 100;
/// Load requests in flight at once.
const LOAD_IN_FLIGHT: usize = 8;

impl From<etcd_client::Error> for PeerError {
    fn from(e: etcd_client::Error) -> Self {
        match &e {
            // A snapshot revision compacted away under a long transaction:
            // it can only be retried, like a conflict.
            etcd_client::Error::GRpcStatus(s) if s.message().contains("compacted") => {
                PeerError::Conflict
            }
            _ => PeerError::Io(e.to_string()),
        }
    }
}

/// An etcd server, by endpoint (`host:port`).
#[derive(Clone)]
pub struct EtcdPeer {
    url: String,
    /// False only in the deliberately broken test variant.
    compares: bool,
}

impl EtcdPeer {
    /// The server at `url`; nothing is opened yet.
    pub fn new(url: &str) -> Self {
        EtcdPeer {
            url: url.into(),
            compares: true,
        }
    }

    /// A deliberately broken driver whose commits carry no compares, for
    /// the tests that show the RMW audit catches lost updates.
    #[doc(hidden)]
    pub fn without_compares_for_tests(mut self) -> Self {
        self.compares = false;
        self
    }

    async fn client(&self) -> Result<etcd_client::Client, PeerError> {
        Ok(etcd_client::Client::connect([self.url.as_str()], None).await?)
    }

    /// A session: its own client (its own gRPC channel).
    ///
    /// Errors: the connection failed.
    pub async fn session(&self) -> Result<EtcdSession, PeerError> {
        Ok(EtcdSession {
            client: self.client().await?,
            compares: self.compares,
        })
    }

    /// Delete every key, then store `rows`, `LOAD_BATCH` puts per `Txn`,
    /// `LOAD_IN_FLIGHT` in flight. Returns the rows stored.
    ///
    /// Errors: a request failed.
    pub async fn load(
        &self,
        rows: impl Iterator<Item = (Key, Value)>,
        progress: impl Fn(u64),
    ) -> Result<u64, PeerError> {
        let mut c = self.client().await?;
        c.delete(vec![0u8], Some(DeleteOptions::new().with_from_key()))
            .await?;
        let chunks = futures_util::stream::iter(crate::peers::chunks(rows, LOAD_BATCH));
        let c = &c;
        let mut done = chunks
            .map(|chunk| async move {
                let n = chunk.len() as u64;
                let ops: Vec<TxnOp> = chunk
                    .into_iter()
                    .map(|(k, v)| TxnOp::put(k, v, None))
                    .collect();
                c.clone().txn(Txn::new().and_then(ops)).await.map(|_| n)
            })
            .buffer_unordered(LOAD_IN_FLIGHT);
        let mut total = 0u64;
        while let Some(r) = done.next().await {
            total += r?;
            progress(total);
        }
        Ok(total)
    }
}

/// One etcd client running one transaction at a time.
pub struct EtcdSession {
    client: etcd_client::Client,
    compares: bool,
}

impl BenchSession for EtcdSession {
    type Error = PeerError;
    type Txn<'a> = EtcdTxn<'a>;
    async fn begin(&mut self, shape: Shape) -> Result<EtcdTxn<'_>, PeerError> {
        let read_only = shape.is_read_only();
        Ok(EtcdTxn {
            s: self,
            read_only,
            revision: None,
            read: BTreeSet::new(),
            writes: BTreeMap::new(),
        })
    }
}

/// An open etcd transaction (see the module essay).
pub struct EtcdTxn<'a> {
    s: &'a mut EtcdSession,
    read_only: bool,
    /// The snapshot revision, fixed by the first read.
    revision: Option<i64>,
    /// Keys read (each gets a compare at commit).
    read: BTreeSet<Key>,
    /// Buffered writes; `None` deletes.
    writes: BTreeMap<Key, Option<Value>>,
}

impl EtcdTxn<'_> {
    /// A range request at the snapshot (fixing it if this is the first).
    async fn range(
        &mut self,
        key: &[u8],
        opts: GetOptions,
    ) -> Result<etcd_client::GetResponse, PeerError> {
        let opts = match self.revision {
            Some(r) => opts.with_revision(r).with_serializable(),
            None => opts,
        };
        let resp = self.s.client.get(key, Some(opts)).await?;
        if self.revision.is_none() {
            let r = resp
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| PeerError::Io("etcd answered without a header".into()))?;
            self.revision = Some(r);
        }
        Ok(resp)
    }
}

impl TxnOps for EtcdTxn<'_> {
    type Error = PeerError;

    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, PeerError> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        let resp = self.range(key, GetOptions::new()).await?;
        self.read.insert(key.to_vec());
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, PeerError> {
        // One round trip: a Txn of range requests (at the snapshot, or
        // fixing it from the Txn's header).
        let remote: Vec<&Key> = keys
            .iter()
            .filter(|k| !self.writes.contains_key(*k))
            .collect();
        let mut fetched: BTreeMap<&Key, Option<Value>> = BTreeMap::new();
        if !remote.is_empty() {
            let ops: Vec<TxnOp> = remote
                .iter()
                .map(|k| {
                    let o = match self.revision {
                        Some(r) => GetOptions::new().with_revision(r),
                        None => GetOptions::new(),
                    };
                    TxnOp::get(k.to_vec(), Some(o))
                })
                .collect();
            let resp = self.s.client.txn(Txn::new().and_then(ops)).await?;
            if self.revision.is_none() {
                let r = resp
                    .header()
                    .map(|h| h.revision())
                    .ok_or_else(|| PeerError::Io("etcd answered without a header".into()))?;
                self.revision = Some(r);
            }
            let answers = resp.op_responses();
            if answers.len() != remote.len() {
                return Err(PeerError::Io(format!(
                    "etcd answered {} of {} reads",
                    answers.len(),
                    remote.len()
                )));
            }
            for (k, a) in remote.iter().zip(answers) {
                let v = match a {
                    etcd_client::TxnOpResponse::Get(g) => {
                        g.kvs().first().map(|kv| kv.value().to_vec())
                    }
                    _ => return Err(PeerError::Io("etcd answered a read with a write".into())),
                };
                self.read.insert((*k).clone());
                fetched.insert(k, v);
            }
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
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, PeerError> {
        if !self.read_only {
            return Err(PeerError::Unsupported(
                "a scan in a transaction that writes",
            ));
        }
        let limit = limit.min(i64::MAX as usize) as i64;
        let resp = self
            .range(start, GetOptions::new().with_range(end).with_limit(limit))
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect())
    }
}

impl BenchTxn for EtcdTxn<'_> {
    async fn commit(self) -> Result<(), PeerError> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let compares: Vec<Compare> = match self.revision {
            Some(r) if self.s.compares => self
                .read
                .iter()
                .map(|k| Compare::mod_revision(k.clone(), CompareOp::Less, r + 1))
                .collect(),
            _ => Vec::new(),
        };
        let ops: Vec<TxnOp> = self
            .writes
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) => TxnOp::put(k, v, None),
                None => TxnOp::delete(k, None),
            })
            .collect();
        let resp = self
            .s
            .client
            .txn(Txn::new().when(compares).and_then(ops))
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(PeerError::Conflict)
        }
    }

    async fn abort(self) {}
}
