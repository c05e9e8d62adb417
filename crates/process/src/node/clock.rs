//! The node's clock duties (FaRMv2 §4.1, §4.3): the clock master's
//! answers to CLOCK-SYNC (in the process and on the lease thread), the FF
//! value, the stored time bound the master hands out time below and keeps
//! ahead of its time, the takeover at a CM change, and the clock-rate
//! checks (a member reports a rate off the master's; the CM decides who is
//! off).

use super::{DurableRecord, NodeEffect, NodeEvent, NodeProcess, Standing};
use crate::lease::{LeaseDesk, MasterClockView};
use meridian_config::Configuration;
use meridian_wire::{
    ClockRequest, ClockResponse, ConfigId, Frame, NodeId, ReconfigMessage, Rejection, Request,
    Response,
};

/// The clock master's lease thread answers a CLOCK-SYNC datagram
/// without the process lock (FaRMv2 §4.1: the master's delay in
/// answering widens every sample, so every uncertainty): `Some(reply)`
/// for a sync request carrying no piggybacked truncations (those only the
/// process may apply), from [`LeaseDesk::master_time`]; `None` for
/// anything else. The node shell's lease thread and the simulator both
/// answer through this, with the desk the process publishes its view to.
pub fn answer_clock_sync(desk: &LeaseDesk, now: u64, frame: &Frame) -> Option<Frame> {
    let Frame::Request {
        id,
        truncate,
        req: Request::Clock(ClockRequest::Sync),
        ..
    } = frame
    else {
        return None;
    };
    if !truncate.txs.is_empty() || truncate.low.is_some() {
        return None;
    }
    let resp = match desk.master_time(now) {
        Ok(master_ns) => ClockResponse::MasterTime { master_ns }.into(),
        Err(why) => Response::Rejected(Rejection::WrongRole(why.into())),
    };
    Some(Frame::Response { id: *id, resp })
}

/// The clock master's reserve below the stored time bound, ns: twice the
/// maximum sample age, which covers how far past the master's answer any
/// synchronised process's upper bound can run (see
/// [`ClockSync::set_time_bound`]).
pub(super) fn time_bound_reserve_ns(config: &Configuration) -> u64 {
    2 * config.clock.max_sample_age_us.saturating_mul(1000)
}

impl NodeProcess {
    /// The answer to a CLOCK-SYNC handled by the process (the lease
    /// thread answers most of them: [`answer_clock_sync`]): the clock
    /// master's time while it holds its lease majority and its clock
    /// serves, else a typed refusal (FaRMv2 §4.1, §4.3).
    pub(super) fn answer_sync(&mut self, now: u64) -> Response {
        // A master that lost its lease majority stops handing out
        // time (its successor's FF only covers it until then).
        let master = self.is_clock_master();
        let serving = master && self.may_serve(now);
        let clock = self.gateway.clock_mut();
        if !master {
            self.wrong_role("the clock master")
        } else if !serving {
            Response::Rejected(Rejection::WrongRole(
                "the clock master holds no lease majority now (FaRM §5.1): it hands \
                 out no time until it does"
                    .into(),
            ))
        } else if clock.is_disabled() {
            Response::Rejected(Rejection::WrongRole(
                "the clock is disabled during a CM change (FaRMv2 §4.3)".into(),
            ))
        } else {
            match clock.time(now) {
                Ok(iv) if clock.is_master() => ClockResponse::MasterTime {
                    master_ns: iv.upper,
                }
                .into(),
                Ok(_) => Response::Rejected(Rejection::WrongRole(
                    "the clock master has not taken over yet (FaRMv2 §4.3)".into(),
                )),
                Err(e) => Response::Rejected(Rejection::WrongRole(format!(
                    "the clock master hands out no time now: {e}"
                ))),
            }
        }
    }

    /// True for the clock master.
    pub fn is_clock_master(&self) -> bool {
        self.config.cm() == self.id
    }

    /// FaRMv2 §4.3's FF value at `now`: every time this process handed
    /// out, by itself or through its lease thread
    /// ([`LeaseDesk::master_time`]), is at most this.
    pub(super) fn ff_value(&mut self, now: u64) -> u64 {
        let handed = self.lease.master_clock_handed_ns();
        self.gateway.clock_mut().fast_forward_value(now).max(handed)
    }

    /// What the lease thread may hand out time from now: `Some` while the
    /// process itself would answer a CLOCK-SYNC with its time (the Sync
    /// arm of `on_message`): a member, the CM, its clock the master's,
    /// enabled, below the stored time bound less the reserve. The lease
    /// majority is checked by the thread at each answer.
    pub fn master_clock_view(&self) -> Option<MasterClockView> {
        let clock = self.gateway.clock();
        let eligible = self.standing == Standing::Member
            && self.is_clock_master()
            && clock.is_master()
            && !clock.is_disabled();
        eligible.then(|| MasterClockView {
            offset_ns: clock.master_offset_ns(),
            limit_ns: clock.time_bound_ns().map_or(u64::MAX, |b| {
                b.saturating_sub(time_bound_reserve_ns(&self.config))
            }),
        })
    }

    /// Publish [`NodeProcess::master_clock_view`] for the lease thread
    /// (after every input; withdrawn earlier where the clock may stop).
    pub(super) fn publish_master_clock(&mut self) {
        let view = self.master_clock_view();
        self.lease.set_master_clock(view);
    }

    /// The clock's interval at `now`, if synchronised.
    pub fn clock_time(&mut self, now: u64) -> Option<meridian_time::Interval> {
        self.gateway.clock_time(now)
    }

    /// Clock synchronisations rejected as inconsistent.
    pub fn clock_rejected(&self) -> u64 {
        self.gateway.stats().clock_rejected
    }

    /// The coordination service stored a time bound of `bound_ns` (global
    /// ns) with a configuration whose CM is `cm`: from a CAS answer or a
    /// raise's. Only this node as that CM uses it — a clock master may
    /// hand out time up to it (less the reserve), and a new master starts
    /// at the bound its CAS returned. A master a CAS replaced ignores
    /// bounds stored after it (its successor may raise them at once), so
    /// every time it hands out stays below the bound its successor starts
    /// at, whatever FF says (FF may know nothing of a member that never
    /// synchronised and so reports no upper bound).
    pub fn on_time_bound(&mut self, now: u64, bound_ns: u64, cm: NodeId) {
        if cm != self.id {
            if self.gateway.clock_mut().is_master() {
                meridian_bugs::mark!("a replaced clock master ignores its successor's time bound");
            }
            return;
        }
        if bound_ns >= self.time_bound_asked_ns {
            self.time_bound_asked_ns = 0;
        }
        self.time_bound_ns = self.time_bound_ns.max(bound_ns);
        let reserve = time_bound_reserve_ns(&self.config);
        let clock = self.gateway.clock_mut();
        if clock.is_master() {
            clock.set_time_bound(self.time_bound_ns, reserve);
        }
        self.keep_time_bound_ahead(now);
    }

    /// The clock master keeps the stored time bound at least half a window
    /// ahead of its time plus the reserve, raising it to a whole window
    /// ahead. A new CM whose CAS won raises it at once from the bound the
    /// CAS returned (where its time will start), so that its clock serves
    /// as soon as the configuration commits.
    pub(super) fn keep_time_bound_ahead(&mut self, now: u64) {
        // Applied with this node as CM, clock failover at the commit.
        let taking_over = self.clock_failover && self.config.cm() == self.id;
        let clock = self.gateway.clock_mut();
        let base = if clock.is_master() && self.config.cm() == self.id && !clock.is_disabled() {
            clock.master_time(now)
        } else if taking_over {
            self.takeover_bound_ns
        } else {
            return;
        };
        let reserve = time_bound_reserve_ns(&self.config);
        let window = self.config.clock.time_bound_window_ms.max(1) * 1_000_000;
        let enough = base.saturating_add(reserve + window / 2);
        if self.time_bound_ns >= enough {
            return;
        }
        let to_ns = base.saturating_add(reserve + window);
        if self.cas.is_external() {
            if self.time_bound_asked_ns < enough {
                self.time_bound_asked_ns = to_ns;
                self.effects.push(NodeEffect::RaiseTimeBound { to_ns });
            }
        } else if self.cas.raising_time_bound_to().is_none_or(|t| t < enough) {
            self.cas
                .hint_leader(self.service.as_ref().and_then(|r| r.leader()));
            self.cas.raise_time_bound(now, to_ns);
            self.after_cas(now);
        }
    }

    /// FaRMv2 §4.3: after a CM change, the new CM becomes clock master at
    /// FF (at least the bound its CAS returned) and the others follow it.
    /// Once per CM change: at [`ReconfigOutput::ClockReady`] when the
    /// commit still waits for removed members' leases, else at the commit.
    pub(super) fn take_over_clock(&mut self, now: u64, clock_ff_ns: u64) {
        if std::mem::take(&mut self.clock_failover) {
            let drift = self.config.clock.drift_ppm;
            let reserve = time_bound_reserve_ns(&self.config);
            let bound = self.time_bound_ns;
            let start = self.takeover_bound_ns;
            let clock = self.gateway.clock_mut();
            if self.config.cm() == self.id {
                // Start at or above the bound stored when this CM's CAS
                // won: above every time any earlier master handed out, even
                // what no FF value remembers (a whole-cluster restart).
                // Later raises are covered by FF, as in FaRMv2 §4.3.
                if start > clock_ff_ns {
                    meridian_bugs::mark!(
                        "a new clock master starts at the stored time bound above FF"
                    );
                }
                clock.become_master(now, clock_ff_ns.max(start));
                clock.set_time_bound(bound, reserve);
                let offset = clock.master_offset_ns();
                self.master_offset_ns = offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
                if self.participant.journaling() {
                    self.wal.node_records.push(DurableRecord::MasterClock {
                        offset_ns: self.master_offset_ns,
                    });
                }
            } else {
                clock.follow_new_master(clock_ff_ns, drift);
            }
            self.keep_time_bound_ahead(now);
        }
    }

    /// A member whose clock rate is off the master's reports it to the CM
    /// every lease until a configuration without it (or with another
    /// master) comes; the CM decides what to do with the reports.
    pub(super) fn clock_rate_tick(&mut self, now: u64) {
        if self.config.cm() == self.id {
            if self.rate_decide_at.is_some_and(|t| now >= t) {
                self.decide_clock_rates(now);
            }
            return;
        }
        let Some(r) = self.gateway.clock_mut().rate_exceeded() else {
            return;
        };
        if self.clock_rate_bad.is_none() {
            self.clock_rate_bad = Some(r.ppm);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                    node: self.id,
                    ppm: r.ppm,
                }));
        }
        if now >= self.next_rate_report_ns {
            self.next_rate_report_ns = now + self.lease_params.lease_ns;
            let msg = ReconfigMessage::ClockRate {
                config: self.config.id(),
                from: self.id,
                ppm: r.ppm,
            };
            self.send_oneway(self.config.cm(), Request::Reconfig(msg));
        }
    }

    /// CM: a member reports its clock rate off the master's.
    pub(super) fn on_clock_rate(&mut self, now: u64, config: ConfigId, from: NodeId, ppm: i64) {
        if config != self.config.id() || self.config.cm() != self.id || from == self.id {
            return;
        }
        self.rate_reports.insert(from, ppm);
        let window_ns = self.config.clock.rate_window_ms.max(1) * 1_000_000;
        self.rate_decide_at.get_or_insert(now + window_ns);
    }

    /// CM: one rate window after the first report. If most other members
    /// report the master's clock off, the odd clock is this one: the CM
    /// stops granting leases, so a backup CM (another clock master) takes
    /// over. Otherwise the reporting members are suspected and removed.
    fn decide_clock_rates(&mut self, now: u64) {
        self.rate_decide_at = None;
        let reports = std::mem::take(&mut self.rate_reports);
        let others = self.config.members().len().saturating_sub(1);
        if reports.len() * 2 > others {
            let ppm = reports.values().copied().sum::<i64>() / reports.len().max(1) as i64;
            self.clock_rate_bad = Some(-ppm);
            self.effects
                .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                    node: self.id,
                    ppm: -ppm,
                }));
            self.lease.set_serving(false);
            return;
        }
        let mut bad = Vec::new();
        for (n, ppm) in reports {
            if self.config.is_member(n) {
                self.effects
                    .push(NodeEffect::Event(NodeEvent::ClockRateExceeded {
                        node: n,
                        ppm,
                    }));
                bad.push(n);
            }
        }
        if !bad.is_empty() && self.reconfig.may_suspect_members() {
            self.note_suspect(now, bad.clone());
            self.reconfig.suspect_members(now, &bad);
        }
    }
}
