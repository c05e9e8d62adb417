//! The Raft group's durable state (the register image, hard state,
//! snapshot and log tail) and raft-rs's `Storage` over it, with the
//! mapping between node ids and Raft ids.

use super::*;

/// The register as a snapshot holds it: the configuration exactly as
/// proposed, and the time bound (global time never reaches it unless it was
/// raised first; see [`CoordMessage::RaiseTimeBound`]).
#[derive(Serialize, Deserialize)]
pub(super) struct RegisterImage {
    pub(super) config_toml: String,
    pub(super) time_bound_ns: u64,
}

/// The persisted form of a replica: protobuf bytes of raft-rs's types.
#[derive(Serialize, Deserialize)]
pub(super) struct Persisted {
    pub(super) hard: Vec<u8>,
    pub(super) snapshot: Vec<u8>,
    pub(super) entries: Vec<Vec<u8>>,
}

/// Raft storage kept in memory and persisted whole through
/// [`ServiceOutput::Persist`]: hard state, the last snapshot (whose data is
/// the configuration TOML as of its index) and the log after it.
pub(super) struct RaftStore {
    pub(super) hard: HardState,
    pub(super) snapshot: Snapshot,
    pub(super) entries: Vec<Entry>,
}

impl RegisterImage {
    pub(super) fn encode(&self) -> Result<Vec<u8>, ServiceError> {
        bincode::serialize(self).map_err(|e| ServiceError::Corrupt(e.to_string()))
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<(Self, Configuration), ServiceError> {
        let image: RegisterImage =
            bincode::deserialize(bytes).map_err(|e| ServiceError::Corrupt(e.to_string()))?;
        let config = Configuration::from_toml(&image.config_toml)
            .map_err(|e| ServiceError::Corrupt(e.to_string()))?;
        Ok((image, config))
    }
}

impl RaftStore {
    pub(super) fn snap_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub(super) fn first(&self) -> u64 {
        self.snap_index() + 1
    }

    pub(super) fn last(&self) -> u64 {
        self.entries.last().map_or(self.snap_index(), |e| e.index)
    }

    pub(super) fn append(&mut self, ents: &[Entry]) {
        let Some(first) = ents.first() else {
            return;
        };
        // Raft never rewrites applied (snapshotted) entries; entries from
        // `first.index` on are replaced.
        let keep = first.index.saturating_sub(self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
    }

    pub(super) fn encode(&self) -> Result<Vec<u8>, ServiceError> {
        let enc = |m: &dyn protobuf::Message| {
            m.write_to_bytes()
                .map_err(|e| ServiceError::Corrupt(e.to_string()))
        };
        let p = Persisted {
            hard: enc(&self.hard)?,
            snapshot: enc(&self.snapshot)?,
            entries: self
                .entries
                .iter()
                .map(|e| enc(e))
                .collect::<Result<_, _>>()?,
        };
        bincode::serialize(&p).map_err(|e| ServiceError::Corrupt(e.to_string()))
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, ServiceError> {
        let bad = |e: &dyn std::fmt::Display| ServiceError::Corrupt(e.to_string());
        let p: Persisted = bincode::deserialize(bytes).map_err(|e| bad(&e))?;
        let hard = HardState::parse_from_bytes(&p.hard).map_err(|e| bad(&e))?;
        let snapshot = Snapshot::parse_from_bytes(&p.snapshot).map_err(|e| bad(&e))?;
        let entries = p
            .entries
            .iter()
            .map(|b| Entry::parse_from_bytes(b).map_err(|e| bad(&e)))
            .collect::<Result<Vec<_>, _>>()?;
        let store = RaftStore {
            hard,
            snapshot,
            entries,
        };
        let contiguous = store
            .entries
            .iter()
            .enumerate()
            .all(|(i, e)| e.index == store.first() + i as u64);
        if !contiguous {
            return Err(ServiceError::Corrupt(
                "log entries are not contiguous".into(),
            ));
        }
        Ok(store)
    }
}

impl Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard.clone(),
            conf_state: self.snapshot.get_metadata().get_conf_state().clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let lo = (low - self.first()) as usize;
        let hi = (high - self.first()) as usize;
        let mut ents = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut ents, max_size.into());
        Ok(ents)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snap_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        Ok(self.snapshot.clone())
    }
}

pub(super) fn raft_id(n: NodeId) -> u64 {
    n.0 as u64 + 1
}

pub(super) fn node_of(raft_id: u64) -> Option<NodeId> {
    raft_id
        .checked_sub(1)
        .and_then(|i| u32::try_from(i).ok())
        .map(NodeId)
}
