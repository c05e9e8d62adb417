//! Row codecs: the value layout of every TPC-C table, each row type with
//! its `encode` and `decode`, and the cursor they decode with.

use super::*;

/// A cursor over an encoded value.
pub(super) struct Reader<'a> {
    v: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(v: &'a [u8]) -> Self {
        Reader { v, at: 0 }
    }

    pub(super) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.v.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    pub(super) fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        Some(self.arr::<1>()?[0])
    }

    pub(super) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.arr()?))
    }

    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.arr()?))
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.arr()?))
    }

    pub(super) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.arr()?))
    }

    pub(super) fn str8(&mut self) -> Option<Vec<u8>> {
        let n = usize::from(self.u8()?);
        Some(self.bytes(n)?.to_vec())
    }

    pub(super) fn str16(&mut self) -> Option<Vec<u8>> {
        let n = usize::from(self.u16()?);
        Some(self.bytes(n)?.to_vec())
    }

    /// Bytes up to the next 0, consuming the 0.
    pub(super) fn until_zero(&mut self) -> Option<&'a [u8]> {
        let rest = self.v.get(self.at..)?;
        let n = rest.iter().position(|&b| b == 0)?;
        let s = self.bytes(n)?;
        self.at += 1;
        Some(s)
    }

    pub(super) fn end(&self) -> Option<()> {
        (self.at == self.v.len()).then_some(())
    }
}

/// Appends a string of at most 255 bytes with a 1-byte length (longer
/// strings are truncated).
pub(super) fn put_str8(v: &mut Vec<u8>, s: &[u8]) {
    let n = s.len().min(255);
    v.push(n as u8);
    v.extend_from_slice(&s[..n]);
}

/// Appends a string of at most 65,535 bytes with a 2-byte length.
pub(super) fn put_str16(v: &mut Vec<u8>, s: &[u8]) {
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

/// The codec of a row holding a name, an [`Address`] and a tax rate (the
/// WAREHOUSE and DISTRICT rows, which share their layout): `encode` and
/// `decode`.
macro_rules! named_address_row {
    ($name:ident) => {
        impl $name {
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
                let row = $name {
                    name: r.str8()?,
                    address: Address::read(&mut r)?,
                    tax: r.u16()?,
                };
                r.end()?;
                Some(row)
            }
        }
    };
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

named_address_row!(Warehouse);

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

named_address_row!(District);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::test_support::*;

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
}
