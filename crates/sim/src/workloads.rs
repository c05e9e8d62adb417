//! The workloads' transactions: [`WorkTxn`], a recorded program of the
//! bank, register or rows workload; [`Gen`], which draws a client's
//! programs; [`BenchJob`], a TATP or YCSB transaction; and the initial
//! rows loaded before a run.

use crate::{Sim, SimWorkload};
use meridian_config::RegionMap;
use meridian_wire::{ConfigId, Timestamp, TxId, TxnRequest};
use meridian_workload::bank::{self, BankTxn, RegisterTxn, WriteIds};
use meridian_workload::ops::{Program, Step};
use meridian_workload::rows::RowsTxn;
use meridian_workload::{tatp, ycsb};
use rand::rngs::StdRng;

/// One transaction program of the workload (cloned per attempt).
#[derive(Clone, Debug)]
pub(crate) enum WorkTxn {
    Bank(BankTxn),
    Register(RegisterTxn),
    Rows(RowsTxn),
}

impl Program for WorkTxn {
    fn next(&mut self, last: Option<Option<meridian_wire::Value>>) -> Step {
        match self {
            WorkTxn::Bank(t) => t.next(last),
            WorkTxn::Register(t) => t.next(last),
            WorkTxn::Rows(t) => t.next(last),
        }
    }
    fn on_commit(&mut self) -> Result<(), String> {
        match self {
            WorkTxn::Bank(t) => t.on_commit(),
            WorkTxn::Register(t) => t.on_commit(),
            WorkTxn::Rows(t) => t.on_commit(),
        }
    }
    fn rows(&mut self, rows: &[(meridian_wire::Key, meridian_wire::Value)]) {
        if let WorkTxn::Rows(t) = self {
            t.rows(rows)
        }
    }
}

/// Draws a client's transactions. Every attempt writes fresh write ids
/// (the checker needs every write id unique), so a retried transfer is
/// drawn anew; audits write nothing and are retried as they are.
pub(crate) struct Gen {
    pub(crate) workload: SimWorkload,
    pub(crate) rng: StdRng,
    pub(crate) ids: WriteIds,
}

impl Gen {
    pub(crate) fn draw(&mut self) -> WorkTxn {
        match self.workload {
            SimWorkload::Bank(b) => WorkTxn::Bank(b.next_txn(&mut self.ids, &mut self.rng)),
            SimWorkload::Register(r) => WorkTxn::Register(r.next_txn(&mut self.ids, &mut self.rng)),
            SimWorkload::Rows(r) => WorkTxn::Rows(r.next_txn(&mut self.ids, &mut self.rng)),
            // TATP and YCSB run through `unrecorded_main`, not as recorded
            // programs.
            SimWorkload::Tatp(_) | SimWorkload::Ycsb(_) => {
                WorkTxn::Register(meridian_workload::ops::Script::default())
            }
        }
    }

    /// The program for an attempt after the first.
    pub(crate) fn redraw(&mut self, first: &WorkTxn, single_read: bool) -> WorkTxn {
        match first {
            WorkTxn::Bank(b) if b.is_audit() => first.clone(),
            _ if single_read => first.clone(),
            _ => self.draw(),
        }
    }
}

/// One TATP or YCSB transaction, drawn from the client's generator.
#[derive(Clone)]
pub(crate) enum BenchJob {
    Tatp(tatp::TatpTxn),
    /// The operation, the value size and a seed for the values it writes
    /// (the same on every attempt).
    Ycsb(ycsb::YcsbOp, usize, u64),
}

impl Sim {
    /// Install the workload's initial rows on every replica at timestamp 1
    /// (a bulk load before the run, one transaction per row).
    pub(crate) fn load_initial(&mut self) {
        let rows = match self.cfg.workload {
            SimWorkload::Bank(b) => b.population(),
            SimWorkload::Tatp(t) => tatp::population(&t, self.cfg.seed).collect(),
            SimWorkload::Ycsb(y) => ycsb::population(&y, self.cfg.seed).collect(),
            SimWorkload::Register(_) | SimWorkload::Rows(_) => Vec::new(),
        };
        if rows.is_empty() {
            return;
        }
        let recorded = matches!(self.cfg.workload, SimWorkload::Bank(_));
        self.initial = recorded.then(|| bank::load_record(&rows, 0, 0, 0, 1));
        let map = RegionMap::new(&self.config);
        for (i, (k, v)) in rows.into_iter().enumerate() {
            let tx = TxId {
                config: ConfigId(1),
                coordinator: 0,
                thread: 0,
                local: i as u64,
            };
            let r = map.region_of(&k).clone();
            let lock = meridian_wire::LockRecord {
                tx,
                read_ts: Timestamp(0),
                regions: vec![r.id],
                writes: vec![meridian_wire::WriteOp {
                    region: r.id,
                    key: k.clone(),
                    value: Some(v),
                }],
            };
            for slot in self.nodes.iter_mut() {
                let Some(node) = slot.process.as_mut() else {
                    continue;
                };
                let id = node.id();
                let p = node.participant_mut();
                let write_ts = Timestamp(1);
                if id == r.primary {
                    let _ = p.handle(&[], &TxnRequest::Lock(lock.clone()));
                    let _ = p.handle(&[], &TxnRequest::CommitPrimary { tx, write_ts });
                    p.truncate_piggybacked(&meridian_wire::Truncation::of(vec![tx]));
                } else if r.backups.contains(&id) {
                    let record = lock.clone();
                    let _ = p.handle(&[], &TxnRequest::CommitBackup { record, write_ts });
                    p.truncate_piggybacked(&meridian_wire::Truncation::of(vec![tx]));
                }
            }
        }
    }
}
