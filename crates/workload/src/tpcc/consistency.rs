//! Consistency checks: TPC-C's consistency conditions (clause 3.3.2) and
//! the agreement of both secondary indexes with their base tables, over
//! rows fed in any order.

use std::collections::BTreeMap;

use super::*;

#[derive(Debug, Default)]
pub(super) struct WarehouseAgg {
    /// Whether the WAREHOUSE row was seen (and decoded).
    row: bool,
    /// W_YTD, from the WAREHOUSE_YTD row.
    ytd: Option<i64>,
    history: i64,
}

#[derive(Debug, Default)]
pub(super) struct DistrictAgg {
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
pub(super) struct CustomerAgg {
    /// (C_BALANCE, C_YTD_PAYMENT, C_LAST, C_FIRST) from the row.
    row: Option<(i64, i64, Vec<u8>, Vec<u8>)>,
    /// Name-index entries pointing at this customer: (last, first).
    names: Vec<(Vec<u8>, Vec<u8>)>,
    history: i64,
}

#[derive(Debug, Default)]
pub(super) struct OrderAgg {
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
pub(super) const MAX_ERRORS: usize = 20;

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
        self.check_present(nw);
        let mut errs = Vec::new();
        for w in self.warehouses.keys() {
            if !(1..=nw).contains(w) {
                errs.push(format!("rows of warehouse {w} beyond W = {nw}"));
            }
        }
        self.check_ytd(&mut errs);
        let (per_d, per_c) = self.check_orders(&mut errs);
        self.check_districts(per_d, &mut errs);
        self.check_customers(&per_c, &mut errs);
        for e in errs {
            self.error(e);
        }
        self.report()
    }

    /// Every warehouse `1..=nw` and its districts exist, with its YTD row
    /// (and the district with its DISTRICT_NEXT_O_ID row).
    fn check_present(&mut self, nw: u32) {
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
    }

    /// 3.3.2.1 and 3.3.2.8 (warehouse), 3.3.2.9 (district).
    fn check_ytd(&self, errs: &mut Vec<String>) {
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
    }

    /// Per-order conditions, folding into districts and customers: returns
    /// the per-district and per-customer sums the later checks compare.
    fn check_orders(
        &self,
        errs: &mut Vec<String>,
    ) -> (
        BTreeMap<(u32, u8), PerDistrict>,
        BTreeMap<(u32, u8, u32), PerCustomer>,
    ) {
        let mut per_d: BTreeMap<(u32, u8), PerDistrict> = BTreeMap::new();
        let mut per_c: BTreeMap<(u32, u8, u32), PerCustomer> = BTreeMap::new();
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
        (per_d, per_c)
    }

    /// 3.3.2.2–3.3.2.4 per district with a DISTRICT row; D_NEXT_O_ID from
    /// its own row (its absence is reported by [`Self::check_present`],
    /// and the other conditions are still checked).
    fn check_districts(&self, mut per_d: BTreeMap<(u32, u8), PerDistrict>, errs: &mut Vec<String>) {
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
    }

    /// Customers: 3.3.2.10, 3.3.2.12, both indexes.
    fn check_customers(
        &self,
        per_c: &BTreeMap<(u32, u8, u32), PerCustomer>,
        errs: &mut Vec<String>,
    ) {
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
    }

    /// `Ok` if no error was found, else the report of the errors kept and
    /// the count of the rest.
    fn report(self) -> Result<(), String> {
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

/// Per-district sums over the orders, for 3.3.2.2–3.3.2.4.
#[derive(Default)]
struct PerDistrict {
    max_o: Option<u32>,
    no_min: Option<u32>,
    no_max: Option<u32>,
    no_count: u64,
    sum_ol_cnt: u64,
    ol_rows: u64,
}

/// Per customer: (delivered OL_AMOUNT, newest o_id by ORDER rows, newest
/// o_id by index entries).
type PerCustomer = (i64, Option<u32>, Option<u32>);

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
    use super::*;
    use crate::tpcc::test_support::*;

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

    // Over 150 lines: most of it is the table of corruption cases, one
    // entry per condition the check must catch.
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
