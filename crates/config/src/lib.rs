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

use std::path::PathBuf;

mod configuration;
mod limits;
mod placement;
mod settings;

pub use configuration::{Configuration, NodeConfig, RebalanceMove, RegionInfo};
pub use limits::{Limits, FRAME_TIMEOUT_MS, MAX_LOG_WRITERS, MAX_READ_DEPS, MAX_TICKER_SPIN_US};
pub use placement::RegionMap;
pub use settings::{
    ClockConfig, CoordinationConfig, DurabilityConfig, DurabilityMode, LeaseConfig,
};

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
