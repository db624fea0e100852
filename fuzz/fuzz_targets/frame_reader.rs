//! The streaming `FrameReader`, fed fragmented input over a small caller buffer.
//!
//! Input: byte 0 = caller buffer size - 8 (so 8..=263 bytes); byte 1 low 3 bits = number of
//! fragment sizes `k` (1..=8); bit 3 = use `receive_buffer`/`commit` instead of `feed`; the next
//! `k` bytes are fragment sizes (each `+ 1`, cycled); the rest is the byte stream.
//!
//! Invariants: no panic; the reader never asks for a byte past the current frame (each frame
//! it returns is exactly the next bytes of the stream, and it passes `Frame::new_checked`);
//! `receive_buffer().len() == remaining()`; the header decodes or fails cleanly; after an error
//! the reader stays poisoned, and the error matches an independent check of the prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmq_core::wire::{CommandHeader, Frame, FrameError, FrameReader, PREFIX_LEN, ReadError};

fuzz_target!(|data: &[u8]| {
    let [size, mode, rest @ ..] = data else {
        return;
    };
    let buf_len = usize::from(*size) + PREFIX_LEN;
    let k = usize::from(mode & 7) + 1;
    let use_commit = mode & 8 != 0;
    if rest.len() < k {
        return;
    }
    let (sizes, stream) = rest.split_at(k);
    let mut reader = FrameReader::new(vec![0u8; buf_len]);
    let mut pos = 0; // bytes of `stream` handed to the reader
    let mut frame_start = 0; // stream offset of the current frame
    let mut i = 0;
    while pos < stream.len() {
        assert_eq!(reader.receive_buffer().len(), reader.remaining());
        let want = usize::from(sizes[i % k]) + 1;
        i += 1;
        let chunk = &stream[pos..stream.len().min(pos + want)];
        let res = if use_commit {
            let dst = reader.receive_buffer();
            let n = dst.len().min(chunk.len());
            dst[..n].copy_from_slice(&chunk[..n]);
            reader.commit(n).map(|()| n)
        } else {
            reader.feed(chunk)
        };
        let used = match res {
            Ok(n) => n,
            Err(e) => {
                // The error is about the frame at frame_start; check it independently.
                let at = &stream[frame_start..];
                match e {
                    ReadError::Frame(fe) => {
                        assert!(at.len() >= PREFIX_LEN, "prefix error before 8 bytes");
                        assert_ne!(fe, FrameError::Truncated);
                        let chk = Frame::new_checked(at).err();
                        assert_eq!(chk, Some(fe), "reader error differs from check_len");
                    }
                    ReadError::FrameTooLargeForBuffer { frame_len } => {
                        let f = Frame::new_unchecked(at);
                        assert_eq!(f.frame_len(), frame_len);
                        assert!(frame_len > buf_len);
                        assert!(
                            !matches!(Frame::new_checked(at), Err(e) if e != FrameError::Truncated)
                        );
                    }
                    other => panic!("unexpected reader error {other:?}"),
                }
                assert_eq!(reader.error(), Some(e));
                assert_eq!(reader.feed(b"x"), Err(ReadError::Poisoned));
                assert_eq!(reader.commit(1), Err(ReadError::Poisoned));
                assert!(reader.receive_buffer().is_empty());
                assert!(reader.take_frame().is_none());
                return;
            }
        };
        assert!(used <= chunk.len());
        pos += used;
        if reader.is_complete() {
            assert_eq!(reader.remaining(), 0);
            let frame = reader.take_frame().expect("complete reader yields a frame");
            let bytes: &[u8] = frame.into_inner();
            let len = bytes.len();
            // Exactly the next `len` bytes of the stream, ending where the reader stopped.
            assert_eq!(frame_start + len, pos, "reader consumed past the frame");
            assert_eq!(bytes, &stream[frame_start..pos]);
            let checked = Frame::new_checked(bytes).expect("returned frame fails check_len");
            assert_eq!(checked.frame_len(), len);
            assert!(checked.header().len() + checked.body().len() + PREFIX_LEN == len);
            if let Ok(h) = CommandHeader::parse(&checked) {
                rmq_fuzz::exercise_header(&h);
            }
            frame_start = pos;
        } else {
            assert!(reader.take_frame().is_none());
            // Nothing complete: every byte handed over was wanted by the current frame.
            assert!(pos - frame_start <= buf_len);
        }
    }
    assert!(reader.error().is_none());
});
