//! # RMW — a multi-key read-modify-write transaction with an exact audit
//!
//! **Problem.** A key-value store's transactions are only worth having if
//! a transaction that reads several keys and writes them back loses no
//! update, even when another transaction does the same to some of the
//! keys at once. The benchmark compares Meridian with etcd on exactly that
//! transaction: etcd's own answer is a Txn whose compares guard every key
//! read.
//!
//! **The workload.** `records` counters. One transaction picks `keys`
//! distinct counters uniformly at random, reads each and writes it back
//! incremented by one ([`execute`]). Nothing else writes them, so after
//! any run the counters sum to exactly `keys ×` the number of committed
//! transactions ([`audit`]): a lost update (two transactions that both
//! read 7 and both wrote 8) makes the sum short, a transaction applied
//! twice makes it long. The bench audits every target after its run.
//!
//! **Keys and values.** Counter `n` has key `[shard(n), b'R', n:u32be]`
//! (see [`crate::tatp::shard`]), so counters spread over the regions and a
//! transaction usually touches several. A value is the counter as 8 bytes
//! little-endian, padded with zeros to `value_bytes` (at least 8).

use rand::Rng;

use crate::ops::{Key, TxnOps, Value};
use crate::tatp::shard;

/// Table tag of RMW keys (second key byte).
pub const TAG_COUNTER: u8 = b'R';

/// Size of the RMW workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmwConfig {
    /// Counters stored (≥ `keys`).
    pub records: u32,
    /// Counters read and written per transaction (1..=64).
    pub keys: usize,
    /// Bytes per value (8..=65,536).
    pub value_bytes: usize,
}

impl Default for RmwConfig {
    /// 10,000 counters, 4 per transaction, 100-byte values.
    fn default() -> Self {
        RmwConfig {
            records: 10_000,
            keys: 4,
            value_bytes: 100,
        }
    }
}

impl RmwConfig {
    /// Errors: a size out of its range.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.keys) {
            return Err(format!(
                "rmw: keys per transaction must be 1..=64, not {}",
                self.keys
            ));
        }
        if (self.records as usize) < self.keys {
            return Err(format!(
                "rmw: {} records cannot give {} distinct keys per transaction",
                self.records, self.keys
            ));
        }
        if !(8..=65_536).contains(&self.value_bytes) {
            return Err(format!(
                "rmw: value size must be 8..=65536 bytes, not {}",
                self.value_bytes
            ));
        }
        Ok(())
    }
}

/// Key of counter `n`.
pub fn key(n: u32) -> Key {
    let mut k = Vec::with_capacity(6);
    k.push(shard(n as u64));
    k.push(TAG_COUNTER);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// The value holding `count`, `value_bytes` long.
pub fn encode(count: u64, value_bytes: usize) -> Value {
    let mut v = vec![0u8; value_bytes.max(8)];
    v[..8].copy_from_slice(&count.to_le_bytes());
    v
}

/// The counter in `v`; `None` if it is shorter than 8 bytes.
pub fn decode(v: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))
}

/// Every counter at zero, in key-number order.
pub fn population(cfg: &RmwConfig) -> impl Iterator<Item = (Key, Value)> + Send + 'static {
    let value_bytes = cfg.value_bytes;
    (0..cfg.records).map(move |n| (key(n), encode(0, value_bytes)))
}

/// One transaction's input: distinct counter numbers, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RmwTxn {
    /// The counters to increment.
    pub counters: Vec<u32>,
}

/// Draws `cfg.keys` distinct counters uniformly.
pub fn next_txn(cfg: &RmwConfig, rng: &mut impl Rng) -> RmwTxn {
    let mut counters: Vec<u32> = Vec::with_capacity(cfg.keys);
    while counters.len() < cfg.keys.min(cfg.records as usize) {
        let n = rng.gen_range(0..cfg.records);
        if !counters.contains(&n) {
            counters.push(n);
        }
    }
    counters.sort_unstable();
    RmwTxn { counters }
}

/// Runs `txn` as the whole of the open transaction `t`: read the counters
/// (together, [`TxnOps::get_many`]), then write each back plus one. `Ok(false)` if a counter is missing or
/// malformed (nothing is written: the caller aborts and reports it);
/// `Ok(true)` otherwise, to be committed.
pub async fn execute<T: TxnOps>(
    t: &mut T,
    txn: &RmwTxn,
    value_bytes: usize,
) -> Result<bool, T::Error> {
    // The read set is known up front: one round of reads.
    let keys: Vec<Key> = txn.counters.iter().map(|&n| key(n)).collect();
    let mut counts = Vec::with_capacity(keys.len());
    for v in t.get_many(&keys).await? {
        match v.as_deref().and_then(decode) {
            Some(c) => counts.push(c),
            None => return Ok(false),
        }
    }
    for (&n, c) in txn.counters.iter().zip(counts) {
        t.put(key(n), encode(c + 1, value_bytes)).await?;
    }
    Ok(true)
}

/// Reads every counter in transactions of 1,000 gets and returns their sum.
/// Run it when nothing else writes: the sum must equal `cfg.keys ×` the
/// committed RMW transactions.
///
/// Errors: the first error of `t`, or a missing or malformed counter (as
/// `Ok(Err(n))`, the counter's number).
pub async fn audit<T: TxnOps>(
    t: &mut T,
    cfg: &RmwConfig,
    from: u32,
    to: u32,
) -> Result<Result<u64, u32>, T::Error> {
    let mut sum = 0u64;
    for n in from..to.min(cfg.records) {
        match t.get(&key(n)).await?.as_deref().and_then(decode) {
            Some(c) => sum += c,
            None => return Ok(Err(n)),
        }
    }
    Ok(Ok(sum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tatp::test_support::{block_on, MemStore};
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn counters_sum_to_keys_times_commits_and_a_lost_update_is_seen() {
        let cfg = RmwConfig {
            records: 50,
            ..RmwConfig::default()
        };
        cfg.validate().unwrap();
        let mut s = MemStore::default();
        s.map.extend(population(&cfg));
        assert_eq!(s.map.len(), 50);
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..200 {
            let txn = next_txn(&cfg, &mut rng);
            assert_eq!(txn.counters.len(), 4);
            assert!(txn.counters.windows(2).all(|w| w[0] < w[1]));
            assert!(block_on(execute(&mut s, &txn, cfg.value_bytes)).unwrap());
        }
        assert_eq!(block_on(audit(&mut s, &cfg, 0, 50)).unwrap(), Ok(800));
        // A lost update: two transactions read the same counter, both
        // write read + 1.
        let k = key(3);
        let c = decode(&s.map[&k]).unwrap();
        s.map.insert(k.clone(), encode(c + 1, cfg.value_bytes));
        s.map.insert(k, encode(c + 1, cfg.value_bytes));
        // Two commits counted, only one increment stored: the audit is
        // short.
        assert_ne!(block_on(audit(&mut s, &cfg, 0, 50)).unwrap(), Ok(800 + 2));
        s.map.remove(&key(7));
        assert_eq!(block_on(audit(&mut s, &cfg, 0, 50)).unwrap(), Err(7));
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [
            RmwConfig {
                keys: 0,
                ..RmwConfig::default()
            },
            RmwConfig {
                records: 3,
                ..RmwConfig::default()
            },
            RmwConfig {
                value_bytes: 4,
                ..RmwConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(decode(&encode(42, 8)), Some(42));
        assert_eq!(decode(&[1, 2]), None);
    }
}
