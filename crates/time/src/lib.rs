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
//! **Fast-forward** (FaRMv2 §4.3). When the clock master fails, its
//! successor must continue global time without going backwards and
//! without inheriting unbounded uncertainty. A process can be
//! [`ClockSync::disable`]d (it hands out no time while the configuration
//! changes) and report its [`ClockSync::fast_forward_value`], the maximum of
//! its last fast-forward and the upper bound of its interval. The new
//! master takes FF, the maximum over all members, and
//! [`ClockSync::become_master`]: its global time is its local clock plus an
//! offset chosen so that global time starts at FF. The others
//! [`ClockSync::follow_new_master`]: they forget every sample of the old
//! master and enable again on the first synchronisation with the new one.
//! Global time is therefore monotonic across any sequence of master
//! failures: everything handed out before was at most some member's upper
//! bound, hence at most FF.

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
    /// The clock is disabled while the clock master changes (FaRMv2 §4.3);
    /// retry once the new configuration is committed.
    Disabled,
    /// The local time given is older than every retained synchronisation:
    /// the caller read its clock, stalled, and a newer sample arrived in
    /// between. Using that sample at the older time would give a lower bound
    /// that is too high and an upper bound that is too low. Read the clock
    /// again and retry.
    StaleLocalTime {
        /// The local time given, ns.
        local_ns: u64,
        /// The oldest usable sample's receive time, ns.
        oldest_usable_ns: u64,
    },
    /// Every synchronisation is older than the maximum sample age: this
    /// process lost touch with the clock master (which may have been
    /// replaced) and hands out no time until it synchronises again.
    Expired {
        /// Age of the newest sample, ns.
        age_ns: u64,
    },
    /// A synchronisation contradicts what is already known: the master's
    /// clock went backwards, or a clock drifted past the bound. The sample is
    /// rejected and counted in [`ClockStats::inconsistent`].
    Inconsistent {
        /// Lower bound known before the sample, ns.
        lower_ns: u64,
        /// Upper bound the sample implies, ns.
        upper_ns: u64,
    },
    /// Clock master only: its time (plus the reserve that covers the
    /// processes synchronised with it) reached the time bound last stored in
    /// the coordination service. It hands out no time until the bound is
    /// raised, so that a master that takes over later, even after a
    /// whole-cluster crash, can start above every timestamp ever handed
    /// out ([`ClockSync::set_time_bound`]).
    PastTimeBound {
        /// The master's global time, ns.
        time_ns: u64,
        /// The stored bound, ns.
        bound_ns: u64,
    },
}

impl std::fmt::Display for ClockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockError::NotSynchronised => {
                f.write_str("clock not yet synchronised with the clock master")
            }
            ClockError::Disabled => {
                f.write_str("clock disabled while the clock master changes")
            }
            ClockError::StaleLocalTime {
                local_ns,
                oldest_usable_ns,
            } => write!(
                f,
                "local time {local_ns} ns predates every usable synchronisation (oldest {oldest_usable_ns} ns)"
            ),
            ClockError::Expired { age_ns } => write!(
                f,
                "no synchronisation with the clock master for {age_ns} ns (samples expired)"
            ),
            ClockError::Inconsistent { lower_ns, upper_ns } => write!(
                f,
                "clock master went backwards or drift bound exceeded: upper bound {upper_ns} ns below known lower bound {lower_ns} ns"
            ),
            ClockError::PastTimeBound { time_ns, bound_ns } => write!(
                f,
                "clock master at {time_ns} ns waits for its stored time bound ({bound_ns} ns) to be raised"
            ),
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
    /// Replies rejected because they contradict the known interval (the
    /// master's clock went backwards, or the drift bound was exceeded).
    pub inconsistent: u64,
}

/// A measured rate of this clock against the clock master's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateReading {
    /// How much faster the master's clock ran than this one, ppm (negative:
    /// this clock runs fast).
    pub ppm: i64,
    /// The measurement's error bound, ppm (from the two round trips).
    pub error_ppm: u64,
}

/// Compares this process's clock rate with the master's over windows of
/// synchronisations (FaRMv2 §4.1 assumes every clock within ε of real
/// time; a machine whose clock is far off that is reported and removed).
///
/// Two synchronisations `a`, `b` at least `window_ns` apart give the rate
/// `(Δmaster − Δlocal) / Δlocal` with Δ taken between the round trips'
/// midpoints; each master reading lies inside its round trip, so the
/// error is at most `(rtt_a + rtt_b) / 2 / Δlocal`. A window is judged
/// only once that error is at most half the limit (a loaded machine's
/// slow round trips only delay the verdict), and the verdict is
/// "exceeded" only when `|rate| − error > limit`: no false reports from
/// noise.
#[derive(Clone, Debug)]
pub struct RateCheck {
    limit_ppm: u64,
    window_ns: u64,
    anchor: Option<SyncSample>,
    exceeded: Option<RateReading>,
    last: Option<RateReading>,
}

impl RateCheck {
    /// A check against `limit_ppm` over windows of at least `window_ns`.
    pub fn new(limit_ppm: u64, window_ns: u64) -> Self {
        RateCheck {
            limit_ppm,
            window_ns: window_ns.max(1),
            anchor: None,
            exceeded: None,
            last: None,
        }
    }

    /// A synchronisation arrived.
    pub fn on_sample(&mut self, b: SyncSample) {
        if b.recv_local_ns < b.send_local_ns {
            return;
        }
        let Some(a) = self.anchor else {
            self.anchor = Some(b);
            return;
        };
        let mid = |s: &SyncSample| (s.send_local_ns as i128 + s.recv_local_ns as i128) / 2;
        let rtt_of = |s: &SyncSample| s.recv_local_ns - s.send_local_ns;
        let d_local = mid(&b) - mid(&a);
        if d_local < self.window_ns as i128 {
            // Early in the window a tighter round trip makes a better
            // anchor (the error is the round trips').
            if d_local < (self.window_ns / 4) as i128 && rtt_of(&b) < rtt_of(&a) {
                self.anchor = Some(b);
            }
            return;
        }
        let d_master = b.master_ns as i128 - a.master_ns as i128;
        let rtt = (a.recv_local_ns - a.send_local_ns) as i128
            + (b.recv_local_ns - b.send_local_ns) as i128;
        let error_ppm = (rtt * 1_000_000 / 2).div_euclid(d_local) as u64 + 1;
        if error_ppm * 2 > self.limit_ppm {
            return; // too noisy yet: a longer window shrinks the error
        }
        let ppm = ((d_master - d_local) * 1_000_000 / d_local) as i64;
        let reading = RateReading { ppm, error_ppm };
        self.last = Some(reading);
        if ppm.unsigned_abs().saturating_sub(error_ppm) > self.limit_ppm {
            self.exceeded = Some(reading);
        }
        self.anchor = Some(b);
    }

    /// The reading that surely exceeded the limit, if one did (sticky).
    pub fn exceeded(&self) -> Option<RateReading> {
        self.exceeded
    }

    /// The last judged reading.
    pub fn last(&self) -> Option<RateReading> {
        self.last
    }

    /// A new master: measurements start over.
    pub fn reset(&mut self) {
        self.anchor = None;
        self.exceeded = None;
    }
}

/// Synchronisation state of one process (FaRMv2 Figure 2).
#[derive(Clone, Debug)]
pub struct ClockSync {
    drift_ppm: u64,
    is_master: bool,
    /// Master only: global time = local time + this offset, ns.
    master_offset_ns: i128,
    /// No time is handed out (FaRMv2 §4.3, during reconfiguration).
    disabled: bool,
    /// The last fast-forward value applied, ns.
    fast_forward_ns: u64,
    /// Disabled until the first synchronisation with a new master.
    awaiting_new_master: bool,
    /// Syncs giving the highest lower bound, best first: the current best
    /// and the ones it replaced (at most [`RETAINED_SAMPLES`]), so that a
    /// caller whose clock reading predates the newest sample can still be
    /// answered from a sample that it could have known.
    best_lower: Vec<SyncSample>,
    /// Syncs giving the lowest upper bound, likewise.
    best_upper: Vec<SyncSample>,
    /// The most recent synchronisation (used when every best sample is too
    /// old).
    latest: Option<SyncSample>,
    /// A sample older than this (local ns since its request was sent) is
    /// not used; 0 = no limit. Bounds how long a process that lost touch
    /// with the clock master keeps handing out time from it (FaRMv2 §4.3:
    /// the new master enables only after every such sample expired).
    max_sample_age_ns: u64,
    /// Master only: (stored time bound, reserve), ns. Time is handed out
    /// (and answered to synchronisations) only while `time + reserve <
    /// bound`. `None`: no bound (a master outside any coordination service).
    time_bound: Option<(u64, u64)>,
    /// Highest lower bound ever returned (monotonicity guard / invariant).
    last_lower: u64,
    /// Local time at which `last_lower` was computed.
    last_local_ns: u64,
    stats: ClockStats,
    /// This clock's rate against the master's (none: not checked).
    rate: Option<RateCheck>,
}

/// How many superseded best samples are kept per bound. A caller stalled
/// across more synchronisations than this gets [`ClockError::StaleLocalTime`].
pub const RETAINED_SAMPLES: usize = 4;

const PPM: i128 = 1_000_000;

impl ClockSync {
    /// A non-master process with drift bound `drift_ppm` (e.g. 1000 = 0.1%).
    pub fn new(drift_ppm: u64) -> Self {
        ClockSync {
            drift_ppm,
            is_master: false,
            master_offset_ns: 0,
            disabled: false,
            fast_forward_ns: 0,
            awaiting_new_master: false,
            best_lower: Vec::new(),
            best_upper: Vec::new(),
            latest: None,
            max_sample_age_ns: 0,
            time_bound: None,
            last_lower: 0,
            last_local_ns: 0,
            stats: ClockStats::default(),
            rate: None,
        }
    }

    /// The clock master: its local clock *is* global time.
    pub fn master() -> Self {
        ClockSync {
            is_master: true,
            ..Self::new(0)
        }
    }

    /// Use no sample older than `ns` (local time since its request was
    /// sent; 0 = no limit). Past it `time()` fails with
    /// [`ClockError::Expired`] until the next synchronisation.
    pub fn with_max_sample_age(mut self, ns: u64) -> Self {
        self.max_sample_age_ns = ns;
        self
    }

    /// Check this clock's rate against the master's: more than
    /// `limit_ppm` apart over windows of at least `window_ns` is reported
    /// by [`ClockSync::rate_exceeded`] ([`RateCheck`]).
    pub fn with_rate_check(mut self, limit_ppm: u64, window_ns: u64) -> Self {
        self.set_rate_check(limit_ppm, window_ns);
        self
    }

    /// [`ClockSync::with_rate_check`] on an existing clock.
    pub fn set_rate_check(&mut self, limit_ppm: u64, window_ns: u64) {
        self.rate = Some(RateCheck::new(limit_ppm, window_ns));
    }

    /// The reading that surely exceeded the rate limit against the current
    /// master, if any.
    pub fn rate_exceeded(&self) -> Option<RateReading> {
        self.rate.as_ref().and_then(RateCheck::exceeded)
    }

    /// The last judged rate reading against the current master.
    pub fn rate_reading(&self) -> Option<RateReading> {
        self.rate.as_ref().and_then(RateCheck::last)
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
    ///
    /// Errors: [`ClockError::Inconsistent`] if the sample's upper bound is
    /// below the lower bound already known (the master's clock went
    /// backwards, or some clock broke the drift bound). The sample is not
    /// applied; the interval is never silently clamped.
    pub fn on_sync(&mut self, sample: SyncSample) -> Result<(), ClockError> {
        if self.is_master {
            return Ok(());
        }
        if sample.recv_local_ns < sample.send_local_ns {
            self.stats.rejected += 1;
            return Ok(());
        }
        if let Some(r) = &mut self.rate {
            r.on_sample(sample);
        }
        let t = sample.recv_local_ns;
        // Samples too old to hand out time from (`max_sample_age`) do not
        // veto a fresh one: extrapolated that far, a clock drifting past
        // the bound against a new master would make every later sample
        // look inconsistent, and the process would never synchronise
        // again. What this process handed out (`last_lower`) still bounds
        // every sample it accepts.
        let max_age = self.max_sample_age_ns;
        if max_age > 0
            && self
                .best_lower
                .iter()
                .chain(self.best_upper.iter())
                .all(|s| t.saturating_sub(s.send_local_ns) > max_age)
        {
            self.best_lower.clear();
            self.best_upper.clear();
            let upper = self.upper_at(&sample, t);
            if upper < self.last_lower as i128 && t >= self.last_local_ns {
                self.stats.inconsistent += 1;
                return Err(ClockError::Inconsistent {
                    lower_ns: self.last_lower,
                    upper_ns: upper.max(0) as u64,
                });
            }
        }
        if let Some(b) = self.best_lower.first() {
            let known_lower = self.lower_at(b, t).max(self.last_lower as i128);
            let upper = self.upper_at(&sample, t);
            if upper < known_lower && t >= self.last_local_ns {
                self.stats.inconsistent += 1;
                return Err(ClockError::Inconsistent {
                    lower_ns: known_lower.max(0) as u64,
                    upper_ns: upper.max(0) as u64,
                });
            }
        }
        self.stats.syncs += 1;
        if self.best_lower.is_empty() && sample.master_ns < self.fast_forward_ns {
            // A reply from before the fast-forward (the old master, or the
            // new one before it enabled): never let time go back below FF.
            self.stats.rejected += 1;
            return Ok(());
        }
        if self.awaiting_new_master {
            self.awaiting_new_master = false;
            self.disabled = false;
        }
        if self
            .latest
            .is_none_or(|l| sample.recv_local_ns >= l.recv_local_ns)
        {
            self.latest = Some(sample);
        }
        let better_lower = match self.best_lower.first() {
            None => true,
            Some(b) => self.lower_at(&sample, t) > self.lower_at(b, t),
        };
        if better_lower {
            self.best_lower.insert(0, sample);
            self.best_lower.truncate(RETAINED_SAMPLES);
            self.stats.lower_improved += 1;
        }
        let better_upper = match self.best_upper.first() {
            None => true,
            Some(b) => self.upper_at(&sample, t) < self.upper_at(b, t),
        };
        if better_upper {
            self.best_upper.insert(0, sample);
            self.best_upper.truncate(RETAINED_SAMPLES);
            self.stats.upper_improved += 1;
        }
        Ok(())
    }

    /// The best retained samples (lower, upper) known at local time `t`:
    /// those whose reply had arrived by `t`.
    fn usable(&self, t: u64) -> Result<(SyncSample, SyncSample), ClockError> {
        let (Some(l0), Some(u0)) = (self.best_lower.last(), self.best_upper.last()) else {
            return Err(ClockError::NotSynchronised);
        };
        let known = |s: &&SyncSample| s.recv_local_ns <= t;
        let max_age = self.max_sample_age_ns;
        let fresh = |s: &&SyncSample| max_age == 0 || t.saturating_sub(s.send_local_ns) <= max_age;
        let latest = self.latest.as_ref().filter(known);
        let pick = |best: &[SyncSample]| {
            best.iter()
                .filter(known)
                .find(fresh)
                .or(latest.filter(fresh))
                .copied()
        };
        match (pick(&self.best_lower), pick(&self.best_upper)) {
            (Some(l), Some(u)) => Ok((l, u)),
            _ if latest.is_some() && max_age > 0 => Err(ClockError::Expired {
                age_ns: latest.map_or(0, |l| t.saturating_sub(l.send_local_ns)),
            }),
            _ => Err(ClockError::StaleLocalTime {
                local_ns: t,
                oldest_usable_ns: l0.recv_local_ns.max(u0.recv_local_ns),
            }),
        }
    }

    /// The current interval at local time `local_ns` (FaRMv2 Figure 2 TIME).
    /// Only samples received by `local_ns` are used, so a caller that read
    /// its clock before a concurrent synchronisation still gets bounds that
    /// hold at the time it read.
    ///
    /// Errors: [`ClockError::NotSynchronised`] before the first sync,
    /// [`ClockError::StaleLocalTime`] if `local_ns` predates every retained
    /// sample, [`ClockError::Inconsistent`] if the bounds cross (the drift
    /// bound was broken).
    pub fn time(&mut self, local_ns: u64) -> Result<Interval, ClockError> {
        if self.disabled {
            return Err(ClockError::Disabled);
        }
        self.interval(local_ns)
    }

    fn interval(&mut self, local_ns: u64) -> Result<Interval, ClockError> {
        if self.is_master {
            let now = self.master_time(local_ns);
            if let Some((bound_ns, reserve_ns)) = self.time_bound {
                if now.saturating_add(reserve_ns) >= bound_ns {
                    return Err(ClockError::PastTimeBound {
                        time_ns: now,
                        bound_ns,
                    });
                }
            }
            self.last_lower = self.last_lower.max(now);
            self.last_local_ns = self.last_local_ns.max(local_ns);
            return Ok(Interval {
                lower: now,
                upper: now,
            });
        }
        let (l, u) = self.usable(local_ns)?;
        let lower = self.lower_at(&l, local_ns).max(0) as u64;
        let upper = self.upper_at(&u, local_ns).max(0) as u64;
        if lower > upper {
            self.stats.inconsistent += 1;
            return Err(ClockError::Inconsistent {
                lower_ns: lower,
                upper_ns: upper,
            });
        }
        if local_ns < self.last_local_ns {
            // A stale reading: answer for that instant, without the
            // monotonicity guard (which holds a later instant's bound).
            return Ok(Interval { lower, upper });
        }
        // Monotonic clock + common slope => lower never decreases at
        // non-decreasing local times; the guard keeps it so across a change
        // of best sample.
        let lower = lower.max(self.last_lower).min(upper);
        self.last_lower = lower;
        self.last_local_ns = local_ns;
        Ok(Interval { lower, upper })
    }

    /// GET_TS (FaRMv2 Figure 4): the upper bound now, and the local time at
    /// which the lower bound will have passed it.
    ///
    /// Errors: [`ClockError::NotSynchronised`] before the first sync.
    pub fn get_ts(&mut self, local_ns: u64) -> Result<TsTicket, ClockError> {
        let iv = self.time(local_ns)?;
        let ts = Timestamp(iv.upper);
        let ready_local_ns = if self.is_master {
            // Exact clock: ts = now is in the past one nanosecond later.
            local_ns + 1
        } else {
            self.passed_by_best_lower(local_ns, ts)?
        };
        Ok(TsTicket {
            ts,
            ready_local_ns,
            uncertainty_ns: iv.uncertainty_ns(),
        })
    }

    /// The earliest local time, not before `local_ns`, at which this
    /// clock's lower bound is above `ts`: from then on global time has
    /// surely passed `ts`. GET_TS's wait ends there; a node serving a read
    /// at `read_ts` for a client that did not wait (FaRMv2 §4.1's wait
    /// moved to the server, `clock.reads_wait_at_server`) serves it there.
    ///
    /// Errors: as [`ClockSync::time`] at `local_ns`.
    pub fn passed_at(&mut self, local_ns: u64, ts: Timestamp) -> Result<u64, ClockError> {
        if self.is_master {
            // Exact clock: global time passes `ts` once the local clock
            // has run the difference (whatever the time bound says: that
            // bounds the time handed out, not the time that has passed).
            let now = self.master_time(local_ns);
            return Ok(if now > ts.0 {
                local_ns
            } else {
                local_ns + (ts.0 - now) + 1
            });
        }
        match self.time(local_ns) {
            Ok(iv) if iv.lower > ts.0 => return Ok(local_ns),
            Ok(_) => {}
            // An expired sample no longer bounds global time from above
            // tightly enough to hand out timestamps, and a disabled clock
            // hands out none, but a lower bound stays one: global time
            // never goes back (FaRMv2 §4.3's fast-forward).
            Err(ClockError::Expired { .. } | ClockError::Disabled) => {}
            Err(e) => return Err(e),
        }
        self.passed_by_best_lower(local_ns, ts)
    }

    /// [`ClockSync::passed_at`] from the best lower bound of every sample
    /// received by `local_ns`, whatever its age (a lower bound stays one).
    fn passed_by_best_lower(&self, local_ns: u64, ts: Timestamp) -> Result<u64, ClockError> {
        let known = |s: &&SyncSample| s.recv_local_ns <= local_ns;
        let l = self
            .best_lower
            .iter()
            .filter(known)
            .chain(self.latest.iter().filter(known))
            .max_by_key(|s| self.lower_at(s, local_ns))
            .ok_or(ClockError::NotSynchronised)?;
        Ok(first_above(l, self.drift_ppm, local_ns, ts))
    }

    /// The master's global time at its local time `local_ns` (its local
    /// clock plus the offset set by [`ClockSync::become_master`]). On a
    /// non-master, `local_ns` itself (meaningless; not used).
    pub fn master_time(&self, local_ns: u64) -> u64 {
        (local_ns as i128 + self.master_offset_ns).clamp(0, u64::MAX as i128) as u64
    }

    /// The master's offset from its local clock to global time, ns (0 for
    /// the first master; set by [`ClockSync::become_master`]). Persisted
    /// by disk durability so that a restarted master continues global time
    /// where it was (the local monotonic clock keeps running across a
    /// process restart on the same boot).
    pub fn master_offset_ns(&self) -> i128 {
        self.master_offset_ns
    }

    /// Clock master: hand out no time `t` with `t + reserve_ns >= bound_ns`
    /// ([`ClockError::PastTimeBound`]). `bound_ns` is the time bound the
    /// coordination service stores (global ns); the master raises it ahead
    /// of its time. `reserve_ns` covers the processes synchronised with
    /// this master: their upper bound exceeds the master time they were
    /// told by at most the sample age times `1 + drift`, so twice the
    /// maximum sample age keeps every timestamp any process hands out below
    /// the stored bound. A new master starts at the stored bound or above
    /// ([`ClockSync::become_master`] with it in `ff_ns`), so global time
    /// never goes backwards even when every node crashed and no FF value
    /// survived. A lower `bound_ns` than the one set is ignored.
    pub fn set_time_bound(&mut self, bound_ns: u64, reserve_ns: u64) {
        let bound_ns = self.time_bound.map_or(bound_ns, |(b, _)| b.max(bound_ns));
        self.time_bound = Some((bound_ns, reserve_ns));
    }

    /// The stored time bound this clock respects (master), ns.
    pub fn time_bound_ns(&self) -> Option<u64> {
        self.time_bound.map(|(b, _)| b)
    }

    /// True while the clock is disabled (FaRMv2 §4.3).
    pub fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// Stop handing out time (FaRMv2 §4.3: on NEW-CONFIG when the CM
    /// changed, and at the new CM before it sends NEW-CONFIG). Samples still
    /// arrive and count.
    pub fn disable(&mut self) {
        self.disabled = true;
    }

    /// FaRMv2 §4.3's per-process FF value at local time `local_ns`: the
    /// maximum of the last fast-forward and the upper bound of the current
    /// interval (whether or not the clock is disabled). Every timestamp this
    /// process ever handed out is at most this.
    ///
    /// Samples too old to hand out time from (`max_sample_age`) still
    /// bound the master's time here: their upper bound only grows with
    /// the time since, at the drift bound. (Using only fresh ones, a
    /// member paused past the sample age would report no bound at all, and
    /// a new master could start below times the old one had handed out.)
    /// A master reports its own time, even past its time bound.
    pub fn fast_forward_value(&mut self, local_ns: u64) -> u64 {
        let upper = if self.is_master {
            self.master_time(local_ns)
        } else {
            self.best_upper
                .iter()
                .chain(self.latest.as_ref())
                .filter(|s| s.recv_local_ns <= local_ns)
                .map(|s| self.upper_at(s, local_ns).max(0) as u64)
                .min()
                .unwrap_or(0)
        };
        self.fast_forward_ns.max(upper).max(self.last_lower)
    }

    /// Become the clock master at local time `local_ns` with global time
    /// starting at `ff_ns` (the maximum FF over the new configuration), and
    /// enable. Global time never goes backwards across this: it continues
    /// from `max(ff_ns, own FF)`.
    pub fn become_master(&mut self, local_ns: u64, ff_ns: u64) {
        let start = ff_ns.max(self.fast_forward_value(local_ns));
        self.is_master = true;
        self.drift_ppm = 0;
        self.master_offset_ns = start as i128 - local_ns as i128;
        self.fast_forward_ns = start;
        self.best_lower.clear();
        self.latest = None;
        self.best_upper.clear();
        self.disabled = false;
        self.awaiting_new_master = false;
    }

    /// A new clock master took over with fast-forward value `ff_ns`: forget
    /// every sample of the old one, stay disabled until the first
    /// synchronisation with the new one (FaRMv2 §4.3).
    pub fn follow_new_master(&mut self, ff_ns: u64, drift_ppm: u64) {
        self.fast_forward_ns = self.fast_forward_ns.max(ff_ns);
        self.is_master = false;
        self.master_offset_ns = 0;
        self.drift_ppm = drift_ppm;
        self.best_lower.clear();
        self.latest = None;
        self.best_upper.clear();
        self.disabled = true;
        self.awaiting_new_master = true;
        if let Some(r) = &mut self.rate {
            r.reset();
        }
    }

    /// True once `time()` can answer.
    pub fn is_synchronised(&self) -> bool {
        self.is_master || (!self.best_lower.is_empty() && !self.best_upper.is_empty())
    }

    /// Check the engine's invariants at local time `local_ns`; panics (also in
    /// release builds) on violation.
    pub fn check_invariants(&mut self, local_ns: u64) {
        let before = self.last_lower;
        let fresh = local_ns >= self.last_local_ns;
        assert!(
            self.best_lower.len() <= RETAINED_SAMPLES && self.best_upper.len() <= RETAINED_SAMPLES
        );
        if let Ok(iv) = self.time(local_ns) {
            assert!(
                !fresh || iv.lower >= before,
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

/// The smallest local time, not before `local_ns`, at which sample `l`'s
/// lower bound is above `ts` (drift bound `drift_ppm`):
/// `m + (t - r)(1-ε) > ts  <=>  t > r + (ts - m)/(1-ε)`.
fn first_above(l: &SyncSample, drift_ppm: u64, local_ns: u64, ts: Timestamp) -> u64 {
    let need = ts.0 as i128 - l.master_ns as i128 + 1;
    let factor = PPM - drift_ppm as i128;
    let dt = (need * PPM + factor - 1).div_euclid(factor);
    (l.recv_local_ns as i128 + dt).max(local_ns as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drifting local clock: local = offset + true * (1 + d).
    fn local(true_ns: u64, offset: i64, drift_ppm: i64) -> u64 {
        (offset as i128 + true_ns as i128 + true_ns as i128 * drift_ppm as i128 / 1_000_000) as u64
    }

    #[test]
    fn a_master_hands_out_time_only_below_its_stored_bound_less_the_reserve() {
        let mut m = ClockSync::master();
        m.become_master(0, 1_000);
        m.set_time_bound(0, 100);
        assert!(
            matches!(
                m.time(0),
                Err(ClockError::PastTimeBound {
                    time_ns: 1_000,
                    bound_ns: 0
                })
            ),
            "no time before the first raise"
        );
        m.set_time_bound(2_000, 100);
        assert_eq!(m.time(500).unwrap().upper, 1_500);
        assert_eq!(m.time(899).unwrap().upper, 1_899);
        // 1 900 + the reserve reaches the bound: stop.
        assert!(matches!(m.time(900), Err(ClockError::PastTimeBound { .. })));
        // A lower bound (a stale answer) never lowers it.
        m.set_time_bound(1_200, 100);
        assert_eq!(m.time_bound_ns(), Some(2_000));
        m.set_time_bound(5_000, 100);
        assert_eq!(m.time(900).unwrap().upper, 1_900);
        // A follower is never limited by a bound: only the master is.
        let mut f = ClockSync::new(1000);
        f.set_time_bound(0, 100);
        f.on_sync(SyncSample {
            send_local_ns: 10,
            master_ns: 1_950,
            recv_local_ns: 20,
        })
        .unwrap();
        assert!(f.time(30).is_ok());
    }

    fn sample(local_ns: u64, rate_ppm: i64, rtt_ns: u64) -> SyncSample {
        // The master runs `rate_ppm` faster than this clock.
        let master = local_ns as i128 + local_ns as i128 * rate_ppm as i128 / 1_000_000;
        SyncSample {
            send_local_ns: local_ns - rtt_ns / 2,
            master_ns: master as u64,
            recv_local_ns: local_ns + rtt_ns / 2,
        }
    }

    /// A clock running 2,000 ppm fast against its master (twice the bound)
    /// extrapolates its lower bound past the master's time, so every
    /// later sample looks inconsistent with the old ones. Once its samples
    /// are too old to use, a fresh sample is accepted again (never below
    /// what was handed out), so the process synchronises again.
    #[test]
    fn expired_samples_do_not_veto_fresh_ones() {
        const MS: u64 = 1_000_000;
        let mut c = ClockSync::new(1000).with_max_sample_age(10 * MS);
        // The master runs 2,000 ppm slower than this clock.
        let at = |local: u64| SyncSample {
            send_local_ns: local - 1_000,
            master_ns: local - local / 500,
            recv_local_ns: local + 1_000,
        };
        c.on_sync(at(100 * MS)).unwrap();
        let handed = c.time(100 * MS + 2_000).unwrap().lower;
        // 50 ms later the extrapolated lower bound is past the master.
        let late = at(150 * MS);
        c.on_sync(late)
            .expect("an expired sample vetoed a fresh one");
        let iv = c.time(150 * MS + 2_000).unwrap();
        assert!(iv.lower >= handed && iv.lower <= late.master_ns + 3_000);
        c.check_invariants(150 * MS + 2_000);
    }

    /// A clock 300 ppm off is reported against a 200 ppm limit; 100 ppm off
    /// is not; round trips too slow to judge delay the verdict instead of
    /// giving a false one.
    #[test]
    fn a_clock_past_the_rate_limit_is_reported_and_noise_is_not() {
        const S: u64 = 1_000_000_000;
        for (rate, reported) in [(300, true), (-300, true), (100, false), (0, false)] {
            let mut r = RateCheck::new(200, S);
            for i in 1..=3 {
                r.on_sample(sample(i * S, rate, 50_000));
            }
            assert_eq!(
                r.exceeded().is_some(),
                reported,
                "rate {rate}: {:?}",
                r.last()
            );
            let got = r.last().unwrap().ppm;
            assert!((got - rate).abs() <= 2, "measured {got} for {rate}");
        }
        // 150 ms round trips over 1 s windows: ±150,000 ppm, never judged.
        let mut r = RateCheck::new(200, S);
        for i in 1..=3 {
            r.on_sample(sample(i * S, 300, 150_000_000));
        }
        assert_eq!(r.last(), None);
        // A synchronisation that changes master starts over.
        let mut c = ClockSync::new(1000).with_rate_check(200, S);
        for i in 1..=3 {
            let _ = c.on_sync(sample(i * S, 400, 10_000));
        }
        assert!(c.rate_exceeded().is_some());
        c.follow_new_master(0, 1000);
        assert!(c.rate_exceeded().is_none());
    }

    #[test]
    fn a_follower_whose_samples_expired_still_bounds_the_master_time() {
        let mut c = ClockSync::new(1000).with_max_sample_age(10_000);
        c.on_sync(SyncSample {
            send_local_ns: 1_000,
            master_ns: 500_000,
            recv_local_ns: 2_000,
        })
        .unwrap();
        // 1 ms later the sample is too old to hand out time from...
        assert!(matches!(c.time(1_000_000), Err(ClockError::Expired { .. })));
        // ...but FF still bounds the master: it ran at most 1 ms + drift.
        let ff = c.fast_forward_value(1_000_000);
        assert!(ff >= 500_000 + 999_000, "FF {ff} below the master's time");
        assert!(ff <= 500_000 + 999_000 + 1_000, "FF {ff} too loose");
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
            })
            .unwrap();
            t += 1_000_000;
            let iv = c.time(local(t, off, d)).unwrap();
            assert!(iv.lower <= t && t <= iv.upper, "true {t} outside {iv:?}");
            c.check_invariants(local(t, off, d));
        }
    }

    #[test]
    fn passed_at_is_the_first_local_time_whose_lower_bound_is_above_ts() {
        let mut c = ClockSync::new(1000);
        c.on_sync(SyncSample {
            send_local_ns: 1_000_000,
            master_ns: 7_000_000,
            recv_local_ns: 1_080_000,
        })
        .unwrap();
        let now = 1_100_000;
        let iv = c.time(now).unwrap();
        // A timestamp already in the past: serve now.
        assert_eq!(c.passed_at(now, Timestamp(iv.lower - 1)).unwrap(), now);
        // The upper bound now (a client's read_ts that did not wait).
        let ts = Timestamp(iv.upper);
        let at = c.passed_at(now, ts).unwrap();
        assert!(at > now, "the uncertainty has not passed yet");
        assert!(
            c.time(at).unwrap().lower > ts.0,
            "lower bound above ts at {at}"
        );
        assert!(
            c.time(at - 1).unwrap().lower <= ts.0,
            "{at} is not the first such time"
        );
        // Long after the sample expired for handing out timestamps, it
        // still bounds global time from below.
        let mut e = ClockSync::new(1000).with_max_sample_age(1_000_000);
        e.on_sync(SyncSample {
            send_local_ns: 1_000_000,
            master_ns: 7_000_000,
            recv_local_ns: 1_080_000,
        })
        .unwrap();
        let late = 50_000_000;
        assert!(matches!(e.time(late), Err(ClockError::Expired { .. })));
        // lower(late) = 7_000_000 + (late - 1_080_000) * 0.999
        let lower = 7_000_000 + (late - 1_080_000) * 999 / 1000;
        assert_eq!(e.passed_at(late, Timestamp(lower - 1_000)).unwrap(), late);
        let at = e.passed_at(late, Timestamp(lower + 1_000)).unwrap();
        assert!(at > late && at <= late + 1_003, "{at}");
        // The master's exact clock: one ns after the difference.
        let mut m = ClockSync::master();
        let t = m.time(5_000).unwrap().lower;
        assert_eq!(m.passed_at(5_000, Timestamp(t + 10)).unwrap(), 5_011);
    }

    #[test]
    fn keeps_best_bounds_separately() {
        let mut c = ClockSync::new(0);
        // Sync A: tight on the lower side, sync B: tight on the upper side.
        c.on_sync(SyncSample {
            send_local_ns: 0,
            master_ns: 100,
            recv_local_ns: 10,
        })
        .unwrap();
        c.on_sync(SyncSample {
            send_local_ns: 50,
            master_ns: 140,
            recv_local_ns: 100,
        })
        .unwrap();
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
        })
        .unwrap();
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

    /// The caller reads its clock at `t`, stalls, and a
    /// sync sent after `t` is applied before it calls `get_ts(t)`. Using that
    /// sample at `t` gives an upper bound below the master's clock at `t`,
    /// so the timestamp would be in the past when the call began (breaking
    /// strictness, FaRMv2 Lemma 1).
    #[test]
    fn a_sample_newer_than_the_callers_reading_is_not_used() {
        // Master clock = client clock = true time; drift bound 1000 ppm.
        let mut c = ClockSync::new(1000);
        c.on_sync(SyncSample {
            send_local_ns: 0,
            master_ns: 5,
            recv_local_ns: 10,
        })
        .unwrap();
        let t = 1_000_000; // the caller reads its clock here, then stalls
        c.on_sync(SyncSample {
            send_local_ns: 5_000_000,
            master_ns: 5_000_000, // read at once by the master
            recv_local_ns: 5_000_010,
        })
        .unwrap();
        let tk = c.get_ts(t).unwrap();
        assert!(
            tk.ts.0 >= t,
            "ts {} below the master's clock {t} when the call began",
            tk.ts.0
        );
        let iv = c.time(t).unwrap();
        assert!(iv.lower <= t && t <= iv.upper, "{iv:?} misses {t}");
        // A reading older than every retained sample is an error, not a guess.
        let mut d = ClockSync::new(1000);
        for i in 1..=(RETAINED_SAMPLES as u64 + 1) {
            d.on_sync(SyncSample {
                send_local_ns: i * 1000,
                master_ns: i * 1000,
                recv_local_ns: i * 1000,
            })
            .unwrap();
        }
        assert!(matches!(
            d.time(1500),
            Err(ClockError::StaleLocalTime { .. })
        ));
    }

    /// A master whose clock goes backwards is reported,
    /// not clamped.
    #[test]
    fn a_master_clock_going_backwards_is_reported() {
        let mut c = ClockSync::new(1000);
        c.on_sync(SyncSample {
            send_local_ns: 0,
            master_ns: 1_000_000,
            recv_local_ns: 100,
        })
        .unwrap();
        let before = c.time(200_000).unwrap();
        let r = c.on_sync(SyncSample {
            send_local_ns: 300_000,
            master_ns: 500_000, // went back by more than the drift allows
            recv_local_ns: 300_100,
        });
        assert!(matches!(r, Err(ClockError::Inconsistent { .. })), "{r:?}");
        assert_eq!(c.stats().inconsistent, 1);
        let after = c.time(400_000).unwrap();
        assert!(
            after.lower >= before.lower,
            "the bad sample was not applied"
        );
    }

    /// FaRMv2 §4.3: global time stays monotonic across a master failover,
    /// and no time is handed out while disabled.
    #[test]
    fn fast_forward_keeps_time_monotonic_across_a_master_failover() {
        // Old master: local = true time. Nodes a and b sync with it; b's
        // clock runs 900 ppm fast and is 7 ms ahead.
        let mut a = ClockSync::new(1000);
        let mut b = ClockSync::new(1000);
        let lb = |t: u64| local(t, 7_000_000, 900);
        for t in (1_000_000..5_000_000u64).step_by(250_000) {
            a.on_sync(SyncSample {
                send_local_ns: t,
                master_ns: t + 10_000,
                recv_local_ns: t + 20_000,
            })
            .unwrap();
            b.on_sync(SyncSample {
                send_local_ns: lb(t),
                master_ns: t + 10_000,
                recv_local_ns: lb(t + 20_000),
            })
            .unwrap();
        }
        // The highest timestamp handed out before the failure.
        let t_fail = 5_000_000u64;
        let handed_a = a.get_ts(t_fail).unwrap().ts.0;
        let handed_b = b.get_ts(lb(t_fail)).unwrap().ts.0;
        // NEW-CONFIG: both disable and report FF.
        a.disable();
        b.disable();
        assert_eq!(a.get_ts(t_fail + 1), Err(ClockError::Disabled));
        assert_eq!(a.time(t_fail + 1), Err(ClockError::Disabled));
        let later = t_fail + 3_000_000; // three ms of lease wait
        let ff = a
            .fast_forward_value(later)
            .max(b.fast_forward_value(lb(later)));
        assert!(ff >= handed_a.max(handed_b));
        // a becomes master; its local clock says `later`.
        a.become_master(later, ff);
        let first = a.get_ts(later).unwrap().ts.0;
        assert!(first >= ff && first > handed_a && first > handed_b);
        assert_eq!(a.master_time(later + 5), first + 5);
        // b follows: disabled until its first sync with a; a sync from the
        // old master below FF is not used.
        b.follow_new_master(ff, 1000);
        assert_eq!(b.time(lb(later)), Err(ClockError::Disabled));
        b.on_sync(SyncSample {
            send_local_ns: lb(later),
            master_ns: t_fail,
            recv_local_ns: lb(later) + 10,
        })
        .unwrap();
        assert!(
            b.is_disabled(),
            "a pre-failover reply does not enable the clock"
        );
        let s = lb(later + 100_000);
        let m = a.master_time(later + 110_000);
        b.on_sync(SyncSample {
            send_local_ns: s,
            master_ns: m,
            recv_local_ns: lb(later + 120_000),
        })
        .unwrap();
        assert!(!b.is_disabled());
        let iv = b.time(lb(later + 120_000)).unwrap();
        assert!(iv.lower >= ff, "{iv:?} below FF {ff}");
        // A second failover continues from the new FF.
        a.disable();
        let ff2 = a
            .fast_forward_value(later + 1_000_000)
            .max(b.fast_forward_value(lb(later + 1_000_000)));
        b.become_master(lb(later + 1_000_000), ff2);
        assert!(b.get_ts(lb(later + 1_000_000)).unwrap().ts.0 >= a.master_time(later + 1_000_000));
        b.check_invariants(lb(later + 1_000_000));
    }

    /// A process cut off from the clock master must stop handing
    /// out its time once its samples are older than the maximum age, and a
    /// fresh sample brings it back even when an older one still gives the
    /// best bound.
    #[test]
    fn samples_older_than_the_maximum_age_are_not_used() {
        const MS: u64 = 1_000_000;
        let mut c = ClockSync::new(1000).with_max_sample_age(10 * MS);
        let sync = |c: &mut ClockSync, send: u64, master: u64, recv: u64| {
            c.on_sync(SyncSample {
                send_local_ns: send,
                master_ns: master,
                recv_local_ns: recv,
            })
            .unwrap()
        };
        sync(&mut c, 0, 1_000, 10_000);
        assert!(c.time(5 * MS).is_ok());
        assert!(
            c.get_ts(10 * MS).is_ok(),
            "exactly the maximum age is usable"
        );
        assert_eq!(
            c.time(10 * MS + 1),
            Err(ClockError::Expired {
                age_ns: 10 * MS + 1
            })
        );
        assert!(c.get_ts(20 * MS).is_err());
        // A later, looser sample (long round trip) is fresh: it is used.
        sync(&mut c, 19 * MS, 19 * MS + 500_000, 20 * MS);
        let iv = c.time(21 * MS).expect("fresh again");
        assert!(iv.lower <= 21 * MS && 21 * MS <= iv.upper + MS, "{iv:?}");
        // Without a limit the old sample stays usable forever.
        let mut u = ClockSync::new(1000);
        sync(&mut u, 0, 1_000, 10_000);
        assert!(u.time(1_000 * MS).is_ok());
    }
}
