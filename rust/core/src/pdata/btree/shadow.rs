// SPDX-License-Identifier: GPL-2.0
//! Copy-on-write of B-tree nodes: new trees, shadowing a node (a shared
//! node is copied and its children gain a reference), shadowing the path to
//! a key for an in-place update.

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    /// Allocates an empty leaf: the root of a new, empty tree.
    pub(crate) fn new_empty_tree(&mut self, kind: TreeKind) -> CoreResult<u64> {
        let b = self.meta_alloc()?;
        let mut g = self.store.zeroed(b, BlockKind::Node)?;
        node::init(&mut g, true, kind.value_size())?;
        Ok(b)
    }

    /// Returns a writable version of node `b` (itself if it was allocated in
    /// this transaction and is unshared, otherwise a copy).
    pub(crate) fn shadow(&mut self, b: u64, kind: TreeKind) -> CoreResult<u64> {
        if self.known_new(b) {
            // Written in this transaction and referenced once: already ours.
            return Ok(b);
        }
        self.node_header(b, kind)?;
        let count = self.sm_count(SmKind::Meta, false, b)?;
        if count == 0 {
            return Err(corrupt(Corruption::RefCount));
        }
        if count == 1 && self.meta_is_new(b)? {
            // Fell out of the cache (by a later block's slot): back in.
            self.note_new(b);
            return Ok(b);
        }
        let new = self.meta_alloc()?;
        self.store.copy(b, new, BlockKind::Node)?;
        if count > 1 {
            self.inc_children(new, kind)?;
        }
        self.sm_dec(SmKind::Meta, b)?;
        Ok(new)
    }

    /// Takes one more reference on everything node `b` points to.
    pub(super) fn inc_children(&mut self, b: u64, kind: TreeKind) -> CoreResult<()> {
        let h = self.node_header(b, kind)?;
        let refs_meta = !h.leaf || kind == TreeKind::TopLevel;
        if h.leaf && kind != TreeKind::TopLevel && kind != TreeKind::Mapping {
            return Ok(());
        }
        for i in 0..h.nr_entries {
            let v = self.node_value_u64(b, &h, i)?;
            if refs_meta {
                self.check_meta_block(v)?;
                self.sm_inc(SmKind::Meta, v)?;
            } else {
                self.sm_inc(SmKind::Data, v >> 24)?;
            }
        }
        Ok(())
    }

    /// Shadows the path to an existing `key`. Returns the new root, the
    /// (writable) leaf, the entry's index in it and its value.
    pub(crate) fn btree_shadow_path(
        &mut self,
        root: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<(u64, u64, usize, Value)> {
        if self.btree_lookup(root, key, kind)?.is_none() {
            return Err(CoreError::NotFound);
        }
        let root = self.shadow(root, kind)?;
        let mut cur = root;
        for _ in 0..MAX_DEPTH {
            let (h, i, child_or_value) = {
                let g = self.store.read(cur, BlockKind::Node)?;
                let h = node::check(&g, kind.value_size())?;
                let i = node::lower_bound(&g, &h, key)?.ok_or(corrupt(Corruption::KeyOrder))?;
                if h.leaf && node::key(&g, &h, i)? != key {
                    return Err(corrupt(Corruption::KeyOrder));
                }
                (h, i, Value::from_slice(node::value(&g, &h, i)?))
            };
            if h.leaf {
                return Ok((root, cur, i, child_or_value));
            }
            let child = child_or_value.as_u64();
            let nc = self.shadow(child, kind)?;
            if nc != child {
                let mut g = self.store.write(cur, BlockKind::Node)?;
                node::set_value(&mut g, &h, i, &nc.to_le_bytes())?;
            }
            cur = nc;
        }
        Err(corrupt(Corruption::TooDeep))
    }

    /// Overwrites value `i` of a writable leaf (no reference-count semantics).
    pub(crate) fn set_leaf_value(
        &mut self,
        b: u64,
        i: usize,
        v: &[u8],
        kind: TreeKind,
    ) -> CoreResult<()> {
        let mut g = self.store.write(b, BlockKind::Node)?;
        let h = node::check(&g, kind.value_size())?;
        if !h.leaf || i >= h.nr_entries {
            return Err(corrupt(Corruption::NodeHeader));
        }
        node::set_value(&mut g, &h, i, v)
    }
}
