//! Transaction profiles: the database work of NEW_ORDER, PAYMENT,
//! ORDER_STATUS, DELIVERY and STOCK_LEVEL against an open transaction
//! (clauses 2.4.2, 2.5.2, 2.6.2, 2.7.4, 2.8.2).

use std::collections::{BTreeMap, BTreeSet};

use crate::ops::TxnOps;

use super::*;

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

pub(super) async fn read<T: TxnOps, R>(
    t: &mut T,
    key: &[u8],
    decode: fn(&[u8]) -> Option<R>,
) -> Result<Option<R>, T::Error> {
    Ok(t.get(key).await?.and_then(|v| decode(&v)))
}

/// The rows with keys starting with `prefix`, at most `limit`.
pub(super) async fn scan_prefix<T: TxnOps>(
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
pub(super) async fn customer_id<T: TxnOps>(
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
pub(super) async fn select_customer<T: TxnOps>(
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
pub(super) async fn order_lines<T: TxnOps>(
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
    let home = Home {
        w: txn.w_id,
        d: txn.d_id,
        now: txn.now.max(1),
    };
    match &txn.input {
        TpccInput::NewOrder { c_id, lines } => new_order(t, home, c_id, lines).await,
        TpccInput::Payment {
            c_w_id,
            c_d_id,
            customer,
            h_amount,
            h_uid,
        } => payment(t, home, c_w_id, c_d_id, customer, h_amount, h_uid).await,
        TpccInput::OrderStatus { customer } => order_status(t, home, customer).await,
        TpccInput::Delivery { carrier_id } => delivery(t, home, carrier_id).await,
        TpccInput::StockLevel { threshold } => stock_level(t, home, threshold).await,
    }
}

/// The home warehouse and district of a profile, and the time it stamps
/// its rows with (never 0, which means NULL).
#[derive(Clone, Copy)]
struct Home {
    w: u32,
    d: u8,
    now: u64,
}

/// NEW_ORDER (2.4.2); see [`execute`].
async fn new_order<T: TxnOps>(
    t: &mut T,
    home: Home,
    c_id: &u32,
    lines: &[OrderLineInput],
) -> Result<Outcome, T::Error> {
    let Home { w, d, now } = home;
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

/// PAYMENT (2.5.2); see [`execute`].
async fn payment<T: TxnOps>(
    t: &mut T,
    home: Home,
    c_w_id: &u32,
    c_d_id: &u8,
    customer: &CustomerSel,
    h_amount: &u32,
    h_uid: &u64,
) -> Result<Outcome, T::Error> {
    let Home { w, d, now } = home;
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

/// ORDER_STATUS (2.6.2); see [`execute`].
async fn order_status<T: TxnOps>(
    t: &mut T,
    home: Home,
    customer: &CustomerSel,
) -> Result<Outcome, T::Error> {
    let Home { w, d, .. } = home;
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

/// DELIVERY (2.7.4), over all 10 districts; see [`execute`].
async fn delivery<T: TxnOps>(t: &mut T, home: Home, carrier_id: &u8) -> Result<Outcome, T::Error> {
    let Home { w, now, .. } = home;
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

/// STOCK_LEVEL (2.8.2); see [`execute`].
async fn stock_level<T: TxnOps>(
    t: &mut T,
    home: Home,
    threshold: &u16,
) -> Result<Outcome, T::Error> {
    let Home { w, d, .. } = home;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::test_support::*;

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

    // Over 150 lines: one scenario over one database, each profile run on
    // the rows the previous ones left, so its steps share one test.
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
}
