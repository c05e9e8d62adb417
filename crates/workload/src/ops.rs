//! The interfaces workloads are written against.

/// A key (ordered byte string).
pub type Key = Vec<u8>;
/// A value (byte string).
pub type Value = Vec<u8>;

/// The operations of one open transaction, as the async client exposes them.
///
/// Every method may fail with `Self::Error`; an error means the transaction
/// can no longer commit (a conflict abort or an operational failure) and the
/// workload must stop issuing operations and return it. Whether to retry is
/// the driver's decision, not the workload's.
#[allow(async_fn_in_trait)]
pub trait TxnOps {
    /// Why an operation failed.
    type Error;
    /// Read `key`; `None` if absent.
    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, Self::Error>;
    /// Read every key of `keys`, values in the same order. A store that
    /// can issue the reads together does so (one round trip instead of one
    /// per key); the default reads them one after the other.
    async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, Self::Error> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.get(k).await?);
        }
        Ok(out)
    }
    /// Buffer a write of `key`.
    async fn put(&mut self, key: Key, value: Value) -> Result<(), Self::Error>;
    /// Buffer a delete of `key`.
    async fn delete(&mut self, key: Key) -> Result<(), Self::Error>;
    /// Up to `limit` live pairs with `start <= key < end`, in key order.
    async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, Self::Error>;
    /// Think for `ns` (client time) with the transaction open: a long
    /// transaction that may outlive the GC window.
    async fn pause(&mut self, ns: u64) -> Result<(), Self::Error> {
        let _ = ns;
        Ok(())
    }
}

/// One step a [`Program`] asks its driver to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read a key.
    Get(Key),
    /// Buffer a write.
    Put(Key, Value),
    /// Buffer a delete; the id names the tombstone in the history.
    Delete(Key, u64),
    /// Scan up to `limit` live rows with `start <= key < end`; the rows go
    /// to [`Program::rows`].
    Scan {
        /// First key.
        start: Key,
        /// End (exclusive).
        end: Key,
        /// Row limit.
        limit: usize,
    },
    /// Keep the transaction open for `ns` of client time.
    Pause(u64),
    /// Try to commit; the program is finished afterwards.
    Commit,
    /// Give up (the program decided the transaction is pointless).
    Abort,
}

/// A transaction written as a state machine, for drivers that cannot run
/// async code (the deterministic simulator). The driver calls [`Program::next`]
/// with the result of the previous `Get` (or `None` for the first call and
/// after a `Put`) until it returns `Commit` or `Abort`.
pub trait Program {
    /// The next step, given the value returned by the previous `Get`.
    fn next(&mut self, last_get: Option<Option<Value>>) -> Step;

    /// The rows of the previous `Scan`, delivered before the next call to
    /// [`Program::next`] (which then gets `None`).
    fn rows(&mut self, rows: &[(Key, Value)]) {
        let _ = rows;
    }

    /// Called once the transaction committed. A workload checks its own
    /// invariant here (the bank audit's exact total); `Err` is a violation.
    fn on_commit(&mut self) -> Result<(), String> {
        Ok(())
    }
}

impl TxnOps for meridian_client::Txn {
    type Error = meridian_client::TxnError;
    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, Self::Error> {
        meridian_client::Txn::get(self, key).await
    }
    async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, Self::Error> {
        meridian_client::Txn::get_many(self, keys).await
    }
    async fn put(&mut self, key: Key, value: Value) -> Result<(), Self::Error> {
        meridian_client::Txn::put(self, key, value).await
    }
    async fn delete(&mut self, key: Key) -> Result<(), Self::Error> {
        meridian_client::Txn::delete(self, key).await
    }
    async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, Self::Error> {
        meridian_client::Txn::scan(self, start, Some(end), limit.min(u32::MAX as usize) as u32)
            .await
    }
    async fn pause(&mut self, ns: u64) -> Result<(), Self::Error> {
        meridian_client::Txn::pause(self, ns).await;
        Ok(())
    }
}

/// A program that replays a fixed list of steps drawn up front (it ignores
/// what reads return), then commits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    steps: Vec<Step>,
    at: usize,
}

impl Script {
    /// A script of `steps` (a final `Commit` is implied).
    pub fn new(steps: Vec<Step>) -> Self {
        Script { steps, at: 0 }
    }
}

impl Script {
    /// True if the script makes one read and nothing else before it
    /// commits (a single-read transaction, `TxnOptions::single_read`).
    pub fn is_single_read(&self) -> bool {
        matches!(
            self.steps.as_slice(),
            [Step::Get(_), Step::Commit] | [Step::Get(_)]
        )
    }

    /// The steps as a thin client's operations (`Execute`), or `None` if
    /// the script pauses or aborts (a node runs the operations without
    /// waiting, and always commits).
    pub fn client_ops(&self) -> Option<Vec<meridian_client::ClientOp>> {
        use meridian_client::ClientOp;
        let mut ops = Vec::with_capacity(self.steps.len());
        for s in &self.steps[self.at.min(self.steps.len())..] {
            ops.push(match s {
                Step::Get(k) => ClientOp::Get(k.clone()),
                Step::Put(k, v) => ClientOp::Put(k.clone(), v.clone()),
                Step::Delete(k, _) => ClientOp::Delete(k.clone()),
                Step::Scan { start, end, limit } => ClientOp::Scan {
                    start: start.clone(),
                    end: Some(end.clone()),
                    limit: (*limit).min(u32::MAX as usize) as u32,
                },
                Step::Commit => break,
                Step::Pause(_) | Step::Abort => return None,
            });
        }
        Some(ops)
    }
}

/// The results of a thin client's committed `Execute`, replayed as a
/// transaction: each operation returns the next result. Running the same
/// program over it with [`run_program`] records the history exactly as
/// for a transaction the client coordinated itself.
#[derive(Debug)]
pub struct Replay {
    results: std::collections::VecDeque<meridian_client::ClientOpResult>,
}

impl Replay {
    /// Replay `results` (one per operation, in order).
    pub fn new(results: Vec<meridian_client::ClientOpResult>) -> Self {
        Replay {
            results: results.into(),
        }
    }

    fn next(&mut self, want: &str) -> Result<meridian_client::ClientOpResult, String> {
        self.results
            .pop_front()
            .ok_or_else(|| format!("no result left for a {want}"))
    }
}

impl TxnOps for Replay {
    type Error = String;
    async fn get(&mut self, _key: &[u8]) -> Result<Option<Value>, String> {
        match self.next("get")? {
            meridian_client::ClientOpResult::Value(v) => Ok(v),
            other => Err(format!("a get answered with {other:?}")),
        }
    }
    async fn put(&mut self, _key: Key, _value: Value) -> Result<(), String> {
        match self.next("put")? {
            meridian_client::ClientOpResult::Done => Ok(()),
            other => Err(format!("a put answered with {other:?}")),
        }
    }
    async fn delete(&mut self, _key: Key) -> Result<(), String> {
        match self.next("delete")? {
            meridian_client::ClientOpResult::Done => Ok(()),
            other => Err(format!("a delete answered with {other:?}")),
        }
    }
    async fn scan(
        &mut self,
        _start: &[u8],
        _end: &[u8],
        _limit: usize,
    ) -> Result<Vec<(Key, Value)>, String> {
        match self.next("scan")? {
            meridian_client::ClientOpResult::Rows(rows) => Ok(rows),
            other => Err(format!("a scan answered with {other:?}")),
        }
    }
}

/// A transaction that serves nothing: every read is absent, every scan
/// empty, every write accepted. Running a program over it with
/// [`run_program`] yields the writes and deletes it would make, for the
/// record of an attempt whose outcome is unknown.
#[derive(Clone, Copy, Debug, Default)]
pub struct Blind;

impl TxnOps for Blind {
    type Error = std::convert::Infallible;
    async fn get(&mut self, _key: &[u8]) -> Result<Option<Value>, Self::Error> {
        Ok(None)
    }
    async fn put(&mut self, _key: Key, _value: Value) -> Result<(), Self::Error> {
        Ok(())
    }
    async fn delete(&mut self, _key: Key) -> Result<(), Self::Error> {
        Ok(())
    }
    async fn scan(
        &mut self,
        _start: &[u8],
        _end: &[u8],
        _limit: usize,
    ) -> Result<Vec<(Key, Value)>, Self::Error> {
        Ok(Vec::new())
    }
}

impl Program for Script {
    fn next(&mut self, _last: Option<Option<Value>>) -> Step {
        let s = self.steps.get(self.at).cloned().unwrap_or(Step::Commit);
        self.at += 1;
        s
    }
}

/// How a [`Program`] run by [`run_program`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The program asked to commit; the caller commits.
    Commit,
    /// The program gave up; the caller aborts.
    Abort,
}

/// Run `program`'s steps on an open transaction until it asks to commit or
/// abort, recording into `rec` every read served by the store (reads of the
/// transaction's own writes are not recorded) and every write, by write id
/// ([`crate::bank::write_id`]). The same code drives the real cluster and
/// the simulator.
///
/// Errors: the first error of an operation (the transaction is then over).
pub async fn run_program<T: TxnOps>(
    tx: &mut T,
    program: &mut (impl Program + ?Sized),
    rec: &mut meridian_checker::TxnRecord,
) -> Result<Ending, T::Error> {
    let mut own = std::collections::BTreeSet::new();
    let mut last = None;
    loop {
        match program.next(last.take()) {
            Step::Get(k) => {
                let v = tx.get(&k).await?;
                if !own.contains(&k) {
                    rec.reads
                        .push((k, v.as_deref().and_then(crate::bank::write_id)));
                }
                last = Some(v);
            }
            Step::Put(k, v) => {
                if let Some(id) = crate::bank::write_id(&v) {
                    rec.writes.retain(|(key, _)| key != &k);
                    rec.deletes.retain(|(key, _)| key != &k);
                    rec.writes.push((k.clone(), id));
                }
                own.insert(k.clone());
                tx.put(k, v).await?;
            }
            Step::Delete(k, id) => {
                rec.writes.retain(|(key, _)| key != &k);
                rec.deletes.retain(|(key, _)| key != &k);
                rec.deletes.push((k.clone(), id));
                own.insert(k.clone());
                tx.delete(k).await?;
            }
            Step::Scan { start, end, limit } => {
                let rows = tx.scan(&start, &end, limit).await?;
                rec.scans.push(meridian_checker::ScanRead {
                    start,
                    end: Some(end),
                    limit,
                    rows: rows
                        .iter()
                        .filter_map(|(k, v)| Some((k.clone(), crate::bank::write_id(v)?)))
                        .collect(),
                });
                program.rows(&rows);
            }
            Step::Pause(ns) => tx.pause(ns).await?,
            Step::Commit => return Ok(Ending::Commit),
            Step::Abort => return Ok(Ending::Abort),
        }
    }
}
