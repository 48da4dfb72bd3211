// SPDX-License-Identifier: GPL-2.0
//! B-tree reads over the transaction manager: node headers, lookups (of a
//! key, of a key with its whole leaf, with its sharing), ordered iteration
//! from a key and the last key. The modifications live beside this file
//! (`shadow`, `insert`, `remove`) and so do walks (`walk`).
//!
//! No guard is held across a call that may allocate: nested space-map updates
//! may touch the store at any time.

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::descend::{descend, visit_leaf};
use crate::pdata::btree::node::{self, Header};
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    /// Reads and validates the header of node `b`.
    pub(crate) fn node_header(&self, b: u64, kind: TreeKind) -> CoreResult<Header> {
        self.check_meta_block(b)?;
        let g = self.store.read(b, BlockKind::Node)?;
        node::check(&g, kind.value_size())
    }

    pub(super) fn node_value_u64(&self, b: u64, h: &Header, i: usize) -> CoreResult<u64> {
        let g = self.store.read(b, BlockKind::Node)?;
        node::value_u64(&g, h, i)
    }

    pub(super) fn node_key(&self, b: u64, h: &Header, i: usize) -> CoreResult<u64> {
        let g = self.store.read(b, BlockKind::Node)?;
        node::key(&g, h, i)
    }

    /// Walks from `root` down to the leaf that holds `key`, or would, and
    /// hands `at_leaf` that leaf, its header and `key`'s index in it if it is
    /// there. `None` if the walk ends above the leaves (`key` is below every
    /// key of an internal node).
    fn at_leaf_of<R>(
        &self,
        root: u64,
        key: u64,
        kind: TreeKind,
        at_leaf: impl FnOnce(&[u8], &Header, Option<usize>) -> CoreResult<R>,
    ) -> CoreResult<Option<R>> {
        let read = |b| {
            self.check_meta_block(b)?;
            self.store.read(b, BlockKind::Node)
        };
        descend(read, root, key, kind, at_leaf)
    }

    /// Looks `key` up.
    pub(crate) fn btree_lookup(
        &self,
        root: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<Option<Value>> {
        let found = self.at_leaf_of(root, key, kind, |g, h, found| {
            found
                .map(|i| node::value(g, h, i).map(Value::from_slice))
                .transpose()
        })?;
        Ok(found.flatten())
    }

    /// Looks `key` up; if it is there, calls `each` with every entry of its
    /// leaf, in key order (itself included): one walk serves the neighbours
    /// of a block too. Returns the value of `key`.
    pub(crate) fn btree_lookup_leaf(
        &self,
        root: u64,
        key: u64,
        kind: TreeKind,
        mut each: impl FnMut(u64, Value),
    ) -> CoreResult<Option<Value>> {
        let found = self.at_leaf_of(root, key, kind, |g, h, found| {
            let v = visit_leaf(g, h, found, |k, v| each(k, Value::from_slice(v)))?;
            Ok(v.map(Value::from_slice))
        })?;
        Ok(found.flatten())
    }

    /// Looks `key` up and reports whether any node on its path (root
    /// included) or, for mapping trees, the data block has a count above 1.
    pub(crate) fn btree_lookup_shared(
        &self,
        root: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<Option<(Value, bool)>> {
        let mut cur = root;
        let mut shared = false;
        for _ in 0..MAX_DEPTH {
            shared |= self.sm_count(SmKind::Meta, false, cur)? > 1;
            self.check_meta_block(cur)?;
            let g = self.store.read(cur, BlockKind::Node)?;
            let h = node::check(&g, kind.value_size())?;
            let idx = node::lower_bound(&g, &h, key)?;
            if h.leaf {
                return match idx {
                    Some(i) if node::key(&g, &h, i)? == key => {
                        let v = Value::from_slice(node::value(&g, &h, i)?);
                        drop(g);
                        if kind == TreeKind::Mapping {
                            shared |= self.sm_count(SmKind::Data, false, v.as_u64() >> 24)? > 1;
                        }
                        Ok(Some((v, shared)))
                    }
                    _ => Ok(None),
                };
            }
            match idx {
                None => return Ok(None),
                Some(i) => cur = node::value_u64(&g, &h, i)?,
            }
        }
        Err(corrupt(Corruption::TooDeep))
    }

    /// First entry with key `>= key`.
    pub(crate) fn btree_lookup_ge(
        &self,
        root: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<Option<(u64, Value)>> {
        // (node, child index taken, nr_entries)
        let mut spine = [(0u64, 0usize, 0usize); MAX_DEPTH];
        let mut depth = 0usize;
        let mut cur = root;
        let mut search = Some(key);
        let mut budget = self.node_budget();
        loop {
            if budget == 0 {
                return Err(corrupt(Corruption::TooDeep));
            }
            budget -= 1;
            self.check_meta_block(cur)?;
            let g = self.store.read(cur, BlockKind::Node)?;
            let h = node::check(&g, kind.value_size())?;
            if !h.leaf {
                let i = match search {
                    Some(k) => node::lower_bound(&g, &h, k)?.unwrap_or(0),
                    None => 0,
                };
                let slot = spine.get_mut(depth).ok_or(corrupt(Corruption::TooDeep))?;
                *slot = (cur, i, h.nr_entries);
                depth += 1;
                cur = node::value_u64(&g, &h, i)?;
                continue;
            }
            let start = match search {
                Some(k) => match node::lower_bound(&g, &h, k)? {
                    Some(i) if node::key(&g, &h, i)? == k => i,
                    Some(i) => i + 1,
                    None => 0,
                },
                None => 0,
            };
            if start < h.nr_entries {
                return Ok(Some((
                    node::key(&g, &h, start)?,
                    Value::from_slice(node::value(&g, &h, start)?),
                )));
            }
            drop(g);
            // Move to the next subtree to the right.
            loop {
                if depth == 0 {
                    return Ok(None);
                }
                depth -= 1;
                let (b, i, nr) = *spine.get(depth).ok_or(corrupt(Corruption::TooDeep))?;
                if i + 1 < nr {
                    if let Some(slot) = spine.get_mut(depth) {
                        *slot = (b, i + 1, nr);
                    }
                    depth += 1;
                    let h = self.node_header(b, kind)?;
                    cur = self.node_value_u64(b, &h, i + 1)?;
                    search = None;
                    break;
                }
            }
        }
    }

    /// Largest key in the tree.
    pub(crate) fn btree_last_key(&self, root: u64, kind: TreeKind) -> CoreResult<Option<u64>> {
        let mut cur = root;
        for _ in 0..MAX_DEPTH {
            let h = self.node_header(cur, kind)?;
            if h.nr_entries == 0 {
                return Ok(None);
            }
            if h.leaf {
                return self.node_key(cur, &h, h.nr_entries - 1).map(Some);
            }
            cur = self.node_value_u64(cur, &h, h.nr_entries - 1)?;
        }
        Err(corrupt(Corruption::TooDeep))
    }
}
