// SPDX-License-Identifier: GPL-2.0
//! Changes to a device's mappings: inserting one, removing one or a range
//! (one B-tree descent per run of a leaf).

use crate::core_error::{CoreError, CoreResult};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::{TreeKind, Value};
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::CacheMem;

use super::{Mapping, ThinMetadata, MAX_DATA_BLOCK};

/// Mappings a range removal takes out of a leaf per descent (their values
/// are copied to the stack first).
const REMOVE_RUN: usize = 16;

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
    /// Maps `vblock` of `dev` to `data_block` (which the caller allocated with
    /// [`Self::alloc_data_block`], count 1) at the current time. A previous
    /// mapping to a different block drops that block's reference.
    pub fn insert_mapping(&mut self, dev: u64, vblock: u64, data_block: u64) -> CoreResult<()> {
        let mut d = self.existing(dev)?;
        if data_block >= self.tm.dsm.nr_blocks || data_block > MAX_DATA_BLOCK {
            return Err(CoreError::Invalid);
        }
        self.begin_change()?;
        let (top, leaf, idx, sub) =
            self.tm
                .btree_shadow_path(self.sb.mapping_root, dev, TreeKind::TopLevel)?;
        self.sb.mapping_root = top;
        let sub = sub.as_u64();
        let bt = Mapping {
            data_block,
            time: self.sb.time,
        }
        .pack();
        let (nsub, old) =
            self.tm
                .btree_insert(sub, vblock, &bt.to_le_bytes(), TreeKind::Mapping)?;
        self.tm
            .set_leaf_value(leaf, idx, &nsub.to_le_bytes(), TreeKind::TopLevel)?;
        match old {
            Some(o) => {
                let ob = Mapping::unpack(o.as_u64()).data_block;
                if ob != data_block {
                    self.tm.sm_dec(SmKind::Data, ob)?;
                }
                Ok(())
            }
            None => {
                d.mapped_blocks = d.mapped_blocks.saturating_add(1);
                self.put_details(dev, &d)
            }
        }
    }

    /// Removes the mappings of `dev` in `[begin, end)`, releasing their data
    /// blocks. Returns how many were removed.
    pub fn remove_range(&mut self, dev: u64, begin: u64, end: u64) -> CoreResult<u64> {
        self.remove_range_freeing(dev, begin, end, |_| {})
    }

    /// As [`Self::remove_range`], calling `freed` with each data block whose
    /// last reference went (dm-thin's passdown candidates): one pass over
    /// the subtree, one shadowing of the top level and one details update
    /// for the whole range.
    pub fn remove_range_freeing(
        &mut self,
        dev: u64,
        begin: u64,
        end: u64,
        mut freed: impl FnMut(u64),
    ) -> CoreResult<u64> {
        let mut d = self.existing(dev)?;
        let sub = self.subtree_root(dev)?;
        match self.tm.btree_lookup_ge(sub, begin, TreeKind::Mapping)? {
            Some((k, _)) if k < end => {}
            _ => return Ok(0),
        }
        self.begin_change()?;
        let (top, leaf, idx, sub) =
            self.tm
                .btree_shadow_path(self.sb.mapping_root, dev, TreeKind::TopLevel)?;
        self.sb.mapping_root = top;
        let mut sub = sub.as_u64();
        let mut n = 0u64;
        let mut from = begin;
        // A run of entries of one leaf per descent (end > begin here).
        let last = end - 1;
        let mut removed = [Value::from_slice(&[]); REMOVE_RUN];
        let res = loop {
            let k = match self.tm.btree_lookup_ge(sub, from, TreeKind::Mapping) {
                Ok(Some((k, _))) if k <= last => k,
                Ok(_) => break Ok(()),
                Err(e) => break Err(e),
            };
            let (ns, count, last_key) =
                match self
                    .tm
                    .btree_remove_run(sub, k, last, TreeKind::Mapping, &mut removed)
                {
                    Ok(x) => x,
                    Err(e) => break Err(e),
                };
            sub = ns;
            n += count as u64;
            let mut dec = Ok(());
            for v in removed.iter().take(count) {
                let b = Mapping::unpack(v.as_u64()).data_block;
                match self.tm.sm_dec(SmKind::Data, b) {
                    Ok(0) => freed(b),
                    Ok(_) => {}
                    Err(e) => {
                        dec = Err(e);
                        break;
                    }
                }
            }
            if let Err(e) = dec {
                break Err(e);
            }
            match last_key.checked_add(1) {
                Some(f) if count > 0 => from = f,
                _ => break Ok(()),
            }
        };
        self.tm
            .set_leaf_value(leaf, idx, &sub.to_le_bytes(), TreeKind::TopLevel)?;
        res?;
        d.mapped_blocks = d.mapped_blocks.saturating_sub(n);
        self.put_details(dev, &d)?;
        Ok(n)
    }

    /// Removes the mapping of `vblock`; returns false if it was not mapped.
    pub fn remove_mapping(&mut self, dev: u64, vblock: u64) -> CoreResult<bool> {
        let end = vblock.checked_add(1).ok_or(CoreError::Invalid)?;
        Ok(self.remove_range(dev, vblock, end)? == 1)
    }
}
