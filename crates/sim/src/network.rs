//! The simulated network: addresses, sending a frame (loss, duplication,
//! delay, long delay), delivering it to its receiver's incarnation, and
//! the partitions that block links.

use crate::{Event, Sim};
use meridian_process::node::Peer;
use meridian_wire::{ClockRequest, ClockResponse, Frame, Request, Response};
use rand::Rng;

/// A process on the network: a node or a client, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Addr {
    Node(u32),
    Client(u32),
}

/// A sender as a key (requests in service are matched to their replies).
pub(crate) fn peer_key(p: Peer) -> u64 {
    match p {
        Peer::Node(m) => (1 << 63) | m.0 as u64,
        Peer::Conn(c) => c & !(1 << 63),
    }
}

impl Sim {
    /// The current incarnation of the process at `a`.
    pub(crate) fn inc_of(&self, a: Addr) -> u32 {
        match a {
            Addr::Node(n) => self.nodes[n as usize].inc,
            Addr::Client(c) => self.clients[c as usize].inc,
        }
    }

    /// Put `frame` on the simulated network (faults permitting).
    pub(crate) fn send(&mut self, from: Addr, to: Addr, frame: Frame) {
        let f = self.cfg.faults;
        if self.blocked.contains_key(&(from, to))
            || (f.loss_permille > 0 && self.rng.gen_range(0..1000) < f.loss_permille)
        {
            self.dropped += 1;
            return;
        }
        // A thin client's Execute is never duplicated: TCP delivers a frame
        // once, and duplicates stand for re-sent requests, which the client
        // never does for Execute (running it twice is not idempotent
        // without exactly-once RPCs such as RIFL's).
        let execute = matches!(
            &frame,
            Frame::Request {
                req: Request::Thin(_),
                ..
            }
        );
        let copies = if !execute
            && f.duplicate_permille > 0
            && self.rng.gen_range(0..1000) < f.duplicate_permille
        {
            2
        } else {
            1
        };
        let is_sync = matches!(
            &frame,
            Frame::Request {
                req: Request::Clock(ClockRequest::Sync),
                ..
            } | Frame::Response {
                resp: Response::Clock(ClockResponse::MasterTime { .. }),
                ..
            }
        );
        // Every third client is "far" from the clock master: its clock
        // synchronisations take 10x longer, so its uncertainty is much larger
        // than its peers' (the setting of FaRMv2 §7.3's counterexamples).
        let far = |a: Addr| matches!(a, Addr::Client(c) if c % 3 == 0);
        let (from_inc, to_inc) = (self.inc_of(from), self.inc_of(to));
        for _ in 0..copies {
            let mut d = self
                .rng
                .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns);
            if is_sync && (far(from) || far(to)) {
                d *= 10;
            }
            if f.long_delay_permille > 0 && self.rng.gen_range(0..1000) < f.long_delay_permille {
                d *= self.rng.gen_range(20..100);
            }
            let at = self.now() + d;
            self.schedule(
                at,
                Event::Deliver {
                    to,
                    to_inc,
                    from,
                    from_inc,
                    frame: frame.clone(),
                },
            );
        }
    }

    /// Deliver a frame sent to incarnation `to_inc` of `to`: dropped if
    /// `to` restarted since or the link is blocked now.
    pub(crate) fn deliver(
        &mut self,
        to: Addr,
        to_inc: u32,
        from: Addr,
        from_inc: u32,
        frame: Frame,
    ) {
        if to_inc != self.inc_of(to) || self.blocked.contains_key(&(from, to)) {
            if to_inc != self.inc_of(to) && matches!(to, Addr::Client(_)) {
                meridian_bugs::mark!("a frame for a client's previous incarnation is dropped");
            }
            self.dropped += 1;
            return;
        }
        let now = self.now();
        match to {
            Addr::Node(n) => self.deliver_to_node(now, n, to_inc, from, from_inc, frame),
            Addr::Client(c) => self.deliver_to_client(c, from, frame),
        }
    }

    /// A partition begins: each (from, to) link drops what it carries
    /// (partitions may overlap, so links are counted).
    pub(crate) fn block(&mut self, pairs: Vec<(Addr, Addr)>) {
        for p in pairs {
            *self.blocked.entry(p).or_default() += 1;
        }
    }

    /// A partition ends: its links carry again unless another still
    /// blocks them.
    pub(crate) fn heal(&mut self, pairs: Vec<(Addr, Addr)>) {
        for p in pairs {
            if let Some(k) = self.blocked.get_mut(&p) {
                *k -= 1;
                if *k == 0 {
                    self.blocked.remove(&p);
                }
            }
        }
    }
}
