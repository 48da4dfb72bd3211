// SPDX-License-Identifier: GPL-2.0
//! [`PoolState`]: what the pool lock guards, and how a mode change reaches
//! the thin targets (dm-thin's `set_pool_mode` and
//! `notify_of_pool_mode_change`).

use core::sync::atomic::Ordering;
use kernel::{
    prelude::*,
    sync::Arc,
    time::{Instant, Monotonic},
};

use super::{
    cache::PoolCache, cells::CellTable, committed::CommittedView, member::PoolMember,
    passdown::Passdown, stats::LogLimit, PoolFlags, PoolMetadata, Show,
};
use crate::{
    dm::events::DataLowWater,
    dm::pool_mode::{ModeChange, PoolMode, PoolModeState},
    dm::pool_table::PoolFeatures,
    glue::{
        device::BdevHandle,
        dm::{EventSink, TableMd},
        inflight::{GpCookie, IoTracker},
        rcu_box::synchronize_rcu_expedited,
    },
};

/// The state of one pool object, behind its mutex.
pub(crate) struct PoolState {
    /// The pool's mapped device, for log prefixes.
    pub(super) name: TableMd,
    /// The metadata.
    pub(crate) md: KBox<PoolMetadata>,
    /// The mode state machine.
    pub(crate) mode: PoolModeState,
    /// Between presuspend and resume (a new object starts suspended).
    pub(crate) suspended: bool,
    /// From postsuspend's commit to resume: workers change no metadata and
    /// nothing but a message commits (`suspend.rs`).
    pub(super) quiesced: bool,
    /// Id of the table bound at the last preresume (0: none yet).
    pub(crate) bound_table: u64,
    /// That table, for dm events; `None` once it is gone.
    pub(crate) event_table: Option<Arc<EventSink>>,
    /// The bound table's data low-water mark, in blocks.
    pub(crate) low_water_blocks: u64,
    /// Data low-water event state.
    pub(crate) data_low_water: DataLowWater,
    /// Last table id handed out.
    pub(super) last_table_id: u64,
    /// Live (adjusted) features of the bound table.
    pub(crate) features: PoolFeatures,
    /// The I/O state of every constructed thin target.
    pub(crate) thins: KVec<Arc<dyn PoolMember>>,
    /// Targets in `thins` of a device that has another target there too (a
    /// reload's new table while the old one lives, two tables of one thin):
    /// while there are any, a change is noted on every target of its device.
    pub(super) twin_targets: usize,
    /// The mapping cache of all the pool's thin devices (its writers' side).
    pub(super) cache: PoolCache,
    /// Virtual blocks being provisioned.
    pub(super) cells: CellTable,
    /// Some thin holds bios that found no memory for a cell.
    pub(super) waiting_for_cells: bool,
    /// Some thin holds bios that wait until freed blocks may be reused.
    pub(super) waiting_for_reuse: bool,
    /// The pool's in-flight tracker (shared with [`PoolObj`]).
    pub(super) tracker: Arc<IoTracker>,
    /// The metadata's running count of freed data blocks
    /// (`ThinMetadata::data_blocks_freed`) at the last commit or abort: a
    /// commit that finds it grown made blocks free, by whatever operation
    /// (an unmap, a replaced mapping, a delete, the metadata snapshot's
    /// release).
    pub(super) data_freed_at_commit: u64,
    /// Blocks freed before the last commit may be reused once this grace
    /// period ends (`None`: it has).
    pub(super) reuse_cookie: Option<GpCookie>,
    /// ... and once every passdown up to this one has finished.
    pub(super) reuse_after_passdown: u64,
    /// The last passdown started.
    pub(super) passdown_seq: u64,
    /// Passdowns not finished yet, oldest first.
    pub(super) passdowns_open: KVec<u64>,
    /// Passdowns waiting for their grace period.
    pub(super) awaiting_gp: KVec<Passdown>,
    /// Thin devices whose last target went with changes no commit covered
    /// yet: (device id, change generation, `u64::MAX` if lost).
    pub(super) closed_changes: KVec<(u32, u64)>,
    /// A `closed_changes` entry could not be recorded: new targets depend
    /// on every change made so far.
    pub(super) closed_changes_unknown: bool,
    /// Provisions between allocating their block and mapping it.
    pub(super) inflight: usize,
    /// Committers waiting for `inflight` to reach zero.
    pub(super) committers: usize,
    /// The rate limit of the failed-lookup line.
    pub(super) lookup_log: LogLimit,
    /// Bumped when the metadata rolls back to the last commit: a provision
    /// that started before may not insert its (now free) block.
    pub(super) epoch: u64,
    /// Shared with the map path.
    pub(super) flags: Arc<PoolFlags>,
    /// The last commit's tree for the workers' walks without this lock
    /// (shared with [`PoolObj`]; published by every commit).
    pub(super) committed: Arc<CommittedView>,
    /// Out of data space and queueing: since when, and for how long.
    pub(super) no_space_deadline: Option<(Instant<Monotonic>, u32)>,
    /// A metadata failure in this activation set needs_check (written again
    /// at close, see `Drop`).
    pub(super) needs_check_set: bool,
    /// The data device, flushed before every commit. Every table of the pool
    /// opens the same device (`find_or_create` checks it) and sets this; the
    /// last table to go clears it, after a last commit.
    pub(crate) data_bdev: Option<BdevHandle>,
}

impl PoolState {
    /// The pool's name, for log lines.
    pub(crate) fn name(&self) -> &str {
        self.name.name()
    }

    /// Logs a mode change as dm-thin's `notify_of_pool_mode_change` does.
    pub(crate) fn report(&mut self, change: &ModeChange) {
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
    pub(super) fn raise_event(&self) {
        if let Some(t) = &self.event_table {
            t.event();
        }
    }

    /// dm-thin's no-space timer, checked by the waker: once the pool has
    /// queued for `no_space_timeout` seconds, queued and new bios error.
    pub(super) fn check_no_space_deadline(&mut self) {
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

    /// Notes that thin device `dev_id` is getting a target (its bios may
    /// fill the mapping cache) and returns its share generation there, for
    /// the target's `ThinIoConfig`.
    pub(crate) fn note_target_of(&mut self, dev_id: u32) -> Result<u32> {
        self.cache.note_target_of(dev_id)
    }

    /// Registers a constructed thin target's I/O state.
    pub(crate) fn open_thin(&mut self, io: Arc<dyn PoolMember>) -> Result<(), Error> {
        let twin = self.thins.iter().any(|t| t.dev_id() == io.dev_id());
        self.thins.push(io, GFP_KERNEL)?;
        self.twin_targets += usize::from(twin);
        Ok(())
    }

    /// Records a change of thin device `thin`'s metadata at generation `gen`
    /// on every live target of the device: a reload's new table (built
    /// while the old one still takes writes) and any other table of the
    /// same thin depend on it as much as `thin` does, for their flushes and
    /// for their lookups of the last commit (`CommittedView`).
    pub(crate) fn note_dev_change(&self, thin: &dyn PoolMember, gen: u64) {
        thin.note_change(gen);
        if self.twin_targets > 0 {
            self.note_change_of(thin.dev_id(), gen);
        }
    }

    /// Records a change of thin device `dev_id`'s metadata at generation
    /// `gen` on every live target of the device.
    pub(super) fn note_change_of(&self, dev_id: u32, gen: u64) {
        for t in self.thins.iter().filter(|t| t.dev_id() == dev_id) {
            t.note_change(gen);
        }
    }

    /// Thin device `dev_id` was just snapshotted: its blocks are shared now.
    /// Its writes must stop taking the fast path and stop being answered
    /// from the last commit's tree; its reads need not.
    ///
    /// Raises its share generation in the mapping cache, which makes every
    /// entry it has answer as shared without a pass over the slots (except
    /// at every 256th snapshot of the device, `PoolCache::next_share_gen`),
    /// and tells its live targets that generation and the device's new
    /// `snapshotted_time` (if the details cannot be read, every mapping
    /// counts as shared for them). Then waits until no map call can still
    /// remap a write with the old generation. A device that never had a
    /// target has nothing cached, and no map call to wait for.
    ///
    /// The wait is expedited: it is part of the `create_snap` message, which
    /// LVM sends with the origin suspended, and a normal grace period made
    /// the message 5-10 ms slower than dm-thin's under TCG (and costs
    /// milliseconds on hardware too).
    pub(super) fn note_snapshot_of(&mut self, dev_id: u32) {
        let Some(share_gen) = self.cache.next_share_gen(dev_id) else {
            return;
        };
        let time = match self.md.device_details(dev_id.into()) {
            Ok(Some(details)) => details.snapshotted_time,
            _ => u32::MAX,
        };
        for t in self.thins.iter().filter(|t| t.dev_id() == dev_id) {
            t.note_snapshot(time, share_gen);
        }
        synchronize_rcu_expedited();
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
            .filter(|t| t.dev_id() == dev_id)
            .map(|t| t.changed_gen());
        let closed = self
            .closed_changes
            .iter()
            .filter(|c| c.0 == dev_id)
            .map(|c| c.1);
        Iterator::chain(live, closed).fold(base, u64::max)
    }

    /// Forgets a thin target's I/O state.
    pub(crate) fn close_thin(&mut self, io: &dyn PoolMember) {
        if let Some(i) = self
            .thins
            .iter()
            .position(|t| core::ptr::addr_eq(Arc::as_ptr(t), core::ptr::from_ref(io)))
        {
            let _ = self.thins.remove(i);
            if self.thins.iter().any(|t| t.dev_id() == io.dev_id()) {
                self.twin_targets = self.twin_targets.saturating_sub(1);
            }
        }
        // A later target of the device depends on its uncommitted changes.
        let gen = io.changed_gen();
        if gen > self.flags.committed() {
            match self.closed_changes.iter_mut().find(|c| c.0 == io.dev_id()) {
                Some(c) => c.1 = c.1.max(gen),
                None => {
                    if self
                        .closed_changes
                        .push((io.dev_id(), gen), GFP_KERNEL)
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
}
