// SPDX-License-Identifier: GPL-2.0
//! Reference-count space maps for metadata and data blocks (format.md, "Space
//! maps").
//!
//! Both maps share the encoding: bitmap blocks of 16,320 two-bit counts
//! (3 = "see the overflow B-tree"), an overflow B-tree of u32 counts, and one
//! index entry per bitmap. The metadata map keeps its index entries in a single
//! index block (at most 255 bitmaps); the data map keeps them in a B-tree keyed
//! by bitmap number.
//!
//! Everything is written through to (shadowed) blocks; nothing is cached in
//! core, so the committed state is simply the structures reachable from the
//! committed roots, which are never modified.
//!
//! # Recursion of the metadata space map
//!
//! Changing a metadata count may require shadowing the bitmap, the index block
//! or overflow-tree nodes, which allocates metadata blocks, which changes
//! metadata counts. The core resolves this directly instead of queueing:
//!
//! * the index block is made writable *before* a bitmap is shadowed, so an
//!   index update never nests;
//! * a block chosen for the space map's own use is *reserved* (a small fixed
//!   table) until its count is recorded, so a nested search cannot hand it out
//!   twice;
//! * the copy of bitmap *i* is preferably placed inside bitmap *i*'s own range,
//!   so recording its count hits the bitmap just made writable; chains are
//!   therefore short, and every bitmap is shadowed at most once per
//!   transaction;
//! * nested updates are only 0 -> 1 (allocation) and 1 -> 0 (release of the
//!   old copy), which never touch the overflow tree; the overflow tree is only
//!   modified at nesting depth 1. Nesting deeper than [`MAX_SM_DEPTH`] is
//!   reported as [`CoreError::Internal`] (it does not happen in practice; the
//!   property tests exercise multi-bitmap devices).

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::TreeKind;
use crate::pdata::checksum::BlockKind;
use crate::pdata::tm::{CacheMem, Tm};

pub mod index;
pub mod root;
pub use index::{IndexEntry, SmKind, INDEX_ENTRY_SIZE};
pub use root::{SmRoot, SPACE_MAP_ROOT_SIZE};

/// Entries (blocks) covered by one bitmap block.
pub const ENTRIES_PER_BITMAP: u64 = 16_320;
/// Maximum number of bitmaps of the metadata space map.
pub const MAX_METADATA_BITMAPS: u64 = 255;
/// Maximum size of the metadata device that can be used, in blocks.
pub const MAX_METADATA_BLOCKS: u64 = MAX_METADATA_BITMAPS * ENTRIES_PER_BITMAP;
/// Maximum nesting of metadata space-map updates.
pub const MAX_SM_DEPTH: usize = 8;
/// Size of the bitmap block header.
pub const BITMAP_HEADER: usize = 16;
/// Offset of the entries in the metadata index block.
pub const INDEX_ENTRIES_OFF: usize = 16;
/// Number of bitmaps needed for `nr_blocks`.
pub const fn nr_bitmaps(nr_blocks: u64) -> u64 {
    nr_blocks.div_ceil(ENTRIES_PER_BITMAP)
}

/// Checks that `b` may be a metadata block other than the superblock, on a
/// metadata device whose space map covers `nr_blocks`.
pub fn check_meta_block_in(b: u64, nr_blocks: u64) -> CoreResult<()> {
    if b == 0 || b >= nr_blocks {
        return Err(corrupt(Corruption::BlockOutOfRange));
    }
    Ok(())
}

fn entry_pos(e: u64) -> CoreResult<(usize, u32)> {
    let byte = usize::try_from(e / 4).map_err(|_| corrupt(Corruption::Layout))?;
    Ok((BITMAP_HEADER.saturating_add(byte), ((e % 4) * 2) as u32))
}

/// Two-bit count of entry `e` in a bitmap block.
pub fn bitmap_get(buf: &[u8], e: u64) -> CoreResult<u32> {
    let (byte, shift) = entry_pos(e)?;
    let v = *buf.get(byte).ok_or(corrupt(Corruption::Layout))?;
    let hi = u32::from(v >> shift) & 1;
    let lo = u32::from(v >> (shift + 1)) & 1;
    Ok((hi << 1) | lo)
}

/// Sets the two-bit count of entry `e` (values above 3 are stored as 3).
pub fn bitmap_set(buf: &mut [u8], e: u64, v: u32) -> CoreResult<()> {
    let (byte, shift) = entry_pos(e)?;
    let v = v.min(3) as u8;
    let slot = buf.get_mut(byte).ok_or(corrupt(Corruption::Layout))?;
    let hi = (v >> 1) & 1;
    let lo = v & 1;
    *slot = (*slot & !(3u8 << shift)) | (hi << shift) | (lo << (shift + 1));
    Ok(())
}

fn byte_all_used(v: u8) -> bool {
    (v | (v >> 1)) & 0x55 == 0x55
}

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    fn root(&self, sm: SmKind, committed: bool) -> SmRoot {
        match (sm, committed) {
            (SmKind::Meta, false) => self.msm,
            (SmKind::Meta, true) => self.msm_c,
            (SmKind::Data, false) => self.dsm,
            (SmKind::Data, true) => self.dsm_c,
        }
    }

    fn root_mut(&mut self, sm: SmKind) -> &mut SmRoot {
        match sm {
            SmKind::Meta => &mut self.msm,
            SmKind::Data => &mut self.dsm,
        }
    }

    /// Checks that `b` may be a metadata block other than the superblock.
    pub(crate) fn check_meta_block(&self, b: u64) -> CoreResult<()> {
        check_meta_block_in(b, self.msm.nr_blocks.max(self.msm_c.nr_blocks))
    }

    /// Index entry `i` of a space map.
    pub(crate) fn index_entry(
        &self,
        sm: SmKind,
        committed: bool,
        i: u64,
    ) -> CoreResult<IndexEntry> {
        let root = self.root(sm, committed);
        if i >= nr_bitmaps(root.nr_blocks) {
            return Err(corrupt(Corruption::SpaceMap));
        }
        if sm == SmKind::Data && !committed {
            if let Some(ie) = self.dirty_data_ie(i) {
                return Ok(ie);
            }
        }
        if let Some(ie) = self.cached_ie(sm, committed, i) {
            return Ok(ie);
        }
        let ie = match sm {
            SmKind::Meta => {
                if i >= MAX_METADATA_BITMAPS {
                    return Err(corrupt(Corruption::SpaceMap));
                }
                self.check_meta_block(root.bitmap_root)?;
                let g = self.store.read(root.bitmap_root, BlockKind::Index)?;
                let off = INDEX_ENTRIES_OFF + (i as usize) * INDEX_ENTRY_SIZE;
                IndexEntry::decode(crate::pdata::codec::bytes(&g, off, INDEX_ENTRY_SIZE)?)?
            }
            SmKind::Data => {
                let v = self
                    .btree_lookup(root.bitmap_root, i, TreeKind::DataIndex)?
                    .ok_or(corrupt(Corruption::SpaceMap))?;
                IndexEntry::decode(v.as_slice())?
            }
        };
        self.check_meta_block(ie.blocknr)?;
        if u64::from(ie.nr_free) > ENTRIES_PER_BITMAP
            || u64::from(ie.none_free_before) > ENTRIES_PER_BITMAP
        {
            return Err(corrupt(Corruption::SpaceMap));
        }
        self.cache_ie(sm, committed, i, ie);
        Ok(ie)
    }

    fn set_index_entry(&mut self, sm: SmKind, i: u64, ie: IndexEntry) -> CoreResult<()> {
        match sm {
            SmKind::Meta => {
                if i >= MAX_METADATA_BITMAPS {
                    return Err(corrupt(Corruption::SpaceMap));
                }
                self.ensure_index_writable()?;
                let off = INDEX_ENTRIES_OFF + (i as usize) * INDEX_ENTRY_SIZE;
                {
                    let mut g = self.store.write(self.msm.bitmap_root, BlockKind::Index)?;
                    crate::pdata::codec::bytes_mut(&mut g, off, INDEX_ENTRY_SIZE)?
                        .copy_from_slice(&ie.encode());
                }
                // The write comes after any nested update (the index block
                // was made writable first): this is what the block holds.
                self.cache_ie(sm, false, i, ie);
                Ok(())
            }
            // Kept in core until the commit (or a collision) writes it.
            SmKind::Data => match self.put_dirty_data_ie(i, ie) {
                Some((j, older)) => self.write_data_ie(j, older),
                None => Ok(()),
            },
        }
    }

    /// Writes index entry `i` of the data space map into its index tree
    /// (allocating metadata blocks only: no data index entry changes).
    fn write_data_ie(&mut self, i: u64, ie: IndexEntry) -> CoreResult<()> {
        let (r, _) =
            self.btree_insert(self.dsm.bitmap_root, i, &ie.encode(), TreeKind::DataIndex)?;
        self.dsm.bitmap_root = r;
        // The tree changed under the read cache's entry, if it had one.
        self.uncache_ie(SmKind::Data, false, i);
        Ok(())
    }

    /// Writes every changed data index entry into the index tree: before a
    /// commit records the tree's root, and before the tree grows.
    pub(crate) fn write_dirty_data_ies(&mut self) -> CoreResult<()> {
        while let Some((i, ie)) = self.take_dirty_data_ie() {
            self.write_data_ie(i, ie)?;
        }
        Ok(())
    }

    /// Reference count of `b` (current or committed map). Blocks beyond the
    /// committed map's end count 0 there.
    pub(crate) fn sm_count(&self, sm: SmKind, committed: bool, b: u64) -> CoreResult<u32> {
        let root = self.root(sm, committed);
        if b >= root.nr_blocks {
            return if committed {
                Ok(0)
            } else {
                Err(corrupt(Corruption::BlockOutOfRange))
            };
        }
        let ie = self.index_entry(sm, committed, b / ENTRIES_PER_BITMAP)?;
        let v = {
            let g = self.store.read(ie.blocknr, BlockKind::Bitmap)?;
            bitmap_get(&g, b % ENTRIES_PER_BITMAP)?
        };
        if v < 3 {
            return Ok(v);
        }
        let c = self
            .btree_lookup(root.ref_count_root, b, TreeKind::RefCount)?
            .ok_or(corrupt(Corruption::SpaceMap))?
            .as_u32();
        if c < 3 {
            return Err(corrupt(Corruption::SpaceMap));
        }
        Ok(c)
    }

    /// True if `b` was allocated in this transaction (committed count 0).
    pub(crate) fn meta_is_new(&self, b: u64) -> CoreResult<bool> {
        let root = self.msm_c;
        if b >= root.nr_blocks || self.known_new(b) {
            return Ok(true);
        }
        let ie = self.index_entry(SmKind::Meta, true, b / ENTRIES_PER_BITMAP)?;
        let g = self.store.read(ie.blocknr, BlockKind::Bitmap)?;
        Ok(bitmap_get(&g, b % ENTRIES_PER_BITMAP)? == 0)
    }

    /// Finds a block that is free in the current and in the committed map and
    /// not reserved, searching from `start` to the end and then from 0.
    pub(crate) fn find_free(&self, sm: SmKind, start: u64) -> CoreResult<u64> {
        let root = self.root(sm, false);
        let croot = self.root(sm, true);
        let nb = nr_bitmaps(root.nr_blocks);
        if nb == 0 {
            return Err(CoreError::NoSpace);
        }
        let start = if start >= root.nr_blocks { 0 } else { start };
        let first = start / ENTRIES_PER_BITMAP;
        for step in 0..=nb {
            let i = (first + step) % nb;
            let ie = self.index_entry(sm, false, i)?;
            if ie.nr_free == 0 {
                continue;
            }
            let base = i * ENTRIES_PER_BITMAP;
            let mut lo = if step == 0 {
                start % ENTRIES_PER_BITMAP
            } else {
                0
            };
            lo = lo.max(u64::from(ie.none_free_before));
            let hi = (root.nr_blocks - base).min(ENTRIES_PER_BITMAP);
            let cloc = if i < nr_bitmaps(croot.nr_blocks) {
                Some(self.index_entry(sm, true, i)?.blocknr)
            } else {
                None
            };
            let cur = self.store.read(ie.blocknr, BlockKind::Bitmap)?;
            let com = match cloc {
                Some(c) => Some(self.store.read(c, BlockKind::Bitmap)?),
                None => None,
            };
            let mut e = lo;
            while e < hi {
                if e % 4 == 0 && e + 4 <= hi {
                    let (byte, _) = entry_pos(e)?;
                    let v = *cur.get(byte).ok_or(corrupt(Corruption::Layout))?;
                    if byte_all_used(v) {
                        e += 4;
                        continue;
                    }
                }
                if bitmap_get(&cur, e)? == 0 {
                    let cfree = match &com {
                        Some(c) => base + e >= croot.nr_blocks || bitmap_get(c, e)? == 0,
                        None => true,
                    };
                    if cfree && !self.is_reserved(base + e) {
                        return Ok(base + e);
                    }
                }
                e += 1;
            }
        }
        Err(CoreError::NoSpace)
    }

    /// Makes the metadata index block writable (shadowing it once per transaction).
    fn ensure_index_writable(&mut self) -> CoreResult<()> {
        let loc = self.msm.bitmap_root;
        if self.meta_is_new(loc)? {
            return Ok(());
        }
        let new = self.find_free(SmKind::Meta, self.meta_hint)?;
        self.reserve(new)?;
        self.store.copy(loc, new, BlockKind::Index)?;
        self.msm.bitmap_root = new;
        let r = self.sm_set(SmKind::Meta, new, 1);
        self.unreserve(new);
        r?;
        self.meta_sm_dec(loc)
    }

    /// Returns the location of bitmap `i`, shadowing it if it belongs to the
    /// committed state.
    fn writable_bitmap(&mut self, sm: SmKind, i: u64) -> CoreResult<u64> {
        if sm == SmKind::Meta {
            self.ensure_index_writable()?;
        }
        let mut ie = self.index_entry(sm, false, i)?;
        let loc = ie.blocknr;
        if self.meta_is_new(loc)? {
            return Ok(loc);
        }
        let new = match sm {
            SmKind::Meta => {
                // Prefer a block inside this bitmap's own range (see module docs).
                let new = self.find_free(SmKind::Meta, i * ENTRIES_PER_BITMAP)?;
                self.reserve(new)?;
                self.store.copy(loc, new, BlockKind::Bitmap)?;
                ie.blocknr = new;
                self.set_index_entry(sm, i, ie)?;
                let r = self.sm_set(SmKind::Meta, new, 1);
                self.unreserve(new);
                r?;
                new
            }
            SmKind::Data => {
                let new = self.meta_alloc()?;
                self.store.copy(loc, new, BlockKind::Bitmap)?;
                ie.blocknr = new;
                self.set_index_entry(sm, i, ie)?;
                new
            }
        };
        self.meta_sm_dec(loc)?;
        Ok(new)
    }

    /// Sets the count of `b` in a space map.
    pub(crate) fn sm_set(&mut self, sm: SmKind, b: u64, v: u32) -> CoreResult<()> {
        if sm == SmKind::Meta {
            if self.sm_depth >= MAX_SM_DEPTH {
                return Err(CoreError::Internal);
            }
            self.sm_depth += 1;
            let r = self.sm_set_inner(sm, b, v);
            self.sm_depth -= 1;
            r
        } else {
            self.sm_set_inner(sm, b, v)
        }
    }

    fn sm_set_inner(&mut self, sm: SmKind, b: u64, v: u32) -> CoreResult<()> {
        if sm == SmKind::Meta && v != 1 {
            self.forget_new(b);
        }
        let old = self.sm_count(sm, false, b)?;
        if old == v {
            return Ok(());
        }
        if v >= 3 || old >= 3 {
            if sm == SmKind::Meta && self.sm_depth > 1 {
                return Err(CoreError::Internal);
            }
            let rc = self.root(sm, false).ref_count_root;
            let r = if v >= 3 {
                self.btree_insert(rc, b, &v.to_le_bytes(), TreeKind::RefCount)?
                    .0
            } else {
                self.btree_remove(rc, b, TreeKind::RefCount)?.0
            };
            self.root_mut(sm).ref_count_root = r;
        }
        let i = b / ENTRIES_PER_BITMAP;
        let e = b % ENTRIES_PER_BITMAP;
        let loc = self.writable_bitmap(sm, i)?;
        {
            let mut g = self.store.write(loc, BlockKind::Bitmap)?;
            bitmap_set(&mut g, e, v)?;
        }
        if (old == 0) != (v == 0) {
            let mut ie = self.index_entry(sm, false, i)?;
            let e32 = e as u32;
            if v > 0 {
                ie.nr_free = ie
                    .nr_free
                    .checked_sub(1)
                    .ok_or(corrupt(Corruption::SpaceMap))?;
                if ie.none_free_before == e32 {
                    ie.none_free_before = e32 + 1;
                }
                let r = self.root_mut(sm);
                r.nr_allocated = r.nr_allocated.saturating_add(1);
            } else {
                self.count_freed(sm, &mut ie, e32, 1)?;
            }
            self.set_index_entry(sm, i, ie)?;
        }
        Ok(())
    }

    /// Increments a count, returning the new count.
    pub(crate) fn sm_inc(&mut self, sm: SmKind, b: u64) -> CoreResult<u32> {
        let c = self.sm_count(sm, false, b)?;
        let n = c.checked_add(1).ok_or(corrupt(Corruption::RefCount))?;
        self.sm_set(sm, b, n)?;
        Ok(n)
    }

    /// Decrements a count, returning the new count.
    pub(crate) fn sm_dec(&mut self, sm: SmKind, b: u64) -> CoreResult<u32> {
        let c = self.sm_count(sm, false, b)?;
        let n = c.checked_sub(1).ok_or(corrupt(Corruption::RefCount))?;
        self.sm_set(sm, b, n)?;
        Ok(n)
    }

    /// Decrements the counts of the `len` data blocks from `b` on, as
    /// `sm_dec` on each would: each bitmap the run covers is made writable,
    /// and its index entry updated, once.
    pub(crate) fn data_dec_run(&mut self, b: u64, len: u64) -> CoreResult<()> {
        let end = b
            .checked_add(len)
            .ok_or(corrupt(Corruption::BlockOutOfRange))?;
        if end > self.dsm.nr_blocks {
            return Err(corrupt(Corruption::BlockOutOfRange));
        }
        let mut at = b;
        while at < end {
            let i = at / ENTRIES_PER_BITMAP;
            let base = i * ENTRIES_PER_BITMAP;
            let stop = end.min(base + ENTRIES_PER_BITMAP);
            self.data_dec_in_bitmap(i, at - base, stop - base)?;
            at = stop;
        }
        Ok(())
    }

    /// Decrements entries `first..last` of data bitmap `i`.
    fn data_dec_in_bitmap(&mut self, i: u64, first: u64, last: u64) -> CoreResult<()> {
        // Counts of 3 and more live in the overflow tree: such a run goes
        // block by block, through the general path.
        let overflow = {
            let ie = self.index_entry(SmKind::Data, false, i)?;
            let g = self.store.read(ie.blocknr, BlockKind::Bitmap)?;
            let mut overflow = false;
            for e in first..last {
                match bitmap_get(&g, e)? {
                    0 => return Err(corrupt(Corruption::RefCount)),
                    3 => overflow = true,
                    _ => {}
                }
            }
            overflow
        };
        if overflow {
            for e in first..last {
                self.sm_dec(SmKind::Data, i * ENTRIES_PER_BITMAP + e)?;
            }
            return Ok(());
        }
        let loc = self.writable_bitmap(SmKind::Data, i)?;
        let (mut freed, mut first_freed) = (0u32, None);
        {
            let mut g = self.store.write(loc, BlockKind::Bitmap)?;
            for e in first..last {
                let v = bitmap_get(&g, e)?;
                let n = v.checked_sub(1).ok_or(corrupt(Corruption::RefCount))?;
                bitmap_set(&mut g, e, n)?;
                if n == 0 {
                    freed += 1;
                    first_freed.get_or_insert(e as u32);
                }
            }
        }
        if let Some(first_freed) = first_freed {
            let mut ie = self.index_entry(SmKind::Data, false, i)?;
            self.count_freed(SmKind::Data, &mut ie, first_freed, freed)?;
            self.set_index_entry(SmKind::Data, i, ie)?;
        }
        Ok(())
    }

    /// Accounts for `n` entries of one bitmap whose counts dropped to zero,
    /// the first of them entry `first`: its index entry `ie` (which the
    /// caller writes back), the map's allocated count and, for the data
    /// map, the running count of freed blocks that arms the reuse grace
    /// period. One place for every path that frees, so none can miss a
    /// part.
    fn count_freed(
        &mut self,
        sm: SmKind,
        ie: &mut IndexEntry,
        first: u32,
        n: u32,
    ) -> CoreResult<()> {
        ie.nr_free = ie.nr_free.saturating_add(n).min(ENTRIES_PER_BITMAP as u32);
        ie.none_free_before = ie.none_free_before.min(first);
        let r = self.root_mut(sm);
        r.nr_allocated = r
            .nr_allocated
            .checked_sub(u64::from(n))
            .ok_or(corrupt(Corruption::SpaceMap))?;
        if sm == SmKind::Data {
            self.data_blocks_freed = self.data_blocks_freed.wrapping_add(u64::from(n));
        }
        Ok(())
    }

    fn meta_sm_dec(&mut self, b: u64) -> CoreResult<()> {
        self.sm_dec(SmKind::Meta, b).map(|_| ())
    }

    /// Allocates a metadata block (count 1). The caller initialises it.
    pub(crate) fn meta_alloc(&mut self) -> CoreResult<u64> {
        let b = self.find_free(SmKind::Meta, self.meta_hint)?;
        self.reserve(b)?;
        let r = self.sm_set(SmKind::Meta, b, 1);
        self.unreserve(b);
        r?;
        self.meta_hint = b.saturating_add(1);
        self.meta_new_blocks = self.meta_new_blocks.saturating_add(1);
        self.note_new(b);
        let (_, free) = self.meta_space();
        self.meta_low_water.note(free);
        Ok(b)
    }

    /// Allocates a data block (count 1).
    pub(crate) fn data_alloc(&mut self) -> CoreResult<u64> {
        let b = self.find_free(SmKind::Data, self.data_hint)?;
        self.sm_set(SmKind::Data, b, 1)?;
        self.data_hint = b.saturating_add(1);
        Ok(b)
    }

    /// Grows the data space map to `new_nr` blocks.
    pub(crate) fn data_extend(&mut self, new_nr: u64) -> CoreResult<()> {
        let old = self.dsm.nr_blocks;
        if new_nr < old {
            return Err(CoreError::Invalid);
        }
        self.write_dirty_data_ies()?;
        for i in nr_bitmaps(old)..nr_bitmaps(new_nr) {
            let loc = self.meta_alloc()?;
            let _ = self.store.zeroed(loc, BlockKind::Bitmap)?;
            let ie = IndexEntry {
                blocknr: loc,
                nr_free: ENTRIES_PER_BITMAP as u32,
                none_free_before: 0,
            };
            let (r, _) =
                self.btree_insert(self.dsm.bitmap_root, i, &ie.encode(), TreeKind::DataIndex)?;
            self.dsm.bitmap_root = r;
        }
        self.dsm.nr_blocks = new_nr;
        self.forget_cached();
        Ok(())
    }

    /// Grows the metadata space map to `new_nr` blocks (at most
    /// [`MAX_METADATA_BLOCKS`] and the store's size). Works even when the
    /// current map has no free block left: every block it needs comes from
    /// the new area, which is free in the current and the committed map.
    ///
    /// * Each new bitmap is placed at the first block of its own range, with
    ///   its own count set.
    /// * If the index block belongs to the committed state, its copy goes to
    ///   the first block of the new area that is not a bitmap; that block is
    ///   "new" (beyond the committed map), so the index entries of the new
    ///   bitmaps are written into it in place, and its count is recorded once
    ///   the map covers it.
    pub(crate) fn meta_extend(&mut self, new_nr: u64) -> CoreResult<()> {
        let old = self.msm.nr_blocks;
        if new_nr < old || new_nr > MAX_METADATA_BLOCKS || new_nr > self.store.nr_blocks() {
            return Err(CoreError::Invalid);
        }
        if new_nr == old {
            return Ok(());
        }
        let old_index = self.msm.bitmap_root;
        let moved_index = if self.meta_is_new(old_index)? {
            None
        } else {
            let x = if old % ENTRIES_PER_BITMAP != 0 {
                old
            } else {
                old + 1
            };
            if x >= new_nr {
                return Err(CoreError::NoSpace);
            }
            self.store.copy(old_index, x, BlockKind::Index)?;
            self.msm.bitmap_root = x;
            Some(x)
        };
        let first_new = nr_bitmaps(old);
        let last = nr_bitmaps(new_nr);
        for i in first_new..last {
            let loc = i * ENTRIES_PER_BITMAP;
            {
                let mut g = self.store.zeroed(loc, BlockKind::Bitmap)?;
                bitmap_set(&mut g, 0, 1)?;
            }
            let ie = IndexEntry {
                blocknr: loc,
                nr_free: (ENTRIES_PER_BITMAP - 1) as u32,
                none_free_before: 1,
            };
            let off = INDEX_ENTRIES_OFF + (i as usize) * INDEX_ENTRY_SIZE;
            let mut g = self.store.write(self.msm.bitmap_root, BlockKind::Index)?;
            crate::pdata::codec::bytes_mut(&mut g, off, INDEX_ENTRY_SIZE)?
                .copy_from_slice(&ie.encode());
        }
        self.msm.nr_blocks = new_nr;
        self.forget_cached();
        self.msm.nr_allocated = self.msm.nr_allocated.saturating_add(last - first_new);
        self.meta_new_blocks = self.meta_new_blocks.saturating_add(last - first_new);
        if let Some(x) = moved_index {
            self.reserve(x)?;
            let r = self.sm_set(SmKind::Meta, x, 1);
            self.unreserve(x);
            r?;
            self.meta_new_blocks = self.meta_new_blocks.saturating_add(1);
            self.meta_sm_dec(old_index)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn bitmap_encoding_matches_format() {
        let mut b = vec![0u8; 4096];
        bitmap_set(&mut b, 0, 1).unwrap();
        assert_eq!(b[16], 0x02);
        bitmap_set(&mut b, 0, 2).unwrap();
        assert_eq!(b[16], 0x01);
        bitmap_set(&mut b, 0, 7).unwrap();
        assert_eq!(b[16], 0x03);
        bitmap_set(&mut b, 0, 0).unwrap();
        bitmap_set(&mut b, 1, 1).unwrap();
        assert_eq!(b[16], 0x08);
        for e in [0u64, 5, 16319] {
            for v in 0..4 {
                bitmap_set(&mut b, e, v).unwrap();
                assert_eq!(bitmap_get(&b, e).unwrap(), v);
            }
        }
        assert!(bitmap_get(&b, 16320 + 4 * 4096).is_err());
        assert_eq!(nr_bitmaps(0), 0);
        assert_eq!(nr_bitmaps(16320), 1);
        assert_eq!(nr_bitmaps(16321), 2);
    }
}
