// SPDX-License-Identifier: GPL-2.0
//! The `rthin` target: one thin volume of a pool.
//!
//! The constructor parses the table line as dm-thin does, opens the pool
//! device, finds the pool object through the registry (by the pool's mapped
//! device, like dm-thin's `thin_ctr`) and checks that the thin device exists
//! in the metadata. The INFO status shows the device's real mapped-block
//! count and highest mapped block from the metadata.
//!
//! I/O goes through [`ThinIo`]: remapped in the map call when the mapping is
//! cached, otherwise handled by the pool's workers. Like dm-thin, bios never
//! cross a data block (`max_io_len`), and remapped bios go to the pool
//! device, whose target sends them on to the data device.

use core::fmt;
use kernel::{prelude::*, sync::Arc};

use super::to_bytes;
use crate::{
    dm::block_geometry::BlockGeometry,
    dm::errno::{EINVAL, ENODATA, ENOMEM},
    dm::pool_mode::PoolMode,
    dm::status::{write_thin_status, ThinStatus},
    dm::status_buf::StatusBuf,
    dm::thin_table::{glue_errors, ThinTable, ThinTableLine},
    glue::{
        bio::Bio,
        device::DmDev,
        dm::{features, Args, CtrError, MapResult, QueueLimits, StatusKind, TargetCtx, TargetOps},
    },
    io::{ThinIo, ThinIoConfig},
    pool::{
        registry::{hold_for_thin, PoolHold},
        SharedPool, ThinCounters, ThinCountersHold,
    },
};

/// One thin volume.
pub(crate) struct Thin {
    pool_dev: DmDev,
    /// The target's hold on its pool object (dm-thin's `__pool_inc` in
    /// `thin_ctr`): while it lives, a new pool table binds to the same object.
    pool: PoolHold,
    table: ThinTableLine,
    io: Arc<ThinIo>,
    /// Held open for the target's lifetime (the I/O path reads through it).
    _origin: Option<DmDev>,
    /// The device's counters and their debugfs file.
    _counters: Option<ThinCountersHold>,
}

#[vtable]
impl TargetOps for Thin {
    const NAME: &'static CStr = c"rthin";
    const COMPAT_NAME: &'static CStr = c"thin";
    const VERSION: [u32; 3] = [1, 24, 0];
    const FEATURES: u64 = features::PASSES_CRYPTO;

    fn ctr(ti: &mut TargetCtx<'_>, args: &Args<'_>) -> Result<Self, CtrError> {
        let words = args.words();
        let bytes = to_bytes(words)?;
        let parsed = ThinTable::parse(&bytes);
        if let Err(e) = parsed {
            if !e.after_device_open() {
                return Err(CtrError::new(e.errno(), e.message()));
            }
        }
        let Some(pool_word) = words.first() else {
            return Err(CtrError::new(EINVAL, c"Invalid argument count"));
        };
        let pool_dev = ti.get_device(pool_word, glue_errors::OPEN_POOL)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        let origin = match parsed.external_origin {
            Some(_) => {
                let word = words
                    .get(2)
                    .copied()
                    .ok_or(CtrError::new(EINVAL, glue_errors::OPEN_ORIGIN))?;
                Some(ti.get_device_read_only(word, glue_errors::OPEN_ORIGIN)?)
            }
            None => None,
        };
        let md = pool_dev
            .get_md()
            .ok_or(CtrError::new(EINVAL, glue_errors::POOL_MD))?;
        let pool =
            hold_for_thin(md.key()).ok_or(CtrError::new(EINVAL, glue_errors::POOL_OBJECT))?;
        drop(md);
        let oom = CtrError::new(ENOMEM, glue_errors::OUT_OF_MEMORY);
        let counters_hold = match ti.table_md() {
            Some(md) => Some(pool.thin_counters(md.name()).map_err(|_| oom)?),
            None => None,
        };
        let counters = match &counters_hold {
            Some(hold) => hold.counters.clone(),
            None => Arc::new(ThinCounters::new().map_err(|_| oom)?, GFP_KERNEL).map_err(|_| oom)?,
        };
        let io = {
            let mut st = pool.lock();
            if st.mode() == PoolMode::Fail {
                return Err(CtrError::new(EINVAL, glue_errors::POOL_FAIL));
            }
            let details = match st.metadata().device_details(parsed.dev_id.into()) {
                Ok(Some(details)) => details,
                Ok(None) => return Err(CtrError::new(ENODATA, glue_errors::OPEN_THIN)),
                Err(e) => return Err(CtrError::new(e.errno(), glue_errors::OPEN_THIN)),
            };
            if st.suspended() {
                return Err(CtrError::new(EINVAL, glue_errors::POOL_SUSPENDED));
            }
            let block_sectors = st.metadata().data_block_size();
            let geometry = BlockGeometry::new(block_sectors)
                .ok_or(CtrError::new(EINVAL, glue_errors::OPEN_THIN))?;
            let features = st.features();
            ti.set_max_io_len(block_sectors)
                .map_err(|e| CtrError::new(-e.to_errno(), glue_errors::OPEN_THIN))?;
            if features.discard_enabled {
                ti.enable_discards();
            }
            ti.reserve_per_bio_data();
            ti.set_flush_supported();
            let cfg = ThinIoConfig {
                dev_id: parsed.dev_id,
                pool_bdev: pool_dev.handle().ok_or(oom)?,
                geometry,
                origin: origin.as_ref().and_then(DmDev::handle),
                counters,
                changed: st.thin_changed_floor(parsed.dev_id),
                snapshotted_time: details.snapshotted_time,
                share_gen: st.note_target_of(parsed.dev_id).map_err(|_| oom)?,
            };
            let io = ThinIo::new(SharedPool::clone(&pool), cfg).map_err(|_| oom)?;
            if st.open_thin(io.clone()).is_err() {
                // Its lanes hold it until closed.
                io.quiesce();
                return Err(oom);
            }
            io
        };
        ti.set_num_flush_bios(1);
        let table = ThinTableLine {
            pool_dev: pool_dev.devnum(),
            dev_id: parsed.dev_id,
            external_origin: origin.as_ref().map(DmDev::devnum),
        };
        Ok(Self {
            pool_dev,
            pool,
            table,
            io,
            _origin: origin,
            _counters: counters_hold,
        })
    }

    fn map(&self, bio: Bio<'_>) -> MapResult {
        self.io.map(bio)
    }

    fn end_io(&self, bio: &mut Bio<'_>) {
        self.io.end_io(bio);
    }

    fn status(&self, kind: StatusKind, noflush: bool, out: &mut StatusBuf<'_>) -> fmt::Result {
        // Writes into a block held open have completed but are not mapped
        // yet: the mapped count shows them once the block is closed and its
        // provision settled. Not with `--noflush`, which must answer even
        // while a provision is held below the pool.
        let closed = kind == StatusKind::Info && !noflush && self.io.close_open_blocks() > 0;
        let st = match closed {
            true => match self.pool.lock_settled_or_deleting() {
                Ok(st) | Err(st) => st,
            },
            false => self.pool.lock(),
        };
        let status = if st.mode() == PoolMode::Fail {
            ThinStatus::PoolFailed
        } else {
            match kind {
                StatusKind::Table => ThinStatus::Table(self.table),
                StatusKind::Info => {
                    let md = st.metadata();
                    let dev = u64::from(self.table.dev_id);
                    match (md.device_details(dev), md.highest_mapped(dev)) {
                        (Ok(Some(d)), Ok(highest_mapped)) => ThinStatus::Info {
                            mapped_blocks: d.mapped_blocks,
                            highest_mapped,
                            block_size: md.data_block_size(),
                        },
                        _ => ThinStatus::Error,
                    }
                }
            }
        };
        write_thin_status(out, &status)
    }

    fn preresume(&self) -> Result {
        self.io.refresh_origin_size();
        Ok(())
    }

    fn presuspend(&self, noflush: bool) {
        if noflush {
            self.io.start_noflush_suspend();
        }
        self.io.stop_open(noflush);
    }

    fn presuspend_undo(&self) {
        self.io.end_noflush_suspend();
        self.io.allow_open();
    }

    fn resume(&self) {
        self.io.end_noflush_suspend();
        self.io.allow_open();
    }

    fn device(&self) -> &DmDev {
        &self.pool_dev
    }

    /// As dm-thin's `thin_io_hints`: discards in whole blocks, up to 1024
    /// blocks per bio.
    fn io_hints(&self, limits: &mut QueueLimits<'_>) {
        let (enabled, block_sectors) = {
            let st = self.pool.lock();
            (
                st.features().discard_enabled,
                st.metadata().data_block_size(),
            )
        };
        if enabled {
            limits.set_discard_granularity(block_sectors.saturating_mul(512));
            limits.set_max_hw_discard_sectors(block_sectors.saturating_mul(1024));
        }
    }

    /// A thin volume may be larger than its pool: like dm-thin, report the
    /// pool's data size as the part of the pool device in use.
    fn device_len(&self, _ti_len: u64) -> Option<u64> {
        let st = self.pool.lock();
        let md = st.metadata();
        let sectors = md
            .data_usage()
            .total
            .saturating_mul(md.data_block_size().into());
        (sectors > 0).then_some(sectors)
    }
}

impl Drop for Thin {
    fn drop(&mut self) {
        // No bio is in flight (dm calls dtr only then), but a worker may
        // still be finishing its loop; the pool device goes right after.
        self.io.quiesce();
        // Its queued discards go through its pool device, closed next.
        self.pool.finish_passdowns(&*self.io);
        self.pool.lock().close_thin(&*self.io);
    }
}
