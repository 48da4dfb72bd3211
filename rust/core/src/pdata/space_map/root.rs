// SPDX-License-Identifier: GPL-2.0
//! The root record of a space map (`disk_sm_root`; format.md, "Superblock"): what a
//! transaction commits of each space map, stored in the superblock.

use crate::core_error::CoreResult;
use crate::pdata::codec::{get_u64, put_u64, zero};

/// Size of each space-map root area in the superblock.
pub const SPACE_MAP_ROOT_SIZE: usize = 128;

/// `disk_sm_root`: the root record of a space map (32 bytes used of 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmRoot {
    /// Number of blocks the space map covers.
    pub nr_blocks: u64,
    /// Number of blocks with a non-zero count.
    pub nr_allocated: u64,
    /// Metadata SM: index block; data SM: root of the index B-tree.
    pub bitmap_root: u64,
    /// Root of the overflow reference-count B-tree.
    pub ref_count_root: u64,
}

impl SmRoot {
    /// Decodes a root record from (at least) 32 bytes.
    pub fn decode(b: &[u8]) -> CoreResult<Self> {
        Ok(SmRoot {
            nr_blocks: get_u64(b, 0)?,
            nr_allocated: get_u64(b, 8)?,
            bitmap_root: get_u64(b, 16)?,
            ref_count_root: get_u64(b, 24)?,
        })
    }

    /// Encodes the record into a 128-byte area (the unused tail is zeroed).
    pub fn encode(&self, b: &mut [u8]) -> CoreResult<()> {
        zero(b, 0, SPACE_MAP_ROOT_SIZE)?;
        put_u64(b, 0, self.nr_blocks)?;
        put_u64(b, 8, self.nr_allocated)?;
        put_u64(b, 16, self.bitmap_root)?;
        put_u64(b, 24, self.ref_count_root)
    }
}
