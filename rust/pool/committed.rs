// SPDX-License-Identifier: GPL-2.0
//! The last commit's mapping tree, published for the workers' lookups that
//! take no pool lock (`Documentation/io-path.md`, "Lookups without the pool
//! lock").
//!
//! The pool lock's holder, the only writer, publishes the tree of every
//! commit that reached stable storage with the change generation it covers
//! ([`PublishedTree`], a sequence count). A walk copies the nodes it reads
//! ([`BufioReader::copy_node`]) and keeps its answer only if the count did
//! not move: then no commit ended during the walk, so no block of the tree
//! it walked was reused (`metadata::committed`). Before an abort resets the
//! metadata's block cache, the writer withdraws the tree and waits for the
//! walks under way (an SRCU domain of their own): dm-bufio refuses a reset
//! while a buffer is held.

use core::cell::{RefCell, RefMut};
use kernel::{
    alloc::flags::{__GFP_NOWARN, GFP_NOWAIT},
    prelude::*,
    sync::Arc,
};

use crate::{
    core_error::CoreError,
    glue::{bufio::BufioReader, inflight::IoTracker},
    metadata::committed::{CommittedTree, PublishedTree, ReadStamp},
    metadata::thin_metadata::Mapping,
    pdata::checksum::BLOCK_SIZE,
};

/// The published tree, what reads it, and the walks under way.
pub(crate) struct CommittedView {
    published: PublishedTree,
    reader: BufioReader,
    walkers: Arc<IoTracker>,
}

impl CommittedView {
    /// A view with nothing published yet, reading through `reader`.
    pub(crate) fn new(reader: BufioReader) -> Result<Self> {
        Ok(Self {
            published: PublishedTree::new(),
            reader,
            walkers: Arc::pin_init(IoTracker::new(), GFP_KERNEL)?,
        })
    }

    /// Publishes the tree of a commit on stable storage that covers change
    /// generation `covers`. Only under the pool lock.
    pub(crate) fn publish(&self, tree: CommittedTree, covers: u64) {
        self.published.publish(tree, covers);
    }

    /// Stops new walks and waits for those under way (sleeps); the next
    /// [`Self::publish`] allows them again. Only under the pool lock.
    pub(crate) fn withdraw(&self) {
        self.published.withdraw();
        // A walk that starts after the grace period begins sees the
        // withdrawal (SRCU orders it); the others end before it does.
        self.walkers.synchronize();
    }

    /// True while no commit ended after `stamp`'s walk began: its answers
    /// are still the last commit's.
    pub(crate) fn unchanged_since(&self, stamp: &ReadStamp) -> bool {
        self.published.still(stamp)
    }

    /// Looks `vblock` of thin device `dev` up in the last commit's tree if
    /// the device has no change that commit does not cover (`changed` reads
    /// its change generation), and fills `leaf` with every mapping of the
    /// block's leaf. `None` if the walk cannot answer: nothing published, a
    /// newer change, a hole, an error, no memory, or a commit that ended
    /// meanwhile. The caller falls back to the metadata under the pool lock
    /// then.
    pub(crate) fn lookup_leaf(
        &self,
        dev: u32,
        vblock: u64,
        changed: impl FnOnce() -> u64,
        leaf: &mut KVec<(u64, Mapping)>,
    ) -> Option<(Mapping, ReadStamp)> {
        let token = self.walkers.enter()?;
        let walk = || {
            let (tree, stamp) = self.published.begin()?;
            // Read after the stamp: a change made before this walk began
            // is in the tree, or else makes the walk give up.
            if changed() > stamp.covers {
                return None;
            }
            // Without reclaim (this runs in the I/O path): no memory, no
            // walk.
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
            if !self.published.still(&stamp) {
                return None;
            }
            found.ok().flatten().map(|m| (m, stamp))
        };
        let found = walk();
        self.walkers.exit(token);
        found
    }
}
