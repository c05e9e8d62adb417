//! # The write-ahead log of disk durability
//!
//! **Problem.** With `durability = "disk"`, a node must not send a reply
//! that depends on a state change before that change is on disk, or a
//! crash of every replica could lose an acknowledged commit. An fsync per
//! reply would cap throughput at the disk's fsync rate and, done under the
//! process lock, starve the lease path.
//!
//! **Algorithm.** The engine hands the shell its state changes as
//! [`NodeEffect::AppendLog`] (numbered records) at the front of a drain.
//! The shell encodes them and queues them to the writer threads; the frames
//! of that drain that depend on them are sent only once a writer reports
//! the last record durable ([`Wal::durable`]). A writer takes everything
//! queued, writes it, fsyncs once and publishes the highest durable
//! sequence number: group commit, so one fsync covers every reply that
//! arrived meanwhile.
//!
//! **Fsyncs on demand.** A record is written at once but fsynced only
//! when someone waits for it ([`Wal::durable`], [`Wal::sync`]) or when it
//! has waited [`Limits::log_idle_sync_us`] with no one asking. Many
//! records have no reply waiting for them: a backup's apply at TRUNCATE,
//! a failed LOCK. (A granted LOCK's record has one: its `LockDurable`,
//! which COMMIT-PRIMARY waits for; `meridian_process::node::split_held`.)
//! Their loss in
//! a crash is already allowed for, so they need no fsync of their own;
//! the next fsync a reply needs covers them (the log is written in
//! order). Eager fsyncs gave each read-write TATP transaction about five
//! fsyncs across its three nodes, each costing CPU in the kernel and
//! queueing on one shared disk (docs/performance.md).
//!
//! [`Limits::log_idle_sync_us`]: meridian_config::Limits::log_idle_sync_us
//! There are `limits.log_writers` writer threads (default 1), and with
//! more than one their fsyncs overlap: while one waits for its fsync, the
//! next takes the records queued since, so a record written while an
//! fsync is in progress gets one of its own at once instead of waiting
//! for that one to end and then for its own. The writes are taken and
//! written in turn under one lock; an fsync covers every write that
//! completed before it began, so any writer whose fsync returns may
//! publish what it wrote. Measured on a development machine's disk: one thread
//! doing write + fdatasync back to back, 6.8k per second at 148 µs p50;
//! two threads, 11.5k at 173 µs; three, 15.3k at 176 µs. Under a whole
//! cluster's load on 2 cores, though, the extra fsyncs cost more CPU than
//! the overlap saves in latency (TATP at 32 sessions 7 % faster with one
//! writer; `Limits::log_writers`).
//! A [`NodeEffect::Checkpoint`] does not hold up the appends behind it
//! (a 50 MB checkpoint written in line would stall every commit at the
//! node, and a NEW-CONFIG-ACK, for seconds): the writer fsyncs the log, renames it
//! to a closed segment `wal-<through_seq>.seg` (every record in it is
//! covered by the checkpoint), starts a fresh `wal.log` and goes on; a
//! checkpoint thread writes `checkpoint.bin` (temporary file, fsync,
//! rename, directory fsync) and only then deletes the segments it covers.
//!
//! **Preallocation.** `wal.log` is zero-filled ahead of the writer in
//! chunks of [`PREALLOC_BYTES`] (and fsynced once per chunk), and records
//! overwrite the zeros in place. An fdatasync of an append has to commit
//! the file's new size through the filesystem's journal; one of blocks
//! already allocated and initialised does not. PostgreSQL zero-fills its
//! WAL segments for the same reason. Measured on a development machine's ext4:
//! fdatasync 141–178 µs appending, 109–126 µs overwriting.
//!
//! **Format.** `wal.log` and segments: records `[len u32 LE][fnv64 u64
//! LE][bincode (seq, record)]`, then (in `wal.log`) zeros to the end of
//! the preallocated space. A record never has length 0 with the checksum
//! 0 (the checksum of an empty body is not 0), so the zeros end the log
//! cleanly. Reading takes the checkpoint, then every segment not covered
//! by it in order, then `wal.log`; it stops at the first torn or corrupt
//! record of `wal.log` (a crash mid-write). If anything but zeros follows,
//! the file is cut there, so later appends follow a good record; the
//! writer goes on at the end of the last good record ([`Recovered::log_end`]).
//! Segments were fsynced whole before their rename. `checkpoint.bin`:
//! `[seq u64 LE][state]`.
//!
//! **Invariants.** Published durable sequence numbers only grow; a record
//! is published only after the fsync that covers it returned; a record
//! someone waits for gets an fsync that began after it was written; the writer
//! only writes at or past the end of the last good record, and only within
//! space already zero-filled (or extending it); a segment is
//! deleted only after a durable checkpoint covers it; an I/O error stops
//! the node (a replica that cannot persist must not acknowledge).

use meridian_process::node::{DurableRecord, NodeSnapshot};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tokio::sync::watch;

/// Bytes `wal.log` is zero-filled ahead of the writer at a time (4 MiB:
/// about 5 ms of writing once per 4 MiB of log).
pub const PREALLOC_BYTES: u64 = 4 << 20;

/// What the writer threads are asked to do, in order.
enum Cmd {
    Append {
        bytes: Vec<u8>,
    },
    Checkpoint {
        through_seq: u64,
        state: NodeSnapshot,
    },
}

/// The log of one node: a queue to its writer threads and the durable
/// sequence number it publishes.
pub struct Wal {
    shared: std::sync::Arc<Shared>,
    durable: watch::Receiver<u64>,
}

/// What the node's thread and the writer threads share.
struct Shared {
    queue: std::sync::Mutex<Queue>,
    /// Signalled when a waiter asks for an fsync, a checkpoint is queued,
    /// or the log closes.
    wake: std::sync::Condvar,
    /// How long a record no one waits for may stay un-fsynced.
    idle_sync: std::time::Duration,
}

/// Records and checkpoints not yet taken by a writer, and how far fsyncs
/// were asked for and begun.
struct Queue {
    cmds: std::collections::VecDeque<Cmd>,
    /// The last record queued (taken or not).
    queued_seq: u64,
    /// The last record an fsync has begun for (it covers every earlier one
    /// once it returns).
    syncing_seq: u64,
    /// The highest record a waiter asked to be durable.
    wanted_seq: u64,
    /// When the oldest record no fsync has begun for was queued.
    unsynced_since: Option<std::time::Instant>,
    /// The node is stopping: write and fsync what is queued, then stop.
    closed: bool,
}

impl Queue {
    /// Whether a writer has work now: an fsync asked for and not begun, a
    /// checkpoint, a record that waited `idle` with no one asking, or the
    /// end.
    fn due(&self, idle: std::time::Duration) -> bool {
        self.closed
            || (self.wanted_seq > self.syncing_seq && !self.cmds.is_empty())
            || self
                .cmds
                .iter()
                .any(|c| matches!(c, Cmd::Checkpoint { .. }))
            || self.unsynced_since.is_some_and(|t| t.elapsed() >= idle)
    }
}

/// What a node finds on disk when it starts.
pub struct Recovered {
    /// The checkpoint and the last record it covers.
    pub checkpoint: Option<(u64, Vec<u8>)>,
    /// Records after it (possibly also some it covers; the engine skips
    /// those).
    pub records: Vec<(u64, DurableRecord)>,
    /// Where the last good record of `wal.log` ends, bytes: the writer
    /// goes on there ([`Wal::open`]).
    pub log_end: u64,
}

fn fnv64(bytes: &[u8]) -> u64 {
    fnv64_update(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a over `bytes`, continuing from `h`.
fn fnv64_update(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The first bytes of a checkpoint with a checksum:
/// `[magic][seq u64 LE][state][fnv64(state) u64 LE]`. A file without them
/// is the older `[seq u64 LE][state]`, read without a check.
const CHECKPOINT_MAGIC: [u8; 8] = *b"MRDNCKP2";

/// The checksum of what `f` holds from byte `from` to its end, read back;
/// leaves the cursor at the end.
fn checksum_from(f: &mut std::fs::File, from: u64) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(from))?;
    let mut h = 0xcbf2_9ce4_8422_2325;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h);
        }
        h = fnv64_update(h, &buf[..n]);
    }
}

/// A checkpoint file's sequence number and state.
///
/// Errors: `InvalidData` naming `path` when the file is cut short or its
/// state fails the checksum (damage to data that was fsynced).
fn parse_checkpoint(b: Vec<u8>, path: &Path) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let u64_at = |b: &[u8], at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(x)
    };
    if b.starts_with(&CHECKPOINT_MAGIC) {
        if b.len() < 24 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "checkpoint {} is cut short at byte {}",
                    path.display(),
                    b.len()
                ),
            ));
        }
        let seq = u64_at(&b, 8);
        let end = b.len() - 8;
        if fnv64(&b[16..end]) != u64_at(&b, end) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "checkpoint {} fails its checksum (bytes 16 to {end})",
                    path.display()
                ),
            ));
        }
        return Ok(Some((seq, b[16..end].to_vec())));
    }
    if b.len() < 8 {
        return Ok(None);
    }
    Ok(Some((u64_at(&b, 0), b[8..].to_vec())))
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

fn segment_path(dir: &Path, through_seq: u64) -> PathBuf {
    dir.join(format!("wal-{through_seq:020}.seg"))
}

/// The closed log segments in `dir`, by the last sequence number each
/// holds at most, ascending.
fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("wal-"))
            .and_then(|n| n.strip_suffix(".seg"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            out.push((seq, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Move the log, segments and checkpoint in `dir` into `dir/<into>`: data
/// found damaged is kept for the operator, and the node starts without it.
/// Returns the directory they went to.
///
/// Errors: the directory cannot be made or a file cannot be moved.
pub fn quarantine(dir: &Path, into: &str) -> std::io::Result<PathBuf> {
    let to = dir.join(into);
    std::fs::create_dir_all(&to)?;
    let mut files = vec![log_path(dir), checkpoint_path(dir)];
    files.extend(segments(dir)?.into_iter().map(|(_, p)| p));
    for f in files {
        if let Some(name) = f.file_name() {
            match std::fs::rename(&f, to.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    sync_dir(dir)?;
    Ok(to)
}

/// Remove a previous cluster's log, segments and checkpoint (a fresh
/// start).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(log_path(dir));
    let _ = std::fs::remove_file(checkpoint_path(dir));
    for (_, p) in segments(dir).unwrap_or_default() {
        let _ = std::fs::remove_file(p);
    }
}

/// Decode the records of `bytes` up to the first torn or corrupt one;
/// returns them and how many bytes were good.
fn decode(bytes: &[u8]) -> (Vec<(u64, DurableRecord)>, usize) {
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
    (records, at)
}

/// Read what the last run left in `dir`; cut a torn tail off the log.
///
/// Errors: I/O errors other than a missing file.
pub fn read(dir: &Path) -> std::io::Result<Recovered> {
    let checkpoint = match std::fs::read(checkpoint_path(dir)) {
        Ok(b) => parse_checkpoint(b, &checkpoint_path(dir))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    // Closed segments the checkpoint does not cover (a crash came before
    // the checkpoint thread deleted them, or before its checkpoint was
    // durable), oldest first; they were fsynced whole, so a bad record in
    // one is corruption, not a torn write.
    let covered = checkpoint.as_ref().map_or(0, |(seq, _)| *seq);
    let mut records = Vec::new();
    for (through, path) in segments(dir)? {
        if through <= covered {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let (recs, good) = decode(&bytes);
        if good < bytes.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("log segment {} is corrupt at byte {good}", path.display()),
            ));
        }
        records.extend(recs);
    }
    let mut bytes = Vec::new();
    match std::fs::File::open(log_path(dir)) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let (recs, at) = decode(&bytes);
    records.extend(recs);
    // Zeros after the last record are preallocated space, not damage.
    if bytes[at..].iter().any(|b| *b != 0) {
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
        log_end: at as u64,
    })
}

impl Wal {
    /// Start the writer threads for the log in `dir`, continuing after
    /// sequence number `last_seq` and at byte `log_end` of `wal.log` (both
    /// as [`read`] found them; 0 and 0 for a fresh log). Records no one
    /// waits for are fsynced within about `idle_sync_us` of being queued
    /// (`limits.log_idle_sync_us`; see the module doc), by `writers`
    /// threads (`limits.log_writers`, at least 1).
    ///
    /// Errors: the log cannot be opened.
    pub fn open(
        dir: &Path,
        last_seq: u64,
        log_end: u64,
        idle_sync_us: u64,
        writers: usize,
    ) -> std::io::Result<Wal> {
        let log = LogFile::open(&log_path(dir), log_end)?;
        let (pub_tx, durable) = watch::channel(last_seq);
        let shared = std::sync::Arc::new(Shared {
            queue: std::sync::Mutex::new(Queue {
                cmds: std::collections::VecDeque::new(),
                queued_seq: last_seq,
                syncing_seq: last_seq,
                wanted_seq: last_seq,
                unsynced_since: None,
                closed: false,
            }),
            wake: std::sync::Condvar::new(),
            idle_sync: std::time::Duration::from_micros(idle_sync_us.max(1)),
        });
        start_writers(
            dir.to_path_buf(),
            log,
            shared.clone(),
            pub_tx,
            writers.max(1),
        )?;
        Ok(Wal { shared, durable })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue encoded records ending at `last_seq`. No writer is woken:
    /// the records are written with the next fsync someone asks for, or
    /// the idle sync's.
    pub fn append(&self, bytes: Vec<u8>, last_seq: u64) {
        let mut q = self.queue();
        q.cmds.push_back(Cmd::Append { bytes });
        q.queued_seq = q.queued_seq.max(last_seq);
        q.unsynced_since.get_or_insert_with(std::time::Instant::now);
    }

    /// Queue a checkpoint covering records up to `through_seq`.
    pub fn checkpoint(&self, through_seq: u64, state: NodeSnapshot) {
        self.queue()
            .cmds
            .push_back(Cmd::Checkpoint { through_seq, state });
        self.shared.wake.notify_one();
    }

    /// Wait until every record up to `seq` is durable, asking the writers
    /// for an fsync if none covering it has begun.
    pub async fn durable(&self, seq: u64) {
        let mut rx = self.durable.clone();
        if *rx.borrow() >= seq {
            return;
        }
        self.sync(seq);
        if rx.wait_for(|d| *d >= seq).await.is_err() {
            fatal("the write-ahead log writer stopped");
        }
    }

    /// Wait until every record up to `seq` is durable, without asking for
    /// an fsync: the next one someone asks for ([`Wal::sync`],
    /// [`Wal::durable`]) or the idle sync covers it.
    pub async fn durable_unasked(&self, seq: u64) {
        let mut rx = self.durable.clone();
        if rx.wait_for(|d| *d >= seq).await.is_err() {
            fatal("the write-ahead log writer stopped");
        }
    }

    /// Make every record queued so far durable (a clean stop: records no
    /// reply waited for would otherwise be lost with the process).
    pub async fn flush(&self) {
        let seq = self.queued_seq();
        self.durable(seq).await;
    }

    /// The number of the highest durable record.
    pub fn durable_seq(&self) -> u64 {
        *self.durable.borrow()
    }

    /// The number of the last record queued (appended, durable or not).
    pub fn queued_seq(&self) -> u64 {
        self.queue().queued_seq
    }

    /// Ask for every record up to `seq` to be made durable soon, without
    /// waiting (a record whose loss would matter although no reply waits
    /// for it, such as the clock master's offset).
    pub fn sync(&self, seq: u64) {
        let mut q = self.queue();
        if seq <= q.syncing_seq.max(q.wanted_seq) {
            return;
        }
        q.wanted_seq = seq;
        drop(q);
        self.shared.wake.notify_one();
    }
}

impl Drop for Wal {
    /// The writers write and fsync what is queued, then stop.
    fn drop(&mut self) {
        self.queue().closed = true;
        self.shared.wake.notify_all();
    }
}

fn fatal(why: &str) -> ! {
    tracing::error!("{why}; stopping (a node that cannot persist must not acknowledge)");
    std::process::exit(3)
}

/// `wal.log` as the writer sees it: records end at `end`, zeros follow up
/// to `allocated` (the file's length).
struct LogFile {
    /// Shared with the syncer threads, which fsync it.
    file: std::sync::Arc<std::fs::File>,
    end: u64,
    allocated: u64,
}

impl LogFile {
    /// Open (or create) `path`, whose good records end at `end`.
    fn open(path: &Path, end: u64) -> std::io::Result<LogFile> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)?;
        let allocated = file.metadata()?.len().max(end);
        Ok(LogFile {
            file: std::sync::Arc::new(file),
            end,
            allocated,
        })
    }

    /// Write `bytes` after the last record, zero-filling another chunk
    /// first if they do not fit in the space already filled. (The fsync
    /// after a fill commits the new size once; the fsyncs of the records
    /// written into the filled space then commit data only.)
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let need = self.end + bytes.len() as u64;
        if need > self.allocated {
            let target = need.div_ceil(PREALLOC_BYTES) * PREALLOC_BYTES;
            let zeros = vec![0u8; 1 << 20];
            let mut at = self.allocated;
            while at < target {
                let n = (target - at).min(zeros.len() as u64) as usize;
                self.file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            self.file.sync_data()?;
            self.allocated = target;
        }
        self.file.write_all_at(bytes, self.end)?;
        self.end = need;
        Ok(())
    }
}

/// Start `writers` writer threads and the checkpoint thread.
fn start_writers(
    dir: PathBuf,
    log: LogFile,
    shared: std::sync::Arc<Shared>,
    durable: watch::Sender<u64>,
    writers: usize,
) -> std::io::Result<()> {
    // Checkpoints are encoded and written by a thread of their own so
    // that appends behind them go on.
    let pending = std::sync::Arc::new(PendingCheckpoint::default());
    let ckpt_dir = dir.clone();
    let ckpt_pending = pending.clone();
    std::thread::Builder::new()
        .name("meridian-checkpoint".into())
        .spawn(move || checkpointer(ckpt_dir, &ckpt_pending))?;
    // The file, behind the lock that orders the writers' writes.
    let file = std::sync::Arc::new(std::sync::Mutex::new(log));
    let durable = std::sync::Arc::new(durable);
    let live = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(writers));
    for i in 0..writers {
        let (file, shared, durable, dir) =
            (file.clone(), shared.clone(), durable.clone(), dir.clone());
        let (pending, live) = (pending.clone(), live.clone());
        std::thread::Builder::new()
            .name(format!("meridian-wal-{i}"))
            .spawn(move || {
                writer(&dir, &file, &shared, &durable, &pending);
                // The last writer out stops the checkpoint thread.
                if live.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
                    pending.close();
                }
            })?;
    }
    Ok(())
}

/// One writer thread. Holding the file's lock, it waits until work is
/// due ([`Queue::due`]), takes everything queued, writes it and releases
/// the lock; then it fsyncs and publishes. While one writer waits for its
/// fsync, the other takes the next records, so a record a reply waits
/// for never waits for an fsync that began before it was written (module
/// doc). Publishing is safe because the file's lock orders the writes:
/// every record written before this writer's fsync began (its own, and
/// every earlier writer's) is covered when the fsync returns, and the
/// published number only grows.
fn writer(
    dir: &Path,
    file: &std::sync::Mutex<LogFile>,
    shared: &Shared,
    durable: &watch::Sender<u64>,
    pending: &PendingCheckpoint,
) {
    loop {
        let mut log = file.lock().unwrap_or_else(|p| p.into_inner());
        let (cmds, last, closed) = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            while !q.due(shared.idle_sync) {
                // Timed, so that a record no one asks for is noticed
                // without waking a writer at every append.
                q = match shared.wake.wait_timeout(q, shared.idle_sync) {
                    Ok((q, _)) => q,
                    Err(p) => p.into_inner().0,
                };
            }
            let cmds: Vec<Cmd> = q.cmds.drain(..).collect();
            let last = q.queued_seq;
            q.syncing_seq = q.syncing_seq.max(last);
            q.unsynced_since = None;
            (cmds, last, q.closed)
        };
        // Whether this pass wrote records, and whether it fsynced (only
        // then may it publish: an empty pass must not publish records
        // another writer is still fsyncing).
        let (mut dirty, mut synced) = (false, false);
        for cmd in cmds {
            match cmd {
                Cmd::Append { bytes } => {
                    if let Err(e) = log.append(&bytes) {
                        fatal(&format!("cannot append to the write-ahead log: {e}"));
                    }
                    dirty = true;
                }
                Cmd::Checkpoint { through_seq, state } => {
                    // Close the log as a segment the checkpoint covers and
                    // go on in a fresh one. The segment is cut to its
                    // records (a segment holds no zeros: reading one
                    // treats anything after its last record as corrupt).
                    // Its fsync covers every record before it.
                    if let Err(e) = log
                        .file
                        .set_len(log.end)
                        .and_then(|()| log.file.sync_data())
                    {
                        fatal(&format!("cannot fsync the write-ahead log: {e}"));
                    }
                    synced = true;
                    let seg = segment_path(dir, through_seq);
                    *log = match std::fs::rename(log_path(dir), &seg)
                        .and_then(|()| LogFile::open(&log_path(dir), 0))
                        .and_then(|f| sync_dir(dir).map(|()| f))
                    {
                        Ok(f) => f,
                        Err(e) => fatal(&format!("cannot start a new log segment: {e}")),
                    };
                    pending.offer(through_seq, state);
                }
            }
        }
        let handle = log.file.clone();
        drop(log);
        if dirty {
            if let Err(e) = handle.sync_data() {
                fatal(&format!("cannot fsync the write-ahead log: {e}"));
            }
            synced = true;
        }
        if synced {
            durable.send_modify(|d| *d = (*d).max(last));
        }
        if closed {
            // Wake the other writer, which sees the end too.
            shared.wake.notify_all();
            return;
        }
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The checkpoint waiting for the checkpoint thread: at most one, the
/// newest. A newer one replaces a waiting one (it covers every record the
/// older one covers, and the segments the older one would have removed
/// go with the newer's), so the log writer never waits for a slow
/// checkpoint and at most two snapshots (one being written, one waiting)
/// hold on to old objects.
#[derive(Default)]
struct PendingCheckpoint {
    /// The waiting checkpoint, and whether the log writer has stopped.
    slot: std::sync::Mutex<(Option<(u64, NodeSnapshot)>, bool)>,
    ready: std::sync::Condvar,
}

impl PendingCheckpoint {
    fn offer(&self, through_seq: u64, state: NodeSnapshot) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((older, _)) = slot.0.replace((through_seq, state)) {
            tracing::debug!(
                older,
                through_seq,
                "a checkpoint was still waiting: the newer one replaces it"
            );
        }
        self.ready.notify_one();
    }

    /// The log writer stopped: the checkpoint thread ends once the slot
    /// is empty.
    fn close(&self) {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.ready.notify_one();
    }

    /// The next checkpoint to write; `None` once closed and empty.
    fn take(&self) -> Option<(u64, NodeSnapshot)> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = slot.0.take() {
                return Some(c);
            }
            if slot.1 {
                return None;
            }
            slot = self.ready.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Encode each checkpoint, write it durably, then delete the segments it
/// covers. A checkpoint that does not encode is logged and skipped: the
/// segments stay, the next checkpoint covers them.
fn checkpointer(dir: PathBuf, pending: &PendingCheckpoint) {
    if !meridian_transport::lease_udp::lower_priority() {
        tracing::debug!("the checkpoint thread runs at normal priority (nice 19 refused)");
    }
    while let Some((through_seq, snapshot)) = pending.take() {
        let started = std::time::Instant::now();
        let objects = snapshot.objects();
        let mut bytes = 0u64;
        // Streamed into the file (`NodeSnapshot::encode_into`), not built
        // in memory first; the checksum is taken by reading it back.
        let written = crate::write_durably_with(&checkpoint_path(&dir), |f| {
            use std::io::Write;
            f.write_all(&CHECKPOINT_MAGIC)?;
            f.write_all(&through_seq.to_le_bytes())?;
            bytes = snapshot.encode_into(f)?;
            let sum = checksum_from(f, 16)?;
            f.write_all(&sum.to_le_bytes())?;
            Ok(())
        });
        drop(snapshot);
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let _ = std::fs::remove_file(checkpoint_path(&dir).with_extension("tmp"));
                tracing::error!(through_seq, "cannot encode a checkpoint: {e}; the log keeps its segments until the next one");
                continue;
            }
            Err(e) => fatal(&format!("cannot write the checkpoint: {e}")),
        }
        let covered = match segments(&dir) {
            Ok(s) => s,
            Err(e) => fatal(&format!("cannot list the log segments: {e}")),
        };
        for (seq, path) in covered.into_iter().filter(|(seq, _)| *seq <= through_seq) {
            if let Err(e) = std::fs::remove_file(&path) {
                fatal(&format!("cannot remove log segment {seq}: {e}"));
            }
        }
        if let Err(e) = sync_dir(&dir) {
            fatal(&format!("cannot fsync the data directory: {e}"));
        }
        tracing::debug!(
            through_seq,
            objects,
            bytes,
            ms = started.elapsed().as_millis() as u64,
            "checkpoint written"
        );
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

    /// A checkpoint carries a checksum of its state: read back intact it
    /// restores; one flipped byte makes the read fail as damaged data,
    /// naming the file; a checkpoint of the older format (no magic, no
    /// checksum) still reads.
    #[test]
    fn a_damaged_checkpoint_fails_its_checksum() {
        let d = dir("ckpt");
        crate::write_durably_with(&checkpoint_path(&d), |f| {
            use std::io::Write;
            f.write_all(&CHECKPOINT_MAGIC)?;
            f.write_all(&7u64.to_le_bytes())?;
            f.write_all(b"state bytes")?;
            let sum = checksum_from(f, 16)?;
            f.write_all(&sum.to_le_bytes())
        })
        .expect("write");
        let r = read(&d).expect("an intact checkpoint reads");
        assert_eq!(r.checkpoint, Some((7, b"state bytes".to_vec())));
        let mut b = std::fs::read(checkpoint_path(&d)).expect("read back");
        b[20] ^= 0x40;
        std::fs::write(checkpoint_path(&d), &b).expect("damage");
        let e = read(&d).err().expect("damage is detected");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains("checkpoint.bin fails its checksum"),
            "{e}"
        );
        let mut legacy = 9u64.to_le_bytes().to_vec();
        legacy.extend_from_slice(b"old");
        std::fs::write(checkpoint_path(&d), &legacy).expect("legacy");
        assert_eq!(
            read(&d).expect("legacy").checkpoint,
            Some((9, b"old".to_vec()))
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[tokio::test]
    async fn records_come_back_in_order_and_a_torn_tail_is_cut() {
        let d = dir("torn");
        let recs: Vec<DurableRecord> = (0..5)
            .map(|i| DurableRecord::Participant(Mutation::Gc(Timestamp(i))))
            .collect();
        {
            let wal = Wal::open(&d, 0, 0, 1000, 2).expect("open");
            wal.append(encode(1, &recs[..3]).expect("encode"), 3);
            wal.append(encode(4, &recs[3..]).expect("encode"), 5);
            wal.durable(5).await;
        }
        // The log is preallocated: its records end well before the file
        // does, the rest is zeros, and reading it back is clean (nothing
        // cut, the writer goes on after record 5).
        let len = std::fs::metadata(log_path(&d)).expect("log").len();
        let clean = read(&d).expect("read");
        assert_eq!(clean.records.len(), 5);
        assert_eq!(len, PREALLOC_BYTES, "zero-filled ahead");
        assert!(clean.log_end > 0 && clean.log_end < len);
        assert_eq!(
            std::fs::metadata(log_path(&d)).expect("log").len(),
            len,
            "zeros after the last record are not a torn tail"
        );
        // A crash mid-write leaves half a record where the next one goes.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(log_path(&d))
            .expect("log");
        let extra = encode(6, &recs[..1]).expect("encode");
        f.write_all_at(&extra[..extra.len() / 2], clean.log_end)
            .expect("write");
        drop(f);
        let got = read(&d).expect("read");
        assert!(got.checkpoint.is_none());
        let seqs: Vec<u64> = got.records.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(got.records[4].1, recs[4]);
        assert_eq!(got.log_end, clean.log_end, "the torn record is not kept");
        assert_eq!(
            std::fs::metadata(log_path(&d)).expect("log").len(),
            got.log_end,
            "a torn tail is cut"
        );
        // The torn tail is gone: a later append is readable.
        {
            let wal = Wal::open(&d, 5, got.log_end, 1000, 1).expect("open");
            wal.append(encode(6, &recs[..1]).expect("encode"), 6);
            wal.durable(6).await;
        }
        assert_eq!(read(&d).expect("read").records.len(), 6);
        // A checkpoint empties the log.
        // A checkpoint closes the log as a segment; appends behind it do
        // not wait for it.
        let config = meridian_config::Configuration::local(3, 7000, 2, 2, &d);
        let state = meridian_process::node::NodeProcess::new(config, meridian_wire::NodeId(0), 1)
            .expect("process")
            .snapshot()
            .expect("snapshot");
        let bytes = state.encode().expect("encode");
        {
            let end = read(&d).expect("read").log_end;
            let wal = Wal::open(&d, 6, end, 1000, 2).expect("open");
            wal.checkpoint(6, state);
            wal.append(encode(7, &recs[..1]).expect("encode"), 7);
            wal.durable(7).await;
        }
        // Once the checkpoint thread is done, the segment is gone and only
        // the records after the checkpoint remain.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !segments(&d).expect("list").is_empty() || !checkpoint_path(&d).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "checkpoint never written"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let got = read(&d).expect("read");
        assert_eq!(got.checkpoint, Some((6, bytes.clone())));
        assert_eq!(
            got.records.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![7]
        );
        // A crash after a segment was closed but before its checkpoint was
        // durable: the old checkpoint, the segment, then the new log.
        std::fs::write(segment_path(&d, 9), encode(8, &recs[..2]).expect("encode"))
            .expect("segment");
        let got = read(&d).expect("read");
        assert_eq!(got.checkpoint, Some((6, bytes.clone())));
        assert_eq!(
            got.records.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![8, 9, 7],
            "segments come before the open log (the engine skips what it has)"
        );
        // A corrupt segment is an error, not a silently shorter log.
        std::fs::write(segment_path(&d, 10), b"\x05\x00\x00\x00garbage!!").expect("write");
        assert!(read(&d).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Fsyncs on demand: a record no one waits for is not published
    /// durable until someone asks or the idle sync comes; asking makes it
    /// durable at once; the idle sync covers a record no one asks for.
    #[tokio::test]
    async fn records_are_fsynced_when_asked_for_or_after_the_idle_sync() {
        let d = dir("demand");
        let recs: Vec<DurableRecord> = (0..3)
            .map(|i| DurableRecord::Participant(Mutation::Gc(Timestamp(i))))
            .collect();
        let published = |wal: &Wal| *wal.durable.borrow();
        {
            // An idle sync far away: only asking makes records durable.
            let wal = Wal::open(&d, 0, 0, 60_000_000, 1).expect("open");
            wal.append(encode(1, &recs[..1]).expect("encode"), 1);
            wal.append(encode(2, &recs[1..2]).expect("encode"), 2);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            assert_eq!(published(&wal), 0, "nothing was asked for, nothing fsynced");
            tokio::time::timeout(std::time::Duration::from_secs(10), wal.durable(2))
                .await
                .expect("asking for record 2 fsyncs it");
            assert_eq!(published(&wal), 2);
            // A record queued later is not covered by that fsync; a
            // flush (a node's clean stop, SIGTERM) makes it durable.
            wal.append(encode(3, &recs[2..]).expect("encode"), 3);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            assert_eq!(published(&wal), 2);
            tokio::time::timeout(std::time::Duration::from_secs(10), wal.flush())
                .await
                .expect("a flush fsyncs record 3");
            assert_eq!(published(&wal), 3);
            // One more, left for the drop.
            wal.append(encode(4, &recs[..1]).expect("encode"), 4);
        }
        // Dropping the log writes and fsyncs what was queued.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read(&d).expect("read").records.len() < 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "record 4 never written"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        {
            // A short idle sync: a record no one asks for becomes durable.
            let end = read(&d).expect("read").log_end;
            let wal = Wal::open(&d, 4, end, 1_000, 2).expect("open");
            wal.append(encode(5, &recs[..1]).expect("encode"), 5);
            let mut rx = wal.durable.clone();
            tokio::time::timeout(std::time::Duration::from_secs(10), rx.wait_for(|d| *d >= 5))
                .await
                .expect("the idle sync fsyncs record 5")
                .expect("writer alive");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_newer_checkpoint_replaces_a_waiting_one_and_close_ends_the_thread() {
        let d = dir("pending");
        let config = meridian_config::Configuration::local(3, 7000, 2, 2, &d);
        let state = meridian_process::node::NodeProcess::new(config, meridian_wire::NodeId(0), 1)
            .expect("process")
            .snapshot()
            .expect("snapshot");
        let pending = PendingCheckpoint::default();
        pending.offer(10, state.clone());
        pending.offer(20, state);
        assert_eq!(pending.take().map(|(seq, _)| seq), Some(20));
        pending.close();
        assert!(pending.take().is_none(), "closed and empty ends the thread");
        let _ = std::fs::remove_dir_all(&d);
    }
}
