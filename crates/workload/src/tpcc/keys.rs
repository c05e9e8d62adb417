//! TPC-C's key layout: the key builders of every table and index, the
//! table a key belongs to, and a key's parse into its ids.

use super::*;

pub(super) fn wkey(tag: u8, w: u32, cap: usize) -> Key {
    let mut k = Vec::with_capacity(cap);
    k.push(shard(u64::from(w)));
    k.push(tag);
    k.extend_from_slice(&w.to_be_bytes());
    k
}

pub(super) fn wdkey(tag: u8, w: u32, d: u8, cap: usize) -> Key {
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
pub(super) enum ParsedKey<'a> {
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
pub(super) fn parse_key(k: &[u8]) -> Option<ParsedKey<'_>> {
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
