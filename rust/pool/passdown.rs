// SPDX-License-Identifier: GPL-2.0
//! Discards passed down to the data device: the blocks a discard freed wait
//! for a grace period of the pool's in-flight tracker (every bio that could
//! still use them has completed) before they are discarded on the data
//! device, and freed blocks are reused only after older passdowns ended.

use kernel::prelude::*;

use super::{member::PoolMember, PoolObj, PoolState, Reuse};
use crate::{
    dm::block_geometry::BlockGeometry,
    glue::{
        device::BdevHandle,
        inflight::{GpCookie, GpDone, IoTracker},
        queue::IoQueue,
    },
};

/// A discard whose freed blocks wait for the bios that may still use them
/// before they are passed down to the data device.
pub(crate) struct Passdown {
    /// Its place in the order discards started passing down.
    pub(super) seq: u64,
    /// Every bio that could have used the blocks has completed once this
    /// grace period has ended.
    cookie: GpCookie,
    /// The thin target whose discard freed the blocks (its address: only
    /// compared), which waits for its passdowns before it goes.
    owner: usize,
    /// The freed data blocks.
    pub(super) blocks: KVec<u64>,
    /// The owner's pool device (the handle keeps it open).
    pool_bdev: BdevHandle,
    geometry: BlockGeometry,
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
            self.gp_waiter.arm();
        }
        for p in ready {
            self.pass_down(p);
        }
    }

    fn gp_tracker(&self) -> &IoTracker {
        &self.tracker
    }

    fn gp_queue(&self) -> &IoQueue {
        &self.wq
    }
}

impl PoolObj {
    /// Has [`GpDone::gp_done`] run after a grace period that starts now.
    pub(crate) fn wake_after_grace_period(&self) {
        self.gp_waiter.arm();
    }

    /// Passes a discard's freed blocks down through the pool device (every
    /// bio that could have used them has completed). As dm-thin, a failed
    /// passdown is ignored: the blocks are unmapped either way. The blocks
    /// may be reused once no passdown older than the commit that freed them
    /// is left ([`PoolState::reuse_state`]).
    pub(super) fn pass_down(&self, p: Passdown) {
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
    pub(crate) fn finish_passdowns(&self, thin: &dyn PoolMember) {
        let mine = self.lock().take_passdowns_of(thin);
        if !mine.is_empty() {
            self.tracker.synchronize();
            for p in mine {
                self.pass_down(p);
            }
        }
        self.gp_waiter.flush();
    }
}

impl PoolState {
    /// Queues the data blocks a discard of `thin` freed, to pass them down
    /// once every bio that may still use them has completed (the caller then
    /// arms the pool's grace-period waiter). False if there is no memory to
    /// queue them: they are not passed down, which only costs the data
    /// device a hint.
    pub(crate) fn queue_passdown(
        &mut self,
        thin: &dyn PoolMember,
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
    pub(super) fn take_passdowns_of(&mut self, thin: &dyn PoolMember) -> KVec<Passdown> {
        let owner = core::ptr::from_ref(thin).addr();
        self.take_passdowns(|_, p| p.owner == owner)
    }

    /// The queued passdowns whose grace period has ended, oldest first.
    pub(super) fn take_passdowns_past_grace_period(&mut self) -> KVec<Passdown> {
        self.take_passdowns(|tracker, p| tracker.poll(p.cookie))
    }

    /// Takes the queued passdowns that `take` picks out of the queue, in
    /// order; one that finds no memory to move to stays queued.
    pub(super) fn take_passdowns(
        &mut self,
        take: impl Fn(&IoTracker, &Passdown) -> bool,
    ) -> KVec<Passdown> {
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
}
