// SPDX-License-Identifier: GPL-2.0
//! The thin-pool metadata object: devices, mappings, transactions and
//! metadata snapshots on top of the B-trees and space maps (spec 1.5, 2.4-2.10).
//!
//! Every mutating call marks the metadata "in service"; [`ThinMetadata::commit`]
//! then makes the whole transaction durable (superblock written last) and does
//! nothing at all if nothing changed. If a mutating call fails, the transaction
//! may be half applied: the caller must [`ThinMetadata::abort`], which returns
//! to the last commit (dm-thin does the same and switches the pool to
//! read-only).

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::metadata::superblock::{
    self, SmRoot, Superblock, FLAG_NEEDS_CHECK, SUPERBLOCK_LOCATION,
};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::{TreeKind, Value};
use crate::pdata::checksum::BlockKind;
use crate::pdata::codec::{get_u32, get_u64, put_u32, put_u64};
use crate::pdata::space_map::{self, IndexEntry, SmKind, ENTRIES_PER_BITMAP, MAX_METADATA_BLOCKS};
use crate::pdata::tm::{CacheMem, InlineCaches, Tm};

/// Largest thin device id accepted by dm-thin's messages (24 bits).
pub const MAX_DEV_ID: u64 = (1 << 24) - 1;
/// Largest snapshot time representable in a mapping (24 bits).
pub const MAX_TIME: u32 = (1 << 24) - 1;
/// Largest data block number representable in a mapping (40 bits).
pub const MAX_DATA_BLOCK: u64 = (1 << 40) - 1;
/// Smallest metadata device accepted by [`ThinMetadata::format`], in blocks.
pub const MIN_METADATA_BLOCKS: u64 = 32;
/// Mappings a range removal takes out of a leaf per descent (their values
/// are copied to the stack first).
const REMOVE_RUN: usize = 16;

/// `disk_device_details` (24 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceDetails {
    /// Number of mapped virtual blocks.
    pub mapped_blocks: u64,
    /// Pool transaction id when the device was created.
    pub transaction_id: u64,
    /// Pool time at creation.
    pub creation_time: u32,
    /// Pool time when the device was last snapshotted (or created).
    pub snapshotted_time: u32,
}

impl DeviceDetails {
    /// Encodes the on-disk record.
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        let _ = put_u64(&mut b, 0, self.mapped_blocks);
        let _ = put_u64(&mut b, 8, self.transaction_id);
        let _ = put_u32(&mut b, 16, self.creation_time);
        let _ = put_u32(&mut b, 20, self.snapshotted_time);
        b
    }

    /// Decodes the on-disk record.
    pub fn decode(b: &[u8]) -> CoreResult<Self> {
        Ok(DeviceDetails {
            mapped_blocks: get_u64(b, 0)?,
            transaction_id: get_u64(b, 8)?,
            creation_time: get_u32(b, 16)?,
            snapshotted_time: get_u32(b, 20)?,
        })
    }
}

/// One mapping: a data block and the time it was mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Data block (40 bits).
    pub data_block: u64,
    /// Pool time when the mapping was inserted (24 bits).
    pub time: u32,
}

impl Mapping {
    /// The on-disk `block_time` value.
    pub fn pack(&self) -> u64 {
        (self.data_block << 24) | u64::from(self.time & MAX_TIME)
    }

    /// Decodes a `block_time` value.
    pub fn unpack(v: u64) -> Self {
        Mapping {
            data_block: v >> 24,
            time: (v & u64::from(MAX_TIME)) as u32,
        }
    }
}

/// Result of a mapping lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupResult {
    /// The mapping.
    pub mapping: Mapping,
    /// dm-thin's sharing rule: the device was snapshotted after the mapping
    /// was made (`snapshotted_time > time`), so writes must break sharing.
    pub shared: bool,
}

impl LookupResult {
    /// `mapping` of a device with `details`, with its sharing.
    pub fn new(details: &DeviceDetails, mapping: Mapping) -> Self {
        Self {
            mapping,
            shared: details.snapshotted_time > mapping.time,
        }
    }
}

/// Space usage of one space map, as dm-thin reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceUsage {
    /// Total blocks.
    pub total: u64,
    /// Free blocks (dm-thin semantics, see spec 2.8).
    pub free: u64,
}

/// Number of device-details records cached in core between commits.
pub const DETAILS_CACHE_SLOTS: usize = 8;

/// A device-details record changed since it was last written to the tree.
#[derive(Debug, Clone, Copy)]
struct CachedDetails {
    dev: u64,
    details: DeviceDetails,
}

/// Thin-pool metadata over a block store.
///
/// Like dm-thin, changed device details (mapped-block counts, snapshot
/// times) are kept in core and written into the details tree at commit
/// (or when a cache slot is needed); device creation and deletion update the
/// tree at once, so the tree always lists exactly the existing devices.
pub struct ThinMetadata<S: BlockStore, C: CacheMem = InlineCaches> {
    tm: Tm<S, C>,
    sb: Superblock,
    committed: Superblock,
    dirty: bool,
    details_cache: [Option<CachedDetails>; DETAILS_CACHE_SLOTS],
    evict_next: usize,
    read_only: bool,
}

impl<S: BlockStore> ThinMetadata<S> {
    /// Formats the store as empty thin-pool metadata (no devices, time 0,
    /// transaction id 0) with a data space map of `nr_data_blocks`, and commits.
    /// At most [`MAX_METADATA_BLOCKS`] blocks of the store are used.
    pub fn format(store: S, data_block_size: u32, nr_data_blocks: u64) -> CoreResult<Self> {
        Self::format_with(
            store,
            InlineCaches::default(),
            data_block_size,
            nr_data_blocks,
        )
    }

    /// Opens formatted metadata. `data_block_size`, if given, must match the
    /// superblock. Returns [`CoreError::Unformatted`] if block 0 is all zero.
    pub fn open(store: S, data_block_size: Option<u32>) -> CoreResult<Self> {
        Self::open_with(store, InlineCaches::default(), data_block_size, false)
    }

    /// Opens formatted metadata for reading only (the metadata device is
    /// read-only): unknown compat_ro features are accepted, and every call
    /// that would change the metadata fails with [`CoreError::Invalid`].
    pub fn open_read_only(store: S, data_block_size: Option<u32>) -> CoreResult<Self> {
        Self::open_with(store, InlineCaches::default(), data_block_size, true)
    }
}

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
    /// [`ThinMetadata::format`] with the caches in `caches`.
    pub fn format_with(
        store: S,
        caches: C,
        data_block_size: u32,
        nr_data_blocks: u64,
    ) -> CoreResult<Self> {
        let nr = store.nr_blocks().min(MAX_METADATA_BLOCKS);
        if nr < MIN_METADATA_BLOCKS || nr_data_blocks > MAX_DATA_BLOCK.saturating_add(1) {
            return Err(CoreError::NoSpace);
        }
        let nb = space_map::nr_bitmaps(nr);
        // Layout: 0 superblock, 1 metadata index, 2.. bitmaps (all in bitmap 0's range).
        let used = 2 + nb;
        // Built in place from the start (and `tm` borrowed from it): the
        // in-core state is a few KiB, and the kernel builds it on its stack.
        let mut md = ThinMetadata {
            tm: Tm::new(store, caches, SmRoot::default(), SmRoot::default(), false),
            sb: Superblock::default(),
            committed: Superblock::default(),
            dirty: true,
            details_cache: [None; DETAILS_CACHE_SLOTS],
            evict_next: 0,
            read_only: false,
        };
        let tm = &mut md.tm;
        {
            let mut g = tm.store.zeroed(1, BlockKind::Index)?;
            for i in 0..nb {
                let ie = IndexEntry {
                    blocknr: 2 + i,
                    nr_free: (ENTRIES_PER_BITMAP - if i == 0 { used } else { 0 }) as u32,
                    none_free_before: if i == 0 { used as u32 } else { 0 },
                };
                let off = space_map::INDEX_ENTRIES_OFF + (i as usize) * space_map::INDEX_ENTRY_SIZE;
                crate::pdata::codec::bytes_mut(&mut g, off, space_map::INDEX_ENTRY_SIZE)?
                    .copy_from_slice(&ie.encode());
            }
        }
        for i in 0..nb {
            let mut g = tm.store.zeroed(2 + i, BlockKind::Bitmap)?;
            if i == 0 {
                for b in 0..used {
                    space_map::bitmap_set(&mut g, b, 1)?;
                }
            }
        }
        tm.msm = SmRoot {
            nr_blocks: nr,
            nr_allocated: used,
            bitmap_root: 1,
            ref_count_root: 0,
        };
        tm.meta_new_blocks = used;
        // Index entries were written above without the cache.
        tm.forget_cached();
        tm.msm.ref_count_root = tm.new_empty_tree(TreeKind::RefCount)?;
        tm.dsm.bitmap_root = tm.new_empty_tree(TreeKind::DataIndex)?;
        tm.dsm.ref_count_root = tm.new_empty_tree(TreeKind::RefCount)?;
        tm.data_extend(nr_data_blocks)?;
        let mapping_root = tm.new_empty_tree(TreeKind::TopLevel)?;
        let details_root = tm.new_empty_tree(TreeKind::Details)?;
        md.sb = Superblock {
            version: superblock::VERSION,
            mapping_root,
            details_root,
            data_block_size,
            metadata_nr_blocks: nr,
            ..Default::default()
        };
        md.committed = md.sb;
        md.commit()?;
        Ok(md)
    }

    /// [`ThinMetadata::open`] (or [`ThinMetadata::open_read_only`]) with
    /// the caches in `caches`.
    pub fn open_with(
        store: S,
        caches: C,
        data_block_size: Option<u32>,
        read_only: bool,
    ) -> CoreResult<Self> {
        {
            let g = store.read(SUPERBLOCK_LOCATION, BlockKind::Raw)?;
            if g.iter().all(|&x| x == 0) {
                return Err(CoreError::Unformatted);
            }
        }
        let sb = {
            let g = store.read(SUPERBLOCK_LOCATION, BlockKind::Superblock)?;
            Superblock::decode_with(&g, read_only)?
        };
        if data_block_size.is_some_and(|d| d != sb.data_block_size) {
            return Err(CoreError::Invalid);
        }
        let m = sb.meta_sm;
        if m.nr_blocks > store.nr_blocks()
            || m.nr_blocks > MAX_METADATA_BLOCKS
            || m.nr_blocks < 3
            || m.nr_allocated > m.nr_blocks
            || sb.data_sm.nr_allocated > sb.data_sm.nr_blocks
        {
            return Err(corrupt(Corruption::Superblock));
        }
        let md = ThinMetadata {
            tm: Tm::new(store, caches, sb.meta_sm, sb.data_sm, true),
            sb,
            committed: sb,
            dirty: false,
            details_cache: [None; DETAILS_CACHE_SLOTS],
            evict_next: 0,
            read_only,
        };
        for b in [
            sb.mapping_root,
            sb.details_root,
            m.bitmap_root,
            m.ref_count_root,
            sb.data_sm.bitmap_root,
            sb.data_sm.ref_count_root,
        ] {
            md.tm.check_meta_block(b)?;
        }
        if sb.held_root != 0 {
            md.tm.check_meta_block(sb.held_root)?;
        }
        Ok(md)
    }

    /// Gives the block store back.
    pub fn into_store(self) -> S {
        self.tm.store
    }

    /// The block store.
    pub fn store(&self) -> &S {
        &self.tm.store
    }

    /// The block store, mutably (the glue refreshes a grown device's size
    /// before [`Self::resize_metadata`]).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.tm.store
    }

    /// The superblock as of the last commit.
    pub fn committed_superblock(&self) -> &Superblock {
        &self.committed
    }

    /// Marks the metadata in service (changed); refused when read-only.
    fn begin_change(&mut self) -> CoreResult<()> {
        if self.read_only {
            return Err(CoreError::Invalid);
        }
        self.dirty = true;
        Ok(())
    }

    /// True if opened with [`Self::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// True if the current transaction changed anything.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Commits the transaction: flush all new metadata, then write the
    /// superblock and flush again. Does nothing if nothing changed.
    pub fn commit(&mut self) -> CoreResult<()> {
        if !self.dirty {
            return Ok(());
        }
        self.write_cached_details()?;
        self.tm.write_dirty_data_ies()?;
        self.tm.store.flush()?;
        let mut sb = self.sb;
        sb.data_sm = self.tm.dsm;
        sb.meta_sm = self.tm.msm;
        {
            let mut g = self
                .tm
                .store
                .zeroed(SUPERBLOCK_LOCATION, BlockKind::Superblock)?;
            sb.encode(&mut g)?;
        }
        self.tm.store.flush()?;
        self.sb = sb;
        self.committed = sb;
        self.tm.mark_committed();
        self.dirty = false;
        Ok(())
    }

    /// Abandons the current transaction: the in-core state returns to the
    /// last commit. Blocks written meanwhile all lie in space that is free in
    /// the committed state. Like dm-thin's `dm_pool_abort_metadata`, which
    /// reopens the metadata, the store's cache is dropped and the committed
    /// superblock read back from the media: an error here means the metadata
    /// device cannot be read, and the pool must fail.
    pub fn abort(&mut self) -> CoreResult<()> {
        self.details_cache = [None; DETAILS_CACHE_SLOTS];
        self.sb = self.committed;
        self.tm.rollback();
        self.dirty = false;
        self.tm.store.drop_cache();
        self.tm
            .store
            .read(SUPERBLOCK_LOCATION, BlockKind::Superblock)
            .map(|_| ())
    }

    /// Sets the needs_check flag in place (carrying the committed roots), as
    /// dm-thin's `dm_pool_metadata_set_needs_check`: the superblock is
    /// rewritten in the block store's cache and reaches the disk with the
    /// store's next write-back, not with a flush of its own. So a metadata
    /// device that fails writes does not make this fail too, and the pool
    /// goes read-only rather than failed, as dm-thin's does.
    pub fn set_needs_check(&mut self) -> CoreResult<()> {
        if self.read_only {
            return Err(CoreError::Invalid);
        }
        let mut c = self.committed;
        c.flags |= FLAG_NEEDS_CHECK;
        {
            let mut g = self
                .tm
                .store
                .zeroed(SUPERBLOCK_LOCATION, BlockKind::Superblock)?;
            c.encode(&mut g)?;
        }
        self.committed = c;
        self.sb.flags |= FLAG_NEEDS_CHECK;
        Ok(())
    }

    /// Writes the needs_check flag again and flushes: at deactivation of a
    /// read-only pool, so that a flag whose first write-back failed (the
    /// device was failing writes then) reaches the disk once it works.
    pub fn persist_needs_check(&mut self) -> CoreResult<()> {
        self.set_needs_check()?;
        self.tm.store.flush()
    }

    /// True if the needs_check flag is set.
    pub fn needs_check(&self) -> bool {
        self.sb.flags & FLAG_NEEDS_CHECK != 0
    }

    /// Current userspace transaction id.
    pub fn transaction_id(&self) -> u64 {
        self.sb.trans_id
    }

    /// Current snapshot time.
    pub fn time(&self) -> u32 {
        self.sb.time
    }

    /// Data block size in sectors.
    pub fn data_block_size(&self) -> u32 {
        self.sb.data_block_size
    }

    /// Held metadata snapshot location (0 = none).
    pub fn held_root(&self) -> u64 {
        self.sb.held_root
    }

    /// `set_transaction_id <cur> <new>`: compare-and-swap.
    pub fn set_transaction_id(&mut self, cur: u64, new: u64) -> CoreResult<()> {
        if cur != self.sb.trans_id {
            return Err(CoreError::Invalid);
        }
        self.begin_change()?;
        self.sb.trans_id = new;
        Ok(())
    }

    /// Details of device `dev`, if it exists.
    pub fn device_details(&self, dev: u64) -> CoreResult<Option<DeviceDetails>> {
        if let Some(c) = self.cached(dev) {
            return Ok(Some(c.details));
        }
        self.tree_details(dev)
    }

    fn tree_details(&self, dev: u64) -> CoreResult<Option<DeviceDetails>> {
        match self
            .tm
            .btree_lookup(self.sb.details_root, dev, TreeKind::Details)?
        {
            Some(v) => Ok(Some(DeviceDetails::decode(v.as_slice())?)),
            None => Ok(None),
        }
    }

    fn cached(&self, dev: u64) -> Option<&CachedDetails> {
        self.details_cache.iter().flatten().find(|c| c.dev == dev)
    }

    /// Smallest existing device id `>= from`.
    pub fn next_device(&self, from: u64) -> CoreResult<Option<u64>> {
        Ok(self
            .tm
            .btree_lookup_ge(self.sb.details_root, from, TreeKind::Details)?
            .map(|(k, _)| k))
    }

    /// Writes a details record into the tree now.
    fn write_details(&mut self, dev: u64, d: &DeviceDetails) -> CoreResult<()> {
        let (r, _) =
            self.tm
                .btree_insert(self.sb.details_root, dev, &d.encode(), TreeKind::Details)?;
        self.sb.details_root = r;
        Ok(())
    }

    /// Records changed details of an existing device (written at commit).
    fn put_details(&mut self, dev: u64, d: &DeviceDetails) -> CoreResult<()> {
        let details = *d;
        if let Some(c) = self
            .details_cache
            .iter_mut()
            .flatten()
            .find(|c| c.dev == dev)
        {
            c.details = details;
            return Ok(());
        }
        let slot = match self.details_cache.iter().position(|c| c.is_none()) {
            Some(i) => i,
            None => {
                let i = self.evict_next % DETAILS_CACHE_SLOTS;
                self.evict_next = (i + 1) % DETAILS_CACHE_SLOTS;
                if let Some(Some(old)) = self.details_cache.get(i).copied() {
                    self.write_details(old.dev, &old.details)?;
                }
                i
            }
        };
        if let Some(s) = self.details_cache.get_mut(slot) {
            *s = Some(CachedDetails { dev, details });
        }
        Ok(())
    }

    /// Writes every cached record into the details tree.
    fn write_cached_details(&mut self) -> CoreResult<()> {
        for i in 0..DETAILS_CACHE_SLOTS {
            if let Some(Some(c)) = self.details_cache.get(i).copied() {
                self.write_details(c.dev, &c.details)?;
                if let Some(s) = self.details_cache.get_mut(i) {
                    *s = None;
                }
            }
        }
        Ok(())
    }

    fn forget_cached(&mut self, dev: u64) {
        for s in self.details_cache.iter_mut() {
            if s.is_some_and(|c| c.dev == dev) {
                *s = None;
            }
        }
    }

    fn existing(&self, dev: u64) -> CoreResult<DeviceDetails> {
        self.device_details(dev)?.ok_or(CoreError::NotFound)
    }

    fn subtree_root(&self, dev: u64) -> CoreResult<u64> {
        Ok(self
            .tm
            .btree_lookup(self.sb.mapping_root, dev, TreeKind::TopLevel)?
            .ok_or(corrupt(Corruption::BlockOutOfRange))?
            .as_u64())
    }

    /// `create_thin <dev>`.
    pub fn create_thin(&mut self, dev: u64) -> CoreResult<()> {
        if self.device_details(dev)?.is_some()
            || self
                .tm
                .btree_lookup(self.sb.mapping_root, dev, TreeKind::TopLevel)?
                .is_some()
        {
            return Err(CoreError::Exists);
        }
        self.begin_change()?;
        let root = self.tm.new_empty_tree(TreeKind::Mapping)?;
        let (r, _) = self.tm.btree_insert(
            self.sb.mapping_root,
            dev,
            &root.to_le_bytes(),
            TreeKind::TopLevel,
        )?;
        self.sb.mapping_root = r;
        let t = self.sb.time;
        let d = DeviceDetails {
            mapped_blocks: 0,
            transaction_id: self.sb.trans_id,
            creation_time: t,
            snapshotted_time: t,
        };
        self.write_details(dev, &d)
    }

    /// `create_snap <dev> <origin>`: O(1), shares the origin's mapping tree.
    pub fn create_snap(&mut self, dev: u64, origin: u64) -> CoreResult<()> {
        if self.device_details(dev)?.is_some() {
            return Err(CoreError::Exists);
        }
        let mut od = self.existing(origin)?;
        let oroot = self.subtree_root(origin)?;
        if self.sb.time >= MAX_TIME {
            return Err(CoreError::NoSpace);
        }
        self.begin_change()?;
        self.sb.time += 1;
        let t = self.sb.time;
        self.tm.check_meta_block(oroot)?;
        self.tm.sm_inc(SmKind::Meta, oroot)?;
        let (r, _) = self.tm.btree_insert(
            self.sb.mapping_root,
            dev,
            &oroot.to_le_bytes(),
            TreeKind::TopLevel,
        )?;
        self.sb.mapping_root = r;
        let d = DeviceDetails {
            mapped_blocks: od.mapped_blocks,
            transaction_id: self.sb.trans_id,
            creation_time: t,
            snapshotted_time: t,
        };
        self.write_details(dev, &d)?;
        od.snapshotted_time = t;
        self.put_details(origin, &od)
    }

    /// `delete <dev>`: releases the device's mapping tree; blocks whose count
    /// drops to zero become free (reusable after the next commit).
    pub fn delete(&mut self, dev: u64) -> CoreResult<()> {
        self.existing(dev)?;
        self.begin_change()?;
        self.forget_cached(dev);
        let (r, _) = self
            .tm
            .btree_remove(self.sb.details_root, dev, TreeKind::Details)?;
        self.sb.details_root = r;
        let (r, old) = self
            .tm
            .btree_remove(self.sb.mapping_root, dev, TreeKind::TopLevel)?;
        self.sb.mapping_root = r;
        if let Some(v) = old {
            self.tm.dec_tree(v.as_u64(), TreeKind::Mapping, 0)?;
        }
        Ok(())
    }

    /// Looks up the mapping of `vblock` in device `dev`.
    pub fn lookup(&self, dev: u64, vblock: u64) -> CoreResult<Option<LookupResult>> {
        let d = self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        Ok(self
            .tm
            .btree_lookup(sub, vblock, TreeKind::Mapping)?
            .map(|v| LookupResult::new(&d, Mapping::unpack(v.as_u64()))))
    }

    /// Looks up the mapping of `vblock` in device `dev`; if it is mapped,
    /// calls `each` with every mapping of the B-tree leaf it lives in (itself
    /// included): what a cache fills from one walk. A hole costs what
    /// [`Self::lookup`] costs.
    pub fn lookup_leaf(
        &self,
        dev: u64,
        vblock: u64,
        mut each: impl FnMut(u64, LookupResult),
    ) -> CoreResult<Option<LookupResult>> {
        let d = self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        let result = |v: Value| LookupResult::new(&d, Mapping::unpack(v.as_u64()));
        Ok(self
            .tm
            .btree_lookup_leaf(sub, vblock, TreeKind::Mapping, |k, v| each(k, result(v)))?
            .map(result))
    }

    /// Exact sharing answer from reference counts: true if the data block
    /// mapped at `vblock` is referenced by more than one leaf, or any node on
    /// the path to it (from the device's mapping root down) is shared with
    /// another device or with the held metadata snapshot. `None` if unmapped.
    pub fn mapping_is_shared(&self, dev: u64, vblock: u64) -> CoreResult<Option<bool>> {
        self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        Ok(self
            .tm
            .btree_lookup_shared(sub, vblock, TreeKind::Mapping)?
            .map(|(_, s)| s))
    }

    /// First mapping of `dev` at or after `vblock`.
    pub fn next_mapping(&self, dev: u64, vblock: u64) -> CoreResult<Option<(u64, Mapping)>> {
        self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        Ok(self
            .tm
            .btree_lookup_ge(sub, vblock, TreeKind::Mapping)?
            .map(|(k, v)| (k, Mapping::unpack(v.as_u64()))))
    }

    /// Highest mapped virtual block of `dev`.
    pub fn highest_mapped(&self, dev: u64) -> CoreResult<Option<u64>> {
        self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        self.tm.btree_last_key(sub, TreeKind::Mapping)
    }

    /// Maps `vblock` of `dev` to `data_block` (which the caller allocated with
    /// [`Self::alloc_data_block`], count 1) at the current time. A previous
    /// mapping to a different block drops that block's reference.
    pub fn insert_mapping(&mut self, dev: u64, vblock: u64, data_block: u64) -> CoreResult<()> {
        let mut d = self.existing(dev)?;
        if data_block >= self.tm.dsm.nr_blocks || data_block > MAX_DATA_BLOCK {
            return Err(CoreError::Invalid);
        }
        self.begin_change()?;
        let (top, leaf, idx, sub) =
            self.tm
                .btree_shadow_path(self.sb.mapping_root, dev, TreeKind::TopLevel)?;
        self.sb.mapping_root = top;
        let sub = sub.as_u64();
        let bt = Mapping {
            data_block,
            time: self.sb.time,
        }
        .pack();
        let (nsub, old) =
            self.tm
                .btree_insert(sub, vblock, &bt.to_le_bytes(), TreeKind::Mapping)?;
        self.tm
            .set_leaf_value(leaf, idx, &nsub.to_le_bytes(), TreeKind::TopLevel)?;
        match old {
            Some(o) => {
                let ob = Mapping::unpack(o.as_u64()).data_block;
                if ob != data_block {
                    self.tm.sm_dec(SmKind::Data, ob)?;
                }
                Ok(())
            }
            None => {
                d.mapped_blocks = d.mapped_blocks.saturating_add(1);
                self.put_details(dev, &d)
            }
        }
    }

    /// Removes the mappings of `dev` in `[begin, end)`, releasing their data
    /// blocks. Returns how many were removed.
    pub fn remove_range(&mut self, dev: u64, begin: u64, end: u64) -> CoreResult<u64> {
        self.remove_range_freeing(dev, begin, end, |_| {})
    }

    /// As [`Self::remove_range`], calling `freed` with each data block whose
    /// last reference went (dm-thin's passdown candidates): one pass over
    /// the subtree, one shadowing of the top level and one details update
    /// for the whole range.
    pub fn remove_range_freeing(
        &mut self,
        dev: u64,
        begin: u64,
        end: u64,
        mut freed: impl FnMut(u64),
    ) -> CoreResult<u64> {
        let mut d = self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        match self.tm.btree_lookup_ge(sub, begin, TreeKind::Mapping)? {
            Some((k, _)) if k < end => {}
            _ => return Ok(0),
        }
        self.begin_change()?;
        let (top, leaf, idx, sub) =
            self.tm
                .btree_shadow_path(self.sb.mapping_root, dev, TreeKind::TopLevel)?;
        self.sb.mapping_root = top;
        let mut sub = sub.as_u64();
        let mut n = 0u64;
        let mut from = begin;
        // A run of entries of one leaf per descent (end > begin here).
        let last = end - 1;
        let mut removed = [Value::from_slice(&[]); REMOVE_RUN];
        let res = loop {
            let k = match self.tm.btree_lookup_ge(sub, from, TreeKind::Mapping) {
                Ok(Some((k, _))) if k <= last => k,
                Ok(_) => break Ok(()),
                Err(e) => break Err(e),
            };
            let (ns, count, last_key) =
                match self
                    .tm
                    .btree_remove_run(sub, k, last, TreeKind::Mapping, &mut removed)
                {
                    Ok(x) => x,
                    Err(e) => break Err(e),
                };
            sub = ns;
            n += count as u64;
            let mut dec = Ok(());
            for v in removed.iter().take(count) {
                let b = Mapping::unpack(v.as_u64()).data_block;
                match self.tm.sm_dec(SmKind::Data, b) {
                    Ok(0) => freed(b),
                    Ok(_) => {}
                    Err(e) => {
                        dec = Err(e);
                        break;
                    }
                }
            }
            if let Err(e) = dec {
                break Err(e);
            }
            match last_key.checked_add(1) {
                Some(f) if count > 0 => from = f,
                _ => break Ok(()),
            }
        };
        self.tm
            .set_leaf_value(leaf, idx, &sub.to_le_bytes(), TreeKind::TopLevel)?;
        res?;
        d.mapped_blocks = d.mapped_blocks.saturating_sub(n);
        self.put_details(dev, &d)?;
        Ok(n)
    }

    /// Removes the mapping of `vblock`; returns false if it was not mapped.
    pub fn remove_mapping(&mut self, dev: u64, vblock: u64) -> CoreResult<bool> {
        let end = vblock.checked_add(1).ok_or(CoreError::Invalid)?;
        Ok(self.remove_range(dev, vblock, end)? == 1)
    }

    /// Allocates a free data block (free now and at the last commit), count 1.
    pub fn alloc_data_block(&mut self) -> CoreResult<u64> {
        self.begin_change()?;
        self.tm.data_alloc()
    }

    /// Reference count of a data block.
    pub fn data_block_count(&self, b: u64) -> CoreResult<u32> {
        self.tm.sm_count(SmKind::Data, false, b)
    }

    /// Takes an extra reference on a data block.
    pub fn data_block_inc(&mut self, b: u64) -> CoreResult<()> {
        self.begin_change()?;
        self.tm.sm_inc(SmKind::Data, b).map(|_| ())
    }

    /// Drops a reference on a data block.
    pub fn data_block_dec(&mut self, b: u64) -> CoreResult<()> {
        self.begin_change()?;
        self.tm.sm_dec(SmKind::Data, b).map(|_| ())
    }

    /// Reference count of a metadata block.
    pub fn metadata_block_count(&self, b: u64) -> CoreResult<u32> {
        self.tm.sm_count(SmKind::Meta, false, b)
    }

    /// Data space usage (frees in this transaction count as free immediately).
    pub fn data_usage(&self) -> SpaceUsage {
        let r = self.tm.dsm;
        SpaceUsage {
            total: r.nr_blocks,
            free: r.nr_blocks.saturating_sub(r.nr_allocated),
        }
    }

    /// Metadata space usage (committed free count minus this transaction's
    /// allocations, as dm-thin reports it).
    pub fn metadata_usage(&self) -> SpaceUsage {
        let c = self.tm.msm_c;
        let (total, alloc) = if c.nr_blocks == 0 {
            (self.tm.msm.nr_blocks, self.tm.msm.nr_allocated)
        } else {
            (
                c.nr_blocks,
                c.nr_allocated.saturating_add(self.tm.meta_new_blocks),
            )
        };
        SpaceUsage {
            total,
            free: total.saturating_sub(alloc),
        }
    }

    /// Number of metadata blocks with a non-zero count (current transaction).
    pub fn metadata_allocated(&self) -> u64 {
        self.tm.msm.nr_allocated
    }

    /// Grows the data space map to `nr_blocks` (shrinking is refused).
    pub fn resize_data(&mut self, nr_blocks: u64) -> CoreResult<()> {
        if nr_blocks == self.tm.dsm.nr_blocks {
            return Ok(());
        }
        if nr_blocks > MAX_DATA_BLOCK.saturating_add(1) {
            return Err(CoreError::Invalid);
        }
        self.begin_change()?;
        self.tm.data_extend(nr_blocks)
    }

    /// Grows the metadata space map to `nr_blocks` (capped at
    /// [`MAX_METADATA_BLOCKS`]; must not exceed the store).
    pub fn resize_metadata(&mut self, nr_blocks: u64) -> CoreResult<()> {
        let n = nr_blocks.min(MAX_METADATA_BLOCKS);
        if n == self.tm.msm.nr_blocks {
            return Ok(());
        }
        self.begin_change()?;
        self.tm.meta_extend(n)
    }

    /// `reserve_metadata_snap`: commits, then makes a frozen copy of the
    /// committed superblock whose trees are shared with the live ones.
    pub fn reserve_metadata_snap(&mut self) -> CoreResult<u64> {
        if self.sb.held_root != 0 {
            return Err(CoreError::Busy);
        }
        self.commit()?;
        self.begin_change()?;
        let h = self.tm.meta_alloc()?;
        self.tm
            .store
            .copy(SUPERBLOCK_LOCATION, h, BlockKind::Superblock)?;
        {
            let mut g = self.tm.store.write(h, BlockKind::Superblock)?;
            crate::pdata::codec::zero(
                &mut g,
                superblock::off::DATA_SM_ROOT,
                2 * superblock::SPACE_MAP_ROOT_SIZE,
            )?;
            put_u64(&mut g, superblock::off::HELD_ROOT, 0)?;
            put_u64(&mut g, 8, h)?;
        }
        self.tm.sm_inc(SmKind::Meta, self.sb.mapping_root)?;
        self.tm.sm_inc(SmKind::Meta, self.sb.details_root)?;
        self.sb.held_root = h;
        Ok(h)
    }

    /// `release_metadata_snap`: drops the held snapshot and its references.
    pub fn release_metadata_snap(&mut self) -> CoreResult<()> {
        let h = self.sb.held_root;
        if h == 0 {
            return Err(CoreError::Invalid);
        }
        self.tm.check_meta_block(h)?;
        let (mr, dr) = {
            let g = self.tm.store.read(h, BlockKind::Superblock)?;
            (
                get_u64(&g, superblock::off::MAPPING_ROOT)?,
                get_u64(&g, superblock::off::DETAILS_ROOT)?,
            )
        };
        self.begin_change()?;
        self.sb.held_root = 0;
        self.tm.dec_tree(mr, TreeKind::TopLevel, 0)?;
        self.tm.dec_tree(dr, TreeKind::Details, 0)?;
        self.tm.sm_dec(SmKind::Meta, h)?;
        Ok(())
    }

    /// Calls `f(vblock, mapping)` for every mapping of `dev` in order.
    pub fn for_each_mapping(
        &self,
        dev: u64,
        f: &mut dyn FnMut(u64, Mapping) -> CoreResult<()>,
    ) -> CoreResult<()> {
        self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        self.tm.btree_walk(sub, TreeKind::Mapping, &mut |k, v| {
            f(k, Mapping::unpack(crate::pdata::codec::u64_of(v)?))
        })
    }

    /// Calls `f(dev, details)` for every device in id order.
    pub fn for_each_device(
        &self,
        f: &mut dyn FnMut(u64, DeviceDetails) -> CoreResult<()>,
    ) -> CoreResult<()> {
        self.tm
            .btree_walk(self.sb.details_root, TreeKind::Details, &mut |k, v| {
                let d = match self.cached(k) {
                    Some(c) => c.details,
                    None => DeviceDetails::decode(v)?,
                };
                f(k, d)
            })
    }
}
