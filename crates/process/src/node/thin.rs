//! Thin-client execution (FaRM §4: the coordinator runs at the client;
//! here the node is that client): a thin client's one-shot `Execute` runs
//! on the node's embedded [`ClientProcess`], one operation at a time,
//! committed, and retried after aborts as `Session::run` does.

use super::{NodeProcess, Peer};
use crate::client::{CallResult, TxnHandle};
use crate::CallId;
use meridian_txn::{TxnError, TxnOptions};
use meridian_wire::{
    ClientOp, ClientOpResult, ExecuteError, Executed, NodeId, ThinResponse, Timestamp,
};

/// The coordinator id of the thin-client coordinator embedded in node
/// `node` during incarnation `incarnation`: top bit set, so it never meets a
/// CM-assigned id.
pub fn embedded_coordinator_id(node: NodeId, incarnation: u32) -> u64 {
    (1u64 << 63) | ((node.0 as u64 & 0x7fff_ffff) << 32) | incarnation as u64
}

/// One thin-client transaction being run by the embedded coordinator.
#[derive(Debug)]
pub(super) struct Exec {
    /// Who asked, and its request id.
    peer: Peer,
    id: u64,
    ops: Vec<ClientOp>,
    /// Attempt number, from 1.
    attempt: u32,
    /// The open transaction of this attempt.
    txn: Option<TxnHandle>,
    /// Results of `ops[..results.len()]` in this attempt.
    results: Vec<ClientOpResult>,
    /// A lone GET run as a single read ([`TxnOptions::single_read`]): the
    /// version it saw, reported as the snapshot time
    /// ([`Executed::read_ts`]) in place of a `read_ts` it never took.
    observed: Option<Timestamp>,
}

impl NodeProcess {
    /// Thin-client transactions running now.
    pub fn executing(&self) -> usize {
        self.executes.len()
    }

    pub(super) fn start_execute(&mut self, now: u64, peer: Peer, id: u64, ops: Vec<ClientOp>) {
        let max = self.config.limits.max_concurrent_executes;
        if self.executes.len() >= max {
            let resp = ThinResponse::Executed(Err(ExecuteError::Busy { max })).into();
            return self.reply(peer, Some(id), resp);
        }
        let exec = Exec {
            peer,
            id,
            ops,
            attempt: 1,
            txn: None,
            results: Vec::new(),
            observed: None,
        };
        self.begin_attempt(now, exec);
    }

    fn new_call(&mut self, exec: Exec) -> CallId {
        let call = self.next_call;
        self.next_call += 1;
        self.executes.insert(call, exec);
        call
    }

    fn begin_attempt(&mut self, now: u64, mut exec: Exec) {
        exec.txn = None;
        exec.results.clear();
        exec.observed = None;
        let read_only = !exec
            .ops
            .iter()
            .any(|op| matches!(op, ClientOp::Put(..) | ClientOp::Delete(_)));
        // A lone GET is a single read (FaRM §3's lock-free read; an
        // ordinary read-only transaction under `clock.lock_free_reads =
        // false`): no GET_TS, no hold until a `read_ts` passed. Its
        // `Executed::read_ts` is then the version it saw, the snapshot
        // its answer is.
        let single_read = matches!(exec.ops[..], [ClientOp::Get(_)]);
        let call = self.new_call(exec);
        self.gateway.begin(
            now,
            call,
            0,
            TxnOptions {
                read_only,
                single_read,
            },
        );
    }

    /// Issue the next operation of `exec` (buffered writes need no call),
    /// or commit when all are done.
    fn next_op(&mut self, now: u64, mut exec: Exec) {
        let Some(txn) = exec.txn else {
            return self.begin_attempt(now, exec);
        };
        while let Some(op) = exec.ops.get(exec.results.len()) {
            let buffered = match op {
                ClientOp::Put(k, v) => self.gateway.put(txn, k.clone(), v.clone()),
                ClientOp::Delete(k) => self.gateway.delete(txn, k.clone()),
                ClientOp::Get(k) => {
                    let k = k.clone();
                    let call = self.new_call(exec);
                    return self.gateway.get(now, call, txn, &k);
                }
                ClientOp::Scan { start, end, limit } => {
                    let (start, end, limit) = (start.clone(), end.clone(), *limit);
                    let call = self.new_call(exec);
                    return self
                        .gateway
                        .scan(now, call, txn, &start, end.as_deref(), limit);
                }
            };
            match buffered {
                Ok(()) => exec.results.push(ClientOpResult::Done),
                Err(e) => {
                    self.gateway.abort(txn);
                    return self.finish_execute(exec, Err(e));
                }
            }
        }
        let call = self.new_call(exec);
        self.gateway.commit(now, call, txn);
    }

    pub(super) fn on_call_result(&mut self, now: u64, call: CallId, result: CallResult) {
        let Some(mut exec) = self.executes.remove(&call) else {
            return;
        };
        match result {
            CallResult::Began { txn, .. } => {
                exec.txn = Some(txn);
                self.next_op(now, exec)
            }
            CallResult::Read(v) => {
                exec.observed = exec.txn.and_then(|t| self.gateway.observed_version(t));
                exec.results
                    .push(ClientOpResult::Value(v.map(|(_, value)| value)));
                self.next_op(now, exec)
            }
            CallResult::Rows(rows) => {
                exec.results.push(ClientOpResult::Rows(rows));
                self.next_op(now, exec)
            }
            CallResult::Committed(info) => {
                // A single read wrote nothing: both times are the version
                // it saw.
                let (read_ts, write_ts) = match exec.observed {
                    Some(v) => (v, v),
                    None => (info.read_ts, info.write_ts),
                };
                let done = Executed {
                    results: std::mem::take(&mut exec.results),
                    tx: info.tx,
                    read_ts,
                    write_ts,
                    attempts: exec.attempt,
                };
                self.finish_execute(exec, Ok(done))
            }
            // Back-off over: the next attempt.
            CallResult::Slept => {
                exec.attempt += 1;
                self.begin_attempt(now, exec)
            }
            CallResult::Failed(e) => {
                if let Some(txn) = exec.txn.take() {
                    self.gateway.abort(txn);
                }
                // Aborts are retried, as `Session::run` does; so is a clock
                // not yet synchronised (a node that just started).
                let retry = e.is_abort() || e == TxnError::ClockUnavailable;
                if retry && exec.attempt < self.config.limits.retry_attempts {
                    let attempt = exec.attempt;
                    let call = self.new_call(exec);
                    self.gateway.backoff(now, call, attempt);
                } else {
                    self.finish_execute(exec, Err(e))
                }
            }
            other => {
                let e = TxnError::Protocol {
                    node: self.id,
                    detail: format!("embedded coordinator answered {other:?}"),
                };
                self.finish_execute(exec, Err(e))
            }
        }
    }

    fn finish_execute(&mut self, exec: Exec, r: Result<Executed, TxnError>) {
        let r = r.map_err(|e| match e {
            TxnError::Aborted(reason) => ExecuteError::Aborted {
                attempts: exec.attempt,
                reason: reason.to_string(),
            },
            TxnError::Indeterminate { tx, write_ts, .. } => {
                ExecuteError::Indeterminate { tx, write_ts }
            }
            e @ (TxnError::KeyTooLarge { .. }
            | TxnError::ValueTooLarge { .. }
            | TxnError::TooManyOps { .. }) => ExecuteError::Invalid(e.to_string()),
            e => ExecuteError::Unavailable(e.to_string()),
        });
        self.reply(exec.peer, Some(exec.id), ThinResponse::Executed(r).into());
    }
}
