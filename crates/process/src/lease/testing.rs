//! Constants and parameters shared by the lease unit tests.

use super::*;

pub(super) const MS: u64 = 1_000_000;

pub(super) fn params() -> LeaseParams {
    LeaseParams::new(10, 1000)
}
