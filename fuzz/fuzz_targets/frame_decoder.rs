//! `cargo fuzz run frame_decoder`: see `meridian_fuzz::frame`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| meridian_fuzz::frame::run(data));
