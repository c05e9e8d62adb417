//! Transaction inputs: the five profiles, the mix of clause 5.2.3, and
//! the inputs each profile draws (clauses 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1).

use rand::Rng;

use super::*;

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
pub(super) fn other_warehouse(home: u32, warehouses: u32, rng: &mut impl Rng) -> u32 {
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

pub(super) fn draw_customer(dims: &Dims, rng: &mut impl Rng) -> CustomerSel {
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

pub(super) fn next_txn_in(
    dims: &Dims,
    warehouses: u32,
    home_w: u32,
    rng: &mut impl Rng,
) -> TpccTxn {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::test_support::*;

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
}
