//! Every committed seed passes its target without libFuzzer (stable
//! toolchain): `cargo test --manifest-path fuzz/Cargo.toml`.

use std::path::Path;

fn each_seed(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("the corpus directory") {
        let path = e.expect("a corpus entry").path();
        run(&std::fs::read(&path).expect("a seed"));
        n += 1;
    }
    assert!(n > 0, "no seeds in {}", dir.display());
}

#[test]
fn frame_decoder_seeds_pass() {
    each_seed("frame_decoder", meridian_fuzz::frame::run);
}

#[test]
fn participant_seeds_pass() {
    each_seed("participant", meridian_fuzz::participant::run);
}

#[test]
fn wal_reader_seeds_pass() {
    each_seed("wal_reader", meridian_fuzz::wal::run);
}

#[test]
fn config_parser_seeds_pass() {
    each_seed("config_parser", meridian_fuzz::config::run);
}
