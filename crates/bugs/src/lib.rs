//! # Injected bugs, for tests only
//!
//! **Problem.** A checker that never fails proves nothing. Each safety
//! rule of the protocols gets a deliberately broken variant, and a test
//! shows that the simulator's checkers catch it. Those variants must not
//! sit in the code that ships, and a variant must not silently stop being
//! reached when the schedule changes.
//!
//! **Design** (after FoundationDB's `SimBugInjector`). Every broken variant
//! is one [`Bug`]. A [`Bugs`] set is given to a process at construction
//! (`NodeProcess::with_bugs`, `SimConfig::bugs`). At the place where a rule
//! is applied, the production code asks [`bug!`]`(self.bugs, Name)` or
//! [`bug!`]`(self.bugs, Name, if condition)`: true when the bug is in the
//! set (and the condition holds), and then the bug counts a *hit*: the
//! broken branch ran where the correct one would have done otherwise.
//! A negative test asserts both that its bug was hit and that the run
//! failed the checker.
//!
//! **Compiled out.** The crates that consult bugs (`meridian-storage`,
//! `meridian-txn`, `meridian-process`, `meridian-sim`) each have a
//! `sim-bugs` feature. Without it, [`bug!`] expands to `false` (its
//! arguments are discarded before name resolution), the `bugs` fields do
//! not exist, and the broken branches are not compiled. The server binary
//! never enables the feature; `scripts/check-server-binary.sh` builds it on
//! its own and checks its symbols. (Cargo unifies features across one
//! build: a `cargo test --workspace` compiles every crate with `sim-bugs`,
//! because the simulator's tests enable it.)
//!
//! **Coverage marks.** [`mark!`]`("name")` in production code records,
//! in test builds, that a rare path ran; a scenario test asserts it with
//! [`marks::watch`]. Marks are compiled out the same way.
//!
//! **Invariant.** With the empty set, every process behaves exactly as
//! without the feature: the simulator's history digests of the same seeds
//! are equal with and without it.

/// Consult an injected bug: `bug!(bugs, Name)` or `bug!(bugs, Name, if
/// condition)`.
///
/// With the calling crate's `sim-bugs` feature: true when [`Bug`]`::Name`
/// is in the set `bugs` (a [`Bugs`]) and `condition` holds (evaluated only
/// if the bug is in the set); each true answer counts one hit. Without the
/// feature: `false`, and neither argument is evaluated or even resolved.
#[macro_export]
macro_rules! bug {
    ($bugs:expr, $bug:ident) => {
        $crate::bug!($bugs, $bug, if true)
    };
    ($bugs:expr, $bug:ident, if $cond:expr) => {{
        #[cfg(feature = "sim-bugs")]
        let hit = $bugs.on($crate::Bug::$bug) && ($cond) && $bugs.count($crate::Bug::$bug);
        #[cfg(not(feature = "sim-bugs"))]
        let hit = false;
        hit
    }};
}

/// Record that the code path marked `name` ran: `mark!("name")`.
///
/// A coverage mark (TigerBeetle's `marks`): a scenario test that drives
/// the simulator into a rare window asserts, with [`marks::watch`], that
/// the code guarding that window ran, so a change of schedule cannot move
/// the test off it unnoticed. With the calling crate's `sim-bugs` feature
/// it counts one hit on this thread; without it, it is nothing.
#[macro_export]
macro_rules! mark {
    ($name:literal) => {{
        #[cfg(feature = "sim-bugs")]
        $crate::marks::hit($name);
    }};
}

#[cfg(feature = "enabled")]
pub mod marks;
#[cfg(feature = "enabled")]
mod set;
#[cfg(feature = "enabled")]
pub use set::{Bug, Bugs};
