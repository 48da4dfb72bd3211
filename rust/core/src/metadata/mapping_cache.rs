// SPDX-License-Identifier: GPL-2.0
//! The map-path mapping cache: what lets a thin volume remap a bio in its map
//! call without a lock, whatever its size.
//!
//! One table per pool, shared by all of its thin devices and kept across
//! their table reloads, sized by the pool's data blocks (two slots per data
//! block, rounded up to a power of two, capped by the `mapping_cache_mb`
//! module parameter): memory is bounded per pool, not per thin, and a thin
//! device that is merely active costs nothing here.
//!
//! A slot is two 64-bit words, the key and the entry:
//!
//! ```text
//!  key:    63 .. 40  device id (24 bits)     39 .. 0  virtual block
//!  entry:  63 .. 42  sequence   41 valid   40 shared
//!          39 .. 32  share generation (low 8 bits)   31 .. 0  data block
//! ```
//!
//! Slots come in sets of [`WAYS`] (one 64-byte cache line). Consecutive
//! virtual blocks of a device go to consecutive sets, starting at a set
//! picked by the device id, and prefer the way their wrap-around count
//! picks; a block takes a free way of its set before it evicts anything. So
//! a single volume with as many blocks as the pool fits exactly, and many
//! small volumes share sets without evicting each other.
//!
//! Only the pool's workers write slots, one at a time under the pool lock,
//! right after the metadata B-tree told them the answer. The map call reads
//! them lock-free, as a seqlock reader: entry, key, entry again; every store
//! to an entry bumps its sequence, and a writer that changes a slot's key
//! first stores an invalid entry, so a reader that sees the same entry twice
//! read a key that belongs to it. A reader that loses a race simply misses
//! (its bio takes the deferred path). Whoever invalidates slots or makes
//! them answer as shared (a snapshot of the device, below; its deletion; a
//! metadata abort) waits for an RCU grace period before relying on no map
//! call still using the old answer (a discard relies on the module's
//! in-flight tracker instead).
//!
//! **Snapshots without a pass over the slots.** Each device has a *share
//! generation*, raised by every snapshot of it ([`next_share_gen`]), and an
//! entry keeps the low bits of the generation it was published at. A reader
//! passes the device's generation now, and an entry from an older one
//! answers as shared: a snapshot of a device costs no pass over a table of
//! up to millions of slots, whatever the pool's size. Only when the low bits
//! come round again (every 256th snapshot of the device) are the device's
//! entries marked shared one by one, so that no entry from 256 snapshots ago
//! passes for a current one.
//!
//! Device ids fit the key (dm-thin's have 24 bits). Data blocks beyond 2^32
//! (a pool of more than 256 TiB at 64 KiB blocks) and virtual blocks beyond
//! 2^40 are simply never cached: their bios take the deferred path (a
//! mapping that moves to such a block drops the entry it had). The slot
//! memory is the glue's; this module only reads and writes it.

use core::sync::atomic::{fence, AtomicU64, Ordering};

use crate::metadata::thin_metadata::LookupResult;

/// Slots per set: 4 slots of 16 bytes, one cache line.
pub const WAYS: usize = 4;
/// 64-bit words per slot.
pub const WORDS_PER_SLOT: usize = 2;
/// The fewest slots a pool's cache has.
pub const MIN_SLOTS: u64 = 1 << 10;

const DATA_MASK: u64 = (1 << 32) - 1;
const GEN_SHIFT: u32 = 32;
/// The bits of a share generation an entry keeps.
const GEN_LOW: u32 = 0xff;
const GEN_MASK: u64 = (GEN_LOW as u64) << GEN_SHIFT;
const SHARED: u64 = 1 << 40;
const VALID: u64 = 1 << 41;
const PAYLOAD: u64 = VALID | SHARED | GEN_MASK | DATA_MASK;
const SEQ_ONE: u64 = 1 << 42;
const VBLOCK_BITS: u32 = 40;
const DEV_LIMIT: u32 = 1 << 24;

/// A cached mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedMapping {
    /// The data block.
    pub data_block: u64,
    /// Writes must break sharing (go through a worker).
    pub shared: bool,
}

impl From<LookupResult> for CachedMapping {
    fn from(r: LookupResult) -> Self {
        Self {
            data_block: r.mapping.data_block,
            shared: r.shared,
        }
    }
}

/// How many slots a pool of `nr_data_blocks` data blocks gets: two per data
/// block (a set-associative table that is at most half full keeps almost
/// every mapping of a fully provisioned pool), a power of two, at least
/// [`MIN_SLOTS`], at most `max_slots` rounded down to a power of two.
pub fn slots_for(nr_data_blocks: u64, max_slots: u64) -> u64 {
    let cap = match max_slots.checked_ilog2() {
        Some(bits) => 1u64 << bits,
        None => MIN_SLOTS,
    }
    .max(MIN_SLOTS);
    nr_data_blocks
        .saturating_mul(2)
        .clamp(MIN_SLOTS, cap)
        .checked_next_power_of_two()
        .unwrap_or(cap)
        .min(cap)
}

/// The share generation of a device after a snapshot of it taken at
/// generation `gen`, and whether every entry of the device must be marked
/// shared first ([`MappingCache::mark_dev_shared`]): entries keep only the
/// low bits of their generation, which come round again at the new one.
pub fn next_share_gen(gen: u32) -> (u32, bool) {
    let next = gen.wrapping_add(1);
    (next, next & GEN_LOW == 0)
}

/// The entry bits of share generation `gen`.
fn gen_bits(gen: u32) -> u64 {
    u64::from(gen & GEN_LOW) << GEN_SHIFT
}

/// The key of `(dev, vblock)`, if it can be cached.
fn key_of(dev: u32, vblock: u64) -> Option<u64> {
    if dev >= DEV_LIMIT || vblock >> VBLOCK_BITS != 0 {
        return None;
    }
    Some((u64::from(dev) << VBLOCK_BITS) | vblock)
}

fn dev_of_key(key: u64) -> u64 {
    key >> VBLOCK_BITS
}

fn vblock_of_key(key: u64) -> u64 {
    key & ((1 << VBLOCK_BITS) - 1)
}

fn entry_of(m: CachedMapping, gen: u32) -> Option<u64> {
    if m.data_block > DATA_MASK {
        return None;
    }
    Some(VALID | if m.shared { SHARED } else { 0 } | gen_bits(gen) | m.data_block)
}

/// The same entry with a new payload and the next sequence number.
fn next(entry: u64, payload: u64) -> u64 {
    (entry & !PAYLOAD).wrapping_add(SEQ_ONE) | payload
}

/// One slot's two words.
#[derive(Clone, Copy)]
struct Slot<'a> {
    key: &'a AtomicU64,
    entry: &'a AtomicU64,
}

impl Slot<'_> {
    /// The seqlock read: the entry if the slot holds `key` and no writer
    /// changed it meanwhile.
    fn read(&self, key: u64) -> Option<u64> {
        let e1 = self.entry.load(Ordering::Acquire);
        if e1 & VALID == 0 {
            return None;
        }
        let k = self.key.load(Ordering::Relaxed);
        // Orders the key's load before the entry's second one: if the key
        // came from a later write, its invalidating store is seen below.
        fence(Ordering::Acquire);
        let e2 = self.entry.load(Ordering::Relaxed);
        (e1 == e2 && k == key).then_some(e1)
    }

    /// The writer's view (writers are serialised, so nothing changes
    /// between its loads and its stores).
    fn held(&self) -> Option<(u64, u64)> {
        let e = self.entry.load(Ordering::Relaxed);
        (e & VALID != 0).then(|| (self.key.load(Ordering::Relaxed), e))
    }

    /// Stores a new key and payload: readers see the old pair or the new
    /// one, never a mix.
    fn write(&self, key: u64, payload: u64) {
        let e = self.entry.load(Ordering::Relaxed);
        let invalid = next(e, 0);
        self.entry.store(invalid, Ordering::Relaxed);
        fence(Ordering::Release);
        self.key.store(key, Ordering::Relaxed);
        self.entry.store(next(invalid, payload), Ordering::Release);
    }

    /// Changes the payload of a slot whose key stays.
    fn set_payload(&self, payload: u64) {
        let e = self.entry.load(Ordering::Relaxed);
        self.entry.store(next(e, payload), Ordering::Release);
    }

    fn invalidate(&self) {
        self.set_payload(0);
    }
}

/// A view of one pool's slot array.
pub struct MappingCache<'a> {
    words: &'a [AtomicU64],
    set_mask: u64,
}

impl<'a> MappingCache<'a> {
    /// Wraps a slot array of `WORDS_PER_SLOT` words per slot; `None` unless
    /// it holds a power-of-two number of whole sets.
    pub fn new(words: &'a [AtomicU64]) -> Option<Self> {
        let sets = words.len() / (WAYS * WORDS_PER_SLOT);
        if sets == 0 || !sets.is_power_of_two() || words.len() % (WAYS * WORDS_PER_SLOT) != 0 {
            return None;
        }
        Some(Self {
            words,
            set_mask: (sets as u64).wrapping_sub(1),
        })
    }

    fn slot(&self, index: u64) -> Option<Slot<'a>> {
        let i = usize::try_from(index).ok()?.checked_mul(WORDS_PER_SLOT)?;
        Some(Slot {
            key: self.words.get(i)?,
            entry: self.words.get(i.checked_add(1)?)?,
        })
    }

    /// The slots `(dev, vblock)` may live in, its preferred way first.
    fn ways(&self, dev: u32, vblock: u64) -> impl Iterator<Item = Slot<'a>> + '_ {
        // A device's blocks start at a set its id picks (Fibonacci hashing:
        // the product's top bits, so neighbouring ids land far apart).
        let set_bits = self.set_mask.count_ones();
        let start = u64::from(dev)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .checked_shr(64 - set_bits)
            .unwrap_or(0);
        // Consecutive blocks go to consecutive sets, one way each: a small
        // device takes one way of many sets, so devices whose runs of sets
        // overlap use different ways instead of evicting each other.
        let set = vblock.wrapping_add(start) & self.set_mask;
        let first = vblock.checked_shr(set_bits).unwrap_or(0) % WAYS as u64;
        (0..WAYS as u64).filter_map(move |w| {
            let way = (first + w) % WAYS as u64;
            self.slot(set * WAYS as u64 + way)
        })
    }

    fn all_slots(&self) -> impl Iterator<Item = Slot<'a>> + '_ {
        let n = (self.words.len() / WORDS_PER_SLOT) as u64;
        (0..n).filter_map(move |i| self.slot(i))
    }

    /// The cached mapping of `vblock` of device `dev`, if any (lock-free),
    /// for a reader that knows the device's share generation `gen`: an
    /// entry published before the device's last snapshot answers as
    /// shared.
    pub fn get(&self, dev: u32, vblock: u64, gen: u32) -> Option<CachedMapping> {
        let key = key_of(dev, vblock)?;
        let e = self.ways(dev, vblock).find_map(|s| s.read(key))?;
        Some(CachedMapping {
            data_block: e & DATA_MASK,
            shared: e & SHARED != 0 || e & GEN_MASK != gen_bits(gen),
        })
    }

    /// Records the mapping of `vblock` of device `dev` at the device's share
    /// generation `gen`, in the slot that holds it, else a free way of its
    /// set, else its preferred way (the entry there is dropped). Writers
    /// only, one at a time. Returns false, caching nothing, if the block
    /// cannot be represented; an entry the block had is dropped then, as it
    /// no longer answers as the metadata does (a copy-on-write moved the
    /// block, and its old data block may be freed and reused).
    pub fn publish(&self, dev: u32, vblock: u64, m: CachedMapping, gen: u32) -> bool {
        let Some(key) = key_of(dev, vblock) else {
            return false;
        };
        let Some(payload) = entry_of(m, gen) else {
            self.invalidate(dev, vblock);
            return false;
        };
        let mut preferred = None;
        let mut free = None;
        for slot in self.ways(dev, vblock) {
            preferred = preferred.or(Some(slot));
            match slot.held() {
                Some((k, e)) if k == key => {
                    if e & PAYLOAD != payload {
                        slot.set_payload(payload);
                    }
                    return true;
                }
                None if free.is_none() => free = Some(slot),
                _ => {}
            }
        }
        match free.or(preferred) {
            Some(slot) => {
                slot.write(key, payload);
                true
            }
            None => false,
        }
    }

    /// Forgets `vblock` of device `dev`. Writers only.
    pub fn invalidate(&self, dev: u32, vblock: u64) {
        let Some(key) = key_of(dev, vblock) else {
            return;
        };
        if let Some(slot) = self
            .ways(dev, vblock)
            .find(|s| s.held().is_some_and(|(k, _)| k == key))
        {
            slot.invalidate();
        }
    }

    /// Forgets every mapping of device `dev` in `[begin, end)`; walks at
    /// most one pass over the slots whatever the range. Writers only.
    pub fn invalidate_range(&self, dev: u32, begin: u64, end: u64) {
        let slots = (self.words.len() / WORDS_PER_SLOT) as u64;
        if end.saturating_sub(begin) < slots {
            for vblock in begin..end {
                self.invalidate(dev, vblock);
            }
            return;
        }
        let dev = u64::from(dev);
        self.invalidate_keys(|k| dev_of_key(k) == dev && (begin..end).contains(&vblock_of_key(k)));
    }

    /// Forgets every mapping of device `dev` (it was deleted). Writers only.
    pub fn invalidate_dev(&self, dev: u32) {
        self.invalidate_devs(&[dev]);
    }

    /// Forgets every mapping of the devices in `devs`, which is sorted
    /// (deleted devices, gathered for one pass over the slots). Writers only.
    pub fn invalidate_devs(&self, devs: &[u32]) {
        self.invalidate_keys(|k| {
            u32::try_from(dev_of_key(k)).is_ok_and(|dev| devs.binary_search(&dev).is_ok())
        });
    }

    /// Forgets every held slot whose key `matches`, in one pass. Writers only.
    fn invalidate_keys(&self, matches: impl Fn(u64) -> bool) {
        for slot in self.all_slots() {
            if slot.held().is_some_and(|(k, _)| matches(k)) {
                slot.invalidate();
            }
        }
    }

    /// Marks every cached mapping of device `dev` shared (its blocks stay
    /// readable in place, writes must break sharing): a snapshot of the
    /// device whose share generation's low bits came round again
    /// ([`next_share_gen`]). Writers only.
    pub fn mark_dev_shared(&self, dev: u32) {
        let dev = u64::from(dev);
        for slot in self.all_slots() {
            if let Some((k, e)) = slot.held() {
                if dev_of_key(k) == dev && e & SHARED == 0 {
                    slot.set_payload((e & PAYLOAD) | SHARED);
                }
            }
        }
    }

    /// Forgets everything. Writers only.
    pub fn clear(&self) {
        self.invalidate_keys(|_| true);
    }

    /// How many slots hold a mapping (a walk of every slot: for the tests).
    #[cfg(any(test, feature = "selftest"))]
    pub fn count(&self) -> u64 {
        self.all_slots().filter(|s| s.held().is_some()).count() as u64
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;

    const SET_WORDS: usize = WAYS * WORDS_PER_SLOT;

    fn m(data_block: u64, shared: bool) -> CachedMapping {
        CachedMapping { data_block, shared }
    }

    /// Publish, get, replace, invalidate; devices kept apart.
    pub fn publish_get_invalidate() -> bool {
        let words: [AtomicU64; 4 * SET_WORDS] = [const { AtomicU64::new(0) }; 4 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        let mut ok = c.get(1, 3, 0).is_none();
        ok &= c.publish(1, 3, m(77, false), 0);
        ok &= c.get(1, 3, 0) == Some(m(77, false));
        // Same block of another device: a different key.
        ok &= c.get(2, 3, 0).is_none();
        ok &= c.publish(2, 3, m(5, true), 0);
        ok &= c.get(2, 3, 0) == Some(m(5, true)) && c.get(1, 3, 0) == Some(m(77, false));
        // Replacing keeps one slot for the key.
        ok &= c.publish(1, 3, m(78, true), 0) && c.get(1, 3, 0) == Some(m(78, true));
        ok &= c.count() == 2;
        // Invalidating a block that is not cached changes nothing.
        c.invalidate(1, 4);
        ok &= c.count() == 2;
        c.invalidate(1, 3);
        ok &= c.get(1, 3, 0).is_none() && c.get(2, 3, 0) == Some(m(5, true));
        ok
    }

    /// A single device with as many blocks as there are slots fits
    /// exactly; one more block evicts exactly one.
    pub fn fills_and_evicts() -> bool {
        let words: [AtomicU64; 8 * SET_WORDS] = [const { AtomicU64::new(0) }; 8 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        let slots = 8 * WAYS as u64;
        let mut ok = (0..slots).all(|v| c.publish(7, v, m(v + 100, false), 0));
        ok &= (0..slots).all(|v| c.get(7, v, 0) == Some(m(v + 100, false)));
        ok &= c.publish(7, slots, m(1, false), 0) && c.get(7, slots, 0) == Some(m(1, false));
        ok &= c.count() == slots;
        ok &= (0..slots).filter(|&v| c.get(7, v, 0).is_none()).count() == 1;
        ok
    }

    /// Marking a device shared keeps its mappings (now shared) and leaves
    /// other devices alone; deleting a device, or several in one pass,
    /// forgets only their mappings.
    pub fn per_device_changes() -> bool {
        let words: [AtomicU64; 16 * SET_WORDS] = [const { AtomicU64::new(0) }; 16 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        let mut ok = true;
        for v in 0..8 {
            ok &= c.publish(1, v, m(v, false), 0) && c.publish(2, v, m(v + 8, false), 0);
        }
        c.mark_dev_shared(1);
        ok &= (0..8).all(|v| c.get(1, v, 0) == Some(m(v, true)));
        ok &= (0..8).all(|v| c.get(2, v, 0) == Some(m(v + 8, false)));
        c.invalidate_dev(2);
        ok &= (0..8).all(|v| c.get(2, v, 0).is_none() && c.get(1, v, 0).is_some());
        ok &= c.count() == 8;
        for v in 0..4 {
            for dev in [3, 4, 5, 9] {
                ok &= c.publish(dev, v, m(v, false), 0);
            }
        }
        c.invalidate_devs(&[1, 4, 9]);
        ok &= (0..8).all(|v| c.get(1, v, 0).is_none());
        ok &= (0..4).all(|v| c.get(3, v, 0).is_some() && c.get(5, v, 0).is_some());
        ok && c.count() == 8
    }

    /// A snapshot of a device (the next share generation) makes every entry
    /// it had answer as shared, without a pass over the slots, through two
    /// wraps of the generation's low bits; entries published at the new
    /// generation are unshared, and other devices keep theirs.
    pub fn share_generations() -> bool {
        let words: [AtomicU64; 16 * SET_WORDS] = [const { AtomicU64::new(0) }; 16 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        // Blocks 0..8 of device 1 published once each, at generations 0..8;
        // block 9 republished at every generation; device 2 never snapshotted.
        let mut ok = (0..8).all(|v| c.publish(2, v, m(v + 50, false), 0));
        let mut gen = 0u32;
        for round in 0..600u32 {
            if round < 8 {
                ok &= c.publish(1, u64::from(round), m(u64::from(round), false), gen);
            }
            ok &= c.publish(1, 9, m(9, false), gen) && c.get(1, 9, gen) == Some(m(9, false));
            let (next, wrapped) = next_share_gen(gen);
            ok &= wrapped == (next % 256 == 0);
            if wrapped {
                c.mark_dev_shared(1);
            }
            gen = next;
            ok &= (0..8).all(|v| c.get(1, v, gen).is_none_or(|e| e.shared));
            ok &= c.get(1, 9, gen) == Some(m(9, true));
        }
        ok &= (0..8).all(|v| c.get(1, v, gen) == Some(m(v, true)));
        ok &= (0..8).all(|v| c.get(2, v, 0) == Some(m(v + 50, false)));
        ok && next_share_gen(u32::MAX) == (0, true)
    }

    /// Ranges, the whole-array walk, clearing and unrepresentable values.
    pub fn ranges_and_limits() -> bool {
        let words: [AtomicU64; 2 * SET_WORDS] = [const { AtomicU64::new(0) }; 2 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        let mut ok = true;
        for v in 4..8 {
            ok &= c.publish(3, v, m(v, false), 0);
        }
        // A short range tests blocks one by one.
        c.invalidate_range(3, 5, 7);
        ok &= c.get(3, 4, 0).is_some() && c.get(3, 5, 0).is_none() && c.get(3, 6, 0).is_none();
        ok &= c.get(3, 7, 0).is_some();
        // A long range walks the slots and keeps blocks outside it.
        c.invalidate_range(3, 0, 7);
        ok &= c.get(3, 4, 0).is_none() && c.get(3, 7, 0) == Some(m(7, false));
        c.clear();
        ok &= c.get(3, 7, 0).is_none() && c.count() == 0;
        // Data blocks beyond 32 bits, virtual blocks beyond 40 bits and
        // device ids beyond 24 bits are not cached.
        ok &= !c.publish(1, 1, m(1 << 32, false), 0);
        ok &= !c.publish(1, 1 << 40, m(1, false), 0) && c.get(1, 1 << 40, 0).is_none();
        ok &= !c.publish(1 << 24, 1, m(1, false), 0);
        ok &= c.publish((1 << 24) - 1, (1 << 40) - 1, m(DATA_MASK, true), 0);
        ok &= c.get((1 << 24) - 1, (1 << 40) - 1, 0) == Some(m(DATA_MASK, true));
        // Slot counts.
        ok &= slots_for(0, 1 << 20) == MIN_SLOTS && slots_for(5000, 1 << 20) == 16384;
        ok &= slots_for(1 << 30, 3 << 20) == 2 << 20 && slots_for(1 << 30, 0) == MIN_SLOTS;
        ok &= slots_for(u64::MAX, u64::MAX) == 1 << 63;
        let odd: [AtomicU64; 3 * SET_WORDS] = [const { AtomicU64::new(0) }; 3 * SET_WORDS];
        ok && MappingCache::new(&odd).is_none() && MappingCache::new(&words[..3]).is_none()
    }

    /// A publish that cannot store its mapping (a data block beyond 32
    /// bits: a copy-on-write into a block of a pool over 256 TiB at 64 KiB
    /// blocks) drops the entry the slot had, so the block's old mapping
    /// no longer answers.
    pub fn unstorable_publish_drops_old_entry() -> bool {
        let words: [AtomicU64; 2 * SET_WORDS] = [const { AtomicU64::new(0) }; 2 * SET_WORDS];
        let Some(c) = MappingCache::new(&words) else {
            return false;
        };
        let mut ok = c.publish(1, 3, m(77, true), 0) && c.publish(1, 4, m(78, false), 0);
        ok &= !c.publish(1, 3, m(1 << 33, false), 0);
        ok && c.get(1, 3, 0).is_none() && c.get(1, 4, 0) == Some(m(78, false))
    }

    /// One round of the writer in the concurrency scenarios: keys of two
    /// devices that collide in one small table, published, re-published
    /// shared, invalidated. The data block always encodes its key.
    pub fn writer_round(c: &MappingCache<'_>, round: u64) {
        for v in 0..64u64 {
            let dev = (v % 2) as u32 + 1;
            c.publish(dev, v, m(expected(dev, v) + round % 5, round % 2 == 0), 0);
            if (round + v) % 3 == 0 {
                c.invalidate(dev, v);
            }
        }
        if round % 16 == 0 {
            c.mark_dev_shared(1);
        }
    }

    /// The data-block range a reader may see for `(dev, v)`.
    pub fn expected(dev: u32, v: u64) -> u64 {
        (u64::from(dev) << 20) | (v << 8)
    }

    /// One pass of a reader: every hit carries a data block of its key.
    pub fn reader_pass(c: &MappingCache<'_>) -> bool {
        (0..64u64).all(|v| {
            let dev = (v % 2) as u32 + 1;
            c.get(dev, v, 0)
                .is_none_or(|hit| hit.data_block >> 8 == expected(dev, v) >> 8)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_get_invalidate() {
        assert!(selftest::publish_get_invalidate());
    }

    #[test]
    fn fills_and_evicts() {
        assert!(selftest::fills_and_evicts());
    }

    #[test]
    fn per_device_changes() {
        assert!(selftest::per_device_changes());
    }

    #[test]
    fn share_generations() {
        assert!(selftest::share_generations());
    }

    #[test]
    fn ranges_and_limits() {
        assert!(selftest::ranges_and_limits());
    }

    #[test]
    fn unstorable_publish_drops_old_entry() {
        assert!(selftest::unstorable_publish_drops_old_entry());
    }

    /// A hundred small devices (32 blocks each, ids 10 to 1,000 as bench
    /// case 9 uses them) in the cache of a 4,096-block pool evict almost
    /// nothing from each other: each takes one way of 32 sets.
    #[test]
    fn many_small_devices_share_sets() {
        extern crate std;
        let slots = usize::try_from(slots_for(4096, 1 << 20)).unwrap();
        let words: std::vec::Vec<AtomicU64> = (0..slots * WORDS_PER_SLOT)
            .map(|_| AtomicU64::new(0))
            .collect();
        let c = MappingCache::new(&words).unwrap();
        for dev in (10..=1000u32).step_by(10) {
            for v in 0..32u64 {
                let m = CachedMapping {
                    data_block: u64::from(dev) * 100 + v,
                    shared: false,
                };
                assert!(c.publish(dev, v, m, 0));
            }
        }
        let cached = (10..=1000u32)
            .step_by(10)
            .flat_map(|dev| (0..32u64).map(move |v| (dev, v)))
            .filter(|&(dev, v)| {
                c.get(dev, v, 0)
                    .is_some_and(|m| m.data_block == u64::from(dev) * 100 + v)
            })
            .count();
        assert!(cached >= 3200 * 99 / 100, "{cached} of 3,200 cached");
    }

    /// Readers on other threads racing a writer never see an entry that
    /// belongs to another key.
    #[test]
    fn readers_race_a_writer() {
        extern crate std;
        use std::sync::atomic::AtomicBool;
        let words: std::vec::Vec<AtomicU64> = (0..4 * WAYS * WORDS_PER_SLOT)
            .map(|_| AtomicU64::new(0))
            .collect();
        let done = AtomicBool::new(false);
        let c = MappingCache::new(&words).unwrap();
        std::thread::scope(|s| {
            let readers: std::vec::Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut passes = 0u64;
                        while !done.load(Ordering::Relaxed) {
                            assert!(selftest::reader_pass(&c));
                            passes += 1;
                        }
                        passes
                    })
                })
                .collect();
            for round in 0..20_000 {
                selftest::writer_round(&c, round);
            }
            done.store(true, Ordering::Relaxed);
            for r in readers {
                assert!(r.join().unwrap() > 0);
            }
        });
    }
}
