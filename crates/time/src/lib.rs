//! # Global time (FaRMv2 §4.1, Figures 1, 2 and 4; §7 Algorithm 1)
//!
//! **Problem.** Transactions take their `read_ts` and `write_ts` from real
//! time, but every machine has its own clock. Timestamps must still order
//! transactions consistently with real time (strictness) and a snapshot at
//! `read_ts` must never be changed by a later writer (opacity).
//!
//! **Algorithm.** Global time is the clock master's local clock. Every other
//! process (nodes and clients alike) periodically asks the master for its
//! time. A synchronisation that was sent at local time `s`, answered with
//! master time `m` and received at local time `r` bounds the master's clock
//! at any later local time `t` (with drift bound ε):
//!
//! ```text
//! lower(t) = m + (t − r)(1 − ε)        upper(t) = m + (t − s)(1 + ε)
//! ```
//!
//! Both are affine in `t` with a common slope, so the synchronisation giving
//! the highest lower bound (respectively the lowest upper bound) at one
//! instant does so at every later instant. [`ClockSync`] therefore keeps just
//! two past synchronisations, one for each bound (Figure 2), and `time()`
//! combines them into the tightest interval `[lower, upper]`.
//!
//! `get_ts` (Figure 4) returns `upper` at call time and asks the caller to
//! wait until `lower` has passed it: the returned timestamp was in the future
//! when the call began and is in the past when it returns, so the master's
//! clock equalled it at some point during the call (Algorithm 1, Lemma 1).
//! This engine does no waiting itself: [`ClockSync::get_ts`] returns a
//! [`TsTicket`] with the local deadline, and the runtime (or the simulator)
//! sleeps until then. Only the runtime reads the real clock.
//!
//! **Invariants** (checked by [`ClockSync::check_invariants`]):
//! - the lower bound returned by `time()` never goes backwards;
//! - `lower <= upper` whenever the drift bound holds;
//! - the clock master's interval is exact (`lower == upper`).
//!
//! Clock-master failover and fast-forward (FaRMv2 §4.3) will extend this
//! engine with a `disabled` state and a `fast_forward_ts` floor.

use meridian_wire::Timestamp;

/// One completed synchronisation with the clock master, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncSample {
    /// Local clock when the request was sent.
    pub send_local_ns: u64,
    /// Master's clock in its reply.
    pub master_ns: u64,
    /// Local clock when the reply arrived.
    pub recv_local_ns: u64,
}

/// A time interval `[lower, upper]` in global time (ns) guaranteed to contain
/// the master's clock, as long as the drift bound holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Lower bound, ns.
    pub lower: u64,
    /// Upper bound, ns.
    pub upper: u64,
}

impl Interval {
    /// `upper − lower`, ns.
    pub fn uncertainty_ns(&self) -> u64 {
        self.upper.saturating_sub(self.lower)
    }
}

/// The result of [`ClockSync::get_ts`]: the timestamp, and the local time
/// after which it is guaranteed to be in the past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsTicket {
    /// The timestamp (the upper bound at call time).
    pub ts: Timestamp,
    /// Local clock reading after which `lower > ts`; wait until then.
    pub ready_local_ns: u64,
    /// Uncertainty at call time, ns (for reporting).
    pub uncertainty_ns: u64,
}

/// Errors of the clock engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockError {
    /// No synchronisation with the clock master has completed yet.
    NotSynchronised,
}

impl std::fmt::Display for ClockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockError::NotSynchronised => {
                f.write_str("clock not yet synchronised with the clock master")
            }
        }
    }
}

impl std::error::Error for ClockError {}

/// Counters for reporting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockStats {
    /// Synchronisations applied.
    pub syncs: u64,
    /// Synchronisations that improved the lower bound.
    pub lower_improved: u64,
    /// Synchronisations that improved the upper bound.
    pub upper_improved: u64,
    /// Replies rejected because they arrived before they were sent (bad sample).
    pub rejected: u64,
}

/// Synchronisation state of one process (FaRMv2 Figure 2).
#[derive(Clone, Debug)]
pub struct ClockSync {
    drift_ppm: u64,
    is_master: bool,
    /// Sync giving the highest lower bound.
    best_lower: Option<SyncSample>,
    /// Sync giving the lowest upper bound.
    best_upper: Option<SyncSample>,
    /// Highest lower bound ever returned (monotonicity guard / invariant).
    last_lower: u64,
    stats: ClockStats,
}

const PPM: i128 = 1_000_000;

impl ClockSync {
    /// A non-master process with drift bound `drift_ppm` (e.g. 1000 = 0.1%).
    pub fn new(drift_ppm: u64) -> Self {
        ClockSync {
            drift_ppm,
            is_master: false,
            best_lower: None,
            best_upper: None,
            last_lower: 0,
            stats: ClockStats::default(),
        }
    }

    /// The clock master: its local clock *is* global time.
    pub fn master() -> Self {
        ClockSync {
            drift_ppm: 0,
            is_master: true,
            best_lower: None,
            best_upper: None,
            last_lower: 0,
            stats: ClockStats::default(),
        }
    }

    /// True for the clock master.
    pub fn is_master(&self) -> bool {
        self.is_master
    }

    /// The drift bound, ppm.
    pub fn drift_ppm(&self) -> u64 {
        self.drift_ppm
    }

    /// Counters.
    pub fn stats(&self) -> ClockStats {
        self.stats
    }

    fn lower_at(&self, s: &SyncSample, t: u64) -> i128 {
        // m + (t - r)(1 - ε)
        let dt = t as i128 - s.recv_local_ns as i128;
        s.master_ns as i128 + dt * (PPM - self.drift_ppm as i128) / PPM
    }

    fn upper_at(&self, s: &SyncSample, t: u64) -> i128 {
        // m + (t - s)(1 + ε), rounded up
        let dt = t as i128 - s.send_local_ns as i128;
        let num = dt * (PPM + self.drift_ppm as i128);
        s.master_ns as i128 + (num + PPM - 1).div_euclid(PPM)
    }

    /// Apply a synchronisation (FaRMv2 Figure 2 SYNC): keep it if it improves
    /// the lower or the upper bound at `sample.recv_local_ns`.
    pub fn on_sync(&mut self, sample: SyncSample) {
        if self.is_master {
            return;
        }
        if sample.recv_local_ns < sample.send_local_ns {
            self.stats.rejected += 1;
            return;
        }
        self.stats.syncs += 1;
        let t = sample.recv_local_ns;
        let better_lower = match &self.best_lower {
            None => true,
            Some(b) => self.lower_at(&sample, t) > self.lower_at(b, t),
        };
        if better_lower {
            self.best_lower = Some(sample);
            self.stats.lower_improved += 1;
        }
        let better_upper = match &self.best_upper {
            None => true,
            Some(b) => self.upper_at(&sample, t) < self.upper_at(b, t),
        };
        if better_upper {
            self.best_upper = Some(sample);
            self.stats.upper_improved += 1;
        }
    }

    /// The current interval at local time `local_ns` (FaRMv2 Figure 2 TIME).
    ///
    /// Errors: [`ClockError::NotSynchronised`] before the first sync.
    pub fn time(&mut self, local_ns: u64) -> Result<Interval, ClockError> {
        if self.is_master {
            self.last_lower = self.last_lower.max(local_ns);
            return Ok(Interval {
                lower: local_ns,
                upper: local_ns,
            });
        }
        let (Some(l), Some(u)) = (self.best_lower, self.best_upper) else {
            return Err(ClockError::NotSynchronised);
        };
        let lower = self.lower_at(&l, local_ns).max(0) as u64;
        let upper = self.upper_at(&u, local_ns).max(0) as u64;
        // Monotonic clock + common slope => lower never decreases; the guard
        // only absorbs a local clock read taken before a concurrent sync.
        let lower = lower.max(self.last_lower).min(upper.max(self.last_lower));
        self.last_lower = lower;
        Ok(Interval {
            lower,
            upper: upper.max(lower),
        })
    }

    /// GET_TS (FaRMv2 Figure 4): the upper bound now, and the local time at
    /// which the lower bound will have passed it.
    ///
    /// Errors: [`ClockError::NotSynchronised`] before the first sync.
    pub fn get_ts(&mut self, local_ns: u64) -> Result<TsTicket, ClockError> {
        let iv = self.time(local_ns)?;
        if self.is_master {
            // Exact clock: ts = now is in the past one nanosecond later.
            return Ok(TsTicket {
                ts: Timestamp(iv.upper),
                ready_local_ns: local_ns + 1,
                uncertainty_ns: 0,
            });
        }
        let Some(l) = self.best_lower else {
            return Err(ClockError::NotSynchronised);
        };
        // Smallest t with lower_at(l, t) > ts:
        //   m + (t - r)(1-ε) > ts  <=>  t > r + (ts - m)/(1-ε)
        let ts = iv.upper as i128;
        let need = ts - l.master_ns as i128 + 1;
        let factor = PPM - self.drift_ppm as i128;
        let dt = (need * PPM + factor - 1).div_euclid(factor);
        let ready = (l.recv_local_ns as i128 + dt).max(local_ns as i128) as u64;
        Ok(TsTicket {
            ts: Timestamp(iv.upper),
            ready_local_ns: ready,
            uncertainty_ns: iv.uncertainty_ns(),
        })
    }

    /// True once `time()` can answer.
    pub fn is_synchronised(&self) -> bool {
        self.is_master || (self.best_lower.is_some() && self.best_upper.is_some())
    }

    /// Check the engine's invariants at local time `local_ns`; panics (also in
    /// release builds) on violation.
    pub fn check_invariants(&mut self, local_ns: u64) {
        let before = self.last_lower;
        if let Ok(iv) = self.time(local_ns) {
            assert!(
                iv.lower >= before,
                "clock lower bound went backwards: {} < {}",
                iv.lower,
                before
            );
            assert!(iv.lower <= iv.upper, "clock interval inverted: {iv:?}");
            if self.is_master {
                assert_eq!(iv.lower, iv.upper, "clock master interval must be exact");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drifting local clock: local = offset + true * (1 + d).
    fn local(true_ns: u64, offset: i64, drift_ppm: i64) -> u64 {
        (offset as i128 + true_ns as i128 + true_ns as i128 * drift_ppm as i128 / 1_000_000) as u64
    }

    #[test]
    fn interval_contains_master_time_under_drift() {
        // Master clock = true time. Client clock is offset by +5 ms and runs 900 ppm fast.
        let mut c = ClockSync::new(1000);
        let (off, d) = (5_000_000i64, 900i64);
        let mut t = 1_000_000u64;
        for i in 0..200u64 {
            let send = local(t, off, d);
            let rtt = 20_000 + (i * 7919 % 50_000);
            let master = t + rtt / 3; // served somewhere inside the round trip
            t += rtt;
            let recv = local(t, off, d);
            c.on_sync(SyncSample {
                send_local_ns: send,
                master_ns: master,
                recv_local_ns: recv,
            });
            t += 1_000_000;
            let iv = c.time(local(t, off, d)).unwrap();
            assert!(iv.lower <= t && t <= iv.upper, "true {t} outside {iv:?}");
            c.check_invariants(local(t, off, d));
        }
    }

    #[test]
    fn keeps_best_bounds_separately() {
        let mut c = ClockSync::new(0);
        // Sync A: tight on the lower side, sync B: tight on the upper side.
        c.on_sync(SyncSample {
            send_local_ns: 0,
            master_ns: 100,
            recv_local_ns: 10,
        });
        c.on_sync(SyncSample {
            send_local_ns: 50,
            master_ns: 140,
            recv_local_ns: 100,
        });
        // At t=100: lower from A = 190, from B = 140; upper from A = 200, from B = 190.
        let iv = c.time(100).unwrap();
        assert_eq!(
            iv,
            Interval {
                lower: 190,
                upper: 190
            }
        );
    }

    #[test]
    fn get_ts_ready_time_makes_ts_past() {
        let mut c = ClockSync::new(1000);
        c.on_sync(SyncSample {
            send_local_ns: 1_000,
            master_ns: 50_000,
            recv_local_ns: 41_000,
        });
        let tk = c.get_ts(100_000).unwrap();
        assert!(tk.uncertainty_ns >= 40_000);
        let before = c.time(tk.ready_local_ns - 1).unwrap();
        assert!(before.lower <= tk.ts.0, "ready time is not the earliest");
        let at = c.time(tk.ready_local_ns).unwrap();
        assert!(at.lower > tk.ts.0, "ts not yet in the past at ready time");
    }

    #[test]
    fn unsynchronised_is_an_error_and_master_is_exact() {
        let mut c = ClockSync::new(1000);
        assert_eq!(c.time(5), Err(ClockError::NotSynchronised));
        let mut m = ClockSync::master();
        assert_eq!(
            m.time(77).unwrap(),
            Interval {
                lower: 77,
                upper: 77
            }
        );
        let tk = m.get_ts(77).unwrap();
        assert_eq!(tk.ts, Timestamp(77));
        assert!(tk.ready_local_ns > 77);
    }
}
