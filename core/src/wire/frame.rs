//! The remoting frame view ([`Frame`]) and the streaming [`FrameReader`].
//!
//! ```text
//! offset  size  field
//! 0       4     total_length   i32 BE = 4 + header_len + body_len (does not count itself)
//! 4       4     type << 24 | header_len (24 bits)
//! 8       H     header (JSON or ROCKETMQ)
//! 8+H     B     body
//! ```

use super::{FrameError, ReadError, SerializeType};

/// Largest accepted `total_length`: Netty's 16 MiB limit counts the 4 length bytes too
/// (docs/protocol/WIRE.md §1).
pub const MAX_TOTAL_LENGTH: usize = 16_777_212;
/// Largest frame on the wire, prefix included (16 MiB).
pub const MAX_FRAME_LEN: usize = MAX_TOTAL_LENGTH + 4;
/// Length of the two prefix words.
pub const PREFIX_LEN: usize = 8;
/// Largest header length the 24-bit field can carry.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;

mod field {
    use core::ops::Range;
    pub const TOTAL_LENGTH: Range<usize> = 0..4;
    pub const TYPE_AND_HEADER_LEN: Range<usize> = 4..8;
    pub const HEADER: usize = 8;
}

/// A read/write view of one frame over a byte buffer (smoltcp-style).
///
/// After [`Frame::new_checked`] / [`Frame::check_len`] succeed, no getter panics and the
/// header and body lie inside the buffer. Getters never panic even without the check (they
/// return zero/empty on short buffers), but their values are then meaningless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    match b.get(r) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Validates the two prefix words alone (total length, serialize type, header length): the
/// check [`FrameReader`] makes before buffering a frame, for runtimes that cut frames out of
/// their own buffers. Returns `(frame_len, header_len)`, `frame_len` counting the prefix.
///
/// # Errors
/// The [`FrameError`] of a prefix no valid frame starts with.
pub fn check_prefix(prefix: [u8; 8]) -> Result<(usize, usize), FrameError> {
    let total = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let word = u32::from_be_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    let total = usize::try_from(total).map_err(|_| FrameError::BadTotalLength)?;
    if total > MAX_TOTAL_LENGTH {
        return Err(FrameError::TooLong);
    }
    if total < 4 {
        return Err(FrameError::BadTotalLength);
    }
    let ty = SerializeType((word >> 24) as u8);
    if !ty.is_known() {
        return Err(FrameError::UnknownSerializeType(ty.0));
    }
    let header_len = (word & 0x00FF_FFFF) as usize;
    if header_len > total - 4 {
        return Err(FrameError::BadHeaderLength);
    }
    Ok((total + 4, header_len))
}

/// The length of the whole frame that starts with `head`, for a runtime that cuts frames out
/// of its own buffers: `head` is what is buffered (or peeked) of it so far, `queued` how many
/// of its bytes have arrived. `Ok(None)` until the prefix and then the whole frame are there.
///
/// # Errors
/// The prefix's [`FrameError`] ([`check_prefix`]), or [`FrameError::TooLong`] for a frame
/// longer than `capacity` (the buffer it must fit): framing is lost either way.
pub fn whole_frame(
    head: &[u8],
    queued: usize,
    capacity: usize,
) -> Result<Option<usize>, FrameError> {
    let Some(&prefix) = head.first_chunk::<PREFIX_LEN>() else {
        return Ok(None);
    };
    let (total, _) = check_prefix(prefix)?;
    if total > capacity {
        return Err(FrameError::TooLong);
    }
    Ok((queued >= total).then_some(total))
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer and runs [`Frame::check_len`]: use this for untrusted input.
    ///
    /// # Errors
    /// See [`Frame::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, FrameError> {
        let f = Frame { buffer };
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds a whole valid frame: both prefix words present,
    /// `4 <= total_length <= 16_777_212`, a known serialize type, `header_len <=
    /// total_length - 4`, and `4 + total_length` bytes present (more are allowed and ignored).
    ///
    /// # Errors
    /// [`FrameError::Truncated`], [`FrameError::TooLong`], [`FrameError::BadTotalLength`],
    /// [`FrameError::UnknownSerializeType`], [`FrameError::BadHeaderLength`].
    pub fn check_len(&self) -> Result<(), FrameError> {
        let b = self.buffer.as_ref();
        let prefix: [u8; 8] = match b.get(..PREFIX_LEN) {
            Some(p) => p.try_into().map_err(|_| FrameError::Truncated)?,
            None => return Err(FrameError::Truncated),
        };
        let (frame_len, _) = check_prefix(prefix)?;
        if b.len() < frame_len {
            return Err(FrameError::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The `total_length` field (bytes after the length word).
    pub fn total_length(&self) -> usize {
        be32(self.buffer.as_ref(), field::TOTAL_LENGTH) as usize
    }

    /// Whole frame length on the wire: `4 + total_length`.
    pub fn frame_len(&self) -> usize {
        self.total_length().saturating_add(4)
    }

    /// The serialize type byte.
    pub fn serialize_type(&self) -> SerializeType {
        SerializeType((be32(self.buffer.as_ref(), field::TYPE_AND_HEADER_LEN) >> 24) as u8)
    }

    /// The header length (low 24 bits of the second word).
    pub fn header_len(&self) -> usize {
        (be32(self.buffer.as_ref(), field::TYPE_AND_HEADER_LEN) & 0x00FF_FFFF) as usize
    }

    fn header_range(&self) -> core::ops::Range<usize> {
        field::HEADER..field::HEADER.saturating_add(self.header_len())
    }

    fn body_range(&self) -> core::ops::Range<usize> {
        field::HEADER.saturating_add(self.header_len())..self.frame_len()
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_range()).unwrap_or(&[])
    }

    /// The body bytes.
    pub fn body(&self) -> &[u8] {
        self.buffer.as_ref().get(self.body_range()).unwrap_or(&[])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// The header bytes, borrowed for the buffer's lifetime.
    pub fn header_ref(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        b.get(self.header_range()).unwrap_or(&[])
    }

    /// The body bytes, borrowed for the buffer's lifetime.
    pub fn body_ref(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        b.get(self.body_range()).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets `total_length`. Setters can void the [`Frame::check_len`] guarantee only in the
    /// sense that later getters may return empty slices; they never panic (short buffers are
    /// left untouched).
    pub fn set_total_length(&mut self, total: u32) {
        if let Some(d) = self.buffer.as_mut().get_mut(field::TOTAL_LENGTH) {
            d.copy_from_slice(&total.to_be_bytes());
        }
    }

    /// Sets the serialize type and header length word (`header_len` is masked to 24 bits).
    pub fn set_type_and_header_len(&mut self, ty: SerializeType, header_len: u32) {
        let word = (u32::from(ty.0) << 24) | (header_len & 0x00FF_FFFF);
        if let Some(d) = self.buffer.as_mut().get_mut(field::TYPE_AND_HEADER_LEN) {
            d.copy_from_slice(&word.to_be_bytes());
        }
    }

    /// The header bytes, mutable.
    pub fn header_mut(&mut self) -> &mut [u8] {
        let r = self.header_range();
        self.buffer.as_mut().get_mut(r).unwrap_or(&mut [])
    }

    /// The body bytes, mutable.
    pub fn body_mut(&mut self) -> &mut [u8] {
        let r = self.body_range();
        self.buffer.as_mut().get_mut(r).unwrap_or(&mut [])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReaderState {
    /// Filling the 8 prefix bytes.
    Prefix,
    /// Prefix valid; filling up to `need`.
    Rest,
    /// A whole frame is buffered.
    Complete,
    /// A fatal error happened; the connection must be closed.
    Poisoned(ReadError),
}

/// Streams frames from a byte stream into a caller-owned buffer, one frame at a time.
///
/// Loop: fill [`FrameReader::receive_buffer`] (or [`FrameReader::feed`]) and
/// [`FrameReader::commit`] what was written; when [`FrameReader::take_frame`] returns a frame,
/// handle it (the reader is already reset for the next one). The reader never asks for bytes
/// past the current frame: first exactly the 8 prefix bytes, then exactly the rest. The
/// prefix is validated before anything else is buffered. Any error poisons the reader:
/// stream framing is lost and the connection must be closed.
#[derive(Debug)]
pub struct FrameReader<B> {
    buf: B,
    filled: usize,
    need: usize,
    state: ReaderState,
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> FrameReader<B> {
    /// A reader over `buf`; frames larger than `buf` are rejected with
    /// [`ReadError::FrameTooLargeForBuffer`].
    pub fn new(buf: B) -> Self {
        FrameReader {
            buf,
            filled: 0,
            need: PREFIX_LEN,
            state: ReaderState::Prefix,
        }
    }

    /// The bytes still needed for the current frame, to be filled by the caller and then
    /// [`commit`](FrameReader::commit)ted. Empty when a frame is complete (call
    /// [`FrameReader::take_frame`]) or the reader is poisoned.
    pub fn receive_buffer(&mut self) -> &mut [u8] {
        match self.state {
            ReaderState::Prefix | ReaderState::Rest => {
                let (filled, need) = (self.filled, self.need);
                self.buf.as_mut().get_mut(filled..need).unwrap_or(&mut [])
            }
            _ => &mut [],
        }
    }

    /// How many more bytes the current frame needs (0 when complete or poisoned).
    pub fn remaining(&self) -> usize {
        match self.state {
            ReaderState::Prefix | ReaderState::Rest => self.need - self.filled,
            _ => 0,
        }
    }

    /// Records that `n` bytes were written at the start of [`FrameReader::receive_buffer`].
    ///
    /// # Errors
    /// [`ReadError::CommitOverflow`] if `n` exceeds the receive buffer, a [`FrameError`] for
    /// a bad prefix, [`ReadError::FrameTooLargeForBuffer`], or [`ReadError::Poisoned`] after
    /// an earlier error. All poison the reader.
    pub fn commit(&mut self, n: usize) -> Result<(), ReadError> {
        if let ReaderState::Poisoned(_) = self.state {
            return Err(ReadError::Poisoned);
        }
        if n == 0 {
            return Ok(());
        }
        if n > self.remaining() {
            return Err(self.poison(ReadError::CommitOverflow));
        }
        self.filled += n;
        if self.state == ReaderState::Prefix && self.filled == PREFIX_LEN {
            let mut prefix = [0u8; PREFIX_LEN];
            if let Some(p) = self.buf.as_ref().get(..PREFIX_LEN) {
                prefix.copy_from_slice(p);
            }
            let (frame_len, _) = check_prefix(prefix).map_err(|e| self.poison(e.into()))?;
            if frame_len > self.buf.as_ref().len() {
                return Err(self.poison(ReadError::FrameTooLargeForBuffer { frame_len }));
            }
            self.need = frame_len;
            self.state = ReaderState::Rest;
        }
        if self.state == ReaderState::Rest && self.filled == self.need {
            self.state = ReaderState::Complete;
        }
        Ok(())
    }

    /// Copies as much of `data` as the current frame needs and commits it. Returns the
    /// number of bytes consumed; call again with the rest after taking the frame.
    ///
    /// # Errors
    /// As [`FrameReader::commit`].
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, ReadError> {
        if let ReaderState::Poisoned(_) = self.state {
            return Err(ReadError::Poisoned);
        }
        let mut used = 0;
        // At most two rounds: the prefix, then the rest.
        while used < data.len() {
            let dst = self.receive_buffer();
            let n = dst.len().min(data.len() - used);
            if n == 0 {
                break;
            }
            if let (Some(d), Some(s)) = (dst.get_mut(..n), data.get(used..used + n)) {
                d.copy_from_slice(s);
            }
            self.commit(n)?;
            used += n;
        }
        Ok(used)
    }

    fn poison(&mut self, e: ReadError) -> ReadError {
        self.state = ReaderState::Poisoned(e);
        e
    }

    /// Whether a whole frame is buffered.
    pub fn is_complete(&self) -> bool {
        self.state == ReaderState::Complete
    }

    /// The error that poisoned the reader, if any.
    pub fn error(&self) -> Option<ReadError> {
        match self.state {
            ReaderState::Poisoned(e) => Some(e),
            _ => None,
        }
    }

    /// If a whole frame is buffered, resets the reader for the next frame and returns a
    /// (validated) view of the one just completed. The view borrows the reader, so the next
    /// frame cannot overwrite it while it is in use.
    pub fn take_frame(&mut self) -> Option<Frame<&[u8]>> {
        if self.state != ReaderState::Complete {
            return None;
        }
        let len = self.need;
        self.state = ReaderState::Prefix;
        self.filled = 0;
        self.need = PREFIX_LEN;
        self.buf.as_ref().get(..len).map(Frame::new_unchecked)
    }

    /// Returns the buffer.
    pub fn into_inner(self) -> B {
        self.buf
    }
}
