//! # Runtime: the real clock and precise waits
//!
//! The engines and process objects never read a clock or sleep: they take
//! `now` as an argument and ask for a wake-up as an effect. This small crate
//! is the one place that does both for the real (tokio) shells:
//!
//! - [`mono_ns`] reads `CLOCK_MONOTONIC`, the local clock every process syncs
//!   to the clock master (FaRMv2 §4.1);
//! - [`wait::wait_until`] sleeps until a local deadline with microsecond
//!   precision, for uncertainty waits (tokio's timer has millisecond
//!   granularity; waits are tens of microseconds).
//!
//! The simulator replaces both with simulated time.

pub mod wait;

/// The local monotonic clock, ns (`CLOCK_MONOTONIC`).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the provided timespec; CLOCK_MONOTONIC is always valid.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
