// SPDX-License-Identifier: GPL-2.0
//! A buffer aligned for O_DIRECT (4 KiB, enough for any logical block size),
//! carved out of a larger Vec: no unsafe code, no allocator tricks.

const ALIGN: usize = 4096;

pub struct AlignedBuf {
    mem: Vec<u8>,
    start: usize,
    cap: usize,
}

impl AlignedBuf {
    pub fn new(cap: usize) -> Self {
        let mem = vec![0u8; cap + ALIGN];
        let start = (ALIGN - mem.as_ptr() as usize % ALIGN) % ALIGN;
        AlignedBuf { mem, start, cap }
    }

    /// The first `len` bytes (len <= the capacity), 4 KiB aligned.
    pub fn slice(&mut self, len: usize) -> &mut [u8] {
        assert!(
            len <= self.cap,
            "buffer of {} bytes asked for {len}",
            self.cap
        );
        &mut self.mem[self.start..self.start + len]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_aligned() {
        for cap in [512, 4096, 1 << 20] {
            let mut b = super::AlignedBuf::new(cap);
            let s = b.slice(cap);
            assert_eq!(s.as_ptr() as usize % 4096, 0);
            assert_eq!(s.len(), cap);
        }
    }
}
