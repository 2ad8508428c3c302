//! Property tests of the tcp wire format and receive path: valid frames round-trip however the
//! stream is split into reads, frames naming the wrong ranks are rejected, and arbitrary or
//! corrupted streams end in frames or an error, never a panic (the same harness the fuzz target
//! runs, see `fuzzing.rs`).

use proptest::prelude::*;

use super::frame::{Accept, Frame, FrameError, Header, MAX_ABORT_LEN, MAX_FAILURE_LEN, MAX_REPLY_TAG};
use super::fuzzing::{End, FUZZ_ACCEPT, Reading, SinkPolicy, fuzz_decode_frames, receive};
use crate::device::one_sided::{AccumulateOp, Element, LockKind};

/// `frame` as sent on the harness's connection.
fn sent(frame: Frame) -> Header {
    Header { source: FUZZ_ACCEPT.source, dest: FUZZ_ACCEPT.dest, frame }
}

/// An element type and an operator defined on it.
fn operation() -> impl Strategy<Value = (Element, AccumulateOp)> {
    use AccumulateOp::*;
    let elements = [Element::I8, Element::I16, Element::I32, Element::I64, Element::U8, Element::U16]
        .into_iter()
        .chain([Element::U32, Element::U64, Element::F32, Element::F64])
        .collect::<Vec<_>>();
    let ops = vec![Replace, NoOp, Sum, Prod, Min, Max, Band, Bor, Bxor, Land, Lor, Lxor];
    (prop::sample::select(elements), prop::sample::select(ops)).prop_filter("defined", |(e, o)| e.supports(*o))
}

/// Any valid one-sided frame whose payload is at most `max_payload` bytes.
fn rma_frame(max_payload: u64) -> impl Strategy<Value = Frame> {
    let reply = || i32::MIN..=MAX_REPLY_TAG;
    let len = move || 0..=max_payload;
    prop_oneof![
        (any::<u32>(), any::<u64>(), len()).prop_map(|(window, offset, len)| Frame::RmaPut { window, offset, len }),
        (any::<u32>(), any::<u64>(), any::<u64>(), reply()).prop_map(|(window, offset, len, reply)| Frame::RmaGet {
            window,
            offset,
            len,
            reply
        }),
        (any::<u32>(), any::<u64>(), len(), operation())
            .prop_map(|(window, offset, len, (element, op))| Frame::RmaAcc { window, offset, len, element, op }),
        (any::<u32>(), any::<u64>(), len(), operation(), reply()).prop_map(
            |(window, offset, len, (element, op), reply)| Frame::RmaGetAcc { window, offset, len, element, op, reply }
        ),
        (any::<u32>(), any::<u64>(), operation(), any::<u64>(), reply()).prop_map(
            |(window, offset, (element, op), operand, reply)| Frame::RmaFetchOp {
                window,
                offset,
                element,
                op,
                operand,
                reply
            }
        ),
        (any::<u32>(), any::<u64>(), operation(), any::<u64>(), reply()).prop_map(
            |(window, offset, (element, _), compare, reply)| Frame::RmaCas { window, offset, element, compare, reply }
        ),
        (any::<u32>(), any::<bool>(), reply()).prop_map(|(window, exclusive, reply)| {
            let kind = if exclusive { LockKind::Exclusive } else { LockKind::Shared };
            Frame::RmaLock { window, kind, reply }
        }),
        (any::<u32>(), reply()).prop_map(|(window, reply)| Frame::RmaUnlock { window, reply }),
        (any::<u32>(), reply(), any::<bool>()).prop_map(|(window, reply, query)| Frame::RmaFlush {
            window,
            reply,
            query
        }),
        (any::<u32>(), reply(), len()).prop_map(|(context, tag, len)| Frame::RmaReply {
            context,
            tag,
            len,
            failed: false
        }),
        (any::<u32>(), reply(), 0..=MAX_FAILURE_LEN.min(max_payload)).prop_map(|(context, tag, len)| Frame::RmaReply {
            context,
            tag,
            len,
            failed: true
        }),
    ]
}

/// Any valid frame whose payload (if it has one) is at most `max_payload` bytes.
fn valid_frame(max_payload: u64) -> impl Strategy<Value = Frame> {
    prop_oneof![3 => message_frame(max_payload), 1 => rma_frame(max_payload)]
}

/// Any valid point-to-point or control frame whose payload is at most `max_payload` bytes.
fn message_frame(max_payload: u64) -> impl Strategy<Value = Frame> {
    let eager_len = 0..=FUZZ_ACCEPT.max_eager.min(max_payload);
    prop_oneof![
        (any::<u32>(), 0..=i32::MAX, eager_len).prop_map(|(context, tag, len)| Frame::Eager { context, tag, len }),
        (any::<u32>(), 0..=i32::MAX, any::<u64>(), any::<u64>(), any::<bool>())
            .prop_map(|(context, tag, len, send_id, sync)| Frame::Rts { context, tag, len, send_id, sync }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(send_id, recv_id, reads)| Frame::Cts {
            send_id,
            recv_id,
            reads
        }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(recv_id, send_id, addr)| Frame::Readable {
            recv_id,
            send_id,
            addr
        }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(send_id, recv_id, failed)| Frame::ReadDone {
            send_id,
            recv_id,
            failed
        }),
        (any::<u64>(), 0..=max_payload).prop_map(|(recv_id, len)| Frame::Data { recv_id, len }),
        Just(Frame::Bye),
        (0..=MAX_ABORT_LEN.min(max_payload), any::<u32>(), any::<Option<i32>>())
            .prop_map(|(len, origin, code)| Frame::Abort { len, origin, code }),
        any::<u64>().prop_map(|send_id| Frame::Cancel { send_id }),
        (any::<u64>(), any::<bool>()).prop_map(|(send_id, cancelled)| Frame::CancelAck { send_id, cancelled }),
    ]
}

/// A stream's worth of valid frames on the harness's connection: mostly short ones, sometimes a
/// rendezvous payload long enough (>= 16 KiB) for the receive path to read it straight into the
/// user buffer.
fn valid_frames() -> impl Strategy<Value = Vec<Header>> {
    let long_data = (any::<u64>(), 16_384u64..40_000).prop_map(|(recv_id, len)| Frame::Data { recv_id, len });
    prop::collection::vec(prop_oneof![12 => valid_frame(300), 1 => long_data].prop_map(sent), 0..12)
}

/// A rank other than `rank`.
fn other_rank(rank: u32) -> impl Strategy<Value = u32> {
    any::<u32>().prop_filter("another rank", move |&r| r != rank)
}

/// A header that names a wrong sender or a wrong receiver for the harness's connection, and the
/// error it must meet.
fn misrouted(frame: Frame) -> impl Strategy<Value = (Header, FrameError)> {
    let (source, dest) = (FUZZ_ACCEPT.source, FUZZ_ACCEPT.dest);
    prop_oneof![
        other_rank(source).prop_map(move |claimed| {
            (Header { source: claimed, dest, frame }, FrameError::WrongSource { claimed, connection: source })
        }),
        other_rank(dest).prop_map(move |addressed| {
            (Header { source, dest: addressed, frame }, FrameError::WrongDestination { addressed, served: dest })
        }),
    ]
}

fn any_reading() -> impl Strategy<Value = Reading> {
    (1usize..80, any::<bool>()).prop_map(|(max_piece, would_block_between)| Reading { max_piece, would_block_between })
}

fn any_sinks() -> impl Strategy<Value = SinkPolicy> {
    prop_oneof![Just(SinkPolicy::FullBuffers), Just(SinkPolicy::HalfBuffers), Just(SinkPolicy::Owned)]
}

/// Payload bytes that differ from frame to frame, so a payload landing in the wrong place shows.
fn payload_of(index: usize, frame: &Frame) -> Vec<u8> {
    (0..frame.payload_len()).map(|i| (i as usize).wrapping_mul(31).wrapping_add(index * 7) as u8).collect()
}

/// The wire bytes of `frames` and where each frame ends in them.
fn encode_stream(frames: &[Header]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for (index, header) in frames.iter().enumerate() {
        bytes.extend_from_slice(&header.encode());
        bytes.extend_from_slice(&payload_of(index, &header.frame));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

/// What the harness's handler should hold for frame `index` under `sinks`.
fn expected_payload(index: usize, frame: &Frame, sinks: SinkPolicy) -> Vec<u8> {
    let mut payload = payload_of(index, frame);
    let user_buffer = matches!(frame, Frame::Eager { .. } | Frame::Data { .. } | Frame::RmaReply { failed: false, .. });
    if sinks == SinkPolicy::HalfBuffers && user_buffer {
        payload.truncate(payload.len() / 2);
    }
    payload
}

fn expected_completions(frames: &[Header], sinks: SinkPolicy) -> Vec<(Header, Vec<u8>)> {
    frames.iter().enumerate().map(|(i, h)| (*h, expected_payload(i, &h.frame, sinks))).collect()
}

/// Header fields that are zero half of the time, so random headers often pass the "unused
/// fields are zero" checks and reach the deeper ones.
fn mostly_zero_u64() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), any::<u64>()]
}

proptest! {
    #[test]
    fn valid_frames_round_trip(frame in valid_frame(u64::MAX), source in any::<u32>(), dest in any::<u32>()) {
        let header = Header { source, dest, frame };
        let accept = Accept { source, dest, ..FUZZ_ACCEPT };
        prop_assert_eq!(Header::decode(&header.encode(), accept), Ok(header));
    }

    #[test]
    fn a_frame_from_another_rank_is_rejected(
        frame in valid_frame(u64::MAX),
        (source, claimed) in any::<u32>().prop_flat_map(|source| (Just(source), other_rank(source))),
        dest in any::<u32>(),
    ) {
        let accept = Accept { source, dest, ..FUZZ_ACCEPT };
        let header = Header { source: claimed, dest, frame };
        prop_assert_eq!(
            Header::decode(&header.encode(), accept),
            Err(FrameError::WrongSource { claimed, connection: source })
        );
    }

    #[test]
    fn a_frame_for_another_rank_is_rejected(
        frame in valid_frame(u64::MAX),
        source in any::<u32>(),
        (dest, addressed) in any::<u32>().prop_flat_map(|dest| (Just(dest), other_rank(dest))),
    ) {
        let accept = Accept { source, dest, ..FUZZ_ACCEPT };
        let header = Header { source, dest: addressed, frame };
        prop_assert_eq!(
            Header::decode(&header.encode(), accept),
            Err(FrameError::WrongDestination { addressed, served: dest })
        );
    }

    #[test]
    fn a_misrouted_frame_ends_the_stream_after_the_frames_before_it(
        frames in valid_frames(),
        at in any::<prop::sample::Index>(),
        (wrong, error) in valid_frame(300).prop_flat_map(misrouted),
        reading in any_reading(),
        sinks in any_sinks(),
    ) {
        let at = at.index(frames.len() + 1);
        let mut stream = frames[..at].to_vec();
        stream.push(wrong);
        stream.extend_from_slice(&frames[at..]);
        let (bytes, _) = encode_stream(&stream);
        let received = receive(&bytes, reading, sinks);
        prop_assert_eq!(received.completed, expected_completions(&frames[..at], sinks));
        prop_assert_eq!(received.end, End::Protocol(error));
    }

    #[test]
    fn a_header_that_decodes_has_exactly_one_encoding(
        kind in 0u8..20,
        flags in prop_oneof![Just(0u8), any::<u8>()],
        reserved in prop_oneof![Just(0u16), any::<u16>()],
        source in prop_oneof![Just(FUZZ_ACCEPT.source), any::<u32>()],
        dest in prop_oneof![Just(FUZZ_ACCEPT.dest), any::<u32>()],
        context in prop_oneof![Just(0u32), any::<u32>()],
        tag in prop_oneof![Just(0i32), any::<i32>()],
        a in mostly_zero_u64(),
        b in mostly_zero_u64(),
    ) {
        let mut header = sent(Frame::Bye).encode(); // for the magic
        header[0] = kind;
        header[1] = flags;
        header[2..4].copy_from_slice(&reserved.to_le_bytes());
        header[8..12].copy_from_slice(&source.to_le_bytes());
        header[12..16].copy_from_slice(&dest.to_le_bytes());
        header[16..20].copy_from_slice(&context.to_le_bytes());
        header[20..24].copy_from_slice(&tag.to_le_bytes());
        header[24..32].copy_from_slice(&a.to_le_bytes());
        header[32..40].copy_from_slice(&b.to_le_bytes());
        if let Ok(decoded) = Header::decode(&header, FUZZ_ACCEPT) {
            prop_assert_eq!(decoded.encode(), header);
        }
    }

    #[test]
    fn a_valid_stream_arrives_whole_however_it_is_split(
        frames in valid_frames(),
        reading in any_reading(),
        sinks in any_sinks(),
    ) {
        let (bytes, _) = encode_stream(&frames);
        let received = receive(&bytes, reading, sinks);
        prop_assert_eq!(&received.headers, &frames);
        prop_assert_eq!(received.completed, expected_completions(&frames, sinks));
        prop_assert_eq!(received.end, End::Closed);
    }

    #[test]
    fn a_cut_stream_keeps_its_whole_frames_and_reports_the_cut(
        frames in valid_frames(),
        cut in any::<prop::sample::Index>(),
        reading in any_reading(),
        sinks in any_sinks(),
    ) {
        let (bytes, ends) = encode_stream(&frames);
        let cut = cut.index(bytes.len() + 1);
        let received = receive(&bytes[..cut], reading, sinks);
        let whole = ends.iter().take_while(|&&end| end <= cut).count();
        prop_assert_eq!(received.completed, expected_completions(&frames[..whole], sinks));
        let at_boundary = cut == 0 || ends.contains(&cut);
        prop_assert_eq!(received.end, if at_boundary { End::Closed } else { End::Truncated });
    }

    #[test]
    fn a_corrupted_stream_keeps_the_frames_before_the_damage(
        frames in valid_frames(),
        damage in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
        reading in any_reading(),
        sinks in any_sinks(),
    ) {
        let (mut bytes, ends) = encode_stream(&frames);
        prop_assume!(!bytes.is_empty());
        let mut first_damaged = bytes.len();
        for (at, flip) in &damage {
            let at = at.index(bytes.len());
            bytes[at] ^= flip;
            first_damaged = first_damaged.min(at);
        }
        // Also the whole fuzz harness: both decoders agree, any split gives the same outcome.
        for control in [0u8, 0x85, 0x4a] {
            fuzz_decode_frames(&[&[control][..], &bytes].concat());
        }
        let received = receive(&bytes, reading, sinks);
        // The receive path is sequential: frames that end before the damage arrive untouched.
        let intact = ends.iter().take_while(|&&end| end <= first_damaged).count();
        prop_assert!(received.completed.len() >= intact, "{} of {intact} intact frames", received.completed.len());
        prop_assert_eq!(&received.completed[..intact], &expected_completions(&frames[..intact], sinks)[..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        fuzz_decode_frames(&data);
    }

    #[test]
    fn arbitrary_tails_after_valid_frames_never_panic(
        frames in valid_frames(),
        tail in prop::collection::vec(any::<u8>(), 0..200),
        control in any::<u8>(),
    ) {
        let (bytes, _) = encode_stream(&frames);
        fuzz_decode_frames(&[&[control][..], &bytes, &tail].concat());
    }
}

/// Deterministic cases for Miri (`scripts/miri.sh`): a payload longer than its receive buffer,
/// arriving in pieces, so the receive path runs past the buffer's end without touching it.
#[test]
fn payload_longer_than_its_buffer_is_cut_in_place() {
    let frames =
        [Frame::Eager { context: 1, tag: 2, len: 100 }, Frame::Data { recv_id: 3, len: 20_000 }, Frame::Bye].map(sent);
    let (bytes, _) = encode_stream(&frames);
    for max_piece in [7, 4096, usize::MAX] {
        let reading = Reading { max_piece, would_block_between: max_piece == 7 };
        let received = receive(&bytes, reading, SinkPolicy::HalfBuffers);
        assert_eq!(received.completed, expected_completions(&frames, SinkPolicy::HalfBuffers));
        assert_eq!(received.end, End::Closed);
    }
}
