// SPDX-License-Identifier: GPL-2.0
//! The thin-pool metadata object: devices, mappings, transactions and
//! metadata snapshots on top of the B-trees and space maps (format.md, "Trees
//! of the thin pool" to "Metadata snapshot").
//!
//! Every mutating call marks the metadata "in service"; [`ThinMetadata::commit`]
//! then makes the whole transaction durable (superblock written last) and does
//! nothing at all if nothing changed. If a mutating call fails, the transaction
//! may be half applied: the caller must [`ThinMetadata::abort`], which returns
//! to the last commit (dm-thin does the same and switches the pool to
//! read-only).
//!
//! This file holds the object, its transactions and lookups; the rest of its
//! methods live beside it, one concept a file:
//!
//! | file | what |
//! |---|---|
//! | `thin_metadata/records.rs` | [`DeviceDetails`] and [`Mapping`], the trees' values |
//! | `thin_metadata/devices.rs` | device details and their cache; creating and deleting devices |
//! | `thin_metadata/mappings.rs` | inserting and removing mappings |
//! | `thin_metadata/space.rs` | data blocks, space usage, growing the devices |
//! | `thin_metadata/metadata_snap.rs` | the metadata snapshot for userspace tools |

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::metadata::superblock::{
    self, SmRoot, Superblock, FLAG_NEEDS_CHECK, SUPERBLOCK_LOCATION,
};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::release::{Release, MAPPING_RELEASE_DEPTH};
use crate::pdata::btree::{TreeKind, Value};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::{self, IndexEntry, ENTRIES_PER_BITMAP, MAX_METADATA_BLOCKS};
use crate::pdata::tm::{CacheMem, InlineCaches, Tm};

mod devices;
mod mappings;
mod metadata_snap;
mod records;
mod space;

pub use records::{DeviceDetails, Mapping};

/// Largest thin device id accepted by dm-thin's messages (24 bits).
pub const MAX_DEV_ID: u64 = (1 << 24) - 1;
/// Largest snapshot time representable in a mapping (24 bits).
pub const MAX_TIME: u32 = (1 << 24) - 1;
/// Largest data block number representable in a mapping (40 bits).
pub const MAX_DATA_BLOCK: u64 = (1 << 40) - 1;
/// Smallest metadata device accepted by [`ThinMetadata::format`], in blocks.
pub const MIN_METADATA_BLOCKS: u64 = 32;

/// Result of a mapping lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupResult {
    /// The mapping.
    pub mapping: Mapping,
    /// The device was snapshotted after the mapping was made
    /// ([`Mapping::shared_after`]), so writes must break sharing.
    pub shared: bool,
}

impl LookupResult {
    /// `mapping` of a device with `details`, with its sharing.
    pub fn new(details: &DeviceDetails, mapping: Mapping) -> Self {
        Self {
            mapping,
            shared: mapping.shared_after(details.snapshotted_time),
        }
    }
}

/// Space usage of one space map, as dm-thin reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceUsage {
    /// Total blocks.
    pub total: u64,
    /// Free blocks: those with a count of 0 in the current transaction, as
    /// dm-thin's `dm_sm_get_nr_free` counts them; for metadata the reserve
    /// is not free (interface.md, "Status lines").
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
    /// The release of a deleted device's mapping tree, while it goes on
    /// (`begin_delete`).
    deletion: Option<Release<MAPPING_RELEASE_DEPTH>>,
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
            deletion: None,
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
            deletion: None,
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
    /// superblock and flush again. Does nothing if nothing changed. A
    /// deleted device's tree still being released is released whole first.
    pub fn commit(&mut self) -> CoreResult<()> {
        self.finish_deletion()?;
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
        self.deletion = None;
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
