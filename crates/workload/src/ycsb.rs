//! # YCSB — Yahoo! Cloud Serving Benchmark core workloads
//!
//! YCSB (Cooper et al., SoCC 2010) drives a key-value store with single-key
//! reads, updates and read-modify-writes over a table of `records` records,
//! choosing keys by a scrambled zipfian distribution. RAMP §5 and FaRMv2 §5
//! use it. The facts followed here are those of `shared/benchmarks/ycsb.md`;
//! workloads A (50% read / 50% update), B (95/5), C (100% read) and F (50%
//! read / 50% read-modify-write) are supported. D (read-latest with inserts)
//! and E (scans with inserts) are not.
//!
//! ## Keys and values
//!
//! Record `n` (0-based) has YCSB's hashed key name, `"user"` followed by the
//! decimal form of FNV-64a of `n` ([`fnvhash64`], as YCSB's
//! `Utils.fnvhash64`), behind Meridian's two-byte prefix
//! `[shard(n), b'U']` (see [`crate::tatp::shard`]), so records spread evenly
//! over the range-partitioned regions. A value is `value_bytes` random
//! printable bytes: 1000 by default (YCSB's 10 fields × 100 B, stored as one
//! opaque value); RAMP-style runs use 1.
//!
//! ## Request distribution
//!
//! [`ScrambledZipfian`]: a zipfian over ranks `0..records` with constant θ
//! (Gray et al.'s generator, as YCSB's `ZipfianGenerator`, zeta computed
//! once), whose rank is then FNV-hashed and reduced mod `records` so the
//! popular records are scattered over the key space. Note one deliberate
//! difference from YCSB: for θ = 0.99 YCSB draws ranks over a fixed 10¹⁰-item
//! space before hashing, which flattens the skew; here ranks range over
//! `records`, so the most popular record gets `1/zeta(records, θ)` of the
//! requests (≈13% for 1000 records at θ = 0.99).
//!
//! ## What is counted
//!
//! Each operation is one transaction ([`execute`]): Read = one get, Update =
//! one blind put of a fresh value, ReadModifyWrite = get then put. Drivers
//! report operations/s (equal to transactions/s here) and latency.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::tatp::shard;
use crate::ops::{Key, TxnOps, Value};

/// Table tag of YCSB keys (second key byte).
pub const TAG_USERTABLE: u8 = b'U';

/// The core workloads supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum YcsbWorkload {
    /// Update heavy: 50% read, 50% update.
    A,
    /// Read mostly: 95% read, 5% update.
    B,
    /// Read only: 100% read.
    C,
    /// Read-modify-write: 50% read, 50% read-modify-write.
    F,
}

impl YcsbWorkload {
    /// Parses `"a"`, `"A"`, `"workloada"` … (case-insensitive); D, E and
    /// anything else are an error.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("workload").unwrap_or(&t);
        match t {
            "a" => Ok(YcsbWorkload::A),
            "b" => Ok(YcsbWorkload::B),
            "c" => Ok(YcsbWorkload::C),
            "f" => Ok(YcsbWorkload::F),
            "d" | "e" => Err(format!(
                "YCSB workload {s:?} is not supported (it needs inserts/scans); use a, b, c or f"
            )),
            _ => Err(format!("unknown YCSB workload {s:?}; use a, b, c or f")),
        }
    }

    /// The workload's letter.
    pub fn name(self) -> &'static str {
        match self {
            YcsbWorkload::A => "A",
            YcsbWorkload::B => "B",
            YcsbWorkload::C => "C",
            YcsbWorkload::F => "F",
        }
    }

    /// Percentage of operations that are plain reads; the rest are updates
    /// (A, B) or read-modify-writes (F).
    pub fn read_percent(self) -> u32 {
        match self {
            YcsbWorkload::A | YcsbWorkload::F => 50,
            YcsbWorkload::B => 95,
            YcsbWorkload::C => 100,
        }
    }
}

impl FromStr for YcsbWorkload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        YcsbWorkload::parse(s)
    }
}

impl fmt::Display for YcsbWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Benchmark parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YcsbConfig {
    /// Number of records (at least 1).
    pub records: u64,
    /// Bytes per value (1000 = YCSB's default 10 fields × 100 B).
    pub value_bytes: usize,
    /// Zipfian constant θ, in the open interval (0, 1); 0.99 by default.
    pub theta: f64,
    /// Operation mix.
    pub workload: YcsbWorkload,
}

impl Default for YcsbConfig {
    fn default() -> Self {
        YcsbConfig {
            records: 100_000,
            value_bytes: 1000,
            theta: 0.99,
            workload: YcsbWorkload::A,
        }
    }
}

impl YcsbConfig {
    /// Checks `records >= 1` and θ ∈ (0, 1).
    pub fn validate(&self) -> Result<(), String> {
        if self.records == 0 {
            return Err("YCSB records must be at least 1".to_string());
        }
        check_theta(self.theta)
    }
}

fn check_theta(theta: f64) -> Result<(), String> {
    if theta > 0.0 && theta < 1.0 {
        Ok(())
    } else {
        Err(format!(
            "zipfian theta must be in the open interval (0, 1), got {theta}"
        ))
    }
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of
/// `val`, then Java's `Math.abs` (so the result is non-negative except for
/// `i64::MIN`, which `abs` leaves unchanged).
pub fn fnvhash64(val: u64) -> i64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut h = OFFSET_BASIS;
    for byte in val.to_le_bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(PRIME);
    }
    (h as i64).wrapping_abs()
}

/// Key of record `n`: `[shard(n), b'U']` + `"user"` + decimal of
/// [`fnvhash64`]`(n)`.
pub fn key(n: u64) -> Key {
    let name = format!("user{}", fnvhash64(n));
    let mut k = Vec::with_capacity(2 + name.len());
    k.push(shard(n));
    k.push(TAG_USERTABLE);
    k.extend_from_slice(name.as_bytes());
    k
}

/// A value of `len` random printable ASCII bytes (`'!'..='~'`).
pub fn random_value(rng: &mut impl Rng, len: usize) -> Value {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    for b in v.iter_mut() {
        *b = b'!' + *b % 94;
    }
    v
}

/// Iterator over the initial records; see [`population`].
#[derive(Debug)]
pub struct YcsbPopulation {
    seed: u64,
    value_bytes: usize,
    next: u64,
    end: u64,
}

impl Iterator for YcsbPopulation {
    type Item = (Key, Value);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let n = self.next;
        self.next += 1;
        // One RNG per record: any range reproduces the full population's rows.
        let mut rng = SmallRng::seed_from_u64(self.seed ^ n.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        Some((key(n), random_value(&mut rng, self.value_bytes)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.end.saturating_sub(self.next)).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

/// All `cfg.records` records (record numbers `0..records`, in that order),
/// with values of `cfg.value_bytes` bytes. Deterministic for `seed`.
pub fn population(cfg: &YcsbConfig, seed: u64) -> YcsbPopulation {
    population_range(cfg, seed, 0..cfg.records)
}

/// The records numbered in `range` only, exactly as [`population`] with the
/// same seed generates them (so loaders can split the work).
pub fn population_range(cfg: &YcsbConfig, seed: u64, range: Range<u64>) -> YcsbPopulation {
    YcsbPopulation {
        seed,
        value_bytes: cfg.value_bytes,
        next: range.start,
        end: range.end.min(cfg.records),
    }
}

/// `zeta(n, θ) = Σ_{i=1..n} 1/i^θ`. Costs `n` powers: about a second per
/// 10⁸ items.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Zipfian distribution over ranks `0..items` with constant θ: rank 0 is the
/// most popular, rank `i` has probability `1/((i+1)^θ · zeta(items, θ))`.
/// Gray et al., "Quickly generating billion-record synthetic databases"
/// (SIGMOD 1994), as in YCSB's `ZipfianGenerator` with a fixed item count.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// Builds the generator; computes `zeta(items, θ)` once. Errors if
    /// `items == 0` or θ ∉ (0, 1).
    pub fn new(items: u64, theta: f64) -> Result<Self, String> {
        if items == 0 {
            return Err("zipfian needs at least one item".to_string());
        }
        check_theta(theta)?;
        let zetan = zeta(items, theta);
        let zeta2 = zeta(2, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Ok(Zipfian {
            items,
            theta,
            zetan,
            alpha,
            eta,
            half_pow_theta: 0.5f64.powf(theta),
        })
    }

    /// Number of items.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// θ.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// `zeta(items, θ)`.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// Probability of rank `rank` (0-based) under the ideal distribution.
    pub fn probability(&self, rank: u64) -> f64 {
        1.0 / ((rank as f64 + 1.0).powf(self.theta) * self.zetan)
    }

    /// Draws a rank in `0..items`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }
}

/// Zipfian ranks scattered over `0..items` by FNV hashing, as YCSB's
/// `ScrambledZipfianGenerator`: `fnvhash64(rank) mod items`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    zipf: Zipfian,
}

impl ScrambledZipfian {
    /// Builds the generator (see [`Zipfian::new`]).
    pub fn new(items: u64, theta: f64) -> Result<Self, String> {
        Ok(ScrambledZipfian {
            zipf: Zipfian::new(items, theta)?,
        })
    }

    /// The underlying (unscrambled) zipfian.
    pub fn zipfian(&self) -> &Zipfian {
        &self.zipf
    }

    /// The item that rank `rank` maps to.
    pub fn item_of_rank(&self, rank: u64) -> u64 {
        (fnvhash64(rank) as u64) % self.zipf.items
    }

    /// Draws an item in `0..items`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        self.item_of_rank(self.zipf.next(rng))
    }
}

/// One YCSB operation on a record number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YcsbOp {
    /// Read the record.
    Read(u64),
    /// Overwrite the record with a fresh value, without reading it.
    Update(u64),
    /// Read the record, then overwrite it.
    ReadModifyWrite(u64),
}

impl YcsbOp {
    /// The record number.
    pub fn record(self) -> u64 {
        match self {
            YcsbOp::Read(n) | YcsbOp::Update(n) | YcsbOp::ReadModifyWrite(n) => n,
        }
    }

    /// Whether the operation only reads.
    pub fn is_read_only(self) -> bool {
        matches!(self, YcsbOp::Read(_))
    }

    /// Short name: `read`, `update` or `rmw`.
    pub fn name(self) -> &'static str {
        match self {
            YcsbOp::Read(_) => "read",
            YcsbOp::Update(_) => "update",
            YcsbOp::ReadModifyWrite(_) => "rmw",
        }
    }
}

/// Draws operations for one configuration. Immutable after construction, so
/// one generator can be shared by many client tasks, each with its own RNG.
#[derive(Clone, Debug)]
pub struct YcsbGenerator {
    workload: YcsbWorkload,
    keys: ScrambledZipfian,
}

impl YcsbGenerator {
    /// Validates `cfg` and builds the key distribution (computing zeta once,
    /// which takes time proportional to `cfg.records`).
    pub fn new(cfg: &YcsbConfig) -> Result<Self, String> {
        cfg.validate()?;
        Ok(YcsbGenerator {
            workload: cfg.workload,
            keys: ScrambledZipfian::new(cfg.records, cfg.theta)?,
        })
    }

    /// The key distribution.
    pub fn keys(&self) -> &ScrambledZipfian {
        &self.keys
    }

    /// The workload.
    pub fn workload(&self) -> YcsbWorkload {
        self.workload
    }

    /// The next operation: its kind by the workload's mix, its record by the
    /// scrambled zipfian.
    pub fn next_op(&self, rng: &mut impl Rng) -> YcsbOp {
        let read = rng.gen_range(0..100u32) < self.workload.read_percent();
        let n = self.keys.next(rng);
        match (read, self.workload) {
            (true, _) => YcsbOp::Read(n),
            (false, YcsbWorkload::F) => YcsbOp::ReadModifyWrite(n),
            (false, _) => YcsbOp::Update(n),
        }
    }
}

/// Runs `op` as the whole of the open transaction `t` (the caller begins and
/// commits it). Read: get. Update: blind put of a fresh `value_bytes`-byte
/// value. ReadModifyWrite: get, then put a fresh value. The value is drawn
/// from `rng` before the first await. An `Err` from `t` is returned at once.
pub async fn execute<T: TxnOps, R: Rng>(
    t: &mut T,
    op: YcsbOp,
    value_bytes: usize,
    rng: &mut R,
) -> Result<(), T::Error> {
    match op {
        YcsbOp::Read(n) => {
            t.get(&key(n)).await?;
        }
        YcsbOp::Update(n) => {
            let v = random_value(rng, value_bytes);
            t.put(key(n), v).await?;
        }
        YcsbOp::ReadModifyWrite(n) => {
            let v = random_value(rng, value_bytes);
            let k = key(n);
            t.get(&k).await?;
            t.put(k, v).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tatp::test_support::{block_on, MemStore};
    use std::collections::HashSet;

    #[test]
    fn parse_workloads() {
        assert_eq!(YcsbWorkload::parse("a"), Ok(YcsbWorkload::A));
        assert_eq!("B".parse::<YcsbWorkload>(), Ok(YcsbWorkload::B));
        assert_eq!(YcsbWorkload::parse(" workloadC "), Ok(YcsbWorkload::C));
        assert_eq!(YcsbWorkload::parse("f"), Ok(YcsbWorkload::F));
        assert!(YcsbWorkload::parse("d").is_err());
        assert!(YcsbWorkload::parse("E").is_err());
        assert!(YcsbWorkload::parse("x").is_err());
        assert!(YcsbWorkload::parse("").is_err());
    }

    #[test]
    fn theta_validation() {
        assert!(Zipfian::new(10, 1.0).is_err());
        assert!(Zipfian::new(10, 0.0).is_err());
        assert!(Zipfian::new(10, f64::NAN).is_err());
        assert!(Zipfian::new(0, 0.5).is_err());
        assert!(Zipfian::new(1, 0.99).is_ok());
        let cfg = YcsbConfig {
            theta: 1.0,
            ..YcsbConfig::default()
        };
        assert!(YcsbGenerator::new(&cfg).is_err());
        let cfg = YcsbConfig {
            records: 0,
            ..YcsbConfig::default()
        };
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn fnv_and_keys() {
        // FNV-1a of eight zero bytes, by the definition.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(fnvhash64(0), (h as i64).wrapping_abs());
        assert!(fnvhash64(12345) >= 0);
        let k = key(7);
        assert_eq!(k[0], shard(7));
        assert_eq!(k[1], TAG_USERTABLE);
        assert!(k[2..].starts_with(b"user"));
        assert!(k[6..].iter().all(u8::is_ascii_digit));
        let keys: HashSet<Key> = (0..100_000).map(key).collect();
        assert_eq!(keys.len(), 100_000);
        let names: HashSet<i64> = (0..100_000).map(fnvhash64).collect();
        assert_eq!(names.len(), 100_000);
    }

    #[test]
    fn population_is_deterministic_and_splittable() {
        let cfg = YcsbConfig {
            records: 500,
            value_bytes: 16,
            ..YcsbConfig::default()
        };
        let a: Vec<_> = population(&cfg, 3).collect();
        assert_eq!(a.len(), 500);
        assert!(a
            .iter()
            .all(|(_, v)| v.len() == 16 && v.iter().all(|b| (b'!'..=b'~').contains(b))));
        assert_eq!(a, population(&cfg, 3).collect::<Vec<_>>());
        assert_ne!(a, population(&cfg, 4).collect::<Vec<_>>());
        let split: Vec<_> = population_range(&cfg, 3, 0..200)
            .chain(population_range(&cfg, 3, 200..1000))
            .collect();
        assert_eq!(a, split);
        assert_eq!(a[42].0, key(42));
    }

    #[test]
    fn zipfian_skew() {
        let n = 1000;
        let z = Zipfian::new(n, 0.99).unwrap();
        let p0 = z.probability(0);
        assert!((p0 - 0.13).abs() < 0.01, "p0 {p0}");
        let mut rng = SmallRng::seed_from_u64(9);
        let draws = 200_000;
        let mut counts = vec![0usize; n as usize];
        for _ in 0..draws {
            let r = z.next(&mut rng);
            assert!(r < n);
            counts[r as usize] += 1;
        }
        let f0 = counts[0] as f64 / draws as f64;
        let f1 = counts[1] as f64 / draws as f64;
        assert!((f0 - p0).abs() < 0.01, "rank 0: {f0} vs {p0}");
        assert!((f1 - z.probability(1)).abs() < 0.01, "rank 1: {f1}");
        // Top-10 ranks carry their expected share.
        let top10: f64 = counts[..10].iter().sum::<usize>() as f64 / draws as f64;
        let want10: f64 = (0..10).map(|r| z.probability(r)).sum();
        assert!((top10 - want10).abs() < 0.02, "top10 {top10} vs {want10}");

        // Scrambled: same skew, but the hot item is not item 0.
        let s = ScrambledZipfian::new(n, 0.99).unwrap();
        let mut counts = vec![0usize; n as usize];
        for _ in 0..draws {
            let i = s.next(&mut rng);
            assert!(i < n);
            counts[i as usize] += 1;
        }
        let (hot, &max) = counts.iter().enumerate().max_by_key(|(_, c)| **c).unwrap();
        assert_eq!(hot as u64, s.item_of_rank(0));
        let share = max as f64 / draws as f64;
        assert!((0.12..0.16).contains(&share), "hot share {share}");
    }

    #[test]
    fn draws_in_range_for_many_sizes() {
        let mut rng = SmallRng::seed_from_u64(5);
        for n in [1u64, 2, 3, 10, 12345] {
            for theta in [0.01, 0.5, 0.99] {
                let s = ScrambledZipfian::new(n, theta).unwrap();
                for _ in 0..5000 {
                    assert!(s.next(&mut rng) < n);
                }
            }
        }
    }

    #[test]
    fn mix_ratios() {
        let mut rng = SmallRng::seed_from_u64(1);
        for (w, read, update, rmw) in [
            (YcsbWorkload::A, 0.50, 0.50, 0.0),
            (YcsbWorkload::B, 0.95, 0.05, 0.0),
            (YcsbWorkload::C, 1.0, 0.0, 0.0),
            (YcsbWorkload::F, 0.50, 0.0, 0.50),
        ] {
            let cfg = YcsbConfig {
                records: 1000,
                workload: w,
                ..YcsbConfig::default()
            };
            let g = YcsbGenerator::new(&cfg).unwrap();
            let draws = 100_000;
            let mut c = [0usize; 3];
            for _ in 0..draws {
                let op = g.next_op(&mut rng);
                assert!(op.record() < 1000);
                c[match op {
                    YcsbOp::Read(_) => 0,
                    YcsbOp::Update(_) => 1,
                    YcsbOp::ReadModifyWrite(_) => 2,
                }] += 1;
            }
            let f = |x: usize| x as f64 / draws as f64;
            assert!((f(c[0]) - read).abs() < 0.01, "{w} read {}", f(c[0]));
            assert!((f(c[1]) - update).abs() < 0.01, "{w} update {}", f(c[1]));
            assert!((f(c[2]) - rmw).abs() < 0.01, "{w} rmw {}", f(c[2]));
        }
    }

    #[test]
    fn execute_ops() {
        let cfg = YcsbConfig {
            records: 10,
            value_bytes: 8,
            ..YcsbConfig::default()
        };
        let mut s = MemStore::default();
        s.map.extend(population(&cfg, 1));
        let before = s.map[&key(3)].clone();
        let mut rng = SmallRng::seed_from_u64(2);
        block_on(execute(&mut s, YcsbOp::Read(3), 8, &mut rng)).unwrap();
        assert_eq!(s.map[&key(3)], before);
        assert_eq!(s.ops, 1);
        block_on(execute(&mut s, YcsbOp::Update(3), 8, &mut rng)).unwrap();
        assert_ne!(s.map[&key(3)], before);
        assert_eq!(s.map[&key(3)].len(), 8);
        assert_eq!(s.ops, 2);
        let before = s.map[&key(4)].clone();
        block_on(execute(&mut s, YcsbOp::ReadModifyWrite(4), 8, &mut rng)).unwrap();
        assert_ne!(s.map[&key(4)], before);
        assert_eq!(s.ops, 4);
        assert_eq!(s.map.len(), 10);
    }
}
