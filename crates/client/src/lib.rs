//! # Client library: the client is the coordinator
//!
//! As in FaRM, RAMP and RIFL, the application's process coordinates its own
//! transactions: it reads from primaries, buffers writes, keeps its clock
//! synchronised with the clock master and runs commit itself.
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
//! client.close().await;
//! # Ok(()) }
//! ```
//!
//! **Layers.**
//! - [`meridian_process::client::ClientProcess`] holds every decision: the
//!   commit driver, timeouts, abort sending, the truncation queue, clock
//!   sync. It is synchronous and does no I/O.
//! - [`Core`] wraps it behind one mutex and turns application calls into
//!   futures: each call reads `now` *under the lock* (so no clock sample can
//!   be applied between the reading and its use), feeds the process, and
//!   routes the effects: replies complete futures, sends and wake-ups go to
//!   an [`Io`].
//! - [`Io`] is the only part that differs between production and
//!   simulation: [`tokio_io`] owns TCP links (with reconnection) and
//!   precise timers; `meridian-sim` supplies simulated ones. So
//!   [`Session`], [`Txn`] and the retry helper [`Session::run`] are the same
//!   code in both.

pub mod tokio_io;

use meridian_config::Configuration;
use meridian_process::client::{CallResult, ClientProcess, TxnHandle};
use meridian_process::{CallId, Effect};
use meridian_transport::{Connection, TransportError};
pub use meridian_wire::{ClientOp, ClientOpResult, ExecuteError, Executed};
use meridian_wire::{
    CmRequest, CmResponse, Frame, Key, NodeId, Request, Response, Timestamp, TxId, Value,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

pub use meridian_process::client::{ClientStats, CommitInfo};
pub use meridian_runtime::mono_ns;
pub use meridian_txn::{AbortReason, TxnError, TxnOptions as Options, TxnOptions};

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
    /// The operating system refused a resource the client needs (a
    /// thread).
    #[error("{0}")]
    Os(String),
}

/// Why [`Client::execute`] did not return a committed result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThinError {
    /// The node answered: aborted every attempt, busy, invalid, … (see
    /// [`ExecuteError`]; only `Indeterminate` leaves the outcome open).
    #[error(transparent)]
    Node(#[from] ExecuteError),
    /// No answer came: the node may or may not have committed it.
    #[error("no answer, outcome unknown: {0}")]
    NoReply(String),
    /// Something else went wrong before the request was sent.
    #[error(transparent)]
    Client(#[from] TxnError),
}

/// What the core needs from its environment: a local clock, a way to send
/// frames, and timers. Implemented by [`tokio_io::TokioIo`] and by the
/// simulator.
pub trait Io: Send + Sync + 'static {
    /// The local clock, ns.
    fn now_ns(&self) -> u64;
    /// Send `frame` to `to` without blocking. A frame that cannot be queued
    /// is dropped: its RPC then times out, like a lost message.
    fn send(&self, to: NodeId, frame: Frame);
    /// Call [`Core::tick`] at or after local time `at_local_ns`.
    fn wake_at(&self, core: std::sync::Weak<Core>, at_local_ns: u64);
    /// Fault injection (simulator only): `Some(gap_ns)` makes the next
    /// application call *stall* between reading the clock and using it. The
    /// call runs with its clock reading only once an input at least `gap_ns`
    /// later has been processed, so inputs read later (a clock sync, say)
    /// are processed first: the interleaving
    /// `meridian_time::ClockError::StaleLocalTime` guards against.
    fn stall_ns(&self) -> Option<u64> {
        None
    }
}

type Deferred = Box<dyn FnOnce(&mut ClientProcess, u64, CallId) + Send>;

#[derive(Default)]
struct Slot {
    state: Mutex<(Option<CallResult>, Option<Waker>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The future of one application call: its result at once if the process
/// answered the call while it was made (a `begin` whose `read_ts` waits at
/// the nodes, a read of a key the transaction wrote, a read-only commit),
/// else the slot its answer will be put in.
pub struct CallFuture {
    ready: Option<CallResult>,
    slot: Option<Arc<Slot>>,
}

impl Future for CallFuture {
    type Output = CallResult;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CallResult> {
        if let Some(r) = self.ready.take() {
            return Poll::Ready(r);
        }
        let Some(slot) = self.slot.as_ref() else {
            // Polled again after it returned its result: a caller's bug,
            // answered as a failed call rather than a panic.
            return Poll::Ready(CallResult::Failed(TxnError::Closed));
        };
        let mut st = lock(&slot.state);
        match st.0.take() {
            Some(r) => Poll::Ready(r),
            None => {
                st.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

struct State {
    process: ClientProcess,
    slots: BTreeMap<CallId, Arc<Slot>>,
    next_call: CallId,
    /// Stalled calls: (run once an input at or after this local time has
    /// been processed, the clock reading, the call id, the call).
    stalled: Vec<(u64, u64, CallId, Deferred)>,
    /// The call being made, while [`Core::call`] holds the process: its
    /// reply, if the process gives it at once, goes to `inline` instead of
    /// a slot, so a call answered at once costs no slot, no map entry and
    /// no waker.
    making: Option<CallId>,
    /// The reply to `making`, if it came while it was being made.
    inline: Option<CallResult>,
}

/// A [`ClientProcess`] behind a mutex, with futures for its calls.
pub struct Core {
    state: Mutex<State>,
    io: Box<dyn Io>,
    config: Configuration,
    me: std::sync::Weak<Core>,
    /// Set by a ticker that found the process held: the holder ticks for
    /// it before letting go ([`Core::release`]).
    tick_wanted: std::sync::atomic::AtomicBool,
    /// Read-only transactions committed without the process
    /// ([`Txn::commit`]): the process forgets them at its next hold
    /// ([`Core::forget_ended`]). Set while `ended` is not empty.
    ended_any: std::sync::atomic::AtomicBool,
    ended: Mutex<Vec<TxnHandle>>,
}

impl Core {
    /// A core over `process`, talking through `io`.
    pub fn new(config: Configuration, process: ClientProcess, io: Box<dyn Io>) -> Arc<Core> {
        Arc::new_cyclic(|me| Core {
            state: Mutex::new(State {
                process,
                slots: BTreeMap::new(),
                next_call: 1,
                stalled: Vec::new(),
                making: None,
                inline: None,
            }),
            io,
            config,
            me: me.clone(),
            tick_wanted: std::sync::atomic::AtomicBool::new(false),
            ended_any: std::sync::atomic::AtomicBool::new(false),
            ended: Mutex::new(Vec::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Configuration {
        &self.config
    }

    /// Run `f` on the process at the current local time (read under the
    /// lock), then route its effects.
    ///
    /// Before it lets go, it ends the waits that came due meanwhile
    /// ([`Core::release`]). The effects are carried out after the lock is
    /// let go ([`Core::dispatch`]), but before this returns.
    pub fn with<R>(&self, f: impl FnOnce(&mut ClientProcess, u64) -> R) -> R {
        let mut out = Vec::new();
        let r = {
            let mut st = lock(&self.state);
            self.forget_ended(&mut st);
            let now = self.io.now_ns();
            let r = f(&mut st.process, now);
            self.run_stalled(&mut st, now);
            self.route(&mut st, &mut out);
            self.release(&mut st, &mut out);
            r
        };
        self.dispatch(out);
        r
    }

    /// The last step under the lock. An uncertainty wait ends at the first
    /// input after its deadline, and its transaction's next messages leave
    /// then: every microsecond between the deadline and that input is
    /// added to the wait. Two hops would add to it: a wait that comes due
    /// while the holder is processing an input (whose clock was read
    /// before the deadline), and a ticker that finds the lock held and
    /// sleeps on it until the holder lets go, then waits for a CPU. So the
    /// holder re-reads its clock here and ends the due waits itself, and a
    /// ticker that finds the lock held asks the holder to tick for it
    /// (`tick_wanted`) before it blocks.
    fn release(&self, st: &mut State, out: &mut Vec<Routed>) {
        loop {
            let wanted = self.tick_wanted.swap(false, Ordering::AcqRel);
            let due = st.process.next_wait_ns();
            if !wanted && due.is_none() {
                return;
            }
            let now = self.io.now_ns();
            if wanted {
                st.process.tick(now);
            } else if due.is_some_and(|at| at <= now) {
                st.process.end_waits_due(now);
            } else {
                return;
            }
            self.run_stalled(st, now);
            self.route(st, out);
        }
    }

    /// A read-only transaction was committed without the process
    /// ([`Txn::commit`]); the process forgets it at its next hold.
    fn end_read_only(&self, txn: TxnHandle) {
        lock(&self.ended).push(txn);
        self.ended_any.store(true, Ordering::Release);
    }

    /// Let the process forget the read-only transactions committed since
    /// its last hold (under its lock).
    fn forget_ended(&self, st: &mut State) {
        if !self.ended_any.swap(false, Ordering::AcqRel) {
            return;
        }
        let ended = std::mem::take(&mut *lock(&self.ended));
        for txn in ended {
            st.process.finish_read_only(txn);
        }
    }

    fn run_stalled(&self, st: &mut State, now: u64) {
        if st.stalled.is_empty() {
            return;
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut st.stalled)
            .into_iter()
            .partition(|(after, ..)| now >= *after);
        st.stalled = rest;
        for (_, read_ns, id, f) in due {
            f(&mut st.process, read_ns, id);
        }
    }

    fn call(&self, f: impl FnOnce(&mut ClientProcess, u64, CallId) + Send + 'static) -> CallFuture {
        let mut out = Vec::new();
        let fut = {
            let mut st = lock(&self.state);
            self.forget_ended(&mut st);
            let id = st.next_call;
            st.next_call += 1;
            st.making = Some(id);
            let now = self.io.now_ns();
            match self.io.stall_ns() {
                Some(gap) => st
                    .stalled
                    .push((now.saturating_add(gap), now, id, Box::new(f))),
                None => f(&mut st.process, now, id),
            }
            self.route(&mut st, &mut out);
            self.release(&mut st, &mut out);
            st.making = None;
            match st.inline.take() {
                Some(r) => CallFuture {
                    ready: Some(r),
                    slot: None,
                },
                None => {
                    // Put before the process is let go: every later reply
                    // is routed under the lock, so it finds the slot.
                    let slot = Arc::new(Slot::default());
                    st.slots.insert(id, slot.clone());
                    CallFuture {
                        ready: None,
                        slot: Some(slot),
                    }
                }
            }
        };
        self.dispatch(out);
        fut
    }

    /// Take the process's effects, in order, matching each reply with its
    /// call's slot (under the lock).
    fn route(&self, st: &mut State, out: &mut Vec<Routed>) {
        for e in st.process.drain_effects() {
            out.push(match e {
                Effect::Send { to, frame } => Routed::Send(to, frame),
                Effect::Wake { at_local_ns } => Routed::Wake(at_local_ns),
                Effect::Reply { call, result } if st.making == Some(call) => {
                    st.inline = Some(result);
                    continue;
                }
                Effect::Reply { call, result } => match st.slots.remove(&call) {
                    Some(slot) => Routed::Reply(slot, result),
                    None => continue,
                },
            });
        }
    }

    /// Carry out routed effects, in order, without the process's lock: a
    /// send may wake a link's writer and a reply an application task (a
    /// futex call each), and the process is not held through them, so
    /// neither another input nor a due wait queues behind them. Frames to
    /// one node from two threads may leave in either order, as they may
    /// arrive in either order (the simulator delivers every frame after
    /// its own random delay, and the protocol makes no FIFO assumption).
    fn dispatch(&self, out: Vec<Routed>) {
        for r in out {
            match r {
                Routed::Send(to, frame) => self.io.send(to, frame),
                Routed::Wake(at_local_ns) => self.io.wake_at(self.me.clone(), at_local_ns),
                Routed::Reply(slot, result) => {
                    let waker = {
                        let mut s = lock(&slot.state);
                        s.0 = Some(result);
                        s.1.take()
                    };
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
            }
        }
    }

    /// A frame arrived from `from`.
    pub fn on_message(&self, from: NodeId, frame: Frame) {
        self.with(|p, now| p.on_message(now, from, frame))
    }

    /// Frames that arrived together from `from` (one read of a link), in
    /// order, under one hold of the process: each is handled at a fresh
    /// clock reading, as [`Core::on_message`] would, but the lock is taken
    /// and the effects are carried out once for the batch, so the sends
    /// they cause leave together. Drains `frames`.
    pub fn on_messages(&self, from: NodeId, frames: &mut Vec<Frame>) {
        match frames.len() {
            0 => {}
            1 => {
                if let Some(f) = frames.pop() {
                    self.on_message(from, f)
                }
            }
            _ => self.with(|p, mut now| {
                for (i, f) in frames.drain(..).enumerate() {
                    if i > 0 {
                        now = self.io.now_ns();
                    }
                    p.on_message(now, from, f);
                }
            }),
        }
    }

    /// The link to `node` broke.
    pub fn on_disconnect(&self, node: NodeId) {
        self.with(|p, now| p.on_disconnect(now, node))
    }

    /// A requested wake-up time has come.
    ///
    /// If another thread holds the process, the holder is asked to tick
    /// on its way out ([`Core::release`]), so the tick does not wait for
    /// this thread to be woken and scheduled; this thread then ticks too
    /// once it has the lock, unless the holder already did.
    pub fn tick(&self) {
        let mut out = Vec::new();
        {
            let (mut st, tick) = match self.state.try_lock() {
                Ok(g) => (g, true),
                Err(std::sync::TryLockError::Poisoned(p)) => (p.into_inner(), true),
                Err(std::sync::TryLockError::WouldBlock) => {
                    self.tick_wanted.store(true, Ordering::Release);
                    let st = lock(&self.state);
                    (st, self.tick_wanted.swap(false, Ordering::AcqRel))
                }
            };
            self.forget_ended(&mut st);
            if tick {
                let now = self.io.now_ns();
                st.process.tick(now);
                self.run_stalled(&mut st, now);
                self.route(&mut st, &mut out);
            }
            self.release(&mut st, &mut out);
        }
        self.dispatch(out);
    }
}

/// An effect taken from the process under its lock, carried out after
/// ([`Core::dispatch`]).
enum Routed {
    Send(NodeId, Frame),
    Wake(u64),
    Reply(Arc<Slot>, CallResult),
}

/// Closes the process (flushing truncations) when the last [`Client`]
/// handle is dropped without [`Client::close`].
struct Owner {
    core: Arc<Core>,
    closed: std::sync::atomic::AtomicBool,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let core = self.core.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let timeout = std::time::Duration::from_millis(
                    core.config.limits.rpc_timeout_ms * core.config.limits.rpc_attempts as u64,
                );
                let _ = tokio::time::timeout(timeout, core.call(|p, now, c| p.close(now, c))).await;
            });
        }
    }
}

/// A connected client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    owner: Arc<Owner>,
    next_thread: Arc<AtomicU32>,
}

impl Client {
    /// Connect through the CM at `cm_addr`: register for a coordinator id,
    /// fetch the configuration, connect to every node and synchronise the
    /// clock.
    ///
    /// Errors: [`ClientError`] on network failure, a bad configuration or a
    /// clock that does not synchronise within 5 s.
    pub async fn connect(cm_addr: &str) -> Result<Client, ClientError> {
        let limits = meridian_config::Limits::default();
        let cm = Connection::connect(cm_addr, 16, 4096, limits.rpc_timeout_ms).await?;
        let (coordinator, config_toml) = match cm
            .call(Vec::new(), Request::Cm(CmRequest::RegisterClient))
            .await?
        {
            Response::Cm(CmResponse::Registered {
                coordinator,
                config_toml,
            }) => (coordinator, config_toml),
            other => return Err(ClientError::Protocol(cm_addr.into(), format!("{other:?}"))),
        };
        let config = Configuration::from_toml(&config_toml)?;
        Self::connect_with(config, coordinator).await
    }

    /// Connect with a known configuration and coordinator id.
    ///
    /// Errors: as [`Client::connect`].
    pub async fn connect_with(
        config: Configuration,
        coordinator: u64,
    ) -> Result<Client, ClientError> {
        let seed = mono_ns() ^ (coordinator << 32);
        let process = ClientProcess::new(&config, coordinator, seed);
        let core = tokio_io::start(config, process)?;
        let client = Client::over(core);
        let deadline = mono_ns() + 5_000_000_000;
        while !client.core().with(|p, _| p.is_synchronised()) {
            if mono_ns() > deadline {
                return Err(ClientError::ClockTimeout(5000));
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(client)
    }

    /// A client over an existing core (the simulator builds its own).
    pub fn over(core: Arc<Core>) -> Client {
        Client {
            owner: Arc::new(Owner {
                core,
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
            next_thread: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The core.
    pub fn core(&self) -> &Arc<Core> {
        &self.owner.core
    }

    /// The configuration.
    pub fn config(&self) -> &Configuration {
        &self.owner.core.config
    }

    /// This client's coordinator id (the `m` of its transaction ids).
    pub fn coordinator_id(&self) -> u64 {
        self.core().with(|p, _| p.coordinator())
    }

    /// Counters of the client process (timestamps, retries, …).
    pub fn stats(&self) -> ClientStats {
        self.core().with(|p, _| p.stats())
    }

    /// The clock's current uncertainty, ns (`None` if not synchronised).
    pub fn uncertainty_ns(&self) -> Option<u64> {
        self.core().with(|p, now| p.uncertainty_ns(now))
    }

    /// A new session (one coordinator thread).
    pub fn session(&self) -> Session {
        Session {
            client: self.clone(),
            thread: self.next_thread.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Null RPC to `node`.
    ///
    /// Errors: [`TxnError::Transport`].
    pub async fn ping(&self, node: NodeId) -> Result<(), TxnError> {
        match self
            .core()
            .call(move |p, now, c| p.ping(now, c, node))
            .await
        {
            CallResult::Pong => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Ask node `node` to run `ops` as one transaction and commit it (the
    /// thin-client path: the node coordinates). Sent once, never retried.
    ///
    /// Errors: [`ThinError::Node`] with the node's typed refusal,
    /// [`ThinError::NoReply`] if no answer came in time (outcome unknown).
    pub async fn execute(&self, node: NodeId, ops: Vec<ClientOp>) -> Result<Executed, ThinError> {
        match self
            .core()
            .call(move |p, now, c| p.execute(now, c, node, ops))
            .await
        {
            CallResult::Executed(r) => Ok(r?),
            CallResult::ExecuteLost(why) => Err(ThinError::NoReply(why)),
            other => Err(ThinError::Client(unexpected(other))),
        }
    }

    /// Register with the CM for a coordinator id, for a client built over a
    /// core whose process has none yet (the simulator's clients; a restarted
    /// client). Returns the id.
    ///
    /// Errors: [`TxnError::Transport`] if the CM does not answer within
    /// `rpc_attempts` tries, [`TxnError::Protocol`] on another answer.
    pub async fn register(&self) -> Result<u64, TxnError> {
        match self.core().call(|p, now, c| p.register(now, c)).await {
            CallResult::Registered(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }

    /// Sleep `duration_ns` of the client's local time (simulated time in the
    /// simulator).
    pub async fn sleep(&self, duration_ns: u64) {
        self.core()
            .call(move |p, now, c| p.sleep(now, c, duration_ns))
            .await;
    }

    /// Stop taking transactions and flush every queued TRUNCATE; returns once
    /// they are acknowledged (or given up after `rpc_attempts`). Then the
    /// client's lease is released (FaRM §5.1), so the CM does not suspect
    /// it; a client that stops without closing is suspected a lease later
    /// and the configuration is renewed to recover its transactions.
    pub async fn close(&self) {
        self.core().call(|p, now, c| p.close(now, c)).await;
        self.owner.closed.store(true, Ordering::Release);
    }
}

fn unexpected(r: CallResult) -> TxnError {
    match r {
        CallResult::Failed(e) => e,
        other => TxnError::Protocol {
            node: NodeId(u32::MAX),
            detail: format!("unexpected call result {other:?}"),
        },
    }
}

/// A boxed future borrowed from a transaction, for [`Session::run`].
pub type TxnFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TxnError>> + Send + 'a>>;

/// One coordinator thread: runs one transaction at a time.
pub struct Session {
    client: Client,
    thread: u32,
}

impl Session {
    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Begin a transaction: `read_ts = GET_TS()` (uncertainty waited out).
    /// A single read ([`TxnOptions::single_read`]) needs no `read_ts`:
    /// while the clock is usable it begins at once, and [`Txn::read_ts`]
    /// is then `Timestamp::ZERO` (see [`Txn::observed_version`]).
    ///
    /// Errors: [`TxnError::ClockUnavailable`], [`TxnError::Closed`].
    pub async fn begin(&mut self, opts: TxnOptions) -> Result<Txn, TxnError> {
        let thread = self.thread;
        match self
            .client
            .core()
            .call(move |p, now, c| p.begin(now, c, thread, opts))
            .await
        {
            CallResult::Began { txn, tx, read_ts } => Ok(Txn {
                client: self.client.clone(),
                handle: txn,
                tx,
                read_ts,
                open: true,
                through_process: false,
                invoke_ns: 0,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// The retry helper: run `f` in a transaction and commit, retrying aborts
    /// with exponential back-off and jitter (the client process's seeded
    /// RNG), up to `limits.retry_attempts` tries. Operational errors are
    /// returned at once.
    ///
    /// Errors: the last abort once the budget is spent, or the first
    /// operational error.
    pub async fn run<T, F>(&mut self, opts: TxnOptions, f: F) -> Result<T, TxnError>
    where
        F: for<'a> FnMut(&'a mut Txn) -> TxnFuture<'a, T>,
    {
        self.run_info(opts, f).await.map(|(v, _)| v)
    }

    /// [`Session::run`], also returning the commit's [`CommitInfo`]
    /// (`write_ts`, for history recording).
    ///
    /// Errors: as [`Session::run`].
    pub async fn run_info<T, F>(
        &mut self,
        opts: TxnOptions,
        mut f: F,
    ) -> Result<(T, CommitInfo), TxnError>
    where
        F: for<'a> FnMut(&'a mut Txn) -> TxnFuture<'a, T>,
    {
        let attempts = self.client.config().limits.retry_attempts;
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A clock not synchronised yet, or disabled while the CM changes
            // (FaRMv2 §4.3), is waited out with the same back-off.
            let mut tx = match self.begin(opts).await {
                Ok(tx) => tx,
                Err(TxnError::ClockUnavailable) if attempt < attempts => {
                    self.client
                        .core()
                        .call(move |p, now, c| p.backoff(now, c, attempt))
                        .await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let r = match f(&mut tx).await {
                Ok(v) => tx.commit().await.map(|info| (v, info)),
                Err(e) => {
                    tx.abort();
                    Err(e)
                }
            };
            match r {
                Err(e) if e.is_abort() && attempt < attempts => {
                    self.client
                        .core()
                        .call(move |p, now, c| p.backoff(now, c, attempt))
                        .await;
                }
                other => return other,
            }
        }
    }
}

/// An open transaction. Dropping it aborts it.
pub struct Txn {
    client: Client,
    handle: TxnHandle,
    tx: TxId,
    read_ts: Timestamp,
    open: bool,
    /// A write was buffered, or a call failed: commit goes through the
    /// process. Otherwise the transaction is read-only with every read
    /// answered, and commits at once ([`Txn::commit`]).
    through_process: bool,
    /// Free for the caller's bookkeeping (e.g. history recording).
    pub invoke_ns: u64,
}

impl Txn {
    /// The id.
    pub fn id(&self) -> TxId {
        self.tx
    }

    /// The snapshot timestamp.
    pub fn read_ts(&self) -> Timestamp {
        self.read_ts
    }

    fn core(&self) -> &Arc<Core> {
        self.client.core()
    }

    /// For a single-read transaction (`TxnOptions::single_read`) whose read
    /// was answered: the `write_ts` of the newest version it saw, live or a
    /// tombstone (for a key with no stored object, the primary's GC safe
    /// point: see `LatestRead::version`), which is the read's snapshot and
    /// what a history records as its `read_ts`. `None` otherwise.
    pub fn observed_version(&self) -> Option<Timestamp> {
        let h = self.handle;
        self.core().with(|p, _| p.observed_version(h))
    }

    /// Read `key` with its version (`write_ts`); `None` if absent. Buffered
    /// writes are returned with version `Timestamp::ZERO`.
    ///
    /// Errors: `Aborted` (retry), `KeyTooLarge`, `Transport`, …
    pub async fn get_versioned(
        &mut self,
        key: &[u8],
    ) -> Result<Option<(Timestamp, Value)>, TxnError> {
        let h = self.handle;
        let key = key.to_vec();
        match self
            .core()
            .call(move |p, now, c| p.get(now, c, h, &key))
            .await
        {
            CallResult::Read(v) => Ok(v),
            other => Err(self.fail(other)),
        }
    }

    /// Read `key`; `None` if absent.
    ///
    /// Errors: as [`Txn::get_versioned`].
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, TxnError> {
        Ok(self.get_versioned(key).await?.map(|(_, v)| v))
    }

    /// Read every key of `keys` at once (one READ per key, all outstanding
    /// together: one round trip instead of one per key). Values in the
    /// order of `keys`; `None` if absent.
    ///
    /// Errors: as [`Txn::get_versioned`]; the first conflict aborts.
    pub async fn get_many(&mut self, keys: &[Key]) -> Result<Vec<Option<Value>>, TxnError> {
        let h = self.handle;
        let keys = keys.to_vec();
        match self
            .core()
            .call(move |p, now, c| p.get_many(now, c, h, keys))
            .await
        {
            CallResult::Reads(v) => Ok(v.into_iter().map(|r| r.map(|(_, v)| v)).collect()),
            other => Err(self.fail(other)),
        }
    }

    /// Buffer a write.
    ///
    /// Errors: `KeyTooLarge`, `ValueTooLarge`, `ReadOnly`, …
    pub async fn put(&mut self, key: Key, value: Value) -> Result<(), TxnError> {
        let h = self.handle;
        self.through_process = true;
        self.core().with(|p, _| p.put(h, key, value))
    }

    /// Buffer a delete.
    ///
    /// Errors: `KeyTooLarge`, `ReadOnly`, …
    pub async fn delete(&mut self, key: Key) -> Result<(), TxnError> {
        let h = self.handle;
        self.through_process = true;
        self.core().with(|p, _| p.delete(h, key))
    }

    /// Keep the transaction open for `ns` of client time (simulated time in
    /// the simulator), e.g. to model a long transaction.
    pub async fn pause(&self, ns: u64) {
        self.client.sleep(ns).await
    }

    /// The buffered writes (key → value, `None` = delete).
    pub fn writes(&self) -> BTreeMap<Key, Option<Value>> {
        let h = self.handle;
        self.core()
            .with(|p, _| p.writes(h).cloned())
            .unwrap_or_default()
    }

    /// Up to `limit` live pairs with `start <= key < end` (`end = None`: to
    /// the end of the key space), in key order, including this
    /// transaction's own writes. The ranges read are validated against
    /// phantoms at commit.
    ///
    /// Errors: as [`Txn::get_versioned`].
    pub async fn scan(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) -> Result<Vec<(Key, Value)>, TxnError> {
        let h = self.handle;
        let (start, end) = (start.to_vec(), end.map(|e| e.to_vec()));
        match self
            .core()
            .call(move |p, now, c| p.scan(now, c, h, &start, end.as_deref(), limit))
            .await
        {
            CallResult::Rows(r) => Ok(r),
            other => Err(self.fail(other)),
        }
    }

    fn fail(&mut self, r: CallResult) -> TxnError {
        self.through_process = true;
        let e = unexpected(r);
        if e.is_abort() {
            self.open = false;
        }
        e
    }

    /// Abort (nothing is locked before commit, so no messages are needed).
    pub fn abort(mut self) {
        self.close_handle();
    }

    fn close_handle(&mut self) {
        if self.open {
            self.open = false;
            let h = self.handle;
            self.core().with(|p, _| p.abort(h));
        }
    }

    /// Commit: read-only transactions finish at once; others run Lock →
    /// GET_TS → Validate → CommitBackup → CommitPrimary and return after the
    /// first COMMIT-PRIMARY ack.
    ///
    /// Errors: `Aborted` (retry), `Indeterminate` (outcome unknown),
    /// `Transport`, `Protocol`.
    pub async fn commit(mut self) -> Result<CommitInfo, TxnError> {
        let h = self.handle;
        if self.open && !self.through_process {
            // Read-only, every read answered: FaRMv2 commits it at
            // `read_ts` with nothing to send or check (its reads were a
            // snapshot at `read_ts`; `Transaction::commit` does the same),
            // so the process, and its lock, are not needed now; it forgets
            // the transaction at its next hold.
            self.open = false;
            self.core().end_read_only(h);
            return Ok(CommitInfo {
                tx: self.tx,
                read_ts: self.read_ts,
                write_ts: self.read_ts,
                wrote: false,
            });
        }
        self.open = false;
        match self.core().call(move |p, now, c| p.commit(now, c, h)).await {
            CallResult::Committed(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        self.close_handle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::task::{Context, Poll, Wake};

    /// An `Io` whose clock the test sets; it records which thread sent
    /// which request, and sends nothing anywhere.
    struct TestIo(
        Arc<AtomicU64>,
        Arc<Mutex<Vec<(std::thread::ThreadId, Request)>>>,
    );

    impl Io for TestIo {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn send(&self, _to: NodeId, frame: Frame) {
            if let Frame::Request { req, .. } = frame {
                lock(&self.1).push((std::thread::current().id(), req));
            }
        }
        fn wake_at(&self, _core: std::sync::Weak<Core>, _at_local_ns: u64) {}
    }

    struct NoWake;
    impl Wake for NoWake {
        fn wake(self: Arc<Self>) {}
    }

    fn ready(f: &mut CallFuture) -> bool {
        let waker = std::task::Waker::from(Arc::new(NoWake));
        matches!(
            Pin::new(f).poll(&mut Context::from_waker(&waker)),
            Poll::Ready(CallResult::Slept)
        )
    }

    type Sent = Arc<Mutex<Vec<(std::thread::ThreadId, Request)>>>;

    fn core() -> (Arc<Core>, Arc<AtomicU64>, Sent) {
        let config = Configuration::local(3, 7000, 2, 2, std::path::Path::new("/nonexistent"));
        let clock = Arc::new(AtomicU64::new(1_000));
        let sent = Sent::default();
        let process = ClientProcess::new(&config, 7, 1);
        let core = Core::new(
            config,
            process,
            Box::new(TestIo(clock.clone(), sent.clone())),
        );
        (core, clock, sent)
    }

    /// A wait that comes due while the lock's holder processes an input
    /// (whose clock reading was taken before the deadline) ends before
    /// the holder lets go, not at the next input or tick. Without
    /// [`Core::release`] the sleep below stays pending.
    #[test]
    fn a_wait_due_during_an_input_ends_before_the_lock_is_let_go() {
        let (core, clock, _) = core();
        let mut slept = core.call(|p, now, c| p.sleep(now, c, 500));
        assert!(!ready(&mut slept), "slept before its time");
        core.with(|_, _| clock.store(2_000, Ordering::SeqCst));
        assert!(ready(&mut slept), "the due wait was left for a later input");
    }

    /// A call the process answers while it is made returns its answer
    /// without a slot (a zero-length sleep ends at once); one answered
    /// later gets a slot, which the later answer fills. In both the future
    /// gives the answer at its first poll after the answer came.
    #[test]
    fn a_call_answered_at_once_takes_no_slot() {
        let (core, clock, _) = core();
        let mut at_once = core.call(|p, now, c| p.sleep(now, c, 0));
        assert!(at_once.slot.is_none() && at_once.ready.is_some());
        assert!(lock(&core.state).slots.is_empty());
        assert!(ready(&mut at_once));
        let mut later = core.call(|p, now, c| p.sleep(now, c, 500));
        assert!(later.ready.is_none());
        assert_eq!(lock(&core.state).slots.len(), 1);
        assert!(!ready(&mut later), "slept before its time");
        clock.store(2_000, Ordering::SeqCst);
        core.tick();
        assert!(lock(&core.state).slots.is_empty());
        assert!(lock(&core.state).making.is_none());
        assert!(ready(&mut later));
    }

    /// A ticker that finds the process held asks the holder to tick for
    /// it, so what the tick does (here: the first clock sync, which only a
    /// tick sends) is done by the holder before it lets go, not by the
    /// ticker once it has been woken and scheduled.
    #[test]
    fn a_ticker_finding_the_lock_held_has_the_holder_tick() {
        let (core, _clock, sent) = core();
        let asked = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (core, asked) = (core.clone(), asked.clone());
            std::thread::spawn(move || {
                while !asked.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                core.tick();
            })
        };
        core.with(|_, _| {
            asked.store(true, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !core.tick_wanted.load(Ordering::SeqCst) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the ticker never asked"
                );
                std::thread::yield_now();
            }
        });
        let me = std::thread::current().id();
        let syncs: Vec<_> = lock(&sent)
            .iter()
            .filter(|(_, r)| matches!(r, Request::Clock(meridian_wire::ClockRequest::Sync)))
            .map(|(t, _)| *t == me)
            .collect();
        assert_eq!(syncs, [true], "the holder did not tick for the ticker");
        assert!(!core.tick_wanted.load(Ordering::SeqCst));
        ticker.join().unwrap();
        // The ticker, once it had the lock, did not tick a second time.
        assert_eq!(lock(&sent).len(), 1);
    }
}
