//! The `config_parser` target: `meridian_config::Configuration::from_toml`,
//! which reads the operator's configuration file (through
//! `Configuration::load`) and also configurations that arrive over the
//! network (a CAS proposal to the coordination service carries one as
//! TOML) or from disk (checkpoints, the Raft register's snapshot).
//!
//! Checks: the parser returns `ConfigError`, never panics; a configuration
//! it accepts passes `check_invariants`, builds its region map (every key
//! maps to a region of the map), and survives `to_toml` → `from_toml`
//! unchanged; the operator's `name=value` settings (`set_from_spec`) on the
//! clock section return errors, never panic; and the next configurations
//! the CM computes from an accepted one (`renewed`, `rebalance_step`,
//! `remap` after the loss of the last member) return a configuration or an
//! error, never panic.

use meridian_config::{Configuration, RegionMap};

/// Parse `data` (as UTF-8, lossily) as a configuration.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = Configuration::from_toml(&text) else {
        return;
    };
    c.check_invariants();
    let map = RegionMap::new(&c);
    for first in [0u8, 1, 63, 64, 127, 128, 200, 255] {
        let r = map.region_of(&[first, 7]);
        assert!(r.contains(&[first, 7]), "key {first} mapped to {r:?}");
        assert!(map.get(r.id).is_some());
    }
    assert!(map.region_of(&[]).contains(&[]));
    let _ = c.coordination_group();
    let toml = c.to_toml().expect("an accepted configuration serialises");
    let back = Configuration::from_toml(&toml).expect("its TOML parses back");
    assert_eq!(back, c, "a configuration survives to_toml and from_toml");
    let _ = c.renewed();
    let _ = c.rebalance_step();
    let members = c.members();
    if members.len() > 1 {
        let alive: std::collections::BTreeSet<_> =
            members[..members.len() - 1].iter().copied().collect();
        let _ = c.remap(&alive, members[0]);
    }
    // An operator's clock override taken from the text's first line.
    let mut clock = c.clock.clone();
    if let Some(line) = text.lines().next() {
        let _ = clock.set_from_spec(line);
    }
}
