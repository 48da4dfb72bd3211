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
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::prelude::*;

use super::to_bytes;
use crate::{
    dm::errno::{EINVAL, ENOMEM},
    dm::message::PoolMessage,
    dm::pool_mode::PoolMode,
    dm::pool_table::{
        glue_errors, metadata_low_water_threshold, nr_data_blocks, passdown_off, pool_io_limits,
        write_pool_table, PoolFeatures, PoolTable, PoolTableLine,
    },
    dm::status::{write_pool_info, DiscardStatus, PoolInfo, FAIL},
    dm::status_buf::StatusBuf,
    glue::{
        bio::Bio,
        device::DmDev,
        dm::{
            features, Args, CtrError, MapResult, QueueLimits, StatusKind, TableEvents, TargetCtx,
            TargetOps,
        },
    },
    pdata::block_store::BlockStore,
    pool::{
        registry::{self, PoolHold},
        usable_metadata_blocks, warn_if_metadata_device_too_big, Binding, Show,
    },
};

/// One pool table.
pub(crate) struct Pool {
    /// The table's hold on its pool object. First, so that it goes first:
    /// its last commit reads and flushes through the devices below.
    pool: PoolHold,
    /// Held open for the table's lifetime (the bufio store reads through it).
    metadata: DmDev,
    data: DmDev,
    table: PoolTableLine,
    /// This table's requested features.
    features: PoolFeatures,
    /// Set by `io_hints` when the data device cannot take the passdown of a
    /// whole block: this table's live features then have passdown off.
    passdown_unsupported: AtomicBool,
    nr_data_blocks: u64,
    /// This table, for dm events while it is the bound one.
    event_table: Option<TableEvents>,
}

#[vtable]
impl TargetOps for Pool {
    const NAME: &'static CStr = c"rthin-pool";
    const COMPAT_NAME: &'static CStr = c"thin-pool";
    const VERSION: [u32; 3] = [1, 24, 0];
    const FEATURES: u64 = features::SINGLETON
        | features::ALWAYS_WRITEABLE
        | features::IMMUTABLE
        | features::PASSES_CRYPTO;

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
        // As dm-thin, a `read_only` table opens the metadata device for
        // reading only. (A line that fails to parse is refused right after
        // opening its devices: how it opened them does not matter.)
        let metadata = if parsed.as_ref().is_ok_and(|p| p.features.read_only) {
            ti.get_device_read_only(metadata_word, glue_errors::OPEN_METADATA)?
        } else {
            ti.get_device(metadata_word, glue_errors::OPEN_METADATA)?
        };
        if let Some(dev) = metadata.handle() {
            warn_if_metadata_device_too_big(&dev);
        }
        let data = ti.get_device(data_word, glue_errors::OPEN_DATA)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        // Passdown is checked against the data device in io_hints, as dm-thin does.
        let features = parsed.features;
        let md = ti
            .table_md()
            .ok_or(CtrError::new(EINVAL, glue_errors::ALLOC_POOL))?;
        let pool = registry::find_or_create(md, &metadata, &data, parsed.block_size, features)?;
        pool.lock().data_bdev = data.handle();
        // As dm-thin: a reload with another block size is accepted and ignored
        // (compatibility.md, "Reload with another block size");
        // the live pool's size is what the table shows and what sizes it.
        let block_size = pool.lock().metadata().data_block_size();
        ti.set_num_flush_bios(1);
        // Discards sent to the pool device (the thins' passdown) go to the
        // data device; the thins unmap, so only passdown needs them here.
        if features.discard_enabled && features.discard_passdown {
            ti.enable_discards();
        }
        // A failure injected by a test (debugfs `fail_next_table_load`),
        // standing for an allocation failing after the pool object was found.
        if pool.flags.take_table_load_fault() {
            return Err(CtrError::new(ENOMEM, glue_errors::ALLOC_POOL));
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
            metadata,
            data,
            table,
            features,
            passdown_unsupported: AtomicBool::new(false),
            nr_data_blocks: nr_data_blocks(ti.len(), block_size),
            event_table: ti
                .table_events()
                .map_err(|_| CtrError::new(ENOMEM, glue_errors::ALLOC_POOL))?,
        })
    }

    fn map(&self, mut bio: Bio<'_>) -> MapResult {
        bio.set_dev(&self.data);
        MapResult::Remapped
    }

    fn status(&self, kind: StatusKind, noflush: bool, out: &mut StatusBuf<'_>) -> fmt::Result {
        match kind {
            StatusKind::Info => {
                // Only a commit waits for the provisions in flight: with
                // `--noflush` (LVM's lvs and monitoring) the status must
                // answer even while a provision is held below the pool (a
                // suspended data device, multipath with no path), as
                // dm-thin's does.
                let mut st = if noflush {
                    self.pool.lock()
                } else {
                    self.pool.lock_settled()
                };
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
        let st = self.pool.lock_settled();
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
        self.pool
            .run_message(st, &msg)
            .map_err(|errno| Error::from_errno(-errno))
    }

    fn preresume(&self) -> Result {
        let binding = Binding {
            table_id: self.pool.table_id(),
            read_only: self.features.read_only,
            error_if_no_space: self.features.error_if_no_space,
            low_water_blocks: self.table.low_water_blocks,
            features: self.live_features(),
            event_table: self.event_table.as_ref().map(TableEvents::sink),
            nr_data_blocks: self.nr_data_blocks,
            metadata_dev: self.metadata.handle(),
        };
        self.pool.lock_settled().preresume(binding)
    }

    fn resume(&self) {
        self.pool.lock().resume();
    }

    fn presuspend(&self, noflush: bool) {
        let mut st = self.pool.lock();
        // Writes into blocks held open have completed: their blocks close
        // and are mapped before the suspend's commit (their fills go
        // through the pool device, before it holds them). Not waited for
        // with `--noflush`, which must not wait for a device held below.
        if st.close_open_blocks() > 0 && !noflush {
            drop(st);
            st = self.pool.lock_settled();
        }
        st.suspended = true;
        drop(st);
        // Committers waiting for provisions stop waiting (see lock_settled).
        self.pool.wake_committers();
    }

    fn presuspend_undo(&self) {
        self.pool.lock().suspended = false;
    }

    fn postsuspend(&self) {
        self.pool.postsuspend();
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
