//! The coordination service (FaRM §5.2's Zookeeper, here a Raft group;
//! see [`crate::raft_service`]): the replica a node may host, and the
//! CAS client through which it changes the stored configuration and time
//! bound.

use super::{NodeEffect, NodeProcess, Standing};
use crate::raft_service::{CasOutput, ServiceError, ServiceOutput, ServiceReplica};
use meridian_wire::{CoordMessage, Request};

impl NodeProcess {
    /// Resume this node's coordination replica from the state it last
    /// persisted ([`NodeEffect::PersistCoordination`]); call before the
    /// first input.
    ///
    /// Errors: [`ServiceError`] if the state is corrupt or this node holds
    /// no replica.
    pub fn restore_coordination(&mut self, state: &[u8]) -> Result<(), ServiceError> {
        if self.service.is_none() {
            return Err(ServiceError::NotAReplica(self.id));
        }
        // The group and initial register come from the cluster's first
        // configuration; the persisted state replaces them.
        self.service = Some(ServiceReplica::new(&self.config, self.id, Some(state))?);
        Ok(())
    }

    /// The coordination replica hosted here, if any.
    pub fn coordination(&self) -> Option<&ServiceReplica> {
        self.service.as_ref()
    }

    /// Carry out the coordination replica's outputs.
    pub(super) fn after_service(&mut self) {
        let outs = match &mut self.service {
            Some(s) => s.drain(),
            None => return,
        };
        for o in outs {
            match o {
                ServiceOutput::Send { to, msg } => self.send_oneway(to, Request::Coord(msg)),
                ServiceOutput::Persist(state) => {
                    self.effects.push(NodeEffect::PersistCoordination(state))
                }
            }
        }
    }

    /// Carry out the CAS client's outputs.
    pub(super) fn after_cas(&mut self, now: u64) {
        for o in self.cas.drain() {
            match o {
                CasOutput::Send { to, msg } => self.send_oneway(to, Request::Coord(msg)),
                CasOutput::Done(result) => self.on_cas_result(now, result),
                CasOutput::TimeBound { bound_ns, cm } => self.on_time_bound(now, bound_ns, cm),
                CasOutput::Current(c) => {
                    if self.standing == Standing::Member && c.id() > self.reconfig.config().id() {
                        self.reconfig.on_stored((*c).clone());
                        self.after_engines(now);
                    }
                    if c.id() > self.config.id()
                        && self.service_read.as_ref().is_none_or(|s| s.id() < c.id())
                    {
                        self.service_read = Some(c);
                    }
                    if self.standing == Standing::Restarted && self.restored {
                        self.renew_unapplied_proposal(now);
                    }
                }
            }
        }
    }

    /// A coordination-service message: Raft and CAS requests go to the
    /// replica hosted here, answers to the CAS client.
    pub(super) fn on_coord(&mut self, now: u64, m: CoordMessage) {
        match m {
            CoordMessage::Raft { .. }
            | CoordMessage::Cas { .. }
            | CoordMessage::Read { .. }
            | CoordMessage::RaiseTimeBound { .. } => {
                if let Some(s) = &mut self.service {
                    s.on_message(now, m);
                }
                self.after_service();
            }
            CoordMessage::CasReply { .. }
            | CoordMessage::NotLeader { .. }
            | CoordMessage::TimeBound { .. } => {
                self.cas.on_message(now, &m);
                self.after_cas(now);
            }
        }
    }
}
