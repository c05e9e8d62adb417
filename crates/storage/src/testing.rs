//! Helpers shared by the storage unit tests.

use meridian_wire::{ConfigId, Timestamp, TxId};

pub(crate) fn tx(l: u64) -> TxId {
    TxId {
        config: ConfigId(1),
        coordinator: 1,
        thread: 0,
        local: l,
    }
}

pub(crate) fn ts(t: u64) -> Timestamp {
    Timestamp(t)
}
