//! Simulated clocks: [`SimClock`], each process's drifting local time,
//! and [`ClockDraw`], which draws every clock's offset and drift from the
//! seed within the configured bound.

use crate::SimConfig;
use rand::rngs::StdRng;
use rand::Rng;

/// A simulated clock: `local = offset + true × (1 + drift_ppb / 1e9)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimClock {
    pub(crate) offset_ns: u64,
    pub(crate) drift_ppb: i64,
}

impl SimClock {
    pub(crate) fn local(&self, true_ns: u64) -> u64 {
        let t = true_ns as i128;
        (self.offset_ns as i128 + t + t * self.drift_ppb as i128 / 1_000_000_000) as u64
    }
    /// Smallest true time at which local >= `local_ns`.
    pub(crate) fn true_at(&self, local_ns: u64) -> u64 {
        let l = local_ns as i128 - self.offset_ns as i128;
        let t = (l * 1_000_000_000)
            .div_euclid(1_000_000_000 + self.drift_ppb as i128)
            .max(0) as u64;
        let mut t = t.saturating_sub(2);
        while self.local(t) < local_ns {
            t += 1;
        }
        t
    }
}

/// Draws the processes' clocks: a random offset, and a drift within half
/// the bound each way from true time, so that any two clocks stay within
/// the bound of each other whichever node becomes master. With the whole
/// bound each way, a new master and a client could drift up to twice the
/// bound apart, and the client's clock sync could never agree with the
/// master's time.
pub(crate) struct ClockDraw {
    bound_ppb: i64,
    drifting_node: Option<(u32, i64)>,
}

impl ClockDraw {
    pub(crate) fn new(cfg: &SimConfig) -> Self {
        let share = if cfg.faults.wide_drift { 49 } else { 22 };
        let bound_ppb = match cfg.drifting_node {
            Some(_) => cfg.max_rate_ppm as i64 * 1000 / 4,
            None => (cfg.drift_ppm as i64) * 1000 * share / 100,
        };
        ClockDraw {
            bound_ppb,
            drifting_node: cfg.drifting_node,
        }
    }

    /// A clock with a random offset; the master's runs at true rate, any
    /// other drifts within the bound (offset drawn first, then drift).
    pub(crate) fn draw(&self, rng: &mut StdRng, master: bool) -> SimClock {
        let bound_ppb = self.bound_ppb;
        SimClock {
            offset_ns: rng.gen_range(0..1_000_000_000),
            drift_ppb: if master {
                0
            } else {
                rng.gen_range(-bound_ppb..=bound_ppb)
            },
        }
    }

    /// Node `n`'s clock: drawn as any other, then given exactly
    /// `SimConfig::drifting_node`'s drift if it is that node.
    pub(crate) fn node(&self, rng: &mut StdRng, n: u32, master: bool) -> SimClock {
        let mut clock = self.draw(rng, master);
        if let Some((d, ppm)) = self.drifting_node {
            if d == n {
                clock.drift_ppb = ppm * 1000;
            }
        }
        clock
    }
}
