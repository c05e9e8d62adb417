//! Helpers shared by the participant's unit tests.

use super::Participant;
use meridian_config::Configuration;
use meridian_wire::{
    ConfigId, LockRecord, RegionId, Response, Timestamp, TxId, TxnRequest, TxnResponse, WriteOp,
};

pub(super) fn cfg() -> Configuration {
    // One node holding every region as primary keeps the tests short.
    Configuration::local(1, 7000, 1, 4, std::path::Path::new("/nonexistent"))
}

pub(super) fn tx(l: u64) -> TxId {
    TxId {
        config: ConfigId(1),
        coordinator: 9,
        thread: 0,
        local: l,
    }
}

/// Two nodes, replication 2, four regions.
pub(super) fn two_nodes() -> Configuration {
    Configuration::local(2, 7000, 2, 4, std::path::Path::new("/nonexistent"))
}

/// The key reads as absent at a late timestamp: a deleted key stayed
/// deleted.
pub(super) fn assert_deleted(p: &Participant, region: RegionId, key: &[u8]) {
    let store = p.durable.stores.get(&region).expect("the region's store");
    assert_eq!(
        store.read(key, Timestamp(3_000)),
        Ok(None),
        "the deleted key stays deleted"
    );
}

/// COMMIT-BACKUP of `rec` at `write_ts` at backup `p`, acknowledged.
pub(super) fn commit_backup(p: &mut Participant, rec: LockRecord, write_ts: u64) {
    let r = p.handle(
        &[],
        &TxnRequest::CommitBackup {
            record: rec,
            write_ts: Timestamp(write_ts),
        },
    );
    assert_eq!(r, Response::Txn(TxnResponse::Ack));
}

/// LOCK then COMMIT-PRIMARY of `rec` at `write_ts`, both acknowledged.
pub(super) fn commit_at_primary(p: &mut Participant, rec: LockRecord, write_ts: u64) {
    let tx = rec.tx;
    assert_eq!(
        p.handle(&[], &TxnRequest::Lock(rec)),
        Response::Txn(TxnResponse::Lock(Ok(())))
    );
    let commit = TxnRequest::CommitPrimary {
        tx,
        write_ts: Timestamp(write_ts),
    };
    assert_eq!(p.handle(&[], &commit), Response::Txn(TxnResponse::Ack));
}

pub(super) fn record(p: &Participant, t: TxId, read_ts: u64, keys: &[&[u8]]) -> LockRecord {
    LockRecord {
        tx: t,
        read_ts: Timestamp(read_ts),
        regions: vec![p.region_of(keys[0])],
        writes: keys
            .iter()
            .map(|k| WriteOp {
                region: p.region_of(k),
                key: k.to_vec(),
                value: Some(b"v".to_vec()),
            })
            .collect(),
    }
}
