// SPDX-License-Identifier: GPL-2.0
//! The pool object: the state one pool's tables and thin targets share
//! (dm-thin's `struct pool`), outliving table reloads.
//!
//! [`PoolObj`] holds [`PoolState`] behind a kernel mutex, the workers'
//! queue, kcopyd, the in-flight tracker, the periodic waker and the pool's
//! debugfs directory; thin targets find it through the [`registry`] by the
//! pool's mapped device, as dm-thin's `__pool_table_lookup` does. The files
//! of this directory each hold one concept of it:
//!
//! | file | what |
//! |---|---|
//! | `state.rs` | [`PoolState`], what the pool lock guards, mode changes, the thin targets |
//! | `commit.rs` | commits, aborts, and when freed blocks may be reused |
//! | `provision.rs` | data block allocation, mappings, cells |
//! | `passdown.rs` | discards passed down after a grace period |
//! | `space.rs` | growing the devices, the metadata reserve, low-water events |
//! | `suspend.rs` | suspend and resume: binding a table, what stops while suspended |
//! | `message.rs` | the pool's six messages, a delete in pieces |
//! | `registry.rs` | the module-global table of pool objects |
//! | `open.rs` | opening the metadata and building a new pool object |
//! | `stats.rs` | the lock-free flags of the map path and the debugfs counters |
//! | `member.rs` | what the pool asks of a thin target's I/O state |
//! | `cells.rs` | the cell table (dm-thin's bio prison) |
//! | `cache.rs` | the mapping cache: its memory, and its writers under the pool lock |
//! | `committed.rs` | the last commit's tree, for the workers' lookups without the pool lock |
//! | `cpu_counter.rs` | a per-CPU statistics counter |
//!
//! Locks: see `Documentation/io-path.md`, "The rules of the I/O path".

use core::{
    fmt,
    ops::Deref,
    sync::atomic::{AtomicUsize, Ordering},
};
use kernel::{
    debugfs::{Dir, File as DebugFile},
    prelude::*,
    sync::{Arc, CondVar, Mutex, MutexGuard},
};

use self::{cache::PoolCacheReader, committed::CommittedView, stats::ThinCountersEntry};
use crate::glue::{
    inflight::{GpWaiter, IoTracker},
    kcopyd::Kcopyd,
    queue::IoQueue,
    ticker::{Tick, Ticker},
};

pub(crate) mod cache;
pub(crate) mod cells;
mod commit;
pub(crate) mod committed;
pub(crate) mod cpu_counter;
pub(crate) mod member;
mod message;
mod open;
mod passdown;
pub(crate) mod provision;
pub(crate) mod registry;
mod space;
pub(crate) mod state;
pub(crate) mod stats;
mod suspend;

pub(crate) use commit::Reuse;
pub(crate) use open::PoolMetadata;
pub(crate) use provision::AllocFailure;
pub(crate) use space::{usable_metadata_blocks, warn_if_metadata_device_too_big, Space};
pub(crate) use state::PoolState;
pub(crate) use stats::{PoolFlags, ThinCounters, ThinCountersHold};
pub(crate) use suspend::Binding;

/// How long bios wait for data space before erroring (the `no_space_timeout`
/// module parameter, as dm-thin's; 0 waits forever).
pub(crate) fn no_space_timeout_secs() -> u32 {
    crate::glue::params::no_space_timeout()
}

/// Period of the pool's waker: commits dirty metadata, as dm-thin's
/// `COMMIT_PERIOD`, and checks the no-space deadline.
pub(super) const WAKER_PERIOD_MS: u32 = 1000;

/// A `Display` made of a closure, for logging the core's `write_log`s.
pub(crate) struct Show<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result>(pub(crate) F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> kernel::fmt::Display for Show<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// Pure logic of the pool object, for KUnit.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    pub(crate) use super::space::selftest::metadata_reserve;
}

/// A pool object shared by the pool's tables and its thin targets.
#[pin_data]
pub(crate) struct PoolObj {
    /// The pool mutex: 2nd in the lock order (`Documentation/io-path.md`, "The rules of the I/O path").
    #[pin]
    pub(super) state: Mutex<PoolState>,
    /// Signalled when the last in-flight provision ends, a committer is
    /// done waiting or a delete in pieces ends (waits on `state`;
    /// committers: see the rules).
    #[pin]
    pub(super) settled: CondVar,
    /// The workers' queue: the deferred lanes, the ticker, the
    /// grace-period work.
    pub(crate) wq: IoQueue,
    /// The completion lanes' queue. Deferred work waits for completion
    /// work (a commit waits for the provisions in flight to settle), so
    /// each has a reclaim queue, and so a rescuer, of its own: under memory
    /// pressure one rescuer shared by both could run a waiting deferred
    /// item while the completion it waits for never runs.
    pub(crate) completion_wq: IoQueue,
    /// Zeroing and copying of data blocks.
    pub(crate) kcopyd: Kcopyd,
    /// Lock-free view for the map path.
    pub(crate) flags: Arc<PoolFlags>,
    /// The map path's view of the mapping cache.
    pub(crate) mappings: PoolCacheReader,
    /// The last commit's tree, for the workers' lookups without the pool
    /// lock.
    pub(crate) committed: Arc<CommittedView>,
    /// Periodic commit and no-space deadline; holds the object while
    /// started (see [`SharedPool`]).
    pub(super) waker: Arc<Ticker<PoolObj>>,
    /// Which bios could still touch a data block ([`IoTracker`]).
    pub(crate) tracker: Arc<IoTracker>,
    /// Calls [`GpDone::gp_done`] after a grace period of `tracker`: discards
    /// waiting to pass down, bios waiting to reuse freed blocks. Holds the
    /// object while started, as `waker`.
    pub(super) gp_waiter: Arc<GpWaiter<PoolObj>>,
    /// `/sys/kernel/debug/rthin-<pool>/`: the pool's and its thins' counters.
    pub(super) debugfs: Dir,
    pub(super) _pool_file: Option<Pin<KBox<DebugFile<Arc<PoolFlags>>>>>,
    /// The thin devices' counters files in `debugfs`. A leaf lock: taken
    /// with no other held (`Documentation/io-path.md`, "The rules of the I/O path").
    #[pin]
    pub(super) thin_files: Mutex<KVec<ThinCountersEntry>>,
    /// How many [`SharedPool`]s there are.
    users: AtomicUsize,
}

impl Tick for PoolObj {
    fn tick(&self) {
        if self.flags.dirty() && self.flags.periodic_commits_allowed() {
            // A suspended pool writes nothing to its metadata device
            // (dm-thin cancels its waker at postsuspend).
            if let Some(mut st) = self.lock_settled_unless_deleting() {
                if !st.quiesced() && st.commit().is_ok() {
                    self.flags.periodic_commits.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let mut st = self.lock();
        st.check_no_space_deadline();
        // Bios that found no memory for a cell while no provision was in
        // flight to wake them.
        st.requeue_cell_waiters();
    }

    fn tick_queue(&self) -> &IoQueue {
        &self.wq
    }
}

/// A user of a pool object: the registry entry, the pool's tables, its thin
/// targets and their I/O state. The waker and the grace-period waiter hold
/// the object too while they run (each from its start to its stop), so the
/// object cannot go before they have stopped; the last user stops them, and
/// the object goes with the last reference.
pub(crate) struct SharedPool(Arc<PoolObj>);

impl SharedPool {
    /// The first user of a new pool object; starts its waker and
    /// grace-period waiter.
    fn first(pool: Arc<PoolObj>) -> Self {
        pool.users.store(1, Ordering::Relaxed);
        pool.waker.start(&pool);
        pool.gp_waiter.start(&pool);
        Self(pool)
    }
}

impl Clone for SharedPool {
    fn clone(&self) -> Self {
        // A new user is made only from one that exists: the count never
        // comes back from zero.
        self.0.users.fetch_add(1, Ordering::Relaxed);
        Self(self.0.clone())
    }
}

impl Drop for SharedPool {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Each waits for its running work, then lets the object go.
            self.0.waker.stop();
            self.0.gp_waiter.stop();
        }
    }
}

impl Deref for SharedPool {
    type Target = PoolObj;

    fn deref(&self) -> &PoolObj {
        &self.0
    }
}

impl PoolObj {
    /// Takes the pool lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock()
    }

    /// Takes the pool lock if it is free.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, PoolState>> {
        self.state.try_lock()
    }
}
