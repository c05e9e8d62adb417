//! # The coordination service: where configurations live (FaRM §3, §5.2 step 3)
//!
//! **Problem.** Exactly one configuration may follow each one, even when
//! several machines try to reconfigure at once, and a minority partition
//! must not be able to install one. FaRM keeps the configuration in
//! Zookeeper and uses znode sequence numbers as a compare-and-swap on the
//! configuration identifier.
//!
//! **Design.** The reconfiguration engine never talks to the service
//! itself: it emits [`crate::reconfig::ReconfigOutput::Cas`] and its shell
//! answers through [`crate::reconfig::Reconfig::on_cas`]. A shell reaches
//! the service through [`CoordinationService`]. [`MemoryService`] is the
//! linearizable register the simulator and the tests use (the simulator
//! decides reachability itself). Real nodes use the Raft group (raft-rs)
//! embedded in the first 1, 3 or 5 nodes instead ([`crate::raft_service`]),
//! reached through messages rather than this trait.
//!
//! **Invariants.** The stored identifier only grows, by exactly one per
//! successful compare-and-swap.

use meridian_config::Configuration;
use meridian_wire::ConfigId;

/// A replicated store of the current configuration with compare-and-swap
/// on its identifier.
pub trait CoordinationService {
    /// The current configuration.
    fn current(&self) -> Configuration;

    /// Replace the configuration if its identifier is still `expected` and
    /// `proposed` is its successor (identifier `expected + 1`).
    ///
    /// Errors: the current configuration, when it is not `expected` (someone
    /// else won) or `proposed` is not its direct successor.
    fn compare_and_swap(
        &mut self,
        expected: ConfigId,
        proposed: Configuration,
    ) -> Result<(), Box<Configuration>>;

    /// The stored time bound, global ns (0 at first): no clock master hands
    /// out time at or past it (FaRMv2 §4.3's monotonicity across restarts).
    fn time_bound_ns(&self) -> u64;

    /// Raise the stored time bound to at least `to_ns`; returns the bound
    /// now stored (it never decreases).
    fn raise_time_bound(&mut self, to_ns: u64) -> u64;
}

/// A linearizable in-memory register (simulator, tests, one-node clusters).
#[derive(Clone, Debug)]
pub struct MemoryService {
    current: Configuration,
    swaps: u64,
    time_bound_ns: u64,
}

impl MemoryService {
    /// A service holding `initial`.
    pub fn new(initial: Configuration) -> Self {
        MemoryService {
            current: initial,
            swaps: 0,
            time_bound_ns: 0,
        }
    }

    /// Successful compare-and-swaps so far.
    pub fn swaps(&self) -> u64 {
        self.swaps
    }
}

impl CoordinationService for MemoryService {
    fn current(&self) -> Configuration {
        self.current.clone()
    }

    fn compare_and_swap(
        &mut self,
        expected: ConfigId,
        proposed: Configuration,
    ) -> Result<(), Box<Configuration>> {
        if self.current.id() != expected || proposed.id().0 != expected.0 + 1 {
            return Err(Box::new(self.current.clone()));
        }
        self.current = proposed;
        self.swaps += 1;
        Ok(())
    }

    fn time_bound_ns(&self) -> u64 {
        self.time_bound_ns
    }

    fn raise_time_bound(&mut self, to_ns: u64) -> u64 {
        self.time_bound_ns = self.time_bound_ns.max(to_ns);
        self.time_bound_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_wire::NodeId;

    #[test]
    fn only_one_successor_is_installed() {
        let c1 = Configuration::local(3, 7000, 3, 12, std::path::Path::new("/tmp/c"));
        let mut svc = MemoryService::new(c1.clone());
        let alive = |ids: &[u32]| ids.iter().map(|&i| NodeId(i)).collect();
        let by_1 = c1.remap(&alive(&[1, 2]), NodeId(1)).unwrap();
        let by_2 = c1.remap(&alive(&[1, 2]), NodeId(2)).unwrap();
        assert!(svc.compare_and_swap(c1.id(), by_1.clone()).is_ok());
        let lost = svc.compare_and_swap(c1.id(), by_2).unwrap_err();
        assert_eq!(*lost, by_1, "the loser learns the winner");
        // Skipping an identifier is refused too.
        let mut skip = by_1.remap(&alive(&[1, 2]), NodeId(1)).unwrap();
        skip.config_id += 1;
        assert!(svc.compare_and_swap(by_1.id(), skip).is_err());
        assert_eq!(svc.current().id(), ConfigId(2));
        assert_eq!(svc.swaps(), 1);
    }

    #[test]
    fn the_time_bound_never_decreases() {
        let c1 = Configuration::local(3, 7000, 3, 12, std::path::Path::new("/tmp/c"));
        let mut svc = MemoryService::new(c1);
        assert_eq!(svc.time_bound_ns(), 0);
        assert_eq!(svc.raise_time_bound(500), 500);
        assert_eq!(
            svc.raise_time_bound(200),
            500,
            "a lower raise keeps the bound"
        );
        assert_eq!(svc.time_bound_ns(), 500);
    }
}
