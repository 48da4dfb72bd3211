// SPDX-License-Identifier: GPL-2.0
//! The metadata snapshot (`reserve_metadata_snap` /
//! `release_metadata_snap`): a frozen copy of a committed superblock whose
//! trees are shared with the live ones, for userspace tools to read.

use crate::core_error::{CoreError, CoreResult};
use crate::metadata::superblock::{self, SUPERBLOCK_LOCATION};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::TreeKind;
use crate::pdata::checksum::BlockKind;
use crate::pdata::codec::{get_u64, put_u64};
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::CacheMem;

use super::ThinMetadata;

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
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
        self.tm.dec_tree(mr, TreeKind::TopLevel)?;
        self.tm.dec_tree(dr, TreeKind::Details)?;
        self.tm.sm_dec(SmKind::Meta, h)?;
        Ok(())
    }
}
