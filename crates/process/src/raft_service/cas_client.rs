//! The coordination service's client (FaRM §5.2 step 3): every node sends
//! its CAS, read and time-bound requests to the leader it knows, follows
//! hints, moves on after a timeout, and counts "the register holds exactly
//! my proposal" as a win.

use super::*;

/// A compare-and-swap in flight from this node.
#[derive(Clone, Debug)]
struct CasRequest {
    req: u64,
    expected: ConfigId,
    proposed_toml: String,
    target: usize,
    deadline_ns: u64,
    tries: u32,
}

/// One request to the service in flight from this node (a time-bound
/// raise or a read): its id, the group member it goes to (index), when it
/// times out (ns), and how often it was sent.
#[derive(Clone, Debug)]
struct Attempt {
    req: u64,
    target: usize,
    deadline_ns: u64,
    tries: u32,
}

impl Attempt {
    /// Count one more send at `now`: the destination, if `target` names one.
    fn arm(&mut self, group: &[NodeId], now: u64, timeout_ns: u64) -> Option<NodeId> {
        let to = *group.get(self.target)?;
        self.deadline_ns = now + timeout_ns;
        self.tries += 1;
        Some(to)
    }

    /// At a tick: `None` while not timed out; `Some(false)` to give up
    /// after `max_tries`; else `Some(true)` with the next member targeted.
    fn timed_out(&mut self, now: u64, max_tries: usize, group_len: usize) -> Option<bool> {
        if now < self.deadline_ns {
            return None;
        }
        if self.tries as usize >= max_tries {
            return Some(false);
        }
        self.target = (self.target + 1) % group_len.max(1);
        Some(true)
    }
}

/// A time-bound raise in flight from this node.
#[derive(Clone, Debug)]
struct BoundRequest {
    to_ns: u64,
    at: Attempt,
}

/// What [`CasClient`] asks of its node.
#[derive(Clone, Debug, PartialEq)]
pub enum CasOutput {
    /// The answer to [`CasClient::read`]: a configuration the service
    /// stored.
    Current(Box<Configuration>),
    /// Send `msg` to group member `to`.
    Send {
        /// Destination.
        to: NodeId,
        /// The message.
        msg: CoordMessage,
    },
    /// The CAS is decided: `Ok` if this node's proposal is the
    /// configuration now, else the service's configuration (or, after
    /// giving up, the expected one back).
    Done(Result<(), Box<Configuration>>),
    /// The service stored this time bound, global ns, together with a
    /// configuration whose CM is `cm` (from a CAS answer or a raise's).
    TimeBound {
        /// The bound, global ns.
        bound_ns: u64,
        /// The CM of the configuration stored with it.
        cm: NodeId,
    },
}

/// The requesting side of the service, on every node (FaRM §5.2 step 3).
#[derive(Debug)]
pub struct CasClient {
    me: NodeId,
    group: Vec<NodeId>,
    params: RaftParams,
    leader_hint: Option<NodeId>,
    next_req: u64,
    pending: Option<(CasRequest, Configuration)>,
    bound: Option<BoundRequest>,
    reading: Option<Attempt>,
    out: Vec<CasOutput>,
}

impl CasClient {
    /// The client of node `me` for `config`'s coordination group.
    pub fn new(config: &Configuration, me: NodeId) -> Self {
        CasClient {
            me,
            group: config.coordination_group(),
            params: RaftParams::from_config(config),
            leader_hint: None,
            next_req: 1,
            pending: None,
            bound: None,
            reading: None,
            out: Vec::new(),
        }
    }

    /// True if an outside service answers instead (no group configured).
    pub fn is_external(&self) -> bool {
        self.group.is_empty()
    }

    /// The leader as this node's own replica knows it (if it hosts one):
    /// fresher than the hint from the last answer, which a leadership
    /// transfer or an election may have outdated.
    pub fn hint_leader(&mut self, leader: Option<NodeId>) {
        if let Some(l) = leader.filter(|l| self.group.contains(l)) {
            self.leader_hint = Some(l);
        }
    }

    /// Ask the service to replace `expected` by `proposed`. A request
    /// still in flight is abandoned (its answer is ignored).
    pub fn start(&mut self, now: u64, expected: ConfigId, proposed: Configuration) {
        let proposed_toml = match proposed.to_toml() {
            Ok(t) => t,
            Err(_) => {
                self.out.push(CasOutput::Done(Err(Box::new(proposed))));
                return;
            }
        };
        let at = self.new_attempt(now);
        self.pending = Some((
            CasRequest {
                req: at.req,
                expected,
                proposed_toml,
                target: at.target,
                deadline_ns: at.deadline_ns,
                tries: at.tries,
            },
            proposed,
        ));
        self.send_pending(now);
    }

    /// Ask the service to raise its time bound to at least `to_ns` (global
    /// ns); answered by [`CasOutput::TimeBound`]. A raise in flight to at
    /// least as much is kept; a lower one is replaced. A raise that finds
    /// no leader is dropped after the same number of tries as a CAS (the
    /// clock master asks again).
    pub fn raise_time_bound(&mut self, now: u64, to_ns: u64) {
        if self.bound.as_ref().is_some_and(|b| b.to_ns >= to_ns) {
            return;
        }
        let at = self.new_attempt(now);
        self.bound = Some(BoundRequest { to_ns, at });
        self.send_bound(now);
    }

    /// Ask a replica for the configuration the service stores; answered
    /// by [`CasOutput::Current`]. Any replica answers (no leader needed);
    /// a read in flight is kept; one that goes unanswered is dropped after
    /// the same number of tries as a CAS (the caller asks again).
    pub fn read(&mut self, now: u64) {
        if self.reading.is_some() || self.group.is_empty() {
            return;
        }
        self.reading = Some(self.new_attempt(now));
        self.send_read(now);
    }

    /// A new request id, aimed at the last known leader (else the first
    /// member).
    fn new_attempt(&mut self, now: u64) -> Attempt {
        let target = self
            .leader_hint
            .and_then(|l| self.group.iter().position(|n| *n == l))
            .unwrap_or(0);
        let req = self.next_req;
        self.next_req += 1;
        Attempt {
            req,
            target,
            deadline_ns: now,
            tries: 0,
        }
    }

    fn send_read(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some(r) = &mut self.reading else {
            return;
        };
        let Some(to) = r.arm(&self.group, now, timeout) else {
            return;
        };
        let msg = CoordMessage::Read {
            from: self.me,
            req: r.req,
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    /// The bound a raise in flight asks for, global ns.
    pub fn raising_time_bound_to(&self) -> Option<u64> {
        self.bound.as_ref().map(|b| b.to_ns)
    }

    fn send_bound(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some(b) = &mut self.bound else {
            return;
        };
        let Some(to) = b.at.arm(&self.group, now, timeout) else {
            return;
        };
        let msg = CoordMessage::RaiseTimeBound {
            from: self.me,
            req: b.at.req,
            to_ns: b.to_ns,
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    fn send_pending(&mut self, now: u64) {
        let timeout = self.params.request_timeout_ns();
        let Some((r, _)) = &mut self.pending else {
            return;
        };
        let Some(&to) = self.group.get(r.target) else {
            return;
        };
        r.deadline_ns = now + timeout;
        r.tries += 1;
        let msg = CoordMessage::Cas {
            from: self.me,
            req: r.req,
            expected: r.expected,
            proposed_toml: r.proposed_toml.clone(),
        };
        self.out.push(CasOutput::Send { to, msg });
    }

    /// An answer from the service.
    pub fn on_message(&mut self, now: u64, msg: &CoordMessage) {
        if let CoordMessage::CasReply {
            time_bound_ns, cm, ..
        } = msg
        {
            // Any answer, even a late one, tells a bound that is stored.
            self.out.push(CasOutput::TimeBound {
                bound_ns: *time_bound_ns,
                cm: *cm,
            });
        }
        if let (
            Some(r),
            CoordMessage::CasReply {
                req, current_toml, ..
            },
        ) = (&self.reading, msg)
        {
            if *req == r.req {
                self.reading = None;
                if let Ok(c) = Configuration::from_toml(current_toml) {
                    self.out.push(CasOutput::Current(Box::new(c)));
                }
                return;
            }
        }
        if let Some(b) = &mut self.bound {
            match msg {
                CoordMessage::TimeBound { req, bound_ns, cm } if *req == b.at.req => {
                    if let Some(l) = self.group.get(b.at.target) {
                        self.leader_hint = Some(*l);
                    }
                    self.bound = None;
                    self.out.push(CasOutput::TimeBound {
                        bound_ns: *bound_ns,
                        cm: *cm,
                    });
                    return;
                }
                CoordMessage::NotLeader { req, leader } if *req == b.at.req => {
                    let next = leader.and_then(|l| self.group.iter().position(|n| *n == l));
                    match next {
                        Some(i) if i != b.at.target => {
                            b.at.target = i;
                            self.leader_hint = *leader;
                            self.send_bound(now);
                        }
                        _ => {
                            b.at.target = (b.at.target + 1) % self.group.len().max(1);
                            b.at.deadline_ns =
                                now + self.params.heartbeat_ticks as u64 * self.params.tick_ns;
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
        if let CoordMessage::TimeBound { bound_ns, cm, .. } = msg {
            // A late answer to a replaced raise: still a stored bound.
            self.out.push(CasOutput::TimeBound {
                bound_ns: *bound_ns,
                cm: *cm,
            });
            return;
        }
        let Some((r, proposed)) = &mut self.pending else {
            return;
        };
        match msg {
            CoordMessage::CasReply {
                req,
                swapped,
                current_toml,
                ..
            } if *req == r.req => {
                let mine = *swapped || *current_toml == r.proposed_toml;
                let result = if mine {
                    Ok(())
                } else {
                    match Configuration::from_toml(current_toml) {
                        Ok(c) => Err(Box::new(c)),
                        Err(_) => Err(Box::new(proposed.clone())),
                    }
                };
                if let Some(l) = self.group.get(r.target) {
                    self.leader_hint = Some(*l);
                }
                self.pending = None;
                self.out.push(CasOutput::Done(result));
            }
            CoordMessage::NotLeader { req, leader } if *req == r.req => {
                match leader.and_then(|l| self.group.iter().position(|n| *n == l)) {
                    Some(i) if i != r.target => {
                        r.target = i;
                        self.leader_hint = *leader;
                        self.send_pending(now);
                    }
                    _ => {
                        // No leader yet (an election is on): try the next
                        // replica after a heartbeat.
                        r.target = (r.target + 1) % self.group.len().max(1);
                        r.deadline_ns =
                            now + self.params.heartbeat_ticks as u64 * self.params.tick_ns;
                    }
                }
            }
            _ => {}
        }
    }

    /// Resend after a timeout, or give up (the reconfiguration starts over).
    pub fn tick(&mut self, now: u64, expected_config: &Configuration) {
        let tries = 4 * self.group.len().max(1);
        let n = self.group.len();
        match self
            .bound
            .as_mut()
            .and_then(|b| b.at.timed_out(now, tries, n))
        {
            Some(true) => self.send_bound(now),
            Some(false) => self.bound = None,
            None => {}
        }
        match self
            .reading
            .as_mut()
            .and_then(|r| r.timed_out(now, tries, n))
        {
            Some(true) => self.send_read(now),
            Some(false) => self.reading = None,
            None => {}
        }
        let Some((r, _)) = &mut self.pending else {
            return;
        };
        if now < r.deadline_ns {
            return;
        }
        if r.tries as usize >= 4 * self.group.len().max(1) {
            self.pending = None;
            self.out
                .push(CasOutput::Done(Err(Box::new(expected_config.clone()))));
            return;
        }
        r.target = (r.target + 1) % self.group.len().max(1);
        self.send_pending(now);
    }

    /// When the pending request times out, ns.
    pub fn next_wake_ns(&self) -> Option<u64> {
        let cas = self.pending.as_ref().map(|(r, _)| r.deadline_ns);
        let bound = self.bound.as_ref().map(|b| b.at.deadline_ns);
        let read = self.reading.as_ref().map(|r| r.deadline_ns);
        [cas, bound, read].into_iter().flatten().min()
    }

    /// Outputs so far, in order.
    pub fn drain(&mut self) -> Vec<CasOutput> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft_service::testing::*;

    #[test]
    fn exactly_one_of_two_racing_swaps_wins_and_the_loser_learns_the_winner() {
        let mut net = Net::new();
        net.run(40);
        let leader = net.leader().expect("a leader within 40 ms");
        assert_eq!(
            leader, 1,
            "rank 0 campaigns first (deterministic timeouts), then hands \
             leadership off the CM's node (0) to the first caught-up replica"
        );
        let (a, b) = (successor(1), successor(2));
        net.clients[1].start(net.now, ConfigId(1), a.clone());
        net.clients[2].start(net.now, ConfigId(1), b);
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        assert_eq!(net.done[2].len(), 1);
        let lost = net.done[2][0].clone().unwrap_err();
        assert_eq!(lost.id(), ConfigId(2));
        assert_eq!(
            lost.cm(),
            a.cm(),
            "the loser learns the winner's configuration"
        );
        for r in &net.replicas {
            assert_eq!(
                r.current().id(),
                ConfigId(2),
                "every replica applied the swap"
            );
            r.check_invariants();
        }
    }

    /// A read returns the stored configuration, from a follower too (the
    /// group's replicas here; a node restored from disk that reads it may
    /// host no replica).
    #[test]
    fn a_read_returns_the_stored_configuration_from_any_replica() {
        let mut net = Net::new();
        net.run(40);
        net.clients[1].start(net.now, ConfigId(1), successor(1));
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        let leader = net.leader().unwrap();
        let follower = (leader + 1) % 3;
        // Point the reader at the follower: it answers without the leader.
        net.clients[2].hint_leader(Some(NodeId(follower as u32)));
        net.cut.insert(NodeId(leader as u32));
        net.clients[2].read(net.now);
        net.run(5);
        assert_eq!(net.reads[2], vec![ConfigId(2)]);
    }

    #[test]
    fn the_time_bound_is_raised_replicated_survives_restarts_and_never_drops() {
        let mut net = Net::new();
        net.run(40);
        let leader = net.leader().expect("a leader within 40 ms");
        net.clients[0].raise_time_bound(net.now, 5_000);
        net.run(10);
        assert_eq!(net.bounds[0].last(), Some(&5_000), "the raise is answered");
        assert_eq!(net.clients[0].raising_time_bound_to(), None, "and done");
        // A lower raise is answered with the stored, higher bound.
        net.clients[2].raise_time_bound(net.now, 3_000);
        net.run(10);
        assert_eq!(net.bounds[2].last(), Some(&5_000));
        // A CAS answer carries the bound too (a new CM starts above it).
        net.clients[1].start(net.now, ConfigId(1), successor(1));
        net.run(20);
        assert_eq!(net.done[1], vec![Ok(())]);
        assert_eq!(net.bounds[1].last(), Some(&5_000));
        // The leader restarts from its disk: the bound is still there, on
        // every replica.
        let disk = net.disks[leader].clone().expect("persisted");
        net.replicas[leader] =
            ServiceReplica::new(&config(), NodeId(leader as u32), Some(&disk)).unwrap();
        net.run(60);
        for r in &net.replicas {
            assert_eq!(r.time_bound_ns(), 5_000);
            r.check_invariants();
        }
        net.clients[0].raise_time_bound(net.now, 9_000);
        net.run(20);
        assert_eq!(net.bounds[0].last(), Some(&9_000));
        assert!(
            net.bounds.iter().flatten().all(|b| *b >= 3_000),
            "no answer below a bound already stored: {:?}",
            net.bounds
        );
    }
}
