// SPDX-License-Identifier: GPL-2.0
//! The data and metadata space maps as the metadata object exposes them:
//! allocating and counting data blocks, usage, growing either device.

use crate::core_error::{CoreError, CoreResult};
use crate::pdata::block_store::BlockStore;
use crate::pdata::space_map::{SmKind, MAX_METADATA_BLOCKS};
use crate::pdata::tm::CacheMem;

use super::{SpaceUsage, ThinMetadata, MAX_DATA_BLOCK};

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
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

    /// How many times a data block's count fell to zero since the metadata
    /// was opened, in any transaction and by any operation (unmaps,
    /// replaced mappings, deletes, releasing the metadata snapshot, blocks
    /// given back): a running count that aborts do not lower, so a change
    /// across a commit means that commit made blocks free.
    pub fn data_blocks_freed(&self) -> u64 {
        self.tm.data_blocks_freed
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
        let (total, free) = self.tm.meta_space();
        SpaceUsage { total, free }
    }

    /// Sets the metadata low-water threshold: free metadata blocks at or
    /// below which the pool sends an event. Checked after every metadata
    /// allocation, whatever the operation (a message, a mapping, an unmap,
    /// a commit, a resize), as dm-thin's metadata space map checks it.
    pub fn set_metadata_low_water(&mut self, threshold: u64) {
        self.tm.meta_low_water.set(threshold);
    }

    /// True (once) if a metadata allocation crossed the low-water threshold
    /// downwards since the last call (edge-triggered: it fires again once
    /// free space rose above the threshold and fell back).
    pub fn take_metadata_low_water(&mut self) -> bool {
        self.tm.meta_low_water.take_crossed()
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
}
