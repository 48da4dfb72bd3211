// SPDX-License-Identifier: GPL-2.0
//! What a provision asks of the pool, under its lock: a cell on the virtual
//! block, a data block (dm-thin's `alloc_data_block`), the mapping once the
//! block holds its data, and the unmapping of discarded ranges.

use kernel::prelude::*;

use super::{
    cells::{Parking, TargetKey},
    member::PoolMember,
    no_space_timeout_secs, PoolState,
};
use crate::{
    core_error::CoreError,
    dm::pool_mode::{BioAction, IoError},
    glue::bio::{BioList, OwnedBio},
};

/// Why no data block was allocated.
pub(crate) enum AllocFailure {
    /// Commit, then try again: the space freed in this transaction may do.
    CommitFirst,
    /// The bio's fate: queue (out of data space) or an error.
    Refused(BioAction),
}

impl PoolState {
    /// Parks `bio`, a bio of `thin`, on the cell of its `vblock` if a
    /// provision of `thin` holds it; if a provision of another target of
    /// the same device does, `thin` must keep the bio on its waiters,
    /// pushed under this hold of the lock ([`Parking::HeldByOther`]): the
    /// cell's close requeues them ([`Self::close_cell`]).
    pub(crate) fn try_park(
        &mut self,
        thin: &dyn PoolMember,
        vblock: u64,
        bio: OwnedBio,
    ) -> Parking {
        self.cells
            .park(thin.dev_id(), vblock, TargetKey::of(thin), bio)
    }

    /// True if a provision of `(dev, vblock)` can open its cell; otherwise
    /// (no memory for it) the caller holds its bio on its thin's waiters
    /// until a cell closes or the next tick ([`Self::requeue_cell_waiters`]).
    pub(crate) fn cell_available(&mut self, dev: u32, vblock: u64) -> bool {
        let available = self.cells.reserve(dev, vblock);
        if !available {
            self.waiting_for_cells = true;
        }
        available
    }

    /// Starts a provision of `vblock` by `thin`: later bios to it park
    /// until [`Self::close_cell`]. Returns the metadata epoch to check at
    /// the end. Never allocates: the caller checked [`Self::cell_available`].
    pub(crate) fn open_cell(&mut self, thin: &dyn PoolMember, vblock: u64) -> Option<u64> {
        if !self.cells.open(thin.dev_id(), vblock, TargetKey::of(thin)) {
            return None;
        }
        self.inflight += 1;
        Some(self.epoch)
    }

    /// The bios of `thin` parked on its open cell of `vblock`, taken off
    /// it; give back what is not used with [`Self::return_parked`] under
    /// the same hold of the lock.
    pub(crate) fn take_parked(&mut self, thin: &dyn PoolMember, vblock: u64) -> BioList {
        self.cells.take_parked(thin.dev_id(), vblock)
    }

    /// Parks bios [`Self::take_parked`] took back on the cell, in order.
    pub(crate) fn return_parked(&mut self, thin: &dyn PoolMember, vblock: u64, bios: BioList) {
        self.cells.return_parked(thin.dev_id(), vblock, bios);
    }

    /// Ends a provision of `vblock` by `thin`; returns the bios of `thin`
    /// that parked on it (and only those: no other provision waits for this
    /// one). Bios of the device's other targets that waited for it wait on
    /// their own targets' waiters: those are requeued here, under the lock
    /// they were pushed under, onto their own targets' lanes.
    pub(crate) fn close_cell(&mut self, thin: &dyn PoolMember, vblock: u64) -> BioList {
        self.inflight = self.inflight.saturating_sub(1);
        self.requeue_cell_waiters();
        let dev = thin.dev_id();
        let closed = self.cells.close(dev, vblock);
        if closed.others_wait {
            for t in self.thins.iter().filter(|t| t.dev_id() == dev) {
                t.requeue_waiters();
            }
        }
        closed.parked
    }

    /// Hands bios that found no memory for a cell back to their workers.
    pub(super) fn requeue_cell_waiters(&mut self) {
        if self.waiting_for_cells {
            self.waiting_for_cells = false;
            for t in self.thins.iter() {
                t.requeue_waiters();
            }
        }
    }

    /// The metadata epoch (see [`Self::open_cell`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// dm-thin's `alloc_data_block`: a free data block, or the fate of the
    /// bio that needed one (queue or error when out of data space). Blocks
    /// freed in this transaction become allocatable only after a commit, so
    /// with dirty metadata and no commit yet (`after_commit` false) the
    /// answer to "no space" is [`AllocFailure::CommitFirst`].
    pub(crate) fn alloc_data_block(&mut self, after_commit: bool) -> Result<u64, AllocFailure> {
        if !self.mode.mode().may_provision() {
            return Err(AllocFailure::Refused(self.mode.unserviceable()));
        }
        let free = self.md.data_usage().free;
        if self.data_low_water.check(free, self.low_water_blocks) {
            pr_warn!(
                "{}: reached low water mark for data device: sending event.\n",
                self.name()
            );
            self.raise_event();
        }
        match self.md.alloc_data_block() {
            Ok(b) => {
                self.flags.change();
                // As dm-thin: commit before the metadata reserve is used
                // up. The reserve is what the mapping insert and the commit
                // itself need; without this, provisions between two
                // periodic commits run the metadata dry mid-insert (ENOSPC:
                // read-only with needs_check) instead of ending in
                // out-of-metadata-space mode at this commit. The block
                // stays ours; if the commit switched the pool to that mode,
                // the provision fails at `end_provision`, which frees it.
                if self.metadata_free_after_reserve() == 0 && self.commit().is_err() {
                    return Err(AllocFailure::Refused(BioAction::Error(IoError::Io)));
                }
                Ok(b)
            }
            Err(CoreError::NoSpace) if !after_commit && self.md.is_dirty() => {
                Err(AllocFailure::CommitFirst)
            }
            Err(CoreError::NoSpace) => {
                pr_warn!("{}: no free data space available.\n", self.name());
                let needs_check = self.md.needs_check();
                let change = self
                    .mode
                    .data_space_exhausted(needs_check, no_space_timeout_secs());
                self.report(&change);
                Err(AllocFailure::Refused(self.mode.unserviceable()))
            }
            Err(e) => {
                self.metadata_operation_failed("dm_pool_alloc_data_block", e);
                Err(AllocFailure::Refused(BioAction::Error(IoError::Io)))
            }
        }
    }

    /// Gives back a block allocated for a provision that failed.
    pub(crate) fn release_data_block(&mut self, b: u64) {
        if let Err(e) = self.md.data_block_dec(b) {
            self.metadata_operation_failed("dm_pool_dec_data_range", e);
        }
    }

    /// Maps `vblock` of `thin` to a block filled by a provision.
    pub(crate) fn insert_mapping(
        &mut self,
        thin: &dyn PoolMember,
        vblock: u64,
        b: u64,
    ) -> Result<(), IoError> {
        match self.md.insert_mapping(thin.dev_id().into(), vblock, b) {
            Ok(()) => {
                self.note_dev_change(thin, self.flags.change());
                self.check_metadata_low_water();
                Ok(())
            }
            Err(e) => {
                self.metadata_operation_failed("dm_thin_insert_block", e);
                Err(IoError::Io)
            }
        }
    }

    /// Writes of `thin` are about to complete into a block not yet mapped
    /// (a block held open, `io/open_block.rs`): from now on its durable
    /// bios and flushes wait for a commit, and the commit's settling closes
    /// the block first, so none completes before those writes are mapped.
    pub(crate) fn note_unmapped_writes(&self, thin: &dyn PoolMember) {
        self.note_dev_change(thin, self.flags.change());
    }

    /// Whether a provision may hold its block open for more writes now: not
    /// while a committer waits for the provisions in flight (it closes the
    /// open blocks and must not see new ones), nor from a suspend on.
    pub(crate) fn may_hold_open(&self) -> bool {
        self.committers == 0 && !self.suspended && !self.quiesced()
    }

    /// Closes the blocks every thin holds open (`io/open_block.rs`): their
    /// provisions then end as the others do. Returns how many.
    pub(crate) fn close_open_blocks(&self) -> usize {
        self.thins.iter().map(|t| t.close_open_blocks()).sum()
    }

    /// Unmaps the blocks of `thin` in `[first, end)` that no provision holds,
    /// calling `freed` with each data block whose last reference went.
    pub(crate) fn unmap_range(
        &mut self,
        thin: &dyn PoolMember,
        first: u64,
        end: u64,
        mut freed: impl FnMut(u64),
    ) -> Result<u64, CoreError> {
        let dev = u64::from(thin.dev_id());
        if let Some(c) = self.cache.get() {
            c.invalidate_range(thin.dev_id(), first, end);
        }
        let mut n = 0;
        let mut from = first;
        while from < end {
            // The runs between the virtual blocks a provision holds, each
            // removed in one pass (dm-thin skips contended blocks too).
            let held = self.cells.first_held(thin.dev_id(), from, end);
            let run_end = held.unwrap_or(end);
            if from < run_end {
                let removed = self.md.remove_range_freeing(dev, from, run_end, &mut freed);
                match removed {
                    Ok(k) => n += k,
                    Err(e) => {
                        self.metadata_operation_failed("dm_thin_remove_range", e);
                        return Err(e);
                    }
                }
            }
            match held {
                Some(h) => from = h.saturating_add(1),
                None => break,
            }
        }
        if n > 0 {
            self.note_dev_change(thin, self.flags.change());
        }
        // Unmapping shadows B-tree nodes: metadata allocations.
        self.check_metadata_low_water();
        Ok(n)
    }
}
