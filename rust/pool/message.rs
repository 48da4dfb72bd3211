// SPDX-License-Identifier: GPL-2.0
//! The pool's messages (`dmsetup message`): steps 2-4 of `dm_message`'s
//! flow, under the pool lock, and the delete of a big device in pieces that
//! let the lock go between them.

use kernel::{
    prelude::*,
    sync::MutexGuard,
    time::{Instant, Monotonic},
};

use super::{PoolObj, PoolState, Show};
use crate::{
    core_error::CoreError,
    dm::{errno::EIO, message::PoolMessage},
    glue::sched::cond_resched,
};

/// How long one piece of a delete holds the pool lock, at most (plus one
/// batch of steps): short beside the latency of a provision, so that the
/// other thins' I/O goes on while a big device is released.
const DELETE_PIECE_NS: i64 = 1_000_000;

/// Steps of the release between two looks at the clock (a step releases at
/// most one leaf of mappings, a few microseconds).
const DELETE_STEP_BATCH: usize = 8;

/// Metadata blocks a piecewise delete keeps free beside what its release
/// may shadow (for the commit's own allocations).
const DELETE_SLACK_BLOCKS: u64 = 64;

/// More mappings than a bottom-level leaf holds (254).
const MAPPINGS_PER_LEAF: u64 = 256;

impl PoolObj {
    /// Runs one parsed message (steps 2-4 of `dm_message`'s glue flow) under
    /// the pool lock `st`, taken with [`PoolObj::lock_settled`].
    ///
    /// A `delete` releases the device's tree in pieces of at most about
    /// [`DELETE_PIECE_NS`], letting the lock go between them, so that the
    /// other thins' provisions and I/O go on (`Documentation/io-path.md`,
    /// "Deleting a thin"). The device is gone from the first piece; the
    /// commit that ends the message covers the whole release.
    pub(crate) fn run_message<'a>(
        &'a self,
        mut st: MutexGuard<'a, PoolState>,
        msg: &PoolMessage<'_>,
    ) -> Result<(), i32> {
        st.commit_before_message()?;
        if let Err(e) = st.apply_message(msg) {
            return Err(st.message_failed(msg, e));
        }
        if st.md.deleting() {
            st = self.finish_delete(st, msg)?;
        }
        st.message_succeeded(msg);
        Ok(())
    }

    /// Goes on with the release `begin_delete` started until it is done, a
    /// piece at a time, the pool lock let go (and the CPU offered) between
    /// pieces. Committers wait meanwhile ([`PoolObj::lock_settled`]): the
    /// core's commit would finish the release in one hold of the lock, and a
    /// half-released tree may not be committed. Returns the lock held with
    /// the release done, or the error the message fails with.
    fn finish_delete<'a>(
        &'a self,
        mut st: MutexGuard<'a, PoolState>,
        msg: &PoolMessage<'_>,
    ) -> Result<MutexGuard<'a, PoolState>, i32> {
        let epoch = st.epoch;
        let changes = st.flags.changes();
        let result = loop {
            let start = Instant::<Monotonic>::now();
            let step = loop {
                match st.md.delete_step(DELETE_STEP_BATCH) {
                    Ok(false) if start.elapsed().as_nanos() < DELETE_PIECE_NS => continue,
                    other => break other,
                }
            };
            match step {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => {
                    pr_warn!("{}\n", Show(|f| msg.write_failure_log(f)));
                    // Only the delete changed the transaction since the commit
                    // before the message: undo it alone, the pool unharmed,
                    // as for any message. Other thins' changes came between
                    // the pieces: they cannot be kept without the rest of
                    // the release, and go as after any failed metadata
                    // operation.
                    if st.inflight == 0 && st.flags.changes() == changes {
                        st.roll_back_message(msg.name(), e);
                    } else {
                        st.metadata_operation_failed("dm_pool_delete_thin_device", e);
                    }
                    break Err(e.errno());
                }
            }
            drop(st);
            cond_resched();
            st = self.lock();
            if st.epoch != epoch {
                // A failure elsewhere rolled the metadata back to the last
                // commit: the device is there again, and the pool degraded.
                pr_warn!("{}\n", Show(|f| msg.write_failure_log(f)));
                break Err(EIO);
            }
        };
        // Committers waiting for the release go on, and so do the bios the
        // workers left on their thins' waiters for it
        // (`PoolObj::lock_settled_or_deleting`).
        self.settled.notify_all();
        for t in st.thins.iter() {
            t.requeue_waiters();
        }
        result.map(|()| st)
    }
}

impl PoolState {
    /// What the transaction holds goes to disk first (dm-thin does this
    /// only for `reserve_metadata_snap`), so that a message that fails
    /// part-way can be rolled back alone (`roll_back_message`). Changes
    /// are made under the pool lock, held here: the commit covers every
    /// change before the message.
    fn commit_before_message(&mut self) -> Result<(), i32> {
        if self.md.is_dirty() {
            self.commit()?;
        }
        Ok(())
    }

    /// The message's change of the metadata (a delete's first piece).
    fn apply_message(&mut self, msg: &PoolMessage<'_>) -> Result<(), CoreError> {
        match *msg {
            PoolMessage::CreateThin { dev_id, .. } => self.md.create_thin(dev_id.into()),
            PoolMessage::CreateSnap {
                dev_id, origin_id, ..
            } => {
                let r = self.md.create_snap(dev_id.into(), origin_id.into());
                if r.is_ok() {
                    self.note_snapshot_of(origin_id);
                }
                r
            }
            PoolMessage::Delete { dev_id, .. } => {
                if self.thins.iter().any(|t| t.dev_id() == dev_id) {
                    return Err(CoreError::Busy);
                }
                // In pieces only with room for all the release may allocate:
                // a metadata device that runs out with other thins' changes
                // between the pieces must degrade the pool, while a delete
                // done at once rolls back alone and can be retried.
                let r = if self.delete_fits_in_pieces(dev_id) {
                    self.md.begin_delete(dev_id.into())
                } else {
                    self.md.delete(dev_id.into())
                };
                // No target of the device is left to read the cache,
                // and a later one starts after this.
                if r.is_ok() {
                    self.cache.forget_dev(dev_id);
                }
                r
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
        }
    }

    /// Whether the free metadata (past the reserve) holds every block the
    /// release of device `dev` may allocate in one transaction. A block is
    /// shadowed at most once per transaction and the release shadows only
    /// blocks in use now (space-map bitmaps and index, overflow counts),
    /// never the released tree's own nodes (at least a leaf per
    /// [`MAPPINGS_PER_LEAF`] mappings): so the blocks in use, less those
    /// leaves, bound what it takes.
    fn delete_fits_in_pieces(&self, dev: u32) -> bool {
        let Ok(Some(details)) = self.md.device_details(dev.into()) else {
            return false;
        };
        let usage = self.md.metadata_usage();
        let need = usage
            .total
            .saturating_sub(usage.free)
            .saturating_sub(details.mapped_blocks.div_ceil(MAPPINGS_PER_LEAF))
            .saturating_add(DELETE_SLACK_BLOCKS);
        self.metadata_free_after_reserve() >= need
    }

    /// Step 4 of a message that succeeded: the commit after it.
    fn message_succeeded(&mut self, msg: &PoolMessage<'_>) {
        self.flags.change();
        // The origin's details changed: its next flush commits.
        if let PoolMessage::CreateSnap { origin_id, .. } = *msg {
            self.note_change_of(origin_id, self.flags.changes());
        }
        self.check_metadata_low_water();
        // dm-thin ignores the commit's result here.
        let _ = self.commit();
    }

    /// A message refused or failed with `e`: logged, and undone if it
    /// changed the metadata. Returns the errno to answer.
    fn message_failed(&mut self, msg: &PoolMessage<'_>, e: CoreError) -> i32 {
        pr_warn!("{}\n", Show(|f| msg.write_failure_log(f)));
        // A refusal before any change (an existing or missing device, a
        // held snapshot, create_snap at the largest time) leaves the
        // metadata as the commit before the message left it; a message that
        // failed part-way is undone.
        if self.md.is_dirty() {
            self.roll_back_message(msg.name(), e);
        }
        e.errno()
    }
}
