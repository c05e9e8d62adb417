//! Application calls on a client process: begin, read, scan, write,
//! commit, abort, sleep, ping, execute, register and close, each answered
//! by an [`Effect::Reply`], and the bookkeeping of the call a transaction
//! holds (FaRM §4, FaRMv2 §4.1).

use super::*;

impl ClientProcess {
    // ----- application calls -------------------------------------------

    /// Begin a transaction on coordinator thread `thread` (FaRM's `t`):
    /// `read_ts = GET_TS()`. Replies [`CallResult::Began`] once `read_ts` is
    /// in the past. A single read ([`TxnOptions::single_read`]) takes no
    /// `read_ts` while the clock is usable and is answered at once, with
    /// `read_ts` `Timestamp::ZERO`.
    pub fn begin(&mut self, now: u64, call: CallId, thread: u32, mut opts: TxnOptions) {
        // `clock.lock_free_reads = false`: a single read is an ordinary
        // read-only transaction (the promise to read once still holds).
        if opts.single_read && !self.lock_free_reads {
            opts = TxnOptions::read_only();
        }
        if self.closing.is_some() {
            return self.reply(call, CallResult::Failed(TxnError::Closed));
        }
        if self.txns.len() >= self.limits.max_open_txns {
            return self.reply(
                call,
                CallResult::Failed(TxnError::TooManyOps {
                    max: self.limits.max_open_txns,
                }),
            );
        }
        let handle = TxnHandle(self.next_handle);
        self.next_handle += 1;
        let id = TxId {
            config: self.config_id,
            coordinator: self.coordinator,
            thread,
            local: self.next_local,
        };
        self.next_local += 1;
        self.txns.insert(
            handle,
            Box::new(OpenTxn {
                engine: None,
                id,
                opts,
                op: Op::Begin,
                call: Some(call),
                rpcs: Vec::new(),
                stage: (CommitStage::Executing, now),
                stage_ns: [0; CommitStage::TIMED],
            }),
        );
        if opts.single_read && self.clock.time(now).is_ok() {
            // A single read needs no `read_ts`: its one read is answered
            // with the newest committed version at the primary, which is
            // the key's state at the global time it is served (FaRM §3's
            // lock-free read; `TxnRequest::ReadLatest`). It begins at once,
            // without GET_TS. Its `read_ts` is reported as
            // `Timestamp::ZERO`; where it sits in time is the version it
            // saw (`observed_version`). Only while the clock is usable,
            // though: a process that cannot synchronise (cut off from the
            // clock master, or clocks disabled by a failover) begins it
            // like any transaction, so it fails fast with
            // `ClockUnavailable` when cut off instead of waiting out an
            // RPC timeout to an unreachable primary (a 2-of-5 partition's
            // minority answered a lone GET only after 10 s otherwise).
            self.stats.single_read_begins += 1;
            let (map, limits) = (self.map.clone(), self.limits.clone());
            if let Some(t) = self.txns.get_mut(&handle) {
                t.engine = Some(Transaction::new(id, Timestamp::ZERO, opts, map, limits));
            }
            self.answer(
                handle,
                CallResult::Began {
                    txn: handle,
                    tx: id,
                    read_ts: Timestamp::ZERO,
                },
                false,
            );
            return;
        }
        if let Err(e) = self.start_ts_wait(now, handle, false, true) {
            self.ts_failed(now, handle, false, e);
        }
        self.arm(now);
    }

    /// Read `key` in transaction `txn`. Replies [`CallResult::Read`].
    pub fn get(&mut self, now: u64, call: CallId, txn: TxnHandle, key: &[u8]) {
        let step = match self.idle_engine(txn).and_then(|e| e.get(key)) {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        match step {
            GetStep::Local(v) => {
                self.reply(call, CallResult::Read(v.map(|v| (Timestamp::ZERO, v))))
            }
            GetStep::Remote(node, req) => {
                self.set_op(txn, call, Op::Get { key: key.to_vec() });
                self.send_rpc(now, node, req, Purpose::Read(txn));
            }
        }
        self.arm(now);
    }

    /// Read every key of `keys` in `txn` at once: one READ per key not
    /// written by the transaction, all outstanding together, so a
    /// transaction that knows its read set up front pays one round trip
    /// instead of one per key (each read is the same FaRMv2 read at
    /// `read_ts` as [`ClientProcess::get`]).
    /// Replies [`CallResult::Reads`] once every reply is in; the first
    /// conflict aborts the transaction (the other replies are then
    /// ignored).
    pub fn get_many(&mut self, now: u64, call: CallId, txn: TxnHandle, keys: Vec<Key>) {
        let steps: Result<Vec<GetStep>, TxnError> = match self.idle_engine(txn) {
            Ok(e) => keys.iter().map(|k| e.get(k)).collect(),
            Err(e) => Err(e),
        };
        let steps = match steps {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        let mut results = vec![None; keys.len()];
        let mut remote = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                GetStep::Local(v) => results[i] = Some(v.map(|v| (Timestamp::ZERO, v))),
                GetStep::Remote(node, req) => remote.push((i, node, req)),
            }
        }
        if remote.is_empty() {
            let done = results.into_iter().map(|r| r.flatten()).collect();
            self.reply(call, CallResult::Reads(done));
            return;
        }
        let mut rpcs = BTreeMap::new();
        for (i, node, req) in remote {
            rpcs.insert(self.next_rpc, i);
            self.send_rpc(now, node, req, Purpose::Read(txn));
        }
        self.set_op(
            txn,
            call,
            Op::GetMany {
                keys,
                results,
                rpcs,
            },
        );
        self.arm(now);
    }

    /// Scan `[start, end)` for up to `limit` pairs in `txn`. Replies
    /// [`CallResult::Rows`].
    pub fn scan(
        &mut self,
        now: u64,
        call: CallId,
        txn: TxnHandle,
        start: &[u8],
        end: Option<&[u8]>,
        limit: u32,
    ) {
        let step = match self
            .idle_engine(txn)
            .and_then(|e| e.scan(start, end, limit))
        {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        self.set_op(txn, call, Op::Scan);
        self.on_scan_step(now, txn, step);
        self.arm(now);
    }

    /// Buffer a write (no messages).
    ///
    /// Errors: as [`Transaction::put`], or `Finished` for an unknown handle.
    pub fn put(&mut self, txn: TxnHandle, key: Key, value: Value) -> Result<(), TxnError> {
        self.idle_engine(txn)?.put(key, value)
    }

    /// Buffer a delete (no messages).
    ///
    /// Errors: as [`Transaction::delete`].
    pub fn delete(&mut self, txn: TxnHandle, key: Key) -> Result<(), TxnError> {
        self.idle_engine(txn)?.delete(key)
    }

    /// The buffered writes of `txn` (for history recording).
    pub fn writes(&self, txn: TxnHandle) -> Option<&BTreeMap<Key, Option<Value>>> {
        self.txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .map(|e| e.writes())
    }

    /// Abort `txn` during execution (it holds no locks then).
    pub fn abort(&mut self, txn: TxnHandle) {
        if let Some(t) = self.txns.get_mut(&txn) {
            if matches!(t.op, Op::Idle) {
                if let Some(e) = t.engine.as_mut() {
                    e.abort();
                }
                self.txns.remove(&txn);
            }
        }
    }

    /// Forget read-only transaction `txn`, which the application committed
    /// without a call: every read was answered and nothing was written, so
    /// it committed at `read_ts` with nothing to send (FaRMv2 §4.2;
    /// [`Transaction::commit`] does the same). A transaction already gone
    /// (ended by the process meanwhile) is ignored.
    ///
    /// Panics (release builds too) if `txn` buffered a write or has a call
    /// in progress: the client library's bookkeeping is then wrong, and
    /// forgetting the transaction would lose its writes.
    pub fn finish_read_only(&mut self, txn: TxnHandle) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        assert!(
            matches!(t.op, Op::Idle) && t.engine.as_ref().is_none_or(|e| e.is_read_only()),
            "{} committed as read-only, but it wrote or is busy",
            t.id
        );
        self.end_txn(txn);
    }

    /// Commit `txn`. Replies [`CallResult::Committed`] on the first
    /// COMMIT-PRIMARY ack (at once for read-only transactions), or
    /// `Failed(Aborted | Indeterminate | …)`.
    pub fn commit(&mut self, now: u64, call: CallId, txn: TxnHandle) {
        let step = match self.idle_engine(txn).and_then(|e| e.commit()) {
            Ok(s) => s,
            Err(e) => return self.fail_call(txn, call, e),
        };
        self.set_op(txn, call, Op::Commit);
        self.drive_commit(now, txn, step);
        self.arm(now);
    }

    /// Reply [`CallResult::Slept`] after `duration_ns` of local time.
    pub fn sleep(&mut self, now: u64, call: CallId, duration_ns: u64) {
        self.add_wait(now.saturating_add(duration_ns), Wait::Sleep(call));
        self.arm(now);
    }

    /// The retry helper's back-off before attempt `attempt` (1-based):
    /// exponential from `retry_backoff_us` to `retry_backoff_max_us`, half
    /// fixed and half jitter from this process's seeded RNG. Replies
    /// [`CallResult::Slept`].
    pub fn backoff(&mut self, now: u64, call: CallId, attempt: u32) {
        let rng = &mut self.rng;
        let us = self
            .limits
            .retry_backoff_us(attempt, |exp| rng.gen_range(0..exp));
        self.sleep(now, call, us * 1000);
    }

    /// Null RPC to `node` (for the RPC-rate baseline). Replies
    /// [`CallResult::Pong`].
    pub fn ping(&mut self, now: u64, call: CallId, node: NodeId) {
        self.send_rpc(
            now,
            node,
            Request::Admin(AdminRequest::Ping),
            Purpose::Ping(call),
        );
        self.arm(now);
    }

    /// Ask node `node` to run `ops` as one transaction for us (the thin
    /// client's path: the node's embedded coordinator runs it and retries
    /// its aborts). Replies [`CallResult::Executed`], or
    /// [`CallResult::ExecuteLost`] if no answer comes within
    /// `rpc_timeout_ms × rpc_attempts`: Execute is sent once, never retried.
    pub fn execute(
        &mut self,
        now: u64,
        call: CallId,
        node: NodeId,
        ops: Vec<meridian_wire::ClientOp>,
    ) {
        // The node runs a whole transaction, retries included: allow it the
        // budget of `rpc_attempts` round trips.
        let timeout_ns =
            self.limits.rpc_timeout_ms * 1_000_000 * u64::from(self.limits.rpc_attempts.max(1));
        self.send_rpc_within(
            now,
            node,
            meridian_wire::ThinRequest::Execute { ops }.into(),
            Purpose::Execute(call),
            timeout_ns,
        );
        self.arm(now);
    }

    /// Ask the CM for a coordinator id unique in the cluster (FaRM §4's
    /// `m`; unique across CM restarts) and adopt it.
    /// Replies [`CallResult::Registered`]. Begin no transaction before it
    /// is answered; the RPC is retried up to `rpc_attempts` times.
    pub fn register(&mut self, now: u64, call: CallId) {
        self.send_rpc(
            now,
            self.cm,
            Request::Cm(CmRequest::RegisterClient),
            Purpose::Register(call),
        );
        self.arm(now);
    }

    /// Stop taking new transactions, flush every queued TRUNCATE, and reply
    /// [`CallResult::Closed`] once no truncation, abort or commit ack is
    /// outstanding (truncations are not dropped with the client).
    pub fn close(&mut self, now: u64, call: CallId) {
        self.closing = Some(call);
        self.flush_truncates(now);
        self.maybe_closed();
        self.arm(now);
    }

    // ----- internals -----------------------------------------------------

    pub(super) fn reply(&mut self, call: CallId, result: CallResult) {
        if let CallResult::Failed(TxnError::Aborted(
            AbortReason::Read(Conflict::TooOld)
            | AbortReason::Lock(Conflict::TooOld)
            | AbortReason::Validate(Conflict::TooOld),
        )) = &result
        {
            self.stats.aborts_too_old += 1;
        }
        self.effects.push(Effect::Reply { call, result });
    }

    /// One reply of a `get_many`: record it; answer once all are in.
    pub(super) fn on_get_many_reply(
        &mut self,
        now: u64,
        txn: TxnHandle,
        from: NodeId,
        id: u64,
        resp: Response,
    ) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        let (Op::GetMany { keys, rpcs, .. }, Some(engine)) = (&mut t.op, t.engine.as_mut()) else {
            return;
        };
        let Some(i) = rpcs.remove(&id) else {
            return;
        };
        let Some(key) = keys.get(i) else {
            return;
        };
        match engine.on_read_reply(from, key, resp) {
            Ok(v) => {
                let done = match &mut t.op {
                    Op::GetMany { results, rpcs, .. } => {
                        if let Some(slot) = results.get_mut(i) {
                            *slot = Some(v.map(|v| (v.version, v.value)));
                        }
                        rpcs.is_empty().then(|| std::mem::take(results))
                    }
                    _ => None,
                };
                if let Some(results) = done {
                    let all = results.into_iter().map(|r| r.flatten()).collect();
                    self.answer(txn, CallResult::Reads(all), false);
                }
            }
            Err(e) if e.is_abort() => self.answer(txn, CallResult::Failed(e), true),
            Err(e) => self.abandon(now, txn, e),
        }
    }

    pub(super) fn idle_engine(&mut self, txn: TxnHandle) -> Result<&mut Transaction, TxnError> {
        match self.txns.get_mut(&txn).map(|t| &mut **t) {
            Some(OpenTxn {
                engine: Some(e),
                op: Op::Idle,
                ..
            }) => Ok(e),
            _ => Err(TxnError::Finished),
        }
    }

    pub(super) fn set_op(&mut self, txn: TxnHandle, call: CallId, op: Op) {
        if let Some(t) = self.txns.get_mut(&txn) {
            t.op = op;
            t.call = Some(call);
        }
    }

    /// A call on `txn` failed before any message: the transaction is over
    /// if the engine says so (an abort), otherwise it stays usable.
    pub(super) fn fail_call(&mut self, txn: TxnHandle, call: CallId, e: TxnError) {
        let over = self
            .txns
            .get(&txn)
            .and_then(|t| t.engine.as_ref())
            .is_none_or(|e| e.is_finished());
        if over {
            self.txns.remove(&txn);
        }
        self.reply(call, CallResult::Failed(e));
    }

    /// Answer the call in progress on `txn` and return it to idle, or end it.
    pub(super) fn answer(&mut self, txn: TxnHandle, result: CallResult, end: bool) {
        let call = match self.txns.get_mut(&txn) {
            Some(t) => {
                t.op = Op::Idle;
                t.call.take()
            }
            None => None,
        };
        if end {
            self.end_txn(txn);
        }
        if let Some(call) = call {
            self.reply(call, result);
        }
    }

    /// Forget `txn` and every RPC still outstanding for it (late replies are
    /// then ignored).
    pub(super) fn end_txn(&mut self, txn: TxnHandle) {
        self.end_txn_keep_call(txn);
        self.txns.remove(&txn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// A single read begins at once, with no GET_TS, while the clock is
    /// usable, and reads with one ReadLatest and nothing else. Without a
    /// usable clock (never synchronised, or cut off) it waits for a clock
    /// sample like any transaction.
    #[test]
    fn a_single_read_begins_without_read_ts_while_the_clock_is_usable() {
        let mut p = new_client();
        p.begin(500, 9, 0, TxnOptions::single_read());
        let e = p.drain_effects();
        assert!(replies(&e).is_empty(), "began without a clock: {e:?}");
        assert_eq!(p.stats().clock_parked, 1);
        assert_eq!(p.stats().single_read_begins, 0);
        p.tick(1000);
        let sync = sent(&p.drain_effects());
        answer(
            &mut p,
            1000,
            &sync,
            Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
        );
        p.finish_read_only(TxnHandle(1));
        let parked = p.stats();
        p.begin(1000, 1, 0, TxnOptions::single_read());
        let e = p.drain_effects();
        assert!(
            matches!(
                replies(&e)[..],
                [(
                    1,
                    CallResult::Began {
                        read_ts: Timestamp::ZERO,
                        ..
                    }
                )]
            ),
            "{e:?}"
        );
        let d = p.stats().since(&parked);
        assert_eq!(d.single_read_begins, 1);
        assert_eq!(d.read_ts_unwaited + d.ts_count, 0, "{d:?}");
        p.get(1100, 2, TxnHandle(2), &[0x00, b'a']);
        let reads = sent(&p.drain_effects());
        assert!(
            matches!(
                &reads[..],
                [(_, _, Request::Txn(TxnRequest::ReadLatest { .. }), _)]
            ),
            "{reads:?}"
        );
        let resp = Response::Txn(TxnResponse::ReadLatest(Ok(meridian_wire::LatestRead {
            version: Timestamp(9),
            value: Some(b"v".to_vec()),
        })));
        p.on_message(
            1200,
            reads[0].0,
            Frame::Response {
                id: reads[0].1,
                resp,
            },
        );
        let e = p.drain_effects();
        assert!(
            matches!(&replies(&e)[..], [(2, CallResult::Read(Some(_)))]),
            "{e:?}"
        );
        assert_eq!(p.observed_version(TxnHandle(2)), Some(Timestamp(9)));
        p.check_invariants();
    }

    /// A read-only transaction the client library committed without a call
    /// is forgotten by `finish_read_only`: nothing is sent and the process
    /// is quiet again; a transaction the process already ended is ignored.
    #[test]
    fn a_read_only_transaction_committed_without_a_call_is_forgotten() {
        let mut p = new_client();
        open_txn(&mut p);
        p.get(200_100, 5, TxnHandle(1), &[0x00, b'a']);
        let reads = sent(&p.drain_effects());
        assert_eq!(reads.len(), 1);
        let e = read_reply(&mut p, 200_200, reads[0].0, reads[0].1, Some(b"v"));
        assert!(matches!(replies(&e)[..], [(5, CallResult::Read(Some(_)))]));
        assert!(!p.is_quiet(), "the transaction is open");
        p.finish_read_only(TxnHandle(1));
        assert!(p.is_quiet(), "the transaction was not forgotten");
        assert!(
            sent(&p.drain_effects()).is_empty(),
            "a read-only commit sends nothing"
        );
        p.finish_read_only(TxnHandle(1));
        p.finish_read_only(TxnHandle(9));
        assert!(p.is_quiet());
    }

    /// Forgetting a transaction that buffered a write would lose the write:
    /// `finish_read_only` refuses it (release builds too).
    #[test]
    #[should_panic(expected = "committed as read-only, but it wrote")]
    fn finishing_a_writing_transaction_as_read_only_panics() {
        let mut p = new_client();
        open_txn(&mut p);
        p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
            .unwrap();
        p.finish_read_only(TxnHandle(1));
    }

    /// `get_many` sends every READ at once (one per key not written by the
    /// transaction), answers in the order asked whatever order the replies
    /// come in, serves its own writes locally, and the reads join the read
    /// set (validated at commit).
    #[test]
    fn get_many_sends_all_reads_at_once_and_answers_in_key_order() {
        let mut p = new_client();
        open_txn(&mut p);
        let (a, b, mine) = (vec![0x00, b'a'], vec![0x80, b'b'], vec![0x40, b'm']);
        p.put(TxnHandle(1), mine.clone(), b"own".to_vec()).unwrap();
        p.get_many(
            200_100,
            5,
            TxnHandle(1),
            vec![a.clone(), mine.clone(), b.clone()],
        );
        let reads = sent(&p.drain_effects());
        assert_eq!(
            reads.len(),
            2,
            "one READ per key not written here: {reads:?}"
        );
        assert!(reads
            .iter()
            .all(|(_, _, r, _)| matches!(r, Request::Txn(TxnRequest::Read { .. }))));
        // Replies in reverse order; nothing is answered until the last.
        let (to1, id1) = (reads[1].0, reads[1].1);
        assert!(replies(&read_reply(&mut p, 200_200, to1, id1, None)).is_empty());
        let (to0, id0) = (reads[0].0, reads[0].1);
        let done = replies(&read_reply(&mut p, 200_300, to0, id0, Some(b"A")));
        match &done[..] {
            [(5, CallResult::Reads(v))] => {
                assert_eq!(v.len(), 3);
                assert_eq!(v[0].as_ref().map(|(_, v)| v.as_slice()), Some(&b"A"[..]));
                assert_eq!(v[1].as_ref().map(|(_, v)| v.as_slice()), Some(&b"own"[..]));
                assert_eq!(v[2], None, "key b's reply said absent");
            }
            other => panic!("{other:?}"),
        }
        // The transaction is idle again: a commit runs (LOCK of `mine`).
        p.commit(200_400, 6, TxnHandle(1));
        let locks = sent(&p.drain_effects());
        assert!(locks
            .iter()
            .any(|(_, _, r, _)| matches!(r, Request::Txn(t) if t.lock_record().is_some())));
        p.check_invariants();
    }

    /// A conflict on one of `get_many`'s reads aborts the transaction and
    /// the call; the other replies, arriving later, are ignored.
    #[test]
    fn a_conflict_in_get_many_aborts_and_later_replies_are_ignored() {
        let mut p = new_client();
        open_txn(&mut p);
        p.get_many(
            200_100,
            5,
            TxnHandle(1),
            vec![vec![0x00, b'a'], vec![0x80, b'b']],
        );
        let reads = sent(&p.drain_effects());
        assert_eq!(reads.len(), 2);
        let resp = Response::Txn(TxnResponse::Read(Err(Conflict::Locked)));
        p.on_message(
            200_200,
            reads[0].0,
            Frame::Response {
                id: reads[0].1,
                resp,
            },
        );
        match &replies(&p.drain_effects())[..] {
            [(5, CallResult::Failed(e))] => assert!(e.is_abort(), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(replies(&read_reply(
            &mut p,
            200_300,
            reads[1].0,
            reads[1].1,
            Some(b"B")
        ))
        .is_empty());
        p.check_invariants();
    }
}
