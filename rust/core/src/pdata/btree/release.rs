// SPDX-License-Identifier: GPL-2.0
//! Releasing a tree reference: a node whose count reaches zero releases what
//! it points to (for top-level trees, the devices' mapping trees and their
//! data blocks). The release is a walk with its path on a stack of its own
//! ([`Release`]) rather than a recursion, so that it can stop after a bounded
//! number of steps and go on later: a big device's delete is done in pieces
//! that let the pool lock go between them.
//!
//! Between two pieces the transaction may change elsewhere (other devices'
//! provisions, inserts and discards). The walk stays right: every node on its
//! path had one reference, the one the released tree held, so nothing else
//! can reach, shadow or share it; a child shared with another tree is only
//! decremented, and when the walk reaches it its count is read then (a
//! sharer may have dropped its reference meanwhile, and the walk is then the
//! last owner and releases it whole).

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node::{self, Header};
use crate::pdata::btree::{TreeKind, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::SmKind;
use crate::pdata::tm::{CacheMem, Tm};

/// Path length of a release from the top-level tree (its depth and a mapping
/// tree's under it).
const MAX_RELEASE_DEPTH: usize = 2 * MAX_DEPTH + 2;

/// Path length of a release of one device's mapping tree.
pub const MAPPING_RELEASE_DEPTH: usize = MAX_DEPTH + 1;

/// A node on a release's path: its children from `next` on are still held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frame {
    b: u64,
    kind: TreeKind,
    leaf: bool,
    nr_entries: u16,
    max_entries: u16,
    next: u16,
}

impl Frame {
    const EMPTY: Frame = Frame {
        b: 0,
        kind: TreeKind::Details,
        leaf: true,
        nr_entries: 0,
        max_entries: 0,
        next: 0,
    };

    fn new(b: u64, kind: TreeKind, h: &Header) -> CoreResult<Self> {
        let small = |n: usize| u16::try_from(n).map_err(|_| corrupt(Corruption::NodeHeader));
        Ok(Frame {
            b,
            kind,
            leaf: h.leaf,
            nr_entries: small(h.nr_entries)?,
            max_entries: small(h.max_entries)?,
            next: 0,
        })
    }

    fn header(&self) -> Header {
        Header {
            leaf: self.leaf,
            nr_entries: usize::from(self.nr_entries),
            max_entries: usize::from(self.max_entries),
            value_size: self.kind.value_size(),
        }
    }
}

/// A tree release in progress, with room for a path of `N` nodes (no
/// allocation: it lives on the stack, or in the metadata object while a
/// delete goes on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<const N: usize> {
    path: [Frame; N],
    len: usize,
}

impl<const N: usize> Release<N> {
    /// True once every reference of the tree has been dropped.
    pub fn done(&self) -> bool {
        self.len == 0
    }
}

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    /// Drops one reference to the tree rooted at `b`, all at once.
    pub(crate) fn dec_tree(&mut self, b: u64, kind: TreeKind) -> CoreResult<()> {
        let mut r = self.release_start::<MAX_RELEASE_DEPTH>(b, kind)?;
        self.release_step(&mut r, usize::MAX)?;
        Ok(())
    }

    /// Starts dropping one reference to the tree rooted at `b`: a shared
    /// root is only decremented (the release is then done); an unshared one
    /// is released by [`Self::release_step`], children first.
    pub(crate) fn release_start<const N: usize>(
        &mut self,
        b: u64,
        kind: TreeKind,
    ) -> CoreResult<Release<N>> {
        let mut r = Release {
            path: [Frame::EMPTY; N],
            len: 0,
        };
        self.release_ref(&mut r, b, kind)?;
        Ok(r)
    }

    /// Drops the reference to `b` that `r`'s current node holds (or the
    /// root's): decrements a shared node, puts an unshared one on the path.
    fn release_ref<const N: usize>(
        &mut self,
        r: &mut Release<N>,
        b: u64,
        kind: TreeKind,
    ) -> CoreResult<()> {
        self.check_meta_block(b)?;
        let count = self.sm_count(SmKind::Meta, false, b)?;
        if count == 0 {
            return Err(corrupt(Corruption::RefCount));
        }
        if count > 1 {
            self.sm_dec(SmKind::Meta, b)?;
            return Ok(());
        }
        // Its children go first: `b` stays allocated meanwhile.
        let frame = Frame::new(b, kind, &self.node_header(b, kind)?)?;
        let slot = r.path.get_mut(r.len).ok_or(corrupt(Corruption::TooDeep))?;
        *slot = frame;
        r.len += 1;
        Ok(())
    }

    /// Goes on with release `r` for at most `budget` steps (a step drops one
    /// child reference or releases one node, a bottom-level leaf with all
    /// its data blocks). Returns true when the release is done. After an
    /// error the transaction must be aborted, as after any failed change.
    pub(crate) fn release_step<const N: usize>(
        &mut self,
        r: &mut Release<N>,
        budget: usize,
    ) -> CoreResult<bool> {
        let mut left = budget;
        while left > 0 {
            let Some(top) = r.len.checked_sub(1) else {
                break;
            };
            let f = *r.path.get(top).ok_or(corrupt(Corruption::TooDeep))?;
            left -= 1;
            // An internal node's values are its children; a top-level
            // leaf's are the devices' mapping trees. Other leaves hold no
            // tree references.
            if (!f.leaf || f.kind == TreeKind::TopLevel) && f.next < f.nr_entries {
                let v = self.node_value_u64(f.b, &f.header(), usize::from(f.next))?;
                if let Some(p) = r.path.get_mut(top) {
                    p.next += 1;
                }
                let child = if f.leaf { TreeKind::Mapping } else { f.kind };
                self.release_ref(r, v, child)?;
                continue;
            }
            if f.leaf && f.kind == TreeKind::Mapping {
                self.release_leaf_data(f.b, &f.header())?;
            }
            self.sm_dec(SmKind::Meta, f.b)?;
            r.len = top;
        }
        Ok(r.done())
    }

    /// Releases the data blocks a bottom-level leaf maps. Neighbouring keys
    /// mostly map neighbouring blocks (a device written in order), so they
    /// are released as runs, one space-map update per run and bitmap (as
    /// dm-thin's range decrements do) rather than one per block: what keeps
    /// the delete of a large device short. The values are read a batch at a
    /// time, on the stack.
    fn release_leaf_data(&mut self, b: u64, h: &Header) -> CoreResult<()> {
        const BATCH: usize = 64;
        let (mut start, mut len) = (0u64, 0u64);
        let mut i = 0;
        while i < h.nr_entries {
            let n = (h.nr_entries - i).min(BATCH);
            let mut values = [0u64; BATCH];
            {
                let g = self.store.read(b, BlockKind::Node)?;
                for (j, v) in values.iter_mut().take(n).enumerate() {
                    *v = node::value_u64(&g, h, i + j)?;
                }
            }
            for v in values.iter().take(n) {
                let data = v >> 24;
                if len > 0 && start.checked_add(len) == Some(data) {
                    len += 1;
                    continue;
                }
                if len > 0 {
                    self.data_dec_run(start, len)?;
                }
                (start, len) = (data, 1);
            }
            i += n;
        }
        if len > 0 {
            self.data_dec_run(start, len)?;
        }
        Ok(())
    }
}
