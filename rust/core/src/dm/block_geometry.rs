// SPDX-License-Identifier: GPL-2.0
//! Sector arithmetic of a pool's data blocks: which virtual block a bio hits,
//! where it lands once remapped, whether it covers its block, which whole
//! blocks a discard covers. Pool block sizes are multiples of 128 sectors but
//! need not be powers of two (dm-thin allows e.g. 192 KiB), so both forms are
//! handled; the power-of-two case uses shifts.

/// The data block size of one pool, in 512-byte sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockGeometry {
    sectors: u64,
    shift: Option<u32>,
}

impl BlockGeometry {
    /// A geometry for blocks of `sectors` sectors; `None` for 0.
    pub fn new(sectors: u32) -> Option<Self> {
        if sectors == 0 {
            return None;
        }
        let shift = sectors.is_power_of_two().then(|| sectors.trailing_zeros());
        Some(Self {
            sectors: u64::from(sectors),
            shift,
        })
    }

    /// Sectors per block.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// The block holding `sector`.
    pub fn block_of(&self, sector: u64) -> u64 {
        // Checked forms: no panic path (sectors is never 0, shift < 32).
        match self.shift {
            Some(s) => sector.wrapping_shr(s),
            None => sector.checked_div(self.sectors).unwrap_or(0),
        }
    }

    /// The offset of `sector` inside its block.
    pub fn offset_in_block(&self, sector: u64) -> u64 {
        match self.shift {
            Some(_) => sector & self.sectors.wrapping_sub(1),
            None => sector.checked_rem(self.sectors).unwrap_or(0),
        }
    }

    /// First sector of `block`, `None` on overflow.
    pub fn block_start(&self, block: u64) -> Option<u64> {
        block.checked_mul(self.sectors)
    }

    /// Where `sector` of a virtual block lands in `data_block`.
    pub fn remap(&self, data_block: u64, sector: u64) -> Option<u64> {
        self.block_start(data_block)?
            .checked_add(self.offset_in_block(sector))
    }

    /// True if `[sector, sector + nr_sectors)` is exactly one whole block.
    pub fn covers_block(&self, sector: u64, nr_sectors: u64) -> bool {
        nr_sectors == self.sectors && self.offset_in_block(sector) == 0
    }

    /// The parts of the block holding `[sector, sector + nr_sectors)` that
    /// the range leaves out, as `(offset in the block, count)`: the part
    /// before it, then the part after it (count 0 where there is none). A
    /// range that runs past its block leaves nothing after it.
    pub fn uncovered(&self, sector: u64, nr_sectors: u64) -> [(u64, u64); 2] {
        let offset = self.offset_in_block(sector);
        let end = offset.saturating_add(nr_sectors).min(self.sectors);
        [(0, offset), (end, self.sectors.saturating_sub(end))]
    }

    /// True if the writes `(sector, nr_sectors)` together write every
    /// sector of block `vblock` exactly once and nothing outside it: then
    /// the new block needs no zeroing or copy. Sorts `writes` by sector.
    pub fn tiles_block(&self, vblock: u64, writes: &mut [(u64, u64)]) -> bool {
        let Some(start) = self.block_start(vblock) else {
            return false;
        };
        writes.sort_unstable();
        let mut next = start;
        for &(sector, nr_sectors) in writes.iter() {
            if sector != next || nr_sectors == 0 {
                return false;
            }
            next = match sector.checked_add(nr_sectors) {
                Some(end) => end,
                None => return false,
            };
        }
        next.checked_sub(start) == Some(self.sectors)
    }

    /// The whole blocks inside `[sector, sector + nr_sectors)`, as a block
    /// range `[first, end)` (empty when no block is wholly covered).
    pub fn whole_blocks(&self, sector: u64, nr_sectors: u64) -> (u64, u64) {
        let end_sector = sector.saturating_add(nr_sectors);
        let first = match self.offset_in_block(sector) {
            0 => self.block_of(sector),
            _ => self.block_of(sector).saturating_add(1),
        };
        let end = self.block_of(end_sector);
        (first, end.max(first))
    }

    /// The sector ranges `(start, count)` of `blocks`, adjacent blocks in
    /// the list merged into one range: a discard passed down for each range
    /// instead of each block (a sequentially provisioned volume frees long
    /// runs). Blocks whose sectors overflow are skipped.
    pub fn sector_runs<'a>(&self, blocks: &'a [u64]) -> impl Iterator<Item = (u64, u64)> + 'a {
        let sectors = self.sectors;
        let mut i = 0;
        core::iter::from_fn(move || loop {
            let first = *blocks.get(i)?;
            let mut n: u64 = 1;
            i += 1;
            while blocks.get(i) == Some(&first.saturating_add(n)) && first.checked_add(n).is_some()
            {
                n += 1;
                i += 1;
            }
            let run = first
                .checked_mul(sectors)
                .zip(n.checked_mul(sectors))
                .filter(|(start, count)| start.checked_add(*count).is_some());
            if run.is_some() {
                return run;
            }
        })
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::BlockGeometry;

    /// Power-of-two and other block sizes give the same answers.
    pub fn arithmetic() -> bool {
        let (Some(p2), Some(odd)) = (BlockGeometry::new(128), BlockGeometry::new(384)) else {
            return false;
        };
        let mut ok = BlockGeometry::new(0).is_none();
        ok &= p2.block_of(300) == 2 && p2.offset_in_block(300) == 44;
        ok &= odd.block_of(800) == 2 && odd.offset_in_block(800) == 32;
        ok &= p2.remap(10, 300) == Some(1324) && odd.remap(1, 800) == Some(416);
        ok &= p2.remap(u64::MAX, 1).is_none();
        ok &= p2.covers_block(256, 128) && !p2.covers_block(257, 128) && !p2.covers_block(256, 8);
        ok &= odd.covers_block(384, 384);
        // A bio at the start, in the middle, at the end of a block, and one
        // covering it all.
        ok &= p2.uncovered(256, 8) == [(0, 0), (8, 120)];
        ok &= p2.uncovered(300, 8) == [(0, 44), (52, 76)];
        ok &= p2.uncovered(376, 8) == [(0, 120), (128, 0)];
        ok &= p2.uncovered(256, 128) == [(0, 0), (128, 0)];
        ok &= odd.uncovered(800, 16) == [(0, 32), (48, 336)];
        // A discard of sectors 100..700 with 128-sector blocks covers
        // blocks 1..5 wholly; one inside a block covers none.
        ok &= p2.whole_blocks(100, 600) == (1, 5);
        ok &= p2.whole_blocks(130, 10) == (2, 2);
        ok &= p2.whole_blocks(0, 128) == (0, 1);
        ok &= odd.whole_blocks(0, 1000) == (0, 2);
        ok && sector_runs(p2) && tiles(p2) && tiles(odd)
    }

    /// Writes tile a block in any order; a gap, an overlap, a write
    /// outside the block or an empty one do not.
    fn tiles(g: BlockGeometry) -> bool {
        let bs = g.sectors();
        let Some(start) = g.block_start(3) else {
            return false;
        };
        let (half, quarter) = (bs / 2, bs / 4);
        let mut ok = g.tiles_block(3, &mut [(start, bs)]);
        ok &= g.tiles_block(3, &mut [(start + half, half), (start, half)]);
        ok &= g.tiles_block(
            3,
            &mut [
                (start + quarter, quarter),
                (start + 3 * quarter, bs - 3 * quarter),
                (start, quarter),
                (start + half, quarter),
            ],
        );
        ok &= !g.tiles_block(3, &mut [(start, half)]);
        ok &= !g.tiles_block(3, &mut [(start, half), (start + half + 8, half - 8)]);
        ok &= !g.tiles_block(3, &mut [(start, half + 8), (start + half, half)]);
        ok &= !g.tiles_block(3, &mut [(start, half), (start + half, half), (start, 8)]);
        ok &= !g.tiles_block(3, &mut [(start + bs, bs)]);
        ok &= !g.tiles_block(3, &mut [(start, bs), (start + bs, 0)]);
        ok &= !g.tiles_block(3, &mut []);
        ok & !g.tiles_block(u64::MAX, &mut [(0, bs)])
    }

    /// Runs of adjacent blocks merge; gaps, reversals and overflowing
    /// blocks split or drop them.
    fn sector_runs(g: BlockGeometry) -> bool {
        let mut got = [(0u64, 0u64); 8];
        let mut n = 0;
        let blocks = [3, 4, 5, 9, 8, 10, u64::MAX / 2, u64::MAX];
        for (slot, run) in got.iter_mut().zip(g.sector_runs(&blocks)) {
            *slot = run;
            n += 1;
        }
        let want = [(384, 384), (1152, 128), (1024, 128), (1280, 128)];
        n == want.len() && got[..n] == want && g.sector_runs(&[]).next().is_none()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn arithmetic() {
        assert!(super::selftest::arithmetic());
    }
}
