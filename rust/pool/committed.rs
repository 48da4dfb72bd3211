// SPDX-License-Identifier: GPL-2.0
//! The last commit's mapping tree, published for the workers' lookups that
//! take no pool lock (`Documentation/io-path.md`, "Lookups without the pool
//! lock").
//!
//! A sequence count guards what is published. The pool lock's holder, the
//! only writer, makes it odd, stores the tree of a commit that reached
//! stable storage and the change generation the commit covers, and makes it
//! even again. A reader copies the nodes it walks
//! ([`BufioReader::copy_node`]) and keeps its answer only if the count is
//! still the even value it started with: then no commit ended during the
//! walk, so no block of the tree it walked was reused
//! (`metadata::committed`). Before an abort resets the metadata's block
//! cache, the writer makes the count odd and waits for the walks under way
//! (an SRCU domain of their own): dm-bufio refuses a reset while a buffer is
//! held.

use core::{
    cell::{RefCell, RefMut},
    sync::atomic::{fence, AtomicU64, Ordering},
};
use kernel::{
    alloc::flags::{__GFP_NOWARN, GFP_NOWAIT},
    prelude::*,
    sync::Arc,
};

use crate::{
    core_error::CoreError,
    glue::{bufio::BufioReader, inflight::IoTracker},
    metadata::committed::CommittedTree,
    metadata::thin_metadata::Mapping,
    pdata::checksum::BLOCK_SIZE,
};

/// Most mappings one leaf holds (4 KiB nodes of 8-byte keys and values).
pub(crate) const LEAF_MAPPINGS: usize = (BLOCK_SIZE - 32) / 16;

/// The published tree and its sequence count.
pub(crate) struct CommittedView {
    /// Odd while nothing may be walked (not yet published, or an abort is
    /// resetting the block cache); bumped by every publication.
    seq: AtomicU64,
    mapping_root: AtomicU64,
    nr_blocks: AtomicU64,
    /// The change generation the published commit covers.
    covers: AtomicU64,
    reader: BufioReader,
    /// The walks under way.
    walkers: Arc<IoTracker>,
}

/// What a walk saw: its answers hold while no commit ends after it
/// ([`CommittedView::unchanged_since`]).
#[derive(Clone, Copy)]
pub(crate) struct WalkStamp {
    seq: u64,
    /// The change generation the walked commit covers.
    pub(crate) covers: u64,
}

impl CommittedView {
    /// A view with nothing published yet, reading through `reader`.
    pub(crate) fn new(reader: BufioReader) -> Result<Self> {
        Ok(Self {
            seq: AtomicU64::new(1),
            mapping_root: AtomicU64::new(0),
            nr_blocks: AtomicU64::new(0),
            covers: AtomicU64::new(0),
            reader,
            walkers: Arc::pin_init(IoTracker::new(), GFP_KERNEL)?,
        })
    }

    /// Publishes the tree of a commit on stable storage that covers change
    /// generation `covers`. Only under the pool lock.
    pub(crate) fn publish(&self, tree: CommittedTree, covers: u64) {
        let odd = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // The odd count before the new values (smp_wmb).
        fence(Ordering::Release);
        self.mapping_root
            .store(tree.mapping_root, Ordering::Relaxed);
        self.nr_blocks.store(tree.nr_blocks, Ordering::Relaxed);
        self.covers.store(covers, Ordering::Relaxed);
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Stops new walks and waits for those under way (sleeps); the next
    /// [`Self::publish`] allows them again. Only under the pool lock.
    pub(crate) fn withdraw(&self) {
        self.seq
            .store(self.seq.load(Ordering::Relaxed) | 1, Ordering::Release);
        // A walk that starts after the grace period begins sees the odd
        // count (SRCU orders it); the others end before it does.
        self.walkers.synchronize();
    }

    /// True while no commit ended after `stamp`'s walk began: its answers
    /// are still the last commit's.
    pub(crate) fn unchanged_since(&self, stamp: &WalkStamp) -> bool {
        self.seq.load(Ordering::Acquire) == stamp.seq
    }

    /// Looks `vblock` of thin device `dev` up in the last commit's tree if
    /// the device has no change that commit does not cover (`changed` reads
    /// its change generation), and fills `leaf` with every mapping of the
    /// block's leaf. `None` if the walk cannot answer: nothing published, a
    /// newer change, a hole, an error, or a commit that ended meanwhile. The
    /// caller falls back to the metadata under the pool lock then.
    pub(crate) fn lookup_leaf(
        &self,
        dev: u32,
        vblock: u64,
        changed: impl FnOnce() -> u64,
        leaf: &mut KVec<(u64, Mapping)>,
    ) -> Option<(Mapping, WalkStamp)> {
        let token = self.walkers.enter()?;
        let found = self.walk(dev, vblock, changed, leaf);
        self.walkers.exit(token);
        found
    }

    fn walk(
        &self,
        dev: u32,
        vblock: u64,
        changed: impl FnOnce() -> u64,
        leaf: &mut KVec<(u64, Mapping)>,
    ) -> Option<(Mapping, WalkStamp)> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let tree = CommittedTree {
            mapping_root: self.mapping_root.load(Ordering::Relaxed),
            nr_blocks: self.nr_blocks.load(Ordering::Relaxed),
        };
        let covers = self.covers.load(Ordering::Relaxed);
        // Read after the count: a change made before this walk began is in
        // it or else makes the walk give up.
        if changed() > covers {
            return None;
        }
        // Without reclaim (this runs in the I/O path): no memory, no walk.
        let scratch = KVec::from_elem(0u8, BLOCK_SIZE, GFP_NOWAIT | __GFP_NOWARN).ok()?;
        let scratch = RefCell::new(scratch);
        let read = |b: u64| {
            let mut node = scratch.try_borrow_mut().map_err(|_| CoreError::Invalid)?;
            self.reader.copy_node(b, &mut node)?;
            Ok(RefMut::map(node, |v| &mut v[..]))
        };
        leaf.clear();
        let each = |k, m| {
            let _ = leaf.push_within_capacity((k, m));
        };
        let found = tree.lookup_leaf(dev.into(), vblock, read, each);
        // The copies before the count's second read (smp_rmb).
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != seq {
            return None;
        }
        let stamp = WalkStamp { seq, covers };
        found.ok().flatten().map(|m| (m, stamp))
    }
}
