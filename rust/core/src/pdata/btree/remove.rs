// SPDX-License-Identifier: GPL-2.0
//! B-tree removal: of one key, or of a run of keys of one leaf per
//! descent; an underfull child merges with or takes entries from a
//! neighbour, and a root with a single child absorbs it.

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
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
    pub(super) fn copy_entries(
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
}
