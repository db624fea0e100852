//! Private big-endian cursors over caller buffers; every access is bounds-checked.

use super::BufferTooSmall;

/// A write cursor over a caller buffer.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Bytes written so far.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Hands out the next `n` bytes for the caller to fill, and advances past them.
    pub(crate) fn reserve(&mut self, n: usize) -> Result<&mut [u8], BufferTooSmall> {
        let start = self.pos;
        let end = start.checked_add(n).ok_or(BufferTooSmall)?;
        let dst = self.buf.get_mut(start..end).ok_or(BufferTooSmall)?;
        self.pos = end;
        Ok(dst)
    }

    pub(crate) fn put(&mut self, src: &[u8]) -> Result<(), BufferTooSmall> {
        self.reserve(src.len())?.copy_from_slice(src);
        Ok(())
    }

    pub(crate) fn put_u8(&mut self, v: u8) -> Result<(), BufferTooSmall> {
        self.put(&[v])
    }

    pub(crate) fn put_i16(&mut self, v: i16) -> Result<(), BufferTooSmall> {
        self.put(&v.to_be_bytes())
    }

    pub(crate) fn put_i32(&mut self, v: i32) -> Result<(), BufferTooSmall> {
        self.put(&v.to_be_bytes())
    }

    pub(crate) fn put_i64(&mut self, v: i64) -> Result<(), BufferTooSmall> {
        self.put(&v.to_be_bytes())
    }
}

/// A read cursor over borrowed input; every read returns `None` when the input runs out.
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    pub(crate) fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.array()?))
    }
}
