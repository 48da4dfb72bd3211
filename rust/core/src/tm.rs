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
//!   blocks allocated lately in this transaction ([`Tm::known_new`]) and the
//!   space maps' index entries read or written lately ([`Tm::cached_ie`]);
//!   both are dropped at commit, abort and resize, when roots change;
//! * abort is forgetting the current roots;
//! * commit is flushing the store, then writing the superblock.
//!
//! The metadata space map is self-hosted; see `space_map` for how the
//! recursion is bounded.

use core::cell::Cell;

use crate::block_store::BlockStore;
use crate::core_error::{CoreError, CoreResult};
use crate::space_map::{IndexEntry, SmKind};
use crate::superblock::SmRoot;

/// Slots of the cache of blocks allocated in this transaction.
const NEW_CACHE_SLOTS: usize = 16;
/// Slots of the index-entry cache.
const IE_CACHE_SLOTS: usize = 8;

/// Maximum number of blocks chosen for the metadata space map's own use but not
/// yet recorded in its bitmaps (see `space_map`).
const MAX_RESERVED: usize = 16;

/// The transaction manager. Crate-internal; the public face is
/// [`crate::thin_metadata::ThinMetadata`].
pub(crate) struct Tm<S: BlockStore> {
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
    /// Metadata blocks allocated lately in this transaction, direct-mapped
    /// (`u64::MAX`: empty).
    new_cache: [Cell<u64>; NEW_CACHE_SLOTS],
    /// Index entries read or written lately, direct-mapped by bitmap, with
    /// their key ([`ie_key`]).
    ie_cache: [Cell<Option<(u64, IndexEntry)>>; IE_CACHE_SLOTS],
}

/// The index-entry cache's key of entry `i` of a map.
fn ie_key(sm: SmKind, committed: bool, i: u64) -> u64 {
    (i << 2) | (u64::from(sm == SmKind::Data) << 1) | u64::from(committed)
}

impl<S: BlockStore> Tm<S> {
    pub(crate) fn new(store: S, msm: SmRoot, dsm: SmRoot, committed: bool) -> Self {
        let zero = SmRoot::default();
        Tm {
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
            new_cache: [const { Cell::new(u64::MAX) }; NEW_CACHE_SLOTS],
            ie_cache: [const { Cell::new(None) }; IE_CACHE_SLOTS],
        }
    }

    /// Drops both caches (the roots change).
    pub(crate) fn forget_cached(&self) {
        for c in &self.new_cache {
            c.set(u64::MAX);
        }
        for c in &self.ie_cache {
            c.set(None);
        }
    }

    /// Notes that metadata block `b` was allocated in this transaction.
    pub(crate) fn note_new(&self, b: u64) {
        if let Some(c) = self.new_cache.get((b % NEW_CACHE_SLOTS as u64) as usize) {
            c.set(b);
        }
    }

    /// True if `b` is known to be allocated in this transaction (false
    /// means: not known, read the committed map).
    pub(crate) fn known_new(&self, b: u64) -> bool {
        self.new_cache
            .get((b % NEW_CACHE_SLOTS as u64) as usize)
            .is_some_and(|c| c.get() == b)
    }

    fn ie_slot(&self, key: u64) -> Option<&Cell<Option<(u64, IndexEntry)>>> {
        self.ie_cache
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
    pub(crate) fn rollback(&mut self) {
        self.msm = self.msm_c;
        self.dsm = self.dsm_c;
        self.forget_cached();
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
