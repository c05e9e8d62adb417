//! The end of a run: [`SimReport`], the history and counters gathered
//! from the clients and nodes; the description of a run that did not
//! finish; and the clean-end check (every backup equal to its primary,
//! every log truncated) of a run without lossy faults.

use crate::executor::lock;
use crate::network::Addr;
use crate::{Event, Faults, Sim};
use meridian_checker::{History, Outcome};
use meridian_config::RegionMap;
use meridian_process::node::NodeEvent;
use meridian_wire::NodeId;
use std::cmp::Reverse;

/// Outcome of one simulation.
#[derive(Debug)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// The faults injected.
    pub faults: Faults,
    /// Recorded history.
    pub history: History,
    /// Committed transactions.
    pub committed: u64,
    /// Aborted attempts.
    pub aborted: u64,
    /// Attempts whose outcome is unknown.
    pub unknown: u64,
    /// Attempts aborted with `TooOld` (snapshot below the GC safe point).
    pub too_old: u64,
    /// Workload invariant failures (wrong audit totals, the time oracle).
    pub workload_failures: Vec<String>,
    /// Messages delivered.
    pub messages: u64,
    /// Messages dropped by faults.
    pub dropped: u64,
    /// Crashes injected (nodes + clients).
    pub crashes: u64,
    /// True when the time limit ended the run before every client finished.
    pub timed_out: bool,
    /// A region lost every complete replica (more than f failures at once,
    /// beyond the fault model): liveness is not expected after it.
    pub region_lost: bool,
    /// When timed out: what each unfinished client and each busy node was
    /// waiting for, one line each (to read a liveness failure).
    pub stuck: Vec<String>,
    /// Simulated time at the end, ns.
    pub end_ns: u64,
    /// Mean uncertainty of the timestamps taken, ns (live clients).
    pub mean_uncertainty_ns: u64,
    /// Thin-client transactions (`Execute`) committed by the nodes'
    /// embedded coordinators (included in `committed`).
    pub thin_committed: u64,
    /// The newest configuration any node committed (1: no change).
    pub last_config: u64,
    /// Transactions decided by recovery (FaRM §5.3): (committed, aborted).
    pub recovered: (u64, u64),
    /// LOCKs of a single blind write that waited at a primary for another
    /// transaction's lock and then took it (`limits.blind_lock_wait_us`),
    /// summed over the nodes alive at the end (a restart zeroes a node's).
    pub blind_locks_waited: u64,
    /// Region replicas the nodes let go of ([`NodeEffect::Discard`]: a
    /// refilled replica's old copy, a region moved away, a reset).
    pub discarded_replicas: u64,
    /// Single-read transactions' reads delivered to a node
    /// (`TxnRequest::ReadLatest`, [`SimConfig::single_reads`]).
    pub latest_reads: u64,
    /// Writes and copied versions the refill fence dropped
    /// (`RegionStore::merge_chunk`): on replicas let go of, and on those
    /// held by the nodes alive at the end (a restart zeroes a node's).
    pub stale_fill_writes: u64,
    /// Keys held by lock recovery with no object that a copy carried to a
    /// new replica (`ParticipantStats::copied_recovery_holds`), over the
    /// whole run: how often the swarm reaches that path of the fill fence.
    pub copied_recovery_holds: u64,
    /// Reconfiguration milestones: (true time ns, node, event).
    pub node_events: Vec<(u64, u32, NodeEvent)>,
    /// A hash of every event the run executed, in order, with its time
    /// (the `digest` module): equal for two runs exactly when they took
    /// the same steps.
    pub digest: u64,
}

impl Sim {
    /// One line per unfinished client and per node whose embedded
    /// coordinator is not quiet or that is reconfiguring or recovering.
    pub(crate) fn describe_stuck(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, c) in self.clients.iter().enumerate() {
            if c.finished {
                continue;
            }
            let detail = match &c.core {
                Some(core) => core.with(|p, _| p.describe_pending()),
                None => "crashed, not restarted".to_string(),
            };
            out.push(format!("client {i} (inc {}): {detail}", c.inc));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            match &n.process {
                Some(p) => {
                    out.push(format!(
                        "node {i} (inc {}): member {} config {} (cm {}, members {:?}) recovering {} ({}) held {:?} durable {} gateway {}",
                        n.inc,
                        p.is_member(),
                        p.config().id().0,
                        p.config().cm(),
                        p.config().members(),
                        p.recovering(),
                        p.describe_recovery(),
                        n.held_seqs(),
                        n.wal.last().map_or(0, |(s, _)| *s),
                        p.gateway().describe_pending()
                    ));
                }
                None => out.push(format!("node {i}: down")),
            }
        }
        let events = &self.node_events;
        for (t, n, e) in &events[events.len().saturating_sub(12)..] {
            out.push(format!("event t={:.3} ms node {n}: {e:?}", *t as f64 / 1e6));
        }
        out
    }

    pub(crate) fn finish(mut self, timed_out: bool) -> SimReport {
        let now = self.now();
        let mut history = History::default();
        if let Some(r) = self.initial.take() {
            history.push(r);
        }
        let mut failures = std::mem::take(&mut self.time_failures);
        for c in 0..self.clients.len() {
            self.harvest(c);
        }
        for slot in &self.clients {
            let mut log = lock(&slot.log);
            log.finish_current(Outcome::Unknown, now, None);
            history.extend(std::mem::take(&mut log.records));
            failures.append(&mut log.failures);
        }
        if !timed_out && !self.cfg.faults.is_lossy() {
            self.check_clean_end();
        }
        // A COMMIT-RECOVERY after a truncation released a hold on a key
        // whose committed write is not in place at that replica
        // (`ParticipantStats::holds_released_unapplied`; nodes alive at
        // the end, a restart zeroes a node's count).
        for (i, slot) in self.nodes.iter().enumerate() {
            if let Some(p) = slot.process.as_ref() {
                let n = p.participant().stats().holds_released_unapplied;
                if n > 0 {
                    failures.push(format!(
                        "n{i}: {n} lock-recovery holds released by a COMMIT-RECOVERY after a \
                         truncation, on keys whose committed write is not in place there"
                    ));
                }
            }
        }
        let (mut unrecorded_committed, mut thin_committed) = (0, 0);
        for slot in &self.clients {
            let l = lock(&slot.log);
            unrecorded_committed += l.unrecorded_committed;
            thin_committed += l.thin_committed;
        }
        let last_config = self
            .node_events
            .iter()
            .filter_map(|(_, _, e)| match e {
                NodeEvent::Committed(c) => Some(c.0),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        let recovered = self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .map(|p| p.recovery_stats())
            .fold((0, 0), |(c, a), s| (c + s.committed, a + s.aborted));
        let blind_locks_waited = self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .map(|p| p.read_hold_stats().blind_locks_waited)
            .sum();
        let stale_fill_writes = self.discarded_stale_fill_writes
            + self
                .nodes
                .iter()
                .filter_map(|n| n.process.as_ref())
                .map(|p| p.participant().stale_fill_writes())
                .sum::<u64>();
        let copied_recovery_holds = self.crashed_copied_recovery_holds
            + self
                .nodes
                .iter()
                .filter_map(|n| n.process.as_ref())
                .map(|p| p.participant().stats().copied_recovery_holds)
                .sum::<u64>();
        let count = |o: Outcome| history.txns.iter().filter(|t| t.outcome == o).count() as u64;
        let (committed, aborted, unknown) = (
            count(Outcome::Committed) + unrecorded_committed,
            count(Outcome::Aborted),
            count(Outcome::Unknown),
        );
        SimReport {
            seed: self.cfg.seed,
            faults: self.cfg.faults,
            committed,
            aborted,
            unknown,
            history,
            workload_failures: failures,
            too_old: self.too_old,
            messages: self.messages,
            dropped: self.dropped,
            crashes: self.crashes,
            timed_out,
            stuck: Vec::new(),
            region_lost: self.last_copy_crashed
                || self
                    .node_events
                    .iter()
                    .any(|(_, _, e)| matches!(e, NodeEvent::RegionLost(..))),
            end_ns: now,
            mean_uncertainty_ns: (self.uncertainty.0 / self.uncertainty.1.max(1) as u128) as u64,
            thin_committed,
            last_config,
            recovered,
            blind_locks_waited,
            discarded_replicas: self.discarded_replicas,
            latest_reads: self.latest_reads,
            stale_fill_writes,
            copied_recovery_holds,
            node_events: std::mem::take(&mut self.node_events),
            digest: self.digest.value(),
        }
    }

    /// Without lossy faults every client closed (flushing its truncations),
    /// so every backup must hold what its primary holds and no log record
    /// may be left.
    fn check_clean_end(&mut self) {
        // A reconfiguration the last client crash started may still be
        // recovering: let the nodes finish it (their ticks and messages
        // only, for at most a simulated second).
        // A client that crashed near the end may also have left commit
        // records its lease has not yet timed out on: the CM suspects it
        // only when the lease expires, and the next configuration recovers
        // (and truncates) its transactions (FaRM §5.3). Wait for that too.
        let until = lock(&self.world).now_ns.saturating_add(1_000_000_000);
        if self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .any(|p| p.is_member() && p.participant().log_len() > 0)
        {
            meridian_bugs::mark!("the end-of-run check waits out a member's untruncated log");
        }
        while self
            .nodes
            .iter()
            .filter_map(|n| n.process.as_ref())
            .any(|p| p.recovering() || (p.is_member() && p.participant().log_len() > 0))
        {
            let Some(Reverse((at, seq))) = self.queue.pop() else {
                break;
            };
            if at > until {
                break;
            }
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            if matches!(
                ev,
                Event::NodeTick(..)
                    | Event::Fsync(..)
                    | Event::CasReply(..)
                    | Event::TimeBoundReply(..)
                    | Event::Deliver {
                        to: Addr::Node(_),
                        ..
                    }
            ) {
                lock(&self.world).now_ns = at;
                self.digest.event(at, &ev);
                self.step(ev);
            }
        }
        // Deliver what is still in flight (one-way messages, acks).
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            let Some(ev) = self.events.remove(&seq) else {
                continue;
            };
            if let Event::Deliver {
                to: Addr::Node(_), ..
            } = ev
            {
                lock(&self.world).now_ns = at;
                self.digest.event(at, &ev);
                self.step(ev);
            }
        }
        // The newest configuration any member runs (a fault-free run may
        // still reconfigure: a node removed for its clock rate).
        let newest = self
            .nodes
            .iter()
            .filter_map(|s| s.process.as_ref())
            .filter(|p| p.is_member())
            .map(|p| p.config())
            .max_by_key(|c| c.id())
            .unwrap_or(&self.config);
        let map = RegionMap::new(newest);
        let store = |n: NodeId, r| {
            self.nodes[n.0 as usize]
                .process
                .as_ref()
                .and_then(|p| p.participant().store(r).map(heads))
        };
        for r in map.regions() {
            let primary = store(r.primary, r.id);
            for b in &r.backups {
                assert_eq!(
                    primary,
                    store(*b, r.id),
                    "seed {}: backup {} of {} diverged from its primary",
                    self.cfg.seed,
                    b,
                    r.id
                );
            }
        }
        for slot in &self.nodes {
            if let Some(p) = &slot.process {
                if !newest.is_member(p.id()) {
                    continue; // removed: nobody truncates there any more
                }
                assert_eq!(
                    p.participant().log_len(),
                    0,
                    "seed {}: {} log not fully truncated",
                    self.cfg.seed,
                    p.id()
                );
            }
        }
    }
}

fn heads(s: &meridian_storage::RegionStore) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    s.iter()
        .filter_map(|(k, o)| {
            o.versions
                .last()
                .map(|v| (k.to_vec(), v.ts.0, v.value.clone()))
        })
        .filter(|(_, _, v)| v.is_some())
        .collect()
}
