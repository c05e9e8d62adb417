//! # The write-ahead log of disk durability (issue 6)
//!
//! **Problem.** With `durability = "disk"`, a node must not send a reply
//! that depends on a state change before that change is on disk, or a
//! crash of every replica could lose an acknowledged commit. An fsync per
//! reply would cap throughput at the disk's fsync rate and, done under the
//! process lock, starve the lease path.
//!
//! **Algorithm.** The engine hands the shell its state changes as
//! [`NodeEffect::AppendLog`] (numbered records) at the front of a drain.
//! The shell encodes them and queues them to one writer thread; the frames
//! of that drain are sent only once the writer reports the last record
//! durable ([`Wal::durable`]). The writer takes everything queued, writes
//! it, fsyncs once and publishes the highest durable sequence number:
//! group commit, so one fsync covers every reply that arrived meanwhile.
//! A [`NodeEffect::Checkpoint`] is written after the records it covers
//! (temporary file, fsync, rename, directory fsync), then the log is
//! emptied.
//!
//! **Format.** `wal.log`: records `[len u32 LE][fnv64 u64 LE][bincode
//! (seq, record)]`. Reading stops at the first torn or corrupt record (a
//! crash mid-write) and cuts the file there, so later appends follow a good
//! record. `checkpoint.bin`: `[seq u64 LE][state]`.
//!
//! **Invariants.** Published durable sequence numbers only grow; a record
//! is published only after the fsync that covers it returned; an I/O error
//! stops the node (a replica that cannot persist must not acknowledge).

use meridian_process::node::DurableRecord;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use tokio::sync::watch;

/// What the writer thread is asked to do, in order.
enum Cmd {
    Append { bytes: Vec<u8>, last_seq: u64 },
    Checkpoint { through_seq: u64, state: Vec<u8> },
}

/// The log of one node: a queue to its writer thread and the durable
/// sequence number it publishes.
pub struct Wal {
    tx: std::sync::mpsc::Sender<Cmd>,
    durable: watch::Receiver<u64>,
}

/// What a node finds on disk when it starts.
pub struct Recovered {
    /// The checkpoint and the last record it covers.
    pub checkpoint: Option<(u64, Vec<u8>)>,
    /// Records after it (possibly also some it covers; the engine skips
    /// those).
    pub records: Vec<(u64, DurableRecord)>,
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Encode `records` (numbered from `first_seq`) into the log format.
///
/// Errors: a record bincode cannot encode.
pub fn encode(first_seq: u64, records: &[DurableRecord]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let body = bincode::serialize(&(first_seq + i as u64, r)).map_err(|e| e.to_string())?;
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&fnv64(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    Ok(out)
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("wal.log")
}

fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("checkpoint.bin")
}

/// Remove a previous cluster's log and checkpoint (a fresh start).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(log_path(dir));
    let _ = std::fs::remove_file(checkpoint_path(dir));
}

/// Read what the last run left in `dir`; cut a torn tail off the log.
///
/// Errors: I/O errors other than a missing file.
pub fn read(dir: &Path) -> std::io::Result<Recovered> {
    let checkpoint = match std::fs::read(checkpoint_path(dir)) {
        Ok(b) if b.len() >= 8 => {
            let mut seq = [0u8; 8];
            seq.copy_from_slice(&b[..8]);
            Some((u64::from_le_bytes(seq), b[8..].to_vec()))
        }
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    match std::fs::File::open(log_path(dir)) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut records = Vec::new();
    let mut at = 0usize;
    while at + 12 <= bytes.len() {
        let mut len = [0u8; 4];
        len.copy_from_slice(&bytes[at..at + 4]);
        let len = u32::from_le_bytes(len) as usize;
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&bytes[at + 4..at + 12]);
        let Some(body) = bytes.get(at + 12..at + 12 + len) else {
            break;
        };
        if fnv64(body) != u64::from_le_bytes(sum) {
            break;
        }
        match bincode::deserialize::<(u64, DurableRecord)>(body) {
            Ok(r) => records.push(r),
            Err(_) => break,
        }
        at += 12 + len;
    }
    if at < bytes.len() {
        tracing::warn!(
            kept = at,
            dropped = bytes.len() - at,
            "write-ahead log ends in a torn record (a crash mid-write); cut there"
        );
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(log_path(dir))?;
        f.set_len(at as u64)?;
        f.sync_all()?;
    }
    Ok(Recovered {
        checkpoint,
        records,
    })
}

impl Wal {
    /// Start the writer thread for the log in `dir`, continuing after
    /// sequence number `last_seq` (what was read at start).
    ///
    /// Errors: the log cannot be opened.
    pub fn open(dir: &Path, last_seq: u64) -> std::io::Result<Wal> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path(dir))?;
        let (tx, rx) = std::sync::mpsc::channel::<Cmd>();
        let (pub_tx, durable) = watch::channel(last_seq);
        let dir = dir.to_path_buf();
        std::thread::Builder::new()
            .name("meridian-wal".into())
            .spawn(move || writer(dir, file, rx, pub_tx))?;
        Ok(Wal { tx, durable })
    }

    /// Queue encoded records ending at `last_seq`.
    pub fn append(&self, bytes: Vec<u8>, last_seq: u64) {
        if self.tx.send(Cmd::Append { bytes, last_seq }).is_err() {
            fatal("the write-ahead log writer is gone");
        }
    }

    /// Queue a checkpoint covering records up to `through_seq`.
    pub fn checkpoint(&self, through_seq: u64, state: Vec<u8>) {
        if self
            .tx
            .send(Cmd::Checkpoint { through_seq, state })
            .is_err()
        {
            fatal("the write-ahead log writer is gone");
        }
    }

    /// Wait until every record up to `seq` is durable.
    pub async fn durable(&self, seq: u64) {
        let mut rx = self.durable.clone();
        if rx.wait_for(|d| *d >= seq).await.is_err() {
            fatal("the write-ahead log writer stopped");
        }
    }
}

fn fatal(why: &str) -> ! {
    tracing::error!("{why}; stopping (a node that cannot persist must not acknowledge)");
    std::process::exit(3)
}

fn writer(
    dir: PathBuf,
    mut file: std::fs::File,
    rx: std::sync::mpsc::Receiver<Cmd>,
    durable: watch::Sender<u64>,
) {
    while let Ok(first) = rx.recv() {
        // Group commit: everything queued meanwhile goes under one fsync.
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut last = None;
        let mut dirty = false;
        for cmd in batch {
            match cmd {
                Cmd::Append { bytes, last_seq } => {
                    if let Err(e) = file.write_all(&bytes) {
                        fatal(&format!("cannot append to the write-ahead log: {e}"));
                    }
                    dirty = true;
                    last = Some(last_seq);
                }
                Cmd::Checkpoint { through_seq, state } => {
                    if dirty {
                        if let Err(e) = file.sync_data() {
                            fatal(&format!("cannot fsync the write-ahead log: {e}"));
                        }
                        dirty = false;
                    }
                    let mut bytes = through_seq.to_le_bytes().to_vec();
                    bytes.extend_from_slice(&state);
                    if let Err(e) = crate::write_durably(&checkpoint_path(&dir), &bytes) {
                        fatal(&format!("cannot write the checkpoint: {e}"));
                    }
                    // Every record so far is covered: start the log afresh.
                    if let Err(e) = file.set_len(0).and_then(|()| file.sync_all()) {
                        fatal(&format!("cannot truncate the write-ahead log: {e}"));
                    }
                }
            }
        }
        if dirty {
            if let Err(e) = file.sync_data() {
                fatal(&format!("cannot fsync the write-ahead log: {e}"));
            }
        }
        if let Some(seq) = last {
            durable.send_modify(|d| *d = (*d).max(seq));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_txn::Mutation;
    use meridian_wire::Timestamp;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("meridian-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[tokio::test]
    async fn records_come_back_in_order_and_a_torn_tail_is_cut() {
        let d = dir("torn");
        let recs: Vec<DurableRecord> = (0..5)
            .map(|i| DurableRecord::Participant(Mutation::Gc(Timestamp(i))))
            .collect();
        {
            let wal = Wal::open(&d, 0).expect("open");
            wal.append(encode(1, &recs[..3]).expect("encode"), 3);
            wal.append(encode(4, &recs[3..]).expect("encode"), 5);
            wal.durable(5).await;
        }
        // A crash mid-write leaves half a record.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(log_path(&d))
            .expect("log");
        let extra = encode(6, &recs[..1]).expect("encode");
        f.write_all(&extra[..extra.len() / 2]).expect("write");
        drop(f);
        let got = read(&d).expect("read");
        assert!(got.checkpoint.is_none());
        let seqs: Vec<u64> = got.records.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(got.records[4].1, recs[4]);
        // The torn tail is gone: a later append is readable.
        {
            let wal = Wal::open(&d, 5).expect("open");
            wal.append(encode(6, &recs[..1]).expect("encode"), 6);
            wal.durable(6).await;
        }
        assert_eq!(read(&d).expect("read").records.len(), 6);
        // A checkpoint empties the log.
        {
            let wal = Wal::open(&d, 6).expect("open");
            wal.checkpoint(6, b"state".to_vec());
            wal.append(encode(7, &recs[..1]).expect("encode"), 7);
            wal.durable(7).await;
        }
        let got = read(&d).expect("read");
        assert_eq!(got.checkpoint, Some((6, b"state".to_vec())));
        assert_eq!(
            got.records.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![7]
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
