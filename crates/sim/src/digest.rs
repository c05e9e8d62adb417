//! # A run's history digest
//!
//! A 64-bit FNV-1a hash over every event the simulator executes, in order:
//! its simulated true time, its kind, its endpoints and incarnations, and,
//! for a delivered frame, the frame's wire encoding. Two runs of one seed
//! have equal digests exactly when they executed the same events at the
//! same times, so a refactor that claims to change no behaviour is checked
//! by comparing the digests of many seeds before and after it
//! (`meridian sim --digests FILE`).
//!
//! The digest hashes wire bytes, not `Debug` text, so renaming a Rust type
//! or field leaves it unchanged; only a change to what is sent, when, or to
//! whom changes it.

use crate::{Addr, Event};
use meridian_wire::encode_frame;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The running digest of one simulation.
pub(crate) struct Digest {
    state: u64,
    buf: Vec<u8>,
}

impl Digest {
    pub(crate) fn new() -> Self {
        Digest {
            state: FNV_OFFSET,
            buf: Vec::new(),
        }
    }

    /// The digest of every event fed so far.
    pub(crate) fn value(&self) -> u64 {
        self.state
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.state ^= u64::from(x);
            self.state = self.state.wrapping_mul(FNV_PRIME);
        }
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn addr(&mut self, a: Addr) {
        match a {
            Addr::Node(n) => self.u64(u64::from(n)),
            Addr::Client(c) => self.u64((1 << 32) | u64::from(c)),
        }
    }

    /// Feed one event executed at simulated true time `at_ns`.
    pub(crate) fn event(&mut self, at_ns: u64, ev: &Event) {
        self.u64(at_ns);
        match ev {
            Event::Deliver {
                to,
                to_inc,
                from,
                from_inc,
                frame,
            } => {
                self.u64(0);
                self.addr(*to);
                self.u64(u64::from(*to_inc));
                self.addr(*from);
                self.u64(u64::from(*from_inc));
                let mut buf = std::mem::take(&mut self.buf);
                buf.clear();
                // A frame too large to encode is hashed as its absence;
                // the simulator never builds one.
                let _ = encode_frame(frame, &mut buf);
                self.bytes(&buf);
                self.buf = buf;
            }
            Event::NodeTick(n, inc) => {
                self.u64(1);
                self.u64(u64::from(*n));
                self.u64(u64::from(*inc));
            }
            Event::ClientTick(c, inc) => {
                self.u64(2);
                self.u64(u64::from(*c));
                self.u64(u64::from(*inc));
            }
            Event::ClientStart(c) => {
                self.u64(3);
                self.u64(u64::from(*c));
            }
            Event::CrashNode(n) => {
                self.u64(4);
                self.u64(u64::from(*n));
            }
            Event::RestartNode(n) => {
                self.u64(5);
                self.u64(u64::from(*n));
            }
            Event::CrashClient(c) => {
                self.u64(6);
                self.u64(u64::from(*c));
            }
            Event::Block(links) | Event::Heal(links) => {
                self.u64(if matches!(ev, Event::Block(_)) { 7 } else { 8 });
                for (a, b) in links {
                    self.addr(*a);
                    self.addr(*b);
                }
            }
            Event::Pause(n, ns) => {
                self.u64(9);
                self.u64(u64::from(*n));
                self.u64(*ns);
            }
            Event::CasReply(n, inc, result, (bound_ns, cm)) => {
                self.u64(10);
                self.u64(u64::from(*n));
                self.u64(u64::from(*inc));
                match result {
                    Ok(()) => self.u64(0),
                    Err(config) => {
                        self.u64(1);
                        self.u64(config.id().0);
                    }
                }
                self.u64(*bound_ns);
                self.u64(u64::from(cm.0));
            }
            Event::TimeBoundReply(n, inc, (bound_ns, cm)) => {
                self.u64(11);
                self.u64(u64::from(*n));
                self.u64(u64::from(*inc));
                self.u64(*bound_ns);
                self.u64(u64::from(cm.0));
            }
            Event::Fsync(n, inc, seq) => {
                self.u64(12);
                self.u64(u64::from(*n));
                self.u64(u64::from(*inc));
                self.u64(*seq);
            }
        }
    }
}
