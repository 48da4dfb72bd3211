// SPDX-License-Identifier: GPL-2.0
//! The `rthin-pool` target.
//!
//! The constructor parses the table line exactly as dm-thin does, opens the
//! metadata and data devices and finds or creates the **pool object**
//! ([`PoolState`] behind a kernel mutex, shared through an `Arc`): the pool
//! object outlives table reloads and is shared with the thin targets, which
//! find it through the module-global registry (`glue::registry`) keyed by the
//! pool's mapped device, as dm-thin's `__pool_table_lookup` does. A new pool
//! object opens the metadata through a dm-bufio block store, formatting it
//! when block 0 is all zeroes.
//!
//! The target serves dm-thin's six messages, the INFO status line with real
//! numbers, and commits where dm-thin commits: after each successful message,
//! before `reserve_metadata_snap`, on INFO status (unless `--noflush` or
//! suspended), at postsuspend, after a data resize at preresume, and when the
//! pool object goes away. I/O sent to the pool device itself goes to the data
//! device, as in dm-thin.

use core::{
    fmt,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};
use kernel::{
    debugfs::{Dir, File as DebugFile},
    new_condvar, new_mutex,
    prelude::*,
    str::CString,
    sync::{rcu, Arc, CondVar, Mutex, MutexGuard},
    time::{Instant, Monotonic},
};

use crate::{
    block_geometry::BlockGeometry,
    block_store::BlockStore,
    cell_table::CellTable,
    checksum::BlockKind,
    core_error::CoreError,
    dm_errno::{EBUSY, EINVAL, ENOMEM, EPERM},
    dm_events::{DataLowWater, MetadataLowWater},
    dm_message::PoolMessage,
    dm_pool_mode::{BindRequest, BioAction, IoError, ModeChange, PoolMode, PoolModeState},
    dm_pool_table::{
        glue_errors, metadata_dev_blocks, metadata_dev_too_big, metadata_low_water_threshold,
        nr_data_blocks, passdown_off, pool_io_limits, write_pool_table, PoolFeatures, PoolTable,
        PoolTableLine, METADATA_BLOCK_SECTORS, METADATA_MAX_SECTORS,
    },
    dm_status::{write_pool_info, DiscardStatus, PoolInfo, FAIL},
    dm_status_buf::StatusBuf,
    glue::{
        bio::{Bio, BioList, OwnedBio},
        bufio::BufioStore,
        deferred::IoQueue,
        dm::{
            features, Args, BdevHandle, CtrError, DmDev, MapResult, MdKey, QueueLimits, StatusKind,
            TableMd, TableRef, TargetCtx, TargetOps,
        },
        inflight::{GpCookie, GpDone, GpWaiter, IoTracker},
        kcopyd::Kcopyd,
        registry,
        ticker::{Tick, Ticker},
    },
    mapping_cache::CachedMapping,
    pool_cache::{PoolCache, PoolCacheReader},
    thin_io::{ThinCounters, ThinIo},
    thin_metadata::{LookupResult, ThinMetadata},
    tm::TmCaches,
};

/// How long bios wait for data space before erroring (the `no_space_timeout`
/// module parameter, as dm-thin's; 0 waits forever).
fn no_space_timeout_secs() -> u32 {
    crate::glue::params::no_space_timeout()
}

/// Period of the pool's waker: commits dirty metadata, as dm-thin's
/// `COMMIT_PERIOD`, and checks the no-space deadline.
const WAKER_PERIOD_MS: u32 = 1000;

/// A `Display` made of a closure, for logging the core's `write_log`s.
struct Show<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result>(F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> kernel::fmt::Display for Show<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// The metadata blocks dm-thin uses of a device of `device_blocks` 4 KiB
/// blocks (capped, as `get_metadata_dev_size_in_blocks`).
fn usable_metadata_blocks(device_blocks: u64) -> u64 {
    metadata_dev_blocks(device_blocks.saturating_mul(METADATA_BLOCK_SECTORS))
}

/// dm-thin's `warn_if_metadata_device_too_big`, at ctr and when the metadata
/// device grows: LVM sizes metadata below the cap, so a larger device is
/// likely a mistake worth a line in the log.
fn warn_if_metadata_device_too_big(dev: BdevHandle) {
    if metadata_dev_too_big(dev.nr_sectors()) {
        pr_warn!(
            "Metadata device {} is larger than {} sectors: excess space will not be used.\n",
            dev.name(),
            METADATA_MAX_SECTORS
        );
    }
}

/// dm-thin's `__set_metadata_reserve` and `dm_pool_get_free_metadata_block_count`:
/// `min(4096, total / 10)` blocks are kept back from `free` (clamped at 0).
fn free_after_reserve(total: u64, free: u64) -> u64 {
    free.saturating_sub((total / 10).min(4096))
}

/// Pure logic of the pool target, for KUnit.
pub(crate) mod selftest {
    /// The metadata reserve matches dm-thin's numbers.
    pub(crate) fn metadata_reserve() -> bool {
        super::free_after_reserve(512, 500) == 449
            && super::free_after_reserve(65536, 65000) == 65000 - 4096
            && super::free_after_reserve(512, 10) == 0
    }
}

/// What the map path reads of a pool without taking its lock.
///
/// **Change generations.** Every metadata change is made under the pool lock
/// and bumps `changes`; a commit notes the generation it covers before it
/// starts writing and publishes it in `committed` only once its superblock
/// is on stable storage. A bio that asks for durability may complete once
/// `committed` has reached the generation of the last change it depends on
/// (its thin's, see `ThinIo::changed`); a commit in progress never counts,
/// and a failed one never advances `committed`.
#[derive(Default)]
pub(crate) struct PoolFlags {
    /// Metadata changes made (the change generation).
    changes: AtomicU64,
    /// The change generation that the last successful commit covers.
    committed: AtomicU64,
    /// The pool is in FAIL mode: every bio errors at once.
    fails_io: AtomicBool,
    /// Metadata commits done.
    commits: AtomicU64,
    /// Slots of the pool's mapping cache.
    mapping_cache_slots: AtomicU64,
}

impl PoolFlags {
    /// The pool's debugfs file text.
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "commits {}", self.commits.load(Ordering::Relaxed))?;
        writeln!(f, "dirty {}", u8::from(self.dirty()))?;
        writeln!(f, "changes {}", self.changes())?;
        writeln!(f, "committed {}", self.committed())?;
        let slots = self.mapping_cache_slots.load(Ordering::Relaxed);
        writeln!(f, "mapping_cache_slots {slots}")
    }

    /// Metadata changed since the last commit that reached stable storage.
    pub(crate) fn dirty(&self) -> bool {
        self.changes.load(Ordering::Acquire) > self.committed()
    }

    /// The change generation on stable storage.
    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// The current change generation.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Records a metadata change (caller holds the pool lock); returns its
    /// generation.
    fn change(&self) -> u64 {
        self.changes.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Every bio must fail.
    pub(crate) fn fails_io(&self) -> bool {
        self.fails_io.load(Ordering::Acquire)
    }
}

/// A pool object shared by the pool's tables and its thin targets.
#[pin_data(PinnedDrop)]
pub(crate) struct PoolObj {
    #[pin]
    state: Mutex<PoolState>,
    /// Signalled when the last in-flight provision ends or a committer is
    /// done waiting.
    #[pin]
    settled: CondVar,
    /// The workers' queue.
    pub(crate) wq: IoQueue,
    /// Zeroing and copying of data blocks.
    pub(crate) kcopyd: Kcopyd,
    /// Lock-free view for the map path.
    pub(crate) flags: Arc<PoolFlags>,
    /// The map path's view of the mapping cache.
    pub(crate) mappings: PoolCacheReader,
    /// Periodic commit and no-space deadline.
    #[pin]
    waker: Ticker<PoolObj>,
    /// Which bios could still touch a data block ([`IoTracker`]).
    pub(crate) tracker: Arc<IoTracker>,
    /// Calls [`GpDone::gp_done`] after a grace period of `tracker`: discards
    /// waiting to pass down, bios waiting to reuse freed blocks.
    #[pin]
    gp_waiter: GpWaiter<PoolObj>,
    /// `/sys/kernel/debug/rthin-<pool>/`: the pool's and its thins' counters.
    debugfs: Dir,
    _pool_file: Option<Pin<KBox<DebugFile<Arc<PoolFlags>>>>>,
    /// The thin devices' counters files in `debugfs`.
    #[pin]
    thin_files: Mutex<KVec<ThinCountersEntry>>,
}

/// The counters file of one thin device, `<maj:min>` in the pool's debugfs
/// directory, shared by every target of that device: a reload (lvextend)
/// builds the new table while the old one is live, and two files of one name
/// cannot exist. The counters go on across the reload.
struct ThinCountersEntry {
    name: CString,
    users: usize,
    counters: Arc<ThinCounters>,
    _file: Option<Pin<KBox<DebugFile<Arc<ThinCounters>>>>>,
}

/// A thin target's hold on its device's counters ([`PoolObj::thin_counters`]).
pub(crate) struct ThinCountersHold {
    pool: SharedPool,
    /// The entry's counters (which also identify the entry).
    pub(crate) counters: Arc<ThinCounters>,
}

impl Drop for ThinCountersHold {
    fn drop(&mut self) {
        let mut files = self.pool.thin_files.lock();
        let mine = |e: &ThinCountersEntry| Arc::ptr_eq(&e.counters, &self.counters);
        if let Some(i) = files.iter().position(mine) {
            if let Some(e) = files.get_mut(i) {
                e.users = e.users.saturating_sub(1);
                if e.users == 0 {
                    // Removes the file.
                    let _ = files.remove(i);
                }
            }
        }
    }
}

#[pinned_drop]
impl PinnedDrop for PoolObj {
    fn drop(self: Pin<&mut Self>) {
        // Before the queue and the state go.
        self.waker.stop();
        self.gp_waiter.stop(&self.tracker);
    }
}

impl Tick for PoolObj {
    fn tick(&self) {
        if self.flags.dirty() {
            let mut st = self.lock_settled();
            let _ = st.commit();
        }
        let mut st = self.lock();
        st.check_no_space_deadline();
        // Bios that found no memory for a cell while no provision was in
        // flight to wake them.
        st.requeue_cell_waiters();
    }
}

impl GpDone for PoolObj {
    fn gp_done(&self) {
        let (ready, rearm) = {
            let mut st = self.lock();
            let ready = st.take_passdowns_past_grace_period();
            let reuse = st.wake_reuse_waiters();
            (
                ready,
                !st.awaiting_gp.is_empty() || reuse == Reuse::AfterGracePeriod,
            )
        };
        if rearm {
            self.gp_waiter.arm(&self.tracker);
        }
        for p in ready {
            self.pass_down(p);
        }
    }
}

/// A pool object shared by the pool's tables and its thin targets.
pub(crate) type SharedPool = Arc<PoolObj>;

impl PoolObj {
    /// The counters of the thin device named `name` (its `maj:min`), with
    /// their debugfs file: the ones a live target of the device already
    /// has, else new ones (without a file if debugfs cannot take it: the
    /// counters are informational).
    pub(crate) fn thin_counters(self: &SharedPool, name: &str) -> Result<ThinCountersHold> {
        let name = CString::try_from_fmt(fmt!("{}", name))?;
        let mut files = self.thin_files.lock();
        let hold = |counters: &Arc<ThinCounters>| ThinCountersHold {
            pool: self.clone(),
            counters: counters.clone(),
        };
        if let Some(e) = files
            .iter_mut()
            .find(|e| e.name.to_bytes() == name.to_bytes())
        {
            e.users += 1;
            return Ok(hold(&e.counters));
        }
        let counters = Arc::new(ThinCounters::new()?, GFP_KERNEL)?;
        let show = &|c: &Arc<ThinCounters>, f: &mut fmt::Formatter<'_>| c.write(f);
        let file = KBox::pin_init(
            self.debugfs
                .read_callback_file(&name, counters.clone(), show),
            GFP_KERNEL,
        )
        .ok();
        let held = hold(&counters);
        let entry = ThinCountersEntry {
            name,
            users: 1,
            counters,
            _file: file,
        };
        files.push(entry, GFP_KERNEL)?;
        Ok(held)
    }

    /// Takes the pool lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock()
    }

    /// Takes the pool lock once no committer waits: workers about to start a
    /// provision call this, so a stream of writes cannot starve a commit.
    pub(crate) fn lock_unblocked(&self) -> MutexGuard<'_, PoolState> {
        let mut st = self.state.lock();
        while st.committers > 0 {
            self.settled.wait(&mut st);
        }
        st
    }

    /// Takes the pool lock once no provision is between allocating its block
    /// and mapping it, so that a commit records no allocated-but-unmapped
    /// block (which `thin_check` would call a leak).
    ///
    /// Not while the pool device is suspended: a provision's fill or
    /// overwrite goes through the pool device (as in dm-thin), which holds
    /// it until resume, so waiting would deadlock postsuspend's commit,
    /// preresume and every status or message in between. dm-thin's commits
    /// never wait for prepared mappings; a commit here then records such a
    /// block as allocated but unmapped until the next one, as dm-thin's do.
    pub(crate) fn lock_settled(&self) -> MutexGuard<'_, PoolState> {
        let mut st = self.state.lock();
        st.committers += 1;
        while st.inflight > 0 && !st.suspended {
            self.settled.wait(&mut st);
        }
        st.committers -= 1;
        if st.committers == 0 {
            self.settled.notify_all();
        }
        st
    }

    /// Has [`GpDone::gp_done`] run after a grace period that starts now.
    pub(crate) fn wake_after_grace_period(&self) {
        self.gp_waiter.arm(&self.tracker);
    }

    /// Passes a discard's freed blocks down through the pool device (every
    /// bio that could have used them has completed). As dm-thin, a failed
    /// passdown is ignored: the blocks are unmapped either way. The blocks
    /// may be reused once no passdown older than the commit that freed them
    /// is left ([`PoolState::reuse_state`]).
    fn pass_down(&self, p: Passdown) {
        for (start, count) in p.geometry.sector_runs(&p.blocks) {
            let _ = p.pool_bdev.discard(start, count);
        }
        let mut st = self.lock();
        if let Some(i) = st.passdowns_open.iter().position(|&s| s == p.seq) {
            let _ = st.passdowns_open.remove(i);
        }
        st.wake_reuse_waiters();
    }

    /// A thin target is going: passes down its queued discards now (after a
    /// grace period) and waits for one being passed down, so that none is
    /// issued through its pool device handle after it closed the device.
    pub(crate) fn finish_passdowns(&self, thin: &ThinIo) {
        let mine = self.lock().take_passdowns_of(thin);
        if !mine.is_empty() {
            self.tracker.synchronize();
            for p in mine {
                self.pass_down(p);
            }
        }
        self.gp_waiter.flush();
    }

    /// Ends a provision begun with `PoolState::open_cell` and released with
    /// `PoolState::close_cell`: wakes committers when none is left.
    pub(crate) fn provision_done(&self, st: MutexGuard<'_, PoolState>) {
        let settled = st.inflight == 0;
        drop(st);
        if settled {
            self.settled.notify_all();
        }
    }
}

/// The pool's two space maps.
#[derive(Clone, Copy)]
enum Space {
    Data,
    Metadata,
}

impl Space {
    /// As dm-thin's log lines name the device.
    fn name(self) -> &'static str {
        match self {
            Space::Data => "data",
            Space::Metadata => "metadata",
        }
    }
}

/// Why no data block was allocated.
pub(crate) enum AllocFailure {
    /// Commit, then try again: the space freed in this transaction may do.
    CommitFirst,
    /// The bio's fate: queue (out of data space) or an error.
    Refused(BioAction),
}

/// A discard whose freed blocks wait for the bios that may still use them
/// before they are passed down to the data device.
pub(crate) struct Passdown {
    /// Its place in the order discards started passing down.
    seq: u64,
    /// Every bio that could have used the blocks has completed once this
    /// grace period has ended.
    cookie: GpCookie,
    /// The thin target whose discard freed the blocks (its address: only
    /// compared), which waits for its passdowns before it goes.
    owner: usize,
    /// The freed data blocks.
    blocks: KVec<u64>,
    /// The owner's pool device, open while the owner lives.
    pool_bdev: BdevHandle,
    geometry: BlockGeometry,
}

/// Whether freed data blocks may be handed out again
/// ([`PoolState::reuse_state`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Yes.
    Ready,
    /// Not before a grace period: bios sent to a freed block before it was
    /// freed may still be in flight.
    AfterGracePeriod,
    /// Not before older discards have passed their blocks down.
    AfterPassdowns,
}

/// One registry entry (`dm_thin_pool_table`).
pub(crate) struct PoolEntry {
    /// The pool's mapped device.
    md: MdKey,
    /// The metadata device's `dev_t`.
    metadata_dev: u32,
    /// The data device's `dev_t`.
    data_dev: u32,
    /// Pool targets (tables) using the object; the entry goes at zero.
    tables: usize,
    /// The pool object.
    pool: SharedPool,
}

/// The state of one pool object, behind its mutex.
pub(crate) struct PoolState {
    /// The pool's mapped device, for log prefixes.
    name: TableMd,
    /// The metadata.
    md: KBox<PoolMetadata>,
    /// The mode state machine.
    mode: PoolModeState,
    /// Between presuspend and resume (a new object starts suspended).
    suspended: bool,
    /// Id of the table bound at the last preresume (0: none yet).
    bound_table: u64,
    /// That table, for dm events; `None` once it is gone.
    event_table: Option<TableRef>,
    /// The bound table's data low-water mark, in blocks.
    low_water_blocks: u64,
    /// Data low-water event state.
    data_low_water: DataLowWater,
    /// Metadata low-water event state.
    metadata_low_water: MetadataLowWater,
    /// Last table id handed out.
    last_table_id: u64,
    /// Live (adjusted) features of the bound table.
    features: PoolFeatures,
    /// The I/O state of every constructed thin target.
    thins: KVec<Arc<ThinIo>>,
    /// The mapping cache of all the pool's thin devices (its writers' side).
    cache: PoolCache,
    /// Virtual blocks being provisioned.
    cells: CellTable,
    /// Some thin holds bios that found no memory for a cell.
    waiting_for_cells: bool,
    /// Some thin holds bios that wait until freed blocks may be reused.
    waiting_for_reuse: bool,
    /// The pool's in-flight tracker (shared with [`PoolObj`]).
    tracker: Arc<IoTracker>,
    /// A data block lost its last reference in this transaction.
    freed_since_commit: bool,
    /// Blocks freed before the last commit may be reused once this grace
    /// period ends (`None`: it has).
    reuse_cookie: Option<GpCookie>,
    /// ... and once every passdown up to this one has finished.
    reuse_after_passdown: u64,
    /// The last passdown started.
    passdown_seq: u64,
    /// Passdowns not finished yet, oldest first.
    passdowns_open: KVec<u64>,
    /// Passdowns waiting for their grace period.
    awaiting_gp: KVec<Passdown>,
    /// Thin devices whose last target went with changes no commit covered
    /// yet: (device id, change generation, `u64::MAX` if lost).
    closed_changes: KVec<(u32, u64)>,
    /// A `closed_changes` entry could not be recorded: new targets depend
    /// on every change made so far.
    closed_changes_unknown: bool,
    /// Provisions between allocating their block and mapping it.
    inflight: usize,
    /// Committers waiting for `inflight` to reach zero.
    committers: usize,
    /// Bumped when the metadata rolls back to the last commit: a provision
    /// that started before may not insert its (now free) block.
    epoch: u64,
    /// Shared with the map path.
    flags: Arc<PoolFlags>,
    /// Out of data space and queueing: since when, and for how long.
    no_space_deadline: Option<(Instant<Monotonic>, u32)>,
    /// A metadata failure in this activation set needs_check (written again
    /// at close, see `Drop`).
    needs_check_set: bool,
    /// The data device, flushed before every commit. Every table of the pool
    /// opens the same device (`find_or_create` checks it) and sets this; the
    /// last table to go clears it, after a last commit.
    data_bdev: Option<BdevHandle>,
}

impl PoolState {
    /// The pool's name, for log lines.
    fn name(&self) -> &str {
        self.name.name()
    }

    /// Free metadata blocks as dm-thin reports them (reserve subtracted).
    fn metadata_free_after_reserve(&self) -> u64 {
        let usage = self.md.metadata_usage();
        free_after_reserve(usage.total, usage.free)
    }

    /// Logs a mode change as dm-thin's `notify_of_pool_mode_change` does.
    fn report(&mut self, change: &ModeChange) {
        if change.write_refused_needs_check {
            pr_err!(
                "{}: unable to switch pool to write mode until repaired.\n",
                self.name()
            );
        }
        if change.notify {
            self.raise_event();
            pr_info!("{}: {}\n", self.name(), Show(|f| change.write_log(f)));
        }
        self.flags
            .fails_io
            .store(self.mode.mode().fails_all_io(), Ordering::Release);
        if let Some(e) = change.error_retry_lists {
            for t in self.thins.iter() {
                t.error_held(e);
            }
        }
        if change.requeue_retry_lists {
            for t in self.thins.iter() {
                t.requeue_held();
            }
        }
        if change.cancel_no_space_timer {
            self.no_space_deadline = None;
        }
        if let Some(secs) = change.arm_no_space_timer {
            if self.no_space_deadline.is_none() && secs > 0 {
                self.no_space_deadline = Some((Instant::now(), secs));
            }
        }
    }

    /// Raises a dm event on the bound table.
    fn raise_event(&self) {
        if let Some(t) = self.event_table {
            t.event();
        }
    }

    /// The metadata low-water threshold, checked after metadata changes.
    fn check_metadata_low_water(&mut self) {
        let free = self.md.metadata_usage().free;
        let dev_blocks = usable_metadata_blocks(self.md.store().nr_blocks());
        if self
            .metadata_low_water
            .check(free, metadata_low_water_threshold(dev_blocks))
        {
            pr_warn!(
                "{}: reached low water mark for metadata device: sending event.\n",
                self.name()
            );
            self.raise_event();
        }
    }

    /// dm-thin's `maybe_resize_data_dev` and `maybe_resize_metadata_dev`:
    /// grows a space map to `wanted` blocks (the pool target's size, or the
    /// metadata device's); refuses to shrink; true if a commit is due.
    fn maybe_grow(&mut self, space: Space, wanted: u64) -> Result<bool> {
        let current = match space {
            Space::Data => self.md.data_usage().total,
            Space::Metadata => self.md.metadata_usage().total,
        };
        if wanted < current {
            match space {
                Space::Data => pr_err!(
                    "{}: pool target ({} blocks) too small: expected {}\n",
                    self.name(),
                    wanted,
                    current
                ),
                Space::Metadata => pr_err!(
                    "{}: metadata device ({} blocks) too small: expected {}\n",
                    self.name(),
                    wanted,
                    current
                ),
            }
            return Err(Error::from_errno(-EINVAL));
        }
        if wanted == current {
            return Ok(false);
        }
        if self.md.needs_check() {
            pr_err!(
                "{}: unable to grow the {} device until repaired.\n",
                self.name(),
                space.name()
            );
            return Ok(false);
        }
        pr_info!(
            "{}: growing the {} device from {} to {} blocks\n",
            self.name(),
            space.name(),
            current,
            wanted
        );
        let resized = match space {
            Space::Data => self.md.resize_data(wanted),
            Space::Metadata => {
                // Out of metadata space asks for write mode first.
                let change = self.mode.metadata_grew(false, no_space_timeout_secs());
                self.report(&change);
                self.md.resize_metadata(wanted)
            }
        };
        if let Err(e) = resized {
            let op = match space {
                Space::Data => {
                    pr_err!("{}: failed to resize data device\n", self.name());
                    "dm_pool_resize_data_dev"
                }
                Space::Metadata => "dm_pool_resize_metadata_dev",
            };
            self.metadata_operation_failed(op, e);
            return Err(Error::from_errno(-e.errno()));
        }
        Ok(true)
    }

    /// dm-thin's no-space timer, checked by the waker: once the pool has
    /// queued for `no_space_timeout` seconds, queued and new bios error.
    fn check_no_space_deadline(&mut self) {
        let Some((since, secs)) = self.no_space_deadline else {
            return;
        };
        if since.elapsed().as_millis() < i64::from(secs) * 1000 {
            return;
        }
        self.no_space_deadline = None;
        let change = self.mode.no_space_timeout();
        self.report(&change);
    }

    /// Forgets every cached mapping (the metadata rolled back) and waits
    /// until no map call can still use one.
    fn forget_mappings(&self) {
        if let Some(c) = self.cache.get() {
            c.clear();
        }
        rcu::synchronize_rcu();
    }

    /// Marks the cached mappings of thin device `dev` shared (it was
    /// snapshotted) and waits until no map call can still remap a write with
    /// an unshared one; reads keep their fast path.
    fn mark_mappings_shared(&self, dev: u32) {
        if let Some(c) = self.cache.get() {
            c.mark_dev_shared(dev);
        }
        rcu::synchronize_rcu();
    }

    /// Looks up `vblock` of thin device `dev` and caches every mapping of
    /// the B-tree leaf it lives in: one walk serves its neighbours' first
    /// touch too.
    pub(crate) fn lookup_and_cache(
        &self,
        dev: u32,
        vblock: u64,
    ) -> Result<Option<LookupResult>, CoreError> {
        let cache = self.cache.get();
        self.md.lookup_leaf(dev.into(), vblock, |k, r| {
            if let Some(c) = &cache {
                c.publish(
                    dev,
                    k,
                    CachedMapping {
                        data_block: r.mapping.data_block,
                        shared: r.shared,
                    },
                );
            }
        })
    }

    /// Caches a mapping just made: `vblock` of `dev` is `data_block`,
    /// unshared.
    pub(crate) fn cache_new_mapping(&self, dev: u32, vblock: u64, data_block: u64) {
        if let Some(c) = self.cache.get() {
            let shared = false;
            c.publish(dev, vblock, CachedMapping { data_block, shared });
        }
    }

    /// dm-thin's `metadata_operation_failed`: log, roll back to the last
    /// commit, set needs_check, and go read-only (or fail).
    fn metadata_operation_failed(&mut self, op: &str, e: CoreError) {
        pr_err!(
            "{}: metadata operation '{}' failed: error = -{}\n",
            self.name(),
            op,
            e.errno()
        );
        pr_err!("{}: aborting current metadata transaction\n", self.name());
        let abort_ok = self.md.abort().is_ok();
        self.epoch = self.epoch.wrapping_add(1);
        self.forget_mappings();
        // The changes since the last commit are gone: a durable bio of a thin
        // that had some must fail from now on (dm-thin's
        // aborted_with_changes), and the metadata is the committed one again.
        let committed = self.flags.committed();
        for t in self.thins.iter() {
            t.changes_lost_after(committed);
        }
        for c in self.closed_changes.iter_mut().filter(|c| c.1 > committed) {
            c.1 = u64::MAX;
        }
        self.flags
            .committed
            .store(self.flags.changes(), Ordering::Release);
        self.freed_since_commit = false;
        // The unmappings of the discards waiting to pass down are undone:
        // their blocks are mapped again and must not be discarded.
        for p in self.awaiting_gp.iter_mut() {
            p.blocks.clear();
        }
        if !abort_ok {
            pr_err!("{}: failed to abort metadata transaction\n", self.name());
        }
        // dm-thin refuses to touch metadata it could not reopen (fail_io).
        let needs_check_ok = abort_ok && self.md.set_needs_check().is_ok();
        self.needs_check_set |= needs_check_ok;
        if !needs_check_ok {
            pr_err!(
                "{}: failed to set 'needs_check' flag in metadata\n",
                self.name()
            );
        }
        let change =
            self.mode
                .metadata_operation_failed(abort_ok, needs_check_ok, no_space_timeout_secs());
        self.report(&change);
    }

    /// dm-thin's `commit()`: refused (EINVAL) in OOMS/RO/FAIL, a failure
    /// degrades the pool, success re-checks the free space.
    pub(crate) fn commit(&mut self) -> Result<(), i32> {
        if !self.mode.mode().may_commit() {
            return Err(EINVAL);
        }
        // Changes are made under the pool lock, which the commit holds: this
        // is every change the commit writes. It is published only once the
        // superblock is on stable storage.
        let covers = self.flags.changes();
        // dm-thin's metadata_pre_commit_callback: the blocks that new
        // mappings point at (zeroed, copied or written) must be on stable
        // storage before the mappings are, or a power cut right after the
        // commit exposes a block's previous contents through a mapping.
        if let Some(Err(e)) = self.data_bdev.map(BdevHandle::flush) {
            self.metadata_operation_failed("dm_pool_commit_metadata", CoreError::Io(e));
            return Err(CoreError::Io(e).errno());
        }
        if let Err(e) = self.md.commit() {
            self.metadata_operation_failed("dm_pool_commit_metadata", e);
            return Err(e.errno());
        }
        self.flags.committed.store(covers, Ordering::Release);
        self.flags.commits.fetch_add(1, Ordering::Relaxed);
        // Covered now, but for changes lost before.
        self.closed_changes.retain(|c| c.1 == u64::MAX);
        self.closed_changes_unknown = false;
        if self.freed_since_commit {
            // Blocks freed in this transaction are allocatable from now on:
            // not before the bios that may still use them have completed,
            // nor before older discards have passed them down.
            self.freed_since_commit = false;
            self.reuse_cookie = Some(self.tracker.start_poll());
            self.reuse_after_passdown = self.passdown_seq;
        }
        let free_meta = self.metadata_free_after_reserve();
        let free_data = self.md.data_usage().free;
        let needs_check = self.md.needs_check();
        let change = self.mode.after_commit(
            Some(free_meta),
            Some(free_data),
            needs_check,
            no_space_timeout_secs(),
        );
        if PoolModeState::ooms_reason(Some(free_meta)).is_some() && change.changed() {
            pr_warn!("{}: No free metadata blocks\n", self.name());
        }
        self.report(&change);
        Ok(())
    }

    /// Whether blocks freed before the last commit may be handed out yet.
    pub(crate) fn reuse_state(&mut self) -> Reuse {
        if let Some(cookie) = self.reuse_cookie {
            if !self.tracker.poll(cookie) {
                return Reuse::AfterGracePeriod;
            }
            self.reuse_cookie = None;
        }
        match self.passdowns_open.first() {
            Some(&seq) if seq <= self.reuse_after_passdown => Reuse::AfterPassdowns,
            _ => Reuse::Ready,
        }
    }

    /// Notes that a thin holds bios until freed blocks may be reused.
    pub(crate) fn wait_for_reuse(&mut self) {
        self.waiting_for_reuse = true;
    }

    /// Hands the bios waiting to reuse freed blocks back to their workers if
    /// they may now; returns what they still wait for.
    fn wake_reuse_waiters(&mut self) -> Reuse {
        let state = self.reuse_state();
        if self.waiting_for_reuse && state == Reuse::Ready {
            self.waiting_for_reuse = false;
            for t in self.thins.iter() {
                t.requeue_waiters();
            }
        }
        if self.waiting_for_reuse {
            state
        } else {
            Reuse::Ready
        }
    }

    /// Queues the data blocks a discard of `thin` freed, to pass them down
    /// once every bio that may still use them has completed (the caller then
    /// arms the pool's grace-period waiter). False if there is no memory to
    /// queue them: they are not passed down, which only costs the data
    /// device a hint.
    pub(crate) fn queue_passdown(
        &mut self,
        thin: &ThinIo,
        blocks: KVec<u64>,
        pool_bdev: BdevHandle,
        geometry: BlockGeometry,
    ) -> bool {
        if self.awaiting_gp.reserve(1, GFP_KERNEL).is_err()
            || self.passdowns_open.reserve(1, GFP_KERNEL).is_err()
        {
            return false;
        }
        self.passdown_seq += 1;
        let seq = self.passdown_seq;
        let p = Passdown {
            seq,
            cookie: self.tracker.start_poll(),
            owner: core::ptr::from_ref(thin).addr(),
            blocks,
            pool_bdev,
            geometry,
        };
        // Cannot fail: reserved above.
        let _ = self.passdowns_open.push_within_capacity(seq);
        let _ = self.awaiting_gp.push_within_capacity(p);
        true
    }

    /// Takes `thin`'s queued passdowns out of the queue (their sequence
    /// numbers stay open until they are passed down).
    fn take_passdowns_of(&mut self, thin: &ThinIo) -> KVec<Passdown> {
        let owner = core::ptr::from_ref(thin).addr();
        self.take_passdowns(|_, p| p.owner == owner)
    }

    /// The queued passdowns whose grace period has ended, oldest first.
    fn take_passdowns_past_grace_period(&mut self) -> KVec<Passdown> {
        self.take_passdowns(|tracker, p| tracker.poll(p.cookie))
    }

    /// Takes the queued passdowns that `take` picks out of the queue, in
    /// order; one that finds no memory to move to stays queued.
    fn take_passdowns(&mut self, take: impl Fn(&IoTracker, &Passdown) -> bool) -> KVec<Passdown> {
        let mut taken = KVec::new();
        let mut i = 0;
        while let Some(p) = self.awaiting_gp.get(i) {
            if !take(&self.tracker, p) || taken.reserve(1, GFP_KERNEL).is_err() {
                i += 1;
                continue;
            }
            if let Ok(p) = self.awaiting_gp.remove(i) {
                let _ = taken.push_within_capacity(p);
            }
        }
        taken
    }

    /// Registers a constructed thin target's I/O state.
    pub(crate) fn open_thin(&mut self, io: Arc<ThinIo>) -> Result<(), Error> {
        self.thins.push(io, GFP_KERNEL)?;
        Ok(())
    }

    /// The change generation a new target of thin device `dev_id` starts
    /// with: its device may have changes from a target it replaces (a
    /// reload) or from one already gone that no commit covers yet, or
    /// changes lost to an aborted transaction (`u64::MAX`).
    pub(crate) fn thin_changed_floor(&self, dev_id: u32) -> u64 {
        let base = if self.closed_changes_unknown {
            self.flags.changes()
        } else {
            self.flags.committed()
        };
        let live = self
            .thins
            .iter()
            .filter(|t| t.dev_id == dev_id)
            .map(|t| t.changed_gen());
        let closed = self
            .closed_changes
            .iter()
            .filter(|c| c.0 == dev_id)
            .map(|c| c.1);
        Iterator::chain(live, closed).fold(base, u64::max)
    }

    /// Forgets a thin target's I/O state.
    pub(crate) fn close_thin(&mut self, io: &ThinIo) {
        if let Some(i) = self
            .thins
            .iter()
            .position(|t| core::ptr::eq::<ThinIo>(&**t, io))
        {
            let _ = self.thins.remove(i);
        }
        // A later target of the device depends on its uncommitted changes.
        let gen = io.changed_gen();
        if gen > self.flags.committed() {
            match self.closed_changes.iter_mut().find(|c| c.0 == io.dev_id) {
                Some(c) => c.1 = c.1.max(gen),
                None => {
                    if self
                        .closed_changes
                        .push((io.dev_id, gen), GFP_KERNEL)
                        .is_err()
                    {
                        self.closed_changes_unknown = true;
                    }
                }
            }
        }
    }

    /// Live features of the bound table.
    pub(crate) fn features(&self) -> PoolFeatures {
        self.features
    }

    /// The mode state machine.
    pub(crate) fn mode_state(&self) -> &PoolModeState {
        &self.mode
    }

    /// Parks `bio` on the cell of `(dev, vblock)` if a provision holds it;
    /// otherwise hands the bio back.
    pub(crate) fn try_park(
        &mut self,
        dev: u32,
        vblock: u64,
        bio: OwnedBio,
    ) -> Result<(), OwnedBio> {
        self.cells.park(dev, vblock, bio)
    }

    /// True if a provision of `(dev, vblock)` can open its cell; otherwise
    /// (no memory for it) the caller holds its bio on its thin's waiters
    /// until a cell closes or the next tick ([`Self::requeue_cell_waiters`]).
    pub(crate) fn cell_available(&mut self, dev: u32, vblock: u64) -> bool {
        let available = self.cells.reserve(dev, vblock);
        if !available {
            self.waiting_for_cells = true;
        }
        available
    }

    /// Starts a provision of `(dev, vblock)`: later bios to it park until
    /// [`Self::close_cell`]. Returns the metadata epoch to check at the end.
    /// Never allocates: the caller checked [`Self::cell_available`].
    pub(crate) fn open_cell(&mut self, dev: u32, vblock: u64) -> Option<u64> {
        if !self.cells.open(dev, vblock) {
            return None;
        }
        self.inflight += 1;
        Some(self.epoch)
    }

    /// Ends a provision; returns the bios that parked on it (and only
    /// those: no other provision waits for this one).
    pub(crate) fn close_cell(&mut self, dev: u32, vblock: u64) -> BioList {
        self.inflight = self.inflight.saturating_sub(1);
        self.requeue_cell_waiters();
        self.cells.close(dev, vblock)
    }

    /// Hands bios that found no memory for a cell back to their workers.
    fn requeue_cell_waiters(&mut self) {
        if self.waiting_for_cells {
            self.waiting_for_cells = false;
            for t in self.thins.iter() {
                t.requeue_waiters();
            }
        }
    }

    /// The metadata epoch (see [`Self::open_cell`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// dm-thin's `alloc_data_block`: a free data block, or the fate of the
    /// bio that needed one (queue or error when out of data space). Blocks
    /// freed in this transaction become allocatable only after a commit, so
    /// with dirty metadata and no commit yet (`after_commit` false) the
    /// answer to "no space" is [`AllocFailure::CommitFirst`].
    pub(crate) fn alloc_data_block(&mut self, after_commit: bool) -> Result<u64, AllocFailure> {
        if !self.mode.mode().may_provision() {
            return Err(AllocFailure::Refused(self.mode.unserviceable()));
        }
        let free = self.md.data_usage().free;
        if self.data_low_water.check(free, self.low_water_blocks) {
            pr_warn!(
                "{}: reached low water mark for data device: sending event.\n",
                self.name()
            );
            self.raise_event();
        }
        match self.md.alloc_data_block() {
            Ok(b) => {
                self.flags.change();
                // As dm-thin: commit before the metadata reserve is used
                // up. The reserve is what the mapping insert and the commit
                // itself need; without this, provisions between two
                // periodic commits run the metadata dry mid-insert (ENOSPC:
                // read-only with needs_check) instead of ending in
                // out-of-metadata-space mode at this commit. The block
                // stays ours; if the commit switched the pool to that mode,
                // the provision fails at `end_provision`, which frees it.
                if self.metadata_free_after_reserve() == 0 && self.commit().is_err() {
                    return Err(AllocFailure::Refused(BioAction::Error(IoError::Io)));
                }
                Ok(b)
            }
            Err(CoreError::NoSpace) if !after_commit && self.md.is_dirty() => {
                Err(AllocFailure::CommitFirst)
            }
            Err(CoreError::NoSpace) => {
                pr_warn!("{}: no free data space available.\n", self.name());
                let needs_check = self.md.needs_check();
                let change = self
                    .mode
                    .data_space_exhausted(needs_check, no_space_timeout_secs());
                self.report(&change);
                Err(AllocFailure::Refused(self.mode.unserviceable()))
            }
            Err(e) => {
                self.metadata_operation_failed("dm_pool_alloc_data_block", e);
                Err(AllocFailure::Refused(BioAction::Error(IoError::Io)))
            }
        }
    }

    /// Gives back a block allocated for a provision that failed.
    pub(crate) fn release_data_block(&mut self, b: u64) {
        if let Err(e) = self.md.data_block_dec(b) {
            self.metadata_operation_failed("dm_pool_dec_data_range", e);
        }
    }

    /// Maps `vblock` of `thin` to a block filled by a provision; `replaces`
    /// if the mapping replaces a shared block (which may lose its last
    /// reference meanwhile, if the other sharers went).
    pub(crate) fn insert_mapping(
        &mut self,
        thin: &ThinIo,
        vblock: u64,
        b: u64,
        replaces: bool,
    ) -> Result<(), IoError> {
        match self.md.insert_mapping(thin.dev_id.into(), vblock, b) {
            Ok(()) => {
                thin.note_change(self.flags.change());
                self.freed_since_commit |= replaces;
                self.check_metadata_low_water();
                Ok(())
            }
            Err(e) => {
                self.metadata_operation_failed("dm_thin_insert_block", e);
                Err(IoError::Io)
            }
        }
    }

    /// Unmaps the blocks of `thin` in `[first, end)` that no provision holds,
    /// calling `freed` with each data block whose last reference went.
    pub(crate) fn unmap_range(
        &mut self,
        thin: &ThinIo,
        first: u64,
        end: u64,
        mut freed: impl FnMut(u64),
    ) -> Result<u64, CoreError> {
        let dev = u64::from(thin.dev_id);
        if let Some(c) = self.cache.get() {
            c.invalidate_range(thin.dev_id, first, end);
        }
        let mut n = 0;
        let mut any_freed = false;
        let mut from = first;
        while from < end {
            // The runs between the virtual blocks a provision holds, each
            // removed in one pass (dm-thin skips contended blocks too).
            let held = self.cells.first_held(thin.dev_id, from, end);
            let run_end = held.unwrap_or(end);
            if from < run_end {
                let removed = self.md.remove_range_freeing(dev, from, run_end, |b| {
                    any_freed = true;
                    freed(b);
                });
                match removed {
                    Ok(k) => n += k,
                    Err(e) => {
                        self.metadata_operation_failed("dm_thin_remove_range", e);
                        return Err(e);
                    }
                }
            }
            match held {
                Some(h) => from = h.saturating_add(1),
                None => break,
            }
        }
        if n > 0 {
            thin.note_change(self.flags.change());
        }
        self.freed_since_commit |= any_freed;
        Ok(n)
    }

    /// Sizes the mapping cache for the pool's data blocks (they grew).
    fn grow_cache(&mut self) {
        self.cache.grow_for(self.md.data_usage().total);
        let slots = self.cache.slots();
        self.flags
            .mapping_cache_slots
            .store(slots, Ordering::Relaxed);
    }

    /// The metadata.
    pub(crate) fn metadata(&self) -> &PoolMetadata {
        &self.md
    }

    /// The current mode.
    pub(crate) fn mode(&self) -> PoolMode {
        self.mode.mode()
    }

    /// True between presuspend and resume (and before the first resume).
    pub(crate) fn suspended(&self) -> bool {
        self.suspended
    }

    /// Runs one parsed message (steps 2-4 of `dm_message`'s glue flow).
    fn run_message(&mut self, msg: &PoolMessage<'_>) -> Result<(), i32> {
        if msg.commits_first() {
            let _ = self.commit();
        }
        let result = match *msg {
            PoolMessage::CreateThin { dev_id, .. } => self.md.create_thin(dev_id.into()),
            PoolMessage::CreateSnap {
                dev_id, origin_id, ..
            } => {
                let r = self.md.create_snap(dev_id.into(), origin_id.into());
                if r.is_ok() {
                    // The origin's blocks are shared now: its writes must
                    // stop taking the fast path, its reads need not.
                    self.mark_mappings_shared(origin_id);
                }
                r
            }
            PoolMessage::Delete { dev_id, .. } => {
                if self.thins.iter().any(|t| t.dev_id == dev_id) {
                    Err(CoreError::Busy)
                } else {
                    let r = self.md.delete(dev_id.into());
                    // No target of the device is left to read the cache,
                    // and a later one starts after this.
                    if let (Ok(()), Some(c)) = (r, self.cache.get()) {
                        c.invalidate_dev(dev_id);
                    }
                    r
                }
            }
            PoolMessage::SetTransactionId { current, new, .. } => {
                let r = self.md.set_transaction_id(current, new);
                if r == Err(CoreError::Invalid) {
                    pr_err!("mismatched transaction id\n");
                }
                r
            }
            PoolMessage::ReserveMetadataSnap => {
                let r = self.md.reserve_metadata_snap().map(|_| ());
                if r == Err(CoreError::Busy) {
                    pr_warn!(
                        "Pool metadata snapshot already exists: release this before taking another.\n"
                    );
                }
                r
            }
            PoolMessage::ReleaseMetadataSnap => {
                let r = self.md.release_metadata_snap();
                if r == Err(CoreError::Invalid) {
                    pr_warn!("No pool metadata snapshot found: nothing to release.\n");
                }
                r
            }
        };
        match result {
            Ok(()) => {
                self.flags.change();
                match *msg {
                    // Its blocks lose a reference; some may be free now.
                    PoolMessage::Delete { .. } => self.freed_since_commit = true,
                    // The origin's details changed: its next flush commits.
                    PoolMessage::CreateSnap { origin_id, .. } => {
                        let gen = self.flags.changes();
                        for t in self.thins.iter().filter(|t| t.dev_id == origin_id) {
                            t.note_change(gen);
                        }
                    }
                    _ => {}
                }
                self.check_metadata_low_water();
                // dm-thin ignores the commit's result here.
                let _ = self.commit();
                Ok(())
            }
            Err(e) => {
                pr_warn!("{}\n", Show(|f| msg.write_failure_log(f)));
                // Refusals leave the metadata untouched; anything else may
                // have half-applied the transaction.
                if !matches!(
                    e,
                    CoreError::Exists | CoreError::NotFound | CoreError::Busy | CoreError::Invalid
                ) {
                    self.metadata_operation_failed(msg.name(), e);
                }
                Err(e.errno())
            }
        }
    }
}

impl Drop for PoolState {
    fn drop(&mut self) {
        // dm_pool_metadata_close: a last commit unless read-only or failed.
        if self.mode.mode().may_commit() {
            let _ = self.md.commit();
        } else if self.mode.mode() != PoolMode::Fail && self.needs_check_set {
            // The flag was written to the cache when a failure made the pool
            // read-only; if that write-back failed, this one may not.
            let _ = self.md.persist_needs_check();
        }
    }
}

/// One pool table.
pub(crate) struct Pool {
    pool: SharedPool,
    md: MdKey,
    /// Held open for the table's lifetime (the bufio store reads through it).
    metadata: DmDev,
    data: DmDev,
    table: PoolTableLine,
    /// This table's requested features.
    features: PoolFeatures,
    /// Set by `io_hints` when the data device cannot take the passdown of a
    /// whole block: this table's live features then have passdown off.
    passdown_unsupported: AtomicBool,
    table_id: u64,
    nr_data_blocks: u64,
    /// This table, for dm events while it is the bound one.
    event_table: Option<TableRef>,
}

/// A pool's metadata: over dm-bufio, with the transaction manager's caches
/// (a few KiB) on the heap, off the table load's stack.
pub(crate) type PoolMetadata = ThinMetadata<BufioStore, KBox<TmCaches>>;

/// Opens (or formats) the metadata of a new pool object.
fn open_metadata(
    metadata: &DmDev,
    block_size: u32,
    read_only: bool,
) -> Result<KBox<PoolMetadata>, CtrError> {
    let fail = |errno: i32| CtrError::new(errno, glue_errors::CREATE_METADATA);
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    let store = BufioStore::new(metadata.bdev()).map_err(|e| fail(-e.to_errno()))?;
    let unformatted = {
        let block = store.read(0, BlockKind::Raw).map_err(|e| fail(e.errno()))?;
        block.iter().all(|&b| b == 0)
    };
    let caches = KBox::new(TmCaches::new(), GFP_KERNEL).map_err(|_| alloc)?;
    let md = if unformatted {
        if read_only {
            // __open_or_format_metadata refuses to format a read-only pool.
            return Err(fail(EPERM));
        }
        // Like dm-thin, the data space map starts empty; the first preresume
        // grows it to the pool's size and commits.
        ThinMetadata::format_with(store, caches, block_size, 0).map_err(|e| {
            pr_err!("could not format metadata: error -{}\n", e.errno());
            fail(e.errno())
        })?
    } else {
        ThinMetadata::open_with(store, caches, None, false).map_err(|e| {
            pr_err!("could not open metadata: error -{}\n", e.errno());
            fail(e.errno())
        })?
    };
    if md.data_block_size() != block_size {
        pr_err!(
            "changing the data block size (from {} to {}) is not supported\n",
            md.data_block_size(),
            block_size
        );
        return Err(fail(EINVAL));
    }
    KBox::new(md, GFP_KERNEL).map_err(|_| alloc)
}

/// Finds or creates the pool object for a pool table (`__pool_find`), under
/// the registry lock, and counts the table.
fn find_or_create(
    md: TableMd,
    metadata: &DmDev,
    data: &DmDev,
    block_size: u32,
    features: PoolFeatures,
) -> Result<(SharedPool, u64), CtrError> {
    let key = md.key();
    let mut pools = registry::lock().map_err(|_| CtrError::new(ENOMEM, glue_errors::ALLOC_POOL))?;
    let (meta_dev, data_dev) = (metadata.dev_t(), data.dev_t());
    let found = if let Some(e) = pools.iter_mut().find(|e| e.metadata_dev == meta_dev) {
        if e.md != key {
            return Err(CtrError::new(EBUSY, glue_errors::METADATA_IN_USE));
        }
        if e.data_dev != data_dev {
            return Err(CtrError::new(EBUSY, glue_errors::DATA_IN_USE));
        }
        Some(e)
    } else if let Some(e) = pools.iter_mut().find(|e| e.md == key) {
        if e.metadata_dev != meta_dev || e.data_dev != data_dev {
            return Err(CtrError::new(EINVAL, glue_errors::DIFFERENT_POOL));
        }
        Some(e)
    } else {
        None
    };
    if let Some(e) = found {
        let mut st = e.pool.lock();
        if st.features.discard_enabled != features.discard_enabled {
            return Err(CtrError::new(EINVAL, glue_errors::DISCARD_CHANGED));
        }
        st.last_table_id += 1;
        let id = st.last_table_id;
        drop(st);
        e.tables += 1;
        return Ok((e.pool.clone(), id));
    }
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    pools.reserve(1, GFP_KERNEL).map_err(|_| alloc)?;
    let metadata_md = open_metadata(metadata, block_size, features.read_only)?;
    let flags = Arc::new(PoolFlags::default(), GFP_KERNEL).map_err(|_| alloc)?;
    let tracker = Arc::pin_init(IoTracker::new(), GFP_KERNEL).map_err(|_| alloc)?;
    let (cache, mappings) = PoolCache::new(metadata_md.data_usage().total).map_err(|_| alloc)?;
    flags
        .mapping_cache_slots
        .store(cache.slots(), Ordering::Relaxed);
    let debugfs = match CString::try_from_fmt(fmt!("rthin-{}", md.name())) {
        Ok(name) => Dir::new(&name),
        Err(_) => Dir::new(c"rthin"),
    };
    let state = PoolState {
        name: md,
        md: metadata_md,
        mode: PoolModeState::new(),
        suspended: true,
        bound_table: 0,
        event_table: None,
        low_water_blocks: 0,
        data_low_water: DataLowWater::default(),
        metadata_low_water: MetadataLowWater::default(),
        last_table_id: 1,
        features,
        thins: KVec::new(),
        cache,
        cells: CellTable::new().map_err(|_| alloc)?,
        waiting_for_cells: false,
        waiting_for_reuse: false,
        tracker: tracker.clone(),
        freed_since_commit: false,
        reuse_cookie: None,
        reuse_after_passdown: 0,
        passdown_seq: 0,
        passdowns_open: KVec::new(),
        awaiting_gp: KVec::new(),
        closed_changes: KVec::new(),
        closed_changes_unknown: false,
        inflight: 0,
        committers: 0,
        epoch: 0,
        flags: flags.clone(),
        no_space_deadline: None,
        needs_check_set: false,
        data_bdev: None,
    };
    let wq = IoQueue::new(c"rthin").map_err(|_| alloc)?;
    let show = &|p: &Arc<PoolFlags>, f: &mut fmt::Formatter<'_>| p.write(f);
    let pool_file = KBox::pin_init(
        debugfs.read_callback_file(c"pool", flags.clone(), show),
        GFP_KERNEL,
    )
    .ok();
    let kcopyd = Kcopyd::new().map_err(|_| alloc)?;
    let pool: SharedPool = Arc::pin_init(
        pin_init!(PoolObj {
            state <- new_mutex!(state),
            settled <- new_condvar!(),
            wq,
            kcopyd,
            flags,
            mappings,
            waker <- Ticker::new(WAKER_PERIOD_MS),
            tracker,
            gp_waiter <- GpWaiter::new(),
            debugfs,
            _pool_file: pool_file,
            thin_files <- new_mutex!(KVec::new()),
        }),
        GFP_KERNEL,
    )
    .map_err(|_| alloc)?;
    pool.waker.start(&pool, &pool.wq);
    pool.gp_waiter.start(&pool, &pool.wq);
    let entry = PoolEntry {
        md: key,
        metadata_dev: meta_dev,
        data_dev,
        tables: 1,
        pool: pool.clone(),
    };
    pools.push_within_capacity(entry).map_err(|_| alloc)?;
    Ok((pool, 1))
}

/// Finds the pool object of the pool whose mapped device is `md`, for a thin
/// target (`__pool_table_lookup`).
pub(crate) fn lookup(md: MdKey) -> Option<SharedPool> {
    let pools = registry::lock().ok()?;
    pools.iter().find(|e| e.md == md).map(|e| e.pool.clone())
}

impl Drop for Pool {
    fn drop(&mut self) {
        // __pool_dec: the entry goes with the last table; the object itself
        // with the last reference (a thin may still hold one).
        {
            let mut st = self.pool.lock();
            if st.bound_table == self.table_id {
                st.event_table = None;
            }
        }
        let Ok(mut pools) = registry::lock() else {
            return;
        };
        let mut last = false;
        if let Some(i) = pools.iter().position(|e| e.md == self.md) {
            last = match pools.get_mut(i) {
                Some(e) => {
                    e.tables = e.tables.saturating_sub(1);
                    e.tables == 0
                }
                None => false,
            };
            if last {
                let _ = pools.remove(i);
            }
        }
        drop(pools);
        if last {
            // The data device closes with this table: the last commit that
            // can flush it is this one (a thin may keep the object alive).
            let mut st = self.pool.lock_settled();
            let _ = st.commit();
            st.data_bdev = None;
        }
    }
}

impl TargetOps for Pool {
    const NAME: &'static CStr = c"rthin-pool";
    const COMPAT_NAME: &'static CStr = c"thin-pool";
    const VERSION: [u32; 3] = [1, 24, 0];
    const FEATURES: u64 = features::SINGLETON
        | features::ALWAYS_WRITEABLE
        | features::IMMUTABLE
        | features::PASSES_CRYPTO;
    const HAS_MESSAGE: bool = true;

    fn ctr(ti: &mut TargetCtx<'_>, args: &Args<'_>) -> Result<Self, CtrError> {
        let words = args.words();
        let bytes: KVec<&[u8]> = to_bytes(words)?;
        let parsed = PoolTable::parse(&bytes);
        // dm-thin checks the block size and low water mark only after opening
        // both devices, so a bad device wins over a bad number: do the same.
        if let Err(e) = parsed {
            if !e.after_device_open() {
                return Err(CtrError::new(e.errno(), e.message()));
            }
        }
        let (Some(metadata_word), Some(data_word)) = (words.first(), words.get(1)) else {
            // Unreachable: parse() rejects fewer than four words before this.
            return Err(CtrError::new(EINVAL, c"Invalid argument count"));
        };
        let metadata = ti.get_device(metadata_word, glue_errors::OPEN_METADATA)?;
        if let Some(dev) = metadata.handle() {
            warn_if_metadata_device_too_big(dev);
        }
        let data = ti.get_device(data_word, glue_errors::OPEN_DATA)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        // Passdown is checked against the data device in io_hints, as dm-thin does.
        let features = parsed.features;
        let md = ti
            .table_md()
            .ok_or(CtrError::new(EINVAL, glue_errors::ALLOC_POOL))?;
        let key = md.key();
        let (pool, table_id) = find_or_create(md, &metadata, &data, parsed.block_size, features)?;
        pool.lock().data_bdev = data.handle();
        // QUIRK 1: a reload with another block size is accepted and ignored;
        // the live pool's size is what the table shows and what sizes it.
        let block_size = pool.lock().metadata().data_block_size();
        ti.set_num_flush_bios(1);
        // Discards sent to the pool device (the thins' passdown) go to the
        // data device; the thins unmap, so only passdown needs them here.
        if features.discard_enabled && features.discard_passdown {
            ti.enable_discards();
        }
        let table = PoolTableLine {
            metadata_dev: metadata.devnum(),
            data_dev: data.devnum(),
            block_size,
            low_water_blocks: parsed.low_water_blocks,
            requested: parsed.features,
        };
        Ok(Self {
            pool,
            md: key,
            metadata,
            data,
            table,
            features,
            passdown_unsupported: AtomicBool::new(false),
            table_id,
            nr_data_blocks: nr_data_blocks(ti.len(), block_size),
            event_table: ti.table(),
        })
    }

    fn map(&self, mut bio: Bio<'_>) -> MapResult {
        bio.set_dev(&self.data);
        MapResult::Remapped
    }

    fn status(&self, kind: StatusKind, noflush: bool, out: &mut StatusBuf<'_>) -> fmt::Result {
        match kind {
            StatusKind::Info => {
                let mut st = self.pool.lock_settled();
                if st.mode() == PoolMode::Fail {
                    return out.write_bytes(FAIL.as_bytes());
                }
                if !noflush && !st.suspended {
                    let _ = st.commit();
                }
                let meta = st.md.metadata_usage();
                let data = st.md.data_usage();
                let dev_blocks = usable_metadata_blocks(st.md.store().nr_blocks());
                let info = PoolInfo {
                    transaction_id: st.md.transaction_id(),
                    metadata_total: meta.total,
                    metadata_free: st.metadata_free_after_reserve(),
                    data_total: data.total,
                    data_free: data.free,
                    held_root: st.md.held_root(),
                    mode: st.mode(),
                    discard: DiscardStatus::from_flags(
                        st.features.discard_enabled,
                        st.features.discard_passdown,
                    ),
                    error_if_no_space: st.mode.error_if_no_space(),
                    needs_check: st.md.needs_check(),
                    metadata_low_water: metadata_low_water_threshold(dev_blocks),
                };
                write_pool_info(out, &info)
            }
            StatusKind::Table => write_pool_table(out, &self.table),
        }
    }

    fn message(&self, words: &[&CStr]) -> Result {
        let bytes = to_bytes(words).map_err(|e| e.error)?;
        let mut st = self.pool.lock_settled();
        let msg = match PoolMessage::parse_in_mode(st.mode(), &bytes) {
            Ok(msg) => msg,
            Err(e) => {
                let log = Show(|f| e.write_log(f));
                match (e.log_is_error(), e.log_has_pool_prefix()) {
                    (true, true) => pr_err!("{}: {}\n", st.name(), log),
                    (true, false) => pr_err!("{}\n", log),
                    (false, _) => pr_warn!("{}\n", log),
                }
                return Err(Error::from_errno(-e.errno()));
            }
        };
        st.run_message(&msg)
            .map_err(|errno| Error::from_errno(-errno))
    }

    fn preresume(&self) -> Result {
        let mut st = self.pool.lock_settled();
        // bind_control_target.
        let request = if st.bound_table == self.table_id {
            BindRequest::SameTable
        } else {
            BindRequest::NewTable {
                read_only: self.features.read_only,
            }
        };
        st.bound_table = self.table_id;
        st.event_table = self.event_table;
        st.low_water_blocks = self.table.low_water_blocks;
        st.features = self.live_features();
        let needs_check = st.md.needs_check();
        let change = st.mode.bind(
            request,
            self.features.error_if_no_space,
            needs_check,
            no_space_timeout_secs(),
        );
        st.report(&change);
        let grew_data = st.maybe_grow(Space::Data, self.nr_data_blocks)?;
        if grew_data {
            st.grow_cache();
        }
        let metadata_blocks = usable_metadata_blocks(st.md.store_mut().refresh_size());
        let grew_metadata = st.maybe_grow(Space::Metadata, metadata_blocks)?;
        if let (true, Some(dev)) = (grew_metadata, self.metadata.handle()) {
            warn_if_metadata_device_too_big(dev);
        }
        if grew_data || grew_metadata {
            let _ = st.commit();
        }
        Ok(())
    }

    fn resume(&self) {
        let mut st = self.pool.lock();
        st.suspended = false;
        st.data_low_water.rearm();
        // dm-thin's requeue_bios: bios held for data space try again (the
        // pool may have grown); those that still find none are held again.
        for t in st.thins.iter() {
            t.requeue_held();
        }
    }

    fn presuspend(&self, _noflush: bool) {
        self.pool.lock().suspended = true;
        // Committers waiting for provisions stop waiting (see lock_settled).
        self.pool.settled.notify_all();
    }

    fn presuspend_undo(&self) {
        self.pool.lock().suspended = false;
    }

    fn postsuspend(&self) {
        let _ = self.pool.lock_settled().commit();
    }

    fn device(&self) -> &DmDev {
        &self.data
    }

    /// As dm-thin's `pool_io_hints`: `max_sectors`, `io_min` and `io_opt`
    /// fitted to the block size (see [`pool_io_limits`]); for discards the
    /// data device's limits with passdown, none without it or with discards
    /// off. Passdown goes off here, with dm-thin's log line, if the data
    /// device cannot discard a whole block; the table's live features take
    /// that at preresume (dm calls this first, at the load of a new device's
    /// first table and at each resume with a new table).
    fn io_hints(&self, limits: &mut QueueLimits<'_>) {
        let block_sectors = self.table.block_size;
        let fitted = pool_io_limits(block_sectors, limits.max_sectors(), limits.io_opt());
        limits.set_max_sectors(fitted.max_sectors);
        if let Some((io_min, io_opt)) = fitted.io_min_opt {
            limits.set_io_min_opt(io_min, io_opt);
        }
        if !self.features.discard_enabled {
            limits.set_discard_granularity(0);
            return;
        }
        if self.features.discard_passdown && !self.passdown_unsupported.load(Ordering::Relaxed) {
            if let Some(why) = passdown_off(self.data.max_discard_sectors(), block_sectors) {
                if let Some(dev) = self.data.handle() {
                    pr_warn!(
                        "Data device ({}) {}: Disabling discard passdown.\n",
                        dev.name(),
                        why.reason()
                    );
                }
                self.passdown_unsupported.store(true, Ordering::Relaxed);
            }
        }
        if !self.live_features().discard_passdown {
            limits.set_max_hw_discard_sectors(0);
        }
    }
}

impl Pool {
    /// This table's features as they go live: the requested ones, with
    /// passdown off if the data device cannot take it (see `io_hints`).
    fn live_features(&self) -> PoolFeatures {
        let mut features = self.features;
        if self.passdown_unsupported.load(Ordering::Relaxed) {
            features.discard_passdown = false;
        }
        features
    }
}

/// The table words as byte slices, the form the core's parsers take.
pub(crate) fn to_bytes<'a>(words: &[&'a CStr]) -> Result<KVec<&'a [u8]>, CtrError> {
    let mut bytes = KVec::with_capacity(words.len(), GFP_KERNEL)
        .map_err(|_| CtrError::new(ENOMEM, c"Cannot allocate memory"))?;
    for word in words {
        // Cannot fail: the capacity covers every word.
        let _ = bytes.push_within_capacity(word.to_bytes());
    }
    Ok(bytes)
}
