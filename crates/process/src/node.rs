//! # The node process: participant, CM duties, clock, GC (FaRM §3–4, FaRMv2 §4.1)
//!
//! **Problem.** A node answers the transaction protocol for the regions it
//! holds, and also plays roles the runtime used to implement on its own:
//! the clock master (node `cm`) answers clock synchronisations with its
//! clock, every other node synchronises with it; the CM hands out
//! coordinator ids; a timer advances the GC safe point. The simulator must
//! run exactly this code.
//!
//! **Algorithm.** [`NodeProcess`] takes frames from *peers* (the shell's
//! connections, or other nodes) and `tick`s, and emits [`NodeEffect`]s:
//! - every `Frame::Request` gets exactly one `Frame::Response` to the same
//!   peer, built by the [`Participant`] or by the role handlers here;
//!   malformed or misdirected requests get a typed
//!   [`Response::Rejected`], never a panic;
//! - `Execute` (a thin client's one-shot transaction) is handed to the shell
//!   as [`NodeEffect::Execute`], which runs it on the node's embedded client
//!   and answers with [`NodeProcess::executed`]; at most
//!   `limits.max_concurrent_executes` run at once;
//! - `tick` raises the GC safe point to `lower − gc_window_ms` every
//!   `limits.gc_interval_us` and, on non-masters, sends `ClockSync` to the master
//!   every `clock.sync_interval_us`.
//!
//! **Coordinator ids** (review finding 6). Transaction ids embed the
//! coordinator id, and a reused id is mistaken for a duplicate by a node
//! that still holds its records. Ids are `incarnation << 32 | sequence`,
//! where the shell supplies an *incarnation* that is unique across restarts
//! of this node (the tokio node keeps a counter in its data directory,
//! fsynced before use; the simulator counts restarts). Thin-client
//! coordinators inside node `n` use [`embedded_coordinator_id`].
//!
//! **Invariants** ([`NodeProcess::check_invariants`]): the participant's;
//! at most one clock sync in flight; executes within their bound.

use meridian_config::Configuration;
use meridian_time::{ClockSync, SyncSample};
use meridian_txn::Participant;
use meridian_wire::{ClientOp, Frame, NodeId, NodeStatus, Rejection, Request, Response, Timestamp};

/// Who sent a frame to a node: another node, or one of the shell's
/// connections (clients, the CLI). Replies go back to the same peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// A node (the clock master, for clock sync replies).
    Node(NodeId),
    /// A connection of the shell, by the shell's id.
    Conn(u64),
}

/// What a node process asks its shell to do.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeEffect {
    /// Send `frame` to `to`.
    Send {
        /// Destination.
        to: Peer,
        /// The frame.
        frame: Frame,
    },
    /// Call `tick` at or after this local time.
    Wake {
        /// Local clock deadline, ns.
        at_local_ns: u64,
    },
    /// Run a thin client's transaction and call
    /// [`NodeProcess::executed`] with `(peer, id)` and the response.
    Execute {
        /// Who asked.
        peer: Peer,
        /// Its request id.
        id: u64,
        /// The operations.
        ops: Vec<ClientOp>,
    },
}

/// The coordinator id of the thin-client coordinator embedded in node
/// `node` during incarnation `incarnation`: top bit set, so it never meets a
/// CM-assigned id.
pub fn embedded_coordinator_id(node: NodeId, incarnation: u32) -> u64 {
    (1u64 << 63) | ((node.0 as u64 & 0x7fff_ffff) << 32) | incarnation as u64
}

/// One node (see the module essay).
#[derive(Debug)]
pub struct NodeProcess {
    id: NodeId,
    config: Configuration,
    participant: Participant,
    clock: ClockSync,
    incarnation: u32,
    next_coordinator_seq: u32,
    next_gc_ns: u64,
    next_sync_ns: u64,
    sync_inflight: Option<(u64, u64)>,
    next_rpc: u64,
    executing: usize,
    requests: u64,
    clock_rejected: u64,
    effects: Vec<NodeEffect>,
}

impl NodeProcess {
    /// Node `id` of `config`, in its `incarnation` (unique across restarts
    /// of this node; see the module essay).
    ///
    /// Errors: [`meridian_config::ConfigError`] if `id` is not a member.
    pub fn new(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        config.node(id)?;
        let clock = if config.cm() == id {
            ClockSync::master()
        } else {
            ClockSync::new(config.clock.drift_ppm)
        };
        Ok(NodeProcess {
            id,
            participant: Participant::new(id, &config),
            clock,
            incarnation,
            next_coordinator_seq: 1,
            next_gc_ns: 0,
            next_sync_ns: 0,
            sync_inflight: None,
            next_rpc: 1,
            executing: 0,
            requests: 0,
            clock_rejected: 0,
            effects: Vec::new(),
            config,
        })
    }

    /// Node `id` restarted with its memory lost (a new `incarnation`): it
    /// answers, syncs its clock and serves the CM role, but holds no region
    /// replicas, so it can never serve a read from an empty store. Giving it
    /// regions again is reconfiguration and data recovery (FaRM §5.2, §5.4).
    ///
    /// Errors: as [`NodeProcess::new`].
    pub fn restarted(
        config: Configuration,
        id: NodeId,
        incarnation: u32,
    ) -> Result<Self, meridian_config::ConfigError> {
        let mut p = Self::new(config, id, incarnation)?;
        p.participant = Participant::without_regions(id, &p.config);
        Ok(p)
    }

    /// The node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The incarnation.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The participant engine (read access, for status and checks).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The participant engine (write access, for loading test data).
    pub fn participant_mut(&mut self) -> &mut Participant {
        &mut self.participant
    }

    /// True for the clock master.
    pub fn is_clock_master(&self) -> bool {
        self.clock.is_master()
    }

    /// The clock's interval at `now`, if synchronised.
    pub fn clock_time(&mut self, now: u64) -> Option<meridian_time::Interval> {
        self.clock.time(now).ok()
    }

    /// Clock synchronisations rejected as inconsistent.
    pub fn clock_rejected(&self) -> u64 {
        self.clock_rejected
    }

    /// Take the effects produced so far, in order.
    pub fn drain_effects(&mut self) -> Vec<NodeEffect> {
        std::mem::take(&mut self.effects)
    }

    fn reply(&mut self, to: Peer, id: Option<u64>, resp: Response) {
        if let Some(id) = id {
            self.effects.push(NodeEffect::Send {
                to,
                frame: Frame::Response { id, resp },
            });
        }
    }

    /// A frame from `from`.
    pub fn on_message(&mut self, now: u64, from: Peer, frame: Frame) {
        let (id, truncate, req) = match frame {
            Frame::Request { id, truncate, req } => (Some(id), truncate, req),
            Frame::OneWay { truncate, req } => (None, truncate, req),
            Frame::Response { id, resp } => return self.on_response(now, from, id, resp),
        };
        self.requests += 1;
        if let Some(resp) = self.participant.handle(&truncate, &req) {
            return self.reply(from, id, resp);
        }
        let resp = match req {
            Request::Ping => Response::Pong,
            Request::ClockSync => {
                if self.clock.is_master() {
                    Response::MasterTime { master_ns: now }
                } else {
                    Response::Rejected(Rejection::WrongRole(format!(
                        "{} is not the clock master",
                        self.id
                    )))
                }
            }
            Request::RegisterClient => self.register_client(),
            Request::Status => self.status(now),
            Request::Execute { ops } => {
                let Some(id) = id else { return };
                if self.executing >= self.config.limits.max_concurrent_executes {
                    Response::Executed(Err(format!(
                        "{} is running {} thin-client transactions already; retry later",
                        self.id, self.executing
                    )))
                } else {
                    self.executing += 1;
                    self.effects.push(NodeEffect::Execute {
                        peer: from,
                        id,
                        ops,
                    });
                    return;
                }
            }
            other => Response::Rejected(Rejection::WrongRole(format!(
                "{} does not serve {other:?}",
                self.id
            ))),
        };
        self.reply(from, id, resp)
    }

    /// The shell finished an [`NodeEffect::Execute`].
    pub fn executed(&mut self, peer: Peer, id: u64, resp: Response) {
        self.executing = self.executing.saturating_sub(1);
        self.reply(peer, Some(id), resp);
    }

    fn register_client(&mut self) -> Response {
        if self.config.cm() != self.id {
            return Response::Rejected(Rejection::WrongRole(format!(
                "{} is not the CM; register with {}",
                self.id,
                self.config.cm()
            )));
        }
        if self.next_coordinator_seq == u32::MAX {
            return Response::Error("coordinator ids of this CM incarnation exhausted".into());
        }
        let coordinator = ((self.incarnation as u64) << 32) | self.next_coordinator_seq as u64;
        match self.config.to_toml() {
            Ok(config_toml) => {
                self.next_coordinator_seq += 1;
                Response::Registered {
                    coordinator,
                    config_toml,
                }
            }
            Err(e) => Response::Error(e.to_string()),
        }
    }

    fn status(&mut self, now: u64) -> Response {
        let p = &self.participant;
        let uncertainty_ns = self
            .clock
            .time(now)
            .map(|iv| iv.uncertainty_ns())
            .unwrap_or(u64::MAX);
        Response::Status(NodeStatus {
            node: self.id,
            config: self.config.id(),
            uncertainty_ns,
            syncs: self.clock.stats().syncs,
            primary_regions: p.primary_regions().to_vec(),
            backup_regions: p.backup_regions().to_vec(),
            objects: p.object_count() as u64,
            log_records: p.log_len() as u64,
            requests: self.requests,
        })
    }

    fn on_response(&mut self, now: u64, from: Peer, id: u64, resp: Response) {
        let Some((rpc, send_local_ns)) = self.sync_inflight else {
            return;
        };
        if rpc != id || from != Peer::Node(self.config.cm()) {
            return;
        }
        self.sync_inflight = None;
        if let Response::MasterTime { master_ns } = resp {
            let sample = SyncSample {
                send_local_ns,
                master_ns,
                recv_local_ns: now,
            };
            if self.clock.on_sync(sample).is_err() {
                self.clock_rejected += 1;
            }
        }
    }

    /// Time passes: GC, clock sync.
    pub fn tick(&mut self, now: u64) {
        if now >= self.next_gc_ns {
            self.next_gc_ns = now + self.config.limits.gc_interval_us.max(1) * 1000;
            let window_ns = self.config.limits.gc_window_ms * 1_000_000;
            if let Ok(iv) = self.clock.time(now) {
                self.participant
                    .gc(Timestamp(iv.lower.saturating_sub(window_ns)));
            }
        }
        let timeout_ns = self.config.limits.rpc_timeout_ms * 1_000_000;
        if let Some((_, sent)) = self.sync_inflight {
            if now >= sent.saturating_add(timeout_ns) {
                self.sync_inflight = None;
            }
        }
        let mut next = self.next_gc_ns;
        if !self.clock.is_master() {
            if self.sync_inflight.is_none() && now >= self.next_sync_ns {
                let interval = self.config.clock.sync_interval_us.max(100) * 1000;
                self.next_sync_ns = now + interval;
                let id = self.next_rpc;
                self.next_rpc += 1;
                self.sync_inflight = Some((id, now));
                self.effects.push(NodeEffect::Send {
                    to: Peer::Node(self.config.cm()),
                    frame: Frame::Request {
                        id,
                        truncate: Vec::new(),
                        req: Request::ClockSync,
                    },
                });
            }
            next = next.min(match self.sync_inflight {
                Some((_, sent)) => sent.saturating_add(timeout_ns).max(self.next_sync_ns),
                None => self.next_sync_ns,
            });
        }
        self.effects.push(NodeEffect::Wake { at_local_ns: next });
    }

    /// Panics (release builds too) if an invariant is broken.
    pub fn check_invariants(&self) {
        self.participant.check_invariants();
        assert!(self.executing <= self.config.limits.max_concurrent_executes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Configuration {
        Configuration::local(3, 7000, 3, 6, std::path::Path::new("/nonexistent"))
    }

    fn register(p: &mut NodeProcess) -> u64 {
        p.on_message(
            0,
            Peer::Conn(1),
            Frame::Request {
                id: 1,
                truncate: Vec::new(),
                req: Request::RegisterClient,
            },
        );
        match p.drain_effects().pop() {
            Some(NodeEffect::Send {
                frame:
                    Frame::Response {
                        resp: Response::Registered { coordinator, .. },
                        ..
                    },
                ..
            }) => coordinator,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Review finding 6: coordinator ids came from an in-memory counter at
    /// the CM and restarted with it, so a restarted CM handed out ids whose
    /// transactions nodes still held records for.
    #[test]
    fn coordinator_ids_are_unique_across_cm_restarts() {
        let mut seen = std::collections::BTreeSet::new();
        for incarnation in 1..=3 {
            let mut cm = NodeProcess::new(config(), NodeId(0), incarnation).unwrap();
            for _ in 0..5 {
                assert!(seen.insert(register(&mut cm)), "coordinator id reused");
            }
        }
        for n in 0..3 {
            for incarnation in 1..=3 {
                assert!(seen.insert(embedded_coordinator_id(NodeId(n), incarnation)));
            }
        }
    }

    #[test]
    fn non_cm_refuses_registration_and_clock_sync_with_a_typed_error() {
        let mut p = NodeProcess::new(config(), NodeId(1), 1).unwrap();
        for req in [Request::RegisterClient, Request::ClockSync] {
            p.on_message(
                0,
                Peer::Conn(7),
                Frame::Request {
                    id: 9,
                    truncate: Vec::new(),
                    req,
                },
            );
            assert!(matches!(
                p.drain_effects().as_slice(),
                [NodeEffect::Send {
                    to: Peer::Conn(7),
                    frame: Frame::Response {
                        id: 9,
                        resp: Response::Rejected(Rejection::WrongRole(_))
                    }
                }]
            ));
        }
    }
}
