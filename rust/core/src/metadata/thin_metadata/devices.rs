// SPDX-License-Identifier: GPL-2.0
//! Thin devices: their details (cached in core between commits, as
//! dm-thin does), creation of thin devices and snapshots, deletion.

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::TreeKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::CacheMem;

use super::{CachedDetails, DeviceDetails, ThinMetadata, DETAILS_CACHE_SLOTS, MAX_TIME};

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
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

    pub(super) fn cached(&self, dev: u64) -> Option<&CachedDetails> {
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
    pub(super) fn put_details(&mut self, dev: u64, d: &DeviceDetails) -> CoreResult<()> {
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
    pub(super) fn write_cached_details(&mut self) -> CoreResult<()> {
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

    pub(super) fn existing(&self, dev: u64) -> CoreResult<DeviceDetails> {
        self.device_details(dev)?.ok_or(CoreError::NotFound)
    }

    pub(super) fn subtree_root(&self, dev: u64) -> CoreResult<u64> {
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

    /// `delete <dev>`, all at once: releases the device's mapping tree;
    /// blocks whose count drops to zero become free (reusable after the
    /// next commit).
    pub fn delete(&mut self, dev: u64) -> CoreResult<()> {
        self.begin_delete(dev)?;
        self.finish_deletion()
    }

    /// `delete <dev>` in pieces: the device is gone at once (its details
    /// and its entry in the top-level tree); its mapping tree is released
    /// by [`Self::delete_step`], so that a big device's release need not be
    /// done in one hold of the pool lock. A half-released tree is never
    /// committed (its blocks would be counted but unreachable, which
    /// `thin_check` calls leaks): [`Self::commit`] finishes the release
    /// first, and [`Self::abort`] forgets it with the rest of the
    /// transaction. A release still going on from an earlier delete is
    /// finished first.
    pub fn begin_delete(&mut self, dev: u64) -> CoreResult<()> {
        self.existing(dev)?;
        self.finish_deletion()?;
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
            let release = self.tm.release_start(v.as_u64(), TreeKind::Mapping)?;
            self.deletion = Some(release).filter(|r| !r.done());
        }
        Ok(())
    }

    /// Releases at most `budget` steps more of the deleted device's mapping
    /// tree (a step drops one reference or releases one node: at most one
    /// leaf's data blocks). Returns true when no release is left.
    pub fn delete_step(&mut self, budget: usize) -> CoreResult<bool> {
        let Some(release) = self.deletion.as_mut() else {
            return Ok(true);
        };
        if self.tm.release_step(release, budget)? {
            self.deletion = None;
        }
        Ok(self.deletion.is_none())
    }

    /// True while a deleted device's mapping tree is being released.
    pub fn deleting(&self) -> bool {
        self.deletion.is_some()
    }

    /// Finishes the release of a deleted device's mapping tree, if any.
    pub(super) fn finish_deletion(&mut self) -> CoreResult<()> {
        self.delete_step(usize::MAX).map(|_| ())
    }
}
