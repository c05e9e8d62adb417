//! The `frame_decoder` target: every decoder a remote peer's bytes reach.
//!
//! - `meridian_wire::decode_frame` over a TCP stream, as
//!   `FrameReader::next_batch` (crates/transport) calls it: frame after
//!   frame from the front of the buffer until it holds no whole frame;
//! - the same decoder on one datagram, as the lease thread
//!   (`meridian_transport::lease_udp`) and the client's UDP clock link
//!   (`meridian_client::tokio_io`) call it: the frame must fill the
//!   datagram;
//! - the frame body alone, behind a length prefix that matches it, so that
//!   every input reaches bincode whatever its first four bytes say;
//! - raft-rs's `eraftpb::Message`, which frames carry as bytes
//!   (`CoordMessage::Raft`) and the coordination replica parses with
//!   protobuf (`ServiceReplica::on_message`).
//!
//! Checks: no panic, no unbounded allocation or recursion (libFuzzer's
//! `-rss_limit_mb`/`-malloc_limit_mb` and the stack), a decoded frame's
//! length is within the buffer and within `MAX_FRAME_BYTES`, and a decoded
//! frame encodes and decodes back to itself.

use meridian_wire::{decode_frame, encode_frame, Frame, MAX_FRAME_BYTES};

/// Feed `data` to every peer-facing decoder.
pub fn run(data: &[u8]) {
    stream(data);
    datagram(data);
    let mut framed = Vec::with_capacity(data.len() + 4);
    framed.extend_from_slice(&(data.len() as u32).to_le_bytes());
    framed.extend_from_slice(data);
    datagram(&framed);
    raft_message(data);
}

/// Decode frames back to back, as a connection's reader does.
fn stream(data: &[u8]) {
    let mut at = 0;
    while let Ok(Some((frame, used))) = decode_frame(&data[at..]) {
        assert!(used >= 4, "a frame of {used} bytes");
        assert!(used <= data.len() - at, "a frame longer than the buffer");
        assert!(used - 4 <= MAX_FRAME_BYTES, "a frame over the limit");
        round_trip(&frame);
        at += used;
    }
}

/// One datagram, one frame.
fn datagram(data: &[u8]) {
    if let Ok(Some((frame, used))) = decode_frame(data) {
        assert!(used <= data.len());
        round_trip(&frame);
    }
}

/// What decodes re-encodes, and decodes back to the same frame.
fn round_trip(frame: &Frame) {
    let mut out = Vec::new();
    encode_frame(frame, &mut out).expect("a decoded frame re-encodes");
    match decode_frame(&out) {
        Ok(Some((back, used))) => {
            assert_eq!(used, out.len(), "the re-encoded frame is one frame");
            assert_eq!(&back, frame, "a frame decodes back to itself");
        }
        other => panic!("a re-encoded frame does not decode: {other:?}"),
    }
}

/// raft-rs's message decoder, as the coordination replica runs it on the
/// bytes of a `CoordMessage::Raft`.
fn raft_message(data: &[u8]) {
    use protobuf::Message as _;
    if let Ok(m) = raft::eraftpb::Message::parse_from_bytes(data) {
        // What parses re-encodes (the replica forwards and stores them).
        let _ = m.write_to_bytes();
    }
}
