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
    /// Any other event (ticks, crashes, restarts, partitions, the
    /// coordination service's answers).
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
                self.parked.push((id, at, ev));
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
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut h.parked)
            .into_iter()
            .partition(|(r, ..)| *r == id);
        h.parked = rest;
        let now = self.sim.now();
        for (_, at, ev) in mine {
            self.sim.schedule(at.max(now), ev);
        }
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

impl Sim {
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
