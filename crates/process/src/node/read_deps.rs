//! Disk durability: which log record each read reply depends on.
//!
//! **Problem.** A primary installs a transaction's writes at
//! COMMIT-PRIMARY and can serve them to readers before that record is
//! fsynced. If every node then crashes and the configuration that forms
//! next leaves out the region's backups (they restart late and are
//! suspected), recovery sees no trace of the install and aborts the
//! transaction: a committed reader has seen a write that never happened.
//!
//! **Rule.** No reply that depends on a record goes out before the
//! record is durable here or in every copy any next configuration must
//! recover it from. For reads the record is the one that last changed
//! the key: a READ, single read or VALIDATE reply waits until the log is
//! durable through the last record that changed any key it reports; a
//! SCAN (and a VALIDATE of a range) through the last record that changed
//! its region, since a key a scan does *not* return may have been
//! deleted by that record.
//!
//! **Algorithm.** [`ReadDeps`] maps each key changed recently to the
//! sequence number of the record that changed it, and each region to its
//! newest such record. Changes the participant made in the drain under
//! way have no number yet ([`ReadDeps::PENDING`]): they get the drain's
//! last record's at [`ReadDeps::resolve`]. The drain's dependency, the
//! largest over its read replies, goes to the shell as
//! [`super::NodeEffect::HoldReads`], and [`super::split_held`] holds the
//! read replies until the log is durable through it (at once if it is
//! already). The map is bounded (`meridian_config::MAX_READ_DEPS`): the
//! oldest entries go, and a key without an entry depends on the newest
//! evicted record, which is conservative.
//!
//! **Invariants.** Every key's entry is at least the sequence number of
//! the record that last changed it; `floor` is at least every evicted
//! entry; region entries are at least every entry of their keys.
//!
//! Source: FaRM §4 (a read sees only installed versions), §5.3 (recovery
//! decides from the records replicas hold), issue-independent statement in
//! `docs/internals/durability.md`.

use meridian_wire::{Key, RegionId, TxnRequest};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// The log records read replies depend on (see the module documentation).
#[derive(Debug, Default)]
pub struct ReadDeps {
    /// Key → sequence number of the record that last changed it.
    by_key: HashMap<(RegionId, Key), u64>,
    /// Entries of `by_key` in the order they were set (a key set again
    /// appears again; a stale entry is skipped at eviction).
    order: VecDeque<(u64, RegionId, Key)>,
    /// Region → the newest record that changed one of its keys.
    by_region: BTreeMap<RegionId, u64>,
    /// The newest record of an evicted entry: the dependency of a key
    /// without one.
    floor: u64,
    /// Keys changed in the drain under way (no sequence number yet).
    pending: BTreeSet<(RegionId, Key)>,
    /// Regions changed in the drain under way.
    pending_regions: BTreeSet<RegionId>,
    /// The largest dependency of a read reply in the drain under way
    /// (`PENDING`: one of this drain's own records).
    drain_dep: u64,
}

impl ReadDeps {
    /// A dependency on a record of the drain under way.
    pub const PENDING: u64 = u64::MAX;

    /// Keys the participant changed in the drain under way.
    pub fn changed(&mut self, keys: Vec<(RegionId, Key)>) {
        for (region, key) in keys {
            self.pending_regions.insert(region);
            self.pending.insert((region, key));
        }
    }

    fn key_dep(&self, region: RegionId, key: &[u8]) -> u64 {
        // A lookup by borrowed key needs the owned tuple; keys are short.
        let k = (region, key.to_vec());
        if self.pending.contains(&k) {
            return Self::PENDING;
        }
        self.by_key.get(&k).copied().unwrap_or(self.floor)
    }

    fn region_dep(&self, region: RegionId) -> u64 {
        if self.pending_regions.contains(&region) {
            return Self::PENDING;
        }
        self.by_region.get(&region).copied().unwrap_or(0)
    }

    fn depend(&mut self, dep: u64) {
        self.drain_dep = self.drain_dep.max(dep);
    }

    /// A reply depends on every record journaled so far (the end of the
    /// drain under way).
    pub fn depend_on_drain(&mut self) {
        self.depend(Self::PENDING);
    }

    /// A reply to `r` is about to go: note what it depends on. Requests
    /// that report no data (LOCK, COMMIT-*, ABORT) depend on nothing here.
    pub fn note_reply(&mut self, r: &TxnRequest) {
        match r {
            TxnRequest::Read { region, key, .. } | TxnRequest::ReadLatest { region, key } => {
                let d = self.key_dep(*region, key);
                self.depend(d);
            }
            TxnRequest::Scan { region, .. } => {
                let d = self.region_dep(*region);
                self.depend(d);
            }
            TxnRequest::Validate { keys, ranges, .. } => {
                for (region, key) in keys {
                    let d = self.key_dep(*region, key);
                    self.depend(d);
                }
                for (region, _) in ranges {
                    let d = self.region_dep(*region);
                    self.depend(d);
                }
            }
            TxnRequest::AfterWriteTs { req, .. } => self.note_reply(req),
            _ => {}
        }
    }

    /// The drain under way ends with its last record `last_seq` (the
    /// log's end if it appended none): this drain's changes get that
    /// number, old entries beyond `max_entries` go, and the drain's read
    /// dependency is returned (0: none) and reset.
    pub fn resolve(&mut self, last_seq: u64, max_entries: usize) -> u64 {
        for (region, key) in std::mem::take(&mut self.pending) {
            self.order.push_back((last_seq, region, key.clone()));
            self.by_key.insert((region, key), last_seq);
        }
        for region in std::mem::take(&mut self.pending_regions) {
            self.by_region.insert(region, last_seq);
        }
        while self.by_key.len() > max_entries {
            let Some((seq, region, key)) = self.order.pop_front() else {
                break;
            };
            let k = (region, key);
            if self.by_key.get(&k) == Some(&seq) {
                self.by_key.remove(&k);
                self.floor = self.floor.max(seq);
            }
        }
        // Stale entries (keys set again later) are dropped as they reach
        // the front, so `order` stays within twice the live entries.
        while self.order.len() > 2 * max_entries.max(1) {
            let Some((seq, region, key)) = self.order.pop_front() else {
                break;
            };
            let k = (region, key);
            if self.by_key.get(&k) == Some(&seq) {
                self.by_key.remove(&k);
                self.floor = self.floor.max(seq);
            }
        }
        let dep = std::mem::take(&mut self.drain_dep);
        if dep == Self::PENDING {
            last_seq
        } else {
            dep
        }
    }

    /// Forget everything (a restore: what the disk held is durable).
    pub fn clear(&mut self) {
        *self = ReadDeps::default();
    }

    /// Entries held (for tests and stats).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True if no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Check the invariants of the module documentation that the
    /// structure can see: every region entry covers its keys' entries, and
    /// the pending sets are empty between drains.
    pub fn check_invariants(&self) {
        for ((region, _), seq) in &self.by_key {
            assert!(
                self.by_region.get(region).is_some_and(|r| r >= seq),
                "read deps: {region}'s entry is below one of its keys'"
            );
        }
        assert!(self.pending.is_empty() && self.pending_regions.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::Timestamp;

    fn read(region: u32, key: &[u8]) -> TxnRequest {
        TxnRequest::ReadLatest {
            region: RegionId(region),
            key: key.to_vec(),
        }
    }

    #[test]
    fn a_read_of_a_key_changed_in_the_same_drain_waits_for_the_drain() {
        let mut d = ReadDeps::default();
        d.note_reply(&read(1, b"k"));
        assert_eq!(d.resolve(10, 100), 0, "nothing changed yet");
        d.changed(vec![(RegionId(1), b"k".to_vec())]);
        d.note_reply(&read(1, b"k"));
        assert_eq!(d.resolve(12, 100), 12);
        // Later drains: the key depends on record 12, another key on none.
        d.note_reply(&read(1, b"other"));
        assert_eq!(d.resolve(13, 100), 0);
        d.note_reply(&read(1, b"k"));
        assert_eq!(d.resolve(14, 100), 12);
        d.check_invariants();
    }

    #[test]
    fn a_scan_depends_on_its_region_s_newest_change() {
        let mut d = ReadDeps::default();
        d.changed(vec![(RegionId(2), b"gone".to_vec())]);
        assert_eq!(d.resolve(7, 100), 0);
        let scan = TxnRequest::Scan {
            region: RegionId(2),
            range: meridian_wire::KeyRange {
                start: Vec::new(),
                end: None,
            },
            read_ts: Timestamp(5),
            limit: 10,
        };
        d.note_reply(&scan);
        assert_eq!(d.resolve(8, 100), 7);
        d.note_reply(&read(3, b"x"));
        assert_eq!(d.resolve(9, 100), 0);
    }

    #[test]
    fn an_evicted_key_depends_on_the_newest_evicted_record() {
        let mut d = ReadDeps::default();
        for i in 0..10u64 {
            d.changed(vec![(RegionId(0), vec![i as u8])]);
            d.resolve(i + 1, 4);
        }
        assert_eq!(d.len(), 4);
        // Keys 0..6 were evicted; the newest of them was set at record 6.
        d.note_reply(&read(0, &[0]));
        assert_eq!(d.resolve(11, 4), 6);
        d.note_reply(&read(0, &[9]));
        assert_eq!(d.resolve(12, 4), 10);
        d.check_invariants();
    }
}
