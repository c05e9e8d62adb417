//! # One closed loop for every target
//!
//! **Problem.** Figures for Meridian and a peer are comparable only when
//! the same code drives both: the same transaction generator, the same
//! transaction bodies, the same retry rule, the same histograms. Only the
//! transaction object may differ.
//!
//! **Design.** A workload is a [`Mix`]: it draws an [`Op`], and an `Op`
//! runs as the body of one open transaction through the
//! [`TxnOps`] trait (get, put, delete, scan). A target provides a
//! [`BenchSession`] whose transactions implement [`TxnOps`] plus
//! [`BenchTxn`] (commit, abort). [`session_loop`] is the closed loop of
//! one session: draw, begin, run the body, commit; on a conflict abort,
//! back off as the client library's retry helper does (jittered, 50 µs
//! doubling to 20 ms; a precise sleep, since tokio's timer rounds up to
//! 1 ms) and run the same input again until it commits (latency counts
//! from the first attempt). [`run_sessions`] starts one loop per session and
//! merges their accumulators.
//!
//! Each loop is spawned by a closure written where the session type is
//! concrete (`|args| tokio::spawn(session_loop(args))`): the futures of
//! [`TxnOps`]'s async methods are `Send` only as concrete types.
//!
//! **What is counted.** A committed transaction ([`Acc::committed`]),
//! among them those that succeeded in the workload's own sense (TATP's
//! MQTh), conflict aborts ([`Failure::Abort`]), deliberate rollbacks (the
//! 1% of TPC-C NewOrders that name an unused item) and inconsistencies (a
//! row that must exist was absent: the run fails).

use crate::run::{progress, Acc};
use meridian_client::mono_ns;
use meridian_txn::{TxnError, TxnOptions};
use meridian_workload::ops::TxnOps;
use meridian_workload::{rmw, tatp, tpcc, ycsb};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the closed loop does after an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A concurrency-control abort: run the same input again.
    Abort,
    /// A transient unavailability (Meridian's clock disabled during a CM
    /// change, FaRMv2 §4.3): wait 1 ms and run it again.
    Retry,
    /// Anything else: log it, wait 10 ms and draw a new input.
    Fatal,
}

/// An error a target's transactions can return.
pub trait Classify: Display {
    /// How the closed loop treats it.
    fn failure(&self) -> Failure;
    /// For an abort, a short name of its cause, for the bench's abort
    /// breakdown (`read-locked`, `lock-locked`, `validate-changed`, … for
    /// Meridian; one cause per peer).
    fn abort_cause(&self) -> &'static str {
        "conflict"
    }
}

impl Classify for TxnError {
    fn failure(&self) -> Failure {
        match self {
            e if e.is_abort() => Failure::Abort,
            TxnError::ClockUnavailable => Failure::Retry,
            _ => Failure::Fatal,
        }
    }
    fn abort_cause(&self) -> &'static str {
        use meridian_client::AbortReason as R;
        use meridian_wire::Conflict as C;
        let TxnError::Aborted(r) = self else {
            return "other";
        };
        let (phase, c) = match r {
            R::Read(c) => ("read", c),
            R::Lock(c) => ("lock", c),
            R::Validate(c) => ("validate", c),
            R::User => return "user",
            R::Abandoned => return "abandoned",
            R::Reconfigured => return "reconfigured",
            R::ClockUnavailable => return "clock-unavailable",
        };
        match (phase, c) {
            ("read", C::Locked) => "read-locked",
            ("read", C::TooOld) => "read-too-old",
            ("read", _) => "read-other",
            ("lock", C::Locked) => "lock-locked",
            ("lock", C::Changed) => "lock-changed",
            ("lock", _) => "lock-other",
            ("validate", C::Locked) => "validate-locked",
            ("validate", C::Changed) => "validate-changed",
            _ => "validate-other",
        }
    }
}

/// An open transaction of some target: the workload's operations plus
/// the end of the transaction.
#[allow(async_fn_in_trait)]
pub trait BenchTxn: TxnOps<Error: Classify> + Sized {
    /// Commit.
    ///
    /// Errors: an abort ([`Failure::Abort`]) or an operational error.
    async fn commit(self) -> Result<(), Self::Error>;
    /// Give up (after an error, or a deliberate rollback).
    async fn abort(self);
}

/// A session of some target: one transaction at a time.
#[allow(async_fn_in_trait)]
pub trait BenchSession {
    /// Its errors.
    type Error: Classify;
    /// Its transactions.
    type Txn<'a>: BenchTxn + TxnOps<Error = Self::Error>
    where
        Self: 'a;
    /// Begin a transaction; its `shape` lets the target take a cheaper
    /// path (the transaction must then keep to it).
    ///
    /// Errors: the target could not begin one.
    async fn begin(&mut self, shape: Shape) -> Result<Self::Txn<'_>, Self::Error>;
}

/// What a transaction body will do, known before it begins, so that a
/// target can take a cheaper path: the same hint for every target, each
/// using what it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// It may write.
    ReadWrite,
    /// It never writes.
    ReadOnly,
    /// One `get` and nothing else (YCSB's read, TATP's
    /// GET_SUBSCRIBER_DATA and GET_ACCESS_DATA). Meridian serves it as a
    /// lock-free read (`TxnOptions::single_read`, FaRM §3); the peers as
    /// read-only.
    SingleRead,
}

impl Shape {
    /// True unless [`Shape::ReadWrite`].
    pub fn is_read_only(self) -> bool {
        self != Shape::ReadWrite
    }
}

impl BenchTxn for meridian_client::Txn {
    async fn commit(self) -> Result<(), TxnError> {
        meridian_client::Txn::commit(self).await.map(|_| ())
    }
    async fn abort(self) {
        meridian_client::Txn::abort(self)
    }
}

impl BenchSession for meridian_client::Session {
    type Error = TxnError;
    type Txn<'a> = meridian_client::Txn;
    async fn begin(&mut self, shape: Shape) -> Result<meridian_client::Txn, TxnError> {
        let opts = match shape {
            Shape::ReadWrite => TxnOptions::default(),
            Shape::ReadOnly => TxnOptions::read_only(),
            Shape::SingleRead => TxnOptions::single_read(),
        };
        meridian_client::Session::begin(self, opts).await
    }
}

/// A workload: what each transaction's input is drawn from.
pub enum Mix {
    /// TATP's seven-transaction mix (FaRM §6.2).
    Tatp(tatp::TatpConfig),
    /// A YCSB core workload.
    Ycsb {
        /// The operation and key generator.
        generator: ycsb::YcsbGenerator,
        /// Bytes per written value.
        value_bytes: usize,
    },
    /// The multi-key read-modify-write with its exact audit.
    Rmw(rmw::RmwConfig),
    /// TPC-C's full mix (FaRM §6.3); session `i` has home warehouse
    /// `i mod W + 1`.
    Tpcc(tpcc::TpccConfig),
}

impl Mix {
    /// Short name (`tatp`, `ycsb-b`, `rmw`).
    pub fn name(&self) -> String {
        match self {
            Mix::Tatp(_) => "tatp".into(),
            Mix::Ycsb { generator, .. } => format!("ycsb-{}", generator.workload().name()),
            Mix::Rmw(_) => "rmw".into(),
            Mix::Tpcc(_) => "tpcc".into(),
        }
    }

    /// The workload's parameters, into a result's extra figures.
    pub fn describe(&self, extra: &mut std::collections::BTreeMap<String, f64>) {
        match self {
            Mix::Tatp(cfg) => {
                extra.insert("subscribers".into(), cfg.subscribers as f64);
            }
            Mix::Ycsb {
                generator,
                value_bytes,
            } => {
                extra.insert("theta".into(), generator.keys().zipfian().theta());
                extra.insert("records".into(), generator.keys().zipfian().items() as f64);
                extra.insert("value_bytes".into(), *value_bytes as f64);
            }
            Mix::Rmw(cfg) => {
                extra.insert("records".into(), cfg.records as f64);
                extra.insert("keys_per_txn".into(), cfg.keys as f64);
                extra.insert("value_bytes".into(), cfg.value_bytes as f64);
            }
            Mix::Tpcc(cfg) => {
                extra.insert("warehouses".into(), cfg.warehouses as f64);
            }
        }
    }

    /// The next transaction's input for session number `session`.
    pub fn next(&self, session: usize, rng: &mut SmallRng) -> Op {
        match self {
            Mix::Tatp(cfg) => Op::Tatp(tatp::next_txn(cfg, rng)),
            Mix::Ycsb { generator, .. } => Op::Ycsb(generator.next_op(rng)),
            Mix::Rmw(cfg) => Op::Rmw(rmw::next_txn(cfg, rng)),
            Mix::Tpcc(cfg) => {
                let home = (session % cfg.warehouses.max(1) as usize) as u32 + 1;
                Op::Tpcc(tpcc::next_txn(cfg, home, rng))
            }
        }
    }
}

/// One transaction's input.
#[derive(Clone, Debug)]
pub enum Op {
    /// A TATP transaction.
    Tatp(tatp::TatpTxn),
    /// A YCSB operation.
    Ycsb(ycsb::YcsbOp),
    /// An RMW transaction.
    Rmw(rmw::RmwTxn),
    /// A TPC-C transaction.
    Tpcc(tpcc::TpccTxn),
}

/// How a transaction body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Commit it; `successful` in the workload's sense.
    Commit {
        /// TATP: the row was found (an insert found none).
        successful: bool,
    },
    /// Abort it on purpose (not a conflict).
    Rollback,
    /// A row that must exist was absent or malformed: abort and report.
    Inconsistent(&'static str),
}

impl Op {
    /// The transaction type's name, the latency histogram's label.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Tatp(t) => t.kind.name(),
            Op::Ycsb(o) => o.name(),
            Op::Rmw(_) => "rmw",
            Op::Tpcc(t) => t.kind().name(),
        }
    }

    /// What the body does ([`Shape`]).
    pub fn shape(&self) -> Shape {
        let read_only = match self {
            Op::Tatp(t) if t.kind.is_single_read() => return Shape::SingleRead,
            Op::Ycsb(o) if o.is_read_only() => return Shape::SingleRead,
            Op::Tatp(t) => t.kind.is_read_only(),
            Op::Ycsb(_) | Op::Rmw(_) => false,
            Op::Tpcc(t) => t.kind().is_read_only(),
        };
        if read_only {
            Shape::ReadOnly
        } else {
            Shape::ReadWrite
        }
    }

    /// Run the body on the open transaction `t`.
    ///
    /// Errors: the first error of `t`.
    pub async fn execute<T: TxnOps>(
        &self,
        t: &mut T,
        mix: &Mix,
        rng: &mut SmallRng,
    ) -> Result<Ending, T::Error> {
        Ok(match (self, mix) {
            (Op::Tatp(txn), _) => Ending::Commit {
                successful: tatp::execute(t, txn).await?,
            },
            (Op::Ycsb(op), Mix::Ycsb { value_bytes, .. }) => {
                ycsb::execute(t, *op, *value_bytes, rng).await?;
                Ending::Commit { successful: true }
            }
            (Op::Ycsb(op), _) => {
                ycsb::execute(t, *op, 1, rng).await?;
                Ending::Commit { successful: true }
            }
            (Op::Rmw(txn), mix) => {
                let value_bytes = match mix {
                    Mix::Rmw(cfg) => cfg.value_bytes,
                    _ => 8,
                };
                match rmw::execute(t, txn, value_bytes).await? {
                    true => Ending::Commit { successful: true },
                    false => Ending::Inconsistent("an RMW counter is missing or malformed"),
                }
            }
            (Op::Tpcc(txn), _) => match tpcc::execute(t, txn).await? {
                tpcc::Outcome::Commit => Ending::Commit { successful: true },
                tpcc::Outcome::RolledBack => Ending::Rollback,
                tpcc::Outcome::Missing(what) => Ending::Inconsistent(what),
            },
        })
    }
}

/// What one session's loop needs besides its session.
#[derive(Clone)]
pub struct LoopCtx {
    /// The workload.
    pub mix: Arc<Mix>,
    /// The session's number (TPC-C's home warehouse).
    pub session: usize,
    /// The session's RNG seed.
    pub seed: u64,
    /// When to stop drawing new inputs.
    pub deadline: Instant,
    /// Commits of all sessions (for the progress bar).
    pub count: Arc<AtomicU64>,
}

/// The retry back-off of the closed loop: the client library's default
/// ([`meridian_config::Limits::retry_backoff_us`], 50 µs doubling to
/// 20 ms), the same for every target.
static RETRY: std::sync::LazyLock<meridian_config::Limits> =
    std::sync::LazyLock::new(meridian_config::Limits::default);

/// The closed loop of one session (see the module essay). Returns the
/// session too, so that [`run_sessions`] closes it only after the
/// window's CPU is read (a PostgreSQL backend exits with its connection,
/// and its CPU with it).
pub(crate) async fn session_loop<S: BenchSession>(mut s: S, ctx: LoopCtx) -> (Acc, S) {
    let mut acc = Acc::default();
    let mut rng = SmallRng::seed_from_u64(ctx.seed);
    let mix = &*ctx.mix;
    while Instant::now() < ctx.deadline {
        let op = mix.next(ctx.session, &mut rng);
        let t0 = mono_ns();
        let mut aborted = 0u32;
        loop {
            let r = async {
                let mut tx = s.begin(op.shape()).await?;
                match op.execute(&mut tx, mix, &mut rng).await {
                    Ok(Ending::Commit { successful }) => {
                        tx.commit().await?;
                        Ok(Ending::Commit { successful })
                    }
                    Ok(other) => {
                        tx.abort().await;
                        Ok(other)
                    }
                    Err(e) => {
                        tx.abort().await;
                        Err(e)
                    }
                }
            }
            .await;
            match r {
                Ok(Ending::Commit { successful }) => {
                    acc.committed += 1;
                    acc.successful += successful as u64;
                    acc.record(op.name(), (mono_ns() - t0) / 1000);
                    ctx.count.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ending::Rollback) => {
                    acc.rollbacks += 1;
                    break;
                }
                Ok(Ending::Inconsistent(what)) => {
                    if acc.inconsistent == 0 {
                        tracing::error!("{}: {what}", op.name());
                    }
                    acc.inconsistent += 1;
                    break;
                }
                Err(e) => match e.failure() {
                    Failure::Abort => {
                        acc.abort(op.name(), e.abort_cause());
                        if Instant::now() >= ctx.deadline {
                            break;
                        }
                        // The client's retry rule, for every target: a
                        // jittered, doubling back-off, so that sessions
                        // that aborted on one hot row do not meet there
                        // again at once.
                        aborted += 1;
                        let us = RETRY.retry_backoff_us(aborted, |exp| {
                            rand::Rng::gen_range(&mut rng, 0..exp)
                        });
                        meridian_runtime::wait::wait_until(mono_ns() + us * 1000).await;
                    }
                    Failure::Retry => {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        if Instant::now() >= ctx.deadline {
                            break;
                        }
                    }
                    Failure::Fatal => {
                        tracing::error!("{}: {e}", op.name());
                        acc.errors += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        break;
                    }
                },
            }
        }
    }
    (acc, s)
}

/// Run `sessions` for `secs`, one loop each, spawned by `spawn` (written
/// where the session type is concrete: `|s, ctx|
/// tokio::spawn(session_loop(s, ctx))`). Returns the merged accumulator,
/// with the CPU the bench client and `servers` used over the window
/// ([`crate::cpu`]), and the seconds measured. Session `i` gets seed
/// `seed ^ i`.
pub(crate) async fn run_sessions<S, F, J>(
    label: &str,
    sessions: Vec<S>,
    mix: Arc<Mix>,
    seed: u64,
    secs: u64,
    servers: &crate::cpu::Servers,
    spawn: F,
) -> (Acc, f64)
where
    F: Fn(S, LoopCtx) -> J,
    J: Future<Output = Result<(Acc, S), tokio::task::JoinError>>,
{
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let bar = progress(label, secs, count.clone(), stop.clone());
    let cpu = crate::cpu::CpuSample::take(servers);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let tasks: Vec<J> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            spawn(
                s,
                LoopCtx {
                    mix: mix.clone(),
                    session: i,
                    seed: seed ^ i as u64,
                    deadline,
                    count: count.clone(),
                },
            )
        })
        .collect();
    let mut acc = Acc::default();
    let mut open = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok((a, s)) => {
                acc.merge(a);
                open.push(s);
            }
            Err(e) => {
                tracing::error!("{label}: a session task failed: {e}");
                acc.errors += 1;
            }
        }
    }
    let el = start.elapsed().as_secs_f64();
    acc.cpu = Some(cpu.since(servers));
    drop(open);
    stop.store(true, Ordering::Relaxed);
    let _ = bar.await;
    (acc, el)
}

/// Keys per read-only audit transaction.
const AUDIT_CHUNK: u32 = 1000;

/// The RMW audit: read every counter (read-only transactions of
/// `AUDIT_CHUNK` gets, retried on abort) and return their sum, which must
/// be `cfg.keys ×` the committed RMW transactions when nothing else runs.
///
/// Errors: a non-abort error, or a missing or malformed counter.
pub async fn audit_rmw<S: BenchSession>(s: &mut S, cfg: &rmw::RmwConfig) -> Result<u64, String> {
    let mut sum = 0u64;
    let mut from = 0u32;
    while from < cfg.records {
        let to = from.saturating_add(AUDIT_CHUNK).min(cfg.records);
        let r = async {
            let mut tx = s.begin(Shape::ReadOnly).await?;
            match rmw::audit(&mut tx, cfg, from, to).await {
                Ok(r) => {
                    tx.commit().await?;
                    Ok(r)
                }
                Err(e) => {
                    tx.abort().await;
                    Err(e)
                }
            }
        }
        .await;
        match r {
            Ok(Ok(part)) => {
                sum += part;
                from = to;
            }
            Ok(Err(n)) => return Err(format!("rmw audit: counter {n} is missing or malformed")),
            Err(e) if e.failure() != Failure::Fatal => {}
            Err(e) => return Err(format!("rmw audit: {e}")),
        }
    }
    Ok(sum)
}

/// Rows per scan of the TPC-C consistency check.
const CHECK_CHUNK: usize = 2000;

/// TPC-C's consistency conditions (spec 3.3.2) over the whole store, read
/// by successive read-only scans of `CHECK_CHUNK` rows (retried on
/// abort). Run it when nothing else writes. Returns the rows read.
///
/// Errors: a non-abort error, or the first violated conditions.
pub async fn check_tpcc<S: BenchSession>(
    s: &mut S,
    cfg: &tpcc::TpccConfig,
    progress: impl Fn(u64),
) -> Result<u64, String> {
    let mut checker = tpcc::ConsistencyChecker::new();
    let mut from: Vec<u8> = Vec::new();
    let end = vec![0xFFu8; 64];
    loop {
        let r = async {
            let mut tx = s.begin(Shape::ReadOnly).await?;
            match tx.scan(&from, &end, CHECK_CHUNK).await {
                Ok(rows) => {
                    tx.commit().await?;
                    Ok(rows)
                }
                Err(e) => {
                    tx.abort().await;
                    Err(e)
                }
            }
        }
        .await;
        match r {
            Ok(rows) => {
                let Some((last, _)) = rows.last() else { break };
                let mut next = last.clone();
                next.push(0);
                for (k, v) in &rows {
                    checker.add(k, v);
                }
                progress(checker.rows());
                if rows.len() < CHECK_CHUNK {
                    break;
                }
                from = next;
            }
            Err(e) if e.failure() != Failure::Fatal => {}
            Err(e) => return Err(format!("tpcc check: {e}")),
        }
    }
    let rows = checker.rows();
    checker.finish(cfg).map(|()| rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_client::AbortReason as R;
    use meridian_wire::Conflict as C;

    /// Each abort names its phase and the conflict that caused it, and the
    /// accumulator counts it under its transaction type.
    #[test]
    fn aborts_are_counted_by_type_and_cause() {
        let cause = |r| Classify::abort_cause(&TxnError::Aborted(r));
        assert_eq!(cause(R::Read(C::Locked)), "read-locked");
        assert_eq!(cause(R::Read(C::TooOld)), "read-too-old");
        assert_eq!(cause(R::Lock(C::Locked)), "lock-locked");
        assert_eq!(cause(R::Lock(C::Changed)), "lock-changed");
        assert_eq!(cause(R::Validate(C::Changed)), "validate-changed");
        assert_eq!(cause(R::Validate(C::Locked)), "validate-locked");
        assert_eq!(cause(R::Reconfigured), "reconfigured");
        assert_eq!(Classify::abort_cause(&TxnError::ReadOnly), "other");
        let mut acc = crate::run::Acc::default();
        acc.abort("PAYMENT", "read-locked");
        acc.abort("PAYMENT", "read-locked");
        acc.abort("NEW_ORDER", "lock-locked");
        let r = crate::run::summarize_core("t", 1.0, 1, acc);
        assert_eq!(r.aborts, 3);
        assert_eq!(r.aborts_by_cause["PAYMENT"]["read-locked"], 2);
        assert_eq!(r.aborts_by_cause["NEW_ORDER"]["lock-locked"], 1);
    }
}
