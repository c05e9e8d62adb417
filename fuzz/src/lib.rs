//! # Meridian's fuzz targets
//!
//! Each target's logic lives here, as a function of the input bytes, so
//! that the `cargo fuzz` binaries in `fuzz_targets/` are one line each and
//! the seed generator (`examples/gen_corpus.rs`) and the corpus replay
//! test (`tests/corpus.rs`) share it:
//!
//! - [`frame::run`]: every decoder a remote peer's bytes reach (frames over
//!   TCP, lease and clock datagrams over UDP, the Raft messages frames
//!   carry);
//! - [`participant::run`]: a participant engine fed a sequence of
//!   requests, checked against its invariants and a small model;
//! - [`wal::run`]: the write-ahead log and checkpoint reader, then the
//!   restore of a node from what it read;
//! - [`config::run`]: the configuration parser.
//!
//! The structured targets (participant, write-ahead log) decode their
//! input with [`structured`]: bytes that start with [`SCRIPT_MAGIC`] are a
//! bincode script (what the seed generator writes, so seeds are real
//! request sequences and real log files), any other bytes go through the
//! `arbitrary` crate.
//!
//! See docs/internals/fuzzing.md.

#![warn(missing_docs)]

pub mod config;
pub mod frame;
pub mod participant;
pub mod wal;

use arbitrary::{Arbitrary, Unstructured};
use serde::de::DeserializeOwned;

/// First byte of a bincode-encoded script (a seed): `0xB1`.
pub const SCRIPT_MAGIC: u8 = 0xB1;

/// Decode a structured target's input: a bincode script after
/// [`SCRIPT_MAGIC`], or else the bytes through `arbitrary`. `None` if
/// neither decodes (the input is skipped).
pub fn structured<T>(data: &[u8]) -> Option<T>
where
    T: for<'a> Arbitrary<'a> + DeserializeOwned,
{
    use bincode::Options;
    match data.split_first() {
        Some((&SCRIPT_MAGIC, rest)) => bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .with_little_endian()
            .with_limit(1 << 20)
            .deserialize(rest)
            .ok(),
        _ => T::arbitrary_take_rest(Unstructured::new(data)).ok(),
    }
}

/// Encode a script as [`structured`] reads it (for the seed generator).
///
/// Errors: bincode's, for a value it cannot encode.
pub fn script<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    use bincode::Options;
    let mut out = vec![SCRIPT_MAGIC];
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .serialize_into(&mut out, value)?;
    Ok(out)
}
