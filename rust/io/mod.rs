// SPDX-License-Identifier: GPL-2.0
//! The I/O path of one thin target.
//!
//! **Map call (fast path).** A read, or a write to an unshared block, whose
//! mapping is in the thin's mapping cache is remapped right in the map call:
//! an in-flight read side of the pool's tracker, one `rcu_read_lock`, one
//! atomic load, no pool lock, no sleeping, no worker hop. Shared blocks are
//! remapped there too for reads. Everything else — cache misses,
//! unprovisioned or shared blocks written, discards, flushes and
//! PREFLUSH/FUA writes while a change of this thin is not yet on stable
//! storage — goes to the per-CPU deferred list of the CPU it arrived on.
//!
//! **Workers.** A worker looks the block up in the metadata B-tree under the
//! pool lock (it may sleep on dm-bufio), lets the pool's mode state machine
//! decide what the bio needs (`dm_pool_mode::decide_bio`), and publishes the
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
//! `Documentation/io-path.md` ("The rules that keep data safe") has the whole
//! argument.
//!
//! **Invalidation.** Only workers and message handlers holding the pool lock
//! write the cache. A snapshot of the device marks its entries shared (reads
//! stay on the fast path) and a metadata abort drops every entry; both then
//! wait for an RCU grace period, after which no map call can still be using
//! an old entry. A discard drops its entries and relies on the in-flight
//! tracker instead.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    new_spinlock,
    prelude::*,
    sync::{rcu, Arc, MutexGuard, SpinLock},
};

use crate::{
    block_geometry::BlockGeometry,
    dm_pool_mode::{
        BioAction, BioDir, DiscardAction, IoError, Lookup, PreparedMappingAction, WorkItem,
    },
    glue::{
        bio::{Bio, BioKind, BioList, Fill, OwnedBio, Provision, Requeue},
        deferred::{CpuQueues, Drain, Lane},
        dm::{BdevHandle, MapResult},
        kcopyd::CopyFailed,
    },
    pool::{member::PoolMember, AllocFailure, PoolState, Reuse, SharedPool, ThinCounters},
};

/// How a partial write's new block gets its data ([`ThinIo::fill_plan`]).
#[derive(Clone, Copy)]
enum FillPlan {
    /// A copy of the shared block at sector `from` of the pool device.
    Copy { from: u64 },
    /// Zeroes.
    Zero,
    /// The external origin's `in_origin` sectors from its sector `begin`,
    /// then zeroes for the rest if `zero_rest`.
    Origin {
        begin: u64,
        in_origin: u64,
        zero_rest: bool,
    },
    /// Nothing: the pool skips zeroing.
    Nothing,
}

/// The I/O state of one thin target.
#[pin_data]
pub(crate) struct ThinIo {
    /// The thin device id.
    pub(crate) dev_id: u32,
    pool: SharedPool,
    /// The pool device, where remapped bios go (valid while the target lives:
    /// the target flushes its workers before releasing the device).
    pool_bdev: BdevHandle,
    geometry: BlockGeometry,
    /// The external origin, if the table names one.
    origin: Option<ExternalOrigin>,
    /// Bios deferred by the map call, and anything that may wait.
    queues: CpuQueues<ThinIo>,
    /// Completed whole-block writes of provisions: never wait on anything
    /// but the pool lock, so the commits that wait for provisions (on the
    /// other lane) always see them end.
    completed: CpuQueues<ThinIo>,
    /// Bios waiting for data space (out-of-data-space, queue policy), and
    /// whether a noflush suspend is under way (then dm takes them back).
    #[pin]
    held: SpinLock<(BioList, bool)>,
    /// Bios that wait for the pool: for a free cell, or until freed data
    /// blocks may be reused (`PoolState::reuse_state`).
    #[pin]
    waiters: SpinLock<BioList>,
    /// The pool's change generation of this device's last metadata change
    /// (`u64::MAX` once changes were lost to an aborted transaction): a
    /// durable bio completes only once a commit covers it.
    changed: AtomicU64,
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
}

impl ThinIo {
    /// Creates the I/O state; the caller registers it with the pool.
    pub(crate) fn new(pool: SharedPool, cfg: ThinIoConfig) -> Result<Arc<Self>> {
        let queues = CpuQueues::new(Lane::Deferred)?;
        let completed = CpuQueues::new(Lane::Completed)?;
        let io = Arc::pin_init(
            pin_init!(ThinIo {
                dev_id: cfg.dev_id,
                pool,
                pool_bdev: cfg.pool_bdev,
                geometry: cfg.geometry,
                origin: cfg.origin.map(|bdev| ExternalOrigin {
                    bdev,
                    sectors: AtomicU64::new(bdev.nr_sectors()),
                }),
                queues,
                completed,
                held <- new_spinlock!((BioList::new(), false), "rthin_held"),
                waiters <- new_spinlock!(BioList::new(), "rthin_waiters"),
                changed: AtomicU64::new(cfg.changed),
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

    /// Waits until no worker of this thin runs (the target is going away).
    pub(crate) fn quiesce(&self) {
        self.queues.flush();
        self.completed.flush();
        self.queues.flush();
    }

    /// Holds a bio until data space appears; during a noflush suspend, dm
    /// takes it back instead.
    fn hold(&self, bio: OwnedBio) {
        let mut held = self.held.lock();
        if held.1 {
            drop(held);
            bio.requeue_to_dm();
        } else {
            held.0.push(bio);
        }
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

    /// Completes the bios held for data space with `error`.
    pub(crate) fn error_held(&self, error: IoError) {
        let mut held = self.take_held();
        while let Some(bio) = held.pop() {
            bio.complete(Some(error));
        }
    }

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
            }
            BioKind::EmptyFlush if self.changes_committed() => {
                bio.set_bdev(self.pool_bdev);
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
    fn try_fast(&self, bio: &mut Bio<'_>) -> bool {
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
            .and_then(|c| c.get(self.dev_id, vblock));
        drop(guard);
        let to = match hit {
            Some(m) if !(write && m.shared) => self.geometry.remap(m.data_block, sector),
            _ => None,
        };
        match to {
            Some(to) => {
                bio.remap_bdev(self.pool_bdev, to);
                bio.track(&self.pool.tracker, token);
                true
            }
            None => {
                self.pool.tracker.exit(token);
                false
            }
        }
    }

    /// Remaps `bio` into `data_block` on the pool device.
    fn remap(&self, bio: &mut OwnedBio, data_block: u64) -> Result<(), IoError> {
        let sector = bio.view().sector();
        let to = self.geometry.remap(data_block, sector).ok_or(IoError::Io)?;
        bio.view().remap_bdev(self.pool_bdev, to);
        Ok(())
    }

    /// For a `durable` bio (PREFLUSH/FUA, or a flush): makes sure every
    /// change of this device is in a commit on stable storage, committing if
    /// no commit covers it yet. Fails if the changes were lost to an aborted
    /// transaction or the commit fails.
    fn commit_for(&self, durable: bool) -> Result<(), IoError> {
        if !durable || self.changes_committed() {
            return Ok(());
        }
        let mut st = self.pool.lock_settled();
        // A commit that ended while we waited for the lock may cover it.
        if self.changes_committed() {
            return Ok(());
        }
        if self.changes_lost() {
            return Err(IoError::Io);
        }
        st.commit().map_err(|_| IoError::Io)
    }

    /// Commits as `durable` asks, then remaps and submits the bio.
    fn commit_and_submit(&self, mut bio: OwnedBio, durable: bool, data_block: u64) {
        match self
            .commit_for(durable)
            .and_then(|()| self.remap(&mut bio, data_block))
        {
            Ok(()) => bio.submit(),
            Err(e) => bio.complete(Some(e)),
        }
    }

    fn process(&self, mut bio: OwnedBio) {
        if bio.take_commit_then_finish() {
            match self.commit_for(true) {
                Ok(()) => bio.finish(),
                Err(e) => bio.complete(Some(e)),
            }
            return;
        }
        match bio.view().kind() {
            BioKind::Read => self.process_rw(bio, BioDir::Read, false),
            BioKind::Write => self.process_rw(bio, BioDir::Write, false),
            BioKind::EmptyFlush => match self.commit_for(true) {
                Ok(()) => {
                    bio.view().set_bdev(self.pool_bdev);
                    bio.submit();
                }
                Err(e) => bio.complete(Some(e)),
            },
            BioKind::Discard => self.process_discard(bio),
            BioKind::Other => bio.complete(Some(IoError::Io)),
        }
    }

    /// A read or write; `after_commit` once a provision for it committed to
    /// free space (see `PoolState::alloc_data_block`).
    fn process_rw(&self, bio: OwnedBio, dir: BioDir, after_commit: bool) {
        let mut bio = bio;
        let sector = bio.view().sector();
        let vblock = self.geometry.block_of(sector);
        let mut st = self.pool.lock_unblocked();
        let mut bio = match st.try_park(self.dev_id, vblock, bio) {
            Ok(()) => return,
            Err(bio) => bio,
        };
        let found = match st.lookup_and_cache(self.dev_id, vblock) {
            Ok(found) => found,
            Err(_) => {
                drop(st);
                bio.complete(Some(IoError::Io));
                return;
            }
        };
        let lookup = match found {
            None => Lookup::Unmapped,
            Some(r) => Lookup::Mapped { shared: r.shared },
        };
        match (
            st.mode_state().decide_bio(WorkItem::Cell, dir, lookup),
            found,
        ) {
            (BioAction::Remap, Some(r)) => {
                let data_block = r.mapping.data_block;
                // Under the lock the lookup was made under: an unmapping of
                // the block comes after, and waits for the bio.
                self.track(&mut bio);
                drop(st);
                let durable = bio.view().wants_durability();
                self.commit_and_submit(bio, durable, data_block);
            }
            (BioAction::ReadHole, _) => {
                drop(st);
                self.read_hole(bio);
            }
            (BioAction::Provision | BioAction::BreakSharing, _) => {
                let old = found.map(|r| r.mapping.data_block);
                self.provision(st, bio, vblock, old, after_commit);
            }
            (BioAction::Queue, _) => {
                drop(st);
                self.hold(bio);
            }
            (BioAction::Error(e), _) => {
                drop(st);
                bio.complete(Some(e));
            }
            // Remap of a hole: only empty writes, which never get here.
            (BioAction::Remap, None) => {
                drop(st);
                bio.complete(None);
            }
        }
    }

    /// Allocates a block for `vblock` and fills it: with the bio's own write
    /// when the bio covers the whole block, else with zeroes or a copy of
    /// `old` by kcopyd. Either way the worker moves on at once; the bio comes
    /// back on the completion lane when the block holds its data, and the
    /// mapping goes in then ([`Self::finish_provision`]).
    fn provision(
        &self,
        mut st: MutexGuard<'_, PoolState>,
        mut bio: OwnedBio,
        vblock: u64,
        old: Option<u64>,
        after_commit: bool,
    ) {
        if !st.cell_available(self.dev_id, vblock) {
            // Pushed under the pool lock: the next `close_cell` requeues it.
            self.waiters.lock().push(bio);
            return;
        }
        match st.reuse_state() {
            Reuse::Ready => {}
            waiting => {
                // The allocation may return a block freed before the last
                // commit while a bio sent to it then is still in flight (or
                // its discard not yet passed down): wait, without holding
                // up this worker. Pushed under the pool lock, which the
                // wakers take.
                self.waiters.lock().push(bio);
                st.wait_for_reuse();
                drop(st);
                if waiting == Reuse::AfterGracePeriod {
                    self.pool.wake_after_grace_period();
                }
                return;
            }
        }
        let data_block = match st.alloc_data_block(after_commit) {
            Ok(b) => b,
            Err(AllocFailure::CommitFirst) => {
                drop(st);
                let _ = self.pool.lock_settled().commit();
                // Start over: the block may have been mapped meanwhile.
                self.process_rw(bio, BioDir::Write, true);
                return;
            }
            Err(AllocFailure::Refused(action)) => {
                drop(st);
                match action {
                    BioAction::Queue => self.hold(bio),
                    BioAction::Error(e) => bio.complete(Some(e)),
                    _ => bio.complete(Some(IoError::Io)),
                }
                return;
            }
        };
        // The pool's live features: a reload may change them.
        let zero_new_blocks = st.features().zero_new_blocks;
        let Some(epoch) = st.open_cell(self.dev_id, vblock) else {
            st.release_data_block(data_block);
            drop(st);
            bio.complete(Some(IoError::Io));
            return;
        };
        drop(st);

        let whole = {
            let v = bio.view();
            self.geometry.covers_block(v.sector(), v.nr_sectors())
        };
        let mut provision = Provision {
            vblock,
            data_block,
            epoch,
            breaks_sharing: old.is_some(),
            fill: Fill::Overwrite,
        };
        if whole {
            if let Err(e) = self.remap(&mut bio, data_block) {
                // Not filled: this frees the block and fails, as intended.
                let _ = self.end_provision(&provision, false, None);
                bio.complete(Some(e));
                return;
            }
            match bio.submit_hooked(self, provision) {
                Ok(()) => return,
                // No per-bio data: fill the block as for a partial write.
                Err(b) => bio = b,
            }
        }
        provision.fill = Fill::Kcopyd;
        let to = self.geometry.block_start(data_block).unwrap_or(0);
        let plan = self.fill_plan(vblock, old, zero_new_blocks);
        // A copy or a zeroing runs without the worker waiting for it.
        if matches!(plan, FillPlan::Copy { .. } | FillPlan::Zero) {
            match bio.into_fill_hook(self, provision) {
                Ok(hook) => {
                    let (pool, bs) = (self.pool_bdev.raw(), self.geometry.sectors());
                    match plan {
                        FillPlan::Copy { from } => {
                            self.pool
                                .kcopyd
                                .copy_then((pool, from), (pool, to), bs, hook)
                        }
                        _ => self.pool.kcopyd.zero_then(pool, to, bs, hook),
                    }
                    return;
                }
                Err(b) => bio = b,
            }
        }
        let filled = self.fill(plan, to).is_ok();
        self.finish_fill(bio, &provision, filled);
    }

    /// How a partial write's new block gets its data: a copy of the shared
    /// block `old`, else of the external origin's part of the block (the
    /// rest zeroed), else zeroes (unless the pool skips zeroing).
    fn fill_plan(&self, vblock: u64, old: Option<u64>, zero: bool) -> FillPlan {
        let bs = self.geometry.sectors();
        if let Some(from_block) = old {
            let from = self.geometry.block_start(from_block).unwrap_or(0);
            return FillPlan::Copy { from };
        }
        let begin = self.geometry.block_start(vblock).unwrap_or(u64::MAX);
        let in_origin = match &self.origin {
            Some(origin) => origin.sectors_from(begin).min(bs),
            None => 0,
        };
        match (in_origin, zero) {
            (0, true) => FillPlan::Zero,
            (0, false) => FillPlan::Nothing,
            _ => FillPlan::Origin {
                begin,
                in_origin,
                zero_rest: zero,
            },
        }
    }

    /// Carries out `plan` for the block at sector `to` of the pool device,
    /// waiting for kcopyd.
    fn fill(&self, plan: FillPlan, to: u64) -> Result<(), CopyFailed> {
        let bs = self.geometry.sectors();
        let pool = self.pool_bdev.raw();
        let kcopyd = &self.pool.kcopyd;
        match plan {
            FillPlan::Copy { from } => kcopyd.copy((pool, from), (pool, to), bs),
            FillPlan::Zero => kcopyd.zero(pool, to, bs),
            FillPlan::Nothing => Ok(()),
            FillPlan::Origin {
                begin,
                in_origin,
                zero_rest,
            } => {
                if let Some(origin) = &self.origin {
                    kcopyd.copy((origin.bdev.raw(), begin), (pool, to), in_origin)?;
                }
                if zero_rest && in_origin < bs {
                    kcopyd.zero(pool, to.saturating_add(in_origin), bs - in_origin)?;
                }
                Ok(())
            }
        }
    }

    /// A read of an unprovisioned block: from the external origin where it
    /// reaches, zeroes elsewhere.
    fn read_hole(&self, mut bio: OwnedBio) {
        let sector = bio.view().sector();
        let in_origin = self.origin.as_ref().map_or(0, |o| o.sectors_from(sector));
        bio.zero_fill();
        match &self.origin {
            Some(origin) if in_origin > 0 => {
                // Like dm-thin: read what the origin has, the tail stays
                // zero-filled.
                let mut v = bio.view();
                if v.nr_sectors() > in_origin {
                    v.truncate(in_origin);
                }
                v.set_bdev(origin.bdev);
                bio.submit();
            }
            _ => bio.complete(None),
        }
    }

    /// A provision's bio came back on the completion lane: its whole-block
    /// write or its kcopyd fill ended (`ok` if it succeeded).
    /// Runs on the completion lane: it must not wait for other provisions,
    /// so a commit the bio asks for is left to the deferred lane.
    fn finish_provision(&self, bio: OwnedBio, provision: &Provision, ok: bool) {
        match provision.fill {
            Fill::Overwrite => self.finish_overwrite(bio, provision, ok),
            Fill::Kcopyd => self.finish_fill(bio, provision, ok),
        }
    }

    /// A whole-block write of a provision completed: map the block, then let
    /// the bio complete.
    fn finish_overwrite(&self, mut bio: OwnedBio, provision: &Provision, written: bool) {
        match self.end_provision(provision, written, None) {
            Ok(()) => {
                let durable = bio.view().wants_durability();
                if durable && !self.changes_committed() && bio.set_commit_then_finish() {
                    self.queues.push(&self.pool.wq, bio);
                } else {
                    bio.finish();
                }
            }
            // The write's own error stays on the bio.
            Err(_) if !written => bio.finish(),
            Err(e) => bio.complete(Some(e)),
        }
    }

    /// The new block of a partial write was zeroed or copied (`filled`):
    /// map it, then issue the bio into it.
    fn finish_fill(&self, mut bio: OwnedBio, provision: &Provision, filled: bool) {
        if bio.view().wants_durability() {
            // The deferred lane finds the block mapped, commits and submits.
            match self.end_provision(provision, filled, None) {
                Ok(()) => self.queues.push(&self.pool.wq, bio),
                Err(e) => bio.complete(Some(e)),
            }
            return;
        }
        if let Err(e) = self.end_provision(provision, filled, Some(&mut bio)) {
            bio.complete(Some(e));
            return;
        }
        match self.remap(&mut bio, provision.data_block) {
            Ok(()) => bio.submit(),
            Err(e) => bio.complete(Some(e)),
        }
    }

    /// Ends a provision: maps its data block if it was `filled` and the
    /// pool still allows it (else frees it), publishes the mapping, releases
    /// the cell and requeues the bios that parked on it. `to_submit`, the
    /// bio about to be sent into the block, is tracked from here on.
    fn end_provision(
        &self,
        provision: &Provision,
        filled: bool,
        to_submit: Option<&mut OwnedBio>,
    ) -> Result<(), IoError> {
        let &Provision {
            vblock,
            data_block,
            epoch,
            breaks_sharing: copied,
            ..
        } = provision;
        let mut st = self.pool.lock();
        let parked = st.close_cell(self.dev_id, vblock);
        let outcome = if !filled {
            st.release_data_block(data_block);
            Err(IoError::Io)
        } else if st.epoch() != epoch {
            // The metadata rolled back meanwhile: the block is no longer ours.
            Err(st.mode_state().pool_io_error())
        } else {
            match st.mode_state().decide_prepared_mapping() {
                PreparedMappingAction::Insert => {
                    st.insert_mapping(self, vblock, data_block, copied)
                }
                PreparedMappingAction::Error(e) => {
                    st.release_data_block(data_block);
                    Err(e)
                }
            }
        };
        if outcome.is_ok() {
            if let Some(bio) = to_submit {
                // Under the lock that mapped the block: a later unmapping
                // waits for this bio.
                self.track(bio);
            }
            st.cache_new_mapping(self.dev_id, vblock, data_block);
            let counter = if copied {
                &self.counters.sharing_broken
            } else {
                &self.counters.provisioned
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        self.pool.provision_done(st);
        self.requeue(parked);
        outcome
    }

    fn process_discard(&self, mut bio: OwnedBio) {
        let (sector, nr_sectors) = {
            let v = bio.view();
            (v.sector(), v.nr_sectors())
        };
        let (first, end) = self.geometry.whole_blocks(sector, nr_sectors);
        let mut st = self.pool.lock_unblocked();
        match st.mode_state().decide_discard(WorkItem::Bio) {
            DiscardAction::Process => {}
            DiscardAction::Ignore => {
                drop(st);
                bio.complete(None);
                return;
            }
            DiscardAction::Error(e) => {
                drop(st);
                bio.complete(Some(e));
                return;
            }
        }
        let mut passdown: KVec<u64> = KVec::new();
        let pass_down = st.features().discard_passdown;
        let unmapped = st.unmap_range(self, first, end, |data_block| {
            if pass_down {
                // A failed push only loses the passdown of this block.
                let _ = passdown.push(data_block, GFP_KERNEL);
            }
        });
        if unmapped.is_err() {
            drop(st);
            bio.complete(Some(IoError::Io));
            return;
        }
        // Bios sent to the freed blocks before they were unmapped may still
        // be in flight: the passdown waits for them (asynchronously; the
        // discard itself is done), and the blocks are not reused before it
        // has been issued.
        let queued = !passdown.is_empty()
            && st.queue_passdown(self, passdown, self.pool_bdev, self.geometry);
        drop(st);
        if queued {
            self.pool.wake_after_grace_period();
        }
        bio.complete(None);
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
}

impl Requeue for ThinIo {
    fn requeue_completed(&self, bio: OwnedBio) {
        self.completed.push(&self.pool.wq, bio);
    }
}

impl Drain for ThinIo {
    fn drain(&self, lane: Lane, mut bios: BioList) {
        while let Some(mut bio) = bios.pop() {
            match lane {
                Lane::Deferred => self.process(bio),
                Lane::Completed => match bio.take_provision() {
                    Some((provision, ok)) => self.finish_provision(bio, &provision, ok),
                    // Nothing else is ever queued there.
                    None => bio.complete(Some(IoError::Io)),
                },
            }
        }
    }
}

/// Scenarios for the module's KUnit suite.
pub(crate) mod selftest {
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use kernel::{
        prelude::*,
        sync::{rcu, Arc, Completion},
        workqueue,
    };

    use crate::mapping_cache::{selftest, MappingCache, WAYS, WORDS_PER_SLOT};

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
