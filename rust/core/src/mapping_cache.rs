// SPDX-License-Identifier: GPL-2.0
//! The map-path mapping cache: what lets a thin volume remap a bio in its map
//! call without a lock.
//!
//! One thin target owns a power-of-two array of 64-bit slots, indexed by the
//! low bits of the virtual block. A slot holds one resolved mapping, packed so
//! that a single atomic load gives a consistent answer:
//!
//! ```text
//!  63     62      61 .. 40            39 .. 0
//! valid  shared  tag (vblock >> bits)  data block
//! ```
//!
//! Only the pool's workers write slots, always under the pool lock, right
//! after the metadata B-tree told them the answer; the map call reads them
//! lock-free under `rcu_read_lock`. Whoever invalidates slots or marks them
//! shared (a snapshot of the device, a metadata abort) waits for an RCU grace
//! period before relying on no map call still using the old answer (a
//! discard relies on the module's in-flight tracker instead). dm-thin's data
//! block numbers fit in 40 bits (its on-disk mappings pack them so), which
//! leaves 22 tag bits: a volume of up to `slots << 22` blocks is fully
//! cacheable, and a block beyond that is simply never cached (its bios take
//! the deferred path).
//!
//! The slot array itself is memory the glue allocates; this module only
//! reads and writes it.

use core::sync::atomic::{AtomicU64, Ordering};

const VALID: u64 = 1 << 63;
const SHARED: u64 = 1 << 62;
const TAG_SHIFT: u32 = 40;
const TAG_BITS: u32 = 22;
const DATA_MASK: u64 = (1 << TAG_SHIFT) - 1;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// Largest slot count a thin target gets (2 MiB of slots): enough to hold
/// every mapping of a 16 GiB volume with 64 KiB blocks.
pub const MAX_SLOTS: u64 = 1 << 18;

/// A cached mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedMapping {
    /// The data block.
    pub data_block: u64,
    /// Writes must break sharing (go through a worker).
    pub shared: bool,
}

/// How many slots a volume of `nr_vblocks` virtual blocks gets: the next
/// power of two, at least 1, at most [`MAX_SLOTS`].
pub fn slots_for(nr_vblocks: u64) -> usize {
    let n = nr_vblocks.clamp(1, MAX_SLOTS).next_power_of_two();
    // MAX_SLOTS fits any usize the kernel runs on.
    usize::try_from(n).unwrap_or(1)
}

/// A view of one thin target's slot array.
pub struct MappingCache<'a> {
    slots: &'a [AtomicU64],
    bits: u32,
}

impl<'a> MappingCache<'a> {
    /// Wraps a slot array; `None` unless its length is a power of two.
    pub fn new(slots: &'a [AtomicU64]) -> Option<Self> {
        let len = slots.len();
        if !len.is_power_of_two() {
            return None;
        }
        Some(Self {
            slots,
            bits: len.trailing_zeros(),
        })
    }

    /// The slot and tag of `vblock`, if it is cacheable.
    fn locate(&self, vblock: u64) -> Option<(&AtomicU64, u64)> {
        let tag = vblock.checked_shr(self.bits).unwrap_or(0);
        if tag > TAG_MASK {
            return None;
        }
        let mask = (self.slots.len() as u64).wrapping_sub(1);
        let index = usize::try_from(vblock & mask).ok()?;
        Some((self.slots.get(index)?, tag))
    }

    /// The cached mapping of `vblock`, if any.
    pub fn get(&self, vblock: u64) -> Option<CachedMapping> {
        let (slot, tag) = self.locate(vblock)?;
        let v = slot.load(Ordering::Acquire);
        if v & VALID == 0 || (v >> TAG_SHIFT) & TAG_MASK != tag {
            return None;
        }
        Some(CachedMapping {
            data_block: v & DATA_MASK,
            shared: v & SHARED != 0,
        })
    }

    /// Records the mapping of `vblock` (replacing whatever the slot held).
    /// Returns false, caching nothing, if the block or the data block cannot
    /// be represented.
    pub fn publish(&self, vblock: u64, m: CachedMapping) -> bool {
        let Some((slot, tag)) = self.locate(vblock) else {
            return false;
        };
        if m.data_block > DATA_MASK {
            return false;
        }
        let shared = if m.shared { SHARED } else { 0 };
        slot.store(
            VALID | shared | (tag << TAG_SHIFT) | m.data_block,
            Ordering::Release,
        );
        true
    }

    /// Forgets `vblock` if its slot holds it.
    pub fn invalidate(&self, vblock: u64) {
        if let Some((slot, tag)) = self.locate(vblock) {
            let v = slot.load(Ordering::Relaxed);
            if v & VALID != 0 && (v >> TAG_SHIFT) & TAG_MASK == tag {
                // Only workers holding the pool lock write slots, so nothing
                // can have replaced `v` in between.
                slot.store(0, Ordering::Release);
            }
        }
    }

    /// Forgets every mapping in `[begin, end)`; walks at most one pass over
    /// the slots whatever the range.
    pub fn invalidate_range(&self, begin: u64, end: u64) {
        let len = self.slots.len() as u64;
        if end.saturating_sub(begin) >= len {
            // Every slot may hold a block of the range: test each one.
            for (i, slot) in self.slots.iter().enumerate() {
                let v = slot.load(Ordering::Relaxed);
                if v & VALID == 0 {
                    continue;
                }
                let vblock = (((v >> TAG_SHIFT) & TAG_MASK) << self.bits) | i as u64;
                if (begin..end).contains(&vblock) {
                    slot.store(0, Ordering::Release);
                }
            }
        } else {
            for vblock in begin..end {
                self.invalidate(vblock);
            }
        }
    }

    /// Marks every cached mapping shared (the device was snapshotted: its
    /// blocks stay readable in place, writes must break sharing). Only
    /// writers holding the pool lock call this, so a slot cannot change
    /// between its load and its store.
    pub fn mark_all_shared(&self) {
        for slot in self.slots {
            let v = slot.load(Ordering::Relaxed);
            if v & VALID != 0 && v & SHARED == 0 {
                slot.store(v | SHARED, Ordering::Release);
            }
        }
    }

    /// Forgets everything.
    pub fn clear(&self) {
        for slot in self.slots {
            slot.store(0, Ordering::Release);
        }
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;

    /// Publish, get, replace, invalidate and tag collisions behave.
    pub fn publish_get_invalidate() -> bool {
        let slots: [AtomicU64; 8] = Default::default();
        let Some(c) = MappingCache::new(&slots) else {
            return false;
        };
        let m = |data_block, shared| CachedMapping { data_block, shared };
        let mut ok = c.get(3).is_none();
        ok &= c.publish(3, m(77, false));
        ok &= c.get(3) == Some(m(77, false));
        // Block 11 shares slot 3 (8 slots) but not the tag.
        ok &= c.get(11).is_none();
        ok &= c.publish(11, m(5, true));
        ok &= c.get(11) == Some(m(5, true)) && c.get(3).is_none();
        // Invalidating a block that is not in its slot leaves the slot.
        c.invalidate(3);
        ok &= c.get(11) == Some(m(5, true));
        c.invalidate(11);
        ok &= c.get(11).is_none();
        ok
    }

    /// Marking everything shared keeps every mapping (now shared) and
    /// leaves empty slots empty.
    pub fn mark_all_shared() -> bool {
        let slots: [AtomicU64; 8] = Default::default();
        let Some(c) = MappingCache::new(&slots) else {
            return false;
        };
        let m = |data_block, shared| CachedMapping { data_block, shared };
        let mut ok = c.publish(1, m(10, false)) && c.publish(2, m(20, true));
        ok &= c.publish(13, m(30, false));
        c.mark_all_shared();
        ok &= c.get(1) == Some(m(10, true)) && c.get(2) == Some(m(20, true));
        ok &= c.get(13) == Some(m(30, true)) && c.get(5).is_none();
        ok && (0..16).filter(|&v| c.get(v).is_some()).count() == 3
    }

    /// Ranges, the whole-array walk, clearing and unrepresentable values.
    pub fn ranges_and_limits() -> bool {
        let slots: [AtomicU64; 4] = Default::default();
        let Some(c) = MappingCache::new(&slots) else {
            return false;
        };
        let m = |data_block| CachedMapping {
            data_block,
            shared: false,
        };
        let mut ok = true;
        for vblock in 0..4 {
            ok &= c.publish(vblock + 4, m(vblock));
        }
        // A short range tests blocks one by one.
        c.invalidate_range(5, 7);
        ok &= c.get(4).is_some() && c.get(5).is_none() && c.get(6).is_none();
        ok &= c.get(7).is_some();
        // A long range walks the slots and keeps blocks outside it.
        c.invalidate_range(0, 7);
        ok &= c.get(4).is_none() && c.get(7) == Some(m(3));
        c.clear();
        ok &= c.get(7).is_none();
        // Data blocks beyond 40 bits and tags beyond 22 bits are not cached.
        ok &= !c.publish(1, m(1 << 40));
        ok &= !c.publish(4 << 22, m(1)) && c.get(4 << 22).is_none();
        ok &= c.publish((4 << 22) - 1, m(9)) && c.get((4 << 22) - 1) == Some(m(9));
        // Slot counts.
        ok &= slots_for(0) == 1 && slots_for(5) == 8 && slots_for(1 << 40) == 1 << 18;
        let odd: [AtomicU64; 3] = Default::default();
        ok && MappingCache::new(&odd).is_none()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn publish_get_invalidate() {
        assert!(super::selftest::publish_get_invalidate());
    }

    #[test]
    fn mark_all_shared() {
        assert!(super::selftest::mark_all_shared());
    }

    #[test]
    fn ranges_and_limits() {
        assert!(super::selftest::ranges_and_limits());
    }
}
