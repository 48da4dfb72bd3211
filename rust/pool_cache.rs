// SPDX-License-Identifier: GPL-2.0
//! The pool's mapping cache (`mapping_cache`): its memory, its size, and the
//! handles of its writers and readers.
//!
//! Writers are the pool's workers and message handlers, under the pool lock
//! ([`PoolCache`], owned by `PoolState`); readers are the thin targets' map
//! calls, under `rcu_read_lock` ([`PoolCacheReader`]). When the pool grows
//! past what its cache was sized for, the owner swaps in a bigger, empty one
//! ([`PoolCache::grow_for`]).

use core::sync::atomic::AtomicU64;
use kernel::{prelude::*, sync::rcu};

use crate::{
    glue::rcu_box::{RcuBox, RcuReader},
    mapping_cache::{slots_for, MappingCache, WORDS_PER_SLOT},
};

/// Bytes of one slot.
const SLOT_BYTES: u64 = (WORDS_PER_SLOT * core::mem::size_of::<AtomicU64>()) as u64;

/// The slot memory of one cache.
pub(crate) struct CacheSlots {
    words: KVVec<AtomicU64>,
}

impl CacheSlots {
    /// `slots` empty slots.
    fn new(slots: u64) -> Result<KBox<Self>> {
        let n = usize::try_from(slots)?
            .checked_mul(WORDS_PER_SLOT)
            .ok_or(ENOMEM)?;
        let mut words = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            // Cannot fail: the capacity covers every word.
            let _ = words.push_within_capacity(AtomicU64::new(0));
        }
        Ok(KBox::new(Self { words }, GFP_KERNEL)?)
    }

    /// The cache over these slots.
    pub(crate) fn cache(&self) -> Option<MappingCache<'_>> {
        MappingCache::new(&self.words)
    }

    fn slots(&self) -> u64 {
        (self.words.len() / WORDS_PER_SLOT) as u64
    }
}

/// How many slots a pool of `nr_data_blocks` gets under the
/// `mapping_cache_mb` module parameter.
fn wanted_slots(nr_data_blocks: u64) -> u64 {
    let max_bytes = u64::from(crate::module_parameters::mapping_cache_mb.value()) << 20;
    slots_for(nr_data_blocks, max_bytes / SLOT_BYTES)
}

/// The writers' handle (the pool lock's holder).
pub(crate) struct PoolCache {
    slots: RcuBox<CacheSlots>,
}

/// A map call's handle.
pub(crate) struct PoolCacheReader {
    slots: RcuReader<CacheSlots>,
}

impl PoolCache {
    /// A cache sized for `nr_data_blocks`, and its readers' handle.
    pub(crate) fn new(nr_data_blocks: u64) -> Result<(Self, PoolCacheReader)> {
        let slots = RcuBox::new(CacheSlots::new(wanted_slots(nr_data_blocks))?)?;
        let reader = PoolCacheReader {
            slots: slots.reader(),
        };
        Ok((Self { slots }, reader))
    }

    /// The cache, for a writer.
    pub(crate) fn get(&self) -> Option<MappingCache<'_>> {
        self.slots.get().cache()
    }

    /// Swaps in a bigger, empty cache if the pool now has more data blocks
    /// than this one was sized for (waits for an RCU grace period then).
    /// Without memory for it, the pool keeps the one it has.
    pub(crate) fn grow_for(&mut self, nr_data_blocks: u64) {
        let wanted = wanted_slots(nr_data_blocks);
        if wanted <= self.slots.get().slots() {
            return;
        }
        if let Ok(bigger) = CacheSlots::new(wanted) {
            self.slots.replace(bigger);
        }
    }

    /// How many slots the cache has.
    pub(crate) fn slots(&self) -> u64 {
        self.slots.get().slots()
    }
}

impl PoolCacheReader {
    /// The cache, for a map call within `guard`'s read side.
    pub(crate) fn get<'a>(&'a self, guard: &'a rcu::Guard) -> Option<MappingCache<'a>> {
        self.slots.get(guard).cache()
    }
}
