// SPDX-License-Identifier: GPL-2.0
//! Commits and aborts of the pool's metadata transaction (dm-thin's
//! `commit` and `metadata_operation_failed`), the committers' wait for the
//! provisions in flight, and when blocks freed in a transaction may be
//! handed out again.

use core::sync::atomic::Ordering;
use kernel::{prelude::*, sync::MutexGuard};

use super::{no_space_timeout_secs, PoolObj, PoolState};
use crate::{
    core_error::CoreError, dm::errno::EINVAL, dm::pool_mode::PoolMode,
    dm::pool_mode::PoolModeState, glue::device::BdevHandle,
};

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

impl PoolObj {
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
    /// block (which `thin_check` would call a leak), and no delete is being
    /// done in pieces (`pool::message`): the core's commit would finish its
    /// release in this one hold of the lock, the stall the pieces avoid; the
    /// delete commits when it is done.
    ///
    /// Not while the pool device is suspended: a provision's fill or
    /// overwrite goes through the pool device (as in dm-thin), which holds
    /// it until resume, so waiting would deadlock postsuspend's commit,
    /// preresume and every status or message in between. dm-thin's commits
    /// never wait for prepared mappings; a commit here then records such a
    /// block as allocated but unmapped until the next one, as dm-thin's do.
    pub(crate) fn lock_settled(&self) -> MutexGuard<'_, PoolState> {
        let mut st = self.state.lock();
        loop {
            while st.md.deleting() {
                self.settled.wait(&mut st);
            }
            if self.settle(&mut st) {
                return st;
            }
        }
    }

    /// [`Self::lock_settled`] for the periodic commit, which a delete in
    /// pieces makes needless (its own commit follows): `None` while one
    /// goes on, instead of waiting for it.
    pub(crate) fn lock_settled_unless_deleting(&self) -> Option<MutexGuard<'_, PoolState>> {
        self.lock_settled_or_deleting().ok()
    }

    /// [`Self::lock_settled`] for a worker, which must not wait for a delete
    /// in pieces (the bios behind it on its list would wait as long): the
    /// lock held as `lock_settled` returns it, or as `Err` while such a
    /// delete goes on; its end requeues the bios of the thins' `waiters`.
    pub(crate) fn lock_settled_or_deleting(
        &self,
    ) -> Result<MutexGuard<'_, PoolState>, MutexGuard<'_, PoolState>> {
        let mut st = self.state.lock();
        if !st.md.deleting() && self.settle(&mut st) {
            Ok(st)
        } else {
            Err(st)
        }
    }

    /// Waits, as a committer, until no provision is in flight (see
    /// [`Self::lock_settled`]); the wait lets the lock go, so a delete may
    /// have begun meanwhile: false then.
    fn settle(&self, st: &mut MutexGuard<'_, PoolState>) -> bool {
        st.committers += 1;
        // Blocks held open would wait for writes that may never come: they
        // close now, and none opens while a committer waits
        // (`PoolState::may_hold_open`).
        let _ = st.close_open_blocks();
        while st.inflight > 0 && !st.suspended {
            self.settled.wait(st);
        }
        st.committers -= 1;
        if st.committers == 0 {
            self.settled.notify_all();
        }
        !st.md.deleting()
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

impl PoolObj {
    /// Wakes committers waiting for provisions (the pool device is being
    /// suspended: they stop waiting, see [`PoolObj::lock_settled`]).
    pub(crate) fn wake_committers(&self) {
        self.settled.notify_all();
    }
}

impl PoolState {
    /// dm-thin's `metadata_operation_failed`: log, roll back to the last
    /// commit, set needs_check, and go read-only (or fail).
    pub(super) fn metadata_operation_failed(&mut self, op: &str, e: CoreError) {
        pr_err!(
            "{}: metadata operation '{}' failed: error = -{}\n",
            self.name(),
            op,
            e.errno()
        );
        pr_err!("{}: aborting current metadata transaction\n", self.name());
        let abort_ok = self.abort_to_last_commit().is_ok();
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

    /// Rolls the metadata back to the last commit and publishes that
    /// commit's tree again for the walks without the lock (every change
    /// made since is lost, and the targets that had some fail their durable
    /// bios and never walk it). Err if the metadata could not be reread.
    fn abort_to_last_commit(&mut self) -> Result<(), CoreError> {
        // The abort resets the block cache, which no walk may hold a buffer of.
        self.committed.withdraw();
        self.md.abort()?;
        self.committed
            .publish(self.md.committed_tree(), self.flags.committed());
        // The frees rolled back with the rest.
        self.data_freed_at_commit = self.md.data_blocks_freed();
        Ok(())
    }

    /// Undoes a message that failed after changing the metadata (`e`),
    /// back to the commit made just before it (`run_message`), so that it
    /// may be retried, after the metadata device grows if it ran out of
    /// space: dm-thin's messages fail without degrading the pool. Only the
    /// message's own changes are lost, and no bio depends on them, so the
    /// pool keeps its mode and needs no check, unlike
    /// [`Self::metadata_operation_failed`], which this falls back to if the
    /// rollback fails or the error says the metadata cannot be trusted.
    pub(super) fn roll_back_message(&mut self, op: &str, e: CoreError) {
        let refused_or_full = matches!(
            e,
            CoreError::NoSpace
                | CoreError::Exists
                | CoreError::NotFound
                | CoreError::Busy
                | CoreError::Invalid
        );
        if refused_or_full && self.abort_to_last_commit().is_ok() {
            pr_warn!(
                "{}: metadata operation '{}' failed: error = -{}: rolled back to the last commit\n",
                self.name(),
                op,
                e.errno()
            );
        } else {
            self.metadata_operation_failed(op, e);
        }
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
        if let Some(Err(e)) = self.data_bdev.as_ref().map(BdevHandle::flush) {
            self.metadata_operation_failed("dm_pool_commit_metadata", CoreError::Io(e));
            return Err(CoreError::Io(e).errno());
        }
        if let Err(e) = self.md.commit() {
            self.metadata_operation_failed("dm_pool_commit_metadata", e);
            return Err(e.errno());
        }
        // The commit allocates metadata too (space-map index entries,
        // device details).
        self.check_metadata_low_water();
        self.flags.committed.store(covers, Ordering::Release);
        self.committed.publish(self.md.committed_tree(), covers);
        self.flags.commits.fetch_add(1, Ordering::Relaxed);
        // Covered now, but for changes lost before.
        self.closed_changes.retain(|c| c.1 == u64::MAX);
        self.closed_changes_unknown = false;
        let freed = self.md.data_blocks_freed();
        if freed != self.data_freed_at_commit {
            // Blocks freed in this transaction are allocatable from now on:
            // not before the bios that may still use them have completed,
            // nor before older discards have passed them down.
            self.data_freed_at_commit = freed;
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
    pub(super) fn wake_reuse_waiters(&mut self) -> Reuse {
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
