//! Starting a node: its incarnation, its state restored from the data
//! directory (disk durability's log and checkpoint, the coordination
//! replica's Raft state), and the channels of its links to the other
//! nodes.

use crate::{wal, NodeError};
use meridian_config::{Configuration, NodeConfig};
use meridian_process::node::NodeProcess;
use meridian_wire::NodeId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// Read, increment and durably store the node's incarnation counter in
/// `dir/incarnation`. Without a data directory, the wall clock in seconds
/// stands in (unique unless two starts fall in the same second).
pub(crate) fn next_incarnation(dir: Option<&Path>) -> Result<u32, NodeError> {
    use std::io::Write;
    let Some(dir) = dir else {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1);
        tracing::warn!("no data_dir: incarnation taken from the wall clock");
        return Ok((secs as u32).max(1));
    };
    let path = dir.join("incarnation");
    let err = |source| NodeError::Incarnation {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let prev: u32 = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map_err(|e| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a number: {e}"),
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(err(e)),
    };
    let next = prev.checked_add(1).ok_or_else(|| {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "incarnation counter exhausted",
        ))
    })?;
    let tmp = dir.join("incarnation.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(next.to_string().as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(next)
}

/// Where disk durability keeps the node's write-ahead log and checkpoint:
/// its data directory under `durability = "disk"`; none in memory mode.
///
/// Errors: [`NodeError::NoDataDir`] under disk durability without a data
/// directory (running from memory instead would lose what the operator
/// asked to keep).
fn disk_dir(config: &Configuration, me: &NodeConfig) -> Result<Option<PathBuf>, NodeError> {
    match (&config.durability.mode, me.data_dir.as_deref()) {
        (meridian_config::DurabilityMode::Disk, Some(d)) => Ok(Some(d.to_path_buf())),
        (meridian_config::DurabilityMode::Disk, None) => Err(NodeError::NoDataDir { node: me.id }),
        _ => Ok(None),
    }
}

/// The node's process at a start, and its write-ahead log under disk
/// durability.
///
/// Disk durability: the write-ahead log and checkpoint of the last run
/// rebuild the node (NodeProcess::restore decides whether it rejoins
/// with that data or empty). Memory durability (FaRM's non-volatile
/// DRAM assumption): a node that ran before lost its memory with its
/// process, so it comes back as a new, empty node and joins again (FaRM
/// §5.2, §5.4).
pub(crate) fn restore_process(
    config: &Configuration,
    id: NodeId,
    me: &NodeConfig,
    incarnation: u32,
) -> Result<(NodeProcess, Option<wal::Wal>), NodeError> {
    let disk_dir = disk_dir(config, me)?;
    let durability = |d: &Path, why: String| NodeError::Durability {
        path: d.display().to_string(),
        why,
    };
    let found = match &disk_dir {
        Some(d) if incarnation > 1 => match wal::read(d) {
            Ok(r) => Some(r),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                lose_disk(d, incarnation, &e.to_string())?;
                None
            }
            Err(e) => return Err(durability(d, e.to_string())),
        },
        Some(d) => {
            wal::remove(d);
            None
        }
        None => None,
    };
    let (mut process, last_seq, log_end) =
        match process_at_start(config, id, incarnation, found.as_ref(), disk_dir.as_deref()) {
            Ok((p, seq)) => (p, seq, found.as_ref().map_or(0, |r| r.log_end)),
            // Records that passed their checksums but do not rebuild a
            // node: as damaged as a failed checksum.
            Err(NodeError::Durability { why, .. }) if found.is_some() => {
                if let Some(d) = &disk_dir {
                    lose_disk(d, incarnation, &why)?;
                }
                (
                    NodeProcess::restarted(config.clone(), id, incarnation)?,
                    0,
                    0,
                )
            }
            Err(e) => return Err(e),
        };
    if disk_dir.is_none() {
        process.participant_mut().disable_journal();
    }
    let wal = match &disk_dir {
        Some(d) => Some(
            wal::Wal::open(
                d,
                last_seq,
                log_end,
                config.limits.log_idle_sync_us,
                config.limits.log_writers,
            )
            .map_err(|e| durability(d, e.to_string()))?,
        ),
        None => None,
    };
    Ok((process, wal))
}

/// Data on disk that was fsynced, and so may have been acknowledged, is
/// damaged (`why`, naming the file and offset): the disk counts as lost.
/// Its files move to `damaged-<incarnation>/` for the operator, and the
/// node comes back empty and joins again like a node whose disk is gone
/// (FaRM §5.2): the other replicas hold its regions, and it serves nothing
/// it cannot vouch for.
///
/// Errors: the files cannot be moved aside ([`NodeError::Durability`]).
fn lose_disk(dir: &Path, incarnation: u32, why: &str) -> Result<(), NodeError> {
    let into = format!("damaged-{incarnation}");
    let moved = wal::quarantine(dir, &into).map_err(|e| NodeError::Durability {
        path: dir.display().to_string(),
        why: format!("{why}; moving it aside failed: {e}"),
    })?;
    tracing::error!(
        damaged = why,
        moved_to = %moved.display(),
        "the data on disk is damaged: the node starts empty and joins again"
    );
    Ok(())
}

/// The process rebuilt from what the log and checkpoint in `disk_dir`
/// hold (`found`), with the last record it restored through; or, with
/// nothing found, a restarted process (a later incarnation, or a spare
/// that asks the CM to join) or a new one, through record 0.
fn process_at_start(
    config: &Configuration,
    id: NodeId,
    incarnation: u32,
    found: Option<&wal::Recovered>,
    disk_dir: Option<&Path>,
) -> Result<(NodeProcess, u64), NodeError> {
    let process = match found {
        Some(r) if r.checkpoint.is_some() || !r.records.is_empty() => {
            let cp = r.checkpoint.as_ref().map(|(s, b)| (*s, b.as_slice()));
            let last_seq = r
                .records
                .last()
                .map_or(0, |(s, _)| *s)
                .max(cp.map_or(0, |(s, _)| s));
            tracing::info!(
                checkpoint = cp.map(|(s, _)| s),
                records = r.records.len(),
                "restoring from disk through record {last_seq}"
            );
            let p = NodeProcess::restore(config.clone(), id, incarnation, cp, &r.records).map_err(
                |e| NodeError::Durability {
                    path: disk_dir
                        .map(|d| d.display().to_string())
                        .unwrap_or_default(),
                    why: e.to_string(),
                },
            )?;
            return Ok((p, last_seq));
        }
        _ if incarnation > 1 => NodeProcess::restarted(config.clone(), id, incarnation)?,
        // In the address book but not a member: a spare that asks the CM
        // to join (FaRM §5.2), then gets regions by rebalancing (§5.4).
        _ if !config.is_member(id) => NodeProcess::restarted(config.clone(), id, incarnation)?,
        _ => NodeProcess::new(config.clone(), id, incarnation)?,
    };
    Ok((process, 0))
}

/// Where the coordination replica's Raft state is kept: in the data
/// directory (none without one: it lives in memory only).
pub(crate) fn coordination_file(me: &NodeConfig) -> Option<PathBuf> {
    me.data_dir.as_ref().map(|d| d.join("coordination.state"))
}

/// Restores the coordination replica's Raft state from `path`, if the
/// process runs a replica and the file exists (the state is always on
/// disk).
pub(crate) fn restore_coordination(
    process: &mut NodeProcess,
    path: Option<&Path>,
) -> Result<(), NodeError> {
    let (Some(path), Some(_)) = (path, process.coordination()) else {
        return Ok(());
    };
    let err = |why: String| NodeError::Coordination {
        path: path.display().to_string(),
        why,
    };
    match std::fs::read(path) {
        Ok(state) => process
            .restore_coordination(&state)
            .map_err(|e| err(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e.to_string())),
    }
}

/// The sending ends of a node's links.
pub(crate) struct Links {
    /// A link to each other node (the embedded coordinator's requests).
    pub(crate) nodes: BTreeMap<NodeId, mpsc::Sender<Vec<u8>>>,
    /// The link to the clock master for clock syncs (none while this node
    /// is the master).
    pub(crate) clock: Option<(NodeId, mpsc::Sender<Vec<u8>>)>,
}

/// A link's receiving end, with the node and address it carries frames to.
pub(crate) type LinkEnd = (NodeId, String, mpsc::Receiver<Vec<u8>>);

/// The channels of node `id`'s links: one to each other node, `depth`
/// batches deep, and one to the clock master unless `is_master`.
///
/// Errors: the clock master is not in the configuration.
pub(crate) fn links(
    config: &Configuration,
    id: NodeId,
    is_master: bool,
    depth: usize,
) -> Result<(Links, Vec<LinkEnd>), NodeError> {
    let mut nodes = BTreeMap::new();
    let mut receivers = Vec::new();
    for n in config.nodes.iter().filter(|n| NodeId(n.id) != id) {
        let (tx, rx) = mpsc::channel(depth);
        nodes.insert(NodeId(n.id), tx);
        receivers.push((NodeId(n.id), n.addr.clone(), rx));
    }
    let clock = if is_master {
        None
    } else {
        let (tx, rx) = mpsc::channel(64);
        let master = config.cm();
        receivers.push((master, config.node(master)?.addr.clone(), rx));
        Some((master, tx))
    };
    Ok((Links { nodes, clock }, receivers))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Damaged data on disk (a checkpoint failing its checksum) makes the
    /// node come back empty, as a node whose disk is gone (it joins again),
    /// with the damaged files moved to `damaged-<incarnation>/`; it does
    /// not panic and does not refuse to start.
    #[test]
    fn a_damaged_disk_comes_back_empty_with_its_files_moved_aside() {
        let root = std::env::temp_dir().join(format!("meridian-lost-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut c = Configuration::local(3, 7000, 3, 6, &root);
        c.durability.mode = meridian_config::DurabilityMode::Disk;
        let me = c.nodes[0].clone();
        let d = me.data_dir.clone().expect("a data dir");
        std::fs::create_dir_all(&d).expect("data dir");
        let mut bad = b"MRDNCKP2".to_vec();
        bad.extend_from_slice(&5u64.to_le_bytes());
        bad.extend_from_slice(b"not a snapshot");
        bad.extend_from_slice(&0u64.to_le_bytes());
        std::fs::write(d.join("checkpoint.bin"), &bad).expect("write");
        let (p, wal) = restore_process(&c, NodeId(0), &me, 2).expect("starts");
        assert!(
            !p.is_member(),
            "comes back empty, outside the configuration"
        );
        assert!(d.join("damaged-2").join("checkpoint.bin").exists());
        assert!(!d.join("checkpoint.bin").exists());
        drop(wal);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Disk durability without a data directory is a clear error at the
    /// start, not a node that quietly runs from memory.
    #[test]
    fn disk_durability_without_a_data_dir_refuses_to_start() {
        let mut c = Configuration::local(3, 7000, 3, 6, Path::new("/tmp/meridian-unused"));
        c.durability.mode = meridian_config::DurabilityMode::Disk;
        c.nodes[1].data_dir = None;
        let me = c.nodes[1].clone();
        match disk_dir(&c, &me) {
            Err(e @ NodeError::NoDataDir { node: 1 }) => {
                assert!(e.to_string().contains("needs a data_dir"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        let with_dir = c.nodes[0].clone();
        assert!(matches!(disk_dir(&c, &with_dir), Ok(Some(_))));
        c.durability.mode = meridian_config::DurabilityMode::Memory;
        assert!(matches!(disk_dir(&c, &me), Ok(None)));
    }
}
