//! A test harness for reconfiguration: one engine per node, leases and
//! the coordination service's CAS modelled in place, over a network that
//! the test delivers, drops and partitions by hand.

use super::*;

pub(super) const MS: u64 = 1_000_000;

/// A few engines on a FIFO network with crashes and a partition, and
/// a compare-and-swap register as the coordination service.
pub(super) struct Net {
    pub(super) nodes: BTreeMap<NodeId, Reconfig>,
    pub(super) dead: BTreeSet<NodeId>,
    /// Nodes cut off from the rest (both directions).
    pub(super) cut: BTreeSet<NodeId>,
    pub(super) store: Configuration,
    pub(super) queue: Vec<(NodeId, NodeId, ReconfigMessage)>,
    pub(super) cas_results: Vec<(NodeId, Result<(), Configuration>)>,
    /// Service reads asked for, answered with the stored
    /// configuration at the next step.
    pub(super) reads: Vec<NodeId>,
    pub(super) log: Vec<String>,
    pub(super) now: u64,
    /// The lease manager's answer for removed members at the CM.
    pub(super) expiry_ns: u64,
    /// What every member reports as left of the lease it granted its
    /// CM (NEW-CONFIG-ACK's `cm_lease_left_ns`).
    pub(super) cm_lease_left_ns: u64,
}

pub(super) fn params() -> ReconfigParams {
    ReconfigParams {
        lease: LeaseParams::new(10, 1000),
        probe_timeout_ns: 2 * MS,
        resend_ns: MS,
        backup_cms: 2,
        clock_sample_age_ns: 0,
    }
}

impl Net {
    pub(super) fn new(n: u32) -> Net {
        let config = Configuration::local(n, 7000, 3, 12, std::path::Path::new("/tmp/r"));
        Net {
            nodes: config
                .members()
                .into_iter()
                .map(|m| (m, Reconfig::new(m, params(), config.clone())))
                .collect(),
            dead: BTreeSet::new(),
            cut: BTreeSet::new(),
            store: config,
            queue: Vec::new(),
            cas_results: Vec::new(),
            reads: Vec::new(),
            cm_lease_left_ns: 0,
            log: Vec::new(),
            now: 0,
            expiry_ns: 0,
        }
    }

    pub(super) fn reachable(&self, a: NodeId, b: NodeId) -> bool {
        !self.dead.contains(&a)
            && !self.dead.contains(&b)
            && self.cut.contains(&a) == self.cut.contains(&b)
    }

    pub(super) fn collect(&mut self, id: NodeId) {
        let outs = self.nodes.get_mut(&id).unwrap().drain();
        for o in outs {
            match o {
                ReconfigOutput::Send { to, msg } => self.queue.push((id, to, msg)),
                ReconfigOutput::Cas { expected, proposed } => {
                    // The service is reachable only from the majority
                    // side (a Raft group on nodes 0..3 in these tests).
                    let r = if self.cut.contains(&id) {
                        continue;
                    } else if self.store.id() == expected {
                        self.store = (*proposed).clone();
                        self.log.push(format!("{id} cas {} ok", proposed.id().0));
                        Ok(())
                    } else {
                        self.log.push(format!("{id} cas {} lost", proposed.id().0));
                        Err(self.store.clone())
                    };
                    self.cas_results.push((id, r));
                }
                ReconfigOutput::Applied { config, cm_changed } => self.log.push(format!(
                    "{id} applied {} cm {} changed {cm_changed}",
                    config.id().0,
                    config.cm()
                )),
                ReconfigOutput::Removed { config } => {
                    self.log.push(format!("{id} removed by {}", config.0))
                }
                ReconfigOutput::ReadStored => {
                    if !self.cut.contains(&id) {
                        self.reads.push(id);
                    }
                }
                ReconfigOutput::RegionLost { config, detail } => self
                    .log
                    .push(format!("{id} lost a region of {}: {detail}", config.0)),
                ReconfigOutput::Committed {
                    config,
                    clock_ff_ns,
                } => self.log.push(format!(
                    "{id} committed {} at {}ms ff {clock_ff_ns}",
                    config.0,
                    self.now / MS
                )),
                ReconfigOutput::ClockReady {
                    config,
                    clock_ff_ns,
                } => self.log.push(format!(
                    "{id} clock ready {} at {}ms ff {clock_ff_ns}",
                    config.0,
                    self.now / MS
                )),
            }
        }
    }

    pub(super) fn step(&mut self) {
        self.now += MS / 4;
        let now = self.now;
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in &ids {
            if !self.dead.contains(id) {
                self.nodes.get_mut(id).unwrap().tick(now, now / 1000);
                self.collect(*id);
            }
        }
        for (id, r) in std::mem::take(&mut self.cas_results) {
            let exp = self.expiry_ns;
            self.nodes.get_mut(&id).unwrap().on_cas(now, r, |_| exp);
            self.collect(id);
        }
        for id in std::mem::take(&mut self.reads) {
            let stored = self.store.clone();
            self.nodes.get_mut(&id).unwrap().on_stored(stored);
            self.collect(id);
        }
        for (from, to, msg) in std::mem::take(&mut self.queue) {
            if self.reachable(from, to) {
                let left = self.cm_lease_left_ns;
                self.nodes.get_mut(&to).unwrap().on_message(
                    now,
                    msg,
                    now / 1000 + to.0 as u64,
                    left,
                );
                self.collect(to);
            }
        }
    }

    pub(super) fn run_ms(&mut self, ms: u64) {
        for _ in 0..ms * 4 {
            self.step();
        }
    }

    /// Kill `dead` and let the CM (node 0) suspect it at 1 ms.
    pub(super) fn cm_suspects(&mut self, dead: u32) {
        self.dead.insert(NodeId(dead));
        self.nodes
            .get_mut(&NodeId(0))
            .unwrap()
            .suspect_members(MS, &[NodeId(dead)]);
        self.collect(NodeId(0));
    }

    pub(super) fn committed(&self, id: u32) -> (u64, u32, bool) {
        let r = &self.nodes[&NodeId(id)];
        (r.config().id().0, r.config().cm().0, r.reconfiguring())
    }
}

/// The first log line of node `n`'s commit (`"n<n> committed ..."`).
pub(super) fn first_commit(net: &Net, n: u32) -> &String {
    let prefix = format!("n{n} committed");
    net.log.iter().find(|l| l.starts_with(&prefix)).unwrap()
}

/// The time, in whole ms, a log line reports (`"... at <ms>ms ..."`).
pub(super) fn at_ms(line: &str) -> u64 {
    line.split(" at ")
        .nth(1)
        .and_then(|r| r.split("ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}
