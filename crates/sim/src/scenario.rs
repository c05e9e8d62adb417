//! # Scenarios: scripted runs of the simulator
//!
//! **Problem.** A regression test that names a seed guards its window only
//! while the message schedule stays the same: any change to what the
//! processes send moves the seed off the window, and the test passes
//! without testing anything.
//!
//! **Design** (after etcd-io/raft's data-driven tests and TigerBeetle's
//! `replica_test.zig`). A [`Scenario`] is a simulation whose test decides
//! the steps that matter: it holds back classes of events
//! ([`Scenario::hold`]: deliveries to or from a node, a node's fsyncs),
//! runs until a condition on the processes' state holds
//! ([`Scenario::run_until`]), crashes and restarts nodes, and releases
//! what it held. Everything else runs as in a seeded run, from the seed's
//! randomness. Conditions name protocol state (a record durable at a
//! backup and not at the primary), not times, so the scenario reaches its
//! window whatever the schedule does. A coverage mark
//! (`meridian_bugs::mark!`) on the code that guards the window, watched by
//! the test, shows the window was reached.
//!
//! **Invariant.** With no hold, a scenario's run is the seeded run: the
//! holds are consulted for every event, but park nothing.

use crate::{Addr, Event, Sim, SimConfig, SimReport};
use meridian_process::node::DurableRecord;
use meridian_wire::Frame;

/// One side of a delivered frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Node `.0`.
    Node(u32),
    /// Client `.0`.
    Client(u32),
}

impl From<Addr> for Endpoint {
    fn from(a: Addr) -> Self {
        match a {
            Addr::Node(n) => Endpoint::Node(n),
            Addr::Client(c) => Endpoint::Client(c),
        }
    }
}

/// A simulator event as a scenario's hold rules see it.
#[derive(Debug)]
pub enum EventView<'a> {
    /// `frame` arrives at `to` from `from`.
    Deliver {
        /// The receiver.
        to: Endpoint,
        /// The sender.
        from: Endpoint,
        /// The frame.
        frame: &'a Frame,
    },
    /// Node `node`'s log becomes durable through record `through_seq`.
    Fsync {
        /// The node.
        node: u32,
        /// The last record made durable.
        through_seq: u64,
    },
    /// The coordination service answers node `node`'s CAS: `won` when the
    /// proposal was stored.
    CasReply {
        /// The node that asked.
        node: u32,
        /// Whether its proposal was stored.
        won: bool,
    },
    /// Any other event (ticks, crashes, restarts, partitions, time-bound
    /// answers).
    Other,
}

impl<'a> EventView<'a> {
    fn of(ev: &'a Event) -> Self {
        match ev {
            Event::Deliver {
                to, from, frame, ..
            } => EventView::Deliver {
                to: (*to).into(),
                from: (*from).into(),
                frame,
            },
            Event::Fsync(node, _, seq) => EventView::Fsync {
                node: *node,
                through_seq: *seq,
            },
            Event::CasReply(node, _, result, _) => EventView::CasReply {
                node: *node,
                won: result.is_ok(),
            },
            _ => EventView::Other,
        }
    }
}

/// A hold rule's id ([`Scenario::hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HoldId(u32);

type Rule = Box<dyn FnMut(&EventView<'_>) -> bool>;

/// The hold rules of a scenario and the events they parked.
#[derive(Default)]
pub(crate) struct Holds {
    rules: Vec<(HoldId, Rule)>,
    /// Rules whose events are dropped rather than parked
    /// ([`Scenario::lose`], [`Scenario::discard`]).
    dropping: std::collections::BTreeSet<HoldId>,
    /// Parked events, in the order they came due: (rule, due time, event).
    parked: Vec<(HoldId, u64, Event)>,
    next: u32,
}

impl Holds {
    /// `ev`, due at `at`, unless a rule holds it (then it is parked).
    pub(crate) fn park(&mut self, at: u64, ev: Event) -> Option<Event> {
        if self.rules.is_empty() {
            return Some(ev);
        }
        let view = EventView::of(&ev);
        let rule = self
            .rules
            .iter_mut()
            .find_map(|(id, rule)| rule(&view).then_some(*id));
        match rule {
            Some(id) => {
                if !self.dropping.contains(&id) {
                    self.parked.push((id, at, ev));
                }
                None
            }
            None => Some(ev),
        }
    }
}

/// A scripted simulation ([module docs](self)).
pub struct Scenario {
    sim: Sim,
}

impl Scenario {
    /// A scenario over the simulation `cfg` describes (its workload, its
    /// clients and nodes, and whatever faults it sets: scenarios usually
    /// set none and script their own).
    pub fn new(cfg: SimConfig) -> Self {
        Scenario { sim: Sim::new(cfg) }
    }

    /// The simulation, to read its processes' state.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// Hold back every event `rule` matches, from now until
    /// [`Scenario::release`]: they are parked, not run.
    pub fn hold(&mut self, rule: impl FnMut(&EventView<'_>) -> bool + 'static) -> HoldId {
        let h = &mut self.sim.holds;
        let id = HoldId(h.next);
        h.next += 1;
        h.rules.push((id, Box::new(rule)));
        id
    }

    /// Stop holding what `id` held, and let what it parked run now, in the
    /// order it came due.
    pub fn release(&mut self, id: HoldId) {
        let h = &mut self.sim.holds;
        h.rules.retain(|(r, _)| *r != id);
        h.dropping.remove(&id);
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut h.parked)
            .into_iter()
            .partition(|(r, ..)| *r == id);
        h.parked = rest;
        let now = self.sim.now();
        for (_, at, ev) in mine {
            self.sim.schedule(at.max(now), ev);
        }
    }

    /// Drop every event `rule` matches, from now until
    /// [`Scenario::release`]: frames are lost in the network.
    pub fn lose(&mut self, rule: impl FnMut(&EventView<'_>) -> bool + 'static) -> HoldId {
        let id = self.hold(rule);
        self.sim.holds.dropping.insert(id);
        id
    }

    /// Drop what the hold `id` parked, and from now on drop what it
    /// matches until [`Scenario::release`] (as [`Scenario::lose`]): frames
    /// sent before a crash and never delivered, for instance.
    pub fn discard(&mut self, id: HoldId) {
        let h = &mut self.sim.holds;
        h.parked.retain(|(r, ..)| *r != id);
        h.dropping.insert(id);
    }

    /// How many events the hold `id` has parked and not yet released.
    pub fn parked(&self, id: HoldId) -> usize {
        self.sim
            .holds
            .parked
            .iter()
            .filter(|(r, ..)| *r == id)
            .count()
    }

    /// Run events until `cond` holds of the simulation (checked after each
    /// event). Errors, naming `what`, when the run finishes or reaches its
    /// time limit first.
    pub fn run_until(
        &mut self,
        what: &str,
        mut cond: impl FnMut(&Sim) -> bool,
    ) -> Result<(), String> {
        while !cond(&self.sim) {
            match self.sim.advance() {
                crate::Advance::Ran => {}
                crate::Advance::Finished => {
                    return Err(format!("the run finished before {what}"));
                }
                crate::Advance::TimeLimit => {
                    return Err(format!("the run reached its time limit before {what}"));
                }
            }
        }
        Ok(())
    }

    /// Run events until the hold `id` has parked at least one event.
    /// Errors as [`Scenario::run_until`] does.
    pub fn run_until_held(&mut self, id: HoldId, what: &str) -> Result<(), String> {
        self.run_until(what, |sim| sim.holds.parked.iter().any(|(r, ..)| *r == id))
    }

    /// Crash node `n` now: its process and whatever it had not fsynced are
    /// lost.
    pub fn crash_node(&mut self, n: u32) {
        let now = self.sim.now();
        self.sim.execute(now, Event::CrashNode(n));
    }

    /// Restart node `n` now, from its disk in disk mode.
    pub fn restart_node(&mut self, n: u32) {
        let now = self.sim.now();
        self.sim.execute(now, Event::RestartNode(n));
    }

    /// Crash client `c` now: its transaction in progress ends with an
    /// unknown outcome, and it sends nothing until
    /// [`Scenario::restart_client`].
    pub fn crash_client(&mut self, c: u32) {
        let now = self.sim.now();
        self.sim.execute(now, Event::CrashClient(c));
    }

    /// Start client `c` again, as a new incarnation that goes on with the
    /// workload.
    pub fn restart_client(&mut self, c: u32) {
        let now = self.sim.now();
        self.sim.execute(now, Event::ClientStart(c));
    }

    /// Cut every link between the endpoints of `a` and those of `b`, both
    /// ways, until [`Scenario::heal`] with the same sides: frames sent
    /// across are lost.
    pub fn partition(&mut self, a: &[Endpoint], b: &[Endpoint]) {
        let now = self.sim.now();
        self.sim.execute(now, Event::Block(links(a, b)));
    }

    /// End a [`Scenario::partition`] of the same sides.
    pub fn heal(&mut self, a: &[Endpoint], b: &[Endpoint]) {
        let now = self.sim.now();
        self.sim.execute(now, Event::Heal(links(a, b)));
    }

    /// Release every hold, run to the end, and judge the run as
    /// [`crate::run_and_check`] does.
    pub fn finish(mut self) -> Result<SimReport, String> {
        let ids: Vec<HoldId> = self.sim.holds.rules.iter().map(|(id, _)| *id).collect();
        for id in ids {
            self.release(id);
        }
        let seed = self.sim.cfg.seed;
        let faults = format!("scenario; {}", self.sim.cfg.faults.describe());
        crate::checked(seed, &faults, move || self.sim.run())
    }
}

/// Every link between an endpoint of `a` and one of `b`, both ways.
fn links(a: &[Endpoint], b: &[Endpoint]) -> Vec<(Addr, Addr)> {
    let addr = |e: &Endpoint| match *e {
        Endpoint::Node(n) => Addr::Node(n),
        Endpoint::Client(c) => Addr::Client(c),
    };
    let mut out = Vec::new();
    for x in a {
        for y in b {
            out.push((addr(x), addr(y)));
            out.push((addr(y), addr(x)));
        }
    }
    out
}

impl Sim {
    /// The simulated true time, ns.
    pub fn now_ns(&self) -> u64 {
        self.now()
    }

    /// The configuration node `n` holds now; `None` while it is crashed.
    pub fn node_config(&self, n: u32) -> Option<&meridian_config::Configuration> {
        self.nodes
            .get(n as usize)
            .and_then(|s| s.process.as_ref())
            .map(|p| p.config())
    }

    /// The records of node `n`'s write-ahead log that are durable (fsynced,
    /// after its last checkpoint), with their sequence numbers.
    pub fn durable_log(&self, n: u32) -> &[(u64, DurableRecord)] {
        self.nodes.get(n as usize).map_or(&[], |s| s.wal.as_slice())
    }

    /// The records node `n` appended and has not fsynced: a crash loses
    /// them.
    pub fn unsynced_log(&self, n: u32) -> &[(u64, DurableRecord)] {
        self.nodes
            .get(n as usize)
            .map_or(&[], |s| s.volatile.as_slice())
    }

    /// Whether node `n` has nothing appended that is not yet durable, and
    /// something durable (log records or a checkpoint).
    pub fn log_synced(&self, n: u32) -> bool {
        self.nodes
            .get(n as usize)
            .is_some_and(|s| s.volatile.is_empty() && (!s.wal.is_empty() || s.checkpoint.is_some()))
    }

    /// The configuration the cluster started in.
    pub fn initial_config(&self) -> &meridian_config::Configuration {
        &self.config
    }
}
