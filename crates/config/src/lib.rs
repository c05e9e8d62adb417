//! # Configuration (FaRM §3, §5.2)
//!
//! A FaRM *configuration* is the tuple ⟨i, S, F, CM⟩: a unique increasing
//! identifier, the set of member machines, the mapping of machines to failure
//! domains, and the configuration manager. The CM also assigns regions to
//! replicas: one primary and `f` backups, on distinct failure domains.
//!
//! In this foundation the configuration is static, read from a TOML file
//! ([`Configuration::from_toml`]). The region map is computed from it
//! deterministically ([`Configuration::regions`]): the key space is
//! range-partitioned on the first key byte into `region_count` contiguous
//! ranges, and region `r` gets primary `members[r mod n]` and the next `f`
//! members in failure-domain-distinct order as backups. Reconfiguration
//! (a later issue) will replace the computed map with one the CM stores; the
//! types ([`RegionInfo`], [`ConfigId`]) already carry what that needs.
//!
//! Every bound of the system lives in [`Limits`], so that "bound every queue,
//! retry and version chain" has one place to look.
//!
//! Invariants ([`Configuration::check_invariants`]): node ids unique; the
//! clock master / CM is a member; replicas of a region are distinct nodes in
//! distinct failure domains when enough domains exist; regions tile the key
//! space exactly, in order.

use meridian_wire::{ConfigId, Key, NodeId, RegionId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
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
    /// Replaced by the OAT-driven GC safe point (FaRMv2 §4.5) later.
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
}

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
        }
    }
}

/// Clock settings (FaRMv2 §4.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClockConfig {
    /// Assumed bound on clock drift, ppm (default 1000).
    pub drift_ppm: u64,
    /// How often each process synchronises with the clock master, µs.
    pub sync_interval_us: u64,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            drift_ppm: 1000,
            sync_interval_us: 1000,
        }
    }
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
    /// Members S with their failure domains F.
    pub nodes: Vec<NodeConfig>,
    /// Clock settings.
    #[serde(default)]
    pub clock: ClockConfig,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
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
            clock: ClockConfig::default(),
            limits: Limits::default(),
        }
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

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.nodes.is_empty() {
            return bad("no nodes".into());
        }
        let ids: BTreeSet<u32> = self.nodes.iter().map(|n| n.id).collect();
        if ids.len() != self.nodes.len() {
            return bad("duplicate node ids".into());
        }
        if !ids.contains(&self.cm) {
            return bad(format!("cm {} is not a member", self.cm));
        }
        if self.replication == 0 || self.replication > self.nodes.len() {
            return bad(format!(
                "replication {} needs between 1 and {} nodes",
                self.replication,
                self.nodes.len()
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
        Ok(())
    }

    /// The region map: `region_count` ranges of the first key byte, placed
    /// round-robin with backups on the following members, skipping members
    /// whose failure domain is already used when possible.
    pub fn regions(&self) -> Vec<RegionInfo> {
        let n = self.region_count as usize;
        let members: Vec<&NodeConfig> = self.nodes.iter().collect();
        (0..n)
            .map(|r| {
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
                }
            })
            .collect()
    }

    /// Panics (in release builds too) if the configuration breaks an invariant.
    pub fn check_invariants(&self) {
        if let Err(e) = self.validate() {
            panic!("configuration invariant: {e}");
        }
        let regions = self.regions();
        let mut prev_end: Option<Key> = Some(Vec::new());
        for r in &regions {
            assert_eq!(
                Some(r.start.clone()),
                prev_end,
                "regions must tile the key space"
            );
            prev_end = r.end.clone();
            let mut all = vec![r.primary];
            all.extend(&r.backups);
            let distinct: BTreeSet<_> = all.iter().collect();
            assert_eq!(
                distinct.len(),
                all.len(),
                "replicas of {} not distinct",
                r.id
            );
            assert_eq!(
                all.len(),
                self.replication,
                "region {} has wrong replica count",
                r.id
            );
        }
        assert!(prev_end.is_none(), "last region must be unbounded");
    }
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
        let c = Configuration::from_toml(SAMPLE).unwrap();
        assert!(matches!(
            c.node(NodeId(9)),
            Err(ConfigError::UnknownNode(9))
        ));
    }
}
