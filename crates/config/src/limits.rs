//! Every bound of the system in one struct, [`Limits`], with its defaults,
//! its `NAME=VALUE` overrides and the retry backoff it sets.

use serde::{Deserialize, Serialize};

use crate::settings::set_field_from_spec;
use crate::ConfigError;

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

/// How long a node waits for a frame a peer began to complete, ms,
/// counted from its first byte: a stalled or trickling sender's connection
/// is closed past it, so it holds no buffer for good. A constant, not a
/// configurable limit, so that configurations and checkpoints written
/// before it still read byte for byte.
pub const FRAME_TIMEOUT_MS: u64 = 10_000;

/// The most keys a node remembers the changing log record of, for the
/// read replies that must wait for it (`meridian_process::node::ReadDeps`):
/// older entries go, and a key without one waits for the newest record
/// that went (conservative). About 64 bytes and a key each.
pub const MAX_READ_DEPS: usize = 65_536;

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
    /// Set one limit from `name=value` (for `meridian-bench --limit`), as
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
}
