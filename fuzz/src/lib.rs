//! Helpers shared by the rmq fuzz targets (see `README.md` for each target's input format).
//!
//! Every helper asserts an invariant of rmq-core's documented contract; a failed assertion is
//! a finding, exactly like a panic inside the core.

use rmq_core::wire::{
    CommandHeader, CommandRepr, FieldStr, Frame, PREFIX_LEN, ResponseCode, Scratch, SerializeType,
    version,
};

/// Wraps `header` in a frame of serialize type `ty` (no body), as a peer would send it.
pub fn frame_around(ty: SerializeType, header: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + header.len());
    let total = u32::try_from(4 + header.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&total.to_be_bytes());
    let word = (u32::from(ty.0) << 24) | (u32::try_from(header.len()).unwrap_or(0) & 0x00FF_FFFF);
    out.extend_from_slice(&word.to_be_bytes());
    out.extend_from_slice(header);
    out
}

/// Java `Long.parseLong` on an ASCII string: optional sign, then 1.. ASCII digits.
pub fn java_parse_long(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Exercises every [`FieldStr`] operation and checks that they agree with each other.
/// Returns the unescaped string when it is valid.
pub fn exercise_field(f: FieldStr<'_>) -> Option<String> {
    let _ = f.kind();
    let _ = f.raw();
    let _ = f.is_empty();
    let _ = f.parse_bool();
    // A deliberately tiny buffer: must fail cleanly or fit.
    let mut small = [0u8; 8];
    let small_res = f.unescape_into(&mut small).map(str::to_owned);
    let lossy: String = f.chars().collect();
    let len = f.unescaped_len();
    let mut big = vec![0u8; f.raw().len() * 4 + 8];
    let full = f.unescape_into(&mut big).map(str::to_owned);
    let i64v = f.parse_i64();
    let i32v = f.parse_i32();
    match &full {
        Ok(s) => {
            assert_eq!(len.ok(), Some(s.len()), "unescaped_len disagrees");
            assert!(f.eq_str(s), "eq_str(unescaped) is false");
            assert_eq!(&lossy, s, "chars() disagrees with unescape_into");
            if let Some(b) = f.as_str() {
                assert_eq!(b, s, "as_str disagrees");
            }
            assert_eq!(i64v, java_parse_long(s), "parse_i64({s:?})");
            assert_eq!(i32v, i64v.and_then(|v| i32::try_from(v).ok()), "parse_i32");
            assert_eq!(f.parse_bool(), s.eq_ignore_ascii_case("true"), "parse_bool");
            if s.len() <= small.len() {
                assert_eq!(small_res.as_deref().ok(), Some(s.as_str()));
            } else {
                assert!(
                    small_res.is_err(),
                    "unescape into a too-small buffer succeeded"
                );
            }
            // Scratch: a too-small scratch fails (or borrows), a big one resolves.
            let mut sbuf = vec![0u8; s.len()];
            assert_eq!(Scratch::new(&mut sbuf).resolve(f), Some(s.as_str()));
            if f.has_escapes() && !s.is_empty() {
                let mut tiny = vec![0u8; s.len() - 1];
                assert_eq!(Scratch::new(&mut tiny).resolve(f), None);
            }
            // A different string never compares equal.
            let mut other = s.clone();
            other.push('x');
            assert!(!f.eq_str(&other));
            Some(s.clone())
        }
        Err(_) => {
            assert!(
                f.as_str().is_none(),
                "as_str succeeded where unescape failed"
            );
            let mut sbuf = vec![0u8; f.raw().len() * 4 + 8];
            assert_eq!(Scratch::new(&mut sbuf).resolve(f), None);
            None
        }
    }
}

/// Runs every accessor of a decoded header and every [`FieldStr`] operation on its remark and
/// ext fields; checks `get` agrees with iteration (last occurrence wins).
pub fn exercise_header(h: &CommandHeader<'_>) {
    let _ = (h.code(), h.language(), h.version(), h.opaque(), h.flag());
    let _ = (
        h.request_code(),
        h.response_code(),
        h.is_response(),
        h.is_oneway(),
    );
    let _ = h.serialize_type();
    if let Some(r) = h.remark() {
        exercise_field(r);
    }
    let pairs: Vec<_> = h.ext_iter().collect();
    if let Some(e) = h.ext_fields() {
        let _ = e.raw();
        assert_eq!(e.is_empty(), pairs.is_empty());
    }
    for (k, v) in &pairs {
        let key = exercise_field(*k);
        exercise_field(*v);
        if let Some(key) = key {
            let last = pairs
                .iter()
                .rev()
                .find(|(k2, _)| k2.eq_str(&key))
                .map(|p| p.1);
            assert_eq!(h.get(&key), last, "get({key:?}) disagrees with iteration");
        }
    }
    // Typed decoders over arbitrary ext fields must fail cleanly.
    let mut sbuf = [0u8; 64];
    let mut scratch = Scratch::new(&mut sbuf);
    let _ = rmq_core::wire::headers::SendMessageRequestHeaderV2::decode(h, &mut scratch);
    let _ = rmq_core::wire::headers::SendMessageResponseHeader::decode(h, &mut Scratch::empty());
    let _ = rmq_core::wire::headers::PullMessageResponseHeader::decode(h, &mut Scratch::empty());
}

/// Parses `header` as serialize type `ty`, both directly and through a frame, and checks both
/// paths agree.
pub fn parse_both_ways(ty: SerializeType, header: &[u8]) {
    let direct = CommandHeader::parse_bytes(ty, header);
    let bytes = frame_around(ty, header);
    let frame = Frame::new_checked(&bytes[..]).expect("a frame we built must check");
    assert_eq!(frame.header_ref(), header);
    assert!(frame.body_ref().is_empty());
    let via_frame = CommandHeader::parse(&frame);
    assert_eq!(direct, via_frame);
    check_one_pass(&frame);
    if let Ok(h) = direct {
        assert_eq!(h.serialize_type(), ty);
        exercise_header(&h);
    }
}

/// The too-small buffer sizes an encoder is tried with when its exact size is `exact`:
/// every size in the first and the last `EDGE` bytes, and `MIDDLE` evenly spaced sizes in
/// between, shifted by `salt` (so different inputs cover different sizes, and every size is
/// reached over many executions). Trying *every* size made each input quadratic and the
/// encoding targets ~100x slower than the others.
pub fn too_small_sizes(exact: usize, salt: u64) -> impl Iterator<Item = usize> {
    const EDGE: usize = 8;
    const MIDDLE: usize = 8;
    let head_end = exact.min(EDGE);
    let tail_start = exact.saturating_sub(EDGE).max(head_end);
    let span = tail_start - head_end;
    let step = span.div_ceil(MIDDLE).max(1);
    let offset = usize::try_from(salt % step as u64).unwrap_or(0);
    (0..head_end)
        .chain((head_end + offset..tail_start).step_by(step))
        .chain(tail_start..exact)
}

/// A cheap, deterministic salt for [`too_small_sizes`] (FNV-1a of the input).
pub fn salt(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The one-pass typed decoders (`decode_frame`) give exactly what parsing the header and then
/// decoding the typed header gives, errors included.
pub fn check_one_pass(frame: &Frame<&[u8]>) {
    use rmq_core::wire::HeaderError;
    use rmq_core::wire::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
    // The same check for both header types (their decoders share no trait).
    macro_rules! same {
        ($ty:ty, $what:literal) => {{
            let (mut a, mut b) = ([0u8; 256], [0u8; 256]);
            let two = CommandHeader::parse(frame)
                .map_err(HeaderError::Decode)
                .and_then(|h| {
                    <$ty>::decode(&h, &mut Scratch::new(&mut a))
                        .map(|v| (h, v))
                        .map_err(HeaderError::Field)
                });
            let one = <$ty>::decode_frame(frame, &mut Scratch::new(&mut b));
            assert_eq!(one, two, concat!($what, " one-pass decode differs"));
        }};
    }
    same!(SendMessageRequestHeaderV2, "V2");
    same!(SendMessageRequestHeader, "V1");
}

/// A response frame from a broker or NameServer: `code`, `opaque`, the ext fields and `body`
/// (empty if the header cannot be encoded).
pub fn response(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let cmd = CommandRepr::response(ResponseCode(code), opaque, version::V5_3_3, Some(ext));
    let mut buf = vec![0u8; 512];
    let Ok(n) = cmd.emit_frame_prefix_and_header(SerializeType::JSON, body.len(), &mut buf) else {
        return Vec::new();
    };
    buf.truncate(n);
    buf.extend_from_slice(body);
    buf
}

/// The next operand byte of a fuzz input (0 once it is used up).
pub fn next_byte(ops: &mut &[u8]) -> u8 {
    let Some((&b, rest)) = ops.split_first() else {
        return 0;
    };
    *ops = rest;
    b
}

#[cfg(test)]
mod tests {
    use super::too_small_sizes;

    #[test]
    fn sizes_cover_both_edges_and_stay_below_exact() {
        for exact in 0..200 {
            for salt in 0..8 {
                let v: Vec<usize> = too_small_sizes(exact, salt).collect();
                assert!(v.windows(2).all(|w| w[0] < w[1]), "{exact} {salt}: {v:?}");
                assert!(v.iter().all(|&n| n < exact));
                assert!(v.len() <= 8 + 8 + 8);
                for n in 0..exact.min(8) {
                    assert!(v.contains(&n));
                }
                for n in exact.saturating_sub(8)..exact {
                    assert!(v.contains(&n));
                }
            }
        }
        // Every residue is reachable in the middle of a long buffer.
        let all: std::collections::BTreeSet<usize> =
            (0..1000).flat_map(|s| too_small_sizes(1000, s)).collect();
        assert_eq!(all.len(), 1000);
    }
}
