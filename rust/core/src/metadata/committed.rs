// SPDX-License-Identifier: GPL-2.0
//! Lookups in the mapping tree of the last commit, for readers that do not
//! own the metadata (the pool's workers, without the pool lock).
//!
//! Why such a reader may walk that tree: the blocks of the last commit's
//! trees are never written while it is the last commit. A change shadows
//! every node it touches, and the space maps hand out only blocks that are
//! free in the committed counts too. Once the next commit is on disk those
//! blocks may be reused, so a reader must (1) read *copies* of the nodes,
//! since bytes under it may change at any moment after a commit, and (2)
//! learn, after its walk, whether a commit happened meanwhile, and then
//! throw the answer away. The pool's side of that protocol is
//! `rust/pool/committed.rs`; this module only walks.

use core::ops::Deref;

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::metadata::thin_metadata::{Mapping, ThinMetadata};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::descend::descend;
use crate::pdata::btree::{node, TreeKind};
use crate::pdata::tm::CacheMem;

/// Where a reader finds the last commit's mapping tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommittedTree {
    /// Root of the top-level mapping tree (device id to the root of the
    /// device's mapping tree).
    pub mapping_root: u64,
    /// Blocks of the metadata device the commit's space map covers: no node
    /// lies at or past it.
    pub nr_blocks: u64,
}

impl CommittedTree {
    /// Looks `vblock` of device `dev` up, reading nodes with `read` (which
    /// copies block `b` and validates the copy as a B-tree node). If it is
    /// mapped, calls `each` with every mapping of its leaf (itself
    /// included), in key order, and returns its mapping. `None` for a hole
    /// and for a device the commit does not know.
    pub fn lookup_leaf<G: Deref<Target = [u8]>>(
        &self,
        dev: u64,
        vblock: u64,
        mut read: impl FnMut(u64) -> CoreResult<G>,
        mut each: impl FnMut(u64, Mapping),
    ) -> CoreResult<Option<Mapping>> {
        let mut read = |b: u64| {
            if b == 0 || b >= self.nr_blocks {
                return Err(corrupt(Corruption::BlockOutOfRange));
            }
            read(b)
        };
        let sub = descend(
            &mut read,
            self.mapping_root,
            dev,
            TreeKind::TopLevel,
            |g, h, i| i.map(|i| node::value_u64(g, h, i)).transpose(),
        )?
        .flatten();
        let Some(sub) = sub else {
            return Ok(None);
        };
        let found = descend(&mut read, sub, vblock, TreeKind::Mapping, |g, h, found| {
            let Some(i) = found else {
                return Ok(None);
            };
            for j in 0..h.nr_entries {
                each(
                    node::key(g, h, j)?,
                    Mapping::unpack(node::value_u64(g, h, j)?),
                );
            }
            node::value_u64(g, h, i).map(|v| Some(Mapping::unpack(v)))
        })?;
        Ok(found.flatten())
    }
}

impl<S: BlockStore, C: CacheMem> ThinMetadata<S, C> {
    /// The last commit's mapping tree (the one opened, if none since).
    pub fn committed_tree(&self) -> CommittedTree {
        let c = self.committed_superblock();
        CommittedTree {
            mapping_root: c.mapping_root,
            nr_blocks: c.meta_sm.nr_blocks,
        }
    }
}
