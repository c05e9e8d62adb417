//! `cargo fuzz run wal_reader`: see `meridian_fuzz::wal`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| meridian_fuzz::wal::run(data));
