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
    metadata::committed::{CommittedTree, PublishedTree, ReadStamp, LEAF_MAPPINGS},
    metadata::thin_metadata::Mapping,
    pdata::checksum::BLOCK_SIZE,
};

/// A walk's answer: the block's mapping, the stamp it stands on, and every
/// mapping of its leaf (for the cache).
pub(crate) struct LeafAnswer {
    pub(crate) mapping: Mapping,
    pub(crate) stamp: ReadStamp,
    pub(crate) leaf: KVec<(u64, Mapping)>,
}

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
    /// its change generation), with every mapping of the block's leaf.
    /// `None` if the walk cannot answer: nothing published, a newer change
    /// (checked before anything is allocated: a device provisioning block
    /// after block has one most of the time), a hole, an error, no memory,
    /// or a commit that ended meanwhile. The caller falls back to the
    /// metadata under the pool lock then.
    pub(crate) fn lookup_leaf(
        &self,
        dev: u32,
        vblock: u64,
        changed: impl FnOnce() -> u64,
    ) -> Option<LeafAnswer> {
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
            let mut leaf = KVec::with_capacity(LEAF_MAPPINGS, GFP_NOWAIT | __GFP_NOWARN).ok()?;
            let scratch = KVec::from_elem(0u8, BLOCK_SIZE, GFP_NOWAIT | __GFP_NOWARN).ok()?;
            let scratch = RefCell::new(scratch);
            let read = |b: u64| {
                let mut node = scratch.try_borrow_mut().map_err(|_| CoreError::Invalid)?;
                self.reader.copy_node(b, &mut node)?;
                Ok(RefMut::map(node, |v| &mut v[..]))
            };
            let each = |k, m| {
                let _ = leaf.push_within_capacity((k, m));
            };
            let found = tree.lookup_leaf(dev.into(), vblock, read, each);
            if !self.published.still(&stamp) {
                return None;
            }
            let mapping = found.ok().flatten()?;
            Some(LeafAnswer {
                mapping,
                stamp,
                leaf,
            })
        };
        let found = walk();
        self.walkers.exit(token);
        found
    }
}

/// Scenarios for the module's KUnit suite.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use kernel::{
        prelude::*,
        sync::{Arc, Completion},
        workqueue,
    };

    use crate::metadata::committed::{selftest, PublishedTree};

    /// The tree a commit worker publishes while the test reads it.
    #[pin_data]
    struct Shared {
        published: PublishedTree,
        stop: AtomicBool,
        rounds: AtomicU64,
        #[pin]
        written: Completion,
    }

    /// Workers reading the published tree while commits publish, republish
    /// and withdraw it on another CPU keep only whole publications: every
    /// read that `still` lets stand has a root, size and change generation
    /// of one commit. The reads (two million at least) go on until the
    /// writer has published a hundred thousand times during them: fewer
    /// overlaps do not catch a broken `still` under TCG (with `still` always
    /// true, this run kept a few hundred torn reads). Fails if the writer
    /// never got that far, if a torn read was kept, or if none was kept.
    pub(crate) fn committed_tree_under_commits() -> bool {
        let init = pin_init!(Shared {
            published: PublishedTree::new(),
            stop: AtomicBool::new(false),
            rounds: AtomicU64::new(0),
            written <- Completion::new(),
        });
        let Ok(shared) = Arc::pin_init(init, GFP_KERNEL) else {
            return false;
        };
        // Something to read from the start; the writer takes over after.
        selftest::writer_round(&shared.published, 1);
        let writer = shared.clone();
        let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
            let mut round = 2;
            while !writer.stop.load(Ordering::Relaxed) {
                selftest::writer_round(&writer.published, round);
                writer.rounds.store(round, Ordering::Relaxed);
                round += 1;
            }
            writer.written.complete_all();
        });
        if spawned.is_err() {
            return false;
        }
        let first = shared.rounds.load(Ordering::Relaxed);
        let (mut torn, mut kept, mut reads) = (0u64, 0u64, 0u64);
        let raced = loop {
            match selftest::reader_pass(&shared.published) {
                None => torn += 1,
                Some(true) => kept += 1,
                Some(false) => {}
            }
            reads += 1;
            let published = shared.rounds.load(Ordering::Relaxed).saturating_sub(first);
            if reads >= 2_000_000 && published >= 100_000 {
                break true;
            }
            if reads >= 100_000_000 {
                break false;
            }
        };
        shared.stop.store(true, Ordering::Relaxed);
        shared.written.wait_for_completion();
        if torn > 0 || !raced {
            pr_err!("committed_tree_under_commits: {torn} torn reads kept of {reads}, writer ran during the reads: {raced}\n");
        }
        torn == 0 && kept > 0 && raced
    }
}
