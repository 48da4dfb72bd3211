// SPDX-License-Identifier: GPL-2.0
//! A new pool object: its metadata opened (or formatted) through a
//! dm-bufio block store, and everything else it owns built around it.

use core::{
    fmt,
    sync::atomic::{AtomicUsize, Ordering},
};
use kernel::{
    debugfs::Dir, new_condvar, new_mutex, prelude::*, str::CString, sync::Arc,
    uaccess::UserSliceReader,
};

use super::{
    cache::PoolCache, cells::CellTable, committed::CommittedView, stats::LogLimit, PoolFlags,
    PoolObj, PoolState, SharedPool, WAKER_PERIOD_MS,
};
use crate::{
    dm::errno::{EINVAL, ENOMEM, EPERM},
    dm::events::DataLowWater,
    dm::pool_mode::PoolModeState,
    dm::pool_table::{glue_errors, PoolFeatures},
    glue::{
        bufio::BufioStore,
        device::DmDev,
        dm::{CtrError, TableMd},
        inflight::{GpWaiter, IoTracker},
        kcopyd::Kcopyd,
        queue::IoQueue,
        ticker::Ticker,
    },
    metadata::thin_metadata::ThinMetadata,
    pdata::block_store::BlockStore,
    pdata::checksum::BlockKind,
    pdata::tm::TmCaches,
};

/// (a few KiB) on the heap, off the table load's stack.
pub(crate) type PoolMetadata = ThinMetadata<BufioStore, KBox<TmCaches>>;

/// Opens (or formats) the metadata of a new pool object.
pub(super) fn open_metadata(
    metadata: &DmDev,
    block_size: u32,
    read_only: bool,
) -> Result<KBox<PoolMetadata>, CtrError> {
    let fail = |errno: i32| CtrError::new(errno, glue_errors::CREATE_METADATA);
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    let bdev = metadata.handle().ok_or(fail(EINVAL))?;
    let store = BufioStore::new(bdev).map_err(|e| fail(-e.to_errno()))?;
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

/// Builds the pool object of a new pool (the registry entry is the
/// caller's): opens the metadata, then the queue, kcopyd, the tracker, the
/// mapping cache and the debugfs directory, and starts the waker.
pub(super) fn new_pool(
    md: TableMd,
    metadata: &DmDev,
    block_size: u32,
    read_only: bool,
) -> Result<SharedPool, CtrError> {
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    let metadata_md = open_metadata(metadata, block_size, read_only)?;
    let flags = Arc::new(PoolFlags::default(), GFP_KERNEL).map_err(|_| alloc)?;
    let committed = CommittedView::new(metadata_md.store().reader()).map_err(|_| alloc)?;
    let committed = Arc::new(committed, GFP_KERNEL).map_err(|_| alloc)?;
    committed.publish(metadata_md.committed_tree(), flags.committed());
    let tracker = Arc::pin_init(IoTracker::new(), GFP_KERNEL).map_err(|_| alloc)?;
    let (cache, mappings) = PoolCache::new(metadata_md.data_usage().total).map_err(|_| alloc)?;
    flags
        .mapping_cache_slots
        .store(cache.slots(), Ordering::Relaxed);
    let debugfs = match CString::try_from_fmt(fmt!("rthin-{}", md.name())) {
        Ok(name) => Dir::new(&name),
        Err(_) => Dir::new(c"rthin"),
    };
    let mut state = PoolState {
        name: md,
        md: metadata_md,
        mode: PoolModeState::new(),
        suspended: true,
        quiesced: false,
        bound_table: 0,
        event_table: None,
        low_water_blocks: 0,
        data_low_water: DataLowWater::default(),
        last_table_id: 1,
        // As dm-thin's pool->pf until a table binds: the tables loaded
        // before are checked against these (`find_or_create`).
        features: PoolFeatures::DEFAULT,
        thins: KVec::new(),
        twin_targets: 0,
        cache,
        cells: CellTable::new().map_err(|_| alloc)?,
        waiting_for_cells: false,
        waiting_for_reuse: false,
        tracker: tracker.clone(),
        data_freed_at_commit: 0,
        reuse_cookie: None,
        reuse_after_passdown: 0,
        passdown_seq: 0,
        passdowns_open: KVec::new(),
        awaiting_gp: KVec::new(),
        closed_changes: KVec::new(),
        closed_changes_unknown: false,
        inflight: 0,
        committers: 0,
        lookup_log: LogLimit::new(),
        epoch: 0,
        flags: flags.clone(),
        committed: committed.clone(),
        no_space_deadline: None,
        needs_check_set: false,
        data_bdev: None,
    };
    state.set_metadata_low_water();
    let wq = IoQueue::new(c"rthin").map_err(|_| alloc)?;
    let completion_wq = IoQueue::new(c"rthin_done").map_err(|_| alloc)?;
    let show = &|p: &Arc<PoolFlags>, f: &mut fmt::Formatter<'_>| p.write(f);
    let knob = &|p: &Arc<PoolFlags>, input: &mut UserSliceReader| p.write_knob(input);
    let pool_file = KBox::pin_init(
        debugfs.read_write_callback_file(c"pool", flags.clone(), show, knob),
        GFP_KERNEL,
    )
    .ok();
    let kcopyd = Kcopyd::new().map_err(|_| alloc)?;
    let waker = Ticker::new(WAKER_PERIOD_MS).map_err(|_| alloc)?;
    let gp_waiter = GpWaiter::new().map_err(|_| alloc)?;
    let pool = Arc::pin_init(
        pin_init!(PoolObj {
            state <- new_mutex!(state),
            settled <- new_condvar!(),
            wq,
            completion_wq,
            kcopyd,
            flags,
            mappings,
            committed,
            waker,
            tracker,
            gp_waiter,
            debugfs,
            _pool_file: pool_file,
            thin_files <- new_mutex!(KVec::new()),
            users: AtomicUsize::new(0),
        }),
        GFP_KERNEL,
    )
    .map_err(|_| alloc)?;
    Ok(SharedPool::first(pool))
}
