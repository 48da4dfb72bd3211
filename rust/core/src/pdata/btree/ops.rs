// SPDX-License-Identifier: GPL-2.0
//! B-tree algorithms over the transaction manager: lookup, insert (top-down
//! with pre-emptive splitting, the root splits beneath itself), remove (empty
//! nodes are unlinked, a root with one child absorbs it), ordered iteration,
//! walks and recursive release. Every modification shadows the root-to-leaf
//! path first; shadowing a shared node increments its children's counts.
//!
//! No guard is held across a call that may allocate: nested space-map updates
//! may touch the store at any time.

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::descend::{descend, visit_leaf};
use crate::pdata::btree::node::{self, Header};
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

/// Free entries a sibling needs to take entries from a full node instead of
/// the node splitting (persistent-data's `SPACE_THRESHOLD`).
const SPACE_THRESHOLD: usize = 8;

/// Recursion limit of the two-level release (top-level depth + bottom depth).
const MAX_RELEASE_DEPTH: usize = 2 * MAX_DEPTH + 2;

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    /// Reads and validates the header of node `b`.
    pub(crate) fn node_header(&self, b: u64, kind: TreeKind) -> CoreResult<Header> {
        self.check_meta_block(b)?;
        let g = self.store.read(b, BlockKind::Node)?;
        node::check(&g, kind.value_size())
    }

    fn node_value_u64(&self, b: u64, h: &Header, i: usize) -> CoreResult<u64> {
        let g = self.store.read(b, BlockKind::Node)?;
        node::value_u64(&g, h, i)
    }

    fn node_key(&self, b: u64, h: &Header, i: usize) -> CoreResult<u64> {
        let g = self.store.read(b, BlockKind::Node)?;
        node::key(&g, h, i)
    }

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
    fn inc_children(&mut self, b: u64, kind: TreeKind) -> CoreResult<()> {
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

    /// Drops one reference to the tree rooted at `b`; when a node's count
    /// reaches zero everything it references is released too (for top-level
    /// trees including the devices' mapping trees and their data blocks).
    pub(crate) fn dec_tree(&mut self, b: u64, kind: TreeKind, depth: usize) -> CoreResult<()> {
        if depth > MAX_RELEASE_DEPTH {
            return Err(corrupt(Corruption::TooDeep));
        }
        self.check_meta_block(b)?;
        let count = self.sm_count(SmKind::Meta, false, b)?;
        if count == 0 {
            return Err(corrupt(Corruption::RefCount));
        }
        if count == 1 {
            // Release the children first: `b` stays allocated meanwhile.
            let h = self.node_header(b, kind)?;
            for i in 0..h.nr_entries {
                let v = self.node_value_u64(b, &h, i)?;
                if !h.leaf {
                    self.dec_tree(v, kind, depth + 1)?;
                } else {
                    match kind {
                        TreeKind::TopLevel => self.dec_tree(v, TreeKind::Mapping, depth + 1)?,
                        TreeKind::Mapping => {
                            self.sm_dec(SmKind::Data, v >> 24)?;
                        }
                        _ => {}
                    }
                }
            }
        }
        self.sm_dec(SmKind::Meta, b)?;
        Ok(())
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

    /// Inserts or overwrites `key`. Returns the new root and the old value.
    pub(crate) fn btree_insert(
        &mut self,
        root: u64,
        key: u64,
        value: &[u8],
        kind: TreeKind,
    ) -> CoreResult<(u64, Option<Value>)> {
        if value.len() != kind.value_size() {
            return Err(CoreError::Invalid);
        }
        let root = self.shadow(root, kind)?;
        // One read per level: a node's header, the key's index and the child
        // to follow come from one access; a full node is made room in when
        // the walk reaches it (a child with its parent at hand, the root by
        // splitting it beneath itself).
        let mut cur = root;
        let mut parent: Option<(u64, usize)> = None;
        for _ in 0..2 * MAX_DEPTH {
            let (h, idx, child) = {
                let g = self.store.read(cur, BlockKind::Node)?;
                let h = node::check(&g, kind.value_size())?;
                let idx = node::lower_bound(&g, &h, key)?;
                let child = match h.leaf {
                    true => 0,
                    false => node::value_u64(&g, &h, idx.unwrap_or(0))?,
                };
                (h, idx, child)
            };
            if h.is_full() {
                // After making room the node is not full: no second round.
                match parent.take() {
                    Some((p, pi)) => cur = self.rebalance_or_split(p, pi, cur, key, kind)?,
                    None if cur == root => self.split_beneath(root, kind)?,
                    None => return Err(corrupt(Corruption::NodeHeader)),
                }
                continue;
            }
            if h.leaf {
                let mut g = self.store.write(cur, BlockKind::Node)?;
                let mut h = h;
                if let Some(i) = idx {
                    if node::key(&g, &h, i)? == key {
                        let old = Value::from_slice(node::value(&g, &h, i)?);
                        node::set_value(&mut g, &h, i, value)?;
                        return Ok((root, Some(old)));
                    }
                }
                let pos = idx.map_or(0, |i| i + 1);
                node::insert_at(&mut g, &mut h, pos, key, value)?;
                return Ok((root, None));
            }
            let i = match idx {
                Some(i) => i,
                None => {
                    let mut g = self.store.write(cur, BlockKind::Node)?;
                    node::set_key(&mut g, &h, 0, key)?;
                    0
                }
            };
            let nc = self.shadow(child, kind)?;
            if nc != child {
                let mut g = self.store.write(cur, BlockKind::Node)?;
                node::set_value(&mut g, &h, i, &nc.to_le_bytes())?;
            }
            parent = Some((cur, i));
            cur = nc;
        }
        Err(corrupt(Corruption::TooDeep))
    }

    /// Makes room in the full, writable child `child` at index `i` of the
    /// writable node `parent`, as persistent-data does: entries move into
    /// the left or the right sibling if it is unshared and has at least
    /// [`SPACE_THRESHOLD`] free entries (the two share their entries evenly),
    /// otherwise the child splits in two. So a sequential fill leaves nodes
    /// nearly full instead of half full. Returns the node `key` goes into.
    fn rebalance_or_split(
        &mut self,
        parent: u64,
        i: usize,
        child: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<u64> {
        let ph = self.node_header(parent, kind)?;
        for right_side in [false, true] {
            let sib_i = match right_side {
                false if i > 0 => i - 1,
                true if i + 1 < ph.nr_entries => i + 1,
                _ => continue,
            };
            let sib = self.node_value_u64(parent, &ph, sib_i)?;
            let sh = self.node_header(sib, kind)?;
            if sh.max_entries - sh.nr_entries.min(sh.max_entries) < SPACE_THRESHOLD
                || self.sm_count(SmKind::Meta, false, sib)? > 1
            {
                continue;
            }
            let ns = self.shadow(sib, kind)?;
            if ns != sib {
                let mut g = self.store.write(parent, BlockKind::Node)?;
                node::set_value(&mut g, &ph, sib_i, &ns.to_le_bytes())?;
            }
            let (left, right, right_i) = if right_side {
                (child, ns, sib_i)
            } else {
                (ns, child, i)
            };
            let right_key = self.share_evenly(left, right, kind)?;
            let mut g = self.store.write(parent, BlockKind::Node)?;
            node::set_key(&mut g, &ph, right_i, right_key)?;
            return Ok(if key >= right_key { right } else { left });
        }
        let (sib, sib_key) = self.split_node(child, kind)?;
        let mut g = self.store.write(parent, BlockKind::Node)?;
        let mut h = node::check(&g, ph.value_size)?;
        node::insert_at(&mut g, &mut h, i + 1, sib_key, &sib.to_le_bytes())?;
        Ok(if key >= sib_key { sib } else { child })
    }

    /// Moves entries between the writable neighbours `left` and `right`
    /// (every key of `left` below every key of `right`) until each holds
    /// half of them; returns `right`'s new first key.
    fn share_evenly(&mut self, left: u64, right: u64, kind: TreeKind) -> CoreResult<u64> {
        let lh = self.node_header(left, kind)?;
        let rh = self.node_header(right, kind)?;
        let (a, b) = (lh.nr_entries, rh.nr_entries);
        let target = (a + b) / 2;
        if a < target {
            let k = target - a;
            self.copy_entries(right, 0, left, a, k, kind)?;
            {
                let mut g = self.store.write(left, BlockKind::Node)?;
                crate::pdata::codec::put_u32(&mut g, 16, (a + k) as u32)?;
            }
            let mut g = self.store.write(right, BlockKind::Node)?;
            let mut h = rh;
            node::drop_front(&mut g, &mut h, k)?;
        } else {
            let k = a - target;
            {
                let mut g = self.store.write(right, BlockKind::Node)?;
                let mut h = rh;
                node::shift_right(&mut g, &mut h, k)?;
            }
            self.copy_entries(left, a - k, right, 0, k, kind)?;
            let mut g = self.store.write(left, BlockKind::Node)?;
            let mut h = lh;
            node::set_nr(&mut g, &mut h, a - k)?;
        }
        self.node_key(right, &self.node_header(right, kind)?, 0)
    }

    /// Moves the upper half of (writable, full) node `b` into a new sibling.
    fn split_node(&mut self, b: u64, kind: TreeKind) -> CoreResult<(u64, u64)> {
        let h = self.node_header(b, kind)?;
        let mid = h.nr_entries / 2;
        let sib = self.meta_alloc()?;
        self.store.copy(b, sib, BlockKind::Node)?;
        {
            let mut g = self.store.write(b, BlockKind::Node)?;
            let mut hh = h;
            node::set_nr(&mut g, &mut hh, mid)?;
        }
        let mut g = self.store.write(sib, BlockKind::Node)?;
        let mut hh = h;
        node::drop_front(&mut g, &mut hh, mid)?;
        let k = node::key(&g, &hh, 0)?;
        Ok((sib, k))
    }

    /// Splits a full root into two new children; the root block becomes an
    /// internal node with two entries (its location never changes).
    fn split_beneath(&mut self, root: u64, kind: TreeKind) -> CoreResult<()> {
        let h = self.node_header(root, kind)?;
        let mid = h.nr_entries / 2;
        let left = self.meta_alloc()?;
        self.store.copy(root, left, BlockKind::Node)?;
        let right = self.meta_alloc()?;
        self.store.copy(root, right, BlockKind::Node)?;
        let lk = {
            let mut g = self.store.write(left, BlockKind::Node)?;
            let mut hh = h;
            node::set_nr(&mut g, &mut hh, mid)?;
            node::key(&g, &hh, 0)?
        };
        let rk = {
            let mut g = self.store.write(right, BlockKind::Node)?;
            let mut hh = h;
            node::drop_front(&mut g, &mut hh, mid)?;
            node::key(&g, &hh, 0)?
        };
        let mut g = self.store.write(root, BlockKind::Node)?;
        let mut nh = node::init(&mut g, false, 8)?;
        node::insert_at(&mut g, &mut nh, 0, lk, &left.to_le_bytes())?;
        node::insert_at(&mut g, &mut nh, 1, rk, &right.to_le_bytes())
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

    /// Removes `key`. Returns the new root and the removed value. The caller
    /// releases whatever the value referenced.
    pub(crate) fn btree_remove(
        &mut self,
        root: u64,
        key: u64,
        kind: TreeKind,
    ) -> CoreResult<(u64, Option<Value>)> {
        if self.btree_lookup(root, key, kind)?.is_none() {
            return Ok((root, None));
        }
        let mut out = [Value::from_slice(&[]); 1];
        let (root, n, _) = self.btree_remove_run(root, key, key, kind, &mut out)?;
        Ok((root, out.first().copied().filter(|_| n == 1)))
    }

    /// Removes, in one descent, the entries of the leaf that holds `first`
    /// (a key of the tree) whose keys are at most `last`, up to `out.len()`
    /// of them, copying their values into `out` (dm-thin's `remove_one` of
    /// `dm_btree_remove_leaves`). Returns the new root, how many were
    /// removed and the last key removed. The caller releases whatever the
    /// values referenced.
    pub(crate) fn btree_remove_run(
        &mut self,
        root: u64,
        first: u64,
        last: u64,
        kind: TreeKind,
        out: &mut [Value],
    ) -> CoreResult<(u64, usize, u64)> {
        let key = first;
        let root = self.shadow(root, kind)?;
        let mut spine = [(0u64, 0usize); MAX_DEPTH];
        let mut depth = 0usize;
        let mut cur = root;
        let removed = loop {
            let (h, idx) = {
                let g = self.store.read(cur, BlockKind::Node)?;
                let h = node::check(&g, kind.value_size())?;
                (h, node::lower_bound(&g, &h, key)?)
            };
            let i = idx.ok_or(corrupt(Corruption::KeyOrder))?;
            if h.leaf {
                let mut g = self.store.write(cur, BlockKind::Node)?;
                let mut h = h;
                if node::key(&g, &h, i)? != key {
                    return Err(corrupt(Corruption::KeyOrder));
                }
                let mut n = 0;
                let mut last_removed = key;
                while let Some(slot) = out.get_mut(n) {
                    if i + n >= h.nr_entries {
                        break;
                    }
                    let k = node::key(&g, &h, i + n)?;
                    if k > last {
                        break;
                    }
                    *slot = Value::from_slice(node::value(&g, &h, i + n)?);
                    last_removed = k;
                    n += 1;
                }
                node::remove_run(&mut g, &mut h, i, n)?;
                break (n, last_removed);
            }
            let slot = spine.get_mut(depth).ok_or(corrupt(Corruption::TooDeep))?;
            *slot = (cur, i);
            depth += 1;
            let child = self.node_value_u64(cur, &h, i)?;
            let nc = self.shadow(child, kind)?;
            if nc != child {
                let mut g = self.store.write(cur, BlockKind::Node)?;
                node::set_value(&mut g, &h, i, &nc.to_le_bytes())?;
            }
            cur = nc;
        };
        // Fix up bottom-up: unlink emptied nodes, merge or redistribute
        // underfull ones with a sibling (non-root nodes keep at least
        // max_entries / 3 entries, which thin_check requires).
        let mut child = cur;
        while depth > 0 {
            depth -= 1;
            let (parent, i) = *spine.get(depth).ok_or(corrupt(Corruption::TooDeep))?;
            let ch = {
                let g = self.store.read(child, BlockKind::Node)?;
                node::check_allow_empty(&g, kind.value_size())?
            };
            if ch.nr_entries == 0 {
                {
                    let mut g = self.store.write(parent, BlockKind::Node)?;
                    let mut ph = node::check(&g, kind.value_size())?;
                    node::remove_at(&mut g, &mut ph, i)?;
                }
                self.sm_dec(SmKind::Meta, child)?;
            } else if ch.nr_entries < node::min_entries(&ch) {
                self.rebalance(parent, i, kind)?;
            } else {
                break;
            }
            child = parent;
        }
        let rh = {
            let g = self.store.read(root, BlockKind::Node)?;
            node::check_allow_empty(&g, kind.value_size())?
        };
        if rh.nr_entries == 0 && !rh.leaf {
            let mut g = self.store.write(root, BlockKind::Node)?;
            node::init(&mut g, true, kind.value_size())?;
        }
        self.collapse_root(root, kind)?;
        Ok((root, removed.0, removed.1))
    }

    /// Copies `n` entries from `src[si..]` to `dst[di..]` (both nodes of the
    /// same level; the counts are not changed) through a small stack buffer.
    fn copy_entries(
        &mut self,
        src: u64,
        si: usize,
        dst: u64,
        di: usize,
        n: usize,
        kind: TreeKind,
    ) -> CoreResult<()> {
        const CHUNK: usize = 16;
        let mut kbuf = [0u8; CHUNK * 8];
        let mut vbuf = [0u8; CHUNK * crate::pdata::btree::MAX_VALUE_SIZE];
        let mut done = 0;
        while done < n {
            let c = (n - done).min(CHUNK);
            let vs = {
                let g = self.store.read(src, BlockKind::Node)?;
                let h = node::check_allow_empty(&g, kind.value_size())?;
                let kb = kbuf.get_mut(..c * 8).ok_or(corrupt(Corruption::Layout))?;
                kb.copy_from_slice(crate::pdata::codec::bytes(&g, h.key_off(si + done), c * 8)?);
                let vb = vbuf
                    .get_mut(..c * h.value_size)
                    .ok_or(corrupt(Corruption::Layout))?;
                vb.copy_from_slice(crate::pdata::codec::bytes(
                    &g,
                    h.val_off(si + done),
                    c * h.value_size,
                )?);
                h.value_size
            };
            let mut g = self.store.write(dst, BlockKind::Node)?;
            let h = node::check_allow_empty(&g, kind.value_size())?;
            if h.value_size != vs || di + done + c > h.max_entries {
                return Err(corrupt(Corruption::NodeHeader));
            }
            crate::pdata::codec::bytes_mut(&mut g, h.key_off(di + done), c * 8)?
                .copy_from_slice(kbuf.get(..c * 8).ok_or(corrupt(Corruption::Layout))?);
            crate::pdata::codec::bytes_mut(&mut g, h.val_off(di + done), c * vs)?
                .copy_from_slice(vbuf.get(..c * vs).ok_or(corrupt(Corruption::Layout))?);
            done += c;
        }
        Ok(())
    }

    /// Child `i` of (writable) internal node `parent` is underfull: merge it
    /// with a neighbour if both fit in one node, otherwise share the entries
    /// evenly between them.
    fn rebalance(&mut self, parent: u64, i: usize, kind: TreeKind) -> CoreResult<()> {
        let ph = self.node_header(parent, kind)?;
        if ph.nr_entries < 2 {
            return Ok(());
        }
        let (li, ri) = if i + 1 < ph.nr_entries {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        let mut pair = [0u64; 2];
        for (slot, idx) in pair.iter_mut().zip([li, ri]) {
            let c = self.node_value_u64(parent, &ph, idx)?;
            let nc = self.shadow(c, kind)?;
            if nc != c {
                let mut g = self.store.write(parent, BlockKind::Node)?;
                node::set_value(&mut g, &ph, idx, &nc.to_le_bytes())?;
            }
            *slot = nc;
        }
        let [l, r] = pair;
        let lh = self.node_header(l, kind)?;
        let rh = self.node_header(r, kind)?;
        if lh.leaf != rh.leaf {
            return Err(corrupt(Corruption::TooDeep));
        }
        let (a, b) = (lh.nr_entries, rh.nr_entries);
        if a + b <= lh.max_entries {
            self.copy_entries(r, 0, l, a, b, kind)?;
            {
                let mut g = self.store.write(l, BlockKind::Node)?;
                crate::pdata::codec::put_u32(&mut g, 16, (a + b) as u32)?;
            }
            {
                let mut g = self.store.write(parent, BlockKind::Node)?;
                let mut h = node::check(&g, kind.value_size())?;
                node::remove_at(&mut g, &mut h, ri)?;
            }
            // The right node's references now belong to the left one.
            self.sm_dec(SmKind::Meta, r)?;
            return Ok(());
        }
        let rk = self.share_evenly(l, r, kind)?;
        let mut g = self.store.write(parent, BlockKind::Node)?;
        node::set_key(&mut g, &ph, ri, rk)
    }

    /// While the (writable) root is internal with a single child, copies the
    /// child into the root.
    fn collapse_root(&mut self, root: u64, kind: TreeKind) -> CoreResult<()> {
        for _ in 0..MAX_DEPTH {
            let h = self.node_header(root, kind)?;
            if h.leaf || h.nr_entries != 1 {
                return Ok(());
            }
            let child = self.node_value_u64(root, &h, 0)?;
            self.node_header(child, kind)?;
            let count = self.sm_count(SmKind::Meta, false, child)?;
            if count == 0 {
                return Err(corrupt(Corruption::RefCount));
            }
            self.store.copy(child, root, BlockKind::Node)?;
            if count > 1 {
                self.inc_children(root, kind)?;
            }
            self.sm_dec(SmKind::Meta, child)?;
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

    /// Calls `f` for every entry in key order.
    pub(crate) fn btree_walk(
        &self,
        root: u64,
        kind: TreeKind,
        f: &mut dyn FnMut(u64, &[u8]) -> CoreResult<()>,
    ) -> CoreResult<()> {
        let mut budget = self.node_budget();
        self.walk_rec(root, kind, 0, &mut budget, f)
    }

    /// Upper bound on the nodes a walk of one valid tree can visit: the
    /// metadata device size. A corrupt tree whose pointers form a DAG with
    /// huge fan-out therefore ends with `TooDeep` instead of running for ever.
    fn node_budget(&self) -> u64 {
        self.msm.nr_blocks.max(self.msm_c.nr_blocks)
    }

    fn walk_rec(
        &self,
        b: u64,
        kind: TreeKind,
        depth: usize,
        budget: &mut u64,
        f: &mut dyn FnMut(u64, &[u8]) -> CoreResult<()>,
    ) -> CoreResult<()> {
        if depth >= MAX_DEPTH || *budget == 0 {
            return Err(corrupt(Corruption::TooDeep));
        }
        *budget -= 1;
        let h = self.node_header(b, kind)?;
        if h.leaf {
            // Entries are copied out in small batches so that no guard is
            // held while the callback runs (it may call back into the core).
            const BATCH: usize = 8;
            let mut start = 0;
            while start < h.nr_entries {
                let n = (h.nr_entries - start).min(BATCH);
                let mut batch = [(0u64, Value::from_slice(&[])); BATCH];
                {
                    let g = self.store.read(b, BlockKind::Node)?;
                    for (j, slot) in batch.iter_mut().take(n).enumerate() {
                        *slot = (
                            node::key(&g, &h, start + j)?,
                            Value::from_slice(node::value(&g, &h, start + j)?),
                        );
                    }
                }
                for (k, v) in batch.iter().take(n) {
                    f(*k, v.as_slice())?;
                }
                start += n;
            }
            return Ok(());
        }
        for i in 0..h.nr_entries {
            let c = self.node_value_u64(b, &h, i)?;
            self.walk_rec(c, kind, depth + 1, budget, f)?;
        }
        Ok(())
    }
}
