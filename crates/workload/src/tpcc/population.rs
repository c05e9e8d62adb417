//! The loader: the initial database of clause 4.3, streamed warehouse by
//! warehouse and generated per unit so any warehouse range is reproducible.

use std::collections::VecDeque;
use std::ops::RangeInclusive;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::*;

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One RNG per generated unit (row group), so that any warehouse range is
/// generated identically on its own.
pub(super) fn unit_rng(seed: u64, tag: u8, w: u32, d: u8, id: u32) -> SmallRng {
    let mut x = splitmix(seed ^ u64::from(tag));
    x = splitmix(x ^ u64::from(w));
    x = splitmix(x ^ (u64::from(d) << 32 | u64::from(id)));
    SmallRng::seed_from_u64(x)
}

/// Item `i` as every warehouse's copy holds it (depends on the seed and
/// i_id only).
pub(super) fn gen_item(seed: u64, i: u32) -> Item {
    let mut rng = unit_rng(seed, TAG_ITEM, 0, 0, i);
    Item {
        im_id: rng.gen_range(1..=10_000),
        name: a_string(&mut rng, 14, 24),
        price: rng.gen_range(100..=10_000),
        data: data_with_original(&mut rng),
    }
}

pub(super) fn gen_stock(seed: u64, w: u32, i: u32) -> Stock {
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
pub(super) enum Phase {
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
    pub(super) fn new(dims: Dims, seed: u64, ws: RangeInclusive<u32>) -> Self {
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
            phone: digits(&mut rng),
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

pub(super) fn count_hint_per_warehouse(dims: &Dims) -> u64 {
    let per_district = u64::from(dims.customers) * 5
        + u64::from(dims.new_orders)
        + u64::from(dims.customers) * u64::from(MIN_OL_CNT + MAX_OL_CNT) / 2;
    // WAREHOUSE and WAREHOUSE_YTD; per district DISTRICT, DISTRICT_YTD and
    // DISTRICT_NEXT_O_ID.
    2 + u64::from(DISTRICTS) * (3 + per_district) + 2 * u64::from(dims.items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::test_support::*;

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
}
