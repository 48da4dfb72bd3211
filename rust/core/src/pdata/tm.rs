// SPDX-License-Identifier: GPL-2.0
//! Transaction manager: the block store plus the in-core roots of both space
//! maps, for the current transaction and for the last commit.
//!
//! All persistent state lives in blocks; the in-core state is a handful of
//! roots. Consequently:
//!
//! * "allocated in this transaction" is exactly "count 0 in the committed
//!   metadata space map" (a block may only be allocated if it is free in both
//!   the current and the committed map), so no shadow set is needed: a block
//!   is written in place iff its committed count is 0 and its current count
//!   is 1. Two small caches spare the common cases the block reads: the
//!   blocks allocated lately in this transaction and still referenced once
//!   ([`Tm::known_new`]: shadowing one is a no-op that reads nothing) and the
//!   space maps' index entries read or written lately ([`Tm::cached_ie`]);
//!   both are dropped at commit, abort and resize, when roots change. And
//!   like dm-thin's space maps, the data space map's changed index entries
//!   stay in core ([`Tm::dirty_data_ie`]) until the commit writes them into
//!   the index tree: an allocation then costs a bitmap update, not an
//!   index-tree insert;
//! * abort is forgetting the current roots;
//! * commit is flushing the store, then writing the superblock.
//!
//! The metadata space map is self-hosted; see `space_map` for how the
//! recursion is bounded.

use core::cell::Cell;
use core::ops::{Deref, DerefMut};

use crate::core_error::{CoreError, CoreResult};
use crate::dm::events::MetadataLowWater;
use crate::pdata::block_store::BlockStore;
use crate::pdata::space_map::index::{IndexEntry, SmKind};
use crate::pdata::space_map::root::SmRoot;

/// Slots of the cache of blocks allocated in this transaction.
const NEW_CACHE_SLOTS: usize = 128;
/// Slots of the index-entry cache.
const IE_CACHE_SLOTS: usize = 8;
/// Slots of the data space map's changed index entries (each covers a
/// bitmap's 16,320 blocks; a collision writes the older entry back early).
const DIRTY_IE_SLOTS: usize = 32;

/// Maximum number of blocks chosen for the metadata space map's own use but not
/// yet recorded in its bitmaps (see `space_map`).
const MAX_RESERVED: usize = 16;

/// The transaction manager. Crate-internal; the public face is
/// [`crate::metadata::thin_metadata::ThinMetadata`].
pub(crate) struct Tm<S: BlockStore, C: CacheMem = InlineCaches> {
    pub(crate) store: S,
    /// Metadata space map, current transaction.
    pub(crate) msm: SmRoot,
    /// Metadata space map as of the last commit (all-zero before the first).
    pub(crate) msm_c: SmRoot,
    /// Data space map, current transaction.
    pub(crate) dsm: SmRoot,
    /// Data space map as of the last commit.
    pub(crate) dsm_c: SmRoot,
    reserved: [u64; MAX_RESERVED],
    nr_reserved: usize,
    /// Nesting depth of metadata space-map updates.
    pub(crate) sm_depth: usize,
    pub(crate) meta_hint: u64,
    pub(crate) data_hint: u64,
    /// Metadata blocks allocated in this transaction.
    pub(crate) meta_new_blocks: u64,
    /// Data blocks whose count fell to zero since the object was made, in
    /// any transaction (an abort does not take it back): whoever hands
    /// freed blocks out again compares it across a commit, whatever path
    /// freed them.
    pub(crate) data_blocks_freed: u64,
    /// The metadata low-water threshold, checked at every metadata
    /// allocation as dm-space-map-metadata checks its threshold.
    pub(crate) meta_low_water: MetaThreshold,
    /// The caches, inline or on the heap.
    caches: C,
}

/// The transaction manager's caches (a few KiB).
pub struct TmCaches {
    /// Metadata blocks allocated lately in this transaction whose count is
    /// still 1, direct-mapped (`u32::MAX`: empty; metadata block numbers
    /// fit 32 bits, see `MAX_METADATA_BLOCKS`).
    new_cache: [Cell<u32>; NEW_CACHE_SLOTS],
    /// Index entries read or written lately, direct-mapped by bitmap, with
    /// their key ([`ie_key`]).
    ie_cache: [Cell<Option<(u64, IndexEntry)>>; IE_CACHE_SLOTS],
    /// The data space map's index entries changed in this transaction and
    /// not yet written to its index tree, direct-mapped by bitmap.
    dirty_ie: [DirtyIe; DIRTY_IE_SLOTS],
}

impl TmCaches {
    /// Empty caches.
    pub const fn new() -> Self {
        TmCaches {
            new_cache: [const { Cell::new(u32::MAX) }; NEW_CACHE_SLOTS],
            ie_cache: [const { Cell::new(None) }; IE_CACHE_SLOTS],
            dirty_ie: [DirtyIe::EMPTY; DIRTY_IE_SLOTS],
        }
    }
}

impl Default for TmCaches {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the metadata keeps its [`TmCaches`]: inline ([`InlineCaches`], the
/// default) or, where the metadata object is built on a small stack (the
/// kernel's), in a heap box.
pub trait CacheMem: DerefMut<Target = TmCaches> {}

impl<T: DerefMut<Target = TmCaches>> CacheMem for T {}

/// [`TmCaches`] kept inline in the metadata object.
#[derive(Default)]
pub struct InlineCaches(TmCaches);

impl Deref for InlineCaches {
    type Target = TmCaches;
    fn deref(&self) -> &TmCaches {
        &self.0
    }
}

impl DerefMut for InlineCaches {
    fn deref_mut(&mut self) -> &mut TmCaches {
        &mut self.0
    }
}

/// A changed index entry of the data space map, packed (`bitmap`
/// `u32::MAX`: empty slot). Entries that do not fit are written at once.
#[derive(Clone, Copy)]
struct DirtyIe {
    bitmap: u32,
    blocknr: u32,
    nr_free: u32,
    none_free_before: u32,
}

impl DirtyIe {
    const EMPTY: Self = DirtyIe {
        bitmap: u32::MAX,
        blocknr: 0,
        nr_free: 0,
        none_free_before: 0,
    };

    fn pack(i: u64, ie: IndexEntry) -> Option<Self> {
        let bitmap = u32::try_from(i).ok().filter(|&b| b != u32::MAX)?;
        Some(DirtyIe {
            bitmap,
            blocknr: u32::try_from(ie.blocknr).ok()?,
            nr_free: ie.nr_free,
            none_free_before: ie.none_free_before,
        })
    }

    fn unpack(self) -> Option<(u64, IndexEntry)> {
        (self.bitmap != u32::MAX).then_some((
            u64::from(self.bitmap),
            IndexEntry {
                blocknr: u64::from(self.blocknr),
                nr_free: self.nr_free,
                none_free_before: self.none_free_before,
            },
        ))
    }
}

/// The metadata low-water threshold of the metadata space map: set by the
/// pool, checked against the free count after each allocation, remembered
/// until the pool asks ([`Self::take_crossed`]).
#[derive(Default)]
pub(crate) struct MetaThreshold {
    threshold: Option<u64>,
    edges: MetadataLowWater,
    crossed: bool,
}

impl MetaThreshold {
    /// Sets the threshold (free blocks at or below which it fires).
    pub(crate) fn set(&mut self, threshold: u64) {
        self.threshold = Some(threshold);
    }

    /// Records `free` metadata blocks after an allocation.
    pub(crate) fn note(&mut self, free: u64) {
        if let Some(t) = self.threshold {
            self.crossed |= self.edges.check(free, t);
        }
    }

    /// True (once) if an allocation crossed the threshold since the last call.
    pub(crate) fn take_crossed(&mut self) -> bool {
        core::mem::take(&mut self.crossed)
    }
}

/// The index-entry cache's key of entry `i` of a map.
fn ie_key(sm: SmKind, committed: bool, i: u64) -> u64 {
    (i << 2) | (u64::from(sm == SmKind::Data) << 1) | u64::from(committed)
}

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    pub(crate) fn new(store: S, caches: C, msm: SmRoot, dsm: SmRoot, committed: bool) -> Self {
        let zero = SmRoot::default();
        let mut tm = Tm {
            store,
            msm,
            msm_c: if committed { msm } else { zero },
            dsm,
            dsm_c: if committed { dsm } else { zero },
            reserved: [0; MAX_RESERVED],
            nr_reserved: 0,
            sm_depth: 0,
            meta_hint: 0,
            data_hint: 0,
            meta_new_blocks: 0,
            data_blocks_freed: 0,
            meta_low_water: MetaThreshold::default(),
            caches,
        };
        // The caches may come from an earlier use (`C` may be a `&mut
        // TmCaches` lent to one metadata object after another).
        tm.forget_cached();
        tm.caches.dirty_ie = [DirtyIe::EMPTY; DIRTY_IE_SLOTS];
        tm
    }

    /// Drops both caches (the roots change).
    pub(crate) fn forget_cached(&self) {
        for c in &self.caches.new_cache {
            c.set(u32::MAX);
        }
        for c in &self.caches.ie_cache {
            c.set(None);
        }
    }

    /// Notes that metadata block `b` was allocated in this transaction.
    pub(crate) fn note_new(&self, b: u64) {
        if let (Some(c), Ok(b32)) = (self.new_slot(b), u32::try_from(b)) {
            c.set(b32);
        }
    }

    fn new_slot(&self, b: u64) -> Option<&Cell<u32>> {
        self.caches
            .new_cache
            .get((b % NEW_CACHE_SLOTS as u64) as usize)
    }

    /// Forgets `b` (its count changes from 1).
    pub(crate) fn forget_new(&self, b: u64) {
        if let Some(c) = self.new_slot(b) {
            if u64::from(c.get()) == b {
                c.set(u32::MAX);
            }
        }
    }

    /// True if `b` is known to be allocated in this transaction and
    /// referenced once (false means: not known, read the space maps).
    pub(crate) fn known_new(&self, b: u64) -> bool {
        // (`u32::MAX` never is a metadata block.)
        self.new_slot(b).is_some_and(|c| u64::from(c.get()) == b)
    }

    fn ie_slot(&self, key: u64) -> Option<&Cell<Option<(u64, IndexEntry)>>> {
        self.caches
            .ie_cache
            .get(((key >> 1) % IE_CACHE_SLOTS as u64) as usize)
    }

    /// The cached index entry `i` of a map, if any.
    pub(crate) fn cached_ie(&self, sm: SmKind, committed: bool, i: u64) -> Option<IndexEntry> {
        let key = ie_key(sm, committed, i);
        match self.ie_slot(key)?.get() {
            Some((k, ie)) if k == key => Some(ie),
            _ => None,
        }
    }

    /// Forgets index entry `i` of a map.
    pub(crate) fn uncache_ie(&self, sm: SmKind, committed: bool, i: u64) {
        let key = ie_key(sm, committed, i);
        if let Some(c) = self.ie_slot(key) {
            if c.get().is_some_and(|(k, _)| k == key) {
                c.set(None);
            }
        }
    }

    /// Caches index entry `i` of a map (as read, or as just written).
    pub(crate) fn cache_ie(&self, sm: SmKind, committed: bool, i: u64, ie: IndexEntry) {
        let key = ie_key(sm, committed, i);
        if let Some(c) = self.ie_slot(key) {
            c.set(Some((key, ie)));
        }
    }

    /// The changed, unwritten index entry of data bitmap `i`, if any.
    pub(crate) fn dirty_data_ie(&self, i: u64) -> Option<IndexEntry> {
        let (j, ie) = self
            .caches
            .dirty_ie
            .get((i % DIRTY_IE_SLOTS as u64) as usize)?
            .unpack()?;
        (j == i).then_some(ie)
    }

    /// Records the changed index entry of data bitmap `i`; returns what the
    /// caller must write to the index tree now: the entry it displaces (of
    /// another bitmap), or itself if it cannot be kept.
    pub(crate) fn put_dirty_data_ie(
        &mut self,
        i: u64,
        ie: IndexEntry,
    ) -> Option<(u64, IndexEntry)> {
        let slot = self
            .caches
            .dirty_ie
            .get_mut((i % DIRTY_IE_SLOTS as u64) as usize)?;
        match DirtyIe::pack(i, ie) {
            Some(packed) => core::mem::replace(slot, packed)
                .unpack()
                .filter(|(j, _)| *j != i),
            None => {
                // Written at once: no older version of it may stay behind.
                if slot.unpack().is_some_and(|(j, _)| j == i) {
                    *slot = DirtyIe::EMPTY;
                }
                Some((i, ie))
            }
        }
    }

    /// Takes one changed data index entry out, to be written.
    pub(crate) fn take_dirty_data_ie(&mut self) -> Option<(u64, IndexEntry)> {
        self.caches
            .dirty_ie
            .iter_mut()
            .find_map(|s| core::mem::replace(s, DirtyIe::EMPTY).unpack())
    }

    /// Makes the current state the committed one (after the superblock is durable).
    pub(crate) fn mark_committed(&mut self) {
        self.msm_c = self.msm;
        self.dsm_c = self.dsm;
        self.forget_cached();
        self.meta_new_blocks = 0;
        self.nr_reserved = 0;
        self.sm_depth = 0;
    }

    /// Throws the current transaction away.
    /// Metadata space as (total, free): the committed free count minus
    /// this transaction's allocations, as dm-thin counts it (frees count
    /// only once committed).
    pub(crate) fn meta_space(&self) -> (u64, u64) {
        let c = self.msm_c;
        let (total, alloc) = if c.nr_blocks == 0 {
            (self.msm.nr_blocks, self.msm.nr_allocated)
        } else {
            (
                c.nr_blocks,
                c.nr_allocated.saturating_add(self.meta_new_blocks),
            )
        };
        (total, total.saturating_sub(alloc))
    }

    pub(crate) fn rollback(&mut self) {
        self.msm = self.msm_c;
        self.dsm = self.dsm_c;
        self.forget_cached();
        self.caches.dirty_ie = [DirtyIe::EMPTY; DIRTY_IE_SLOTS];
        self.meta_new_blocks = 0;
        self.nr_reserved = 0;
        self.sm_depth = 0;
    }

    pub(crate) fn is_reserved(&self, b: u64) -> bool {
        self.reserved
            .get(..self.nr_reserved)
            .is_some_and(|r| r.contains(&b))
    }

    pub(crate) fn reserve(&mut self, b: u64) -> CoreResult<()> {
        let slot = self
            .reserved
            .get_mut(self.nr_reserved)
            .ok_or(CoreError::Internal)?;
        *slot = b;
        self.nr_reserved += 1;
        Ok(())
    }

    pub(crate) fn unreserve(&mut self, b: u64) {
        let n = self.nr_reserved;
        if let Some(pos) = self
            .reserved
            .get(..n)
            .and_then(|r| r.iter().position(|&x| x == b))
        {
            self.reserved.copy_within(pos + 1..n, pos);
            self.nr_reserved = n - 1;
        }
    }
}
