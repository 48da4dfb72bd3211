// SPDX-License-Identifier: GPL-2.0
//! The index entries of a space map (`disk_index_entry`) and which map they
//! belong to: shared by the space maps and the transaction manager's cache
//! of index entries, which sits below them.

use crate::core_error::CoreResult;
use crate::pdata::codec::{get_u32, get_u64, put_u32, put_u64};

/// Size of one index entry.
pub const INDEX_ENTRY_SIZE: usize = 16;

/// Which space map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmKind {
    /// Metadata blocks.
    Meta,
    /// Data blocks.
    Data,
}

/// `disk_index_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexEntry {
    /// Location of the bitmap block.
    pub blocknr: u64,
    /// Free entries in the bitmap (entries past the end count as free).
    pub nr_free: u32,
    /// No free entry exists below this index.
    pub none_free_before: u32,
}

impl IndexEntry {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8]) -> CoreResult<Self> {
        Ok(IndexEntry {
            blocknr: get_u64(b, 0)?,
            nr_free: get_u32(b, 8)?,
            none_free_before: get_u32(b, 12)?,
        })
    }

    /// Encodes into 16 bytes.
    pub fn encode(&self) -> [u8; INDEX_ENTRY_SIZE] {
        let mut b = [0u8; INDEX_ENTRY_SIZE];
        let _ = put_u64(&mut b, 0, self.blocknr);
        let _ = put_u32(&mut b, 8, self.nr_free);
        let _ = put_u32(&mut b, 12, self.none_free_before);
        b
    }
}
