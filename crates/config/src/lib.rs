//! # Configuration (FaRM §3, §5.2)
//!
//! A FaRM *configuration* is the tuple ⟨i, S, F, CM⟩: a unique increasing
//! identifier, the set of member machines, the mapping of machines to failure
//! domains, and the configuration manager. The CM also assigns regions to
//! replicas: one primary and `f` backups, on distinct failure domains.
//!
//! The configuration a cluster starts from is read from TOML
//! ([`Configuration::from_toml`]); its region map is computed
//! deterministically ([`Configuration::regions`]): the key space is
//! range-partitioned on the first key byte into `region_count` contiguous
//! ranges, and region `r` gets primary `members[r mod n]` and the next `f`
//! members in failure-domain-distinct order as backups. `nodes` is the
//! address book; `members` (S) may be a subset of it.
//!
//! Reconfiguration (FaRM §5.2) computes the next configuration as a pure
//! function of the current one, so every machine that computes it agrees:
//! [`Configuration::remap`] (after a failure: survivors, new CM, failed
//! primaries replaced by their first surviving backup, missing replicas
//! refilled on the least-loaded members in unused failure domains,
//! LastPrimaryChange / LastReplicaChange of FaRM §5.3 step 3 updated),
//! [`Configuration::with_joined`] (a node joins) and
//! [`Configuration::rebalance_step`] (one paced move onto a lightly loaded
//! member). The result stores its placement explicitly
//! ([`Configuration::placement`]) and is what the CM writes to the
//! coordination service with compare-and-swap on the identifier.
//!
//! Every bound of the system lives in [`Limits`], so that "bound every queue,
//! retry and version chain" has one place to look.
//!
//! Invariants ([`Configuration::check_invariants`]): node ids unique;
//! members are known nodes; the clock master / CM is a member; a stored
//! placement tiles the key space exactly, in order, with 1..=f+1 distinct
//! member replicas per region and no change recorded in a future
//! configuration.

use meridian_wire::{ConfigId, Key, NodeId, RegionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Every limit of the system, in one place. Units are in the names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest key accepted, bytes (default 4 KiB).
    pub max_key_bytes: usize,
    /// Largest value accepted, bytes (default 1 MiB).
    pub max_value_bytes: usize,
    /// Most versions kept per object; older ones are dropped early and reads
    /// that need them abort (FaRMv2 §4.4 bounds old-version memory).
    pub max_versions_per_object: usize,
    /// Time-window GC: versions superseded more than this long ago are freed.
    /// FaRMv2 §4.5 derives the safe point from the oldest active
    /// transaction instead; that is not built (docs/papers.md).
    pub gc_window_ms: u64,
    /// Most un-truncated log records (LOCK + COMMIT-BACKUP) a node holds.
    pub max_log_records: usize,
    /// Most keys a scan returns per request.
    pub max_scan_rows: u32,
    /// Most operations (reads + writes) in one transaction.
    pub max_txn_ops: usize,
    /// Most requests outstanding on one connection before senders wait.
    pub max_inflight_per_connection: usize,
    /// Bytes a connection writer coalesces into one system call.
    pub max_batch_bytes: usize,
    /// Pending truncations per node before they are flushed explicitly.
    pub max_pending_truncations: usize,
    /// Default attempts of the retry helper.
    pub retry_attempts: u32,
    /// First back-off of the retry helper, µs (doubles, with jitter).
    pub retry_backoff_us: u64,
    /// Longest back-off of the retry helper, µs.
    pub retry_backoff_max_us: u64,
    /// RPC timeout, ms.
    pub rpc_timeout_ms: u64,
    /// Attempts for an idempotent protocol message whose reply did not come
    /// (COMMIT-BACKUP, COMMIT-PRIMARY, ABORT, TRUNCATE), each after
    /// `rpc_timeout_ms`. After the last one the outcome is reported unknown.
    pub rpc_attempts: u32,
    /// Most transactions open at once in one client process.
    pub max_open_txns: usize,
    /// How often a client flushes its queued TRUNCATEs when no other frame
    /// carries them, µs.
    pub truncate_flush_us: u64,
    /// How many recently finished (aborted or truncated) transaction ids a
    /// participant remembers, so that a late or duplicated LOCK or
    /// COMMIT-BACKUP for one of them is refused instead of re-locking or
    /// re-logging (stands in for FaRM Table 1's truncation low bound).
    pub max_finished_ids: usize,
    /// Most thin-client transactions (`Execute`) a node runs at once; more
    /// are refused with a clear error.
    pub max_concurrent_executes: usize,
    /// Most bytes of rows in one scan reply; a longer scan is cut short with
    /// `more = true` and the coordinator continues from the last key, so a
    /// reply never exceeds the frame limit.
    pub max_scan_bytes: usize,
    /// How often a node advances its GC safe point, µs.
    pub gc_interval_us: u64,
    /// Objects per data-recovery chunk (FaRM §5.4).
    pub data_recovery_chunk_objects: usize,
    /// Pause between data-recovery chunks, µs, so that foreground
    /// throughput holds (FaRM §5.4 paces recovery); no pause when a region
    /// is down to its last complete replica.
    pub data_recovery_pace_us: u64,
    /// Transactions one node coordinates the recovery of at once (FaRM
    /// §5.3 steps 6–7); more wait for the next configuration.
    pub max_recovering_txns: usize,
    /// Clients (coordinators) holding a lease at the CM at once (FaRM
    /// §5.1); a client beyond it is not granted one and its requests are
    /// ignored until another leaves.
    pub max_client_leases: usize,
    /// READs and SCANs a node holds at once until their `read_ts` has
    /// passed (`clock.reads_wait_at_server`); more are answered
    /// `Unavailable` (a retryable abort). READs and SCANs waiting for a
    /// lock (`read_lock_wait_us`) count against the same bound.
    pub max_deferred_reads: usize,
    /// How long a READ or SCAN that meets another transaction's lock waits
    /// at the primary for that lock to go before it is answered
    /// `Conflict::Locked` (an early abort, FaRMv2 §4.7), µs; 0 aborts at
    /// once, as FaRMv2 does. A lock holder never waits for a reader (it
    /// holds its locks only through its own commit), so the wait cannot
    /// deadlock; it ends as soon as the holder's COMMIT-PRIMARY or ABORT
    /// (or recovery) releases the lock, and the read is then served at
    /// its `read_ts` as if it had come just then (without the wait, the
    /// hot keys of YCSB and TPC-C abort readers by the thousand).
    ///
    /// Default 5 000 µs.
    pub read_lock_wait_us: u64,
    /// How long a LOCK of a transaction whose only write is one blind
    /// write (`TxnRequest::LockBlind`) that meets another transaction's
    /// lock waits at the primary for that lock to go before it is
    /// answered `Conflict::Locked`, µs; 0 fails it at once, as FaRM's
    /// LOCK does. The waiting transaction holds no lock (this is its only
    /// one), so no cycle of waits can form; with no version to check, the
    /// lock it takes when the holder's COMMIT-PRIMARY, ABORT or recovery
    /// releases the key is the lock a LOCK sent then would take (without
    /// the wait, YCSB-A's blind updates of hot keys abort about 7 % of the
    /// time).
    /// Waiting LOCKs count against `max_deferred_reads` with the reads.
    pub blind_lock_wait_us: u64,
    /// Disk durability: how long a log record that no reply waits for
    /// may stay written but not fsynced, µs (default 5 000). Records a
    /// reply depends on are fsynced as soon as it waits; the others (a
    /// LOCK whose LOCK-REPLY went before its fsync, a backup's apply at
    /// TRUNCATE) ride on the next such fsync, or on this timer when none
    /// comes (one fsync per record would cost disk-mode TATP most of its
    /// CPU).
    pub log_idle_sync_us: u64,
    /// A real client's ticker, the thread that ends uncertainty waits
    /// nothing else ends, sleeps until this long before the earliest
    /// deadline and spins the rest, µs (default 15; 0: it sleeps until
    /// the deadline). On a saturated machine a woken thread waits 20–40 µs
    /// for a core, which lengthens every such wait; the spin takes the mean
    /// GET_TS wait from about 1.28 to about 1.2 times the uncertainty on
    /// TATP and YCSB-B, for about 1 % of one core
    /// (docs/performance-history.md). The simulator has no ticker thread
    /// and ignores it.
    pub ticker_spin_us: u64,
    /// Disk durability: writer threads of each node's log, so that up to
    /// this many fsyncs are in flight at once (default 1, at most
    /// [`MAX_LOG_WRITERS`]). Two let a record written during an fsync
    /// get its own at once instead of waiting for that one to end; one
    /// makes each fsync cover more records. On a 2-core machine TATP at 32
    /// sessions runs about 7 % faster with one writer than with two, and
    /// TATP at 8 sessions and the 4-key RMW at 8 within 1 %
    /// (docs/performance-history.md).
    pub log_writers: usize,
}

/// The most log writer threads (`limits.log_writers`) a node may run.
pub const MAX_LOG_WRITERS: usize = 4;

/// The largest `limits.ticker_spin_us` a configuration may set, µs: an
/// uncertainty is tens of microseconds, and a larger margin only spins.
pub const MAX_TICKER_SPIN_US: u64 = 1_000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 4096,
            max_value_bytes: 1 << 20,
            max_versions_per_object: 16,
            gc_window_ms: 2_000,
            max_log_records: 1 << 20,
            max_scan_rows: 10_000,
            max_txn_ops: 100_000,
            max_inflight_per_connection: 16_384,
            max_batch_bytes: 256 << 10,
            max_pending_truncations: 256,
            retry_attempts: 64,
            retry_backoff_us: 50,
            retry_backoff_max_us: 20_000,
            rpc_timeout_ms: 10_000,
            rpc_attempts: 8,
            max_open_txns: 65_536,
            truncate_flush_us: 2_000,
            max_finished_ids: 1 << 16,
            max_concurrent_executes: 256,
            max_scan_bytes: 16 << 20,
            gc_interval_us: 50_000,
            // FaRM §5.4: an 8 KB block every 4 ms per region being filled
            // (64 TATP-sized rows). 256 objects every 200 µs halved TATP
            // throughput for the whole fill after a node kill.
            data_recovery_chunk_objects: 64,
            data_recovery_pace_us: 4000,
            max_recovering_txns: 1 << 20,
            max_client_leases: 1 << 16,
            max_deferred_reads: 1 << 16,
            read_lock_wait_us: 5_000,
            blind_lock_wait_us: 5_000,
            log_idle_sync_us: 5_000,
            ticker_spin_us: 15,
            log_writers: 1,
        }
    }
}

impl Limits {
    /// Set one limit from `name=value` (for `meridian bench --limit`), as
    /// if `[limits] name = value` had been written in the configuration.
    ///
    /// Errors: [`ConfigError::Parse`] for a spec without `=`, a value that
    /// is not a non-negative integer, or a name that is not a limit.
    pub fn set_from_spec(&mut self, spec: &str) -> Result<(), ConfigError> {
        set_field_from_spec(self, "limit", spec)
    }

    /// The retry helper's back-off before attempt `attempt + 1`, µs, after
    /// `attempt` aborted attempts (1-based): `exp / 2 + jitter`, where
    /// `exp = retry_backoff_us · 2^(attempt − 1)`, capped at
    /// `retry_backoff_max_us`, and `jitter = draw(exp)`, which must be
    /// uniform in `0..exp`. Jitter spreads the retries of transactions that
    /// aborted on the same hot object, so they do not meet again at once.
    /// Used by the client's retry helper and by the bench's closed loop (for
    /// every target alike).
    pub fn retry_backoff_us(&self, attempt: u32, draw: impl FnOnce(u64) -> u64) -> u64 {
        let base = self.retry_backoff_us.max(1);
        let exp = base
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(30))
            .min(self.retry_backoff_max_us.max(base));
        exp / 2 + draw(exp.max(1)).min(exp)
    }
}

/// Failure detection and reconfiguration timing (FaRM §5.1, §5.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseConfig {
    /// The lease between the CM and every member and client, ms (FaRM
    /// §5.1; default 50). Chosen as FaRM's Figure 16 does, by counting
    /// false positives (suspicions with no fault injected) during
    /// full-load TATP on a 2-core machine (3 nodes, disk durability,
    /// 32 sessions; leases on their own thread): 0 in 10 minutes at 50 ms;
    /// at 25 ms (half) 0 in one 10-minute run but one incident in a
    /// 40-second one; at 12 ms, 6 in 10 minutes (README, "Leases and
    /// clocks"). Leases need their own thread: on the runtime's threads,
    /// 50 ms is too short under full load.
    pub lease_ms: u64,
    /// How long a would-be CM waits for probe replies, ms (FaRM §5.2 step 2).
    pub probe_timeout_ms: u64,
    /// How often unanswered reconfiguration and recovery messages are
    /// resent, ms.
    pub resend_ms: u64,
    /// Backup CMs: the CM's successors allowed to start a reconfiguration
    /// first (FaRM §5.2 step 1).
    pub backup_cms: usize,
    /// How long the CM of a cluster's first configuration waits for every
    /// member to ask for its first lease before suspecting it, ms: node
    /// processes of a fresh cluster start over hundreds of milliseconds.
    pub formation_grace_ms: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            lease_ms: 50,
            probe_timeout_ms: 2,
            resend_ms: 2,
            backup_cms: 2,
            formation_grace_ms: 2000,
        }
    }
}

/// The coordination service that stores configurations (FaRM §3, §5.2
/// step 3): a Raft group embedded in the first `replicas` nodes of the node
/// list (by id), so a cluster needs no outside service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoordinationConfig {
    /// Raft replicas: 1, 3 or 5 (0 = an outside service answers the
    /// node's compare-and-swap effects, as in the simulator's register).
    /// Clusters with fewer nodes use the largest odd number that fits.
    pub replicas: usize,
    /// Raft tick, ms.
    pub tick_ms: u64,
    /// Ticks without a leader before a replica campaigns (the replica of
    /// rank r waits `election_ticks + 2r`, which keeps elections
    /// deterministic and staggered). Default 40 (200 ms at 5 ms ticks):
    /// with 10, a leader whose process or VM stalled for 50 ms lost its
    /// quorum (`check_quorum`), and under a bulk load on this 2-core VM
    /// the group went seconds without a leader, so the clock master could
    /// not raise its time bound and clients could not sync.
    pub election_ticks: usize,
    /// Ticks between leader heartbeats.
    pub heartbeat_ticks: usize,
}

impl Default for CoordinationConfig {
    fn default() -> Self {
        CoordinationConfig {
            replicas: 3,
            tick_ms: 5,
            election_ticks: 40,
            heartbeat_ticks: 2,
        }
    }
}

/// Where a node keeps what it acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DurabilityMode {
    /// In memory only, as FaRM with non-volatile DRAM: an acknowledged
    /// commit survives up to f failures per region (f+1 replicas), not a
    /// crash of every replica of a region.
    Memory,
    /// A write-ahead log, fsynced with group commit before any reply that
    /// depends on it, plus periodic checkpoints: a node restarts from disk,
    /// and a crash of the whole cluster loses no acknowledged commit.
    Disk,
}

/// `[durability]`: how nodes persist their state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DurabilityConfig {
    /// `"disk"` (default) or `"memory"`.
    pub mode: DurabilityMode,
    /// A checkpoint is written after this many logged mutations (default
    /// 100,000), or after as many as the last checkpoint held objects if
    /// that is more (so the work of writing checkpoints stays in
    /// proportion to the work logged, and a restart replays at most about
    /// one state's worth of log); the log before it is then dropped.
    pub checkpoint_records: u64,
    /// Disk mode: whether a commit is reported only once a primary's
    /// COMMIT-PRIMARY record is durable (default true, FaRM §4's rule).
    /// With `false` a primary answers COMMIT-PRIMARY as soon as it
    /// installed the writes ([`meridian_wire::TxnResponse::Installed`],
    /// while every region has a complete backup), so a read-write
    /// transaction waits for one fsync stage, its backups' COMMIT-BACKUP
    /// records, instead of two (about 11 % more TATP throughput at 32
    /// sessions on disk, 30 % more 4-key RMW at 8). But **`false` can
    /// lose a reported commit**: if the region's primary crashes before
    /// its next fsync (in a crash of every node, say), the commit is left
    /// only in its backups' COMMIT-BACKUP records, and a configuration may
    /// leave out up to f of a region's replicas (those that did not answer
    /// its CM's probe in time); if it leaves out those backups, recovery
    /// finds only the primary's LOCK record and aborts the commit. With
    /// `true` the
    /// primary's durable COMMIT-PRIMARY record decides it. Like
    /// PostgreSQL's `synchronous_commit = off`, use `false` only where
    /// losing the last commits before such a crash is acceptable.
    pub report_after_primary_fsync: bool,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            mode: DurabilityMode::Disk,
            checkpoint_records: 100_000,
            report_after_primary_fsync: true,
        }
    }
}

/// Clock settings (FaRMv2 §4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClockConfig {
    /// Assumed bound on clock drift, ppm (default 1000).
    pub drift_ppm: u64,
    /// How often each client process synchronises with the clock master,
    /// µs (default 1000). A client's uncertainty is its commits' `write_ts`
    /// wait (FaRMv2 §4.1), so clients sync often.
    pub sync_interval_us: u64,
    /// How often each node other than the clock master synchronises with
    /// it, µs (default 2500; at most half `max_sample_age_us`, and a
    /// quarter leaves room for a lost sync: its retry goes after half the
    /// sample age, `ClientProcess::tick`). A node's
    /// uncertainty is on a read's path only when the read arrives before
    /// the node's clock shows its `read_ts` past (`reads_wait_at_server`),
    /// which a transit of a few tens of µs usually covers; each sync costs
    /// about 100 µs of CPU over the threads of both ends on a 2-core machine's
    /// loopback (timer wake-ups, the master's lease thread, the reply's
    /// hand-off to the node's runtime), and at 1 ms per node the syncs
    /// would take a quarter of an idle cluster's CPU.
    pub node_sync_interval_us: u64,
    /// A process uses no synchronisation older than this, µs (default
    /// 10,000; at least twice `sync_interval_us`). A client cut off from
    /// the clock master stops handing out timestamps this long after its
    /// last synchronisation, and a new master enables its clock only after
    /// the old master stopped answering plus this (FaRMv2 §4.3: "servers
    /// removed from the configuration have stopped giving out timestamps").
    pub max_sample_age_us: u64,
    /// How far ahead of its time the clock master keeps the time bound
    /// stored in the coordination service, ms (default 1000; it asks again
    /// when half is left, so a raise may take up to 500 ms, a Raft
    /// election included, before clients wait). A new clock master starts global time at the
    /// stored bound, so global time jumps ahead by up to this at a CM
    /// change; the master hands out no time while a raise is late
    /// (FaRMv2 §4.3's monotonicity, kept across whole-cluster restarts).
    pub time_bound_window_ms: u64,
    /// A member whose clock rate differs from the clock master's by more
    /// than this, ppm, is reported and removed (default 200; 0 = not
    /// checked). Measured over `rate_window_ms` windows with the round
    /// trips' error subtracted, so noise is never reported.
    pub max_rate_ppm: u64,
    /// The shortest window the rate is measured over, ms (default 1000).
    pub rate_window_ms: u64,
    /// Where a transaction's `read_ts` uncertainty wait happens (default
    /// true: at the nodes). FaRMv2 §4.1 has the coordinator take
    /// `read_ts` as its clock's upper bound and wait until its lower
    /// bound has passed it, before any read, so that no transaction that
    /// locks after a read can commit at or below `read_ts`. With this set
    /// the coordinator does not wait: each node serves a READ or SCAN at
    /// `read_ts` only once its own clock's lower bound is above `read_ts`
    /// (holding the request until then), which gives the same guarantee
    /// at the moment that matters, and the wait overlaps the request's
    /// trip (under load it has usually passed on arrival). Fixed for the
    /// life of a cluster: clients read it once, when they start.
    pub reads_wait_at_server: bool,
    /// Where a read-write transaction's `write_ts` uncertainty wait
    /// happens (default true: at the nodes). FaRMv2 §4.2 has the
    /// coordinator take `write_ts` from GET_TS once every LOCK is granted
    /// and wait until it has passed before it validates, with the locks
    /// held. With this set the coordinator sends at once, and the first
    /// messages that need `write_ts` in the past wait for it where they
    /// are handled: its VALIDATEs, or its COMMIT-BACKUPs when it validates
    /// nothing, are held by each node until the node's own clock shows
    /// `write_ts` past (`TxnRequest::AfterWriteTs`). Validation still
    /// happens after `write_ts`, and the locks are still released after
    /// it (FaRMv2 §7.3), but the wait overlaps the messages' trip, no
    /// client thread wakes for it, and the locks are held for less time.
    /// A transaction with nothing to validate and no backups (a
    /// one-replica region) waits at the coordinator, as in FaRMv2. Clients
    /// read it once, when they start; nodes honour a held request either
    /// way.
    pub writes_wait_at_server: bool,
    /// Serve single-read transactions (`TxnOptions::single_read`: one
    /// `get` and nothing else) as FaRM §3's lock-free reads (default
    /// true): the primary answers with the key's newest committed version
    /// at once, with no `read_ts` and no hold until it passed, waiting only
    /// for a lock on the key (`TxnRequest::ReadLatest`, which says why that
    /// is still strictly serializable). False: such a transaction reads at
    /// `read_ts` like any other. Clients read it once, when they start.
    pub lock_free_reads: bool,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            drift_ppm: 1000,
            sync_interval_us: 1000,
            node_sync_interval_us: 2500,
            max_sample_age_us: 10_000,
            time_bound_window_ms: 1000,
            max_rate_ppm: 200,
            rate_window_ms: 1000,
            reads_wait_at_server: true,
            writes_wait_at_server: true,
            lock_free_reads: true,
        }
    }
}

impl ClockConfig {
    /// Set one clock setting from `name=value` (for `meridian bench
    /// --clock`), as if `[clock] name = value` had been written in the
    /// configuration: a whole number, or `true`/`false` for a switch.
    ///
    /// Errors: [`ConfigError::Parse`] for a spec without `=`, a value of
    /// the wrong kind, or a name that is not a clock setting.
    pub fn set_from_spec(&mut self, spec: &str) -> Result<(), ConfigError> {
        set_field_from_spec(self, "clock setting", spec)
    }
}

/// Set the field `name` of a configuration section from `name=value`, as
/// if the section's TOML held `name = value`: the value is a non-negative
/// whole number or `true`/`false`, and must have the field's type.
fn set_field_from_spec<T: Serialize + serde::de::DeserializeOwned>(
    section: &mut T,
    what: &str,
    spec: &str,
) -> Result<(), ConfigError> {
    let (name, value) = spec
        .split_once('=')
        .ok_or_else(|| ConfigError::Parse(format!("{what} `{spec}`: expected NAME=VALUE")))?;
    let value = match value.trim() {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        v => {
            let n: u64 = v.parse().map_err(|e| {
                ConfigError::Parse(format!("{what} `{spec}`: value is not a whole number: {e}"))
            })?;
            toml::Value::Integer(
                i64::try_from(n)
                    .map_err(|_| ConfigError::Parse(format!("{what} `{spec}`: value too large")))?,
            )
        }
    };
    let mut table =
        toml::Value::try_from(&*section).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let Some(t) = table.as_table_mut() else {
        return Err(ConfigError::Parse(format!(
            "{what}s do not encode as a table"
        )));
    };
    let name = name.trim();
    if !t.contains_key(name) {
        return Err(ConfigError::Parse(format!(
            "{what} `{spec}`: no {what} is called `{name}`"
        )));
    }
    t.insert(name.to_string(), value);
    *section = table
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Parse(format!("{what} `{spec}`: {e}")))?;
    Ok(())
}

/// One member machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Node id (unique).
    pub id: u32,
    /// Address to listen on / connect to, `host:port`.
    pub addr: String,
    /// Failure domain (FaRM §3: replicas go to distinct domains).
    #[serde(default)]
    pub failure_domain: String,
    /// Data directory (logs, pid file). Relative paths are relative to the
    /// configuration file.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
}

/// A region and its replicas, as computed by [`Configuration::regions`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// Region id.
    pub id: RegionId,
    /// Inclusive start key.
    pub start: Key,
    /// Exclusive end key, `None` = end of the key space.
    pub end: Option<Key>,
    /// The primary.
    pub primary: NodeId,
    /// The `f` backups.
    pub backups: Vec<NodeId>,
    /// FaRM §5.3 step 3 LastPrimaryChange\[r\]: the last configuration in
    /// which the primary of this region changed (the first configuration
    /// counts as a change).
    #[serde(default = "first_config")]
    pub last_primary_change: ConfigId,
    /// FaRM §5.3 step 3 LastReplicaChange\[r\]: the last configuration in
    /// which any replica of this region changed.
    #[serde(default = "first_config")]
    pub last_replica_change: ConfigId,
    /// Backups still being filled by data recovery (FaRM §5.4): they take
    /// new commits but may lack older objects, so they are never promoted
    /// to primary and never count as a surviving copy. The CM clears an
    /// entry when the replica reports it complete
    /// ([`Configuration::mark_ready`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filling: Vec<NodeId>,
    /// Backups that a rebalancing move takes off this region once the
    /// replica that replaces them is filled (make-before-break, FaRM §5.4):
    /// until then the region has `replication + leaving.len()` replicas, so
    /// it keeps `replication` complete copies during the whole paced fill.
    /// A failure of any replica of the region cancels the move (the
    /// leaving backup stays).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leaving: Vec<NodeId>,
}

/// One half of a make-before-break rebalancing move
/// ([`Configuration::rebalance_step`], FaRM §5.4): a backup replica of
/// `region` moves from member `from` to member `to`. `finished = false`:
/// `to` was added as a filling backup and `from` marked leaving;
/// `finished = true`: `to` is filled and `from` was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RebalanceMove {
    /// The region.
    pub region: RegionId,
    /// The member the replica leaves.
    pub from: NodeId,
    /// The member the replica moves to.
    pub to: NodeId,
    /// True for the second half (the old replica dropped).
    pub finished: bool,
}

fn first_config() -> ConfigId {
    ConfigId(1)
}

impl RegionInfo {
    /// True if `key` belongs to this region.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| key < e)
    }
}

/// A configuration ⟨i, S, F, CM⟩ plus region layout and limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// Configuration identifier i.
    #[serde(default = "one")]
    pub config_id: u64,
    /// The CM (and clock master).
    #[serde(default)]
    pub cm: u32,
    /// Copies of each region, f + 1 (default 3).
    #[serde(default = "three")]
    pub replication: usize,
    /// Number of regions (key-space ranges split on the first byte).
    #[serde(default = "twelve")]
    pub region_count: u32,
    /// Every machine the cluster knows, with address and failure domain F
    /// (the address book). The members S are [`Configuration::members`].
    pub nodes: Vec<NodeConfig>,
    /// The members S, by id, ascending. Empty means every node in `nodes`
    /// (a fresh cluster); reconfiguration always writes them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<u32>,
    /// The region placement the CM stored (FaRM §3, §5.2 step 4). Empty
    /// means the initial placement computed from the members
    /// ([`Configuration::regions`]); reconfiguration always writes it out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<RegionInfo>,
    /// Clock settings.
    #[serde(default)]
    pub clock: ClockConfig,
    /// Lease and reconfiguration timing.
    #[serde(default)]
    pub lease: LeaseConfig,
    /// The coordination service (Raft group) holding configurations.
    #[serde(default)]
    pub coordination: CoordinationConfig,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
    /// How nodes persist their state.
    #[serde(default)]
    pub durability: DurabilityConfig,
    /// The configuration in which the CM restarted from disk last took
    /// over the clock again (0: none since the first). A CM that renews
    /// its configuration after a restart keeps its role but not its
    /// clock, which starts afresh at its stored time bound; members and
    /// clients see no change of CM, so this is how they know to drop the
    /// old clock's samples and follow the new one (FaRMv2 §4.3), instead
    /// of handing out timestamps from the old clock's timeline. See
    /// [`Configuration::clock_master_changed_from`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clock_epoch: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn one() -> u64 {
    1
}
fn three() -> usize {
    3
}
fn twelve() -> u32 {
    12
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse or has unknown/mistyped fields.
    #[error("configuration does not parse: {0}")]
    Parse(String),
    /// The file could not be read.
    #[error("cannot read configuration {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The configuration parsed but is not valid.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// A node id that is not a member.
    #[error("unknown node {0}")]
    UnknownNode(u32),
}

impl Configuration {
    /// Parse and validate TOML text.
    ///
    /// Errors: [`ConfigError::Parse`] for syntax/unknown fields,
    /// [`ConfigError::Invalid`] for semantic problems.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let c: Configuration =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    /// Read, parse and validate a TOML file; relative data dirs are resolved
    /// against the file's directory.
    ///
    /// Errors: as [`Configuration::from_toml`], plus [`ConfigError::Io`].
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Self::from_toml(&text)?;
        let base = path.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        for n in &mut c.nodes {
            if let Some(d) = &n.data_dir {
                if d.is_relative() {
                    n.data_dir = Some(base.join(d));
                }
            }
        }
        Ok(c)
    }

    /// Serialise to TOML.
    ///
    /// Errors: [`ConfigError::Parse`] if serialisation fails (it should not).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string_pretty(self).map_err(|e| ConfigError::Parse(e.to_string()))
    }

    /// A local cluster of `n` nodes on 127.0.0.1 starting at `base_port`, each
    /// in its own failure domain, data in `<dir>/node<i>`.
    pub fn local(
        n: u32,
        base_port: u16,
        replication: usize,
        region_count: u32,
        dir: &std::path::Path,
    ) -> Self {
        Configuration {
            config_id: 1,
            cm: 0,
            replication,
            region_count,
            nodes: (0..n)
                .map(|i| NodeConfig {
                    id: i,
                    addr: format!("127.0.0.1:{}", base_port as u32 + i),
                    failure_domain: format!("fd{i}"),
                    data_dir: Some(dir.join(format!("node{i}"))),
                })
                .collect(),
            members: Vec::new(),
            placement: Vec::new(),
            clock: ClockConfig::default(),
            lease: LeaseConfig::default(),
            coordination: CoordinationConfig::default(),
            durability: DurabilityConfig::default(),
            clock_epoch: 0,
            limits: Limits::default(),
        }
    }

    /// The nodes holding the coordination service's Raft replicas: the
    /// first `coordination.replicas` nodes by id (fewer in small clusters:
    /// the largest odd count that fits). Empty when an outside service is
    /// used. Fixed for the cluster's life (every configuration inherits it).
    pub fn coordination_group(&self) -> Vec<NodeId> {
        let mut ids: Vec<u32> = self.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        let mut k = self.coordination.replicas.min(ids.len());
        if k > 0 && k.is_multiple_of(2) {
            k -= 1;
        }
        ids.into_iter().take(k).map(NodeId).collect()
    }

    /// The configuration identifier.
    pub fn id(&self) -> ConfigId {
        ConfigId(self.config_id)
    }

    /// The clock master / CM.
    pub fn cm(&self) -> NodeId {
        NodeId(self.cm)
    }

    /// Look up a member.
    ///
    /// Errors: [`ConfigError::UnknownNode`].
    pub fn node(&self, id: NodeId) -> Result<&NodeConfig, ConfigError> {
        self.nodes
            .iter()
            .find(|n| n.id == id.0)
            .ok_or(ConfigError::UnknownNode(id.0))
    }

    /// Check everything [`Configuration::from_toml`] checks (for a
    /// configuration built or changed in code).
    ///
    /// Errors: [`ConfigError::Invalid`] naming the first problem.
    pub fn validate_all(&self) -> Result<(), ConfigError> {
        self.validate()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.nodes.is_empty() {
            return bad("no nodes".into());
        }
        let ids: BTreeSet<u32> = self.nodes.iter().map(|n| n.id).collect();
        if ids.len() != self.nodes.len() {
            return bad("duplicate node ids".into());
        }
        let members = self.members();
        for m in &members {
            if !ids.contains(&m.0) {
                return bad(format!("member {m} is not in the node list"));
            }
        }
        if self.members.windows(2).any(|w| w[0] >= w[1]) {
            return bad("members must be ascending and distinct".into());
        }
        if !self.is_member(NodeId(self.cm)) {
            return bad(format!("cm {} is not a member", self.cm));
        }
        if self.placement.is_empty() && (self.replication == 0 || self.replication > members.len())
        {
            return bad(format!(
                "replication {} needs between 1 and {} nodes",
                self.replication,
                members.len()
            ));
        }
        if self.region_count == 0 || self.region_count > 256 {
            return bad(format!(
                "region_count {} must be in 1..=256",
                self.region_count
            ));
        }
        if self.limits.max_key_bytes == 0 || self.limits.max_value_bytes == 0 {
            return bad("key and value limits must be positive".into());
        }
        if self.limits.max_value_bytes + self.limits.max_key_bytes + 4096
            > meridian_wire::MAX_FRAME_BYTES
        {
            return bad("max_value_bytes too large for the frame limit".into());
        }
        if !(1..=MAX_LOG_WRITERS).contains(&self.limits.log_writers) {
            return bad(format!(
                "limits.log_writers {} must be in 1..={MAX_LOG_WRITERS}",
                self.limits.log_writers
            ));
        }
        if self.limits.ticker_spin_us > MAX_TICKER_SPIN_US {
            return bad(format!(
                "limits.ticker_spin_us {} is above {MAX_TICKER_SPIN_US}: the ticker would spin most of a core",
                self.limits.ticker_spin_us
            ));
        }
        if self.clock.max_sample_age_us < 2 * self.clock.sync_interval_us.max(100) {
            return bad(format!(
                "clock.max_sample_age_us {} must be at least twice sync_interval_us {}",
                self.clock.max_sample_age_us, self.clock.sync_interval_us
            ));
        }
        if self.clock.max_sample_age_us < 2 * self.clock.node_sync_interval_us.max(100) {
            return bad(format!(
                "clock.max_sample_age_us {} must be at least twice node_sync_interval_us {}",
                self.clock.max_sample_age_us, self.clock.node_sync_interval_us
            ));
        }
        if self.clock.time_bound_window_ms == 0 {
            return bad("clock.time_bound_window_ms must be positive".into());
        }
        if self.lease.lease_ms == 0 {
            return bad("lease.lease_ms must be positive".into());
        }
        if ![0, 1, 3, 5].contains(&self.coordination.replicas) {
            return bad(format!(
                "coordination.replicas {} must be 0, 1, 3 or 5",
                self.coordination.replicas
            ));
        }
        if self.coordination.replicas > 0
            && (self.coordination.tick_ms == 0
                || self.coordination.heartbeat_ticks == 0
                || self.coordination.election_ticks <= self.coordination.heartbeat_ticks)
        {
            return bad(
                "coordination needs tick_ms > 0 and election_ticks > heartbeat_ticks > 0".into(),
            );
        }
        if self.clock.drift_ppm >= 1_000_000 {
            return bad("clock.drift_ppm must be below 1000000".into());
        }
        for n in &self.nodes {
            if n.addr.parse::<std::net::SocketAddr>().is_err() && !n.addr.contains(':') {
                return bad(format!(
                    "node {} address {:?} is not host:port",
                    n.id, n.addr
                ));
            }
        }
        if !self.placement.is_empty() {
            self.validate_placement()?;
        }
        Ok(())
    }

    /// A stored placement: `region_count` regions tiling the key space in
    /// order, each with 1..=`replication` distinct member replicas.
    fn validate_placement(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.placement.len() != self.region_count as usize {
            return bad(format!(
                "placement has {} regions, region_count is {}",
                self.placement.len(),
                self.region_count
            ));
        }
        let n = self.region_count as usize;
        for (i, r) in self.placement.iter().enumerate() {
            let (start, end) = region_bounds(i, n);
            if r.id != RegionId(i as u32) || r.start != start || r.end != end {
                return bad(format!("region {} does not tile the key space", r.id));
            }
            let all: Vec<NodeId> = std::iter::once(r.primary)
                .chain(r.backups.iter().copied())
                .collect();
            let distinct: BTreeSet<NodeId> = all.iter().copied().collect();
            if distinct.len() != all.len() || all.len() > self.replication.max(1) + r.leaving.len()
            {
                return bad(format!("region {} has replicas {:?}", r.id, all));
            }
            if let Some(m) = all.iter().find(|m| !self.is_member(**m)) {
                return bad(format!("region {} is placed on non-member {m}", r.id));
            }
            if r.last_primary_change > self.id() || r.last_replica_change > self.id() {
                return bad(format!("region {} changed in a future configuration", r.id));
            }
            if r.filling.iter().any(|f| !r.backups.contains(f)) {
                return bad(format!(
                    "region {} fills a replica that is not a backup",
                    r.id
                ));
            }
            if r.leaving
                .iter()
                .any(|l| !r.backups.contains(l) || r.filling.contains(l))
            {
                return bad(format!(
                    "region {} moves off a replica that is not a complete backup",
                    r.id
                ));
            }
        }
        Ok(())
    }

    /// The region map. A stored placement ([`Configuration::placement`])
    /// is returned as it is; otherwise the initial placement is computed:
    /// `region_count` ranges of the first key byte, placed round-robin over
    /// the members with backups on the following members, skipping members
    /// whose failure domain is already used when possible.
    pub fn regions(&self) -> Vec<RegionInfo> {
        if !self.placement.is_empty() {
            return self.placement.clone();
        }
        let n = self.region_count as usize;
        let members: Vec<&NodeConfig> = self
            .nodes
            .iter()
            .filter(|m| self.is_member(NodeId(m.id)))
            .collect();
        (0..n)
            .map(|r| {
                let (start, end) = region_bounds(r, n);
                let mut replicas: Vec<&NodeConfig> = Vec::new();
                let mut domains: BTreeSet<&str> = BTreeSet::new();
                for pass in 0..2 {
                    for k in 0..members.len() {
                        let m = members[(r + k) % members.len()];
                        if replicas.len() == self.replication {
                            break;
                        }
                        if replicas.iter().any(|x| x.id == m.id) {
                            continue;
                        }
                        if pass == 0 && domains.contains(m.failure_domain.as_str()) {
                            continue;
                        }
                        domains.insert(&m.failure_domain);
                        replicas.push(m);
                    }
                }
                RegionInfo {
                    id: RegionId(r as u32),
                    start,
                    end,
                    primary: NodeId(replicas[0].id),
                    backups: replicas[1..].iter().map(|m| NodeId(m.id)).collect(),
                    last_primary_change: self.id(),
                    last_replica_change: self.id(),
                    filling: Vec::new(),
                    leaving: Vec::new(),
                }
            })
            .collect()
    }

    /// The members S, ascending.
    pub fn members(&self) -> Vec<NodeId> {
        if self.members.is_empty() {
            let mut v: Vec<NodeId> = self.nodes.iter().map(|n| NodeId(n.id)).collect();
            v.sort();
            v
        } else {
            self.members.iter().map(|&m| NodeId(m)).collect()
        }
    }

    /// True if `id` is a member of this configuration (precise membership,
    /// FaRM §5.2: requests from non-members are refused).
    pub fn is_member(&self, id: NodeId) -> bool {
        if self.members.is_empty() {
            self.nodes.iter().any(|n| n.id == id.0)
        } else {
            self.members.binary_search(&id.0).is_ok()
        }
    }

    /// The failure domain of node `id` (its own id if it has none, so that
    /// nodes without domains count as distinct).
    pub fn failure_domain(&self, id: NodeId) -> String {
        match self.node(id) {
            Ok(n) if !n.failure_domain.is_empty() => n.failure_domain.clone(),
            _ => format!("node-{}", id.0),
        }
    }

    /// Replicas each member holds in the placement (primary or backup).
    pub fn replica_load(&self) -> BTreeMap<NodeId, usize> {
        let mut load: BTreeMap<NodeId, usize> =
            self.members().into_iter().map(|m| (m, 0)).collect();
        for r in self.regions() {
            // A leaving backup is already counted at its new place.
            for n in std::iter::once(r.primary)
                .chain(r.backups.iter().copied())
                .filter(|n| !r.leaving.contains(n))
            {
                *load.entry(n).or_default() += 1;
            }
        }
        load
    }

    /// The next configuration after a failure (FaRM §5.2 steps 3–4): members
    /// `alive` (the machines that answered the probe), CM `new_cm`, and
    /// every region remapped. A failed primary is replaced by promoting its
    /// first surviving backup (LastPrimaryChange = the new id); failed
    /// replicas are replaced by the least-loaded members in failure domains
    /// the region does not use yet (ties by id), when there are any
    /// (LastReplicaChange = the new id). Deterministic: every machine that
    /// computes it gets the same answer.
    ///
    /// Errors: [`ConfigError::Invalid`] if `new_cm` is not in `alive`, a
    /// member of `alive` is unknown, or a region lost every replica (FaRM:
    /// "it signals an error"; the data is gone in memory mode).
    pub fn remap(
        &self,
        alive: &BTreeSet<NodeId>,
        new_cm: NodeId,
    ) -> Result<Configuration, ConfigError> {
        if !alive.contains(&new_cm) {
            return Err(ConfigError::Invalid(format!(
                "new CM {new_cm} is not among the surviving members"
            )));
        }
        for m in alive {
            self.node(*m)?;
        }
        let next = ConfigId(self.config_id + 1);
        let mut out = self.clone();
        out.config_id = next.0;
        out.cm = new_cm.0;
        out.members = alive.iter().map(|m| m.0).collect();
        let mut placement = self.regions();
        // Drop failed replicas, promote backups.
        for r in &mut placement {
            let before: Vec<NodeId> = std::iter::once(r.primary)
                .chain(r.backups.iter().copied())
                .collect();
            let kept: Vec<NodeId> = before
                .iter()
                .copied()
                .filter(|n| alive.contains(n))
                .collect();
            r.filling.retain(|n| alive.contains(n));
            // A failure among the replicas cancels a rebalancing move: the
            // leaving backup stays (it may be the only complete copy left).
            if kept.len() != before.len() {
                r.leaving.clear();
            }
            // Only a complete copy can become primary (FaRM §5.4).
            let Some(first) = kept.iter().copied().find(|n| !r.filling.contains(n)) else {
                return Err(ConfigError::Invalid(format!(
                    "region {} lost every complete replica ({:?}, filling {:?})",
                    r.id, before, r.filling
                )));
            };
            let kept: Vec<NodeId> = std::iter::once(first)
                .chain(kept.iter().copied().filter(|n| *n != first))
                .collect();
            if first != r.primary {
                r.last_primary_change = next;
            }
            if kept.len() != before.len() {
                r.last_replica_change = next;
            }
            r.primary = first;
            r.backups = kept[1..].to_vec();
        }
        out.placement = placement;
        out.refill(next);
        Ok(out)
    }

    /// Record that `node` holds a complete copy of `region` (data recovery
    /// finished, FaRM §5.4): it may be promoted from now on. The CM applies
    /// this to the configuration it will remap; it changes no id.
    pub fn mark_ready(&mut self, region: RegionId, node: NodeId) {
        if self.placement.is_empty() {
            self.placement = self.regions();
        }
        if let Some(r) = self.placement.iter_mut().find(|r| r.id == region) {
            r.filling.retain(|n| *n != node);
        }
    }

    /// Bring every region back to `replication` replicas where members
    /// allow, least-loaded first, preferring unused failure domains.
    fn refill(&mut self, next: ConfigId) {
        let mut load = self.replica_load();
        let members = self.members();
        for i in 0..self.placement.len() {
            while 1 + self.placement[i].backups.len() < self.replication {
                let r = &self.placement[i];
                let holders: Vec<NodeId> = std::iter::once(r.primary)
                    .chain(r.backups.iter().copied())
                    .collect();
                let domains: BTreeSet<String> =
                    holders.iter().map(|n| self.failure_domain(*n)).collect();
                let pick = members
                    .iter()
                    .filter(|m| !holders.contains(m))
                    .min_by_key(|m| {
                        (
                            domains.contains(&self.failure_domain(**m)),
                            load.get(m).copied().unwrap_or(0),
                            **m,
                        )
                    })
                    .copied();
                let Some(m) = pick else { break };
                *load.entry(m).or_default() += 1;
                let r = &mut self.placement[i];
                r.backups.push(m);
                r.filling.push(m);
                r.last_replica_change = next;
            }
        }
    }

    /// Whether clocks must fail over to this configuration's clock master
    /// from `prev`'s (FaRMv2 §4.3): its CM is another node, or the same
    /// one restarted from disk ([`Configuration::clock_epoch`]).
    pub fn clock_master_changed_from(&self, prev: &Configuration) -> bool {
        self.cm != prev.cm || self.clock_epoch != prev.clock_epoch
    }

    /// The same members and placement under the next identifier: what a
    /// CM restarted from disk proposes, so that every transaction of the
    /// configuration it crashed in goes through recovery (FaRM §5.3) and
    /// every member re-establishes its leases.
    pub fn renewed(&self) -> Configuration {
        let mut out = self.clone();
        out.placement = self.regions();
        out.members = self.members().iter().map(|m| m.0).collect();
        out.config_id += 1;
        out
    }

    /// The next configuration with `node` joined (FaRM §5.2: joins are
    /// reconfigurations started by the CM). The node is added to the address
    /// book if new and to the members; regions that are short of replicas
    /// get it as a backup. Moving regions onto it is
    /// [`Configuration::rebalance_step`].
    ///
    /// Errors: [`ConfigError::Invalid`] if the id is known with a different
    /// address, or already a member.
    pub fn with_joined(&self, node: NodeConfig) -> Result<Configuration, ConfigError> {
        let id = NodeId(node.id);
        if self.is_member(id) {
            return Err(ConfigError::Invalid(format!("{id} is already a member")));
        }
        let mut out = self.clone();
        out.placement = self.regions();
        out.members = self.members().iter().map(|m| m.0).collect();
        match out.nodes.iter().find(|n| n.id == node.id) {
            Some(known) if known.addr != node.addr => {
                return Err(ConfigError::Invalid(format!(
                    "{id} is known at {}, not {}",
                    known.addr, node.addr
                )))
            }
            Some(_) => {}
            None => out.nodes.push(node),
        }
        out.members.push(id.0);
        out.members.sort_unstable();
        out.config_id += 1;
        let next = out.id();
        out.refill(next);
        Ok(out)
    }

    /// One paced rebalancing step (FaRM §5.4 moves data in the
    /// background), make-before-break so that no region ever has fewer than
    /// `replication` complete replicas because of a move:
    ///
    /// 1. If a move's new replica is filled (no region that has `leaving`
    ///    backups is still `filling`), the next configuration drops the
    ///    leaving backups.
    /// 2. Otherwise, if a move is under way, `None`: wait for its fill.
    /// 3. Otherwise, when a member holds more than the ceiling of the mean
    ///    load and another fewer than its floor, the next configuration adds the least-loaded
    ///    member to a region of the most-loaded one as a filling backup
    ///    (in a failure domain the region does not use otherwise) and marks
    ///    the old backup `leaving`.
    ///
    /// `None` when balanced. The caller (the CM) installs each step as a
    /// configuration change and waits for data recovery before the next.
    /// The [`RebalanceMove`] says which replica moves and which half of the
    /// move this step is.
    pub fn rebalance_step(&self) -> Option<(Configuration, RebalanceMove)> {
        let placement = self.regions();
        let next_of = |placement: Vec<RegionInfo>| {
            let mut out = self.clone();
            out.config_id += 1;
            out.members = self.members().iter().map(|m| m.0).collect();
            out.placement = placement;
            out
        };
        if placement.iter().any(|r| !r.leaving.is_empty()) {
            if placement
                .iter()
                .any(|r| !r.leaving.is_empty() && !r.filling.is_empty())
            {
                return None;
            }
            let next = ConfigId(self.config_id + 1);
            let mut placement = placement;
            let r = placement.iter_mut().find(|r| !r.leaving.is_empty())?;
            let leaving = std::mem::take(&mut r.leaving);
            r.backups.retain(|b| !leaving.contains(b));
            r.last_replica_change = next;
            let mv = RebalanceMove {
                region: r.id,
                from: leaving[0],
                to: r.backups.last().copied().unwrap_or(r.primary),
                finished: true,
            };
            return Some((next_of(placement), mv));
        }
        let load = self.replica_load();
        let (&light, &low) = load.iter().min_by_key(|(n, l)| (**l, **n))?;
        // Balanced enough: no member above the ceiling of the mean load, or
        // none below its floor (a fresh cluster's round-robin placement,
        // 8/8/7/7/6 replicas on 5 nodes, does not move at startup).
        let total: usize = load.values().sum();
        let (floor, ceil) = (total / load.len(), total.div_ceil(load.len()));
        if low >= floor {
            return None;
        }
        let mut heavy: Vec<(NodeId, usize)> = load.iter().map(|(n, l)| (*n, *l)).collect();
        heavy.sort_by_key(|(n, l)| (std::cmp::Reverse(*l), *n));
        for (from, high) in heavy {
            if high <= ceil || high < low + 2 {
                return None;
            }
            for (i, r) in placement.iter().enumerate() {
                if r.primary == light || r.backups.contains(&light) {
                    continue;
                }
                if !r.backups.contains(&from) || r.filling.contains(&from) {
                    continue;
                }
                let others: BTreeSet<String> = std::iter::once(r.primary)
                    .chain(r.backups.iter().copied())
                    .filter(|n| *n != from)
                    .map(|n| self.failure_domain(n))
                    .collect();
                if others.contains(&self.failure_domain(light)) {
                    continue;
                }
                let mut placement = placement.clone();
                let r = &mut placement[i];
                r.backups.push(light);
                r.filling.push(light);
                r.leaving.push(from);
                r.last_replica_change = ConfigId(self.config_id + 1);
                let mv = RebalanceMove {
                    region: r.id,
                    from,
                    to: light,
                    finished: false,
                };
                return Some((next_of(placement), mv));
            }
        }
        None
    }

    /// Panics (in release builds too) if the configuration breaks an invariant.
    pub fn check_invariants(&self) {
        if let Err(e) = self.validate() {
            panic!("configuration invariant: {e}");
        }
    }
}

fn region_bounds(r: usize, n: usize) -> (Key, Option<Key>) {
    let start = if r == 0 {
        Vec::new()
    } else {
        vec![(r * 256 / n) as u8]
    };
    let end = if r + 1 == n {
        None
    } else {
        Some(vec![((r + 1) * 256 / n) as u8])
    };
    (start, end)
}

/// Fast key → region lookup over a configuration's region map.
#[derive(Clone, Debug)]
pub struct RegionMap {
    regions: Vec<RegionInfo>,
    by_first_byte: Vec<u32>,
}

impl RegionMap {
    /// Build from a configuration.
    pub fn new(cfg: &Configuration) -> Self {
        let regions = cfg.regions();
        let mut by_first_byte = vec![0u32; 256];
        for (b, slot) in by_first_byte.iter_mut().enumerate() {
            let key = [b as u8];
            if let Some(r) = regions.iter().find(|r| r.contains(&key)) {
                *slot = r.id.0;
            }
        }
        RegionMap {
            regions,
            by_first_byte,
        }
    }

    /// The region holding `key`.
    pub fn region_of(&self, key: &[u8]) -> &RegionInfo {
        match key.first() {
            None => &self.regions[0],
            Some(b) => &self.regions[self.by_first_byte[*b as usize] as usize],
        }
    }

    /// All regions in key order.
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }

    /// Region by id.
    pub fn get(&self, id: RegionId) -> Option<&RegionInfo> {
        self.regions.get(id.0 as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--limit NAME=VALUE` sets exactly that limit; a misspelt name, a
    /// missing `=` or a value that is not a whole number is refused with
    /// the spec in the message, and the limits are left as they were.
    #[test]
    fn limits_are_set_from_specs_and_bad_specs_are_refused() {
        let mut l = Limits::default();
        l.set_from_spec("blind_lock_wait_us=0").unwrap();
        assert_eq!(l.blind_lock_wait_us, 0);
        assert_eq!(
            Limits {
                blind_lock_wait_us: Limits::default().blind_lock_wait_us,
                ..l.clone()
            },
            Limits::default()
        );
        l.set_from_spec(" max_scan_rows = 7 ").unwrap();
        assert_eq!(l.max_scan_rows, 7);
        let before = l.clone();
        for bad in [
            "blind_lock_wait",
            "no_such_limit=3",
            "max_scan_rows=-1",
            "max_scan_rows=x",
        ] {
            let e = l.set_from_spec(bad).unwrap_err().to_string();
            assert!(e.contains(bad.trim()), "{bad}: {e}");
        }
        assert_eq!(l, before);
    }

    /// Clock settings take whole numbers and switches by name
    /// (`meridian bench --clock`); a value of the wrong kind or an unknown
    /// name is refused with the spec in the message and changes nothing.
    #[test]
    fn clock_settings_are_set_from_specs_and_bad_specs_are_refused() {
        let mut c = ClockConfig::default();
        c.set_from_spec("sync_interval_us=4000").unwrap();
        c.set_from_spec("reads_wait_at_server = false").unwrap();
        assert_eq!(
            c,
            ClockConfig {
                sync_interval_us: 4000,
                reads_wait_at_server: false,
                ..ClockConfig::default()
            }
        );
        let before = c.clone();
        for bad in [
            "reads_wait_at_server=3",
            "sync_interval_us=true",
            "blind_lock_wait_us=0",
            "drift_ppm",
        ] {
            let e = c.set_from_spec(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(c, before);
        let mut l = Limits::default();
        assert!(l.set_from_spec("max_scan_rows=true").is_err());
        assert_eq!(l, Limits::default());
    }

    /// A node must sync at least twice per sample age, like a client, or
    /// its clock would lapse between syncs: the configuration is refused.
    #[test]
    fn a_node_sync_interval_over_half_the_sample_age_is_refused() {
        let mut c = Configuration::local(3, 7000, 3, 6, std::path::Path::new("/nonexistent"));
        assert!(c.validate().is_ok());
        c.clock.node_sync_interval_us = c.clock.max_sample_age_us / 2;
        assert!(c.validate().is_ok());
        c.clock.node_sync_interval_us += 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("node_sync_interval_us"), "{e}");
    }

    /// The back-off doubles from `retry_backoff_us` per aborted attempt,
    /// stops at `retry_backoff_max_us`, and spans `[exp/2, 3·exp/2)` with
    /// the draw: a draw out of range cannot push it past that.
    #[test]
    fn retry_backoff_doubles_up_to_its_cap_with_bounded_jitter() {
        let l = Limits::default();
        let lo = |a: u32| l.retry_backoff_us(a, |_| 0);
        let hi = |a: u32| l.retry_backoff_us(a, |e| e - 1);
        assert_eq!(lo(1), l.retry_backoff_us / 2);
        assert_eq!(hi(1), l.retry_backoff_us / 2 + l.retry_backoff_us - 1);
        assert_eq!(lo(2), l.retry_backoff_us);
        assert_eq!(lo(40), l.retry_backoff_max_us / 2, "capped");
        assert!(hi(40) < l.retry_backoff_max_us * 3 / 2);
        assert_eq!(
            l.retry_backoff_us(3, |_| u64::MAX),
            lo(3) * 3,
            "draw clamped"
        );
        let mut seen = Vec::new();
        l.retry_backoff_us(3, |e| {
            seen.push(e);
            0
        });
        assert_eq!(seen, vec![4 * l.retry_backoff_us], "drawn over 0..exp");
    }

    const SAMPLE: &str = r#"
config_id = 1
cm = 0
replication = 3
region_count = 12
[[nodes]]
id = 0
addr = "127.0.0.1:7000"
failure_domain = "a"
[[nodes]]
id = 1
addr = "127.0.0.1:7001"
failure_domain = "b"
[[nodes]]
id = 2
addr = "127.0.0.1:7002"
failure_domain = "c"
[limits]
max_key_bytes = 100
"#;

    #[test]
    fn parses_and_places_regions() {
        let c = Configuration::from_toml(SAMPLE).unwrap();
        c.check_invariants();
        assert_eq!(c.limits.max_key_bytes, 100);
        assert_eq!(c.limits.max_value_bytes, 1 << 20);
        let rs = c.regions();
        assert_eq!(rs.len(), 12);
        // Each node is primary for 4 regions.
        for n in 0..3 {
            assert_eq!(rs.iter().filter(|r| r.primary == NodeId(n)).count(), 4);
        }
        let m = RegionMap::new(&c);
        assert_eq!(m.region_of(b"").id, RegionId(0));
        assert_eq!(m.region_of(&[255, 1]).id, RegionId(11));
        for r in m.regions() {
            assert!(r.contains(&r.start) || r.start.is_empty());
        }
        let back = Configuration::from_toml(&c.to_toml().unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bad_configs_are_clear_errors() {
        assert!(matches!(
            Configuration::from_toml("nodes = 3"),
            Err(ConfigError::Parse(_))
        ));
        assert!(matches!(
            Configuration::from_toml("[[nodes]]\nid=0\naddr=\"x:1\"\nbogus=1"),
            Err(ConfigError::Parse(_))
        ));
        let e =
            Configuration::from_toml("cm = 5\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"").unwrap_err();
        assert!(e.to_string().contains("cm 5 is not a member"), "{e}");
        let e = Configuration::from_toml("replication = 3\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"")
            .unwrap_err();
        assert!(matches!(e, ConfigError::Invalid(_)));
        let e = Configuration::from_toml(
            "replication = 1\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"\n[limits]\nticker_spin_us=5000",
        )
        .unwrap_err();
        assert!(e.to_string().contains("ticker_spin_us 5000"), "{e}");
        let e = Configuration::from_toml(
            "replication = 1\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"\n[limits]\nlog_writers=0",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("log_writers 0 must be in 1..=4"),
            "{e}"
        );
        let c = Configuration::from_toml(SAMPLE).unwrap();
        assert!(matches!(
            c.node(NodeId(9)),
            Err(ConfigError::UnknownNode(9))
        ));
    }

    fn five() -> Configuration {
        Configuration::local(5, 7000, 3, 12, std::path::Path::new("/tmp/x"))
    }

    fn alive(ids: &[u32]) -> BTreeSet<NodeId> {
        ids.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn remap_promotes_a_backup_and_refills_in_distinct_domains() {
        let c = five();
        let before = c.regions();
        let next = c.remap(&alive(&[0, 2, 3, 4]), NodeId(0)).unwrap();
        next.check_invariants();
        assert_eq!(next.id(), ConfigId(2));
        assert_eq!(
            next.members(),
            alive(&[0, 2, 3, 4]).into_iter().collect::<Vec<_>>()
        );
        let load = next.replica_load();
        for (b, a) in before.iter().zip(next.regions()) {
            let had_1 = b.primary == NodeId(1) || b.backups.contains(&NodeId(1));
            assert_eq!(1 + a.backups.len(), 3, "{a:?}");
            assert!(a.primary != NodeId(1) && !a.backups.contains(&NodeId(1)));
            if b.primary == NodeId(1) {
                assert_eq!(a.primary, b.backups[0], "the first backup is promoted");
                assert_eq!(a.last_primary_change, ConfigId(2));
            } else {
                assert_eq!(a.primary, b.primary, "surviving primaries stay");
                assert_eq!(a.last_primary_change, ConfigId(1));
            }
            let expect = if had_1 { ConfigId(2) } else { ConfigId(1) };
            assert_eq!(a.last_replica_change, expect);
            let domains: BTreeSet<String> = std::iter::once(a.primary)
                .chain(a.backups.iter().copied())
                .map(|n| next.failure_domain(n))
                .collect();
            assert_eq!(domains.len(), 3, "distinct failure domains: {a:?}");
        }
        // 36 replicas over 4 members: balanced to 9 each.
        assert!(load.values().all(|&l| l == 9), "{load:?}");
        // The stored placement survives a TOML round trip.
        let back = Configuration::from_toml(&next.to_toml().unwrap()).unwrap();
        assert_eq!(back, next);
    }

    /// FaRM §5.4: a refilled backup is filling until data recovery says it
    /// is complete; it is never promoted, and a region whose only survivors
    /// are filling is lost.
    #[test]
    fn a_filling_replica_is_never_promoted() {
        let c = Configuration::local(5, 7000, 3, 5, std::path::Path::new("/tmp/x"));
        let next = c.remap(&alive(&[0, 2, 3, 4]), NodeId(0)).unwrap();
        next.check_invariants();
        let r = next
            .regions()
            .into_iter()
            .find(|r| !r.filling.is_empty())
            .expect("some region lost node 1 and was refilled");
        assert_eq!(r.filling.len(), 1);
        let fill = r.filling[0];
        // Kill every complete replica of that region: lost, not promoted.
        let survivors: Vec<u32> = [0, 2, 3, 4]
            .into_iter()
            .filter(|n| {
                NodeId(*n) == fill || (NodeId(*n) != r.primary && !r.backups.contains(&NodeId(*n)))
            })
            .collect();
        let cm = NodeId(survivors[0]);
        let e = next.remap(&alive(&survivors), cm).unwrap_err();
        assert!(e.to_string().contains("lost every complete replica"), "{e}");
        // Once it is ready, it may be promoted.
        let mut ready = next.clone();
        ready.mark_ready(r.id, fill);
        let after = ready.remap(&alive(&survivors), cm).unwrap();
        assert_eq!(after.regions()[r.id.0 as usize].primary, fill);
    }

    #[test]
    fn remap_with_too_few_members_degrades_and_a_lost_region_is_an_error() {
        let c = Configuration::local(3, 7000, 3, 12, std::path::Path::new("/tmp/x"));
        let next = c.remap(&alive(&[0, 2]), NodeId(2)).unwrap();
        next.check_invariants();
        assert_eq!(next.cm(), NodeId(2));
        assert!(next.regions().iter().all(|r| r.backups.len() == 1));
        let last = next.remap(&alive(&[2]), NodeId(2)).unwrap();
        assert!(last.regions().iter().all(|r| r.primary == NodeId(2)));
        let e = last.remap(&alive(&[5]), NodeId(5)).unwrap_err();
        assert!(e.to_string().contains("unknown node 5"), "{e}");
        let mut c1 = Configuration::local(3, 7000, 1, 3, std::path::Path::new("/tmp/x"));
        c1.cm = 0;
        let e = c1.remap(&alive(&[0, 1]), NodeId(0)).unwrap_err();
        assert!(e.to_string().contains("lost every complete replica"), "{e}");
        let e = c.remap(&alive(&[0, 1]), NodeId(2)).unwrap_err();
        assert!(e.to_string().contains("not among the surviving"), "{e}");
    }

    #[test]
    fn a_joined_node_gets_replicas_by_paced_rebalancing() {
        let c = Configuration::local(3, 7000, 3, 12, std::path::Path::new("/tmp/x"));
        let degraded = c.remap(&alive(&[0, 1]), NodeId(0)).unwrap();
        let joined = degraded
            .with_joined(NodeConfig {
                id: 7,
                addr: "127.0.0.1:7007".into(),
                failure_domain: "fd7".into(),
                data_dir: None,
            })
            .unwrap();
        joined.check_invariants();
        // Short regions get the new node at once.
        assert!(joined.regions().iter().all(|r| r.backups.len() == 2));
        assert!(joined
            .regions()
            .iter()
            .all(|r| r.backups.contains(&NodeId(7))));
        assert!(joined
            .with_joined(NodeConfig {
                id: 7,
                addr: "127.0.0.1:7007".into(),
                failure_domain: String::new(),
                data_dir: None,
            })
            .is_err());
        // A fourth node in a full cluster: one move per step until balanced.
        let mut cur = c
            .with_joined(NodeConfig {
                id: 3,
                addr: "127.0.0.1:7003".into(),
                failure_domain: "fd3".into(),
                data_dir: None,
            })
            .unwrap();
        assert_eq!(cur.replica_load()[&NodeId(3)], 0);
        // A fresh cluster does not move replicas at startup (5 nodes, 12
        // regions: loads 8/8/7/7/6 are balanced enough).
        let fresh = Configuration::local(5, 7000, 3, 12, std::path::Path::new("/tmp/x"));
        assert!(fresh.rebalance_step().is_none());
        let complete = |c: &Configuration| {
            c.regions()
                .iter()
                .map(|r| 1 + r.backups.iter().filter(|b| !r.filling.contains(b)).count())
                .min()
                .unwrap()
        };
        let (mut moves, mut drops) = (0, 0);
        while let Some((next, mv)) = cur.rebalance_step() {
            next.check_invariants();
            let next = Configuration::from_toml(&next.to_toml().unwrap()).unwrap();
            assert_eq!(next.config_id, cur.config_id + 1);
            let changed: Vec<(RegionInfo, RegionInfo)> = cur
                .regions()
                .into_iter()
                .zip(next.regions())
                .filter(|(a, b)| *a != *b)
                .collect();
            assert_eq!(changed.len(), 1, "one region per step");
            let (before, after) = &changed[0];
            // Make-before-break: never fewer than `replication` complete
            // replicas, also while the new one fills.
            assert!(complete(&next) >= 3, "{after:?}");
            cur = next;
            assert_eq!(mv.region, after.id);
            assert_eq!(mv.finished, after.leaving.is_empty());
            if after.leaving.is_empty() {
                drops += 1;
                assert_eq!(before.leaving, vec![mv.from]);
                assert_eq!(after.backups.len() + 1, 3);
                assert_eq!(before.leaving.len(), 1);
                assert!(!after.backups.contains(&before.leaving[0]));
            } else {
                moves += 1;
                assert_eq!(after.backups.len() + 1, 4);
                assert_eq!(after.filling.len(), 1);
                // Nothing else moves while the new replica fills.
                assert!(cur.rebalance_step().is_none());
                cur.mark_ready(after.id, after.filling[0]);
                // A failure of a replica cancels the move; the old backup
                // stays and the region keeps three replicas.
                let victim = after.filling[0];
                let alive: BTreeSet<NodeId> =
                    cur.members().into_iter().filter(|m| *m != victim).collect();
                let cancelled = cur.remap(&alive, cur.cm()).unwrap();
                cancelled.check_invariants();
                let r = &cancelled.regions()[after.id.0 as usize];
                assert!(r.leaving.is_empty() && r.backups.contains(&after.leaving[0]));
            }
            assert!(moves + drops < 100);
        }
        assert_eq!(moves, drops);
        let load = cur.replica_load();
        assert!(load.values().all(|&l| (8..=10).contains(&l)), "{load:?}");
        assert!(moves >= 8, "{moves}");
        assert!(cur.regions().iter().all(|r| r.backups.len() == 2));
    }

    #[test]
    fn a_placement_on_a_non_member_does_not_parse() {
        let c = five();
        let mut next = c.remap(&alive(&[0, 2, 3, 4]), NodeId(0)).unwrap();
        next.placement[0].backups[0] = NodeId(1);
        let e = Configuration::from_toml(&next.to_toml().unwrap()).unwrap_err();
        assert!(e.to_string().contains("non-member"), "{e}");
    }
}
