// SPDX-License-Identifier: GPL-2.0
//! The pool's space: growing the data and metadata devices, the metadata
//! reserve dm-thin keeps back, and the low-water events.

use core::sync::atomic::Ordering;
use kernel::prelude::*;

use super::{no_space_timeout_secs, PoolState};
use crate::{
    dm::errno::EINVAL,
    dm::pool_mode::PoolMode,
    dm::pool_table::{
        metadata_dev_blocks, metadata_dev_too_big, metadata_low_water_threshold,
        METADATA_BLOCK_SECTORS, METADATA_MAX_SECTORS,
    },
    glue::device::BdevHandle,
    pdata::block_store::BlockStore,
};

/// The pool's two space maps.
#[derive(Clone, Copy)]
pub(crate) enum Space {
    /// The data device.
    Data,
    /// The metadata device.
    Metadata,
}

impl Space {
    /// As dm-thin's log lines name the device.
    fn name(self) -> &'static str {
        match self {
            Space::Data => "data",
            Space::Metadata => "metadata",
        }
    }
}

/// The metadata blocks dm-thin uses of a device of `device_blocks` 4 KiB
/// blocks (capped, as `get_metadata_dev_size_in_blocks`).
pub(crate) fn usable_metadata_blocks(device_blocks: u64) -> u64 {
    metadata_dev_blocks(device_blocks.saturating_mul(METADATA_BLOCK_SECTORS))
}

/// dm-thin's `warn_if_metadata_device_too_big`, at ctr and when the metadata
/// device grows: LVM sizes metadata below the cap, so a larger device is
/// likely a mistake worth a line in the log.
pub(crate) fn warn_if_metadata_device_too_big(dev: &BdevHandle) {
    if metadata_dev_too_big(dev.nr_sectors()) {
        pr_warn!(
            "Metadata device {} is larger than {} sectors: excess space will not be used.\n",
            dev.name(),
            METADATA_MAX_SECTORS
        );
    }
}

/// dm-thin's `__set_metadata_reserve` and `dm_pool_get_free_metadata_block_count`:
/// `min(4096, total / 10)` blocks are kept back from `free` (clamped at 0).
fn free_after_reserve(total: u64, free: u64) -> u64 {
    free.saturating_sub((total / 10).min(4096))
}

/// Pure logic of the pool target, for KUnit.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    /// The metadata reserve matches dm-thin's numbers.
    pub(crate) fn metadata_reserve() -> bool {
        super::free_after_reserve(512, 500) == 449
            && super::free_after_reserve(65536, 65000) == 65000 - 4096
            && super::free_after_reserve(512, 10) == 0
    }
}

impl PoolState {
    /// Free metadata blocks as dm-thin reports them (reserve subtracted).
    pub(crate) fn metadata_free_after_reserve(&self) -> u64 {
        let usage = self.md.metadata_usage();
        free_after_reserve(usage.total, usage.free)
    }

    /// Sets the metadata low-water threshold of the metadata device's size
    /// now (the metadata checks it at every allocation).
    pub(super) fn set_metadata_low_water(&mut self) {
        let dev_blocks = usable_metadata_blocks(self.md.store().nr_blocks());
        self.md
            .set_metadata_low_water(metadata_low_water_threshold(dev_blocks));
    }

    /// Sends the metadata low-water event if a metadata allocation crossed
    /// the threshold since the last check: after every operation that may
    /// allocate metadata (messages, mappings, unmaps, commits, resizes), so
    /// the event goes out with the operation, as dm-thin's does from the
    /// allocation itself.
    pub(super) fn check_metadata_low_water(&mut self) {
        if self.md.take_metadata_low_water() {
            pr_warn!(
                "{}: reached low water mark for metadata device: sending event.\n",
                self.name()
            );
            self.raise_event();
        }
    }

    /// dm-thin's `maybe_resize_data_dev` and `maybe_resize_metadata_dev`:
    /// grows a space map to `wanted` blocks (the pool target's size, or the
    /// metadata device's); refuses to shrink; true if a commit is due.
    pub(crate) fn maybe_grow(&mut self, space: Space, wanted: u64) -> Result<bool> {
        let current = match space {
            Space::Data => self.md.data_usage().total,
            Space::Metadata => self.md.metadata_usage().total,
        };
        if wanted < current {
            match space {
                Space::Data => pr_err!(
                    "{}: pool target ({} blocks) too small: expected {}\n",
                    self.name(),
                    wanted,
                    current
                ),
                Space::Metadata => pr_err!(
                    "{}: metadata device ({} blocks) too small: expected {}\n",
                    self.name(),
                    wanted,
                    current
                ),
            }
            return Err(Error::from_errno(-EINVAL));
        }
        if wanted == current {
            return Ok(false);
        }
        if self.md.needs_check() {
            pr_err!(
                "{}: unable to grow the {} device until repaired.\n",
                self.name(),
                space.name()
            );
            return Ok(false);
        }
        if self.mode() == PoolMode::ReadOnly {
            // dm-thin extends the space map in core with its metadata
            // read-only (and fails the pool if that needs a new block);
            // rthin changes no metadata in read-only mode and grows at the
            // first preresume in write mode (Documentation/interface.md).
            pr_info!(
                "{}: not growing the {} device from {} to {} blocks while read-only\n",
                self.name(),
                space.name(),
                current,
                wanted
            );
            return Ok(false);
        }
        // A new pool's data space map starts empty and its first preresume
        // sizes it: dm-thin logs that as no growth.
        if current > 0 {
            pr_info!(
                "{}: growing the {} device from {} to {} blocks\n",
                self.name(),
                space.name(),
                current,
                wanted
            );
        }
        let resized = match space {
            Space::Data => self.md.resize_data(wanted),
            Space::Metadata => {
                // Out of metadata space asks for write mode first.
                let change = self.mode.metadata_grew(false, no_space_timeout_secs());
                self.report(&change);
                self.md.resize_metadata(wanted)
            }
        };
        // The threshold follows the metadata device's size.
        self.set_metadata_low_water();
        self.check_metadata_low_water();
        if let Err(e) = resized {
            let op = match space {
                Space::Data => {
                    pr_err!("{}: failed to resize data device\n", self.name());
                    "dm_pool_resize_data_dev"
                }
                Space::Metadata => "dm_pool_resize_metadata_dev",
            };
            self.metadata_operation_failed(op, e);
            return Err(Error::from_errno(-e.errno()));
        }
        Ok(true)
    }

    /// Sizes the mapping cache for the pool's data blocks (they grew).
    pub(crate) fn grow_cache(&mut self) {
        self.cache.grow_for(self.md.data_usage().total);
        let slots = self.cache.slots();
        self.flags
            .mapping_cache_slots
            .store(slots, Ordering::Relaxed);
    }
}
