//! The configuration ⟨i, S, F, CM⟩ itself: its members and their failure
//! domains, its TOML form, and its validation.

use std::collections::BTreeSet;
use std::path::PathBuf;

use meridian_wire::{ConfigId, Key, NodeId, RegionId};
use serde::{Deserialize, Serialize};

use crate::placement::region_bounds;
use crate::{
    ClockConfig, ConfigError, CoordinationConfig, DurabilityConfig, LeaseConfig, Limits,
    MAX_LOG_WRITERS, MAX_TICKER_SPIN_US,
};

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

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RegionMap;

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
}
