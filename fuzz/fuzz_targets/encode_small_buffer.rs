//! Encoding into too-small buffers: a `CommandRepr` carrying a typed
//! `SendMessageRequestHeaderV2` built from the input is emitted into too-small buffers (every
//! size near both ends, a salted stride in between: `rmq_fuzz::too_small_sizes`; must return
//! `BufferTooSmall`, never panic), then into the exact size (must
//! succeed, fill it entirely, and decode back to the same typed header).
//!
//! Input (via `arbitrary::Unstructured`, first 256 bytes only): serialize type bit, opaque, version (i16), the
//! header's integers and optional fields, then its strings (producer group, topic, default
//! topic, properties, broker name).
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use rmq_core::wire::{
    CommandHeader, CommandRepr, EncodeError, Frame, RequestCode, Scratch, SerializeType,
};

fn build<'a>(
    u: &mut Unstructured<'a>,
) -> Result<(SerializeType, i32, i32, usize, SendMessageRequestHeader<'a>)> {
    let ty = SerializeType(u8::from(u.arbitrary::<bool>()?));
    let opaque: i32 = u.arbitrary()?;
    let version = i32::from(u.arbitrary::<i16>()?);
    let body_len = usize::from(u.arbitrary::<u16>()?);
    let h = SendMessageRequestHeader {
        default_topic_queue_nums: u.arbitrary()?,
        queue_id: u.arbitrary()?,
        sys_flag: u.arbitrary()?,
        born_timestamp: u.arbitrary()?,
        flag: u.arbitrary()?,
        reconsume_times: u.arbitrary()?,
        unit_mode: u.arbitrary()?,
        batch: u.arbitrary()?,
        max_reconsume_times: u.arbitrary()?,
        producer_group: u.arbitrary()?,
        topic: u.arbitrary()?,
        default_topic: u.arbitrary()?,
        properties: u.arbitrary()?,
        broker_name: u.arbitrary()?,
    };
    Ok((ty, opaque, version, body_len, h))
}

/// What decoding must return for `h` sent as `ty`: V2 always sends `k`/`m`; ROCKETMQ drops
/// empty strings (absent optional field, missing required one).
fn expected<'a>(
    h: SendMessageRequestHeader<'a>,
    ty: SerializeType,
) -> Option<SendMessageRequestHeader<'a>> {
    let mut e = h;
    e.unit_mode = Some(h.unit_mode.unwrap_or(false));
    e.batch = Some(h.batch.unwrap_or(false));
    if ty == SerializeType::ROCKETMQ {
        if h.producer_group.is_empty() || h.topic.is_empty() || h.default_topic.is_empty() {
            return None;
        }
        e.properties = h.properties.filter(|s| !s.is_empty());
        e.broker_name = h.broker_name.filter(|s| !s.is_empty());
    }
    Some(e)
}

/// Inputs are cut here (bounds the header size, so the number of buffer sizes tried).
const MAX_INPUT: usize = 256;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(&data[..data.len().min(MAX_INPUT)]);
    let Ok((ty, opaque, version, body_len, h)) = build(&mut u) else {
        return;
    };
    let v2 = SendMessageRequestHeaderV2(h);
    let repr = CommandRepr::request(RequestCode::SEND_MESSAGE_V2, opaque, version, Some(&v2));
    let exact = repr.frame_len(ty, 0);
    let hlen = repr.buffer_len(ty);
    assert_eq!(exact, hlen + 8);
    let mut buf = vec![0xa5u8; exact];
    for n in rmq_fuzz::too_small_sizes(exact, rmq_fuzz::salt(data)) {
        assert_eq!(
            repr.emit_frame_prefix_and_header(ty, body_len, &mut buf[..n]),
            Err(EncodeError::BufferTooSmall),
            "frame emit into {n} of {exact} bytes"
        );
    }
    // Header alone: a few sizes (the frame loop above already covers every header size).
    for n in [0, hlen / 2, hlen.saturating_sub(1)] {
        if n < hlen {
            assert_eq!(
                repr.emit(ty, &mut buf[..n]),
                Err(EncodeError::BufferTooSmall)
            );
        }
    }
    buf.fill(0xa5);
    assert_eq!(repr.emit(ty, &mut buf[..hlen]), Ok(hlen));
    buf.fill(0xa5);
    let written = repr
        .emit_frame_prefix_and_header(ty, body_len, &mut buf)
        .expect("exact-size emit must succeed");
    assert_eq!(written, exact);
    // Append the announced body and parse the whole frame back.
    buf.resize(exact + body_len, 0x5a);
    let frame = Frame::new_checked(&buf[..]).expect("emitted frame fails check_len");
    assert_eq!(frame.body_ref().len(), body_len);
    let parsed = CommandHeader::parse(&frame).expect("emitted header fails to parse");
    rmq_fuzz::check_one_pass(&frame);
    assert_eq!(parsed.request_code(), RequestCode::SEND_MESSAGE_V2);
    assert_eq!(
        (parsed.opaque(), parsed.version(), parsed.flag()),
        (opaque, version, 0)
    );
    let mut sbuf = vec![0u8; hlen];
    let mut scratch = Scratch::new(&mut sbuf);
    let back = SendMessageRequestHeaderV2::decode(&parsed, &mut scratch);
    match expected(h, ty) {
        Some(e) => assert_eq!(back.map(|b| b.0), Ok(e)),
        None => assert!(back.is_err(), "empty required field decoded in ROCKETMQ"),
    }
});
