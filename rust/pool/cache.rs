// SPDX-License-Identifier: GPL-2.0
//! The pool's mapping cache (`mapping_cache`): its memory, its size, and the
//! handles of its writers and readers.
//!
//! Writers are the pool's workers and message handlers, under the pool lock
//! ([`PoolCache`], owned by `PoolState`), filling it from the metadata or
//! from a walk of the last commit made without the lock; readers are the
//! thin targets' map calls, under `rcu_read_lock` ([`PoolCacheReader`]).
//! When the pool grows past what its cache was sized for, the owner swaps in
//! a bigger, empty one ([`PoolCache::grow_for`]).

use core::sync::atomic::AtomicU64;
use kernel::{prelude::*, sync::rcu};

use super::PoolState;
use crate::{
    core_error::CoreError,
    glue::rcu_box::{RcuBox, RcuReader},
    metadata::committed::ReadStamp,
    metadata::mapping_cache::{
        next_share_gen, slots_for, CachedMapping, MappingCache, WORDS_PER_SLOT,
    },
    metadata::thin_metadata::{LookupResult, Mapping},
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

/// How many deleted devices may leave entries in the cache before one pass
/// over the slots drops them all.
const DELETED_DEVS_MAX: usize = 64;

/// The writers' handle (the pool lock's holder).
pub(crate) struct PoolCache {
    slots: RcuBox<CacheSlots>,
    /// The thin devices that may have entries: every device that had a
    /// target since the pool object was made (only a target's bios fill the
    /// cache), with its share generation (`mapping_cache`'s
    /// `next_share_gen`). Deleting any other device leaves nothing behind,
    /// as for the thousands of snapshots LVM users keep.
    filled_devs: KVec<FilledDev>,
    /// Deleted devices that had a target: their entries may still be in the
    /// slots, where nothing reads them (a deleted device has no target, and
    /// every lookup is a target's). A new target of a device with one of
    /// these ids drops them first (ids are reused); once the list is full,
    /// one pass drops them all. So a delete costs no pass over the slots,
    /// which are sized by the pool (64 MiB in any pool over 64 GiB): the
    /// `lvremove` of a thin that was active. Kept sorted as ids go in (the
    /// pass binary-searches it): not `sort_unstable`, whose panic on an
    /// inconsistent order objtool does not know to be noreturn with the
    /// rustc distribution kernels are built by (Debian's 1.85).
    deleted_devs: KVec<u32>,
}

/// A thin device that may have entries in the cache.
struct FilledDev {
    dev: u32,
    /// Raised by each snapshot of the device: entries from before it answer
    /// as shared.
    share_gen: u32,
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
        let cache = Self {
            slots,
            filled_devs: KVec::new(),
            deleted_devs: KVec::with_capacity(DELETED_DEVS_MAX, GFP_KERNEL)?,
        };
        Ok((cache, reader))
    }

    /// Notes that thin device `dev` has a target now: its bios may fill the
    /// cache. Returns the device's share generation, which the target reads
    /// and publishes with. A deleted device's entries under the same id are
    /// dropped first.
    pub(crate) fn note_target_of(&mut self, dev: u32) -> Result<u32> {
        if let Some(f) = self.filled_devs.iter().find(|f| f.dev == dev) {
            return Ok(f.share_gen);
        }
        if let Some(i) = self.deleted_devs.iter().position(|&d| d == dev) {
            if let Some(c) = self.get() {
                c.invalidate_dev(dev);
            }
            let _ = self.deleted_devs.remove(i);
        }
        let share_gen = 0;
        self.filled_devs
            .push(FilledDev { dev, share_gen }, GFP_KERNEL)?;
        Ok(share_gen)
    }

    /// Thin device `dev` was snapshotted: its next share generation, which
    /// makes every entry it has answer as shared; `None` if the cache holds
    /// none of its mappings. Marks the entries shared one by one when the
    /// generation's low bits come round again.
    pub(super) fn next_share_gen(&mut self, dev: u32) -> Option<u32> {
        let f = self.filled_devs.iter_mut().find(|f| f.dev == dev)?;
        let (gen, wrapped) = next_share_gen(f.share_gen);
        f.share_gen = gen;
        if wrapped {
            if let Some(c) = self.get() {
                c.mark_dev_shared(dev);
            }
        }
        Some(gen)
    }

    /// Forgets the mappings of thin device `dev` (it was deleted; no target
    /// of it is left to read them): notes them for a later pass
    /// ([`Self::deleted_devs`]).
    pub(super) fn forget_dev(&mut self, dev: u32) {
        let Some(i) = self.filled_devs.iter().position(|f| f.dev == dev) else {
            return;
        };
        let _ = self.filled_devs.remove(i);
        if self.deleted_devs.len() == DELETED_DEVS_MAX {
            self.forget_deleted();
        }
        if let Err(at) = self.deleted_devs.binary_search(&dev) {
            // Cannot fail: the list was made with room for the most it holds.
            let _ = self.deleted_devs.insert_within_capacity(at, dev);
        }
    }

    /// Drops the entries of every device in `deleted_devs`, in one pass.
    fn forget_deleted(&mut self) {
        if let Some(c) = self.get() {
            c.invalidate_devs(&self.deleted_devs);
        }
        self.deleted_devs.clear();
    }

    /// Forgets every entry (the metadata rolled back). Map calls may still
    /// read the old ones until the next RCU grace period.
    fn clear(&mut self) {
        if let Some(c) = self.get() {
            c.clear();
        }
        self.deleted_devs.clear();
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
            self.deleted_devs.clear();
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

impl PoolState {
    /// Forgets every cached mapping (the metadata rolled back) and waits
    /// until no map call can still use one.
    pub(super) fn forget_mappings(&mut self) {
        self.cache.clear();
        rcu::synchronize_rcu();
    }

    /// The mapping of `vblock` of thin device `dev` as (data block,
    /// shared), from the cache where it answers as the metadata would (any
    /// entry for a read, an unshared one for a write: a shared entry may be
    /// stale the other way), else from the B-tree ([`Self::lookup_and_cache`]).
    /// Bios deferred while their block was being provisioned find it here
    /// without a walk and a leaf's worth of cache updates each.
    ///
    /// `share_gen` is the device's share generation, as its target has it.
    pub(crate) fn lookup_for(
        &self,
        dev: u32,
        vblock: u64,
        write: bool,
        share_gen: u32,
    ) -> Result<Option<(u64, bool)>, CoreError> {
        if let Some(m) = self.cache.get().and_then(|c| c.get(dev, vblock, share_gen)) {
            if !(write && m.shared) {
                return Ok(Some((m.data_block, m.shared)));
            }
        }
        match self.lookup_and_cache(dev, vblock, share_gen) {
            Ok(found) => Ok(found.map(|r| (r.mapping.data_block, r.shared))),
            Err(e) => {
                // dm-thin's DMERR_LIMIT in process_cell: the bio fails, the
                // pool goes on.
                if self.lookup_log.allow() {
                    pr_err!(
                        "{}: dm_thin_find_block() failed: error = -{}\n",
                        self.name(),
                        e.errno()
                    );
                }
                Err(e)
            }
        }
    }

    /// Looks up `vblock` of thin device `dev` and caches every mapping of
    /// the B-tree leaf it lives in: one walk serves its neighbours' first
    /// touch too.
    fn lookup_and_cache(
        &self,
        dev: u32,
        vblock: u64,
        share_gen: u32,
    ) -> Result<Option<LookupResult>, CoreError> {
        let cache = self.cache.get();
        self.md.lookup_leaf(dev.into(), vblock, |k, r| {
            if let Some(c) = &cache {
                c.publish(dev, k, r.into(), share_gen);
            }
        })
    }

    /// Caches the leaf a walk of the last commit found
    /// (`CommittedView::lookup_leaf`) if it is still current: no commit
    /// ended since the walk began, and thin device `dev` has no change that
    /// commit does not cover (`changed`, its change generation read under
    /// this lock, where changes are made). Sharing follows the device's
    /// details now (a snapshot since the commit makes its blocks shared);
    /// `share_gen` is the device's share generation, as its target has it.
    pub(crate) fn cache_committed_leaf(
        &self,
        dev: u32,
        stamp: &ReadStamp,
        changed: u64,
        leaf: &[(u64, Mapping)],
        share_gen: u32,
    ) {
        if !self.committed.unchanged_since(stamp) || changed > stamp.covers {
            return;
        }
        let (Some(c), Ok(Some(details))) = (self.cache.get(), self.md.device_details(dev.into()))
        else {
            return;
        };
        for &(vblock, mapping) in leaf {
            c.publish(
                dev,
                vblock,
                LookupResult::new(&details, mapping).into(),
                share_gen,
            );
        }
    }

    /// Caches a mapping just made: `vblock` of `dev` is `data_block`,
    /// unshared at the device's share generation `share_gen`.
    pub(crate) fn cache_new_mapping(&self, dev: u32, vblock: u64, data_block: u64, share_gen: u32) {
        if let Some(c) = self.cache.get() {
            let shared = false;
            c.publish(dev, vblock, CachedMapping { data_block, shared }, share_gen);
        }
    }
}

/// Scenarios for the module's KUnit suite.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    use super::*;

    /// An entry of a device answers as shared after each of its snapshots,
    /// through the wrap of the share generation's low bits at the 256th;
    /// a device that never had a target has no generation to raise, and a
    /// new target of a device gets its generation now.
    pub(crate) fn share_generation_wraps() -> bool {
        let Ok((mut cache, _reader)) = PoolCache::new(1024) else {
            return false;
        };
        let Ok(gen) = cache.note_target_of(7) else {
            return false;
        };
        let unshared = CachedMapping {
            data_block: 11,
            shared: false,
        };
        let mut ok = gen == 0 && cache.get().is_some_and(|c| c.publish(7, 1, unshared, gen));
        let mut gen = gen;
        for _ in 0..300 {
            let Some(next) = cache.next_share_gen(7) else {
                return false;
            };
            gen = next;
            ok &= cache
                .get()
                .and_then(|c| c.get(7, 1, gen))
                .is_some_and(|m| m.shared);
        }
        ok && cache.next_share_gen(8).is_none() && cache.note_target_of(7).ok() == Some(gen)
    }

    /// A deleted device's entries answer no new target of a device with the
    /// same id; they stay in the slots until then (a delete makes no pass),
    /// or until the list of deleted devices is full, when one pass drops
    /// them all; a live device keeps its entries throughout.
    pub(crate) fn deleted_devs_are_forgotten() -> bool {
        let Ok((mut cache, _reader)) = PoolCache::new(4096) else {
            return false;
        };
        let at = |data_block| CachedMapping {
            data_block,
            shared: false,
        };
        let publish =
            |cache: &PoolCache, dev, b| cache.get().is_some_and(|c| c.publish(dev, b, at(b), 0));
        let cached =
            |cache: &PoolCache, dev, b| cache.get().and_then(|c| c.get(dev, b, 0)).is_some();
        let mut ok = cache.note_target_of(1).is_ok() && publish(&cache, 1, 5);
        ok &= cache.note_target_of(7).is_ok() && publish(&cache, 7, 3);
        cache.forget_dev(7);
        ok &= cached(&cache, 7, 3);
        ok &= cache.note_target_of(7).ok() == Some(0) && !cached(&cache, 7, 3);
        let first = 100;
        let last = first + DELETED_DEVS_MAX as u32;
        // Deleted in descending order: the pass binary-searches the list,
        // which `forget_dev` keeps sorted whatever the order of deletes.
        for dev in (first..=last).rev() {
            ok &= cache.note_target_of(dev).is_ok() && publish(&cache, dev, 0);
            cache.forget_dev(dev);
        }
        ok &= (first + 1..=last).all(|dev| !cached(&cache, dev, 0));
        ok && cached(&cache, first, 0) && cached(&cache, 1, 5)
    }
}
