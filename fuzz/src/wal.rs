//! The `wal_reader` target: the write-ahead log and checkpoint reader
//! (`meridian_node::wal::read`) on files written into a fresh directory,
//! then the restore of a node from what it read
//! (`meridian_process::node::NodeProcess::restore`, as a node's start does
//! in crates/node/src/start.rs).
//!
//! The input names the files: `checkpoint.bin` (its bytes as given, or
//! framed as `[MRDNCKP2][seq][state][fnv64]` with a checksum that
//! matches), up to three closed segments `wal-<seq>.seg`, and `wal.log`.
//! Log files are records `[len u32][fnv64 u64][bincode (seq, record)]`;
//! with `fix_checksums`, the harness rewrites each record's checksum so
//! that mutated bodies reach the decoder instead of failing the checksum.
//!
//! Checks: the reader returns records or an `InvalidData` error, never
//! panics; `log_end` is within `wal.log`, which is cut to it when anything
//! but zeros followed; and the restore returns a node or an error, never
//! panics.

use arbitrary::Arbitrary;
use meridian_node::wal;
use meridian_process::node::NodeProcess;
use meridian_wire::NodeId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The checkpoint file.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub enum Checkpoint {
    /// No `checkpoint.bin`.
    Absent,
    /// These bytes.
    Raw(Vec<u8>),
    /// `[MRDNCKP2][seq][state][fnv64(state)]`, checksum correct.
    Framed {
        /// The last record it covers.
        seq: u64,
        /// The node's state (`NodeSnapshot::encode`).
        state: Vec<u8>,
    },
}

/// What a node's data directory holds.
#[derive(Arbitrary, Clone, Debug, Serialize, Deserialize)]
pub struct Files {
    /// Rewrite every record's checksum to match its body.
    pub fix_checksums: bool,
    /// `checkpoint.bin`.
    pub checkpoint: Checkpoint,
    /// Closed segments: the last sequence number each holds, and its bytes.
    pub segments: Vec<(u8, Vec<u8>)>,
    /// `wal.log`, if present.
    pub log: Option<Vec<u8>>,
}

/// The node restored: node 0 of a three-node configuration.
pub fn configuration() -> meridian_config::Configuration {
    meridian_config::Configuration::local(3, 7000, 3, 4, Path::new("/nonexistent"))
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Log bytes with every record's checksum made to match its body, up to
/// the first record whose length runs past the end.
fn with_checksums(mut log: Vec<u8>) -> Vec<u8> {
    let mut at = 0usize;
    while at + 12 <= log.len() {
        let mut len = [0u8; 4];
        len.copy_from_slice(&log[at..at + 4]);
        let len = u32::from_le_bytes(len) as usize;
        let Some(end) = (at + 12).checked_add(len).filter(|e| *e <= log.len()) else {
            break;
        };
        let sum = fnv64(&log[at + 12..end]);
        log[at + 4..at + 12].copy_from_slice(&sum.to_le_bytes());
        at = end;
    }
    log
}

/// A directory of its own under the system's temporary directory, removed
/// when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> std::io::Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "meridian-fuzz-wal-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)?;
        Ok(Dir(p))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run one input.
pub fn run(data: &[u8]) {
    let Some(files) = crate::structured::<Files>(data) else {
        return;
    };
    run_files(&files);
}

/// Write `files` into a fresh directory, read them back and restore a
/// node from them (also used by the corpus test).
pub fn run_files(files: &Files) {
    let dir = Dir::new().expect("a temporary directory");
    let fix = |b: &Vec<u8>| {
        if files.fix_checksums {
            with_checksums(b.clone())
        } else {
            b.clone()
        }
    };
    match &files.checkpoint {
        Checkpoint::Absent => {}
        Checkpoint::Raw(b) => write(&dir.0.join("checkpoint.bin"), b),
        Checkpoint::Framed { seq, state } => {
            let mut b = b"MRDNCKP2".to_vec();
            b.extend_from_slice(&seq.to_le_bytes());
            b.extend_from_slice(state);
            b.extend_from_slice(&fnv64(state).to_le_bytes());
            write(&dir.0.join("checkpoint.bin"), &b);
        }
    }
    for (through, bytes) in files.segments.iter().take(3) {
        let name = format!("wal-{:020}.seg", u64::from(*through));
        write(&dir.0.join(name), &fix(bytes));
    }
    let log = files.log.as_ref().map(fix);
    if let Some(log) = &log {
        write(&dir.0.join("wal.log"), log);
    }
    let found = match wal::read(&dir.0) {
        Ok(r) => r,
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
            return;
        }
    };
    let log_len = log.as_ref().map_or(0, Vec::len) as u64;
    assert!(found.log_end <= log_len, "log_end past the log");
    if let Some(log) = &log {
        let on_disk = std::fs::read(dir.0.join("wal.log")).expect("wal.log is still there");
        let end = found.log_end as usize;
        if log[end..].iter().any(|b| *b != 0) {
            assert_eq!(on_disk, log[..end], "a torn tail is cut at log_end");
        } else {
            assert_eq!(&on_disk, log, "a log ending in zeros is left alone");
        }
    }
    let cp = found.checkpoint.as_ref().map(|(s, b)| (*s, b.as_slice()));
    let _ = NodeProcess::restore(configuration(), NodeId(0), 2, cp, &found.records);
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("the temporary directory is writable");
}
