//! Test support shared by the TPC-C tests: a scaled-down population,
//! a loader into a map, and a buffered transaction over it.

use std::convert::Infallible;

pub(super) use std::collections::{BTreeMap, BTreeSet};
pub(super) use std::time::Instant;

pub(super) use rand::rngs::SmallRng;
pub(super) use rand::SeedableRng;

pub(super) use crate::ops::TxnOps;
pub(super) use crate::tatp::test_support::{block_on, MemStore};

use super::*;

/// A scaled-down database for the tests that run transactions.
pub(super) const SMALL: Dims = Dims {
    items: 2_000,
    customers: 120,
    new_orders: 36,
    last_names: 40,
};

pub(super) fn load(dims: Dims, warehouses: u32, seed: u64) -> BTreeMap<Key, Value> {
    let mut m = BTreeMap::new();
    for (k, v) in TpccPopulation::new(dims, seed, 1..=warehouses) {
        assert!(m.insert(k.clone(), v).is_none(), "duplicate key {k:?}");
    }
    m
}

pub(super) fn count(m: &BTreeMap<Key, Value>, t: TpccTable) -> usize {
    m.keys().filter(|k| TpccTable::of_key(k) == Some(t)).count()
}

/// A transaction over a map: writes are buffered (reads and scans see
/// them) and applied only on commit, so an abort discards them. Point
/// reads are logged in `reads`.
pub(super) struct Overlay<'a> {
    pub(super) base: &'a BTreeMap<Key, Value>,
    pub(super) writes: BTreeMap<Key, Option<Value>>,
    pub(super) reads: Vec<Key>,
}

impl<'a> Overlay<'a> {
    pub(super) fn new(base: &'a BTreeMap<Key, Value>) -> Self {
        Overlay {
            base,
            writes: BTreeMap::new(),
            reads: Vec::new(),
        }
    }
}

impl TxnOps for Overlay<'_> {
    type Error = Infallible;
    async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, Infallible> {
        self.reads.push(key.to_vec());
        Ok(match self.writes.get(key) {
            Some(w) => w.clone(),
            None => self.base.get(key).cloned(),
        })
    }
    async fn put(&mut self, key: Key, value: Value) -> Result<(), Infallible> {
        self.writes.insert(key, Some(value));
        Ok(())
    }
    async fn delete(&mut self, key: Key) -> Result<(), Infallible> {
        self.writes.insert(key, None);
        Ok(())
    }
    async fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<(Key, Value)>, Infallible> {
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        let r = start.to_vec()..end.to_vec();
        let mut a = self.base.range(r.clone()).peekable();
        let mut b = self.writes.range(r).peekable();
        while out.len() < limit {
            let from_base = match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((ka, _)), Some((kb, _))) => {
                    if ka == kb {
                        a.next();
                        false
                    } else {
                        ka < kb
                    }
                }
            };
            if from_base {
                let (k, v) = a.next().unwrap();
                out.push((k.clone(), v.clone()));
            } else {
                let (k, v) = b.next().unwrap();
                if let Some(v) = v {
                    out.push((k.clone(), v.clone()));
                }
            }
        }
        Ok(out)
    }
}

/// Runs one transaction; commits it iff the outcome says so.
pub(super) fn run(m: &mut BTreeMap<Key, Value>, txn: &TpccTxn) -> Outcome {
    let (out, writes) = {
        let mut o = Overlay::new(m);
        let out = block_on(execute(&mut o, txn)).unwrap();
        (out, o.writes)
    };
    if out.should_commit() {
        for (k, v) in writes {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    out
}

pub(super) fn cfg(w: u32) -> TpccConfig {
    TpccConfig { warehouses: w }
}
