//! Byte-level helpers shared by the reading and the writing side: word-at-a-time (SWAR)
//! searches for quotes and backslashes, and [`copy_small`] for the short copies of header
//! fields.

/// Position of the first `a` or `b` in `hay`, eight bytes at a time (SWAR).
#[inline]
pub(super) fn find2(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    let mut chunks = hay.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        // The lowest mark is certain.
        let m = eq_marks(x, a) | eq_marks(x, b);
        if m != 0 {
            return Some(base + (m.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&x| x == a || x == b)
        .map(|i| base + i)
}

/// Index of the first `q` or backslash in `b` at or after `i` (SWAR, eight bytes at a time,
/// reading straight from the input rather than a sub-slice).
#[inline]
pub(super) fn find_quote_or_escape(b: &[u8], mut i: usize, q: u8) -> Option<usize> {
    let mut rest = b.get(i..)?;
    while let Some(w) = rest.first_chunk::<8>() {
        let x = u64::from_le_bytes(*w);
        // The lowest mark is certain.
        let m = eq_marks(x, q) | eq_marks(x, b'\\');
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
        rest = rest.get(8..).unwrap_or(&[]);
    }
    rest.iter()
        .position(|&c| c == q || c == b'\\')
        .map(|k| i + k)
}

/// `dst.copy_from_slice(src)` for `dst.len() == src.len()`, with short copies done as one
/// or two overlapping fixed-size moves instead of a `memcpy` call (header fields are mostly
/// a few bytes long).
#[inline]
pub(super) fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() {
        return;
    }
    // Small targets (firmware) prefer the smaller code of a plain `memcpy` call.
    if cfg!(not(target_pointer_width = "64")) {
        dst.copy_from_slice(src);
        return;
    }
    if (8..=16).contains(&n) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<8>(), src.first_chunk::<8>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<8>(), src.last_chunk::<8>()) {
            *d = *s;
        }
    } else if (4..8).contains(&n) {
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<4>(), src.first_chunk::<4>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.last_chunk_mut::<4>(), src.last_chunk::<4>()) {
            *d = *s;
        }
    } else if n < 4 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// One in every byte lane of a word (SWAR).
pub(super) const LO: u64 = 0x0101_0101_0101_0101;
/// The high bit of every byte lane.
pub(super) const HI: u64 = 0x8080_8080_8080_8080;

/// Marks (high bit of the lane) the bytes of `x` equal to `c`. Every such byte is marked;
/// only the lowest mark is certain (a borrow can mark the lane above a true one).
#[inline(always)]
pub(super) const fn eq_marks(x: u64, c: u8) -> u64 {
    let y = x ^ (LO * c as u64);
    y.wrapping_sub(LO) & !y & HI
}
