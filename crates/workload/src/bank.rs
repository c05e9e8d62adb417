//! # Bank and register workloads (checked workloads)
//!
//! **Bank.** `accounts` accounts start with `initial_balance` each. A
//! transfer reads two accounts and moves a random amount between them if the
//! source can afford it; an audit reads every account in one read-only
//! transaction and must see exactly `accounts × initial_balance`. A lost
//! update, a fractured snapshot or a non-serializable interleaving shows up
//! as a wrong audit total. Audits that abort are checked by the history
//! checker instead (opacity).
//!
//! **Register.** A contended read-write mix over a few keys: each
//! transaction reads some keys and blindly writes others. It produces the
//! write-skew and anti-dependency patterns that only validation prevents, so
//! a protocol bug shows up as a dependency cycle in the checker.
//!
//! **Values.** Every value written starts with a unique 8-byte little-endian
//! *write id* (see [`write_id`]), so the checker can tell which write a read
//! observed (Elle's rw-register approach). The bank appends the balance as an
//! `i64`.

use crate::ops::{Key, Program, Step, Value};
use rand::Rng;

/// Key of bank account `i`: shard byte, `b'B'`, `i` big-endian.
pub fn account_key(i: u32) -> Key {
    let mut k = vec![crate::tatp::shard(i as u64), b'B'];
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Key of register `i`: shard byte, `b'R'`, `i` big-endian.
pub fn register_key(i: u32) -> Key {
    let mut k = vec![crate::tatp::shard(i as u64 ^ 0x5555), b'R'];
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// The history record of a bulk load of `rows` (one committed writer of
/// every row that carries a write id), from `invoke_ns` to `complete_ns`,
/// at `read_ts` / `write_ts`.
pub fn load_record(
    rows: &[(Key, Value)],
    invoke_ns: u64,
    complete_ns: u64,
    read_ts: u64,
    write_ts: u64,
) -> meridian_checker::TxnRecord {
    meridian_checker::TxnRecord {
        complete_ns,
        writes: rows
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), write_id(v)?)))
            .collect(),
        outcome: meridian_checker::Outcome::Committed,
        read_ts: Some(read_ts),
        write_ts: Some(write_ts),
        ..meridian_checker::TxnRecord::invoked(u64::MAX, invoke_ns)
    }
}

/// The write id at the front of a checked workload's value.
pub fn write_id(value: &[u8]) -> Option<u64> {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

/// Encode a bank account value.
pub fn encode_account(write_id: u64, balance: i64) -> Value {
    let mut v = write_id.to_le_bytes().to_vec();
    v.extend_from_slice(&balance.to_le_bytes());
    v
}

/// Decode a bank account's balance; `None` if the value is malformed.
pub fn balance(value: &[u8]) -> Option<i64> {
    value
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_le_bytes)
}

/// Hands out unique write ids for one client: `client << 40 | n`.
#[derive(Clone, Debug)]
pub struct WriteIds {
    client: u64,
    next: u64,
}

impl WriteIds {
    /// Ids for `client` (must be unique among clients of one history).
    pub fn new(client: u64) -> Self {
        WriteIds { client, next: 1 }
    }

    /// The next unused id.
    pub fn next_id(&mut self) -> u64 {
        let id = (self.client << 40) | self.next;
        self.next += 1;
        id
    }
}

/// Bank parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BankConfig {
    /// Number of accounts.
    pub accounts: u32,
    /// Starting balance of each.
    pub initial_balance: i64,
    /// Share of audits among transactions, percent.
    pub audit_percent: u32,
}

impl BankConfig {
    /// The exact total every audit must see.
    pub fn total(&self) -> i64 {
        self.accounts as i64 * self.initial_balance
    }

    /// The initial rows (write ids `1..=accounts` of client 0).
    pub fn population(&self) -> Vec<(Key, Value)> {
        (0..self.accounts)
            .map(|i| {
                (
                    account_key(i),
                    encode_account(i as u64 + 1, self.initial_balance),
                )
            })
            .collect()
    }
}

/// A transfer of up to `max_amount` from `from` to `to`.
#[derive(Clone, Debug)]
pub struct Transfer {
    from: u32,
    to: u32,
    amount: i64,
    ids: [u64; 2],
    state: u8,
    from_balance: i64,
    to_balance_after: i64,
}

impl Program for Transfer {
    fn next(&mut self, last: Option<Option<Value>>) -> Step {
        match self.state {
            0 => {
                self.state = 1;
                Step::Get(account_key(self.from))
            }
            1 => {
                self.from_balance = last.flatten().as_deref().and_then(balance).unwrap_or(0);
                self.state = 2;
                Step::Get(account_key(self.to))
            }
            2 => {
                let to_balance = last.flatten().as_deref().and_then(balance).unwrap_or(0);
                if self.from_balance < self.amount {
                    self.state = 5;
                    return Step::Commit; // nothing to do: a read-only commit
                }
                self.state = 3;
                self.to_balance_after = to_balance + self.amount;
                Step::Put(
                    account_key(self.from),
                    encode_account(self.ids[0], self.from_balance - self.amount),
                )
            }
            3 => {
                self.state = 4;
                Step::Put(
                    account_key(self.to),
                    encode_account(self.ids[1], self.to_balance_after),
                )
            }
            _ => Step::Commit,
        }
    }
}

/// An audit: read every account, check the total on commit.
#[derive(Clone, Debug)]
pub struct Audit {
    accounts: u32,
    expected: i64,
    next: u32,
    sum: i64,
    malformed: bool,
}

impl Program for Audit {
    fn next(&mut self, last: Option<Option<Value>>) -> Step {
        if self.next > 0 {
            match last.flatten().as_deref().map(balance) {
                Some(Some(b)) => self.sum += b,
                _ => self.malformed = true,
            }
        }
        if self.next == self.accounts {
            return Step::Commit;
        }
        self.next += 1;
        Step::Get(account_key(self.next - 1))
    }

    fn on_commit(&mut self) -> Result<(), String> {
        if self.malformed {
            return Err("audit read a missing or malformed account".into());
        }
        if self.sum != self.expected {
            return Err(format!(
                "audit saw total {} instead of {}",
                self.sum, self.expected
            ));
        }
        Ok(())
    }
}

/// Either bank program.
#[derive(Clone, Debug)]
pub enum BankTxn {
    /// A transfer.
    Transfer(Transfer),
    /// An audit.
    Audit(Audit),
}

impl BankTxn {
    /// True for audits.
    pub fn is_audit(&self) -> bool {
        matches!(self, BankTxn::Audit(_))
    }
}

impl Program for BankTxn {
    fn next(&mut self, last: Option<Option<Value>>) -> Step {
        match self {
            BankTxn::Transfer(t) => t.next(last),
            BankTxn::Audit(a) => a.next(last),
        }
    }
    fn on_commit(&mut self) -> Result<(), String> {
        match self {
            BankTxn::Transfer(t) => t.on_commit(),
            BankTxn::Audit(a) => a.on_commit(),
        }
    }
}

impl BankConfig {
    /// Draw the next bank transaction.
    pub fn next_txn(&self, ids: &mut WriteIds, rng: &mut impl Rng) -> BankTxn {
        if rng.gen_range(0..100) < self.audit_percent || self.accounts < 2 {
            return BankTxn::Audit(Audit {
                accounts: self.accounts,
                expected: self.total(),
                next: 0,
                sum: 0,
                malformed: false,
            });
        }
        let from = rng.gen_range(0..self.accounts);
        let mut to = rng.gen_range(0..self.accounts - 1);
        if to >= from {
            to += 1;
        }
        BankTxn::Transfer(Transfer {
            from,
            to,
            amount: rng.gen_range(1..=self.initial_balance.max(1) / 2 + 1),
            ids: [ids.next_id(), ids.next_id()],
            state: 0,
            from_balance: 0,
            to_balance_after: 0,
        })
    }
}

/// Contended register workload parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterConfig {
    /// Number of registers.
    pub keys: u32,
    /// Most reads per transaction.
    pub max_reads: u32,
    /// Most writes per transaction.
    pub max_writes: u32,
}

/// A register transaction: reads, then blind writes of fresh ids.
pub type RegisterTxn = crate::ops::Script;

impl RegisterConfig {
    /// Draw the next register transaction.
    pub fn next_txn(&self, ids: &mut WriteIds, rng: &mut impl Rng) -> RegisterTxn {
        let mut steps = Vec::new();
        for _ in 0..rng.gen_range(1..=self.max_reads.max(1)) {
            steps.push(Step::Get(register_key(rng.gen_range(0..self.keys))));
        }
        for _ in 0..rng.gen_range(0..=self.max_writes) {
            steps.push(Step::Put(
                register_key(rng.gen_range(0..self.keys)),
                ids.next_id().to_le_bytes().to_vec(),
            ));
        }
        steps.push(Step::Commit);
        crate::ops::Script::new(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::BTreeMap;

    /// Run programs serially against a map: audits must always pass.
    #[test]
    fn serial_bank_keeps_the_total() {
        let cfg = BankConfig {
            accounts: 5,
            initial_balance: 100,
            audit_percent: 20,
        };
        let mut db: BTreeMap<Key, Value> = cfg.population().into_iter().collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut ids = WriteIds::new(1);
        let mut audits = 0;
        for _ in 0..2000 {
            let mut p = cfg.next_txn(&mut ids, &mut rng);
            let mut buf: BTreeMap<Key, Value> = BTreeMap::new();
            let mut last = None;
            loop {
                match p.next(last.take()) {
                    Step::Get(k) => last = Some(buf.get(&k).or(db.get(&k)).cloned()),
                    Step::Put(k, v) => {
                        buf.insert(k, v);
                    }
                    Step::Commit => break,
                    other => unreachable!("{other:?}"),
                }
            }
            db.extend(buf);
            audits += p.is_audit() as u32;
            p.on_commit().unwrap();
        }
        assert!(audits > 200);
        let total: i64 = db.values().map(|v| balance(v).unwrap()).sum();
        assert_eq!(total, cfg.total());
    }

    #[test]
    fn audit_detects_a_wrong_total() {
        let cfg = BankConfig {
            accounts: 2,
            initial_balance: 10,
            audit_percent: 100,
        };
        let mut p = cfg.next_txn(
            &mut WriteIds::new(1),
            &mut rand::rngs::StdRng::seed_from_u64(1),
        );
        assert_eq!(p.next(None), Step::Get(account_key(0)));
        assert_eq!(
            p.next(Some(Some(encode_account(1, 10)))),
            Step::Get(account_key(1))
        );
        assert_eq!(p.next(Some(Some(encode_account(2, 11)))), Step::Commit);
        assert!(p.on_commit().is_err());
    }
}
