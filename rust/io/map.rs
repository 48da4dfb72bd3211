// SPDX-License-Identifier: GPL-2.0
//! The map call (dm's `map`): the lock-free fast path through the mapping
//! cache; what it cannot remap goes to the workers (`worker.rs`).

use kernel::sync::rcu;

use super::ThinIo;
use crate::glue::{
    bio::{Bio, BioKind},
    dm::MapResult,
};

impl ThinIo {
    /// The map call: remaps `bio` itself or defers it to a worker.
    pub(crate) fn map(&self, mut bio: Bio<'_>) -> MapResult {
        bio.init_per_bio();
        if self.pool.flags.fails_io() {
            return MapResult::Kill;
        }
        match bio.kind() {
            BioKind::Read | BioKind::Write => {
                // A durable bio passes only if every change of this device
                // is on stable storage (not merely being committed).
                if (!bio.wants_durability() || self.changes_committed()) && self.try_fast(&mut bio)
                {
                    self.counters.fast_remaps.inc();
                    return MapResult::Remapped;
                }
                // A write into a block held open (`open_block.rs`).
                if self.join_in_map(&mut bio) {
                    return MapResult::Remapped;
                }
            }
            BioKind::EmptyFlush if self.changes_committed() => {
                bio.set_bdev(&self.pool_bdev);
                return MapResult::Remapped;
            }
            BioKind::EmptyFlush | BioKind::Discard => {}
            BioKind::Other => return MapResult::Kill,
        }
        self.counters.deferred.inc();
        self.queues.push(&self.pool.wq, bio.defer());
        MapResult::Submitted
    }

    /// The lock-free lookup: remaps `bio` if its block is cached and the
    /// cached answer allows this bio. The bio's in-flight read side opens
    /// before the lookup, so a block unmapped after it is not reused (nor
    /// discarded) before the bio completes.
    pub(super) fn try_fast(&self, bio: &mut Bio<'_>) -> bool {
        let sector = bio.sector();
        let vblock = self.geometry.block_of(sector);
        let write = bio.kind() == BioKind::Write;
        let Some(token) = self.pool.tracker.enter() else {
            return false;
        };
        let guard = rcu::read_lock();
        let hit = self
            .pool
            .mappings
            .get(&guard)
            .and_then(|c| c.get(self.dev_id, vblock, self.share_gen()));
        drop(guard);
        let to = match hit {
            Some(m) if !(write && m.shared) => self.geometry.remap(m.data_block, sector),
            _ => None,
        };
        match to {
            Some(to) => {
                bio.remap_bdev(&self.pool_bdev, to);
                bio.track(&self.pool.tracker, token);
                true
            }
            None => {
                self.pool.tracker.exit(token);
                false
            }
        }
    }
}

/// Scenarios for the module's KUnit suite.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use kernel::{
        prelude::*,
        sync::{rcu, Arc, Completion},
        workqueue,
    };

    use crate::metadata::mapping_cache::{selftest, MappingCache, WAYS, WORDS_PER_SLOT};

    /// Slots shared by a writer work item and the reading test.
    #[pin_data]
    struct Shared {
        words: KVec<AtomicU64>,
        stop: AtomicBool,
        #[pin]
        written: Completion,
    }

    /// Map-call readers under `rcu_read_lock` racing a worker that
    /// publishes, re-publishes, invalidates and marks shared keys of two
    /// devices that collide in a small table see only whole entries (the
    /// data block always belongs to the key asked for); after a clear and a
    /// grace period, nothing.
    pub(crate) fn cache_under_rcu() -> bool {
        let n = 4 * WAYS * WORDS_PER_SLOT;
        let Ok(mut words) = KVec::with_capacity(n, GFP_KERNEL) else {
            return false;
        };
        for _ in 0..n {
            let _ = words.push_within_capacity(AtomicU64::new(0));
        }
        let init = pin_init!(Shared {
            words,
            stop: AtomicBool::new(false),
            written <- Completion::new(),
        });
        let Ok(shared) = Arc::pin_init(init, GFP_KERNEL) else {
            return false;
        };
        let writer = shared.clone();
        let spawned = workqueue::system().try_spawn(GFP_KERNEL, move || {
            if let Some(c) = MappingCache::new(&writer.words) {
                let mut round = 0;
                while !writer.stop.load(Ordering::Relaxed) && round < 100_000 {
                    selftest::writer_round(&c, round);
                    round += 1;
                }
            }
            writer.written.complete_all();
        });
        let Some(c) = MappingCache::new(&shared.words) else {
            return false;
        };
        let mut ok = spawned.is_ok();
        for _ in 0..2000 {
            let guard = rcu::read_lock();
            ok &= selftest::reader_pass(&c);
            drop(guard);
        }
        shared.stop.store(true, Ordering::Relaxed);
        if spawned.is_ok() {
            shared.written.wait_for_completion();
        }
        c.clear();
        rcu::synchronize_rcu();
        ok && c.count() == 0
    }
}
