//! `cargo fuzz run config_parser`: see `meridian_fuzz::config`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| meridian_fuzz::config::run(data));
