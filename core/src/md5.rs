//! MD5 (RFC 1321), for one purpose: Java's consistent-hash ring
//! (`ConsistentHashRouter.MD5Hash`, [`crate::consumer::AllocateStrategy::ConsistentHash`]),
//! which picks queue owners with it. It is no security measure here. Written out rather than
//! linked: the digest crates would add a crate to every runtime's build for these ~60 lines.

/// Per-round shift amounts.
const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// `floor(abs(sin(i + 1)) * 2^32)`.
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

/// An MD5 computation: [`update`](Self::update) with the message's parts, then
/// [`finish`](Self::finish).
#[derive(Clone, Debug)]
pub struct Md5 {
    state: [u32; 4],
    block: [u8; 64],
    /// Bytes in `block`.
    filled: usize,
    /// Bytes hashed in all.
    len: u64,
}

impl Default for Md5 {
    fn default() -> Self {
        Md5 {
            state: [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476],
            block: [0; 64],
            filled: 0,
            len: 0,
        }
    }
}

impl Md5 {
    /// Adds `data` to the message.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len = self.len.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let take = (64 - self.filled).min(data.len());
            let (head, rest) = data.split_at(take);
            if let Some(dst) = self.block.get_mut(self.filled..self.filled + take) {
                dst.copy_from_slice(head);
            }
            self.filled += take;
            data = rest;
            if self.filled == 64 {
                compress(&mut self.state, &self.block);
                self.filled = 0;
            }
        }
    }

    /// The digest.
    pub fn finish(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        self.update(&[0x80]);
        while self.filled != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_le_bytes());
        let mut out = [0u8; 16];
        for (o, s) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&s.to_le_bytes());
        }
        out
    }
}

fn compress(state: &mut [u32; 4], block: &[u8; 64]) {
    let mut m = [0u32; 16];
    for (w, b) in m.iter_mut().zip(block.chunks_exact(4)) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let f = f.wrapping_add(a).wrapping_add(K[i]).wrapping_add(m[g]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(f.rotate_left(S[i]));
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d]) {
        *s = s.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::Md5;

    fn hex(parts: &[&[u8]]) -> std::string::String {
        let mut h = Md5::default();
        for p in parts {
            h.update(p);
        }
        h.finish().iter().map(|b| std::format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc_1321_vectors_in_one_part_or_many() {
        assert_eq!(hex(&[b""]), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&[b"a"]), "0cc175b9c0f1b6a831c399e269772661");
        assert_eq!(hex(&[b"abc"]), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&[b"message digest"]),
            "f96b697d7cb7938d525a2f31aaf161d0"
        );
        let alpha: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        assert_eq!(hex(&[alpha]), "d174ab98d277d9f5a5611c2c9f419d9f");
        let digits = b"1234567890".repeat(8);
        assert_eq!(hex(&[&digits]), "57edf4a22be3c955ac49da2e2107b67a");
        // The same 80 bytes in pieces across the 64-byte blocks.
        let (x, y) = digits.split_at(63);
        let (y, z) = y.split_at(2);
        assert_eq!(hex(&[x, y, z]), "57edf4a22be3c955ac49da2e2107b67a");
        // 55 and 56 bytes: the padding fits the block or needs another.
        assert_eq!(hex(&[&[b'a'; 55]]), "ef1772b6dff9a122358552954ad0df65");
        assert_eq!(hex(&[&[b'a'; 56]]), "3b0c8ac703f828b04c6c197006d17218");
    }
}
