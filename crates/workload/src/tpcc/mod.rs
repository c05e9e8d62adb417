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

mod consistency;
mod input;
mod keys;
mod population;
mod profiles;
mod random;
mod rows;
#[cfg(test)]
mod test_support;

pub use consistency::*;
pub use input::*;
pub use keys::*;
pub use population::*;
pub use profiles::*;
pub use random::*;
pub use rows::*;

use crate::ops::{Key, Value};
use crate::tatp::{digits, letters, prefix_end, shard};

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
