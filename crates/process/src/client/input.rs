//! The client process's inputs: messages, ticks, lost connections and
//! lease traffic (FaRM §5.1), and the wake-up every input ends with.

use super::*;

impl ClientProcess {
    // ----- inputs from the network and time ------------------------------

    /// A frame from node `from`.
    /// [`ClientProcess::on_message`] for a frame the shell stamped on
    /// arrival at `received_local_ns` (≤ `now`), before it could hand it to
    /// the process: a clock sync's sample then ends at the arrival, not at
    /// `now` (FaRMv2 §4.1: the master's time was read before the reply
    /// arrived, so the bounds hold either way; the earlier stamp only
    /// makes the lower bound tighter). A stamp after `now` is taken as
    /// `now`.
    pub fn on_message_received(
        &mut self,
        now: u64,
        received_local_ns: u64,
        from: NodeId,
        frame: Frame,
    ) {
        self.received_at = Some(received_local_ns.min(now));
        self.on_message(now, from, frame);
        self.received_at = None;
    }

    pub fn on_message(&mut self, now: u64, from: NodeId, frame: Frame) {
        match frame {
            Frame::Response { id, resp } => self.on_response(now, from, id, resp),
            Frame::OneWay {
                req: Request::Lease(m),
                ..
            } => self.on_lease(now, from, &m),
            _ => {}
        }
        self.maybe_closed();
        self.arm(now);
    }

    /// End every wait whose time has come, oldest first. Called by every
    /// input (a tick, a message, an application call; through [`Self::arm`]):
    /// under load an input arrives every few microseconds, so most
    /// uncertainty waits end at the first input after their deadline
    /// instead of at the ticker's wake-up, which comes later on a busy
    /// machine.
    pub(super) fn end_due_waits(&mut self, now: u64) {
        while let Some((&(ready, seq), _)) = self.waits.iter().next() {
            if ready > now {
                break;
            }
            if let Some(w) = self.waits.remove(&(ready, seq)) {
                self.wait_done(now, ready, w);
            }
        }
    }

    /// The local time the earliest wait (an uncertainty wait, a parked
    /// clock wait, a sleep) ends at, if any. The shell re-reads its clock
    /// against it before it lets go of the process, so a wait that came
    /// due while an input was being processed ends there and then, not
    /// at the ticker's next wake-up.
    pub fn next_wait_ns(&self) -> Option<u64> {
        self.waits.keys().next().map(|&(ready, _)| ready)
    }

    /// End every wait due at `now` and route nothing else: the cheap part
    /// of [`Self::tick`], for a shell that finds a wait due between inputs.
    pub fn end_waits_due(&mut self, now: u64) {
        self.end_due_waits(now);
        self.maybe_closed();
        self.arm(now);
    }

    /// The connection to `node` is lost: every RPC to it fails now.
    pub fn on_disconnect(&mut self, now: u64, node: NodeId) {
        let ids: Vec<u64> = self
            .rpcs
            .iter()
            .filter(|(_, r)| r.to == node)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.rpc_failed(now, id, "connection lost");
        }
        self.maybe_closed();
        self.arm(now);
    }

    /// Time passes: expire RPCs, end waits, sync the clock, flush truncations.
    pub fn tick(&mut self, now: u64) {
        self.armed_ns = None;
        while let Some(&(deadline, id)) = self.deadlines.iter().next() {
            if deadline > now {
                break;
            }
            self.rpc_failed(now, id, "timed out");
        }
        self.end_due_waits(now);
        let sync_due = self.next_sync_ns.is_none_or(|t| now >= t);
        if sync_due && !self.sync_inflight && !self.clock.is_master() {
            self.next_sync_ns = Some(now + self.sync_interval_ns);
            self.sync_inflight = true;
            // A reply later than half the sample age is hardly usable
            // (its round trip is its uncertainty), and a lost datagram
            // must not hold the next sync back for `rpc_timeout_ms`.
            let timeout_ns = (self.clock_park_ns / 2).max(2 * self.sync_interval_ns);
            self.send_rpc_within(
                now,
                self.cm,
                Request::Clock(ClockRequest::Sync),
                Purpose::ClockSync { send_local_ns: now },
                timeout_ns,
            );
        }
        if now >= self.next_flush_ns {
            self.flush_truncates(now);
            self.next_flush_ns = now + self.limits.truncate_flush_us * 1000;
        }
        self.lease_tick(now);
        self.maybe_closed();
        self.arm(now);
    }

    /// FaRM §5.1 for a client: renew every `lease / 5` with the CM. A CM
    /// that has not granted for a lease may have been replaced: ask for
    /// the configuration. (The client does not stop when its lease lapses:
    /// its requests carry its configuration id, and the configuration that
    /// recovers its transactions refuses them.)
    pub(super) fn lease_tick(&mut self, now: u64) {
        if self.coordinator != 0 && self.closing.is_none() {
            if let Some(p) = self.lease_params {
                let (me, config, cm) = (
                    LeaseHolder::Client(self.coordinator),
                    self.config_id,
                    self.cm,
                );
                self.lease.with(now, |r, now| {
                    if let LeaseRole::None = r {
                        *r = LeaseRole::Member(LeaseClient::new(p, me, config, cm, now));
                    }
                });
            }
        }
        let suspected = self.lease.with(now, |r, now| match r {
            LeaseRole::Member(l) => l.cm_suspected(now),
            _ => false,
        });
        if let Some((cm, m)) = self.lease.renew(now) {
            self.send_oneway(cm, Request::Lease(m));
            if suspected {
                self.refresh_config(now, None);
            }
        }
    }

    /// A lease grant from the CM; one for a newer configuration means this
    /// client missed a reconfiguration.
    pub(super) fn on_lease(&mut self, now: u64, from: NodeId, m: &LeaseMessage) {
        if let LeaseMessage::Grant { config, .. } = m {
            if *config > self.config_id {
                self.refresh_config(now, Some(from));
                return;
            }
        }
        // The CM holds no lease at a client: no GrantAck. A grant for a
        // newer configuration than the lease's comes back as Forward.
        if let LeaseOutcome::Forward = self.lease.on_message(now, LeaseFrom::Node(from), m) {
            self.refresh_config(now, Some(from));
        }
    }

    pub(super) fn send_oneway(&mut self, to: NodeId, req: Request) {
        self.effects.push(Effect::Send {
            to,
            frame: Frame::OneWay {
                config: self.config_id,
                truncate: Default::default(),
                req,
            },
        });
    }

    /// End the waits that are due, then ask for a wake-up at the earliest
    /// pending deadline, if it is earlier than the one already asked for.
    /// Every input ends with it.
    pub(super) fn arm(&mut self, now: u64) {
        self.end_due_waits(now);
        let mut at = u64::MAX;
        if !self.sync_inflight && !self.clock.is_master() {
            at = self.next_sync_ns.unwrap_or(now);
        }
        if let Some(&(d, _)) = self.deadlines.iter().next() {
            at = at.min(d);
        }
        match self.lease.next_renew_ns() {
            Some(t) => at = at.min(t),
            None if self.lease_params.is_some() && self.coordinator != 0 => at = at.min(now),
            None => {}
        }
        if let Some((&(w, _), _)) = self.waits.iter().next() {
            at = at.min(w);
        }
        if self.truncates.values().any(|q| !q.is_empty()) {
            at = at.min(self.next_flush_ns.max(now));
        }
        if at == u64::MAX {
            return;
        }
        if self.armed_ns.is_none_or(|a| at < a) {
            self.armed_ns = Some(at);
            self.effects.push(Effect::Wake { at_local_ns: at });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::*;

    /// An uncertainty wait ends at the first input at or after its
    /// deadline, whatever the input (here a stray reply, then an
    /// application call), not only at a tick: on a busy client the
    /// ticker's wake-up comes tens of microseconds late. An input before
    /// the deadline ends nothing.
    #[test]
    fn a_due_wait_ends_at_any_input_not_only_at_a_tick() {
        let stray = |p: &mut ClientProcess, now: u64| {
            p.on_message(
                now,
                NodeId(0),
                Frame::Response {
                    id: 999_999,
                    resp: Response::Txn(TxnResponse::Lock(Ok(()))),
                },
            );
            p.drain_effects()
        };
        for by_call in [false, true] {
            let mut p = synced_client(false);
            p.begin(2000, 1, 0, TxnOptions::default());
            let ready = p
                .drain_effects()
                .iter()
                .filter_map(|e| match e {
                    Effect::Wake { at_local_ns } => Some(*at_local_ns),
                    _ => None,
                })
                .last()
                .expect("the wait asks for a wake-up");
            assert!(ready > 2000, "a wait of zero length proves nothing");
            assert!(replies(&stray(&mut p, ready - 1)).is_empty(), "ended early");
            let e = if by_call {
                p.begin(ready, 2, 1, TxnOptions::default());
                p.drain_effects()
            } else {
                stray(&mut p, ready)
            };
            assert!(
                replies(&e)
                    .iter()
                    .any(|(c, r)| *c == 1 && matches!(r, CallResult::Began { .. })),
                "the due wait did not end at the input (by_call = {by_call}): {:?}",
                replies(&e)
            );
            p.check_invariants();
        }
    }
}
