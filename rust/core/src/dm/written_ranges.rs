// SPDX-License-Identifier: GPL-2.0
//! Which sectors of one new data block its writes have written so far: the
//! union of their ranges, each `(offset in the block, count)`, kept merged
//! and sorted in a fixed array (a sequential stream of small writes stays one
//! range). A block held open for more writes closes once they cover it
//! (nothing to fill) or, sooner, with only the gaps between them zeroed or
//! copied.

/// The most separate ranges one block keeps: a write that would need more
/// is not taken (the block is closed instead).
pub const MAX_RANGES: usize = 8;

/// The union of the ranges written into a block of `len` sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenRanges {
    /// `[start, end)` offsets, sorted, disjoint and not touching.
    ranges: [(u64, u64); MAX_RANGES],
    count: usize,
    len: u64,
}

impl WrittenRanges {
    /// Nothing written yet, in a block of `len` sectors.
    pub const fn new(len: u64) -> Self {
        Self {
            ranges: [(0, 0); MAX_RANGES],
            count: 0,
            len,
        }
    }

    /// Adds the write `(offset, count)`. False (and nothing changed) if it
    /// is empty, leaves the block, or would need more than [`MAX_RANGES`]
    /// separate ranges.
    pub fn add(&mut self, offset: u64, count: u64) -> bool {
        let Some(end) = offset.checked_add(count) else {
            return false;
        };
        if count == 0 || end > self.len {
            return false;
        }
        // The ranges it touches or overlaps merge with it: [lo, hi).
        let used = &self.ranges[..self.count];
        let lo = used
            .iter()
            .position(|&(_, e)| e >= offset)
            .unwrap_or(self.count);
        let hi = used
            .iter()
            .position(|&(s, _)| s > end)
            .unwrap_or(self.count);
        if lo == hi {
            // Touches none: inserted at `lo`.
            if self.count == MAX_RANGES {
                return false;
            }
            self.ranges.copy_within(lo..self.count, lo + 1);
            self.ranges[lo] = (offset, end);
            self.count += 1;
            return true;
        }
        let merged = (
            self.ranges[lo].0.min(offset),
            self.ranges[hi - 1].1.max(end),
        );
        self.ranges[lo] = merged;
        self.ranges.copy_within(hi..self.count, lo + 1);
        self.count -= hi - lo - 1;
        true
    }

    /// True once every sector of the block is written.
    pub fn covers(&self) -> bool {
        self.count == 1 && self.ranges[0] == (0, self.len)
    }

    /// The parts of the block nothing wrote, `(offset, count)`, in order.
    pub fn gaps(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let ends = core::iter::once(0).chain(self.ranges[..self.count].iter().map(|&(_, e)| e));
        let starts = self.ranges[..self.count]
            .iter()
            .map(|&(s, _)| s)
            .chain(core::iter::once(self.len));
        ends.zip(starts)
            .filter(|&(from, to)| to > from)
            .map(|(from, to)| (from, to - from))
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::{WrittenRanges, MAX_RANGES};

    fn gaps_are(r: &WrittenRanges, want: &[(u64, u64)]) -> bool {
        r.gaps().eq(want.iter().copied())
    }

    /// A stream merges into one range and covers the block; writes out of
    /// order merge when they meet; overlaps are unions; the gaps are what
    /// is left; a write leaving the block, an empty one, or one needing a
    /// ninth range is refused without changing anything.
    pub fn ranges() -> bool {
        let mut r = WrittenRanges::new(128);
        let mut ok = gaps_are(&r, &[(0, 128)]) && !r.covers();
        for i in 0..16 {
            ok &= r.add(i * 8, 8);
        }
        ok &= r.covers() && gaps_are(&r, &[]);

        let mut r = WrittenRanges::new(128);
        ok &= r.add(64, 8) && r.add(8, 8) && r.add(100, 28);
        ok &= gaps_are(&r, &[(0, 8), (16, 48), (72, 28)]);
        // Touching ranges merge; an overlap joins three.
        ok &= r.add(16, 48) && gaps_are(&r, &[(0, 8), (72, 28)]);
        ok &= r.add(4, 80) && gaps_are(&r, &[(0, 4), (84, 16)]);
        ok &= r.add(0, 128) && r.covers();

        let mut r = WrittenRanges::new(128);
        let before = r;
        ok &= !r.add(120, 16) && !r.add(0, 0) && !r.add(u64::MAX, 2) && r == before;
        for i in 0..MAX_RANGES as u64 {
            ok &= r.add(i * 16, 8);
        }
        let full = r;
        ok &= !r.add(8 * 16 - 4, 2) && r == full;
        // A write joining two of them still fits.
        ok &= r.add(8, 8)
            && gaps_are(
                &r,
                &[
                    (24, 8),
                    (40, 8),
                    (56, 8),
                    (72, 8),
                    (88, 8),
                    (104, 8),
                    (120, 8),
                ],
            );
        ok
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges() {
        assert!(super::selftest::ranges());
    }
}
