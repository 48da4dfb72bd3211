// SPDX-License-Identifier: GPL-2.0
//! The two records the metadata trees hold as values: a device's details
//! (`disk_device_details`) and a mapping (`block_time`: data block and
//! snapshot time), with their encodings.

use crate::core_error::CoreResult;
use crate::pdata::codec::{get_u32, get_u64, put_u32, put_u64};

use super::MAX_TIME;

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

    /// dm-thin's sharing rule: a mapping made before its device was last
    /// snapshotted (at `snapshotted_time`) is shared, so writes to it must
    /// break sharing.
    pub fn shared_after(&self, snapshotted_time: u32) -> bool {
        snapshotted_time > self.time
    }
}
