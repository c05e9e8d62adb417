//! `cargo fuzz run participant`: see `meridian_fuzz::participant`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| meridian_fuzz::participant::run(data));
