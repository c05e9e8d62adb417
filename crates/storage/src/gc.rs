//! Time-window GC of a region replica (FaRMv2 §4.5): the safe point
//! advances and frees versions no reader at or above it needs.

use crate::RegionStore;
use meridian_wire::Timestamp;

impl RegionStore {
    /// Advance the GC safe point to `safe_point` (never backwards) and free
    /// versions no reader at or above it can need.
    pub fn gc(&mut self, safe_point: Timestamp) {
        if safe_point <= self.safe_point {
            return;
        }
        self.safe_point = safe_point;
        while let Some((ts, _)) = self.gc_queue.front() {
            if *ts > safe_point {
                break;
            }
            let Some((_, key)) = self.gc_queue.pop_front() else {
                break;
            };
            let Some(obj) = self.objects.get_mut(&key[..]) else {
                continue;
            };
            // Keep the newest version <= safe point and everything after it.
            if let Some(keep) = obj.versions.iter().rposition(|v| v.ts <= safe_point) {
                if keep > 0 {
                    obj.versions.drain(..keep);
                    obj.floor_ts = obj.floor_ts.max(obj.versions[0].ts);
                    self.stats.versions_freed += keep as u64;
                }
                if obj.versions.len() == 1 && obj.versions[0].value.is_none() && obj.lock.is_none()
                {
                    self.objects.remove(&key[..]);
                    self.stats.objects_removed += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ts, tx};
    use meridian_wire::Conflict;

    #[test]
    fn gc_frees_old_versions_and_too_old_reads_abort() {
        let mut s = RegionStore::new(3);
        for i in 1..=5u64 {
            s.install(tx(i), b"k", ts(i * 10), Some(vec![i as u8]));
        }
        // Chain bound: only 30, 40, 50 remain; a read at 25 must abort.
        assert_eq!(s.read(b"k", ts(25)), Err(Conflict::TooOld));
        assert_eq!(s.read(b"k", ts(35)).unwrap().unwrap().value, vec![3]);
        s.gc(ts(45));
        assert_eq!(s.object(b"k").unwrap().versions.len(), 2);
        assert_eq!(s.read(b"k", ts(44)), Err(Conflict::TooOld));
        assert_eq!(s.read(b"k", ts(46)).unwrap().unwrap().value, vec![4]);
        s.install(tx(9), b"k", ts(60), None);
        s.gc(ts(70));
        assert!(s.object(b"k").is_none(), "tombstone collected");
        assert_eq!(s.read(b"k", ts(71)).unwrap(), None);
        s.gc(ts(1)); // never backwards
        assert_eq!(s.safe_point(), ts(70));
        s.check_invariants();
    }
}
