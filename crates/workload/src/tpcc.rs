//! # TPC-C — order entry for a wholesale supplier
//!
//! TPC-C (TPC Benchmark C, standard specification v5.11) models a
//! wholesale supplier with `W` warehouses, each serving 10 sales districts
//! of 3,000 customers, a catalogue of 100,000 items stocked by every
//! warehouse, and the orders those customers place. Five transaction
//! profiles run in a fixed mix: NEW_ORDER (45%), PAYMENT (43%), and
//! ORDER_STATUS, DELIVERY and STOCK_LEVEL (4% each). FaRM evaluates with it
//! (FaRM §6.3, FaRMv2 §5): it partitions every table by warehouse except the
//! small read-only ITEM table, which it replicates to every server, runs the
//! full mix, and reports committed NEW_ORDERs per second.
//!
//! This module is the benchmark as I/O-free code: the initial database as a
//! streaming iterator ([`population`]), transaction inputs drawn from a
//! caller's RNG ([`next_txn`]), the five profiles run against an open
//! transaction ([`execute`]), and the spec's consistency conditions checked
//! over a scan of the store ([`check_consistency`], [`ConsistencyChecker`]).
//!
//! ## Tables and key layout
//!
//! The store range-partitions keys on their first byte, so every key starts
//! with [`shard`]`(w_id)`: all rows of a warehouse —
//! including its copy of ITEM — are co-located, as in FaRM, and a NEW_ORDER
//! whose order lines are all supplied by the home warehouse touches a single
//! shard. Then comes a one-byte table tag, then big-endian ids (`w` = w_id
//! u32, `d` = d_id u8, `c` = c_id u32, `o` = o_id u32, `n` = ol_number u8,
//! `i` = i_id u32). Row sizes are the raw encoded bytes (key + value) per
//! row, averaged over a spec-size warehouse (variable-length strings are
//! stored at their actual length, with a 1- or 2-byte length prefix).
//!
//! | table | key | value | raw bytes/row (key + value) |
//! |---|---|---|---|
//! | WAREHOUSE | `[s, 'W', w]` | [`Warehouse`] | 6 + 76 |
//! | WAREHOUSE_YTD | `[s, 'w', w]` | [`WarehouseYtd`] | 6 + 8 |
//! | DISTRICT | `[s, 'D', w, d]` | [`District`] | 7 + 70 |
//! | DISTRICT_YTD | `[s, 'd', w, d]` | [`DistrictYtd`] | 7 + 8 |
//! | DISTRICT_NEXT_O_ID | `[s, 'n', w, d]` | [`DistrictNextOId`] | 7 + 4 |
//! | CUSTOMER | `[s, 'C', w, d, c]` | [`Customer`] | 11 + 550 |
//! | HISTORY | `[s, 'H', w, d, c_w, c_d, c, uid:u64]` | [`History`] | 24 + 31 |
//! | NEW_ORDER | `[s, 'N', w, d, o]` | o_id u32 | 11 + 4 |
//! | ORDER | `[s, 'O', w, d, o]` | [`Order`] | 11 + 15 |
//! | ORDER_LINE | `[s, 'L', w, d, o, n]` | [`OrderLine`] | 12 + 45 |
//! | ITEM (one copy per warehouse) | `[s, 'I', w, i]` | [`Item`] | 10 + 67 |
//! | STOCK | `[s, 'S', w, i]` | [`Stock`] | 10 + 293 |
//! | index: customer by name | `[s, 'X', w, d, c_last, 0, c_first, 0, c]` | c_id u32 | ≈37 + 4 |
//! | index: orders by customer | `[s, 'Y', w, d, c, !o]` | o_id u32 | 15 + 4 |
//!
//! (`s` = `shard(w)`; `!o` is the bitwise complement of o_id, so an
//! ascending scan of `[s, 'Y', w, d, c]` with limit 1 finds the customer's
//! newest order.) The HISTORY table has no primary key in the spec; its key
//! here is the paying district `(w, d)` (co-located with the
//! WAREHOUSE_YTD and DISTRICT_YTD rows PAYMENT updates), the customer
//! `(c_w, c_d, c)`, and a unique id: 0 for the initial rows, a random u64
//! with the top bit set drawn by [`next_txn`] for PAYMENT's (a collision
//! needs two equal 63-bit draws). The name-index key ends with c_id so
//! that customers sharing a name have distinct entries; names hold no 0
//! byte, so the 0 terminators keep one name's entries contiguous and in
//! c_first order.
//!
//! **ITEM is copied into every warehouse** rather than spread by item id.
//! The spec makes ITEM read-only and FaRM replicates it to every server; a
//! per-warehouse copy is the equivalent in a store whose unit of placement
//! is the key's first byte. Spreading it by `shard(i_id)` would make nearly
//! every NEW_ORDER read ~10 other shards and so be distributed, where the
//! paper's point (≈10% of transactions touch remote data) is that most are
//! not. The cost is 100,000 extra rows (≈7.7 MB raw) per warehouse beyond
//! the first. All copies are generated from the seed and i_id only, so they
//! are identical. NEW_ORDER reads the item from its home warehouse's copy.
//!
//! **W_YTD, D_YTD and D_NEXT_O_ID live in rows of their own**,
//! WAREHOUSE_YTD, DISTRICT_YTD and DISTRICT_NEXT_O_ID, keyed like the
//! warehouse and district (so in the same shard), a vertical partitioning
//! that clause 1.6 allows. NEW_ORDER reads W_TAX from WAREHOUSE and D_TAX
//! from DISTRICT and increments D_NEXT_O_ID in DISTRICT_NEXT_O_ID; PAYMENT
//! adds to W_YTD and D_YTD and reads W_NAME and D_NAME (2.5.2.2) from
//! WAREHOUSE and DISTRICT. Were these columns of WAREHOUSE and DISTRICT,
//! every committed PAYMENT would overwrite a row that every concurrent
//! NEW_ORDER of its warehouse had read, and every committed NEW_ORDER the
//! DISTRICT row that every concurrent PAYMENT of its district had read:
//! conflicts over columns neither profile shares, which abort the reader
//! at validation under OCC and one of the two under SSI alike (with W_YTD
//! and D_YTD in place, 2 warehouses and 16 sessions abort 90% of
//! attempts). So WAREHOUSE and DISTRICT are read-only after the load. Of
//! the warehouse- and district-level rows, PAYMENT writes only the YTD
//! rows, which NEW_ORDER never reads, and NEW_ORDER only
//! DISTRICT_NEXT_O_ID, which PAYMENT never reads. STOCK_LEVEL reads D_NEXT_O_ID from its row; ORDER_STATUS and DELIVERY
//! do not need it. The only district-level conflict left is NEW_ORDER
//! against NEW_ORDER of the same district on D_NEXT_O_ID, a true one: each
//! must take a distinct order id.
//!
//! Money is held in integer cents (`i64` for balances and year-to-date
//! sums, `u32` for prices and amounts), tax and discount rates in units of
//! 1/10,000, dates as seconds since the Unix epoch with 0 meaning NULL,
//! and O_CARRIER_ID 0 meaning NULL.
//!
//! Rows per warehouse at the spec's sizes: 1 each of WAREHOUSE and
//! WAREHOUSE_YTD, 10 each of DISTRICT, DISTRICT_YTD and
//! DISTRICT_NEXT_O_ID, 30,000 each of CUSTOMER, HISTORY, ORDER and the two
//! indexes, 9,000 NEW_ORDER, ≈300,000 ORDER_LINE, 100,000 each of ITEM and
//! STOCK — ≈659,000 rows, ≈76 MB raw.
//!
//! ## What is counted
//!
//! [`execute`] returns an [`Outcome`]:
//! - [`Outcome::Commit`]: the profile ran to its end; the driver commits.
//!   FaRM's headline figure is the number of committed NEW_ORDERs per
//!   second, while every kind is part of the mix.
//! - [`Outcome::RolledBack`]: the 1% of NEW_ORDERs whose last item id is
//!   unused (clause 2.4.1.4) found no ITEM row. The spec requires the whole
//!   transaction to be rolled back, so the driver must **abort** it instead
//!   of committing; it still counts as a completed (rolled-back) NEW_ORDER,
//!   not as a failure.
//! - [`Outcome::Missing`]: a row that must exist was absent or did not
//!   decode (a bug or a corrupt load). The driver must abort and report it;
//!   it is never expected on a correctly loaded database.
//!
//! An `Err` from the transaction (a conflict abort, an operational failure)
//! is returned at once, as in every Meridian workload.
//!
//! ## Clauses implemented
//!
//! - 1.3 and 4.3: the tables' columns (all of them, text included, so
//!   bytes-per-row figures are realistic; W_YTD, D_YTD and D_NEXT_O_ID
//!   vertically partitioned into rows of their own, as 1.6 allows) and the
//!   initial population (4.3.3.1), with NURand and its C constants
//!   (2.1.6), last names from the syllable table (4.3.2.3), a-strings,
//!   n-strings and zip codes (4.3.2.2, 4.3.2.7), "ORIGINAL" in 10% of
//!   I_DATA and S_DATA, 10% "BC" credit, initial orders with a random
//!   permutation of customer ids, the last 900 per district undelivered.
//! - 2.4–2.8: the five profiles' inputs ([`next_txn`]) and their database
//!   work ([`execute`]); 5.2.3: the mix 45/43/4/4/4.
//! - 3.3.2.1–3.3.2.10 and 3.3.2.12: the consistency conditions
//!   ([`check_consistency`]), plus agreement of both secondary indexes with
//!   their base tables.
//!
//! ## Deliberate deviations
//!
//! - **ITEM is replicated per warehouse** (above).
//! - **The C constants of NURand are fixed** ([`C_LAST_LOAD`],
//!   [`C_LAST_RUN`], [`C_C_ID`], [`C_OL_I_ID`]) rather than drawn per load
//!   and per run, so that a loader and independent drivers agree without
//!   sharing state; they satisfy 2.1.6.1's rule on the C_LAST delta.
//! - **No clock**: dates come from [`TpccTxn::now`], which [`next_txn`]
//!   sets to [`RUN_TIME`]; a driver may overwrite it with wall-clock
//!   seconds. The initial rows use [`LOAD_TIME`].
//! - **DELIVERY runs as one transaction over all 10 districts**, as FaRM
//!   does, not deferred (2.7.2 allows deferral but does not require it);
//!   a district with no undelivered order is skipped (2.7.4.2), and skipped
//!   districts are not reported.
//! - **STOCK_LEVEL draws its district uniformly per transaction**; the spec
//!   fixes it per terminal (2.8.1.1), and this module has no terminals.
//! - **Customer selection by last name reads one CUSTOMER row**: the name
//!   index yields the matching c_ids in c_first order and the profile reads
//!   only the one at position ⌈n/2⌉ (2.5.2.2, 2.6.2.2).
//! - **No terminal output** (2.4.3 etc.): values a profile would display are
//!   read but not returned; there are no keying or think times.
//! - **3.3.2.11** (`count(ORDER) − count(NEW_ORDER) = 2100`) holds only for
//!   the initial database and is not checked.
//! - HISTORY has a synthetic unique key (above).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::RangeInclusive;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::ops::{Key, TxnOps, Value};
use crate::tatp::{prefix_end, shard};

// ---------------------------------------------------------------------------
// Constants of the specification
// ---------------------------------------------------------------------------

/// Districts per warehouse (clause 1.2.1).
pub const DISTRICTS: u8 = 10;
/// Customers per district (4.3.3.1).
pub const CUSTOMERS_PER_DISTRICT: u32 = 3_000;
/// Rows of ITEM, and of STOCK per warehouse (4.3.3.1).
pub const ITEMS: u32 = 100_000;
/// Initial ORDER rows per district, one per customer (4.3.3.1).
pub const ORDERS_PER_DISTRICT: u32 = 3_000;
/// Initial NEW_ORDER rows per district: the last 900 orders, o_id
/// 2,101..=3,000, are undelivered (4.3.3.1).
pub const NEW_ORDERS_PER_DISTRICT: u32 = 900;
/// Fewest order lines per order (O_OL_CNT, 2.4.1.3 and 4.3.3.1).
pub const MIN_OL_CNT: u8 = 5;
/// Most order lines per order.
pub const MAX_OL_CNT: u8 = 15;
/// Distinct last names, numbered 0..=999 (4.3.2.3).
pub const LAST_NAMES: u32 = 1_000;
/// Largest warehouse count [`TpccConfig::validate`] accepts.
pub const MAX_WAREHOUSES: u32 = 1_000;
/// STOCK_LEVEL examines the order lines of the district's last 20 orders
/// (2.8.2.2).
pub const STOCK_LEVEL_ORDERS: u32 = 20;
/// The unused item id the 1% rolled-back NEW_ORDERs ask for (2.4.1.5: "an
/// unused value", outside `1..=ITEMS`).
pub const UNUSED_I_ID: u32 = ITEMS + 1;
/// Longest C_DATA, characters (PAYMENT truncates to it, 2.5.2.2).
pub const C_DATA_MAX: usize = 500;

/// Date of the initial rows (C_SINCE, O_ENTRY_D, H_DATE, OL_DELIVERY_D of
/// delivered lines): 2024-01-01T00:00:00Z, seconds since the Unix epoch.
pub const LOAD_TIME: u64 = 1_704_067_200;
/// The date [`next_txn`] puts in [`TpccTxn::now`]: a day after
/// [`LOAD_TIME`] (this code reads no clock).
pub const RUN_TIME: u64 = LOAD_TIME + 86_400;

/// NURand's A for C_LAST (2.1.6).
pub const A_C_LAST: u32 = 255;
/// NURand's A for C_ID.
pub const A_C_ID: u32 = 1_023;
/// NURand's A for OL_I_ID.
pub const A_OL_I_ID: u32 = 8_191;
/// NURand's C for C_LAST when loading (C_LOAD, 2.1.6.1), in `0..=255`.
pub const C_LAST_LOAD: u32 = 157;
/// NURand's C for C_LAST when running (C_RUN): `|C_RUN − C_LOAD|` = 66 is
/// in `65..=119` and is neither 96 nor 112, as 2.1.6.1 requires.
pub const C_LAST_RUN: u32 = 223;
/// NURand's C for C_ID, in `0..=1023` (the same at load and run).
pub const C_C_ID: u32 = 259;
/// NURand's C for OL_I_ID, in `0..=8191`.
pub const C_OL_I_ID: u32 = 7_911;

/// Table tag of WAREHOUSE keys.
pub const TAG_WAREHOUSE: u8 = b'W';
/// Table tag of WAREHOUSE_YTD keys (W_YTD, split from WAREHOUSE).
pub const TAG_WAREHOUSE_YTD: u8 = b'w';
/// Table tag of DISTRICT keys.
pub const TAG_DISTRICT: u8 = b'D';
/// Table tag of DISTRICT_YTD keys (D_YTD, split from DISTRICT).
pub const TAG_DISTRICT_YTD: u8 = b'd';
/// Table tag of DISTRICT_NEXT_O_ID keys (D_NEXT_O_ID, split from
/// DISTRICT).
pub const TAG_DISTRICT_NEXT_O_ID: u8 = b'n';
/// Table tag of CUSTOMER keys.
pub const TAG_CUSTOMER: u8 = b'C';
/// Table tag of HISTORY keys.
pub const TAG_HISTORY: u8 = b'H';
/// Table tag of NEW_ORDER keys.
pub const TAG_NEW_ORDER: u8 = b'N';
/// Table tag of ORDER keys.
pub const TAG_ORDER: u8 = b'O';
/// Table tag of ORDER_LINE keys.
pub const TAG_ORDER_LINE: u8 = b'L';
/// Table tag of ITEM keys (one copy per warehouse).
pub const TAG_ITEM: u8 = b'I';
/// Table tag of STOCK keys.
pub const TAG_STOCK: u8 = b'S';
/// Table tag of the customer-by-last-name index.
pub const TAG_CUSTOMER_NAME: u8 = b'X';
/// Table tag of the orders-by-customer (newest first) index.
pub const TAG_ORDER_CUSTOMER: u8 = b'Y';

/// Initial H_AMOUNT and C_YTD_PAYMENT, cents (10.00, 4.3.3.1).
const INITIAL_PAYMENT: u32 = 1_000;
/// Initial C_BALANCE, cents (−10.00).
const INITIAL_BALANCE: i64 = -1_000;
/// C_CREDIT_LIM, cents (50,000.00).
const CREDIT_LIM: i64 = 5_000_000;

/// Benchmark size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccConfig {
    /// W, the number of warehouses (ids `1..=W`); must be in
    /// `1..=MAX_WAREHOUSES` (see [`TpccConfig::validate`]). Functions here
    /// clamp it into that range.
    pub warehouses: u32,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig { warehouses: 1 }
    }
}

impl TpccConfig {
    /// Checks that `warehouses` is in `1..=MAX_WAREHOUSES`.
    pub fn validate(&self) -> Result<(), String> {
        if self.warehouses == 0 || self.warehouses > MAX_WAREHOUSES {
            return Err(format!(
                "TPC-C warehouses must be in 1..={MAX_WAREHOUSES}, got {}",
                self.warehouses
            ));
        }
        Ok(())
    }

    /// W clamped into `1..=MAX_WAREHOUSES`.
    pub fn w(&self) -> u32 {
        self.warehouses.clamp(1, MAX_WAREHOUSES)
    }
}

/// The population sizes. The public API always uses [`Dims::SPEC`]; the
/// tests use a scaled-down copy for speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dims {
    /// ITEM rows (and STOCK rows per warehouse).
    items: u32,
    /// Customers per district, and initial orders per district.
    customers: u32,
    /// Undelivered initial orders per district (the last ones).
    new_orders: u32,
    /// Distinct last names; the first `last_names` customers of a district
    /// take names 0.. in order, so every name exists.
    last_names: u32,
}

impl Dims {
    const SPEC: Dims = Dims {
        items: ITEMS,
        customers: CUSTOMERS_PER_DISTRICT,
        new_orders: NEW_ORDERS_PER_DISTRICT,
        last_names: LAST_NAMES,
    };

    /// The first undelivered initial o_id (2,101).
    fn first_new_order(&self) -> u32 {
        self.customers - self.new_orders.min(self.customers) + 1
    }

    /// Initial D_YTD, cents: the district's initial HISTORY amounts
    /// (30,000.00 at the spec's size).
    fn d_ytd(&self) -> i64 {
        i64::from(self.customers) * i64::from(INITIAL_PAYMENT)
    }
}

// ---------------------------------------------------------------------------
// Random values (clauses 2.1.6, 4.3.2)
// ---------------------------------------------------------------------------

/// NURand(A, x, y) of clause 2.1.6:
/// `(((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x`, in `x..=y`.
/// Requires `x <= y` (otherwise returns `x`).
pub fn nurand(a: u32, c: u32, x: u32, y: u32, rng: &mut impl Rng) -> u32 {
    if y < x {
        return x;
    }
    let r = u64::from(rng.gen_range(0..=a) | rng.gen_range(x..=y));
    let span = u64::from(y - x) + 1;
    // The remainder is < span <= 2^32, and x + remainder <= y.
    x + ((r + u64::from(c)) % span) as u32
}

/// The syllables of clause 4.3.2.3, indexed by digit.
pub const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// C_LAST for name number `num` in `0..=999` (4.3.2.3): the syllables of
/// its three decimal digits, e.g. 371 → `PRICALLYOUGHT`. Larger numbers use
/// their last three digits.
pub fn last_name(num: u32) -> Vec<u8> {
    let n = (num % 1000) as usize;
    let mut out = Vec::with_capacity(15);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        out.extend_from_slice(SYLLABLES[digit].as_bytes());
    }
    out
}

const ALNUM: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A random a-string (4.3.2.2) of length `lo..=hi`: alphanumeric ASCII.
fn a_string(rng: &mut impl Rng, lo: usize, hi: usize) -> Vec<u8> {
    let n = rng.gen_range(lo..=hi);
    (0..n)
        .map(|_| ALNUM[rng.gen_range(0..ALNUM.len())])
        .collect()
}

fn a_fixed<const N: usize>(rng: &mut impl Rng) -> [u8; N] {
    let mut out = [0u8; N];
    for b in out.iter_mut() {
        *b = ALNUM[rng.gen_range(0..ALNUM.len())];
    }
    out
}

fn letters<const N: usize>(rng: &mut impl Rng) -> [u8; N] {
    let mut out = [0u8; N];
    for b in out.iter_mut() {
        *b = rng.gen_range(b'A'..=b'Z');
    }
    out
}

fn n_fixed<const N: usize>(rng: &mut impl Rng) -> [u8; N] {
    let mut out = [0u8; N];
    for b in out.iter_mut() {
        *b = b'0' + rng.gen_range(0..10u8);
    }
    out
}

/// A zip code (4.3.2.7): 4 random digits followed by "11111".
fn zip(rng: &mut impl Rng) -> [u8; 9] {
    let mut z = *b"000011111";
    for b in z.iter_mut().take(4) {
        *b = b'0' + rng.gen_range(0..10u8);
    }
    z
}

/// I_DATA / S_DATA: an a-string of 26..=50 characters, 10% of them with
/// "ORIGINAL" at a random position (4.3.3.1).
fn data_with_original(rng: &mut impl Rng) -> Vec<u8> {
    let mut s = a_string(rng, 26, 50);
    if rng.gen_range(0..10) == 0 {
        let at = rng.gen_range(0..=s.len() - 8);
        s[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    s
}

fn address(rng: &mut impl Rng) -> Address {
    Address {
        street_1: a_string(rng, 10, 20),
        street_2: a_string(rng, 10, 20),
        city: a_string(rng, 10, 20),
        state: letters(rng),
        zip: zip(rng),
    }
}

/// Whether `hay` contains `needle`.
#[cfg(test)]
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------

fn wkey(tag: u8, w: u32, cap: usize) -> Key {
    let mut k = Vec::with_capacity(cap);
    k.push(shard(u64::from(w)));
    k.push(tag);
    k.extend_from_slice(&w.to_be_bytes());
    k
}

fn wdkey(tag: u8, w: u32, d: u8, cap: usize) -> Key {
    let mut k = wkey(tag, w, cap);
    k.push(d);
    k
}

/// Key of WAREHOUSE `w`: `[shard(w), 'W', w]` (6 bytes).
pub fn warehouse_key(w: u32) -> Key {
    wkey(TAG_WAREHOUSE, w, 6)
}

/// Key of WAREHOUSE_YTD `w`, the row holding W_YTD: `[shard(w), 'w', w]`
/// (6 bytes), in the warehouse's shard.
pub fn warehouse_ytd_key(w: u32) -> Key {
    wkey(TAG_WAREHOUSE_YTD, w, 6)
}

/// Key of DISTRICT `(w, d)`: `[shard(w), 'D', w, d]` (7 bytes).
pub fn district_key(w: u32, d: u8) -> Key {
    wdkey(TAG_DISTRICT, w, d, 7)
}

/// Key of DISTRICT_YTD `(w, d)`, the row holding D_YTD:
/// `[shard(w), 'd', w, d]` (7 bytes), in the warehouse's shard.
pub fn district_ytd_key(w: u32, d: u8) -> Key {
    wdkey(TAG_DISTRICT_YTD, w, d, 7)
}

/// Key of DISTRICT_NEXT_O_ID `(w, d)`, the row holding D_NEXT_O_ID:
/// `[shard(w), 'n', w, d]` (7 bytes), in the warehouse's shard.
pub fn district_next_o_id_key(w: u32, d: u8) -> Key {
    wdkey(TAG_DISTRICT_NEXT_O_ID, w, d, 7)
}

/// Key of CUSTOMER `(w, d, c)`: `[shard(w), 'C', w, d, c]` (11 bytes).
pub fn customer_key(w: u32, d: u8, c: u32) -> Key {
    let mut k = wdkey(TAG_CUSTOMER, w, d, 11);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// Common prefix of the name-index entries of the customers of `(w, d)`
/// named `last`: `[shard(w), 'X', w, d, last, 0]`.
pub fn customer_name_prefix(w: u32, d: u8, last: &[u8]) -> Key {
    let mut k = wdkey(TAG_CUSTOMER_NAME, w, d, 8 + last.len() + 22);
    k.extend_from_slice(last);
    k.push(0);
    k
}

/// Key of the name-index entry of customer `(w, d, c)`:
/// `[shard(w), 'X', w, d, last, 0, first, 0, c]`; its value is c_id
/// ([`encode_id`]). Within one name the entries sort by c_first, then c_id.
pub fn customer_name_key(w: u32, d: u8, last: &[u8], first: &[u8], c: u32) -> Key {
    let mut k = customer_name_prefix(w, d, last);
    k.extend_from_slice(first);
    k.push(0);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// Key of a HISTORY row: the paying district `(w, d)`, the customer
/// `(c_w, c_d, c)` and a unique id (`0` for the initial rows):
/// `[shard(w), 'H', w, d, c_w, c_d, c, uid:u64]` (24 bytes).
pub fn history_key(w: u32, d: u8, c_w: u32, c_d: u8, c: u32, uid: u64) -> Key {
    let mut k = wdkey(TAG_HISTORY, w, d, 24);
    k.extend_from_slice(&c_w.to_be_bytes());
    k.push(c_d);
    k.extend_from_slice(&c.to_be_bytes());
    k.extend_from_slice(&uid.to_be_bytes());
    k
}

/// Common prefix of the NEW_ORDER rows of `(w, d)`: `[shard(w), 'N', w, d]`.
pub fn new_order_prefix(w: u32, d: u8) -> Key {
    wdkey(TAG_NEW_ORDER, w, d, 11)
}

/// Key of NEW_ORDER `(w, d, o)`: `[shard(w), 'N', w, d, o]` (11 bytes);
/// its value is o_id ([`encode_id`]).
pub fn new_order_key(w: u32, d: u8, o: u32) -> Key {
    let mut k = new_order_prefix(w, d);
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// Key of ORDER `(w, d, o)`: `[shard(w), 'O', w, d, o]` (11 bytes).
pub fn order_key(w: u32, d: u8, o: u32) -> Key {
    let mut k = wdkey(TAG_ORDER, w, d, 11);
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// Common prefix of the orders-by-customer entries of customer `(w, d, c)`:
/// `[shard(w), 'Y', w, d, c]`.
pub fn order_customer_prefix(w: u32, d: u8, c: u32) -> Key {
    let mut k = wdkey(TAG_ORDER_CUSTOMER, w, d, 15);
    k.extend_from_slice(&c.to_be_bytes());
    k
}

/// Key of the orders-by-customer entry of order `o` of customer
/// `(w, d, c)`: `[shard(w), 'Y', w, d, c, !o]` (15 bytes), newest order
/// first; its value is o_id ([`encode_id`]).
pub fn order_customer_key(w: u32, d: u8, c: u32, o: u32) -> Key {
    let mut k = order_customer_prefix(w, d, c);
    k.extend_from_slice(&(!o).to_be_bytes());
    k
}

/// Common prefix of the ORDER_LINE rows of order `(w, d, o)`:
/// `[shard(w), 'L', w, d, o]`. The lines of orders `lo..hi` of a district
/// are the keys from `order_line_prefix(w, d, lo)` up to (excluding)
/// `order_line_prefix(w, d, hi)`.
pub fn order_line_prefix(w: u32, d: u8, o: u32) -> Key {
    let mut k = wdkey(TAG_ORDER_LINE, w, d, 12);
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// Key of ORDER_LINE `(w, d, o, n)`: `[shard(w), 'L', w, d, o, n]` (12 bytes).
pub fn order_line_key(w: u32, d: u8, o: u32, n: u8) -> Key {
    let mut k = order_line_prefix(w, d, o);
    k.push(n);
    k
}

/// Key of item `i` in warehouse `w`'s copy of ITEM: `[shard(w), 'I', w, i]`
/// (10 bytes).
pub fn item_key(w: u32, i: u32) -> Key {
    let mut k = wkey(TAG_ITEM, w, 10);
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Key of STOCK `(w, i)`: `[shard(w), 'S', w, i]` (10 bytes).
pub fn stock_key(w: u32, i: u32) -> Key {
    let mut k = wkey(TAG_STOCK, w, 10);
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// An index entry's or NEW_ORDER row's value: the id, big-endian.
pub fn encode_id(id: u32) -> Value {
    id.to_be_bytes().to_vec()
}

/// Decodes an id value; `None` unless exactly 4 bytes.
pub fn decode_id(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.try_into().ok()?))
}

/// The tables (and the two index tables), as told by a key's tag byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TpccTable {
    /// WAREHOUSE (without W_YTD).
    Warehouse,
    /// WAREHOUSE_YTD: W_YTD, vertically partitioned from WAREHOUSE.
    WarehouseYtd,
    /// DISTRICT (without D_YTD and D_NEXT_O_ID; read-only after the load).
    District,
    /// DISTRICT_YTD: D_YTD, vertically partitioned from DISTRICT.
    DistrictYtd,
    /// DISTRICT_NEXT_O_ID: D_NEXT_O_ID, vertically partitioned from
    /// DISTRICT.
    DistrictNextOId,
    /// CUSTOMER.
    Customer,
    /// HISTORY.
    History,
    /// NEW_ORDER.
    NewOrder,
    /// ORDER.
    Order,
    /// ORDER_LINE.
    OrderLine,
    /// ITEM (a copy per warehouse).
    Item,
    /// STOCK.
    Stock,
    /// The customer-by-last-name index.
    CustomerNameIndex,
    /// The orders-by-customer index.
    OrderCustomerIndex,
}

impl TpccTable {
    /// All tables, in the order of the module's key-layout table.
    pub const ALL: [TpccTable; 14] = [
        TpccTable::Warehouse,
        TpccTable::WarehouseYtd,
        TpccTable::District,
        TpccTable::DistrictYtd,
        TpccTable::DistrictNextOId,
        TpccTable::Customer,
        TpccTable::History,
        TpccTable::NewOrder,
        TpccTable::Order,
        TpccTable::OrderLine,
        TpccTable::Item,
        TpccTable::Stock,
        TpccTable::CustomerNameIndex,
        TpccTable::OrderCustomerIndex,
    ];

    /// The key tag byte.
    pub fn tag(self) -> u8 {
        match self {
            TpccTable::Warehouse => TAG_WAREHOUSE,
            TpccTable::WarehouseYtd => TAG_WAREHOUSE_YTD,
            TpccTable::District => TAG_DISTRICT,
            TpccTable::DistrictYtd => TAG_DISTRICT_YTD,
            TpccTable::DistrictNextOId => TAG_DISTRICT_NEXT_O_ID,
            TpccTable::Customer => TAG_CUSTOMER,
            TpccTable::History => TAG_HISTORY,
            TpccTable::NewOrder => TAG_NEW_ORDER,
            TpccTable::Order => TAG_ORDER,
            TpccTable::OrderLine => TAG_ORDER_LINE,
            TpccTable::Item => TAG_ITEM,
            TpccTable::Stock => TAG_STOCK,
            TpccTable::CustomerNameIndex => TAG_CUSTOMER_NAME,
            TpccTable::OrderCustomerIndex => TAG_ORDER_CUSTOMER,
        }
    }

    /// The spec's table name (`ORDER`, `ORDER_LINE`, …; the vertical
    /// partitions are `WAREHOUSE_YTD`, `DISTRICT_YTD` and
    /// `DISTRICT_NEXT_O_ID`, the indexes `CUSTOMER_NAME_IDX` and
    /// `ORDER_CUSTOMER_IDX`).
    pub fn name(self) -> &'static str {
        match self {
            TpccTable::Warehouse => "WAREHOUSE",
            TpccTable::WarehouseYtd => "WAREHOUSE_YTD",
            TpccTable::District => "DISTRICT",
            TpccTable::DistrictYtd => "DISTRICT_YTD",
            TpccTable::DistrictNextOId => "DISTRICT_NEXT_O_ID",
            TpccTable::Customer => "CUSTOMER",
            TpccTable::History => "HISTORY",
            TpccTable::NewOrder => "NEW_ORDER",
            TpccTable::Order => "ORDER",
            TpccTable::OrderLine => "ORDER_LINE",
            TpccTable::Item => "ITEM",
            TpccTable::Stock => "STOCK",
            TpccTable::CustomerNameIndex => "CUSTOMER_NAME_IDX",
            TpccTable::OrderCustomerIndex => "ORDER_CUSTOMER_IDX",
        }
    }

    /// The table a key belongs to, by its second byte; `None` for a key
    /// that is not a TPC-C key. Does not validate the rest of the key.
    pub fn of_key(key: &[u8]) -> Option<TpccTable> {
        let tag = *key.get(1)?;
        TpccTable::ALL.into_iter().find(|t| t.tag() == tag)
    }

    /// Position in [`TpccTable::ALL`] (for per-table counters).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A parsed key.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ParsedKey<'a> {
    Warehouse(u32),
    WarehouseYtd(u32),
    District(u32, u8),
    DistrictYtd(u32, u8),
    DistrictNextOId(u32, u8),
    Customer(u32, u8, u32),
    CustomerName {
        w: u32,
        d: u8,
        last: &'a [u8],
        first: &'a [u8],
        c: u32,
    },
    History {
        w: u32,
        d: u8,
        c_w: u32,
        c_d: u8,
        c: u32,
    },
    NewOrder(u32, u8, u32),
    Order(u32, u8, u32),
    OrderCustomer(u32, u8, u32, u32),
    OrderLine(u32, u8, u32, u8),
    Item(u32, u32),
    Stock(u32, u32),
}

/// Parses a TPC-C key, checking its shard byte and length.
fn parse_key(k: &[u8]) -> Option<ParsedKey<'_>> {
    let mut r = Reader::new(k);
    let s = r.u8()?;
    let tag = r.u8()?;
    let w = r.u32()?;
    if s != shard(u64::from(w)) {
        return None;
    }
    let parsed = match tag {
        TAG_WAREHOUSE => ParsedKey::Warehouse(w),
        TAG_WAREHOUSE_YTD => ParsedKey::WarehouseYtd(w),
        TAG_DISTRICT => ParsedKey::District(w, r.u8()?),
        TAG_DISTRICT_YTD => ParsedKey::DistrictYtd(w, r.u8()?),
        TAG_DISTRICT_NEXT_O_ID => ParsedKey::DistrictNextOId(w, r.u8()?),
        TAG_CUSTOMER => ParsedKey::Customer(w, r.u8()?, r.u32()?),
        TAG_CUSTOMER_NAME => {
            let d = r.u8()?;
            let last = r.until_zero()?;
            let first = r.until_zero()?;
            ParsedKey::CustomerName {
                w,
                d,
                last,
                first,
                c: r.u32()?,
            }
        }
        TAG_HISTORY => {
            let d = r.u8()?;
            let c_w = r.u32()?;
            let c_d = r.u8()?;
            let c = r.u32()?;
            let _uid = r.u64()?;
            ParsedKey::History { w, d, c_w, c_d, c }
        }
        TAG_NEW_ORDER => ParsedKey::NewOrder(w, r.u8()?, r.u32()?),
        TAG_ORDER => ParsedKey::Order(w, r.u8()?, r.u32()?),
        TAG_ORDER_CUSTOMER => {
            let d = r.u8()?;
            let c = r.u32()?;
            ParsedKey::OrderCustomer(w, d, c, !r.u32()?)
        }
        TAG_ORDER_LINE => ParsedKey::OrderLine(w, r.u8()?, r.u32()?, r.u8()?),
        TAG_ITEM => ParsedKey::Item(w, r.u32()?),
        TAG_STOCK => ParsedKey::Stock(w, r.u32()?),
        _ => return None,
    };
    r.end()?;
    Some(parsed)
}

// ---------------------------------------------------------------------------
// Row values
// ---------------------------------------------------------------------------

/// A cursor over an encoded value.
struct Reader<'a> {
    v: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(v: &'a [u8]) -> Self {
        Reader { v, at: 0 }
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.v.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.arr::<1>()?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.arr()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.arr()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.arr()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.arr()?))
    }

    fn str8(&mut self) -> Option<Vec<u8>> {
        let n = usize::from(self.u8()?);
        Some(self.bytes(n)?.to_vec())
    }

    fn str16(&mut self) -> Option<Vec<u8>> {
        let n = usize::from(self.u16()?);
        Some(self.bytes(n)?.to_vec())
    }

    /// Bytes up to the next 0, consuming the 0.
    fn until_zero(&mut self) -> Option<&'a [u8]> {
        let rest = self.v.get(self.at..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        let s = self.bytes(n)?;
        self.at += 1;
        Some(s)
    }

    fn end(&self) -> Option<()> {
        (self.at == self.v.len()).then_some(())
    }
}

/// Appends a string of at most 255 bytes with a 1-byte length (longer
/// strings are truncated).
fn put_str8(v: &mut Vec<u8>, s: &[u8]) {
    let n = s.len().min(255);
    v.push(n as u8);
    v.extend_from_slice(&s[..n]);
}

/// Appends a string of at most 65,535 bytes with a 2-byte length.
fn put_str16(v: &mut Vec<u8>, s: &[u8]) {
    let n = s.len().min(usize::from(u16::MAX));
    v.extend_from_slice(&(n as u16).to_be_bytes());
    v.extend_from_slice(&s[..n]);
}

/// The street address columns shared by WAREHOUSE, DISTRICT and CUSTOMER.
/// Layout: street_1, street_2, city (each a 1-byte length then the bytes) ·
/// state (2) · zip (9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// *_STREET_1, a-string of 10..=20.
    pub street_1: Vec<u8>,
    /// *_STREET_2, a-string of 10..=20.
    pub street_2: Vec<u8>,
    /// *_CITY, a-string of 10..=20.
    pub city: Vec<u8>,
    /// *_STATE, 2 letters.
    pub state: [u8; 2],
    /// *_ZIP, 4 digits and "11111".
    pub zip: [u8; 9],
}

impl Address {
    fn put(&self, v: &mut Vec<u8>) {
        put_str8(v, &self.street_1);
        put_str8(v, &self.street_2);
        put_str8(v, &self.city);
        v.extend_from_slice(&self.state);
        v.extend_from_slice(&self.zip);
    }

    fn read(r: &mut Reader<'_>) -> Option<Self> {
        Some(Address {
            street_1: r.str8()?,
            street_2: r.str8()?,
            city: r.str8()?,
            state: r.arr()?,
            zip: r.arr()?,
        })
    }
}

/// A WAREHOUSE row (its key holds W_ID) without W_YTD, which is in
/// [`WarehouseYtd`]. Layout: name (1-byte length) · [`Address`] · tax u16
/// (big-endian). ≈76 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warehouse {
    /// W_NAME, a-string of 6..=10.
    pub name: Vec<u8>,
    /// W_STREET_1 … W_ZIP.
    pub address: Address,
    /// W_TAX in 1/10,000 (0..=2000, i.e. 0.0000..=0.2000).
    pub tax: u16,
}

impl Warehouse {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(88);
        put_str8(&mut v, &self.name);
        self.address.put(&mut v);
        v.extend_from_slice(&self.tax.to_be_bytes());
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = Warehouse {
            name: r.str8()?,
            address: Address::read(&mut r)?,
            tax: r.u16()?,
        };
        r.end()?;
        Some(row)
    }
}

/// The codec of a row holding one integer (the rows split off WAREHOUSE
/// and DISTRICT): `LEN`, `encode` and `decode`, big-endian.
macro_rules! one_int_row {
    ($name:ident, $field:ident, $ty:ident) => {
        impl $name {
            /// Encoded size in bytes.
            pub const LEN: usize = std::mem::size_of::<$ty>();

            /// Encodes to the big-endian layout.
            pub fn encode(&self) -> Value {
                self.$field.to_be_bytes().to_vec()
            }

            /// Decodes; `None` unless exactly [`Self::LEN`] bytes.
            pub fn decode(v: &[u8]) -> Option<Self> {
                let mut r = Reader::new(v);
                let row = $name { $field: r.$ty()? };
                r.end()?;
                Some(row)
            }
        }
    };
}

/// A WAREHOUSE_YTD row (its key holds W_ID): the warehouse's W_YTD, split
/// from [`Warehouse`] so that PAYMENT's updates do not conflict with
/// NEW_ORDER's reads of W_TAX. Layout (8 bytes): ytd i64 (big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarehouseYtd {
    /// W_YTD, cents (initially 300,000.00).
    pub ytd: i64,
}

one_int_row!(WarehouseYtd, ytd, i64);

/// A DISTRICT row (its key holds D_W_ID, D_ID) without D_YTD, which is in
/// [`DistrictYtd`], and D_NEXT_O_ID, which is in [`DistrictNextOId`]; no
/// profile writes it after the load. Layout: name (1-byte length) ·
/// [`Address`] · tax u16 (big-endian). ≈70 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct District {
    /// D_NAME, a-string of 6..=10.
    pub name: Vec<u8>,
    /// D_STREET_1 … D_ZIP.
    pub address: Address,
    /// D_TAX in 1/10,000 (0..=2000).
    pub tax: u16,
}

impl District {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(88);
        put_str8(&mut v, &self.name);
        self.address.put(&mut v);
        v.extend_from_slice(&self.tax.to_be_bytes());
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = District {
            name: r.str8()?,
            address: Address::read(&mut r)?,
            tax: r.u16()?,
        };
        r.end()?;
        Some(row)
    }
}

/// A DISTRICT_YTD row (its key holds D_W_ID, D_ID): the district's D_YTD,
/// split from [`District`] so that PAYMENT's updates do not conflict with
/// NEW_ORDER's reads of D_TAX. Layout (8 bytes): ytd i64 (big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistrictYtd {
    /// D_YTD, cents (initially 30,000.00).
    pub ytd: i64,
}

one_int_row!(DistrictYtd, ytd, i64);

/// A DISTRICT_NEXT_O_ID row (its key holds D_W_ID, D_ID): the district's
/// D_NEXT_O_ID, split from [`District`] so that NEW_ORDER's increments do
/// not conflict with PAYMENT's reads of D_NAME. Layout (4 bytes):
/// next_o_id u32 (big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistrictNextOId {
    /// D_NEXT_O_ID, the id the district's next NEW_ORDER takes (initially
    /// 3,001).
    pub next_o_id: u32,
}

one_int_row!(DistrictNextOId, next_o_id, u32);

/// A CUSTOMER row (its key holds C_W_ID, C_D_ID, C_ID). Layout: first
/// (1-byte length) · middle (2) · last (1-byte length) · [`Address`] ·
/// phone (16) · since u64 · credit (2) · credit_lim i64 · discount u16 ·
/// balance i64 · ytd_payment i64 · payment_cnt u32 · delivery_cnt u32 ·
/// data (2-byte length). ≈550 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Customer {
    /// C_FIRST, a-string of 8..=16.
    pub first: Vec<u8>,
    /// C_MIDDLE, "OE".
    pub middle: [u8; 2],
    /// C_LAST, from [`last_name`].
    pub last: Vec<u8>,
    /// C_STREET_1 … C_ZIP.
    pub address: Address,
    /// C_PHONE, 16 digits.
    pub phone: [u8; 16],
    /// C_SINCE, seconds since the epoch.
    pub since: u64,
    /// C_CREDIT, "GC" or (10%) "BC".
    pub credit: [u8; 2],
    /// C_CREDIT_LIM, cents (50,000.00).
    pub credit_lim: i64,
    /// C_DISCOUNT in 1/10,000 (0..=5000).
    pub discount: u16,
    /// C_BALANCE, cents (initially −10.00).
    pub balance: i64,
    /// C_YTD_PAYMENT, cents (initially 10.00).
    pub ytd_payment: i64,
    /// C_PAYMENT_CNT (initially 1).
    pub payment_cnt: u32,
    /// C_DELIVERY_CNT (initially 0).
    pub delivery_cnt: u32,
    /// C_DATA, a-string of 300..=500 (at most [`C_DATA_MAX`]).
    pub data: Vec<u8>,
}

impl Customer {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(160 + self.data.len());
        put_str8(&mut v, &self.first);
        v.extend_from_slice(&self.middle);
        put_str8(&mut v, &self.last);
        self.address.put(&mut v);
        v.extend_from_slice(&self.phone);
        v.extend_from_slice(&self.since.to_be_bytes());
        v.extend_from_slice(&self.credit);
        v.extend_from_slice(&self.credit_lim.to_be_bytes());
        v.extend_from_slice(&self.discount.to_be_bytes());
        v.extend_from_slice(&self.balance.to_be_bytes());
        v.extend_from_slice(&self.ytd_payment.to_be_bytes());
        v.extend_from_slice(&self.payment_cnt.to_be_bytes());
        v.extend_from_slice(&self.delivery_cnt.to_be_bytes());
        put_str16(&mut v, &self.data);
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = Customer {
            first: r.str8()?,
            middle: r.arr()?,
            last: r.str8()?,
            address: Address::read(&mut r)?,
            phone: r.arr()?,
            since: r.u64()?,
            credit: r.arr()?,
            credit_lim: r.i64()?,
            discount: r.u16()?,
            balance: r.i64()?,
            ytd_payment: r.i64()?,
            payment_cnt: r.u32()?,
            delivery_cnt: r.u32()?,
            data: r.str16()?,
        };
        r.end()?;
        Some(row)
    }
}

/// A HISTORY row (its key holds H_W_ID, H_D_ID, H_C_W_ID, H_C_D_ID, H_C_ID).
/// Layout: date u64 · amount u32 · data (1-byte length). ≈31 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    /// H_DATE, seconds since the epoch.
    pub date: u64,
    /// H_AMOUNT, cents (10.00 initially; 1.00..=5,000.00 from PAYMENT).
    pub amount: u32,
    /// H_DATA: an a-string of 12..=24 initially; W_NAME, 4 spaces, D_NAME
    /// from PAYMENT.
    pub data: Vec<u8>,
}

impl History {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(13 + self.data.len());
        v.extend_from_slice(&self.date.to_be_bytes());
        v.extend_from_slice(&self.amount.to_be_bytes());
        put_str8(&mut v, &self.data);
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = History {
            date: r.u64()?,
            amount: r.u32()?,
            data: r.str8()?,
        };
        r.end()?;
        Some(row)
    }
}

/// An ORDER row (its key holds O_W_ID, O_D_ID, O_ID). Layout (15 bytes):
/// c_id u32 · entry_d u64 · carrier_id u8 (0 = NULL) · ol_cnt u8 ·
/// all_local u8 (0/1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// O_C_ID.
    pub c_id: u32,
    /// O_ENTRY_D, seconds since the epoch.
    pub entry_d: u64,
    /// O_CARRIER_ID in 1..=10, or 0 for NULL (not yet delivered).
    pub carrier_id: u8,
    /// O_OL_CNT, 5..=15.
    pub ol_cnt: u8,
    /// O_ALL_LOCAL: every line is supplied by the home warehouse.
    pub all_local: bool,
}

impl Order {
    /// Encoded size in bytes.
    pub const LEN: usize = 15;

    /// Encodes to the 15-byte layout.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.c_id.to_be_bytes());
        v.extend_from_slice(&self.entry_d.to_be_bytes());
        v.push(self.carrier_id);
        v.push(self.ol_cnt);
        v.push(u8::from(self.all_local));
        v
    }

    /// Decodes; `None` unless exactly [`Order::LEN`] bytes with all_local
    /// 0 or 1.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = Order {
            c_id: r.u32()?,
            entry_d: r.u64()?,
            carrier_id: r.u8()?,
            ol_cnt: r.u8()?,
            all_local: match r.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            },
        };
        r.end()?;
        Some(row)
    }
}

/// An ORDER_LINE row (its key holds OL_W_ID, OL_D_ID, OL_O_ID, OL_NUMBER).
/// Layout (45 bytes): i_id u32 · supply_w_id u32 · delivery_d u64 (0 =
/// NULL) · quantity u8 · amount u32 · dist_info (24).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderLine {
    /// OL_I_ID.
    pub i_id: u32,
    /// OL_SUPPLY_W_ID.
    pub supply_w_id: u32,
    /// OL_DELIVERY_D, seconds since the epoch, or 0 for NULL.
    pub delivery_d: u64,
    /// OL_QUANTITY (5 initially; 1..=10 from NEW_ORDER).
    pub quantity: u8,
    /// OL_AMOUNT, cents.
    pub amount: u32,
    /// OL_DIST_INFO, 24 characters.
    pub dist_info: [u8; 24],
}

impl OrderLine {
    /// Encoded size in bytes.
    pub const LEN: usize = 45;

    /// Encodes to the 45-byte layout.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&self.i_id.to_be_bytes());
        v.extend_from_slice(&self.supply_w_id.to_be_bytes());
        v.extend_from_slice(&self.delivery_d.to_be_bytes());
        v.push(self.quantity);
        v.extend_from_slice(&self.amount.to_be_bytes());
        v.extend_from_slice(&self.dist_info);
        v
    }

    /// Decodes; `None` unless exactly [`OrderLine::LEN`] bytes.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = OrderLine {
            i_id: r.u32()?,
            supply_w_id: r.u32()?,
            delivery_d: r.u64()?,
            quantity: r.u8()?,
            amount: r.u32()?,
            dist_info: r.arr()?,
        };
        r.end()?;
        Some(row)
    }
}

/// An ITEM row (its key holds the warehouse copy and I_ID). Layout: im_id
/// u32 · name (1-byte length) · price u32 · data (1-byte length). ≈67 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// I_IM_ID, 1..=10,000.
    pub im_id: u32,
    /// I_NAME, a-string of 14..=24.
    pub name: Vec<u8>,
    /// I_PRICE, cents (1.00..=100.00).
    pub price: u32,
    /// I_DATA, a-string of 26..=50, 10% containing "ORIGINAL".
    pub data: Vec<u8>,
}

impl Item {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(10 + self.name.len() + self.data.len());
        v.extend_from_slice(&self.im_id.to_be_bytes());
        put_str8(&mut v, &self.name);
        v.extend_from_slice(&self.price.to_be_bytes());
        put_str8(&mut v, &self.data);
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let row = Item {
            im_id: r.u32()?,
            name: r.str8()?,
            price: r.u32()?,
            data: r.str8()?,
        };
        r.end()?;
        Some(row)
    }
}

/// A STOCK row (its key holds S_W_ID, S_I_ID). Layout: quantity u16 ·
/// dist_01..dist_10 (10 × 24) · ytd u32 · order_cnt u32 · remote_cnt u32 ·
/// data (1-byte length). ≈293 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stock {
    /// S_QUANTITY, 10..=100 initially.
    pub quantity: u16,
    /// S_DIST_01..S_DIST_10, 24 characters each; NEW_ORDER copies
    /// `dist[d_id − 1]` into OL_DIST_INFO.
    pub dist: [[u8; 24]; 10],
    /// S_YTD (0 initially).
    pub ytd: u32,
    /// S_ORDER_CNT (0 initially).
    pub order_cnt: u32,
    /// S_REMOTE_CNT (0 initially).
    pub remote_cnt: u32,
    /// S_DATA, a-string of 26..=50, 10% containing "ORIGINAL".
    pub data: Vec<u8>,
}

impl Stock {
    /// Encodes to the layout above.
    pub fn encode(&self) -> Value {
        let mut v = Vec::with_capacity(256 + self.data.len());
        v.extend_from_slice(&self.quantity.to_be_bytes());
        for d in &self.dist {
            v.extend_from_slice(d);
        }
        v.extend_from_slice(&self.ytd.to_be_bytes());
        v.extend_from_slice(&self.order_cnt.to_be_bytes());
        v.extend_from_slice(&self.remote_cnt.to_be_bytes());
        put_str8(&mut v, &self.data);
        v
    }

    /// Decodes; `None` unless `v` is exactly one encoded row.
    pub fn decode(v: &[u8]) -> Option<Self> {
        let mut r = Reader::new(v);
        let quantity = r.u16()?;
        let mut dist = [[0u8; 24]; 10];
        for d in dist.iter_mut() {
            *d = r.arr()?;
        }
        let row = Stock {
            quantity,
            dist,
            ytd: r.u32()?,
            order_cnt: r.u32()?,
            remote_cnt: r.u32()?,
            data: r.str8()?,
        };
        r.end()?;
        Some(row)
    }
}

// ---------------------------------------------------------------------------
// Population (clause 4.3)
// ---------------------------------------------------------------------------

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One RNG per generated unit (row group), so that any warehouse range is
/// generated identically on its own.
fn unit_rng(seed: u64, tag: u8, w: u32, d: u8, id: u32) -> SmallRng {
    let mut x = splitmix(seed ^ u64::from(tag));
    x = splitmix(x ^ u64::from(w));
    x = splitmix(x ^ (u64::from(d) << 32 | u64::from(id)));
    SmallRng::seed_from_u64(x)
}

/// Item `i` as every warehouse's copy holds it (depends on the seed and
/// i_id only).
fn gen_item(seed: u64, i: u32) -> Item {
    let mut rng = unit_rng(seed, TAG_ITEM, 0, 0, i);
    Item {
        im_id: rng.gen_range(1..=10_000),
        name: a_string(&mut rng, 14, 24),
        price: rng.gen_range(100..=10_000),
        data: data_with_original(&mut rng),
    }
}

fn gen_stock(seed: u64, w: u32, i: u32) -> Stock {
    let mut rng = unit_rng(seed, TAG_STOCK, w, 0, i);
    let quantity = rng.gen_range(10..=100);
    let mut dist = [[0u8; 24]; 10];
    for d in dist.iter_mut() {
        *d = a_fixed(&mut rng);
    }
    Stock {
        quantity,
        dist,
        ytd: 0,
        order_cnt: 0,
        remote_cnt: 0,
        data: data_with_original(&mut rng),
    }
}

/// Where a [`TpccPopulation`] is within the current warehouse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The WAREHOUSE, WAREHOUSE_YTD, DISTRICT, DISTRICT_YTD and
    /// DISTRICT_NEXT_O_ID rows.
    Warehouse,
    /// ITEM and STOCK of item `i`.
    Items(u32),
    /// Customer `c` of district `d` (CUSTOMER, its name-index entry and
    /// its HISTORY row).
    Customers(u8, u32),
    /// Initial order `o` of district `d` (ORDER, its index entry, its
    /// NEW_ORDER row if undelivered, its ORDER_LINEs).
    Orders(u8, u32),
}

/// Iterator over the initial database; see [`population`].
#[derive(Debug)]
pub struct TpccPopulation {
    dims: Dims,
    seed: u64,
    w: u64,
    last_w: u64,
    phase: Phase,
    /// O_C_ID of each initial order of the current district (a random
    /// permutation of the customer ids, 4.3.3.1).
    perm: Vec<u32>,
    pending: VecDeque<(Key, Value)>,
}

impl TpccPopulation {
    fn new(dims: Dims, seed: u64, ws: RangeInclusive<u32>) -> Self {
        TpccPopulation {
            dims,
            seed,
            w: u64::from((*ws.start()).max(1)),
            last_w: u64::from(*ws.end()),
            phase: Phase::Warehouse,
            perm: Vec::new(),
            pending: VecDeque::new(),
        }
    }

    fn push(&mut self, k: Key, v: Value) {
        self.pending.push_back((k, v));
    }

    fn gen_warehouse(&mut self, w: u32) {
        let mut rng = unit_rng(self.seed, TAG_WAREHOUSE, w, 0, 0);
        let wh = Warehouse {
            name: a_string(&mut rng, 6, 10),
            address: address(&mut rng),
            tax: rng.gen_range(0..=2000),
        };
        self.push(warehouse_key(w), wh.encode());
        let w_ytd = WarehouseYtd {
            ytd: self.dims.d_ytd() * i64::from(DISTRICTS),
        };
        self.push(warehouse_ytd_key(w), w_ytd.encode());
        for d in 1..=DISTRICTS {
            let mut rng = unit_rng(self.seed, TAG_DISTRICT, w, d, 0);
            let di = District {
                name: a_string(&mut rng, 6, 10),
                address: address(&mut rng),
                tax: rng.gen_range(0..=2000),
            };
            self.push(district_key(w, d), di.encode());
            let d_ytd = DistrictYtd {
                ytd: self.dims.d_ytd(),
            };
            self.push(district_ytd_key(w, d), d_ytd.encode());
            let next = DistrictNextOId {
                next_o_id: self.dims.customers + 1,
            };
            self.push(district_next_o_id_key(w, d), next.encode());
        }
    }

    fn gen_customer(&mut self, w: u32, d: u8, c: u32) {
        let mut rng = unit_rng(self.seed, TAG_CUSTOMER, w, d, c);
        let num = if c <= self.dims.last_names {
            c - 1
        } else {
            nurand(A_C_LAST, C_LAST_LOAD, 0, self.dims.last_names - 1, &mut rng)
        };
        let cu = Customer {
            first: a_string(&mut rng, 8, 16),
            middle: *b"OE",
            last: last_name(num),
            address: address(&mut rng),
            phone: n_fixed(&mut rng),
            since: LOAD_TIME,
            credit: if rng.gen_range(0..10) == 0 {
                *b"BC"
            } else {
                *b"GC"
            },
            credit_lim: CREDIT_LIM,
            discount: rng.gen_range(0..=5000),
            balance: INITIAL_BALANCE,
            ytd_payment: i64::from(INITIAL_PAYMENT),
            payment_cnt: 1,
            delivery_cnt: 0,
            data: a_string(&mut rng, 300, 500),
        };
        let h = History {
            date: LOAD_TIME,
            amount: INITIAL_PAYMENT,
            data: a_string(&mut rng, 12, 24),
        };
        self.push(
            customer_name_key(w, d, &cu.last, &cu.first, c),
            encode_id(c),
        );
        self.push(customer_key(w, d, c), cu.encode());
        self.push(history_key(w, d, w, d, c, 0), h.encode());
    }

    fn gen_order(&mut self, w: u32, d: u8, o: u32) {
        let mut rng = unit_rng(self.seed, TAG_ORDER, w, d, o);
        let c = self
            .perm
            .get(o as usize - 1)
            .copied()
            .unwrap_or(o.min(self.dims.customers));
        let delivered = o < self.dims.first_new_order();
        let ord = Order {
            c_id: c,
            entry_d: LOAD_TIME,
            carrier_id: if delivered { rng.gen_range(1..=10) } else { 0 },
            ol_cnt: rng.gen_range(MIN_OL_CNT..=MAX_OL_CNT),
            all_local: true,
        };
        self.push(order_key(w, d, o), ord.encode());
        self.push(order_customer_key(w, d, c, o), encode_id(o));
        if !delivered {
            self.push(new_order_key(w, d, o), encode_id(o));
        }
        for n in 1..=ord.ol_cnt {
            let ol = OrderLine {
                i_id: rng.gen_range(1..=self.dims.items),
                supply_w_id: w,
                delivery_d: if delivered { LOAD_TIME } else { 0 },
                quantity: 5,
                amount: if delivered {
                    0
                } else {
                    rng.gen_range(1..=999_999)
                },
                dist_info: a_fixed(&mut rng),
            };
            self.push(order_line_key(w, d, o, n), ol.encode());
        }
    }

    /// Generates the next unit into `pending`; `false` when done.
    fn step(&mut self) -> bool {
        if self.w > self.last_w {
            return false;
        }
        let Ok(w) = u32::try_from(self.w) else {
            return false;
        };
        match self.phase {
            Phase::Warehouse => {
                self.gen_warehouse(w);
                self.phase = Phase::Items(1);
            }
            Phase::Items(i) if i > self.dims.items => self.phase = Phase::Customers(1, 1),
            Phase::Items(i) => {
                let item = gen_item(self.seed, i);
                self.push(item_key(w, i), item.encode());
                let st = gen_stock(self.seed, w, i);
                self.push(stock_key(w, i), st.encode());
                self.phase = Phase::Items(i + 1);
            }
            Phase::Customers(d, c) if c > self.dims.customers => {
                let mut rng = unit_rng(self.seed, b'P', w, d, 0);
                self.perm = (1..=self.dims.customers).collect();
                self.perm.shuffle(&mut rng);
                self.phase = Phase::Orders(d, 1);
            }
            Phase::Customers(d, c) => {
                self.gen_customer(w, d, c);
                self.phase = Phase::Customers(d, c + 1);
            }
            Phase::Orders(d, o) if o > self.dims.customers => {
                if d < DISTRICTS {
                    self.phase = Phase::Customers(d + 1, 1);
                } else {
                    self.w += 1;
                    self.phase = Phase::Warehouse;
                }
            }
            Phase::Orders(d, o) => {
                self.gen_order(w, d, o);
                self.phase = Phase::Orders(d, o + 1);
            }
        }
        true
    }
}

impl Iterator for TpccPopulation {
    type Item = (Key, Value);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(row) = self.pending.pop_front() {
                return Some(row);
            }
            if !self.step() {
                return None;
            }
        }
    }
}

/// All rows of the initial database (clause 4.3.3.1) for warehouses
/// `1..=W`, at the spec's sizes, streamed warehouse by warehouse without
/// materializing them: per warehouse its WAREHOUSE, WAREHOUSE_YTD,
/// DISTRICT, DISTRICT_YTD and DISTRICT_NEXT_O_ID (3,001) rows, its ITEM
/// copy and STOCK, then per
/// district its customers (CUSTOMER, name index entry, HISTORY) and initial
/// orders (ORDER, orders-by-customer entry, NEW_ORDER for the last 900,
/// ORDER_LINEs). Not in key order. Deterministic for `seed`.
pub fn population(cfg: &TpccConfig, seed: u64) -> TpccPopulation {
    population_warehouses(seed, 1..=cfg.w())
}

/// The rows of warehouses `ws` only (each with its own ITEM copy), exactly
/// as [`population`] with the same seed generates them, so loaders can
/// split the work by warehouse. Warehouse id 0 is skipped.
pub fn population_warehouses(seed: u64, ws: RangeInclusive<u32>) -> TpccPopulation {
    TpccPopulation::new(Dims::SPEC, seed, ws)
}

/// Expected number of rows [`population`] yields: per warehouse 1
/// WAREHOUSE + 1 WAREHOUSE_YTD + 10 DISTRICT + 10 DISTRICT_YTD + 10
/// DISTRICT_NEXT_O_ID + 100,000 ITEM + 100,000 STOCK + 30,000 each of
/// CUSTOMER, name index, HISTORY, ORDER and orders-by-customer index +
/// 9,000 NEW_ORDER + 300,000 ORDER_LINE on average = 659,032.
pub fn population_count_hint(cfg: &TpccConfig) -> u64 {
    u64::from(cfg.w()) * count_hint_per_warehouse(&Dims::SPEC)
}

fn count_hint_per_warehouse(dims: &Dims) -> u64 {
    let per_district = u64::from(dims.customers) * 5
        + u64::from(dims.new_orders)
        + u64::from(dims.customers) * u64::from(MIN_OL_CNT + MAX_OL_CNT) / 2;
    // WAREHOUSE and WAREHOUSE_YTD; per district DISTRICT, DISTRICT_YTD and
    // DISTRICT_NEXT_O_ID.
    2 + u64::from(DISTRICTS) * (3 + per_district) + 2 * u64::from(dims.items)
}

// ---------------------------------------------------------------------------
// Transaction inputs (clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1, 5.2.3)
// ---------------------------------------------------------------------------

/// The five TPC-C transaction profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TpccKind {
    /// Enter an order of 5–15 lines (45%, 2.4).
    NewOrder,
    /// Record a customer's payment (43%, 2.5).
    Payment,
    /// Read a customer's newest order (4%, 2.6, read-only).
    OrderStatus,
    /// Deliver the oldest undelivered order of each district (4%, 2.7).
    Delivery,
    /// Count recently sold items with low stock (4%, 2.8, read-only).
    StockLevel,
}

impl TpccKind {
    /// All kinds, in the spec's order.
    pub const ALL: [TpccKind; 5] = [
        TpccKind::NewOrder,
        TpccKind::Payment,
        TpccKind::OrderStatus,
        TpccKind::Delivery,
        TpccKind::StockLevel,
    ];

    /// The spec's name, e.g. `NEW_ORDER`.
    pub fn name(self) -> &'static str {
        match self {
            TpccKind::NewOrder => "NEW_ORDER",
            TpccKind::Payment => "PAYMENT",
            TpccKind::OrderStatus => "ORDER_STATUS",
            TpccKind::Delivery => "DELIVERY",
            TpccKind::StockLevel => "STOCK_LEVEL",
        }
    }

    /// Whether the profile only reads (ORDER_STATUS and STOCK_LEVEL).
    pub fn is_read_only(self) -> bool {
        matches!(self, TpccKind::OrderStatus | TpccKind::StockLevel)
    }

    /// Share of the mix, in percent (45/43/4/4/4; 5.2.3 sets the minimums
    /// of the last four, NEW_ORDER takes the rest).
    pub fn share_percent(self) -> u32 {
        match self {
            TpccKind::NewOrder => 45,
            TpccKind::Payment => 43,
            TpccKind::OrderStatus | TpccKind::Delivery | TpccKind::StockLevel => 4,
        }
    }

    /// Position in [`TpccKind::ALL`] (for per-kind counters).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How PAYMENT and ORDER_STATUS select their customer (2.5.1.2, 2.6.1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomerSel {
    /// By C_ID (40%): NURand(1023, 1, 3000).
    ById(u32),
    /// By C_LAST (60%): the ⌈n/2⌉-th of the n customers with that name in
    /// C_FIRST order; the name is [`last_name`] of NURand(255, 0, 999)
    /// with [`C_LAST_RUN`].
    ByLastName(Vec<u8>),
}

/// One NEW_ORDER line's input (2.4.1.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderLineInput {
    /// OL_I_ID: NURand(8191, 1, 100000), or [`UNUSED_I_ID`] for the last
    /// line of a rolled-back order.
    pub i_id: u32,
    /// OL_SUPPLY_W_ID: the home warehouse, or (1% when W > 1) another one.
    pub supply_w_id: u32,
    /// OL_QUANTITY, 1..=10.
    pub quantity: u8,
}

/// A profile's inputs beyond the home warehouse and district.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TpccInput {
    /// NEW_ORDER.
    NewOrder {
        /// C_ID, NURand(1023, 1, 3000).
        c_id: u32,
        /// The 5..=15 order lines (OL_NUMBER = position + 1).
        lines: Vec<OrderLineInput>,
    },
    /// PAYMENT.
    Payment {
        /// C_W_ID: the home warehouse (85%) or another one (15%, W > 1).
        c_w_id: u32,
        /// C_D_ID: the home district (85%) or a random one.
        c_d_id: u8,
        /// The customer.
        customer: CustomerSel,
        /// H_AMOUNT, cents, 100..=500,000 (1.00..=5,000.00).
        h_amount: u32,
        /// The HISTORY row's unique key id (top bit set).
        h_uid: u64,
    },
    /// ORDER_STATUS (the customer is in the home warehouse and district).
    OrderStatus {
        /// The customer.
        customer: CustomerSel,
    },
    /// DELIVERY (all 10 districts of the home warehouse).
    Delivery {
        /// O_CARRIER_ID, 1..=10.
        carrier_id: u8,
    },
    /// STOCK_LEVEL.
    StockLevel {
        /// The threshold, 10..=20.
        threshold: u16,
    },
}

/// One transaction's input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpccTxn {
    /// W_ID, the home warehouse (the terminal's, 1..=W).
    pub w_id: u32,
    /// D_ID, 1..=10 (0 and unused for DELIVERY).
    pub d_id: u8,
    /// The current date, seconds since the epoch (O_ENTRY_D, H_DATE,
    /// OL_DELIVERY_D); [`next_txn`] sets [`RUN_TIME`], a driver may set the
    /// wall clock. Must be nonzero (0 is NULL; [`execute`] uses at least 1).
    pub now: u64,
    /// The profile and its inputs.
    pub input: TpccInput,
}

impl TpccTxn {
    /// The profile.
    pub fn kind(&self) -> TpccKind {
        match self.input {
            TpccInput::NewOrder { .. } => TpccKind::NewOrder,
            TpccInput::Payment { .. } => TpccKind::Payment,
            TpccInput::OrderStatus { .. } => TpccKind::OrderStatus,
            TpccInput::Delivery { .. } => TpccKind::Delivery,
            TpccInput::StockLevel { .. } => TpccKind::StockLevel,
        }
    }

    /// Whether this is one of the 1% NEW_ORDERs drawn to roll back (its
    /// last item id is unused).
    pub fn is_rollback(&self) -> bool {
        match &self.input {
            TpccInput::NewOrder { lines, .. } => lines.last().is_some_and(|l| l.i_id > ITEMS),
            _ => false,
        }
    }
}

/// Picks a kind by the 45/43/4/4/4 mix.
pub fn next_kind(rng: &mut impl Rng) -> TpccKind {
    let mut x = rng.gen_range(0..100u32);
    for kind in TpccKind::ALL {
        let share = kind.share_percent();
        if x < share {
            return kind;
        }
        x -= share;
    }
    TpccKind::StockLevel
}

/// A warehouse other than `home`, uniformly, or `home` if W = 1.
fn other_warehouse(home: u32, warehouses: u32, rng: &mut impl Rng) -> u32 {
    if warehouses <= 1 {
        return home;
    }
    let r = rng.gen_range(1..warehouses);
    if r >= home {
        r + 1
    } else {
        r
    }
}

fn draw_customer(dims: &Dims, rng: &mut impl Rng) -> CustomerSel {
    if rng.gen_range(1..=100u32) <= 60 {
        CustomerSel::ByLastName(last_name(nurand(
            A_C_LAST,
            C_LAST_RUN,
            0,
            dims.last_names - 1,
            rng,
        )))
    } else {
        CustomerSel::ById(nurand(A_C_ID, C_C_ID, 1, dims.customers, rng))
    }
}

/// Draws the next transaction of a terminal whose home warehouse is
/// `home_w` (clamped into `1..=W`): a kind by the mix and its inputs per
/// clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1 and 2.8.1 — non-uniform customer and
/// item ids, 1% rolled-back NEW_ORDERs, 1% remote order lines and 15%
/// remote PAYMENT customers (when W > 1), 60% selection by last name.
pub fn next_txn(cfg: &TpccConfig, home_w: u32, rng: &mut impl Rng) -> TpccTxn {
    next_txn_in(&Dims::SPEC, cfg.w(), home_w, rng)
}

fn next_txn_in(dims: &Dims, warehouses: u32, home_w: u32, rng: &mut impl Rng) -> TpccTxn {
    let warehouses = warehouses.max(1);
    let w_id = home_w.clamp(1, warehouses);
    let kind = next_kind(rng);
    let mut d_id = rng.gen_range(1..=DISTRICTS);
    let input = match kind {
        TpccKind::NewOrder => {
            let c_id = nurand(A_C_ID, C_C_ID, 1, dims.customers, rng);
            let ol_cnt = rng.gen_range(MIN_OL_CNT..=MAX_OL_CNT);
            let rollback = rng.gen_range(1..=100u32) == 1;
            let lines = (1..=ol_cnt)
                .map(|n| {
                    let i_id = if rollback && n == ol_cnt {
                        UNUSED_I_ID
                    } else {
                        nurand(A_OL_I_ID, C_OL_I_ID, 1, dims.items, rng)
                    };
                    let supply_w_id = if warehouses > 1 && rng.gen_range(1..=100u32) == 1 {
                        other_warehouse(w_id, warehouses, rng)
                    } else {
                        w_id
                    };
                    OrderLineInput {
                        i_id,
                        supply_w_id,
                        quantity: rng.gen_range(1..=10),
                    }
                })
                .collect();
            TpccInput::NewOrder { c_id, lines }
        }
        TpccKind::Payment => {
            let (c_w_id, c_d_id) = if rng.gen_range(1..=100u32) <= 85 {
                (w_id, d_id)
            } else {
                (
                    other_warehouse(w_id, warehouses, rng),
                    rng.gen_range(1..=DISTRICTS),
                )
            };
            TpccInput::Payment {
                c_w_id,
                c_d_id,
                customer: draw_customer(dims, rng),
                h_amount: rng.gen_range(100..=500_000),
                h_uid: rng.gen::<u64>() | (1 << 63),
            }
        }
        TpccKind::OrderStatus => TpccInput::OrderStatus {
            customer: draw_customer(dims, rng),
        },
        TpccKind::Delivery => {
            d_id = 0;
            TpccInput::Delivery {
                carrier_id: rng.gen_range(1..=10),
            }
        }
        TpccKind::StockLevel => TpccInput::StockLevel {
            threshold: rng.gen_range(10..=20),
        },
    };
    TpccTxn {
        w_id,
        d_id,
        now: RUN_TIME,
        input,
    }
}

// ---------------------------------------------------------------------------
// Transaction profiles (clauses 2.4.2, 2.5.2, 2.6.2, 2.7.4, 2.8.2)
// ---------------------------------------------------------------------------

/// How a profile run by [`execute`] ended (when no operation failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The profile completed; the driver commits the transaction.
    Commit,
    /// A NEW_ORDER found its unused item id (the spec's 1% rollbacks,
    /// 2.4.2.3): the driver must **abort** the transaction. It counts as a
    /// completed, rolled-back NEW_ORDER, not as an error.
    RolledBack,
    /// A row that must exist was absent or did not decode (named by the
    /// string, e.g. `"DISTRICT"`): a bug or a corrupt database. The driver
    /// must abort the transaction and report it.
    Missing(&'static str),
}

impl Outcome {
    /// Whether the driver should commit (only [`Outcome::Commit`]).
    pub fn should_commit(self) -> bool {
        self == Outcome::Commit
    }
}

/// Returns the value, or ends the profile with `Outcome::Missing`.
macro_rules! need {
    ($e:expr, $what:expr) => {
        match $e {
            Some(x) => x,
            None => return Ok(Outcome::Missing($what)),
        }
    };
}

async fn read<T: TxnOps, R>(
    t: &mut T,
    key: &[u8],
    decode: fn(&[u8]) -> Option<R>,
) -> Result<Option<R>, T::Error> {
    Ok(t.get(key).await?.and_then(|v| decode(&v)))
}

/// The rows with keys starting with `prefix`, at most `limit`.
async fn scan_prefix<T: TxnOps>(
    t: &mut T,
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<(Key, Value)>, T::Error> {
    match prefix_end(prefix) {
        Some(end) => t.scan(prefix, &end, limit).await,
        None => Ok(Vec::new()),
    }
}

/// The customer's id, given or selected by last name (the ⌈n/2⌉-th in
/// C_FIRST order of the n matches, one scan of the name index); `None` if
/// no customer has that name.
async fn customer_id<T: TxnOps>(
    t: &mut T,
    w: u32,
    d: u8,
    sel: &CustomerSel,
) -> Result<Option<u32>, T::Error> {
    match sel {
        CustomerSel::ById(c) => Ok(Some(*c)),
        CustomerSel::ByLastName(last) => {
            let prefix = customer_name_prefix(w, d, last);
            let rows = scan_prefix(t, &prefix, CUSTOMERS_PER_DISTRICT as usize).await?;
            Ok(rows
                .get(rows.len().saturating_sub(1) / 2)
                .and_then(|(_, v)| decode_id(v)))
        }
    }
}

/// The customer's id and row, selected by id or by last name
/// ([`customer_id`]); `None` if absent.
async fn select_customer<T: TxnOps>(
    t: &mut T,
    w: u32,
    d: u8,
    sel: &CustomerSel,
) -> Result<Option<(u32, Customer)>, T::Error> {
    let Some(c_id) = customer_id(t, w, d, sel).await? else {
        return Ok(None);
    };
    Ok(read(t, &customer_key(w, d, c_id), Customer::decode)
        .await?
        .map(|c| (c_id, c)))
}

/// The ORDER_LINE rows of order `(w, d, o)`, decoded with their numbers;
/// `None` if one does not decode.
async fn order_lines<T: TxnOps>(
    t: &mut T,
    w: u32,
    d: u8,
    o: u32,
) -> Result<Option<Vec<(Key, OrderLine)>>, T::Error> {
    let rows = scan_prefix(t, &order_line_prefix(w, d, o), usize::from(MAX_OL_CNT)).await?;
    Ok(rows
        .into_iter()
        .map(|(k, v)| OrderLine::decode(&v).map(|ol| (k, ol)))
        .collect())
}

/// Runs `txn`'s profile in the open transaction `t` (the caller begins it,
/// and commits or aborts it as the [`Outcome`] says). An `Err` from `t` is
/// returned at once.
///
/// - NEW_ORDER (2.4.2): read WAREHOUSE (W_TAX); read DISTRICT (D_TAX),
///   never writing it; read and increment D_NEXT_O_ID in
///   DISTRICT_NEXT_O_ID; read CUSTOMER (never the YTD rows); insert ORDER
///   (O_ALL_LOCAL per the supply warehouses), NEW_ORDER and the
///   orders-by-customer entry; for each line in order: read ITEM from the
///   home warehouse's copy — absent with an id beyond [`ITEMS`] ends the
///   profile with [`Outcome::RolledBack`] — read and update STOCK of the
///   supply warehouse (S_QUANTITY decreased by OL_QUANTITY if that leaves
///   at least 10, else increased by 91 − OL_QUANTITY; S_YTD, S_ORDER_CNT,
///   and S_REMOTE_CNT if remote) and insert the ORDER_LINE (OL_AMOUNT =
///   OL_QUANTITY × I_PRICE, OL_DIST_INFO = S_DIST of the district).
/// - PAYMENT (2.5.2): add H_AMOUNT to W_YTD and D_YTD (read and write
///   WAREHOUSE_YTD and DISTRICT_YTD); read, but not write, WAREHOUSE and
///   DISTRICT for W_NAME and D_NAME (never DISTRICT_NEXT_O_ID); select the
///   customer (in `(c_w_id, c_d_id)`); subtract it from C_BALANCE, add it to
///   C_YTD_PAYMENT, increment C_PAYMENT_CNT; for "BC" credit prepend
///   `"c_id c_d_id c_w_id d_id w_id amount "` to C_DATA (kept ≤ 500);
///   insert HISTORY with H_DATA = W_NAME, 4 spaces, D_NAME.
/// - ORDER_STATUS (2.6.2): select the customer; find the newest order by a
///   limit-1 scan of the orders-by-customer index; read the ORDER and scan
///   its ORDER_LINEs.
/// - DELIVERY (2.7.4), for each district 1..=10: the oldest NEW_ORDER by a
///   limit-1 scan (none: skip the district); delete it; set the ORDER's
///   O_CARRIER_ID; set OL_DELIVERY_D on its lines and sum OL_AMOUNT; add the
///   sum to the customer's C_BALANCE and increment C_DELIVERY_CNT.
/// - STOCK_LEVEL (2.8.2): read D_NEXT_O_ID from DISTRICT_NEXT_O_ID (not
///   DISTRICT, which holds nothing else it needs); scan the ORDER_LINEs of
///   orders `next − 20 .. next`; read the STOCK of each distinct item and
///   count those below the threshold.
///
/// A row that must exist but is absent or does not decode ends the
/// profile with [`Outcome::Missing`], as does an order whose line count
/// differs from O_OL_CNT; the writes buffered so far must then be
/// discarded (the driver aborts).
pub async fn execute<T: TxnOps>(t: &mut T, txn: &TpccTxn) -> Result<Outcome, T::Error> {
    let w = txn.w_id;
    let d = txn.d_id;
    let now = txn.now.max(1);
    match &txn.input {
        TpccInput::NewOrder { c_id, lines } => {
            // Every row NEW_ORDER reads is named by its input: one round of
            // reads ([`TxnOps::get_many`]) instead of 4 + 2 per line.
            // STOCK rows are read once each (an item may repeat) and
            // updated in memory in line order, which gives what reading
            // and writing them line by line would. DISTRICT is only read
            // (D_TAX); D_NEXT_O_ID is in a row of its own, so NEW_ORDER
            // does not invalidate PAYMENT's read of D_NAME.
            let next_key = district_next_o_id_key(w, d);
            let mut stock_keys: Vec<Key> = lines
                .iter()
                .map(|l| stock_key(l.supply_w_id, l.i_id))
                .collect();
            stock_keys.sort();
            stock_keys.dedup();
            let mut keys = vec![
                warehouse_key(w),
                district_key(w, d),
                next_key.clone(),
                customer_key(w, d, *c_id),
            ];
            keys.extend(lines.iter().map(|l| item_key(w, l.i_id)));
            keys.extend(stock_keys.iter().cloned());
            let mut vals = t.get_many(&keys).await?.into_iter();
            let mut next = || vals.next().flatten();
            let _wh = need!(next().and_then(|v| Warehouse::decode(&v)), "WAREHOUSE");
            let _di = need!(next().and_then(|v| District::decode(&v)), "DISTRICT");
            let mut next_o = need!(
                next().and_then(|v| DistrictNextOId::decode(&v)),
                "DISTRICT_NEXT_O_ID"
            );
            let _cu = need!(next().and_then(|v| Customer::decode(&v)), "CUSTOMER");
            let mut items = Vec::with_capacity(lines.len());
            for line in lines {
                match next().and_then(|v| Item::decode(&v)) {
                    Some(item) => items.push(item),
                    // The spec's 1% rollbacks name an unused item.
                    None if line.i_id > ITEMS => return Ok(Outcome::RolledBack),
                    None => return Ok(Outcome::Missing("ITEM")),
                }
            }
            let mut stocks: BTreeMap<Key, Stock> = BTreeMap::new();
            for k in stock_keys {
                let st = need!(next().and_then(|v| Stock::decode(&v)), "STOCK");
                stocks.insert(k, st);
            }
            let o_id = next_o.next_o_id;
            next_o.next_o_id = o_id.saturating_add(1);
            t.put(next_key, next_o.encode()).await?;
            let ord = Order {
                c_id: *c_id,
                entry_d: now,
                carrier_id: 0,
                ol_cnt: lines.len().min(usize::from(u8::MAX)) as u8,
                all_local: lines.iter().all(|l| l.supply_w_id == w),
            };
            t.put(order_key(w, d, o_id), ord.encode()).await?;
            t.put(new_order_key(w, d, o_id), encode_id(o_id)).await?;
            t.put(order_customer_key(w, d, *c_id, o_id), encode_id(o_id))
                .await?;
            for (n, (line, item)) in lines.iter().zip(&items).enumerate() {
                let s_key = stock_key(line.supply_w_id, line.i_id);
                let st = need!(stocks.get_mut(&s_key), "STOCK");
                let q = u16::from(line.quantity);
                st.quantity = if st.quantity >= q.saturating_add(10) {
                    st.quantity - q
                } else {
                    st.quantity.saturating_add(91).saturating_sub(q)
                };
                st.ytd = st.ytd.saturating_add(u32::from(line.quantity));
                st.order_cnt = st.order_cnt.saturating_add(1);
                if line.supply_w_id != w {
                    st.remote_cnt = st.remote_cnt.saturating_add(1);
                }
                let dist_info = st
                    .dist
                    .get(usize::from(d).wrapping_sub(1))
                    .copied()
                    .unwrap_or([b' '; 24]);
                let ol = OrderLine {
                    i_id: line.i_id,
                    supply_w_id: line.supply_w_id,
                    delivery_d: 0,
                    quantity: line.quantity,
                    amount: u32::from(line.quantity).saturating_mul(item.price),
                    dist_info,
                };
                let number = (n + 1).min(usize::from(u8::MAX)) as u8;
                t.put(order_line_key(w, d, o_id, number), ol.encode())
                    .await?;
            }
            for (k, st) in stocks {
                t.put(k, st.encode()).await?;
            }
            Ok(Outcome::Commit)
        }

        TpccInput::Payment {
            c_w_id,
            c_d_id,
            customer,
            h_amount,
            h_uid,
        } => {
            let amount = i64::from(*h_amount);
            let w_ytd_key = warehouse_ytd_key(w);
            let d_ytd_key = district_ytd_key(w, d);
            // First the rows it only reads: the customer (by id, or by
            // last name through the index) with WAREHOUSE and DISTRICT
            // (for H_DATA) in one round. Then the YTD rows it updates, in
            // a round of their own, last: W_YTD is the hottest row of the
            // mix (one per warehouse), and reading it last leaves one
            // round trip between its read and its lock at commit, where a
            // concurrent PAYMENT's commit makes this one abort. It writes
            // neither WAREHOUSE nor DISTRICT, whose W_TAX and D_TAX
            // NEW_ORDER reads.
            let c_id = need!(
                customer_id(t, *c_w_id, *c_d_id, customer).await?,
                "CUSTOMER"
            );
            let keys = [
                warehouse_key(w),
                district_key(w, d),
                customer_key(*c_w_id, *c_d_id, c_id),
            ];
            let mut rows = t.get_many(&keys).await?.into_iter();
            let mut next = || rows.next().flatten();
            let wh = need!(next().and_then(|v| Warehouse::decode(&v)), "WAREHOUSE");
            let di = need!(next().and_then(|v| District::decode(&v)), "DISTRICT");
            let mut cu = need!(next().and_then(|v| Customer::decode(&v)), "CUSTOMER");
            let keys = [w_ytd_key.clone(), d_ytd_key.clone()];
            let mut rows = t.get_many(&keys).await?.into_iter();
            let mut next = || rows.next().flatten();
            let mut w_ytd = need!(
                next().and_then(|v| WarehouseYtd::decode(&v)),
                "WAREHOUSE_YTD"
            );
            let mut d_ytd = need!(next().and_then(|v| DistrictYtd::decode(&v)), "DISTRICT_YTD");
            w_ytd.ytd += amount;
            t.put(w_ytd_key, w_ytd.encode()).await?;
            d_ytd.ytd += amount;
            t.put(d_ytd_key, d_ytd.encode()).await?;
            cu.balance -= amount;
            cu.ytd_payment += amount;
            cu.payment_cnt = cu.payment_cnt.saturating_add(1);
            if &cu.credit == b"BC" {
                let mut data = format!(
                    "{c_id} {c_d_id} {c_w_id} {d} {w} {}.{:02} ",
                    h_amount / 100,
                    h_amount % 100
                )
                .into_bytes();
                data.extend_from_slice(&cu.data);
                data.truncate(C_DATA_MAX);
                cu.data = data;
            }
            t.put(customer_key(*c_w_id, *c_d_id, c_id), cu.encode())
                .await?;
            let mut h_data = wh.name;
            h_data.extend_from_slice(b"    ");
            h_data.extend_from_slice(&di.name);
            let h = History {
                date: now,
                amount: *h_amount,
                data: h_data,
            };
            t.put(
                history_key(w, d, *c_w_id, *c_d_id, c_id, *h_uid),
                h.encode(),
            )
            .await?;
            Ok(Outcome::Commit)
        }

        TpccInput::OrderStatus { customer } => {
            let (c_id, _cu) = need!(select_customer(t, w, d, customer).await?, "CUSTOMER");
            let newest = scan_prefix(t, &order_customer_prefix(w, d, c_id), 1).await?;
            let o_id = need!(
                newest.first().and_then(|(_, v)| decode_id(v)),
                "ORDER_CUSTOMER_IDX"
            );
            let ord = need!(
                read(t, &order_key(w, d, o_id), Order::decode).await?,
                "ORDER"
            );
            let lines = need!(order_lines(t, w, d, o_id).await?, "ORDER_LINE");
            if lines.len() != usize::from(ord.ol_cnt) {
                return Ok(Outcome::Missing("ORDER_LINE"));
            }
            Ok(Outcome::Commit)
        }

        TpccInput::Delivery { carrier_id } => {
            for dd in 1..=DISTRICTS {
                let oldest = scan_prefix(t, &new_order_prefix(w, dd), 1).await?;
                let Some((no_key, no_val)) = oldest.into_iter().next() else {
                    continue;
                };
                let o_id = need!(decode_id(&no_val), "NEW_ORDER");
                t.delete(no_key).await?;
                let o_key = order_key(w, dd, o_id);
                let mut ord = need!(read(t, &o_key, Order::decode).await?, "ORDER");
                ord.carrier_id = *carrier_id;
                t.put(o_key, ord.encode()).await?;
                let lines = need!(order_lines(t, w, dd, o_id).await?, "ORDER_LINE");
                if lines.len() != usize::from(ord.ol_cnt) {
                    return Ok(Outcome::Missing("ORDER_LINE"));
                }
                let mut total = 0i64;
                for (k, mut ol) in lines {
                    total += i64::from(ol.amount);
                    ol.delivery_d = now;
                    t.put(k, ol.encode()).await?;
                }
                let c_key = customer_key(w, dd, ord.c_id);
                let mut cu = need!(read(t, &c_key, Customer::decode).await?, "CUSTOMER");
                cu.balance += total;
                cu.delivery_cnt = cu.delivery_cnt.saturating_add(1);
                t.put(c_key, cu.encode()).await?;
            }
            Ok(Outcome::Commit)
        }

        TpccInput::StockLevel { threshold } => {
            let next = need!(
                read(t, &district_next_o_id_key(w, d), DistrictNextOId::decode).await?,
                "DISTRICT_NEXT_O_ID"
            );
            let hi = next.next_o_id;
            let lo = hi.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
            let mut items = BTreeSet::new();
            if lo < hi {
                let start = order_line_prefix(w, d, lo);
                let end = order_line_prefix(w, d, hi);
                let limit = (STOCK_LEVEL_ORDERS * u32::from(MAX_OL_CNT)) as usize;
                for (_, v) in t.scan(&start, &end, limit).await? {
                    let ol = need!(OrderLine::decode(&v), "ORDER_LINE");
                    items.insert(ol.i_id);
                }
            }
            // The distinct items' STOCK rows in one round of reads.
            let keys: Vec<Key> = items.into_iter().map(|i| stock_key(w, i)).collect();
            let mut _low = 0usize;
            for v in t.get_many(&keys).await? {
                let st = need!(v.and_then(|v| Stock::decode(&v)), "STOCK");
                _low += usize::from(st.quantity < *threshold);
            }
            Ok(Outcome::Commit)
        }
    }
}

// ---------------------------------------------------------------------------
// Consistency (clause 3.3.2)
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct WarehouseAgg {
    /// Whether the WAREHOUSE row was seen (and decoded).
    row: bool,
    /// W_YTD, from the WAREHOUSE_YTD row.
    ytd: Option<i64>,
    history: i64,
}

#[derive(Debug, Default)]
struct DistrictAgg {
    /// Whether the DISTRICT row was seen (and decoded).
    row: bool,
    /// D_YTD, from the DISTRICT_YTD row.
    ytd: Option<i64>,
    /// D_NEXT_O_ID, from the DISTRICT_NEXT_O_ID row (`None`: no such row,
    /// or it did not decode).
    next_o_id: Option<u32>,
    history: i64,
}

#[derive(Debug, Default)]
struct CustomerAgg {
    /// (C_BALANCE, C_YTD_PAYMENT, C_LAST, C_FIRST) from the row.
    row: Option<(i64, i64, Vec<u8>, Vec<u8>)>,
    /// Name-index entries pointing at this customer: (last, first).
    names: Vec<(Vec<u8>, Vec<u8>)>,
    history: i64,
}

#[derive(Debug, Default)]
struct OrderAgg {
    /// (O_C_ID, O_OL_CNT, O_CARRIER_ID) from the row.
    row: Option<(u32, u8, u8)>,
    new_order: bool,
    lines: u32,
    undelivered_lines: u32,
    delivered_amount: i64,
    /// c_ids of the orders-by-customer entries naming this order.
    index: Vec<u32>,
}

/// Checks TPC-C's consistency conditions over a database, fed row by row
/// in any order (for example from successive scans of the store). See
/// [`check_consistency`] for the conditions.
#[derive(Debug, Default)]
pub struct ConsistencyChecker {
    rows: u64,
    errors: Vec<String>,
    error_count: u64,
    warehouses: BTreeMap<u32, WarehouseAgg>,
    districts: BTreeMap<(u32, u8), DistrictAgg>,
    customers: BTreeMap<(u32, u8, u32), CustomerAgg>,
    orders: BTreeMap<(u32, u8, u32), OrderAgg>,
}

/// Error messages kept in the report (the rest are only counted).
const MAX_ERRORS: usize = 20;

impl ConsistencyChecker {
    /// An empty checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows fed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn error(&mut self, msg: String) {
        self.error_count += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(msg);
        }
    }

    /// Feeds one row. Rows that are not TPC-C keys, or whose value does not
    /// decode, are errors.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        self.rows += 1;
        let Some(parsed) = parse_key(key) else {
            self.error(format!("unparsable key {key:02x?}"));
            return;
        };
        let bad = |what: &str| format!("{what} {parsed:?}: value does not decode");
        match &parsed {
            ParsedKey::Warehouse(w) => match Warehouse::decode(value) {
                Some(_) => self.warehouses.entry(*w).or_default().row = true,
                None => self.error(bad("WAREHOUSE")),
            },
            ParsedKey::WarehouseYtd(w) => match WarehouseYtd::decode(value) {
                Some(r) => self.warehouses.entry(*w).or_default().ytd = Some(r.ytd),
                None => self.error(bad("WAREHOUSE_YTD")),
            },
            ParsedKey::District(w, d) => match District::decode(value) {
                Some(_) => self.districts.entry((*w, *d)).or_default().row = true,
                None => self.error(bad("DISTRICT")),
            },
            ParsedKey::DistrictYtd(w, d) => match DistrictYtd::decode(value) {
                Some(r) => self.districts.entry((*w, *d)).or_default().ytd = Some(r.ytd),
                None => self.error(bad("DISTRICT_YTD")),
            },
            ParsedKey::DistrictNextOId(w, d) => match DistrictNextOId::decode(value) {
                Some(r) => {
                    self.districts.entry((*w, *d)).or_default().next_o_id = Some(r.next_o_id)
                }
                None => self.error(bad("DISTRICT_NEXT_O_ID")),
            },
            ParsedKey::Customer(w, d, c) => match Customer::decode(value) {
                Some(r) => {
                    self.customers.entry((*w, *d, *c)).or_default().row =
                        Some((r.balance, r.ytd_payment, r.last, r.first));
                }
                None => self.error(bad("CUSTOMER")),
            },
            ParsedKey::CustomerName {
                w,
                d,
                last,
                first,
                c,
            } => {
                if decode_id(value) != Some(*c) {
                    self.error(bad("CUSTOMER_NAME_IDX"));
                }
                self.customers
                    .entry((*w, *d, *c))
                    .or_default()
                    .names
                    .push((last.to_vec(), first.to_vec()));
            }
            ParsedKey::History { w, d, c_w, c_d, c } => match History::decode(value) {
                Some(h) => {
                    let amount = i64::from(h.amount);
                    self.warehouses.entry(*w).or_default().history += amount;
                    self.districts.entry((*w, *d)).or_default().history += amount;
                    self.customers.entry((*c_w, *c_d, *c)).or_default().history += amount;
                }
                None => self.error(bad("HISTORY")),
            },
            ParsedKey::NewOrder(w, d, o) => {
                if decode_id(value) != Some(*o) {
                    self.error(bad("NEW_ORDER"));
                }
                self.orders.entry((*w, *d, *o)).or_default().new_order = true;
            }
            ParsedKey::Order(w, d, o) => match Order::decode(value) {
                Some(r) => {
                    self.orders.entry((*w, *d, *o)).or_default().row =
                        Some((r.c_id, r.ol_cnt, r.carrier_id));
                }
                None => self.error(bad("ORDER")),
            },
            ParsedKey::OrderCustomer(w, d, c, o) => {
                if decode_id(value) != Some(*o) {
                    self.error(bad("ORDER_CUSTOMER_IDX"));
                }
                self.orders.entry((*w, *d, *o)).or_default().index.push(*c);
            }
            ParsedKey::OrderLine(w, d, o, _) => match OrderLine::decode(value) {
                Some(ol) => {
                    let a = self.orders.entry((*w, *d, *o)).or_default();
                    a.lines += 1;
                    if ol.delivery_d == 0 {
                        a.undelivered_lines += 1;
                    } else {
                        a.delivered_amount += i64::from(ol.amount);
                    }
                }
                None => self.error(bad("ORDER_LINE")),
            },
            ParsedKey::Item(..) => {
                if Item::decode(value).is_none() {
                    self.error(bad("ITEM"));
                }
            }
            ParsedKey::Stock(..) => {
                if Stock::decode(value).is_none() {
                    self.error(bad("STOCK"));
                }
            }
        }
    }

    /// Finishes the check for a database of `cfg.warehouses` warehouses:
    /// `Ok` if every condition holds, else `Err` listing (up to 20)
    /// violations and their total count.
    pub fn finish(mut self, cfg: &TpccConfig) -> Result<(), String> {
        let nw = cfg.w();
        // Every warehouse and district exists, with its YTD row (and the
        // district with its DISTRICT_NEXT_O_ID row), and no others.
        for w in 1..=nw {
            let (row, ytd) = self
                .warehouses
                .get(&w)
                .map_or((false, None), |a| (a.row, a.ytd));
            if !row {
                self.error(format!("WAREHOUSE {w} missing"));
            }
            if ytd.is_none() {
                self.error(format!(
                    "WAREHOUSE_YTD {w} missing (W_YTD is kept in its own row, not in WAREHOUSE)"
                ));
            }
            for d in 1..=DISTRICTS {
                let (row, ytd, next) = self
                    .districts
                    .get(&(w, d))
                    .map_or((false, None, None), |a| (a.row, a.ytd, a.next_o_id));
                if !row {
                    self.error(format!("DISTRICT ({w}, {d}) missing"));
                }
                if ytd.is_none() {
                    self.error(format!(
                        "DISTRICT_YTD ({w}, {d}) missing (D_YTD is kept in its own row, not in DISTRICT)"
                    ));
                }
                if next.is_none() {
                    self.error(format!(
                        "DISTRICT_NEXT_O_ID ({w}, {d}) missing or undecodable (D_NEXT_O_ID is kept in its own row, not in DISTRICT), so 3.3.2.2's D_NEXT_O_ID − 1 = max(O_ID) is not checked"
                    ));
                }
            }
        }
        let mut errs = Vec::new();
        for w in self.warehouses.keys() {
            if !(1..=nw).contains(w) {
                errs.push(format!("rows of warehouse {w} beyond W = {nw}"));
            }
        }

        // 3.3.2.1 and 3.3.2.8 (warehouse), 3.3.2.9 (district).
        let mut d_ytd_sum: BTreeMap<u32, i64> = BTreeMap::new();
        for (&(w, d), a) in &self.districts {
            if let Some(ytd) = a.ytd {
                *d_ytd_sum.entry(w).or_default() += ytd;
                if ytd != a.history {
                    errs.push(format!(
                        "3.3.2.9: D_YTD {ytd} != sum(H_AMOUNT) {} for district ({w}, {d})",
                        a.history
                    ));
                }
            }
        }
        for (&w, a) in &self.warehouses {
            if let Some(ytd) = a.ytd {
                let sum = d_ytd_sum.get(&w).copied().unwrap_or(0);
                if ytd != sum {
                    errs.push(format!(
                        "3.3.2.1: W_YTD {ytd} != sum(D_YTD) {sum} for warehouse {w}"
                    ));
                }
                if ytd != a.history {
                    errs.push(format!(
                        "3.3.2.8: W_YTD {ytd} != sum(H_AMOUNT) {} for warehouse {w}",
                        a.history
                    ));
                }
            }
        }

        // Per-order conditions, folding into districts and customers.
        #[derive(Default)]
        struct PerDistrict {
            max_o: Option<u32>,
            no_min: Option<u32>,
            no_max: Option<u32>,
            no_count: u64,
            sum_ol_cnt: u64,
            ol_rows: u64,
        }
        let mut per_d: BTreeMap<(u32, u8), PerDistrict> = BTreeMap::new();
        // Per customer: (delivered OL_AMOUNT, newest o_id by ORDER rows,
        // newest o_id by index entries).
        let mut per_c: BTreeMap<(u32, u8, u32), (i64, Option<u32>, Option<u32>)> = BTreeMap::new();
        for (&(w, d, o), a) in &self.orders {
            let pd = per_d.entry((w, d)).or_default();
            pd.ol_rows += u64::from(a.lines);
            if a.new_order {
                pd.no_min = Some(pd.no_min.map_or(o, |m| m.min(o)));
                pd.no_max = Some(pd.no_max.map_or(o, |m| m.max(o)));
                pd.no_count += 1;
            }
            for &c in &a.index {
                let e = per_c.entry((w, d, c)).or_default();
                e.2 = Some(e.2.map_or(o, |m| m.max(o)));
            }
            let Some((c_id, ol_cnt, carrier)) = a.row else {
                errs.push(format!(
                    "order ({w}, {d}, {o}) has NEW_ORDER/ORDER_LINE/index rows but no ORDER row"
                ));
                continue;
            };
            pd.max_o = Some(pd.max_o.map_or(o, |m| m.max(o)));
            pd.sum_ol_cnt += u64::from(ol_cnt);
            let e = per_c.entry((w, d, c_id)).or_default();
            e.0 += a.delivered_amount;
            e.1 = Some(e.1.map_or(o, |m| m.max(o)));
            if (carrier == 0) != a.new_order {
                errs.push(format!(
                    "3.3.2.5: order ({w}, {d}, {o}) O_CARRIER_ID {carrier} but NEW_ORDER row {}",
                    if a.new_order { "present" } else { "absent" }
                ));
            }
            if u32::from(ol_cnt) != a.lines {
                errs.push(format!(
                    "3.3.2.6: order ({w}, {d}, {o}) O_OL_CNT {ol_cnt} but {} ORDER_LINE rows",
                    a.lines
                ));
            }
            let want_undelivered = if carrier == 0 { a.lines } else { 0 };
            if a.undelivered_lines != want_undelivered {
                errs.push(format!(
                    "3.3.2.7: order ({w}, {d}, {o}) O_CARRIER_ID {carrier} but {} of {} lines undelivered",
                    a.undelivered_lines, a.lines
                ));
            }
            if a.index.as_slice() != [c_id] {
                errs.push(format!(
                    "orders-by-customer index: order ({w}, {d}, {o}) of customer {c_id} has entries for customers {:?}",
                    a.index
                ));
            }
            if !self.customers.contains_key(&(w, d, c_id)) {
                errs.push(format!(
                    "order ({w}, {d}, {o}) names absent customer {c_id}"
                ));
            }
        }

        // 3.3.2.2–3.3.2.4 per district with a DISTRICT row; D_NEXT_O_ID
        // from its own row (its absence is reported above, and the other
        // conditions are still checked).
        for (&(w, d), a) in &self.districts {
            if !a.row {
                continue;
            }
            let pd = per_d.remove(&(w, d)).unwrap_or_default();
            let max_o = pd.max_o.unwrap_or(0);
            if let Some(next) = a.next_o_id {
                if next.wrapping_sub(1) != max_o {
                    errs.push(format!(
                        "3.3.2.2: D_NEXT_O_ID − 1 = {} != max(O_ID) {max_o} in district ({w}, {d})",
                        next.wrapping_sub(1)
                    ));
                }
            }
            if let (Some(lo), Some(hi)) = (pd.no_min, pd.no_max) {
                if hi != max_o {
                    errs.push(format!(
                        "3.3.2.2: max(NO_O_ID) {hi} != max(O_ID) {max_o} in district ({w}, {d})"
                    ));
                }
                if u64::from(hi - lo) + 1 != pd.no_count {
                    errs.push(format!(
                        "3.3.2.3: max(NO_O_ID) − min(NO_O_ID) + 1 = {} != {} NEW_ORDER rows in district ({w}, {d})",
                        u64::from(hi - lo) + 1,
                        pd.no_count
                    ));
                }
            }
            if pd.sum_ol_cnt != pd.ol_rows {
                errs.push(format!(
                    "3.3.2.4: sum(O_OL_CNT) {} != {} ORDER_LINE rows in district ({w}, {d})",
                    pd.sum_ol_cnt, pd.ol_rows
                ));
            }
        }
        for (w, d) in per_d.keys() {
            errs.push(format!(
                "orders of district ({w}, {d}) without DISTRICT row"
            ));
        }

        // Customers: 3.3.2.10, 3.3.2.12, both indexes.
        for (&(w, d, c), a) in &self.customers {
            let Some((balance, ytd_payment, last, first)) = &a.row else {
                errs.push(format!(
                    "customer ({w}, {d}, {c}) has HISTORY or index entries but no CUSTOMER row"
                ));
                continue;
            };
            let (delivered, newest, newest_idx) =
                per_c.get(&(w, d, c)).copied().unwrap_or_default();
            if *balance != delivered - a.history {
                errs.push(format!(
                    "3.3.2.10: C_BALANCE {balance} != sum(delivered OL_AMOUNT) {delivered} − sum(H_AMOUNT) {} for customer ({w}, {d}, {c})",
                    a.history
                ));
            }
            if balance + ytd_payment != delivered {
                errs.push(format!(
                    "3.3.2.12: C_BALANCE + C_YTD_PAYMENT {} != sum(delivered OL_AMOUNT) {delivered} for customer ({w}, {d}, {c})",
                    balance + ytd_payment
                ));
            }
            if a.names.len() != 1 || a.names.first() != Some(&(last.clone(), first.clone())) {
                errs.push(format!(
                    "customer-by-name index: customer ({w}, {d}, {c}) has {} entries, want one for its name",
                    a.names.len()
                ));
            }
            if newest != newest_idx {
                errs.push(format!(
                    "orders-by-customer index: newest order of customer ({w}, {d}, {c}) is {newest:?} but the index's first entry is {newest_idx:?}"
                ));
            }
        }

        for e in errs {
            self.error(e);
        }
        if self.error_count == 0 {
            return Ok(());
        }
        let mut msg = format!(
            "{} TPC-C consistency violations over {} rows:",
            self.error_count, self.rows
        );
        for e in &self.errors {
            msg.push_str("\n  ");
            msg.push_str(e);
        }
        if self.error_count > self.errors.len() as u64 {
            msg.push_str(&format!(
                "\n  … and {} more",
                self.error_count - self.errors.len() as u64
            ));
        }
        Err(msg)
    }
}

/// Checks TPC-C's consistency conditions (clause 3.3.2) over all rows of a
/// database of `cfg.warehouses` warehouses, given in any order (e.g. a full
/// scan of the store after a run, or a map in tests):
///
/// - 3.3.2.1: W_YTD = Σ D_YTD per warehouse;
/// - 3.3.2.2: D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) per district (the
///   NEW_ORDER part when the district has NEW_ORDER rows);
/// - 3.3.2.3: max(NO_O_ID) − min(NO_O_ID) + 1 = count(NEW_ORDER) per district;
/// - 3.3.2.4: Σ O_OL_CNT = count(ORDER_LINE) per district;
/// - 3.3.2.5: O_CARRIER_ID is NULL iff a NEW_ORDER row exists;
/// - 3.3.2.6: O_OL_CNT = the order's ORDER_LINE count;
/// - 3.3.2.7: OL_DELIVERY_D is NULL iff the order's O_CARRIER_ID is;
/// - 3.3.2.8 / 3.3.2.9: W_YTD / D_YTD = Σ H_AMOUNT of the warehouse /
///   district;
/// - 3.3.2.10: C_BALANCE = Σ delivered OL_AMOUNT − Σ H_AMOUNT per customer;
/// - 3.3.2.12: C_BALANCE + C_YTD_PAYMENT = Σ delivered OL_AMOUNT;
/// - the secondary indexes: each CUSTOMER has exactly one name-index entry,
///   with its C_LAST and C_FIRST; each ORDER exactly one orders-by-customer
///   entry, under its O_C_ID, and no entry lacks its ORDER — so each
///   customer's first entry is its newest order;
/// - every row decodes, every warehouse `1..=W` and its districts exist,
///   each with its WAREHOUSE_YTD / DISTRICT_YTD row, and each district with
///   its DISTRICT_NEXT_O_ID row (W_YTD, D_YTD and D_NEXT_O_ID are read from
///   those rows only).
///
/// Memory is proportional to the number of orders and customers, not rows.
pub fn check_consistency<I, K, V>(rows: I, cfg: &TpccConfig) -> Result<(), String>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut c = ConsistencyChecker::new();
    for (k, v) in rows {
        c.add(k.as_ref(), v.as_ref());
    }
    c.finish(cfg)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Instant;

    use super::*;
    use crate::tatp::test_support::{block_on, MemStore};

    /// A scaled-down database for the tests that run transactions.
    const SMALL: Dims = Dims {
        items: 2_000,
        customers: 120,
        new_orders: 36,
        last_names: 40,
    };

    fn load(dims: Dims, warehouses: u32, seed: u64) -> BTreeMap<Key, Value> {
        let mut m = BTreeMap::new();
        for (k, v) in TpccPopulation::new(dims, seed, 1..=warehouses) {
            assert!(m.insert(k.clone(), v).is_none(), "duplicate key {k:?}");
        }
        m
    }

    fn count(m: &BTreeMap<Key, Value>, t: TpccTable) -> usize {
        m.keys().filter(|k| TpccTable::of_key(k) == Some(t)).count()
    }

    /// A transaction over a map: writes are buffered (reads and scans see
    /// them) and applied only on commit, so an abort discards them. Point
    /// reads are logged in `reads`.
    struct Overlay<'a> {
        base: &'a BTreeMap<Key, Value>,
        writes: BTreeMap<Key, Option<Value>>,
        reads: Vec<Key>,
    }

    impl<'a> Overlay<'a> {
        fn new(base: &'a BTreeMap<Key, Value>) -> Self {
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
    fn run(m: &mut BTreeMap<Key, Value>, txn: &TpccTxn) -> Outcome {
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

    fn cfg(w: u32) -> TpccConfig {
        TpccConfig { warehouses: w }
    }

    #[test]
    fn tpcc_nurand_names_and_constants() {
        let mut rng = SmallRng::seed_from_u64(5);
        for (a, c, x, y) in [
            (A_C_LAST, C_LAST_RUN, 0, 999),
            (A_C_ID, C_C_ID, 1, 3000),
            (A_OL_I_ID, C_OL_I_ID, 1, 100_000),
            (A_C_ID, C_C_ID, 1, 120),
            (A_C_LAST, 0, 7, 7),
        ] {
            let mut hist = BTreeMap::new();
            for _ in 0..50_000 {
                let v = nurand(a, c, x, y, &mut rng);
                assert!((x..=y).contains(&v), "NURand({a},{x},{y}) gave {v}");
                *hist.entry(v).or_insert(0u32) += 1;
            }
            if y - x > 100 {
                // Non-uniform: the commonest value is well above the mean.
                let max = *hist.values().max().unwrap() as f64;
                let mean = 50_000.0 / f64::from(y - x + 1);
                assert!(max > 3.0 * mean, "NURand({a}) max {max} mean {mean}");
            }
        }
        assert_eq!(nurand(5, 0, 9, 3, &mut rng), 9);
        let delta = C_LAST_RUN.abs_diff(C_LAST_LOAD);
        assert!((65..=119).contains(&delta) && delta != 96 && delta != 112);
        assert!(C_LAST_LOAD <= A_C_LAST && C_LAST_RUN <= A_C_LAST);
        assert!(C_C_ID <= A_C_ID && C_OL_I_ID <= A_OL_I_ID);
        assert_eq!(last_name(371), b"PRICALLYOUGHT");
        assert_eq!(last_name(0), b"BARBARBAR");
        assert_eq!(last_name(999), b"EINGEINGEING");
        assert!(cfg(0).validate().is_err());
        assert!(cfg(1001).validate().is_err());
        assert!(cfg(1000).validate().is_ok());
        assert!(TpccConfig::default().validate().is_ok());
    }

    #[test]
    fn tpcc_keys_and_codecs() {
        let k = order_line_key(7, 3, 0x0102_0304, 9);
        assert_eq!(k, vec![shard(7), b'L', 0, 0, 0, 7, 3, 1, 2, 3, 4, 9]);
        assert!(k.starts_with(&order_line_prefix(7, 3, 0x0102_0304)));
        assert!(order_line_key(7, 3, 5, 15) < order_line_prefix(7, 3, 6));
        // Newest order first in the orders-by-customer index.
        assert!(order_customer_key(1, 1, 5, 10) < order_customer_key(1, 1, 5, 9));
        // Name index: one name's entries are contiguous and by c_first.
        let p = customer_name_prefix(1, 2, b"BAR");
        let e1 = customer_name_key(1, 2, b"BAR", b"Abc", 9);
        let e2 = customer_name_key(1, 2, b"BAR", b"Abcd", 1);
        let other = customer_name_key(1, 2, b"BARBAR", b"A", 1);
        assert!(e1.starts_with(&p) && e2.starts_with(&p) && !other.starts_with(&p));
        assert!(e1 < e2);
        assert_eq!(
            parse_key(&e1),
            Some(ParsedKey::CustomerName {
                w: 1,
                d: 2,
                last: b"BAR",
                first: b"Abc",
                c: 9
            })
        );
        assert_eq!(
            parse_key(&history_key(3, 4, 5, 6, 7, 8)),
            Some(ParsedKey::History {
                w: 3,
                d: 4,
                c_w: 5,
                c_d: 6,
                c: 7
            })
        );
        assert_eq!(
            parse_key(&order_customer_key(2, 3, 4, 5)),
            Some(ParsedKey::OrderCustomer(2, 3, 4, 5))
        );
        // The YTD rows: own tags, keyed and sharded like their owners.
        assert_eq!(warehouse_ytd_key(7), vec![shard(7), b'w', 0, 0, 0, 7]);
        assert_eq!(district_ytd_key(7, 3), vec![shard(7), b'd', 0, 0, 0, 7, 3]);
        assert_eq!(warehouse_ytd_key(7)[0], warehouse_key(7)[0]);
        assert_eq!(district_ytd_key(7, 3)[0], district_key(7, 3)[0]);
        assert_eq!(
            parse_key(&warehouse_ytd_key(9)),
            Some(ParsedKey::WarehouseYtd(9))
        );
        assert_eq!(
            parse_key(&district_ytd_key(9, 2)),
            Some(ParsedKey::DistrictYtd(9, 2))
        );
        assert_eq!(
            TpccTable::of_key(&warehouse_ytd_key(1)),
            Some(TpccTable::WarehouseYtd)
        );
        assert_eq!(
            TpccTable::of_key(&district_ytd_key(1, 1)),
            Some(TpccTable::DistrictYtd)
        );
        // D_NEXT_O_ID's row likewise.
        assert_eq!(
            district_next_o_id_key(7, 3),
            vec![shard(7), b'n', 0, 0, 0, 7, 3]
        );
        assert_eq!(district_next_o_id_key(7, 3)[0], district_key(7, 3)[0]);
        assert_eq!(
            parse_key(&district_next_o_id_key(9, 2)),
            Some(ParsedKey::DistrictNextOId(9, 2))
        );
        assert_eq!(parse_key(&district_next_o_id_key(9, 2)[..6]), None);
        let mut longer = district_next_o_id_key(9, 2);
        longer.push(0);
        assert_eq!(parse_key(&longer), None);
        assert_eq!(
            TpccTable::of_key(&district_next_o_id_key(1, 1)),
            Some(TpccTable::DistrictNextOId)
        );
        assert_eq!(TpccTable::DistrictNextOId.name(), "DISTRICT_NEXT_O_ID");
        assert_eq!(
            DistrictNextOId { next_o_id: 3_001 }.encode(),
            vec![0, 0, 0x0b, 0xb9]
        );
        assert_eq!(DistrictNextOId::LEN, 4);
        let tags: BTreeSet<u8> = TpccTable::ALL.iter().map(|t| t.tag()).collect();
        assert_eq!(tags.len(), TpccTable::ALL.len(), "distinct tags");
        let mut bad = stock_key(2, 3);
        bad[0] ^= 1;
        assert_eq!(parse_key(&bad), None, "wrong shard byte");
        assert_eq!(parse_key(&stock_key(2, 3)[..9]), None);
        for t in TpccTable::ALL {
            assert_eq!(TpccTable::ALL[t.index()], t);
        }
        assert_eq!(TpccTable::of_key(&stock_key(1, 1)), Some(TpccTable::Stock));

        // Every row kind round-trips and rejects truncation.
        let m = load(SMALL, 1, 3);
        let mut seen = BTreeSet::new();
        for (k, v) in &m {
            let t = TpccTable::of_key(k).unwrap();
            if !seen.insert(t) {
                continue;
            }
            fn rt<R: PartialEq + std::fmt::Debug>(
                v: &[u8],
                dec: fn(&[u8]) -> Option<R>,
                enc: fn(&R) -> Value,
            ) {
                let r = dec(v).unwrap();
                assert_eq!(enc(&r), v);
                for n in 0..v.len() {
                    assert_eq!(dec(&v[..n]), None);
                }
                let mut longer = v.to_vec();
                longer.push(0);
                assert_eq!(dec(&longer), None);
            }
            match t {
                TpccTable::Warehouse => rt(v, Warehouse::decode, Warehouse::encode),
                TpccTable::WarehouseYtd => rt(v, WarehouseYtd::decode, WarehouseYtd::encode),
                TpccTable::District => rt(v, District::decode, District::encode),
                TpccTable::DistrictYtd => rt(v, DistrictYtd::decode, DistrictYtd::encode),
                TpccTable::DistrictNextOId => {
                    rt(v, DistrictNextOId::decode, DistrictNextOId::encode)
                }
                TpccTable::Customer => rt(v, Customer::decode, Customer::encode),
                TpccTable::History => rt(v, History::decode, History::encode),
                TpccTable::Order => rt(v, Order::decode, Order::encode),
                TpccTable::OrderLine => rt(v, OrderLine::decode, OrderLine::encode),
                TpccTable::Item => rt(v, Item::decode, Item::encode),
                TpccTable::Stock => rt(v, Stock::decode, Stock::encode),
                TpccTable::NewOrder
                | TpccTable::CustomerNameIndex
                | TpccTable::OrderCustomerIndex => {
                    assert!(decode_id(v).is_some());
                    assert_eq!(decode_id(&v[..3]), None);
                }
            }
        }
        assert_eq!(seen.len(), TpccTable::ALL.len());
    }

    #[test]
    fn tpcc_population_small_counts_domains_determinism() {
        let (w, seed) = (2u32, 7u64);
        let m = load(SMALL, w, seed);
        let wd = w as usize * usize::from(DISTRICTS);
        let cust = wd * SMALL.customers as usize;
        let want = [
            (TpccTable::Warehouse, w as usize),
            (TpccTable::WarehouseYtd, w as usize),
            (TpccTable::District, wd),
            (TpccTable::DistrictYtd, wd),
            (TpccTable::DistrictNextOId, wd),
            (TpccTable::Customer, cust),
            (TpccTable::CustomerNameIndex, cust),
            (TpccTable::History, cust),
            (TpccTable::Order, cust),
            (TpccTable::OrderCustomerIndex, cust),
            (TpccTable::NewOrder, wd * SMALL.new_orders as usize),
            (TpccTable::Item, w as usize * SMALL.items as usize),
            (TpccTable::Stock, w as usize * SMALL.items as usize),
        ];
        for (t, n) in want {
            assert_eq!(count(&m, t), n, "{}", t.name());
        }
        let ol = count(&m, TpccTable::OrderLine) as f64;
        assert!((ol / cust as f64 - 10.0).abs() < 0.3, "ol {ol}");
        let hint = count_hint_per_warehouse(&SMALL) as f64 * f64::from(w);
        assert!((m.len() as f64 - hint).abs() / hint < 0.02);
        check_consistency(&m, &cfg(w)).unwrap();

        // Domains.
        let (mut bc, mut orig_i, mut orig_s, mut nitems) = (0usize, 0usize, 0usize, 0usize);
        let mut names = BTreeSet::new();
        for (k, v) in &m {
            match parse_key(k).unwrap() {
                ParsedKey::Customer(_, _, c) => {
                    let cu = Customer::decode(v).unwrap();
                    bc += usize::from(&cu.credit == b"BC");
                    assert!((300..=500).contains(&cu.data.len()));
                    assert!((8..=16).contains(&cu.first.len()));
                    assert_eq!(&cu.address.zip[4..], b"11111");
                    if c <= SMALL.last_names {
                        assert_eq!(cu.last, last_name(c - 1));
                    }
                    names.insert(cu.last);
                }
                ParsedKey::Item(w, i) => {
                    let it = Item::decode(v).unwrap();
                    assert!((100..=10_000).contains(&it.price));
                    orig_i += usize::from(contains(&it.data, b"ORIGINAL"));
                    nitems += 1;
                    // Every warehouse's copy is the same.
                    assert_eq!(Some(v), m.get(&item_key(1, i)), "item {i} of {w}");
                }
                ParsedKey::Stock(..) => {
                    let st = Stock::decode(v).unwrap();
                    assert!((10..=100).contains(&st.quantity));
                    orig_s += usize::from(contains(&st.data, b"ORIGINAL"));
                }
                ParsedKey::DistrictNextOId(..) => {
                    let next = DistrictNextOId::decode(v).unwrap();
                    assert_eq!(next.next_o_id, SMALL.customers + 1);
                }
                ParsedKey::Order(_, _, o) => {
                    let ord = Order::decode(v).unwrap();
                    assert!((MIN_OL_CNT..=MAX_OL_CNT).contains(&ord.ol_cnt));
                    let delivered = o < SMALL.first_new_order();
                    assert_eq!(ord.carrier_id != 0, delivered);
                }
                _ => {}
            }
        }
        assert_eq!(names.len(), SMALL.last_names as usize);
        let frac = |n: usize, of: usize| n as f64 / of as f64;
        assert!((frac(bc, cust) - 0.1).abs() < 0.03, "BC {bc}");
        assert!((frac(orig_i, nitems) - 0.1).abs() < 0.03);
        assert!((frac(orig_s, nitems) - 0.1).abs() < 0.03);

        // Deterministic, seed-dependent, and splittable by warehouse.
        let a: Vec<_> = TpccPopulation::new(SMALL, seed, 1..=2).collect();
        let b: Vec<_> = TpccPopulation::new(SMALL, seed, 1..=1)
            .chain(TpccPopulation::new(SMALL, seed, 2..=2))
            .collect();
        assert_eq!(a, b);
        let c: Vec<_> = TpccPopulation::new(SMALL, seed + 1, 1..=2).collect();
        assert_ne!(a, c);
        assert_eq!(TpccPopulation::new(SMALL, seed, 3..=2).count(), 0);
    }

    /// Streams one warehouse at the spec's sizes: exact row counts per
    /// table, consistency, and the raw bytes per row reported in the docs.
    #[test]
    fn tpcc_population_spec_size_one_warehouse() {
        let started = Instant::now();
        let c = cfg(1);
        let mut n = [0u64; TpccTable::ALL.len()];
        let mut bytes = [(0u64, 0u64); TpccTable::ALL.len()];
        let mut sum_ol_cnt = 0u64;
        let mut checker = ConsistencyChecker::new();
        for (k, v) in population(&c, 42) {
            let t = TpccTable::of_key(&k).unwrap();
            n[t.index()] += 1;
            bytes[t.index()].0 += k.len() as u64;
            bytes[t.index()].1 += v.len() as u64;
            if t == TpccTable::Order {
                sum_ol_cnt += u64::from(Order::decode(&v).unwrap().ol_cnt);
            }
            checker.add(&k, &v);
        }
        checker.finish(&c).unwrap();
        let per_d = u64::from(CUSTOMERS_PER_DISTRICT) * 10;
        let want = [
            (TpccTable::Warehouse, 1),
            (TpccTable::WarehouseYtd, 1),
            (TpccTable::District, 10),
            (TpccTable::DistrictYtd, 10),
            (TpccTable::DistrictNextOId, 10),
            (TpccTable::Customer, per_d),
            (TpccTable::History, per_d),
            (TpccTable::NewOrder, 9_000),
            (TpccTable::Order, per_d),
            (TpccTable::OrderLine, sum_ol_cnt),
            (TpccTable::Item, 100_000),
            (TpccTable::Stock, 100_000),
            (TpccTable::CustomerNameIndex, per_d),
            (TpccTable::OrderCustomerIndex, per_d),
        ];
        for (t, w) in want {
            assert_eq!(n[t.index()], w, "{}", t.name());
        }
        assert!((sum_ol_cnt as f64 / 300_000.0 - 1.0).abs() < 0.01);
        let total: u64 = n.iter().sum();
        let hint = population_count_hint(&c);
        assert_eq!(hint, 659_032);
        assert!((total as f64 / hint as f64 - 1.0).abs() < 0.005);
        let mut raw = 0u64;
        for t in TpccTable::ALL {
            let (kb, vb) = bytes[t.index()];
            let rows = n[t.index()];
            raw += kb + vb;
            eprintln!(
                "{:<20} {:>7} rows  key {:>5.1} B  value {:>6.1} B",
                t.name(),
                rows,
                kb as f64 / rows as f64,
                vb as f64 / rows as f64
            );
        }
        eprintln!(
            "total {total} rows, {:.1} MB raw, in {:?}",
            raw as f64 / 1e6,
            started.elapsed()
        );
    }

    #[test]
    fn tpcc_mix_and_input_domains() {
        let mut rng = SmallRng::seed_from_u64(1);
        let n = 200_000;
        let w = 10;
        let mut kinds = [0usize; 5];
        let (mut no, mut rb, mut lines, mut remote_lines) = (0usize, 0usize, 0usize, 0usize);
        let (mut pay, mut remote_pay, mut by_name, mut sel) = (0usize, 0usize, 0usize, 0usize);
        let mut uids = BTreeSet::new();
        for i in 0..n {
            let home = 1 + (i % w);
            let t = next_txn(&cfg(w), home, &mut rng);
            assert_eq!(t.w_id, home);
            assert_eq!(t.now, RUN_TIME);
            kinds[t.kind().index()] += 1;
            if t.kind() != TpccKind::Delivery {
                assert!((1..=DISTRICTS).contains(&t.d_id));
            }
            let mut customer = |c: &CustomerSel| {
                sel += 1;
                match c {
                    CustomerSel::ById(c) => assert!((1..=3000).contains(c)),
                    CustomerSel::ByLastName(l) => {
                        by_name += 1;
                        assert!((9..=15).contains(&l.len()));
                    }
                }
            };
            match &t.input {
                TpccInput::NewOrder { c_id, lines: ls } => {
                    no += 1;
                    rb += usize::from(t.is_rollback());
                    assert!((1..=3000).contains(c_id));
                    assert!((5..=15).contains(&ls.len()));
                    for (j, l) in ls.iter().enumerate() {
                        lines += 1;
                        remote_lines += usize::from(l.supply_w_id != home);
                        assert!((1..=w).contains(&l.supply_w_id));
                        assert!((1..=10).contains(&l.quantity));
                        let last = j + 1 == ls.len();
                        assert!((1..=ITEMS).contains(&l.i_id) || (last && l.i_id == UNUSED_I_ID));
                    }
                }
                TpccInput::Payment {
                    c_w_id,
                    c_d_id,
                    customer: c,
                    h_amount,
                    h_uid,
                } => {
                    pay += 1;
                    remote_pay += usize::from(*c_w_id != home);
                    assert!((1..=w).contains(c_w_id) && (1..=DISTRICTS).contains(c_d_id));
                    assert!((100..=500_000).contains(h_amount));
                    assert!(h_uid >> 63 == 1);
                    assert!(uids.insert(*h_uid));
                    customer(c);
                }
                TpccInput::OrderStatus { customer: c } => customer(c),
                TpccInput::Delivery { carrier_id } => {
                    assert_eq!(t.d_id, 0);
                    assert!((1..=10).contains(carrier_id));
                }
                TpccInput::StockLevel { threshold } => {
                    assert!((10..=20).contains(threshold));
                }
            }
        }
        for kind in TpccKind::ALL {
            let got = kinds[kind.index()] as f64 / n as f64 * 100.0;
            let want = f64::from(kind.share_percent());
            assert!((got - want).abs() < 0.5, "{} {got} vs {want}", kind.name());
        }
        assert_eq!(
            TpccKind::ALL.iter().map(|k| k.share_percent()).sum::<u32>(),
            100
        );
        let pct = |a: usize, b: usize| a as f64 / b as f64 * 100.0;
        assert!((pct(rb, no) - 1.0).abs() < 0.3, "rollbacks {}", pct(rb, no));
        assert!((pct(remote_lines, lines) - 1.0).abs() < 0.15);
        assert!((pct(remote_pay, pay) - 15.0).abs() < 0.7);
        assert!((pct(by_name, sel) - 60.0).abs() < 0.8);
        assert!(TpccKind::OrderStatus.is_read_only() && TpccKind::StockLevel.is_read_only());
        assert!(!TpccKind::NewOrder.is_read_only() && !TpccKind::Delivery.is_read_only());

        // One warehouse: nothing is remote.
        for _ in 0..20_000 {
            match next_txn(&cfg(1), 5, &mut rng).input {
                TpccInput::NewOrder { lines, .. } => {
                    assert!(lines.iter().all(|l| l.supply_w_id == 1))
                }
                TpccInput::Payment { c_w_id, .. } => assert_eq!(c_w_id, 1),
                _ => {}
            }
        }
    }

    /// Runs the mix serially on a small two-warehouse database and checks
    /// the consistency conditions and the transactions' net effects.
    #[test]
    fn tpcc_mix_run_keeps_consistency() {
        let started = Instant::now();
        let w = 2u32;
        let mut m = load(SMALL, w, 11);
        let initial_orders = count(&m, TpccTable::Order);
        let initial_new = count(&m, TpccTable::NewOrder);
        let initial_hist = count(&m, TpccTable::History);
        let read_only = |m: &BTreeMap<Key, Value>| -> Vec<(Key, Value)> {
            m.iter()
                .filter(|(k, _)| {
                    matches!(
                        TpccTable::of_key(k),
                        Some(TpccTable::Warehouse | TpccTable::District | TpccTable::Item)
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let initial_read_only = read_only(&m);
        let mut rng = SmallRng::seed_from_u64(2);
        let mut outcomes: BTreeMap<(TpccKind, String), usize> = BTreeMap::new();
        let (mut committed_no, mut payments, mut delivered) = (0usize, 0usize, 0usize);
        for i in 0..5_000u32 {
            let txn = next_txn_in(&SMALL, w, 1 + i % w, &mut rng);
            let before_new = if txn.kind() == TpccKind::Delivery {
                count(&m, TpccTable::NewOrder)
            } else {
                0
            };
            let out = run(&mut m, &txn);
            assert!(!matches!(out, Outcome::Missing(_)), "{out:?} for {txn:?}");
            assert_eq!(out == Outcome::RolledBack, txn.is_rollback());
            *outcomes
                .entry((txn.kind(), format!("{out:?}")))
                .or_default() += 1;
            if out == Outcome::Commit {
                match txn.kind() {
                    TpccKind::NewOrder => committed_no += 1,
                    TpccKind::Payment => payments += 1,
                    TpccKind::Delivery => {
                        delivered += before_new - count(&m, TpccTable::NewOrder);
                    }
                    _ => {}
                }
            }
        }
        eprintln!("outcomes: {outcomes:?}");
        assert!(outcomes.contains_key(&(TpccKind::NewOrder, "RolledBack".into())));
        assert_eq!(count(&m, TpccTable::Order), initial_orders + committed_no);
        assert_eq!(
            count(&m, TpccTable::OrderCustomerIndex),
            initial_orders + committed_no
        );
        assert_eq!(
            count(&m, TpccTable::NewOrder),
            initial_new + committed_no - delivered
        );
        assert_eq!(count(&m, TpccTable::History), initial_hist + payments);
        // WAREHOUSE, DISTRICT and ITEM are never written after the load.
        assert!(read_only(&m) == initial_read_only);
        check_consistency(&m, &cfg(w)).unwrap();
        eprintln!("mix run took {:?}", started.elapsed());
    }

    #[test]
    fn tpcc_profile_effects() {
        let mut m = load(SMALL, 2, 5);
        let (w, d) = (1u32, 4u8);
        let district = |m: &BTreeMap<Key, Value>| {
            DistrictNextOId::decode(&m[&district_next_o_id_key(w, d)]).unwrap()
        };
        let next = district(&m).next_o_id;
        assert_eq!(next, SMALL.customers + 1);
        let district_row = m[&district_key(w, d)].clone();

        // NEW_ORDER with a remote line and the stock-quantity rule.
        let (i1, i2) = (17u32, 18u32);
        let mut s1 = Stock::decode(&m[&stock_key(w, i1)]).unwrap();
        s1.quantity = 12; // 12 < 5 + 10: wraps to 12 − 5 + 91
        m.insert(stock_key(w, i1), s1.encode());
        let s2_before = Stock::decode(&m[&stock_key(2, i2)]).unwrap();
        let txn = TpccTxn {
            w_id: w,
            d_id: d,
            now: 99,
            input: TpccInput::NewOrder {
                c_id: 7,
                lines: vec![
                    OrderLineInput {
                        i_id: i1,
                        supply_w_id: w,
                        quantity: 5,
                    },
                    OrderLineInput {
                        i_id: i2,
                        supply_w_id: 2,
                        quantity: 3,
                    },
                ],
            },
        };
        assert_eq!(run(&mut m, &txn), Outcome::Commit);
        assert_eq!(district(&m).next_o_id, next + 1);
        assert_eq!(m[&district_key(w, d)], district_row, "DISTRICT unchanged");
        let ord = Order::decode(&m[&order_key(w, d, next)]).unwrap();
        assert_eq!(
            (ord.c_id, ord.ol_cnt, ord.carrier_id, ord.all_local),
            (7, 2, 0, false)
        );
        assert!(m.contains_key(&new_order_key(w, d, next)));
        let s1 = Stock::decode(&m[&stock_key(w, i1)]).unwrap();
        assert_eq!(
            (s1.quantity, s1.ytd, s1.order_cnt, s1.remote_cnt),
            (98, 5, 1, 0)
        );
        let s2 = Stock::decode(&m[&stock_key(2, i2)]).unwrap();
        assert_eq!(s2.remote_cnt, 1);
        assert_eq!(s2.ytd, 3);
        let want_q = if s2_before.quantity >= 13 {
            s2_before.quantity - 3
        } else {
            s2_before.quantity + 88
        };
        assert_eq!(s2.quantity, want_q);
        let ol = OrderLine::decode(&m[&order_line_key(w, d, next, 2)]).unwrap();
        let price = Item::decode(&m[&item_key(w, i2)]).unwrap().price;
        assert_eq!(
            (ol.amount, ol.delivery_d, ol.dist_info),
            (3 * price, 0, s2.dist[3])
        );
        // ORDER_STATUS by id finds it through the index (newest first).
        let first = m
            .range(order_customer_prefix(w, d, 7)..)
            .next()
            .map(|(_, v)| decode_id(v).unwrap());
        assert_eq!(first, Some(next));

        // A rollback leaves nothing behind.
        let snapshot = m.clone();
        let mut rb = txn.clone();
        if let TpccInput::NewOrder { lines, .. } = &mut rb.input {
            lines.push(OrderLineInput {
                i_id: UNUSED_I_ID,
                supply_w_id: w,
                quantity: 1,
            });
        }
        assert!(rb.is_rollback());
        assert_eq!(run(&mut m, &rb), Outcome::RolledBack);
        assert_eq!(m, snapshot);

        // PAYMENT by last name takes the ⌈n/2⌉-th customer by c_first.
        let last = last_name(3);
        let matches: Vec<u32> = m
            .range(
                customer_name_prefix(2, 6, &last)
                    ..prefix_end(&customer_name_prefix(2, 6, &last)).unwrap(),
            )
            .map(|(_, v)| decode_id(v).unwrap())
            .collect();
        assert!(!matches.is_empty());
        let chosen = matches[(matches.len() + 1) / 2 - 1];
        let before = Customer::decode(&m[&customer_key(2, 6, chosen)]).unwrap();
        let pay = TpccTxn {
            w_id: w,
            d_id: d,
            now: 100,
            input: TpccInput::Payment {
                c_w_id: 2,
                c_d_id: 6,
                customer: CustomerSel::ByLastName(last),
                h_amount: 12_345,
                h_uid: 1 << 63 | 77,
            },
        };
        assert_eq!(run(&mut m, &pay), Outcome::Commit);
        let after = Customer::decode(&m[&customer_key(2, 6, chosen)]).unwrap();
        assert_eq!(after.balance, before.balance - 12_345);
        assert_eq!(after.ytd_payment, before.ytd_payment + 12_345);
        assert_eq!(after.payment_cnt, before.payment_cnt + 1);
        if &after.credit == b"BC" {
            assert!(after
                .data
                .starts_with(format!("{chosen} 6 2 {d} {w} 123.45 ").as_bytes()));
            assert!(after.data.len() <= C_DATA_MAX);
        } else {
            assert_eq!(after.data, before.data);
        }
        let h = History::decode(&m[&history_key(w, d, 2, 6, chosen, 1 << 63 | 77)]).unwrap();
        assert_eq!((h.amount, h.date), (12_345, 100));
        assert!(contains(&h.data, b"    "));

        // DELIVERY takes each district's oldest new order.
        let oldest = SMALL.first_new_order();
        let o = Order::decode(&m[&order_key(w, d, oldest)]).unwrap();
        let c_before = Customer::decode(&m[&customer_key(w, d, o.c_id)]).unwrap();
        let del = TpccTxn {
            w_id: w,
            d_id: 0,
            now: 101,
            input: TpccInput::Delivery { carrier_id: 3 },
        };
        assert_eq!(run(&mut m, &del), Outcome::Commit);
        assert!(!m.contains_key(&new_order_key(w, d, oldest)));
        assert!(m.contains_key(&new_order_key(w, d, oldest + 1)));
        let o = Order::decode(&m[&order_key(w, d, oldest)]).unwrap();
        assert_eq!(o.carrier_id, 3);
        let mut total = 0i64;
        for n in 1..=o.ol_cnt {
            let ol = OrderLine::decode(&m[&order_line_key(w, d, oldest, n)]).unwrap();
            assert_eq!(ol.delivery_d, 101);
            total += i64::from(ol.amount);
        }
        let c_after = Customer::decode(&m[&customer_key(w, d, o.c_id)]).unwrap();
        assert_eq!(c_after.balance, c_before.balance + total);
        assert_eq!(c_after.delivery_cnt, c_before.delivery_cnt + 1);
        check_consistency(&m, &cfg(2)).unwrap();

        // A district with no new order is skipped.
        let mut empty = m.clone();
        let nos: Vec<Key> = empty
            .range(new_order_prefix(1, 1)..prefix_end(&new_order_prefix(1, 1)).unwrap())
            .map(|(k, _)| k.clone())
            .collect();
        for k in nos {
            empty.remove(&k);
        }
        let before_orders: Vec<_> = empty
            .range(order_key(1, 1, 0)..order_key(1, 2, 0))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(run(&mut empty, &del), Outcome::Commit);
        let after_orders: Vec<_> = empty
            .range(order_key(1, 1, 0)..order_key(1, 2, 0))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(before_orders, after_orders);

        // Read-only profiles write nothing.
        let snapshot = m.clone();
        for input in [
            TpccInput::StockLevel { threshold: 20 },
            TpccInput::OrderStatus {
                customer: CustomerSel::ById(7),
            },
            TpccInput::OrderStatus {
                customer: CustomerSel::ByLastName(last_name(0)),
            },
        ] {
            let t = TpccTxn {
                w_id: w,
                d_id: d,
                now: 1,
                input,
            };
            let mut o = Overlay::new(&m);
            assert_eq!(block_on(execute(&mut o, &t)).unwrap(), Outcome::Commit);
            assert!(o.writes.is_empty());
        }
        assert_eq!(m, snapshot);
    }

    /// W_YTD, D_YTD and D_NEXT_O_ID live in rows of their own. NEW_ORDER
    /// reads WAREHOUSE and DISTRICT without writing them, neither reads
    /// nor needs the YTD rows, and increments D_NEXT_O_ID in its own row;
    /// PAYMENT updates only the YTD rows, reads WAREHOUSE and DISTRICT for
    /// H_DATA without writing them, and never touches DISTRICT_NEXT_O_ID.
    /// So neither profile writes a row the other reads.
    #[test]
    fn tpcc_ytd_rows_split_from_warehouse_and_district() {
        let mut m = load(SMALL, 2, 21);
        let (w, d) = (1u32, 4u8);
        let ytd_keys = [warehouse_ytd_key(w), district_ytd_key(w, d)];
        let wd_keys = [warehouse_key(w), district_key(w, d)];
        let next_key = district_next_o_id_key(w, d);

        let new_order = TpccTxn {
            w_id: w,
            d_id: d,
            now: 50,
            input: TpccInput::NewOrder {
                c_id: 3,
                lines: vec![OrderLineInput {
                    i_id: 17,
                    supply_w_id: w,
                    quantity: 2,
                }],
            },
        };
        let mut o = Overlay::new(&m);
        assert_eq!(
            block_on(execute(&mut o, &new_order)).unwrap(),
            Outcome::Commit
        );
        for k in &wd_keys {
            assert!(o.reads.contains(k), "NEW_ORDER reads {k:?}");
            assert!(!o.writes.contains_key(k), "NEW_ORDER must not write {k:?}");
        }
        for k in &ytd_keys {
            assert!(!o.reads.contains(k), "NEW_ORDER must not read {k:?}");
            assert!(!o.writes.contains_key(k));
        }
        assert!(o.reads.contains(&next_key), "NEW_ORDER reads D_NEXT_O_ID");
        let next_before = DistrictNextOId::decode(&m[&next_key]).unwrap().next_o_id;
        assert_eq!(
            o.writes.get(&next_key),
            Some(&Some(
                DistrictNextOId {
                    next_o_id: next_before + 1
                }
                .encode()
            )),
            "NEW_ORDER increments D_NEXT_O_ID in its own row"
        );
        let (no_reads, no_writes) = (o.reads, o.writes);
        // It does not need the YTD rows either, but needs D_NEXT_O_ID's.
        let mut no_ytd = m.clone();
        for k in &ytd_keys {
            no_ytd.remove(k);
        }
        assert_eq!(run(&mut no_ytd, &new_order), Outcome::Commit);
        let mut no_next = m.clone();
        no_next.remove(&next_key);
        assert_eq!(
            run(&mut no_next, &new_order),
            Outcome::Missing("DISTRICT_NEXT_O_ID")
        );

        let pay = TpccTxn {
            w_id: w,
            d_id: d,
            now: 51,
            input: TpccInput::Payment {
                c_w_id: 2,
                c_d_id: 9,
                customer: CustomerSel::ById(5),
                h_amount: 4_321,
                h_uid: 1 << 63 | 5,
            },
        };
        assert_eq!(
            run(&mut no_ytd.clone(), &pay),
            Outcome::Missing("WAREHOUSE_YTD")
        );
        // PAYMENT does not need D_NEXT_O_ID.
        assert_eq!(run(&mut no_next.clone(), &pay), Outcome::Commit);
        let mut o = Overlay::new(&m);
        assert_eq!(block_on(execute(&mut o, &pay)).unwrap(), Outcome::Commit);
        for k in ytd_keys.iter().chain(&wd_keys) {
            assert!(o.reads.contains(k), "PAYMENT reads {k:?}");
        }
        for k in &ytd_keys {
            assert!(o.writes.contains_key(k), "PAYMENT writes {k:?}");
        }
        for k in &wd_keys {
            assert!(!o.writes.contains_key(k), "PAYMENT must not write {k:?}");
        }
        assert!(
            !o.reads.contains(&next_key),
            "PAYMENT must not read DISTRICT_NEXT_O_ID"
        );
        assert!(!o.writes.contains_key(&next_key));
        // Neither writes a row the other reads (its customer and items
        // aside, none are shared here): no false conflict either way.
        for k in &no_reads {
            assert!(!o.writes.contains_key(k), "PAYMENT writes {k:?}");
        }
        for k in &o.reads {
            assert!(!no_writes.contains_key(k), "NEW_ORDER writes {k:?}");
        }

        let w_ytd =
            |m: &BTreeMap<Key, Value>| WarehouseYtd::decode(&m[&warehouse_ytd_key(w)]).unwrap().ytd;
        let d_ytd = |m: &BTreeMap<Key, Value>| {
            DistrictYtd::decode(&m[&district_ytd_key(w, d)])
                .unwrap()
                .ytd
        };
        let (w_before, d_before) = (w_ytd(&m), d_ytd(&m));
        assert_eq!(w_before, SMALL.d_ytd() * i64::from(DISTRICTS));
        assert_eq!(d_before, SMALL.d_ytd());
        let (wh_row, di_row) = (m[&wd_keys[0]].clone(), m[&wd_keys[1]].clone());
        assert_eq!(run(&mut m, &pay), Outcome::Commit);
        assert_eq!((w_ytd(&m), d_ytd(&m)), (w_before + 4_321, d_before + 4_321));
        assert_eq!((&m[&wd_keys[0]], &m[&wd_keys[1]]), (&wh_row, &di_row));
        let h = History::decode(&m[&history_key(w, d, 2, 9, 5, 1 << 63 | 5)]).unwrap();
        let mut want = Warehouse::decode(&wh_row).unwrap().name;
        want.extend_from_slice(b"    ");
        want.extend_from_slice(&District::decode(&di_row).unwrap().name);
        assert_eq!(h.data, want);
        assert_eq!(run(&mut m, &new_order), Outcome::Commit);
        assert_eq!((&m[&wd_keys[0]], &m[&wd_keys[1]]), (&wh_row, &di_row));
        assert_eq!(
            DistrictNextOId::decode(&m[&next_key]).unwrap().next_o_id,
            next_before + 1
        );
        assert!(m.contains_key(&order_key(w, d, next_before)));
        check_consistency(&m, &cfg(2)).unwrap();
    }

    /// A store laid out as the spec's tables are (W_YTD inside WAREHOUSE,
    /// D_YTD and D_NEXT_O_ID inside DISTRICT, none of the rows of their
    /// own) is reported as missing those rows, so the split layout cannot
    /// silently regress.
    #[test]
    fn tpcc_consistency_reports_ytd_left_in_owner_row() {
        let m = load(SMALL, 2, 17);
        check_consistency(&m, &cfg(2)).unwrap();

        // WAREHOUSE 2 with W_YTD appended (the spec's layout), no
        // WAREHOUSE_YTD.
        let mut bad = m.clone();
        let ytd = WarehouseYtd::decode(&bad[&warehouse_ytd_key(2)])
            .unwrap()
            .ytd;
        bad.remove(&warehouse_ytd_key(2));
        let mut old = Warehouse::decode(&bad[&warehouse_key(2)]).unwrap().encode();
        old.extend_from_slice(&ytd.to_be_bytes());
        bad.insert(warehouse_key(2), old);
        let err = check_consistency(&bad, &cfg(2)).unwrap_err();
        assert!(err.contains("WAREHOUSE_YTD 2 missing"), "{err}");

        // DISTRICT (2, 3) with D_YTD before D_NEXT_O_ID (the spec's
        // column order), no DISTRICT_YTD or DISTRICT_NEXT_O_ID.
        let mut bad = m.clone();
        let ytd = DistrictYtd::decode(&bad[&district_ytd_key(2, 3)])
            .unwrap()
            .ytd;
        let next = DistrictNextOId::decode(&bad[&district_next_o_id_key(2, 3)])
            .unwrap()
            .next_o_id;
        bad.remove(&district_ytd_key(2, 3));
        bad.remove(&district_next_o_id_key(2, 3));
        let di = District::decode(&bad[&district_key(2, 3)]).unwrap();
        let mut old = di.encode();
        old.extend_from_slice(&ytd.to_be_bytes());
        old.extend_from_slice(&next.to_be_bytes());
        bad.insert(district_key(2, 3), old);
        let err = check_consistency(&bad, &cfg(2)).unwrap_err();
        assert!(err.contains("DISTRICT_YTD (2, 3) missing"), "{err}");
        assert!(err.contains("DISTRICT_NEXT_O_ID (2, 3) missing"), "{err}");

        // DISTRICT (2, 3) with D_NEXT_O_ID still in it (the layout after
        // the YTD split), no DISTRICT_NEXT_O_ID.
        let mut bad = m.clone();
        bad.remove(&district_next_o_id_key(2, 3));
        let mut old = di.encode();
        old.extend_from_slice(&next.to_be_bytes());
        bad.insert(district_key(2, 3), old);
        let err = check_consistency(&bad, &cfg(2)).unwrap_err();
        assert!(err.contains("DISTRICT_NEXT_O_ID (2, 3) missing"), "{err}");
        assert!(
            err.contains("DISTRICT District(2, 3): value does not decode"),
            "{err}"
        );

        // Only the YTD row gone, the owner row intact: still reported.
        let mut bad = m.clone();
        bad.remove(&warehouse_ytd_key(1));
        let err = check_consistency(&bad, &cfg(2)).unwrap_err();
        assert!(err.contains("WAREHOUSE_YTD 1 missing"), "{err}");
        assert!(!err.contains("WAREHOUSE 1 missing"), "{err}");
        let mut bad = m.clone();
        bad.remove(&district_next_o_id_key(1, 7));
        let err = check_consistency(&bad, &cfg(2)).unwrap_err();
        assert!(err.contains("DISTRICT_NEXT_O_ID (1, 7) missing"), "{err}");
        assert!(!err.contains("DISTRICT (1, 7) missing"), "{err}");
        assert!(err.starts_with("1 TPC-C consistency violations"), "{err}");
    }

    #[test]
    fn tpcc_missing_rows_are_reported() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut seen = BTreeSet::new();
        while seen.len() < 5 {
            let t = next_txn(&cfg(3), 2, &mut rng);
            let mut s = MemStore::default();
            let out = block_on(execute(&mut s, &t)).unwrap();
            match t.kind() {
                // Nothing to deliver in an empty database.
                TpccKind::Delivery => assert_eq!(out, Outcome::Commit),
                TpccKind::NewOrder => assert_eq!(out, Outcome::Missing("WAREHOUSE")),
                // By last name, the index scan finds nobody; by id, the
                // first round of reads finds no WAREHOUSE.
                TpccKind::Payment => match &t.input {
                    TpccInput::Payment {
                        customer: CustomerSel::ByLastName(_),
                        ..
                    } => assert_eq!(out, Outcome::Missing("CUSTOMER")),
                    _ => assert_eq!(out, Outcome::Missing("WAREHOUSE")),
                },
                TpccKind::OrderStatus => assert_eq!(out, Outcome::Missing("CUSTOMER")),
                TpccKind::StockLevel => {
                    assert_eq!(out, Outcome::Missing("DISTRICT_NEXT_O_ID"))
                }
            }
            seen.insert(t.kind());
        }
        // An item inside the id domain that is absent is Missing, not a
        // rollback; an undecodable row is Missing too.
        let mut m = load(SMALL, 1, 4);
        m.remove(&item_key(1, 5));
        let t = TpccTxn {
            w_id: 1,
            d_id: 1,
            now: 1,
            input: TpccInput::NewOrder {
                c_id: 1,
                lines: vec![OrderLineInput {
                    i_id: 5,
                    supply_w_id: 1,
                    quantity: 1,
                }],
            },
        };
        assert_eq!(run(&mut m, &t), Outcome::Missing("ITEM"));
        let di = m.insert(district_key(1, 1), vec![1, 2, 3]).unwrap();
        assert_eq!(run(&mut m, &t), Outcome::Missing("DISTRICT"));
        // D_NEXT_O_ID's row absent or undecodable: NEW_ORDER and
        // STOCK_LEVEL report it; PAYMENT does not read it.
        m.insert(district_key(1, 1), di);
        m.insert(item_key(1, 5), m[&item_key(1, 6)].clone());
        assert_eq!(run(&mut m.clone(), &t), Outcome::Commit);
        let sl = TpccTxn {
            w_id: 1,
            d_id: 1,
            now: 1,
            input: TpccInput::StockLevel { threshold: 15 },
        };
        assert_eq!(run(&mut m.clone(), &sl), Outcome::Commit);
        let pay = TpccTxn {
            w_id: 1,
            d_id: 1,
            now: 1,
            input: TpccInput::Payment {
                c_w_id: 1,
                c_d_id: 1,
                customer: CustomerSel::ById(2),
                h_amount: 100,
                h_uid: 1 << 63,
            },
        };
        for bad in [None, Some(vec![0, 0, 1]), Some(vec![0; 5])] {
            let mut m = m.clone();
            match bad {
                None => m.remove(&district_next_o_id_key(1, 1)),
                Some(v) => m.insert(district_next_o_id_key(1, 1), v),
            };
            assert_eq!(run(&mut m, &t), Outcome::Missing("DISTRICT_NEXT_O_ID"));
            assert_eq!(run(&mut m, &sl), Outcome::Missing("DISTRICT_NEXT_O_ID"));
            assert_eq!(run(&mut m, &pay), Outcome::Commit);
        }
    }

    #[test]
    fn tpcc_consistency_check_catches_corruption() {
        let w = 2u32;
        let mut m = load(SMALL, w, 13);
        let mut rng = SmallRng::seed_from_u64(4);
        for i in 0..500 {
            run(&mut m, &next_txn_in(&SMALL, w, 1 + i % w, &mut rng));
        }
        check_consistency(&m, &cfg(w)).unwrap();
        check_consistency(m.iter().rev(), &cfg(w)).unwrap();

        type Corrupt = Box<dyn Fn(&mut BTreeMap<Key, Value>)>;
        let edit_next_o_id = |f: fn(&mut DistrictNextOId)| -> Corrupt {
            Box::new(move |m: &mut BTreeMap<Key, Value>| {
                let k = district_next_o_id_key(2, 3);
                let mut d = DistrictNextOId::decode(&m[&k]).unwrap();
                f(&mut d);
                m.insert(k, d.encode());
            })
        };
        let cases: Vec<(&str, &str, Corrupt)> = vec![
            (
                "skipped D_NEXT_O_ID increment",
                "3.3.2.2: D_NEXT_O_ID",
                edit_next_o_id(|d| d.next_o_id -= 1),
            ),
            (
                "D_NEXT_O_ID ahead",
                "3.3.2.2: D_NEXT_O_ID",
                edit_next_o_id(|d| d.next_o_id += 1),
            ),
            (
                "missing DISTRICT_NEXT_O_ID",
                "DISTRICT_NEXT_O_ID (2, 3) missing",
                Box::new(|m| {
                    m.remove(&district_next_o_id_key(2, 3));
                }),
            ),
            (
                "undecodable DISTRICT_NEXT_O_ID",
                "DISTRICT_NEXT_O_ID DistrictNextOId(1, 4): value does not decode",
                Box::new(|m| {
                    m.insert(district_next_o_id_key(1, 4), vec![0; 3]);
                }),
            ),
            (
                "undecodable DISTRICT",
                "DISTRICT District(2, 3): value does not decode",
                Box::new(|m| {
                    let k = district_key(2, 3);
                    let mut v = m[&k].clone();
                    v.extend_from_slice(&[0; 4]);
                    m.insert(k, v);
                }),
            ),
            (
                "missing DISTRICT",
                "DISTRICT (1, 9) missing",
                Box::new(|m| {
                    m.remove(&district_key(1, 9));
                }),
            ),
            (
                "D_YTD off",
                "3.3.2.1",
                Box::new(|m| {
                    let k = district_ytd_key(2, 3);
                    let mut d = DistrictYtd::decode(&m[&k]).unwrap();
                    d.ytd += 1;
                    m.insert(k, d.encode());
                }),
            ),
            (
                "W_YTD off",
                "3.3.2.8",
                Box::new(|m| {
                    let k = warehouse_ytd_key(1);
                    let mut w = WarehouseYtd::decode(&m[&k]).unwrap();
                    w.ytd -= 1;
                    m.insert(k, w.encode());
                }),
            ),
            (
                "missing WAREHOUSE_YTD",
                "WAREHOUSE_YTD 1 missing",
                Box::new(|m| {
                    m.remove(&warehouse_ytd_key(1));
                }),
            ),
            (
                "missing DISTRICT_YTD",
                "DISTRICT_YTD (2, 3) missing",
                Box::new(|m| {
                    m.remove(&district_ytd_key(2, 3));
                }),
            ),
            (
                "undecodable DISTRICT_YTD",
                "DISTRICT_YTD DistrictYtd(1, 4): value does not decode",
                Box::new(|m| {
                    m.insert(district_ytd_key(1, 4), vec![0; 4]);
                }),
            ),
            (
                "lost ORDER_LINE",
                "3.3.2.4",
                Box::new(|m| {
                    m.remove(&order_line_key(1, 2, 5, 1));
                }),
            ),
            (
                "NEW_ORDER gap",
                "3.3.2.3",
                Box::new(|m| {
                    let k = m
                        .range(new_order_prefix(1, 5)..prefix_end(&new_order_prefix(1, 5)).unwrap())
                        .nth(3)
                        .map(|(k, _)| k.clone())
                        .unwrap();
                    m.remove(&k);
                }),
            ),
            (
                "lost name-index entry",
                "customer-by-name index",
                Box::new(|m| {
                    let k = m
                        .keys()
                        .find(|k| TpccTable::of_key(k) == Some(TpccTable::CustomerNameIndex))
                        .cloned()
                        .unwrap();
                    m.remove(&k);
                }),
            ),
            (
                "stale orders-by-customer entry",
                "orders-by-customer index",
                Box::new(|m| {
                    let k = m
                        .keys()
                        .find(|k| TpccTable::of_key(k) == Some(TpccTable::OrderCustomerIndex))
                        .cloned()
                        .unwrap();
                    m.remove(&k);
                }),
            ),
            (
                "customer balance off",
                "3.3.2.10",
                Box::new(|m| {
                    let k = customer_key(1, 1, 1);
                    let mut c = Customer::decode(&m[&k]).unwrap();
                    c.balance += 1;
                    m.insert(k, c.encode());
                }),
            ),
            (
                "lost HISTORY row",
                "3.3.2.8",
                Box::new(|m| {
                    m.remove(&history_key(1, 1, 1, 1, 1, 0));
                }),
            ),
            (
                "garbage row",
                "unparsable key",
                Box::new(|m| {
                    m.insert(vec![1, 2, 3], vec![]);
                }),
            ),
            (
                "missing warehouse",
                "WAREHOUSE 2 missing",
                Box::new(|m| {
                    m.remove(&warehouse_key(2));
                }),
            ),
        ];
        for (name, want, corrupt) in cases {
            let mut bad = m.clone();
            corrupt(&mut bad);
            let err = check_consistency(&bad, &cfg(w)).expect_err(name);
            assert!(err.contains(want), "{name}: {err}");
        }
        // Without its DISTRICT_NEXT_O_ID row a district's other conditions
        // are still checked.
        let mut bad = m.clone();
        bad.remove(&district_next_o_id_key(1, 2));
        bad.remove(&order_line_key(1, 2, 5, 1));
        let err = check_consistency(&bad, &cfg(w)).unwrap_err();
        assert!(err.contains("DISTRICT_NEXT_O_ID (1, 2) missing"), "{err}");
        assert!(err.contains("3.3.2.4"), "{err}");
        assert!(!err.contains("without DISTRICT row"), "{err}");
        // Fewer warehouses configured than loaded.
        let err = check_consistency(&m, &cfg(1)).unwrap_err();
        assert!(err.contains("beyond W"), "{err}");
    }
}
