//! The frame codec: the piggybacked truncation, the [`Frame`] itself, and
//! its length-prefixed bincode encoding.

use serde::{Deserialize, Serialize};

use crate::*;

/// Largest frame the codec accepts, in bytes (64 MiB). Bigger than any legal
/// message: keys and values are bounded far below this by `Limits`-style
/// configuration (see `meridian-config`).
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// FaRM Table 1's TRUNCATE record, piggybacked on a frame (FaRM §4 step 5):
/// the coordinator attaches the ids of transactions it has finished to
/// whatever it next sends to that node, with its low bound on
/// non-truncated transaction ids.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truncation {
    /// Transactions whose records can be dropped (and applied at backups).
    pub txs: Vec<TxId>,
    /// The sending coordinator's low bound, if it sent one.
    pub low: Option<TruncateLow>,
}

impl Truncation {
    /// The ids `txs`, without a low bound.
    pub fn of(txs: Vec<TxId>) -> Self {
        Truncation { txs, low: None }
    }

    /// True if it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.txs.is_empty() && self.low.is_none()
    }
}

/// A coordinator's low bound on non-truncated transaction ids (FaRM
/// Table 1): every transaction of `coordinator` with `TxId::local <
/// local` is finished and truncated everywhere (its ABORT or TRUNCATE was
/// acknowledged), so no record of it is needed any more and a late LOCK
/// or COMMIT-BACKUP for it is stale. Recovery (FaRM §5.3) uses it to tell
/// which transactions may still need resolving. Monotone per coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TruncateLow {
    /// The coordinator (`TxId::coordinator`).
    pub coordinator: u64,
    /// Every `TxId::local` below this is truncated.
    pub local: u64,
}

/// A frame on a connection. Requests carry piggybacked TRUNCATE records
/// ([`Truncation`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// A request expecting a response with the same `id`.
    Request {
        /// Per-connection request id.
        id: u64,
        /// The sender's configuration (FaRM §5.2 precise membership):
        /// transaction requests of another configuration are refused with
        /// [`Rejection::ConfigMismatch`]. `ConfigId(0)` = a sender that knows
        /// no configuration (thin clients, the CLI), accepted only for
        /// requests that need none.
        config: ConfigId,
        /// Piggybacked truncations.
        truncate: Truncation,
        /// The request.
        req: Request,
    },
    /// A one-way request: no response is sent.
    OneWay {
        /// The sender's configuration (as for `Request`).
        config: ConfigId,
        /// Piggybacked truncations.
        truncate: Truncation,
        /// The request.
        req: Request,
    },
    /// A response to request `id`.
    Response {
        /// The request's id.
        id: u64,
        /// The response.
        resp: Response,
    },
}

/// Codec errors.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The length prefix exceeds [`MAX_FRAME_BYTES`].
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    FrameTooLarge {
        /// Claimed length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame body did not decode.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

fn opts() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .with_limit(MAX_FRAME_BYTES as u64)
}

/// Append `frame`, length-prefixed, to `out`.
///
/// Errors: [`WireError::FrameTooLarge`] if the encoding exceeds
/// [`MAX_FRAME_BYTES`] (nothing is appended then).
pub fn encode_frame(frame: &Frame, out: &mut Vec<u8>) -> Result<(), WireError> {
    use bincode::Options;
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    if let Err(e) = opts().serialize_into(&mut *out, frame) {
        out.truncate(start);
        return Err(match *e {
            bincode::ErrorKind::SizeLimit => WireError::FrameTooLarge {
                len: MAX_FRAME_BYTES + 1,
                max: MAX_FRAME_BYTES,
            },
            other => WireError::Malformed(other.to_string()),
        });
    }
    let len = out.len() - start - 4;
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Try to decode one frame from the front of `buf`.
///
/// Returns `Ok(Some((frame, consumed_bytes)))`, `Ok(None)` if `buf` holds
/// less than a whole frame, or an error for an oversized or malformed frame.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
    use bincode::Options;
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(WireError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let frame: Frame = opts()
        .deserialize(&buf[4..4 + len])
        .map_err(|e| WireError::Malformed(e.to_string()))?;
    Ok(Some((frame, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx() -> TxId {
        TxId {
            config: ConfigId(1),
            coordinator: 7,
            thread: 2,
            local: 99,
        }
    }

    /// The byte-string form of keys and values encodes exactly as the
    /// per-byte sequence did, so WALs and peers written before it still
    /// decode (and a value's bytes decode back unchanged).
    #[test]
    fn byte_string_fields_encode_as_the_per_byte_sequence_did() {
        use bincode::Options;
        #[derive(Serialize)]
        struct OldWriteOp {
            region: RegionId,
            key: Vec<u8>,
            value: Option<Vec<u8>>,
        }
        let new = WriteOp {
            region: RegionId(3),
            key: b"key".to_vec(),
            value: Some((0..=255u8).collect()),
        };
        let old = OldWriteOp {
            region: new.region,
            key: new.key.clone(),
            value: new.value.clone(),
        };
        let a = opts().serialize(&new).unwrap();
        let b = opts().serialize(&old).unwrap();
        assert_eq!(a, b);
        let back: WriteOp = opts().deserialize(&b).unwrap();
        assert_eq!(back, new);
        let deleted = WriteOp { value: None, ..new };
        let back: WriteOp = opts()
            .deserialize(&opts().serialize(&deleted).unwrap())
            .unwrap();
        assert_eq!(back, deleted);
    }

    /// A frame whose AFTER-WRITE-TS request wraps `levels` more of them
    /// around a VALIDATE, built byte by byte (encoding it would recurse as
    /// deep as decoding it): the bytes one nesting level adds are the
    /// difference between the frames of depth 1 and 2.
    fn nested_after_write_ts(levels: usize) -> Vec<u8> {
        let validate = TxnRequest::Validate {
            tx: tx(),
            read_ts: Timestamp(10),
            keys: vec![(RegionId(1), b"k".to_vec())],
            ranges: Vec::new(),
        };
        let wrap = |req: TxnRequest| TxnRequest::AfterWriteTs {
            write_ts: Timestamp(20),
            req: Box::new(req),
        };
        let frame = |req: TxnRequest| Frame::OneWay {
            config: ConfigId(1),
            truncate: Truncation::default(),
            req: Request::Txn(req),
        };
        let (mut one, mut two) = (Vec::new(), Vec::new());
        encode_frame(&frame(wrap(validate.clone())), &mut one).unwrap();
        encode_frame(&frame(wrap(wrap(validate))), &mut two).unwrap();
        // `two` is `one` with one level (variant index and write_ts)
        // inserted where `one`'s AFTER-WRITE-TS starts.
        let level = two.len() - one.len();
        let at = (4..one.len())
            .find(|&i| one[i..] == two[i + level..])
            .expect("the inserted level");
        let unit = two[at..at + level].to_vec();
        let mut body = one[4..at].to_vec();
        for _ in 0..levels {
            body.extend_from_slice(&unit);
        }
        body.extend_from_slice(&one[at..]);
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// A frame nesting AFTER-WRITE-TS two million levels deep (24 MB, under
    /// the frame limit) is refused as malformed at the second level,
    /// instead of overflowing the stack and aborting the node; one level,
    /// as coordinators send it, still decodes.
    #[test]
    fn nested_after_write_ts_is_refused_without_recursing() {
        let ok = nested_after_write_ts(0);
        assert!(matches!(
            decode_frame(&ok).unwrap(),
            Some((
                Frame::OneWay {
                    req: Request::Txn(TxnRequest::AfterWriteTs { .. }),
                    ..
                },
                _
            ))
        ));
        for levels in [1, 2_000_000] {
            let buf = nested_after_write_ts(levels);
            assert!(buf.len() <= MAX_FRAME_BYTES + 4);
            match decode_frame(&buf) {
                Err(WireError::Malformed(m)) => assert!(m.contains("nested"), "{m}"),
                other => panic!("{levels} levels: {other:?}"),
            }
        }
        // The depth count is back at zero: a valid frame decodes after.
        assert!(decode_frame(&ok).unwrap().is_some());
    }

    #[test]
    fn frames_round_trip_back_to_back() {
        let a = Frame::Request {
            id: 5,
            config: ConfigId(3),
            truncate: Truncation {
                txs: vec![tx()],
                low: Some(TruncateLow {
                    coordinator: 7,
                    local: 90,
                }),
            },
            req: Request::Txn(TxnRequest::Lock(LockRecord {
                tx: tx(),
                read_ts: Timestamp(10),
                regions: vec![RegionId(3)],
                writes: vec![WriteOp {
                    region: RegionId(3),
                    key: b"k".to_vec(),
                    value: None,
                }],
            })),
        };
        let b = Frame::Response {
            id: 5,
            resp: Response::Txn(TxnResponse::Lock(Err(Conflict::Locked))),
        };
        let mut buf = Vec::new();
        encode_frame(&a, &mut buf).unwrap();
        encode_frame(&b, &mut buf).unwrap();
        let (fa, n) = decode_frame(&buf).unwrap().unwrap();
        assert_eq!(fa, a);
        let (fb, m) = decode_frame(&buf[n..]).unwrap().unwrap();
        assert_eq!(fb, b);
        assert_eq!(n + m, buf.len());
        // A partial frame is not an error.
        assert!(decode_frame(&buf[..n - 1]).unwrap().is_none());
    }

    #[test]
    fn malformed_and_oversized_frames_are_errors() {
        let mut bad = 3u32.to_le_bytes().to_vec();
        bad.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(decode_frame(&bad), Err(WireError::Malformed(_))));
        let huge = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes();
        assert!(matches!(
            decode_frame(&huge),
            Err(WireError::FrameTooLarge { .. })
        ));
    }
}
