// SPDX-License-Identifier: GPL-2.0
//! What the pool asks of a thin target's I/O state (`crate::io::ThinIo`):
//! the pool keeps every constructed thin target as a [`PoolMember`], so it
//! can wake, requeue or fail the bios the target holds when its mode, space
//! or transaction changes, without depending on the I/O path above it.

/// A thin target's I/O state, as the pool sees it. Calls come with the pool
/// lock held; none may take it.
pub(crate) trait PoolMember: Send + Sync {
    /// The thin device id.
    fn dev_id(&self) -> u32;

    /// Completes the bios held for data space with `error`.
    fn error_held(&self, error: crate::dm::pool_mode::IoError);

    /// Hands the bios held for data space back to the workers.
    fn requeue_held(&self);

    /// Hands the bios that waited for the pool (a free cell, reuse of
    /// freed blocks, or the resume of the suspended pool) back to the
    /// workers.
    fn requeue_waiters(&self);

    /// Records a change of this device's metadata at generation `gen`.
    fn note_change(&self, gen: u64);

    /// The metadata rolled back to the commit of generation `committed`:
    /// changes after it are lost.
    fn changes_lost_after(&self, committed: u64);

    /// The change generation its durable bios depend on.
    fn changed_gen(&self) -> u64;

    /// Closes the blocks the target holds open for more writes: each is
    /// filled where no write went and mapped, asynchronously, as any
    /// provision in flight. Returns how many it closed.
    fn close_open_blocks(&self) -> usize;

    /// The device was snapshotted at `time` (its new `snapshotted_time`);
    /// its share generation in the pool's mapping cache is `share_gen` now.
    fn note_snapshot(&self, time: u32, share_gen: u32);
}
