//! Region placement: the initial region map, the pure functions that
//! compute the next configuration (remap after a failure, a join, one
//! rebalancing move), and the key → region lookup.

use std::collections::{BTreeMap, BTreeSet};

use meridian_wire::{ConfigId, Key, NodeId, RegionId};

use crate::{ConfigError, Configuration, NodeConfig, RebalanceMove, RegionInfo};

impl Configuration {
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

pub(crate) fn region_bounds(r: usize, n: usize) -> (Key, Option<Key>) {
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
    /// `durability.mode = "disk"`: primaries journal, and answer a granted
    /// LOCK a second time once its record is durable
    /// (`TxnResponse::LockDurable`).
    disk: bool,
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
            disk: cfg.durability.mode == crate::DurabilityMode::Disk,
        }
    }

    /// True under disk durability: a coordinator sends COMMIT-PRIMARY only
    /// after every primary's `TxnResponse::LockDurable`.
    pub fn disk_durable(&self) -> bool {
        self.disk
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
