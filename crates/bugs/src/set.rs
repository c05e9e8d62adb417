//! The [`Bug`] list and the [`Bugs`] set with its hit counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

macro_rules! bugs {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// One deliberately broken rule. Each names the rule it breaks and
        /// where the rule lives.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Bug {
            $($(#[$doc])* $name,)*
        }

        impl Bug {
            /// Every bug, in declaration order.
            pub const ALL: &'static [Bug] = &[$(Bug::$name,)*];
        }
    };
}

bugs! {
    /// Simulator shell: a participant's reply is sent before the log
    /// record it depends on is durable (the node shells' fsync-before-reply
    /// rule).
    AckBeforeFsync,
    /// Simulator shell: a COMMIT-PRIMARY's early `Installed` answer is
    /// taken as its durable Ack.
    InstalledIsAck,
    /// Simulator shell: a clock master's lease keeps handing out master
    /// time after the master was withdrawn (FaRMv2 §4.3).
    MasterClockKept,
    /// Simulator shell: clients leave the `read_ts` uncertainty wait to the
    /// nodes, and the nodes do not wait either (FaRMv2 §4.2).
    ReadsUnwaited,
    /// Simulator shell: READ, SCAN, single-read and VALIDATE replies go
    /// before the record that changed what they show is durable at the
    /// primary (`NodeEffect::HoldReads` ignored): the rule before
    /// whole-cluster crashes were considered, when the backups'
    /// COMMIT-BACKUP records were taken for the durable copies.
    ReadsBeforeInstallDurable,
    /// Simulator shell: a granted LOCK's `LockDurable` goes with its
    /// LOCK-REPLY, before the LOCK record is durable, so the coordinator
    /// sends COMMIT-PRIMARY with the record only in memory at the primary
    /// (with `ReadsBeforeInstallDurable`, the rule before whole-cluster
    /// crashes were considered).
    LockDurableEarly,
    /// `NodeProcess`: a READ that waited for a lock reads past it
    /// (`RegionStore::read_past_locks`), missing a holder that commits at
    /// or below `read_ts`.
    LockWaitsReadPastLocks,
    /// `NodeProcess`: a single read (`ReadLatest`) that meets a lock
    /// answers the newest version anyway.
    LatestReadsPastLocks,
    /// `NodeProcess`: a restored node re-added with only filling replicas
    /// keeps its old log (the vacuous "holds every complete replica it
    /// had" for an empty set; FaRM §5.2 precise membership).
    ReaddedKeepsLog,
    /// `NodeProcess`: held VALIDATEs and COMMIT-BACKUPs
    /// (`TxnRequest::AfterWriteTs`) are served at once, before `write_ts`
    /// has passed (FaRMv2 §4.2's write uncertainty wait).
    WritesUnwaited,
    /// As [`Bug::WritesUnwaited`], for held VALIDATEs only.
    ValidatesUnwaited,
    /// `NodeProcess`: a node restored from disk keeps a running recovery
    /// flow for the configuration it was restored in, so it answers
    /// REQUEST-VOTE without lock recovery (FaRM §5.3).
    RestoredRecoveryVotes,
    /// `Participant`: a restored participant does not block its primary
    /// regions until lock recovery in the first configuration it applies.
    RestoreForgotten,
    /// `Participant`: every LOCK skips `LockAtTs`'s version check, as if
    /// every write were blind (FaRMv2 §4.2 validation by lock).
    LocksUnchecked,
    /// `Participant`: a new replica merges copied chunks without the fill
    /// fence (`RegionStore::merge_chunk_unfenced`; FaRM §5.4).
    RefillUnfenced,
}

/// A set of [`Bug`]s with one hit counter each.
///
/// Clones share the counters, so one set given to every process of a
/// simulation (and to their restarted incarnations) counts the hits of the
/// whole run. The default is the empty set.
#[derive(Clone, Debug, Default)]
pub struct Bugs {
    on: u64,
    hits: Arc<Hits>,
}

#[derive(Debug)]
struct Hits([AtomicU64; 64]);

impl Default for Hits {
    fn default() -> Self {
        Hits(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Bugs {
    /// The empty set: every rule correct.
    pub fn none() -> Self {
        Bugs::default()
    }

    /// The set of `bugs`.
    pub fn of(bugs: &[Bug]) -> Self {
        let mut b = Bugs::default();
        for &x in bugs {
            b.on |= 1 << x as u64;
        }
        b
    }

    /// True when no bug is in the set.
    pub fn is_empty(&self) -> bool {
        self.on == 0
    }

    /// True when `bug` is in the set (counts nothing).
    pub fn on(&self, bug: Bug) -> bool {
        self.on & (1 << bug as u64) != 0
    }

    /// Count one hit of `bug`; always true (for [`bug!`](crate::bug)).
    pub fn count(&self, bug: Bug) -> bool {
        self.hits.0[bug as usize].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// How often `bug`'s broken branch ran, over every clone of this set.
    pub fn hits(&self, bug: Bug) -> u64 {
        self.hits.0[bug as usize].load(Ordering::Relaxed)
    }

    /// The bugs in the set, in declaration order.
    pub fn list(&self) -> Vec<Bug> {
        Bug::ALL.iter().copied().filter(|&b| self.on(b)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_hit_counts_and_only_set_bugs_fire() {
        let bugs = Bugs::of(&[Bug::LocksUnchecked]);
        let clone = bugs.clone();
        assert!(clone.on(Bug::LocksUnchecked));
        assert!(!clone.on(Bug::RefillUnfenced));
        clone.count(Bug::LocksUnchecked);
        assert_eq!(bugs.hits(Bug::LocksUnchecked), 1);
        assert_eq!(bugs.list(), vec![Bug::LocksUnchecked]);
        assert!(Bugs::none().is_empty());
        assert!(Bug::ALL.len() <= 64);
    }
}
