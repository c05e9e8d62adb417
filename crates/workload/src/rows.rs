//! # The rows workload: inserts, deletes and scans across regions
//!
//! A checked workload for the paths the bank and register workloads never
//! reach: rows that appear and disappear (inserts, deletes, a delete then an
//! insert of the same key in one transaction), range scans with small
//! limits that cross region boundaries (FaRM §4's range reads, validated
//! against phantoms at commit), and *long* transactions that keep their
//! snapshot open past the GC window, so reads and locks below the GC safe
//! point abort with `TooOld` (FaRMv2 §5) and the version chains and
//! tombstones of their keys are collected meanwhile.
//!
//! Every written value starts with a unique write id and every delete
//! carries one, so the checker ([`meridian_checker`]) can place tombstones
//! in the version order and check scans as predicate reads.
//!
//! Key layout: `keys` keys spread evenly and in order over the first byte,
//! so with range partitioning on that byte a scan of consecutive keys
//! crosses regions.

use crate::bank::WriteIds;
use crate::ops::{Key, Step, Value};
use rand::Rng;

/// Rows workload parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowsConfig {
    /// Number of keys (at most 256).
    pub keys: u32,
    /// Most operations per transaction (besides the commit).
    pub max_ops: u32,
    /// Largest scan limit.
    pub max_scan_limit: usize,
    /// Percentage of long transactions.
    pub long_percent: u32,
    /// How long a long transaction keeps its snapshot open, ns (set it
    /// above the GC window).
    pub pause_ns: u64,
}

/// Key of row `i`: `i` spread over the first byte, `b'S'`, `i` big-endian.
pub fn row_key(i: u32, keys: u32) -> Key {
    let spread = (i as u64 * 256 / keys.max(1) as u64).min(255) as u8;
    let mut k = vec![spread, b'S'];
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// A value carrying write id `id`.
pub fn row_value(id: u64) -> Value {
    id.to_le_bytes().to_vec()
}

/// One rows transaction: a fixed list of steps, drawn up front.
pub type RowsTxn = crate::ops::Script;

impl RowsConfig {
    /// Draw the next transaction.
    pub fn next_txn(&self, ids: &mut WriteIds, rng: &mut impl Rng) -> RowsTxn {
        let keys = self.keys.clamp(2, 256);
        let key = |rng: &mut dyn rand::RngCore| row_key(rng.gen_range(0..keys), keys);
        let mut steps = Vec::new();
        if rng.gen_range(0..100) < self.long_percent {
            // Read, keep the snapshot open past the GC window, then write
            // what was read: the commit must refuse a lock below the safe
            // point if the key changed or was collected meanwhile.
            let k = key(rng);
            steps.push(Step::Get(k.clone()));
            if rng.gen_bool(0.5) {
                steps.push(Step::Scan {
                    start: k.clone(),
                    end: row_key(keys - 1, keys),
                    limit: rng.gen_range(1..=self.max_scan_limit.max(1)),
                });
            }
            steps.push(Step::Pause(self.pause_ns));
            if rng.gen_bool(0.5) {
                steps.push(Step::Put(k, row_value(ids.next_id())));
            } else {
                steps.push(Step::Delete(k, ids.next_id()));
            }
        } else {
            for _ in 0..rng.gen_range(1..=self.max_ops.max(1)) {
                let k = key(rng);
                match rng.gen_range(0..10) {
                    0..=2 => steps.push(Step::Get(k)),
                    3..=4 => steps.push(Step::Put(k, row_value(ids.next_id()))),
                    5..=6 => steps.push(Step::Delete(k, ids.next_id())),
                    7 => {
                        // Delete then insert the same key in one transaction.
                        steps.push(Step::Delete(k.clone(), ids.next_id()));
                        steps.push(Step::Put(k, row_value(ids.next_id())));
                    }
                    _ => {
                        let a = rng.gen_range(0..keys);
                        let b = rng.gen_range(a + 1..=keys);
                        let end = if b == keys {
                            vec![0xff, 0xff]
                        } else {
                            row_key(b, keys)
                        };
                        steps.push(Step::Scan {
                            start: row_key(a, keys),
                            end,
                            limit: rng.gen_range(1..=self.max_scan_limit.max(1)),
                        });
                    }
                }
            }
        }
        steps.push(Step::Commit);
        crate::ops::Script::new(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Program;
    use rand::SeedableRng;

    #[test]
    fn keys_are_ordered_and_spread_over_the_first_byte() {
        let ks: Vec<Key> = (0..16).map(|i| row_key(i, 16)).collect();
        assert!(ks.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ks[0][0], 0);
        assert_eq!(ks[8][0], 128);
    }

    #[test]
    fn the_mix_contains_every_kind_of_step() {
        let cfg = RowsConfig {
            keys: 16,
            max_ops: 4,
            max_scan_limit: 4,
            long_percent: 10,
            pause_ns: 1,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut ids = WriteIds::new(1);
        let (mut del, mut scan, mut pause, mut put) = (0, 0, 0, 0);
        for _ in 0..200 {
            let mut t = cfg.next_txn(&mut ids, &mut rng);
            loop {
                match t.next(None) {
                    Step::Delete(..) => del += 1,
                    Step::Scan { .. } => scan += 1,
                    Step::Pause(_) => pause += 1,
                    Step::Put(..) => put += 1,
                    Step::Commit | Step::Abort => break,
                    Step::Get(_) => {}
                }
            }
        }
        assert!(del > 0 && scan > 0 && pause > 0 && put > 0);
    }
}
