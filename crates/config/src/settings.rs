//! The settings of each subsystem: leases and failure detection,
//! the coordination service, durability, and clocks, with the
//! `NAME=VALUE` override they share.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

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
    /// With `false` a primary answers COMMIT-PRIMARY twice,
    /// [`meridian_wire::TxnResponse::Installed`] and then the `Ack`; both
    /// wait until its COMMIT-PRIMARY record is durable, so either value
    /// reports a commit at the same time. An answer before that fsync could
    /// lose a reported commit after a whole-cluster crash (a configuration
    /// may form without the region's backups, and recovery would find only
    /// the primaries' LOCK records), so none is sent. The setting is kept
    /// so that configurations written with it still parse.
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
    /// Set one clock setting from `name=value` (for `meridian-bench
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
pub(crate) fn set_field_from_spec<T: Serialize + serde::de::DeserializeOwned>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    /// Clock settings take whole numbers and switches by name
    /// (`meridian-bench --clock`); a value of the wrong kind or an unknown
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
}
