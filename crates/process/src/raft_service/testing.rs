//! A test harness for the coordination service: a group of replicas and
//! their CAS clients over a network that the test delivers, drops and
//! partitions by hand.

use super::*;
use std::collections::{BTreeSet, VecDeque};

pub(super) const MS: u64 = 1_000_000;

/// Three replicas and a CAS client per node, on a network that can cut
/// nodes off. Messages are delivered in order.
pub(super) struct Net {
    pub(super) replicas: Vec<ServiceReplica>,
    pub(super) clients: Vec<CasClient>,
    pub(super) queue: VecDeque<(NodeId, NodeId, CoordMessage)>,
    pub(super) cut: BTreeSet<NodeId>,
    pub(super) disks: Vec<Option<Vec<u8>>>,
    pub(super) done: Vec<Vec<Result<(), Box<Configuration>>>>,
    pub(super) bounds: Vec<Vec<u64>>,
    pub(super) reads: Vec<Vec<ConfigId>>,
    pub(super) now: u64,
}

pub(super) fn config() -> Configuration {
    let mut c = Configuration::local(3, 7000, 3, 3, std::path::Path::new("/tmp/raft"));
    c.coordination.tick_ms = 1;
    // The timelines below are written for a 10-tick election.
    c.coordination.election_ticks = 10;
    c
}

impl Net {
    pub(super) fn new() -> Self {
        let c = config();
        Net {
            replicas: (0..3)
                .map(|i| ServiceReplica::new(&c, NodeId(i), None).unwrap())
                .collect(),
            clients: (0..3).map(|i| CasClient::new(&c, NodeId(i))).collect(),
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            disks: vec![None; 3],
            done: vec![Vec::new(); 3],
            bounds: vec![Vec::new(); 3],
            reads: vec![Vec::new(); 3],
            now: 0,
        }
    }

    pub(super) fn collect(&mut self) {
        for i in 0..3 {
            for o in self.replicas[i].drain() {
                match o {
                    ServiceOutput::Send { to, msg } => {
                        self.queue.push_back((NodeId(i as u32), to, msg))
                    }
                    ServiceOutput::Persist(b) => self.disks[i] = Some(b),
                }
            }
            for o in self.clients[i].drain() {
                match o {
                    CasOutput::Send { to, msg } => {
                        self.queue.push_back((NodeId(i as u32), to, msg))
                    }
                    CasOutput::Done(r) => self.done[i].push(r),
                    CasOutput::TimeBound { bound_ns, .. } => self.bounds[i].push(bound_ns),
                    CasOutput::Current(c) => self.reads[i].push(c.id()),
                }
            }
        }
    }

    /// Run `ms` milliseconds of ticks and deliveries.
    pub(super) fn run(&mut self, ms: u64) {
        let expected = config();
        for _ in 0..ms * 4 {
            self.now += MS / 4;
            for i in 0..3 {
                self.replicas[i].tick(self.now);
                self.clients[i].tick(self.now, &expected);
            }
            self.collect();
            while let Some((from, to, msg)) = self.queue.pop_front() {
                if self.cut.contains(&from) != self.cut.contains(&to) {
                    continue;
                }
                let t = to.0 as usize;
                match msg {
                    CoordMessage::Raft { .. }
                    | CoordMessage::Cas { .. }
                    | CoordMessage::Read { .. }
                    | CoordMessage::RaiseTimeBound { .. } => {
                        self.replicas[t].on_message(self.now, msg)
                    }
                    m => self.clients[t].on_message(self.now, &m),
                }
                self.collect();
            }
        }
    }

    pub(super) fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..3)
            .filter(|i| self.replicas[*i].is_leader() && !self.cut.contains(&NodeId(*i as u32)))
            .collect();
        leaders.first().copied()
    }
}

pub(super) fn successor(by: u32) -> Configuration {
    let c = config();
    let alive = [0, 1, 2].iter().map(|i| NodeId(*i)).collect();
    c.remap(&alive, NodeId(by)).unwrap()
}
