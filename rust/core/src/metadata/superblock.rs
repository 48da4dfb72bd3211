// SPDX-License-Identifier: GPL-2.0
//! The thin-pool superblock (block 0; format.md, "Superblock"); it holds the two space
//! maps' root records ([`SmRoot`], defined with the space maps).

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::codec::{bytes, bytes_mut, get_u32, get_u64, put_u32, put_u64, zero};
// The space maps' root records are the space maps' format; the superblock
// only holds two of them.
pub use crate::pdata::space_map::root::{SmRoot, SPACE_MAP_ROOT_SIZE};

/// `THIN_SUPERBLOCK_MAGIC`.
pub const MAGIC: u64 = 27_022_010;
/// Metadata format version written by this implementation.
pub const VERSION: u32 = 2;
/// Superblock flag: the metadata must be checked before being used read-write.
pub const FLAG_NEEDS_CHECK: u32 = 1;
/// Metadata block size in 512-byte sectors.
pub const METADATA_BLOCK_SECTORS: u32 = 8;
/// Location of the superblock.
pub const SUPERBLOCK_LOCATION: u64 = 0;

/// Field offsets inside the superblock.
pub mod off {
    /// `flags` (u32).
    pub const FLAGS: usize = 4;
    /// `uuid` (16 bytes).
    pub const UUID: usize = 16;
    /// `magic` (u64).
    pub const MAGIC: usize = 32;
    /// `version` (u32).
    pub const VERSION: usize = 40;
    /// `time` (u32).
    pub const TIME: usize = 44;
    /// `trans_id` (u64).
    pub const TRANS_ID: usize = 48;
    /// `held_root` (u64).
    pub const HELD_ROOT: usize = 56;
    /// `data_space_map_root` (128 bytes).
    pub const DATA_SM_ROOT: usize = 64;
    /// `metadata_space_map_root` (128 bytes).
    pub const META_SM_ROOT: usize = 192;
    /// `data_mapping_root` (u64).
    pub const MAPPING_ROOT: usize = 320;
    /// `device_details_root` (u64).
    pub const DETAILS_ROOT: usize = 328;
    /// `data_block_size` (u32, sectors).
    pub const DATA_BLOCK_SIZE: usize = 336;
    /// `metadata_block_size` (u32, sectors).
    pub const METADATA_BLOCK_SIZE: usize = 340;
    /// `metadata_nr_blocks` (u64).
    pub const METADATA_NR_BLOCKS: usize = 344;
    /// `compat_flags` (u32).
    pub const COMPAT: usize = 352;
    /// `compat_ro_flags` (u32).
    pub const COMPAT_RO: usize = 356;
    /// `incompat_flags` (u32).
    pub const INCOMPAT: usize = 360;
    /// End of the used part.
    pub const END: usize = 364;
}

/// The decoded superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Superblock {
    /// Flags word (bit 0 = needs_check).
    pub flags: u32,
    /// UUID (never set by dm-thin; kept as read).
    pub uuid: [u8; 16],
    /// Format version.
    pub version: u32,
    /// Snapshot time counter.
    pub time: u32,
    /// Userspace transaction id.
    pub trans_id: u64,
    /// Held metadata snapshot location, 0 = none.
    pub held_root: u64,
    /// Data space map root.
    pub data_sm: SmRoot,
    /// Metadata space map root.
    pub meta_sm: SmRoot,
    /// Root of the two-level mapping tree.
    pub mapping_root: u64,
    /// Root of the device-details tree.
    pub details_root: u64,
    /// Data block size in sectors.
    pub data_block_size: u32,
    /// Metadata device size (blocks) at format time.
    pub metadata_nr_blocks: u64,
    /// compat feature flags.
    pub compat_flags: u32,
    /// compat_ro feature flags.
    pub compat_ro_flags: u32,
    /// incompat feature flags.
    pub incompat_flags: u32,
}

impl Superblock {
    /// Decodes and validates the fields of a superblock whose checksum and
    /// block number have already been verified. Accepts versions 1 and 2;
    /// rejects unknown incompat and compat_ro features.
    pub fn decode(b: &[u8]) -> CoreResult<Self> {
        Self::decode_with(b, false)
    }

    /// Like [`Superblock::decode`]; with `read_only` set, unknown compat_ro
    /// features are accepted (dm-thin does so when the metadata device itself
    /// is read-only).
    pub fn decode_with(b: &[u8], read_only: bool) -> CoreResult<Self> {
        if get_u64(b, off::MAGIC)? != MAGIC {
            return Err(corrupt(Corruption::Magic));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(bytes(b, off::UUID, 16)?);
        let sb = Superblock {
            flags: get_u32(b, off::FLAGS)?,
            uuid,
            version: get_u32(b, off::VERSION)?,
            time: get_u32(b, off::TIME)?,
            trans_id: get_u64(b, off::TRANS_ID)?,
            held_root: get_u64(b, off::HELD_ROOT)?,
            data_sm: SmRoot::decode(bytes(b, off::DATA_SM_ROOT, SPACE_MAP_ROOT_SIZE)?)?,
            meta_sm: SmRoot::decode(bytes(b, off::META_SM_ROOT, SPACE_MAP_ROOT_SIZE)?)?,
            mapping_root: get_u64(b, off::MAPPING_ROOT)?,
            details_root: get_u64(b, off::DETAILS_ROOT)?,
            data_block_size: get_u32(b, off::DATA_BLOCK_SIZE)?,
            metadata_nr_blocks: get_u64(b, off::METADATA_NR_BLOCKS)?,
            compat_flags: get_u32(b, off::COMPAT)?,
            compat_ro_flags: get_u32(b, off::COMPAT_RO)?,
            incompat_flags: get_u32(b, off::INCOMPAT)?,
        };
        if sb.incompat_flags != 0 || (sb.compat_ro_flags != 0 && !read_only) {
            return Err(CoreError::Unsupported);
        }
        if sb.version == 0 || sb.version > VERSION {
            return Err(corrupt(Corruption::Superblock));
        }
        Ok(sb)
    }

    /// Writes every field into `b` (a whole 4 KiB block, zeroing everything
    /// else). The checksum and block number are filled in by the store.
    pub fn encode(&self, b: &mut [u8]) -> CoreResult<()> {
        let len = b.len();
        zero(b, 0, len)?;
        put_u32(b, off::FLAGS, self.flags)?;
        bytes_mut(b, off::UUID, 16)?.copy_from_slice(&self.uuid);
        put_u64(b, off::MAGIC, MAGIC)?;
        put_u32(b, off::VERSION, VERSION)?;
        put_u32(b, off::TIME, self.time)?;
        put_u64(b, off::TRANS_ID, self.trans_id)?;
        put_u64(b, off::HELD_ROOT, self.held_root)?;
        self.data_sm
            .encode(bytes_mut(b, off::DATA_SM_ROOT, SPACE_MAP_ROOT_SIZE)?)?;
        self.meta_sm
            .encode(bytes_mut(b, off::META_SM_ROOT, SPACE_MAP_ROOT_SIZE)?)?;
        put_u64(b, off::MAPPING_ROOT, self.mapping_root)?;
        put_u64(b, off::DETAILS_ROOT, self.details_root)?;
        put_u32(b, off::DATA_BLOCK_SIZE, self.data_block_size)?;
        put_u32(b, off::METADATA_BLOCK_SIZE, METADATA_BLOCK_SECTORS)?;
        put_u64(b, off::METADATA_NR_BLOCKS, self.metadata_nr_blocks)?;
        put_u32(b, off::COMPAT, self.compat_flags)?;
        put_u32(b, off::COMPAT_RO, self.compat_ro_flags)?;
        put_u32(b, off::INCOMPAT, self.incompat_flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn roundtrip_and_offsets() {
        let mut b = vec![0u8; 4096];
        let sb = Superblock {
            flags: FLAG_NEEDS_CHECK,
            version: 2,
            time: 7,
            trans_id: 0x0102_0304_0506_0708,
            held_root: 9,
            data_sm: SmRoot {
                nr_blocks: 100,
                nr_allocated: 3,
                bitmap_root: 4,
                ref_count_root: 5,
            },
            meta_sm: SmRoot {
                nr_blocks: 1000,
                nr_allocated: 10,
                bitmap_root: 1,
                ref_count_root: 2,
            },
            mapping_root: 11,
            details_root: 12,
            data_block_size: 128,
            metadata_nr_blocks: 1000,
            ..Default::default()
        };
        sb.encode(&mut b).unwrap();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        assert_eq!(get_u64(&b, 32).unwrap(), 27_022_010);
        assert_eq!(get_u64(&b, 64).unwrap(), 100);
        assert_eq!(get_u64(&b, 192).unwrap(), 1000);
        assert_eq!(get_u32(&b, 340).unwrap(), 8);
        assert!(b[off::END..].iter().all(|&x| x == 0));
        put_u32(&mut b, off::INCOMPAT, 1).unwrap();
        assert_eq!(Superblock::decode(&b), Err(CoreError::Unsupported));
        put_u32(&mut b, off::INCOMPAT, 0).unwrap();
        put_u64(&mut b, off::MAGIC, 1).unwrap();
        assert_eq!(Superblock::decode(&b), Err(corrupt(Corruption::Magic)));
    }
}
