//! Helpers shared by the client process's unit tests: a small
//! configuration, the requests and replies among a process's effects, and
//! transactions driven to a given step of the commit protocol.

use super::*;
pub(super) use meridian_wire::TxnResponse;

pub(super) type Effects = Vec<Effect<CallResult>>;

pub(super) fn config() -> Configuration {
    let mut c = Configuration::local(3, 7000, 2, 2, std::path::Path::new("/nonexistent"));
    c.limits.rpc_timeout_ms = 1;
    c
}

/// A client process of coordinator 7 over [`config`].
pub(super) fn new_client() -> ClientProcess {
    ClientProcess::new(&config(), 7, 1)
}

/// Requests sent, as (node, rpc id, request, piggybacked truncations).
pub(super) fn sent(e: &Effects) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
    e.iter()
        .filter_map(|e| match e {
            Effect::Send {
                to,
                frame: Frame::Request {
                    id, truncate, req, ..
                },
            } => Some((*to, *id, req.clone(), truncate.txs.clone())),
            _ => None,
        })
        .collect()
}

pub(super) fn replies(e: &Effects) -> Vec<(CallId, CallResult)> {
    e.iter()
        .filter_map(|e| match e {
            Effect::Reply { call, result } => Some((*call, result.clone())),
            _ => None,
        })
        .collect()
}

pub(super) fn answer(
    p: &mut ClientProcess,
    now: u64,
    reqs: &[(NodeId, u64, Request, Vec<TxId>)],
    resp: Response,
) -> Effects {
    for (to, id, _, _) in reqs {
        p.on_message(
            now,
            *to,
            Frame::Response {
                id: *id,
                resp: resp.clone(),
            },
        );
    }
    p.drain_effects()
}

/// A synchronised client with transaction 1 open, writing a key in
/// each region, and its commit started: returns the LOCK requests.
pub(super) fn locking(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
    open_txn(p);
    p.put(TxnHandle(1), vec![0x00, b'a'], b"x".to_vec())
        .unwrap();
    p.put(TxnHandle(1), vec![0x80, b'a'], b"y".to_vec())
        .unwrap();
    p.commit(200_300, 2, TxnHandle(1));
    let locks = sent(&p.drain_effects());
    assert_eq!(locks.len(), 2);
    assert!(locks
        .iter()
        .all(|(_, _, r, _)| matches!(r, Request::Txn(t) if t.lock_record().is_some())));
    locks
}

/// A synchronised client with read-write transaction 1 open.
pub(super) fn open_txn(p: &mut ClientProcess) {
    p.tick(1000);
    let sync = sent(&p.drain_effects());
    answer(
        p,
        1100,
        &sync,
        Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
    );
    p.begin(2000, 1, 0, TxnOptions::default());
    p.tick(200_000);
    assert!(matches!(
        replies(&p.drain_effects())[..],
        [(1, CallResult::Began { .. })]
    ));
}

pub(super) fn read_reply(
    p: &mut ClientProcess,
    now: u64,
    to: NodeId,
    id: u64,
    v: Option<&[u8]>,
) -> Effects {
    let resp = Response::Txn(TxnResponse::Read(Ok(v.map(|v| meridian_wire::Versioned {
        version: Timestamp(7),
        value: v.to_vec(),
    }))));
    p.on_message(now, to, Frame::Response { id, resp });
    p.drain_effects()
}

/// A client (coordinator 7) synchronised once with the master at local
/// time 1100 ns, with `clock.reads_wait_at_server = at_server`.
pub(super) fn synced_client(at_server: bool) -> ClientProcess {
    let mut c = config();
    c.clock.reads_wait_at_server = at_server;
    let mut p = ClientProcess::new(&c, 7, 1);
    p.tick(1000);
    let sync = sent(&p.drain_effects());
    answer(
        &mut p,
        1100,
        &sync,
        Response::Clock(ClockResponse::MasterTime { master_ns: 500_000 }),
    );
    p
}

/// [`locking`], every LOCK acknowledged: returns the COMMIT-BACKUP
/// requests.
pub(super) fn committing_backups(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
    // Sent at once when `write_ts` is left to the nodes (the default),
    // at the tick that ends its wait otherwise.
    let mut backups = locks_granted(p);
    p.tick(600_000);
    backups.extend(sent(&p.drain_effects()));
    assert!(backups
        .iter()
        .all(|(_, _, r, _)| matches!(unheld(r), Some(TxnRequest::CommitBackup { .. }))));
    backups
}

/// [`locking`], every LOCK granted at 200.4 µs and its record durable
/// (`LockDurable`) at once: what is sent then.
pub(super) fn locks_granted(p: &mut ClientProcess) -> Vec<(NodeId, u64, Request, Vec<TxId>)> {
    let locks = locking(p);
    let mut out = sent(&answer(
        p,
        200_400,
        &locks,
        Response::Txn(TxnResponse::Lock(Ok(()))),
    ));
    out.extend(sent(&answer(
        p,
        200_400,
        &locks,
        Response::Txn(TxnResponse::LockDurable),
    )));
    out
}

/// The transaction request `r` carries, unwrapped if it was sent to be
/// held until its `write_ts` passed.
pub(super) fn unheld(r: &Request) -> Option<&TxnRequest> {
    match r {
        Request::Txn(TxnRequest::AfterWriteTs { req, .. }) => Some(req),
        Request::Txn(t) => Some(t),
        _ => None,
    }
}
