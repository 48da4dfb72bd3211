// SPDX-License-Identifier: GPL-2.0
//! The I/O path of one thin target.
//!
//! **Map call (fast path).** A read, or a write to an unshared block, whose
//! mapping is in the thin's mapping cache is remapped right in the map call:
//! an in-flight read side of the pool's tracker, one `rcu_read_lock`, one
//! atomic load, no pool lock, no sleeping, no worker hop. Shared blocks are
//! remapped there too for reads, and so are plain writes into a block held
//! open for them (`open_block.rs`). Everything else — cache misses,
//! unprovisioned or shared blocks written, discards, flushes and
//! PREFLUSH/FUA writes while a change of this thin is not yet on stable
//! storage — goes to the per-CPU deferred list of the CPU it arrived on.
//!
//! **Workers.** A worker looks the block up in the metadata B-tree under the
//! pool lock (it may sleep on dm-bufio), lets the pool's mode state machine
//! decide what the bio needs (`dm::pool_mode::decide_bio`), and publishes the
//! answer to the cache so later bios take the fast path. Provisioning and
//! breaking sharing allocate a data block and hold a *cell* on the virtual
//! block (later bios to it park on the cell), then start a kcopyd job that
//! zeroes or copies the new block (or, for a write of the whole block,
//! submit the write itself) and move on: the worker never waits for the
//! data, so it keeps many provisions in flight. When the job or the write
//! ends, the bio comes back on the thin's *completion lane* and only then is
//! the mapping inserted: no mapping ever points at a block that does not yet
//! hold the right data. Commits wait for those in-flight provisions
//! (`PoolObj::lock_settled`), so a commit never records a block allocated but
//! not yet mapped.
//!
//! **Durability and freed blocks.** Every bio remapped to a data block holds
//! a read side of the pool's in-flight tracker from before its lookup until
//! it completes (`end_io`), so a freed block is passed down and reused only
//! after the bios that could use it have completed; a durable bio completes
//! only once a commit that covers this thin's changes is on stable storage.
//! `Documentation/io-path.md` ("The rules of the I/O path") has the whole
//! argument.
//!
//! **Invalidation.** Only workers and message handlers holding the pool lock
//! write the cache. A snapshot of the device raises its share generation,
//! which makes its entries answer as shared (reads stay on the fast path),
//! and a metadata abort drops every entry; both then wait for an RCU grace
//! period, after which no map call can still be using an old entry. A
//! discard drops its entries and relies on the in-flight tracker instead.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`ThinIo`]: its queues, held bios, waiters and change generation |
//! | `map.rs` | the map call and its fast path |
//! | `submit.rs` | a worker's remap and the commit a durable bio needs before it is submitted |
//! | `worker.rs` | the workers: lookups, the mode's decisions, holes, discards |
//! | `provision.rs` | provisioning and breaking sharing, up to the mapping's insert |
//! | `covering.rs` | writes that together cover a block (one batch, or parked behind the block's first write), provisioned together, filled only where none writes |
//! | `open_block.rs` | blocks held open for more writes, each completed as soon as it is written; closed when covered or needed |

mod covering;
mod map;
mod open_block;
mod provision;
mod submit;
mod worker;

#[cfg(feature = "selftest")]
pub(crate) use map::selftest;

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::{
    new_spinlock,
    prelude::*,
    sync::{Arc, MutexGuard, SpinLock},
};

use crate::{
    dm::block_geometry::BlockGeometry,
    dm::pool_mode::IoError,
    glue::{
        bio::{Bio, BioList, OwnedBio},
        deferred::{CpuQueues, Drain, Lane},
        device::BdevHandle,
        hooked::Requeue,
        queue::IoQueue,
    },
    metadata::thin_metadata::Mapping,
    pool::{member::PoolMember, PoolState, SharedPool, ThinCounters},
};

/// The I/O state of one thin target.
#[pin_data]
pub(crate) struct ThinIo {
    /// The thin device id.
    pub(crate) dev_id: u32,
    pool: SharedPool,
    /// The pool device, where remapped bios go.
    pool_bdev: BdevHandle,
    geometry: BlockGeometry,
    /// The external origin, if the table names one.
    origin: Option<ExternalOrigin>,
    /// Bios deferred by the map call, and anything that may wait. Both
    /// lanes hold this state until [`Self::quiesce`] closes them.
    queues: CpuQueues<ThinIo>,
    /// Completed whole-block writes of provisions: never wait on anything
    /// but the pool lock, so the commits that wait for provisions (on the
    /// other lane) always see them end.
    completed: CpuQueues<ThinIo>,
    /// Bios waiting for data space (out-of-data-space, queue policy), and
    /// whether a noflush suspend is under way (then dm takes them back).
    /// 3rd in the lock order (`Documentation/io-path.md`, "The rules of the I/O path").
    #[pin]
    held: SpinLock<(BioList, bool)>,
    /// Bios that wait for the pool: for a free cell, until freed data
    /// blocks may be reused (`PoolState::reuse_state`), or until the
    /// suspended pool resumes (`Self::unless_quiesced`). 3rd in the lock
    /// order, as `held`.
    #[pin]
    waiters: SpinLock<BioList>,
    /// The blocks held open for more writes (`open_block.rs`), at most
    /// `MAX_OPEN` (reserved). Blocks are added under the pool lock; taken
    /// out with or without it. After `held` and `waiters` in the lock order
    /// (nothing is taken under it).
    #[pin]
    open: SpinLock<KVec<open_block::OpenBlock>>,
    /// How many blocks `open` holds: the paths that find none skip its lock.
    open_count: AtomicUsize,
    /// From the thin's presuspend to its resume no block is held open.
    no_open: AtomicBool,
    /// The pool's change generation of this device's last metadata change
    /// (`u64::MAX` once changes were lost to an aborted transaction): a
    /// durable bio completes only once a commit covers it.
    changed: AtomicU64,
    /// The device's `snapshotted_time`, as its details have it now: a
    /// mapping made before it is shared. Raised under the pool lock by a
    /// snapshot of the device, before the message returns; workers that
    /// answer a write from the last commit's tree read it without the lock.
    snapshotted_time: AtomicU32,
    /// The device's share generation in the pool's mapping cache: an entry
    /// published at an older one answers as shared. Set under the pool lock
    /// (registration, snapshots); read by the map call under RCU.
    share_gen: AtomicU32,
    pub(crate) counters: Arc<ThinCounters>,
}

/// A read-only device whose contents unprovisioned blocks show (dm-thin's
/// external origin), up to its size.
pub(crate) struct ExternalOrigin {
    bdev: BdevHandle,
    /// Its size in sectors, re-read at each resume (it may have changed).
    sectors: AtomicU64,
}

impl ExternalOrigin {
    /// How many sectors from `sector` on lie inside the origin.
    fn sectors_from(&self, sector: u64) -> u64 {
        self.sectors.load(Ordering::Relaxed).saturating_sub(sector)
    }
}

/// What the pool tells a new thin about its configuration.
pub(crate) struct ThinIoConfig {
    pub(crate) dev_id: u32,
    pub(crate) pool_bdev: BdevHandle,
    pub(crate) geometry: BlockGeometry,
    pub(crate) origin: Option<BdevHandle>,
    /// The device's counters (shared with other targets of the device).
    pub(crate) counters: Arc<ThinCounters>,
    /// The change generation its durable bios depend on at first
    /// (`PoolState::thin_changed_floor`).
    pub(crate) changed: u64,
    /// The device's `snapshotted_time`.
    pub(crate) snapshotted_time: u32,
    /// The device's share generation in the pool's mapping cache
    /// (`PoolCache::note_target_of`).
    pub(crate) share_gen: u32,
}

impl ThinIo {
    /// Creates the I/O state; the caller registers it with the pool.
    pub(crate) fn new(pool: SharedPool, cfg: ThinIoConfig) -> Result<Arc<Self>> {
        let queues = CpuQueues::new(Lane::Deferred)?;
        let completed = CpuQueues::new(Lane::Completed)?;
        let open = KVec::with_capacity(open_block::MAX_OPEN, GFP_KERNEL)?;
        let io = Arc::pin_init(
            pin_init!(ThinIo {
                dev_id: cfg.dev_id,
                pool,
                pool_bdev: cfg.pool_bdev,
                geometry: cfg.geometry,
                origin: cfg.origin.map(|bdev| ExternalOrigin {
                    sectors: AtomicU64::new(bdev.nr_sectors()),
                    bdev,
                }),
                queues,
                completed,
                held <- new_spinlock!((BioList::new(), false), "rthin_held"),
                waiters <- new_spinlock!(BioList::new(), "rthin_waiters"),
                open <- new_spinlock!(open, "rthin_open"),
                open_count: AtomicUsize::new(0),
                no_open: AtomicBool::new(false),
                changed: AtomicU64::new(cfg.changed),
                snapshotted_time: AtomicU32::new(cfg.snapshotted_time),
                share_gen: AtomicU32::new(cfg.share_gen),
                counters: cfg.counters,
            }),
            GFP_KERNEL,
        )?;
        io.queues.set_owner(&io);
        io.completed.set_owner(&io);
        Ok(io)
    }

    /// Re-reads the external origin's size (thin preresume, as dm-thin).
    pub(crate) fn refresh_origin_size(&self) {
        if let Some(o) = &self.origin {
            o.sectors.store(o.bdev.nr_sectors(), Ordering::Relaxed);
        }
    }

    /// The target is going away: waits until no worker of this thin runs
    /// (a completion's worker may requeue on the deferred lane, hence the
    /// second flush of it), then closes both lanes, which lets go of this
    /// state (the lanes hold it from `new` on).
    pub(crate) fn quiesce(&self) {
        self.queues.flush();
        self.completed.flush();
        self.queues.flush();
        self.completed.close();
        self.queues.close();
    }

    /// Holds a bio until data space appears; during a noflush suspend, dm
    /// takes it back instead. Pushed before the pool lock `st`, under which
    /// the bio was found to need holding, is let go: a resume that grows
    /// the pool requeues the held bios under that lock, so a bio pushed
    /// after it would wait for some later resume.
    fn hold(&self, st: MutexGuard<'_, PoolState>, bio: OwnedBio) {
        let mut held = self.held.lock();
        let to_dm = if held.1 {
            Some(bio)
        } else {
            held.0.push(bio);
            None
        };
        drop(held);
        drop(st);
        if let Some(bio) = to_dm {
            bio.requeue_to_dm();
        }
    }

    /// From postsuspend's commit to resume a worker changes no metadata
    /// and commits nothing (`PoolState::quiesced`): `bio` then waits on
    /// `waiters`, pushed under the pool lock `st`, under which the resume
    /// requeues them. Otherwise hands the bio back.
    fn unless_quiesced(&self, st: &PoolState, bio: OwnedBio) -> Option<OwnedBio> {
        if !st.quiesced() {
            return Some(bio);
        }
        self.waiters.lock().push(bio);
        None
    }

    fn take_held(&self) -> BioList {
        core::mem::take(&mut self.held.lock().0)
    }

    /// Hands the bios that waited for the pool back to the workers.
    pub(crate) fn requeue_waiters(&self) {
        self.requeue(core::mem::take(&mut *self.waiters.lock()));
    }

    /// Records a change of this device's metadata at generation `gen`.
    pub(crate) fn note_change(&self, gen: u64) {
        self.changed.fetch_max(gen, Ordering::AcqRel);
    }

    /// The metadata rolled back to the commit of generation `committed`: if
    /// this device had changes after it, they are lost, and its durable bios
    /// fail from now on.
    pub(crate) fn changes_lost_after(&self, committed: u64) {
        if self.changed.load(Ordering::Acquire) > committed {
            self.changed.store(u64::MAX, Ordering::Release);
        }
    }

    /// The change generation its durable bios depend on.
    pub(crate) fn changed_gen(&self) -> u64 {
        self.changed.load(Ordering::Acquire)
    }

    /// The device was snapshotted at `time`: its mappings made before are
    /// shared, and its cache entries from before `share_gen` answer so
    /// (under the pool lock, before the snapshot's grace period).
    pub(crate) fn note_snapshot(&self, time: u32, share_gen: u32) {
        self.snapshotted_time.fetch_max(time, Ordering::AcqRel);
        self.share_gen.store(share_gen, Ordering::Release);
    }

    fn share_gen(&self) -> u32 {
        self.share_gen.load(Ordering::Acquire)
    }

    /// Whether a write to `mapping` must break sharing.
    fn shares(&self, mapping: &Mapping) -> bool {
        mapping.shared_after(self.snapshotted_time.load(Ordering::Acquire))
    }

    /// Changes of this device were lost to an aborted transaction.
    pub(crate) fn changes_lost(&self) -> bool {
        self.changed.load(Ordering::Acquire) == u64::MAX
    }

    /// Every change of this device is in a commit on stable storage.
    fn changes_committed(&self) -> bool {
        self.pool.flags.committed() >= self.changed.load(Ordering::Acquire)
    }

    /// The end of a bio this target mapped: ends its in-flight read side.
    pub(crate) fn end_io(&self, bio: &mut Bio<'_>) {
        if let Some(token) = bio.take_inflight() {
            self.pool.tracker.exit(token);
        }
    }

    /// Opens an in-flight read side for `bio`, before the mapping it will
    /// use is looked up ([`IoTracker`]): held until the bio completes.
    fn track(&self, bio: &mut OwnedBio) {
        if let Some(token) = self.pool.tracker.enter() {
            bio.track(&self.pool.tracker, token);
        }
    }

    /// Hands the bios held for data space back to the workers.
    pub(crate) fn requeue_held(&self) {
        self.requeue(self.take_held());
    }

    /// Puts bios back on this CPU's deferred list.
    fn requeue(&self, mut bios: BioList) {
        self.queues.push_list(&self.pool.wq, &mut bios);
    }

    /// A noflush suspend begins (dm-thin's `do_noflush_start`): held bios,
    /// and any the workers would hold from now on, go back to dm, which
    /// reissues them after the resume, so the suspend does not wait for
    /// space.
    pub(crate) fn start_noflush_suspend(&self) {
        let mut held = {
            let mut h = self.held.lock();
            h.1 = true;
            core::mem::take(&mut h.0)
        };
        while let Some(bio) = held.pop() {
            bio.requeue_to_dm();
        }
    }

    /// The noflush suspend ended (resumed or cancelled).
    pub(crate) fn end_noflush_suspend(&self) {
        self.held.lock().1 = false;
    }

    /// The thin is being suspended: none of its blocks opens until
    /// [`Self::allow_open`], and the open ones close. Their writes have
    /// completed, so dm does not wait for them: unless `noflush` (which must
    /// not wait for a device held below the pool), this waits until they
    /// are mapped, so that the pool's next commit (its suspend's, if it is
    /// being removed) records them.
    pub(crate) fn stop_open(&self, noflush: bool) {
        self.no_open.store(true, Ordering::Release);
        if self.close_open_blocks() > 0 && !noflush {
            drop(self.pool.lock_settled());
        }
    }

    /// Resumed (or the suspend was cancelled): blocks may be held open again.
    pub(crate) fn allow_open(&self) {
        self.no_open.store(false, Ordering::Release);
    }

    /// Completes the bios held for data space with `error`.
    pub(crate) fn error_held(&self, error: IoError) {
        let mut held = self.take_held();
        while let Some(bio) = held.pop() {
            bio.complete(Some(error));
        }
    }
}

impl PoolMember for ThinIo {
    fn dev_id(&self) -> u32 {
        self.dev_id
    }

    fn error_held(&self, error: IoError) {
        ThinIo::error_held(self, error);
    }

    fn requeue_held(&self) {
        ThinIo::requeue_held(self);
    }

    fn requeue_waiters(&self) {
        ThinIo::requeue_waiters(self);
    }

    fn note_change(&self, gen: u64) {
        ThinIo::note_change(self, gen);
    }

    fn changes_lost_after(&self, committed: u64) {
        ThinIo::changes_lost_after(self, committed);
    }

    fn changed_gen(&self) -> u64 {
        ThinIo::changed_gen(self)
    }

    fn close_open_blocks(&self) -> usize {
        ThinIo::close_open_blocks(self)
    }

    fn note_snapshot(&self, time: u32, share_gen: u32) {
        ThinIo::note_snapshot(self, time, share_gen);
    }
}

impl Requeue for ThinIo {
    fn completion_lane(&self) -> (&CpuQueues<Self>, &IoQueue) {
        (&self.completed, &self.pool.completion_wq)
    }
}

impl Drain for ThinIo {
    fn drain(self: &Arc<Self>, lane: Lane, mut bios: BioList) {
        if lane == Lane::Deferred {
            self.process_batch(bios);
            return;
        }
        while let Some(mut bio) = bios.pop() {
            match bio.take_provision() {
                Some((provision, ok)) => {
                    let members = bio.take_members();
                    if !members.is_empty() {
                        self.finish_covering(bio, members, &provision);
                    } else if provision.deferred.is_some() {
                        self.continue_provision(bio, provision, ok);
                    } else {
                        self.finish_provision(bio, &provision, ok);
                    }
                }
                // Nothing else is ever queued there.
                None => bio.complete(Some(IoError::Io)),
            }
        }
    }
}
