//! The production [`Io`]: one TCP link per node (plus a dedicated link to
//! the clock master for clock synchronisation, so that batches of
//! transaction traffic do not delay it), reconnecting with back-off, and
//! precise wake-ups on the waiter thread of `meridian-runtime`.
//!
//! A link's frames queue in a bounded channel (`max_inflight_per_connection`);
//! a frame that does not fit is dropped and its RPC times out, exactly like
//! a lost message. A broken connection fails every RPC outstanding on it
//! ([`Core::on_disconnect`]) and is re-established (review finding 8).

use crate::{ClientError, Core, Io};
use meridian_config::Configuration;
use meridian_process::client::ClientProcess;
use meridian_runtime::{mono_ns, wait};
use meridian_wire::{encode_frame, ClockRequest, Frame, NodeId, Request};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// The tokio implementation of [`Io`].
pub struct TokioIo {
    links: BTreeMap<NodeId, mpsc::Sender<Vec<u8>>>,
    clock_link: mpsc::Sender<Vec<u8>>,
    clock_master: NodeId,
}

impl Io for TokioIo {
    fn now_ns(&self) -> u64 {
        mono_ns()
    }

    fn send(&self, to: NodeId, frame: Frame) {
        let clock = to == self.clock_master
            && matches!(
                frame,
                Frame::Request {
                    req: Request::Clock(ClockRequest::Sync),
                    ..
                }
            );
        let link = if clock {
            Some(&self.clock_link)
        } else {
            self.links.get(&to)
        };
        let Some(link) = link else {
            tracing::warn!("no link to {to}; frame dropped");
            return;
        };
        let mut buf = Vec::with_capacity(64);
        if let Err(e) = encode_frame(&frame, &mut buf) {
            tracing::error!("cannot encode a frame to {to}: {e}");
            return;
        }
        if let Err(e) = link.try_send(buf) {
            tracing::warn!("link to {to} cannot take a frame ({e}); it will time out");
        }
    }

    fn wake_at(&self, core: Weak<Core>, at_local_ns: u64) {
        tokio::spawn(async move {
            wait::wait_until(at_local_ns).await;
            if let Some(core) = core.upgrade() {
                core.tick();
            }
        });
    }
}

/// Build a core over `process` with links to every node of `config`, and
/// start its clock synchronisation.
///
/// Errors: [`ClientError::Config`] if the clock master is not a member.
pub fn start(config: Configuration, process: ClientProcess) -> Result<Arc<Core>, ClientError> {
    let depth = config.limits.max_inflight_per_connection.max(16);
    let batch = config.limits.max_batch_bytes;
    let master = config.cm();
    let master_addr = config.node(master)?.addr.clone();
    let mut links = BTreeMap::new();
    let mut receivers = Vec::new();
    for n in &config.nodes {
        let (tx, rx) = mpsc::channel(depth);
        links.insert(NodeId(n.id), tx);
        receivers.push((NodeId(n.id), n.addr.clone(), rx));
    }
    let (clock_tx, clock_rx) = mpsc::channel(64);
    receivers.push((master, master_addr, clock_rx));
    let io = TokioIo {
        links,
        clock_link: clock_tx,
        clock_master: master,
    };
    let core = Core::new(config, process, Box::new(io));
    for (node, addr, rx) in receivers {
        tokio::spawn(link(Arc::downgrade(&core), node, addr, rx, batch));
    }
    core.tick();
    Ok(core)
}

/// One link to `node` ([`meridian_transport::run_link`]): replies go to
/// the core; a lost connection fails the RPCs outstanding on it. Ends when
/// the core is gone.
async fn link(
    core: Weak<Core>,
    node: NodeId,
    addr: String,
    rx: mpsc::Receiver<Vec<u8>>,
    max_batch_bytes: usize,
) {
    let down = core.clone();
    meridian_transport::run_link(
        node.to_string(),
        addr,
        rx,
        max_batch_bytes,
        move |frames| match core.upgrade() {
            Some(c) => {
                for f in frames.drain(..) {
                    c.on_message(node, f);
                }
                true
            }
            None => false,
        },
        move || match down.upgrade() {
            Some(c) => {
                c.on_disconnect(node);
                true
            }
            None => false,
        },
    )
    .await
}
