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
//! throw the answer away. [`PublishedTree`] is that protocol (a sequence
//! count, as a seqlock); the pool's side, with the waits the kernel needs,
//! is `rust/pool/committed.rs`.

use core::ops::Deref;
use core::sync::atomic::{fence, AtomicU64, Ordering};

use crate::core_error::CoreResult;
use crate::metadata::thin_metadata::{Mapping, ThinMetadata};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::descend::{descend, visit_leaf};
use crate::pdata::btree::{node, TreeKind, Value};
use crate::pdata::space_map::check_meta_block_in;
use crate::pdata::tm::CacheMem;

/// Most mappings one leaf of a mapping tree holds ([`node::check`] refuses
/// a leaf with room for more): what [`CommittedTree::lookup_leaf`] may hand
/// over.
pub const LEAF_MAPPINGS: usize = node::calc_max_entries(TreeKind::Mapping.value_size());

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
            check_meta_block_in(b, self.nr_blocks)?;
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
        let mapping = |v: &[u8]| Mapping::unpack(Value::from_slice(v).as_u64());
        let found = descend(&mut read, sub, vblock, TreeKind::Mapping, |g, h, found| {
            let v = visit_leaf(g, h, found, |k, v| each(k, mapping(v)))?;
            Ok(v.map(mapping))
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

/// The last commit's tree as its owner publishes it to readers that do not
/// hold the metadata: a sequence count, odd while nothing may be read (not
/// published yet, being replaced, or withdrawn), guards the tree and the
/// change generation the commit covers. One writer at a time (the owner,
/// under its lock); any number of readers.
pub struct PublishedTree {
    seq: AtomicU64,
    mapping_root: AtomicU64,
    nr_blocks: AtomicU64,
    covers: AtomicU64,
}

/// What a reader saw: its reads stand while [`PublishedTree::still`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStamp {
    seq: u64,
    /// The change generation the commit read covers.
    pub covers: u64,
}

impl Default for PublishedTree {
    fn default() -> Self {
        Self::new()
    }
}

impl PublishedTree {
    /// Nothing published.
    pub const fn new() -> Self {
        Self {
            seq: AtomicU64::new(1),
            mapping_root: AtomicU64::new(0),
            nr_blocks: AtomicU64::new(0),
            covers: AtomicU64::new(0),
        }
    }

    /// Publishes `tree`, of a commit covering change generation `covers`.
    /// Publishing what is already published changes nothing, so reads under
    /// way still stand (a commit with nothing to write, a status call).
    pub fn publish(&self, tree: CommittedTree, covers: u64) {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 0
            && self.mapping_root.load(Ordering::Relaxed) == tree.mapping_root
            && self.nr_blocks.load(Ordering::Relaxed) == tree.nr_blocks
            && self.covers.load(Ordering::Relaxed) == covers
        {
            return;
        }
        let odd = seq | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // The odd count before the new values (smp_wmb).
        fence(Ordering::Release);
        self.mapping_root
            .store(tree.mapping_root, Ordering::Relaxed);
        self.nr_blocks.store(tree.nr_blocks, Ordering::Relaxed);
        self.covers.store(covers, Ordering::Relaxed);
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    /// Nothing may be read until the next [`Self::publish`].
    pub fn withdraw(&self) {
        let odd = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(odd, Ordering::Release);
    }

    /// The published tree and a stamp to check later reads against; `None`
    /// while nothing may be read.
    pub fn begin(&self) -> Option<(CommittedTree, ReadStamp)> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let tree = CommittedTree {
            mapping_root: self.mapping_root.load(Ordering::Relaxed),
            nr_blocks: self.nr_blocks.load(Ordering::Relaxed),
        };
        let covers = self.covers.load(Ordering::Relaxed);
        Some((tree, ReadStamp { seq, covers }))
    }

    /// True if nothing was published or withdrawn since `stamp` was taken:
    /// the tree it came with is still the last commit's, so everything read
    /// of it since (the values, copies of its blocks) is what the commit
    /// holds.
    pub fn still(&self, stamp: &ReadStamp) -> bool {
        // The reads before the count's second load (smp_rmb).
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == stamp.seq
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;

    /// Publication `i` of the racing scenarios: its three values tie
    /// together, and every thousandth is withdrawn right after.
    pub fn writer_round(p: &PublishedTree, i: u64) {
        let tree = CommittedTree {
            mapping_root: i,
            nr_blocks: i.wrapping_add(1),
        };
        p.publish(tree, i.wrapping_add(2));
        if i % 1000 == 0 {
            p.withdraw();
        }
    }

    /// One reader pass against [`writer_round`]s: `Some(kept)` unless it
    /// kept a mix of two publications.
    pub fn reader_pass(p: &PublishedTree) -> Option<bool> {
        let Some((t, stamp)) = p.begin() else {
            return Some(false);
        };
        let whole = t.nr_blocks == t.mapping_root.wrapping_add(1)
            && stamp.covers == t.mapping_root.wrapping_add(2);
        match (p.still(&stamp), whole) {
            (true, false) => None,
            (kept, _) => Some(kept),
        }
    }

    /// The protocol in one thread: nothing to read before the first
    /// publication and after a withdrawal; a stamp stands until another
    /// tree is published or the tree is withdrawn.
    pub fn protocol() -> bool {
        let p = PublishedTree::new();
        let t1 = CommittedTree {
            mapping_root: 7,
            nr_blocks: 100,
        };
        let t2 = CommittedTree {
            mapping_root: 9,
            nr_blocks: 100,
        };
        let nothing_yet = p.begin().is_none();
        p.publish(t1, 3);
        let Some((got1, s1)) = p.begin() else {
            return false;
        };
        let first = got1 == t1 && s1.covers == 3 && p.still(&s1);
        p.publish(t1, 3);
        let same_again = p.still(&s1);
        p.publish(t2, 5);
        let Some((got2, s2)) = p.begin() else {
            return false;
        };
        let second = got2 == t2 && s2.covers == 5 && !p.still(&s1) && p.still(&s2);
        p.withdraw();
        let withdrawn = p.begin().is_none() && !p.still(&s2);
        p.publish(t1, 6);
        let again = p.begin().is_some_and(|(t, s)| t == t1 && s.covers == 6);
        nothing_yet && first && same_again && second && withdrawn && again
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol() {
        assert!(selftest::protocol());
    }

    /// Readers racing a writer never keep a mix of two publications: what
    /// `still` lets stand is one whole publication.
    #[test]
    fn readers_never_keep_a_torn_publication() {
        extern crate std;
        use std::sync::atomic::AtomicBool;
        let p = PublishedTree::new();
        let done = AtomicBool::new(false);
        let (kept, thrown) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        match selftest::reader_pass(&p) {
                            None => panic!("a reader kept a torn publication"),
                            Some(true) => kept.fetch_add(1, Ordering::Relaxed),
                            Some(false) => thrown.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                });
            }
            for i in 0..400_000u64 {
                selftest::writer_round(&p, i);
                if i % 4096 == 0 {
                    std::thread::yield_now();
                }
            }
            // A stable publication for the readers to keep (bounded: a
            // reader that failed keeps nothing).
            for _ in 0..1_000_000 {
                if kept.load(Ordering::Relaxed) > 0 {
                    break;
                }
                std::thread::yield_now();
            }
            done.store(true, Ordering::Relaxed);
        });
        assert!(kept.load(Ordering::Relaxed) > 0, "no reader kept a read");
    }
}
