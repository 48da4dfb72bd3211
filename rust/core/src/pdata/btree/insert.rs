// SPDX-License-Identifier: GPL-2.0
//! B-tree insertion: top-down with pre-emptive splitting (the root splits
//! beneath itself, so its location never changes); a full child first
//! shares entries with an unshared sibling that has room, as
//! persistent-data does.

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

/// Free entries a sibling needs to take entries from a full node instead of
/// the node splitting (persistent-data's `SPACE_THRESHOLD`).
const SPACE_THRESHOLD: usize = 8;

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
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
    pub(super) fn share_evenly(
        &mut self,
        left: u64,
        right: u64,
        kind: TreeKind,
    ) -> CoreResult<u64> {
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
}
