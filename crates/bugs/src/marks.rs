//! Coverage marks: which marked code paths ran on this thread.
//!
//! The simulator runs every process of a run on the test's own thread, so
//! counting per thread keeps tests that run in parallel apart.

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    static MARKS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Count one hit of the mark `name` on this thread (called by
/// [`mark!`](crate::mark)).
pub fn hit(name: &'static str) {
    MARKS.with(|m| *m.borrow_mut().entry(name).or_default() += 1);
}

/// How often the mark `name` was hit on this thread so far.
pub fn count(name: &str) -> u64 {
    MARKS.with(|m| m.borrow().get(name).copied().unwrap_or(0))
}

/// Every mark hit on this thread so far, with its count (in name
/// order): which windows a run reached.
pub fn snapshot() -> BTreeMap<&'static str, u64> {
    MARKS.with(|m| m.borrow().clone())
}

/// A watch on one mark, from now on: `let w = watch("name"); ...;
/// w.assert_hit();`.
#[must_use = "a watch asserts nothing until asked"]
pub struct Watch {
    name: &'static str,
    start: u64,
}

/// Watch the mark `name` from now on.
pub fn watch(name: &'static str) -> Watch {
    Watch {
        name,
        start: count(name),
    }
}

impl Watch {
    /// Hits of the mark since the watch began.
    pub fn hits(&self) -> u64 {
        count(self.name) - self.start
    }

    /// Panics unless the mark was hit since the watch began.
    pub fn assert_hit(&self) {
        assert!(
            self.hits() > 0,
            "the code path marked {:?} never ran: the scenario missed its window",
            self.name
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_counts_hits_since_it_began() {
        hit("a");
        let w = watch("a");
        assert_eq!(w.hits(), 0);
        hit("a");
        hit("b");
        assert_eq!(w.hits(), 1);
        w.assert_hit();
    }
}
