// SPDX-License-Identifier: GPL-2.0
//! Provisioning and breaking sharing: a cell on the virtual block, a new
//! data block zeroed, copied or written whole, and the mapping inserted
//! only once the block holds its data (on the completion lane).

use core::sync::atomic::Ordering;
use kernel::{
    prelude::*,
    sync::{Arc, MutexGuard},
};

use super::ThinIo;
use crate::{
    dm::pool_mode::{BioAction, BioDir, IoError, PreparedMappingAction},
    glue::{
        bio::{BioKind, BioList, OwnedBio, Provision},
        hooked::BlockFill,
        kcopyd::{CopyFailed, Rest},
    },
    pool::{AllocFailure, PoolState, Reuse},
};

/// How a partial write's new block gets its data ([`ThinIo::fill_plan`]).
#[derive(Clone, Copy)]
pub(super) enum FillPlan {
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

impl ThinIo {
    /// Allocates a block for `vblock` and fills it: the bio writes its part
    /// while kcopyd zeroes (unless the pool skips zeroing) or copies from
    /// `old` the parts it leaves out, if any. The worker moves on at once;
    /// the bio comes back on the completion lane when all of them ended, and
    /// the mapping goes in then ([`Self::finish_provision`]).
    pub(super) fn provision(
        self: &Arc<Self>,
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
                match self.pool.lock_settled_or_deleting() {
                    // Suspended meanwhile: no commit, the bio waits for the
                    // resume (on the way round).
                    Ok(mut st) => {
                        if !st.quiesced() {
                            let _ = st.commit();
                        }
                    }
                    // A delete in pieces commits at its end, which requeues
                    // the bio (pushed under the pool lock it takes).
                    Err(_st) => {
                        self.waiters.lock().push(bio);
                        return;
                    }
                }
                // Start over: the block may have been mapped meanwhile.
                self.process_rw(bio, BioDir::Write, true);
                return;
            }
            Err(AllocFailure::Refused(action)) => {
                match action {
                    BioAction::Queue => self.hold(st, bio),
                    BioAction::Error(e) => {
                        drop(st);
                        bio.complete(Some(e));
                    }
                    _ => {
                        drop(st);
                        bio.complete(Some(IoError::Io));
                    }
                }
                return;
            }
        };
        // The pool's live features: a reload may change them.
        let zero_new_blocks = st.features().zero_new_blocks;
        let Some(epoch) = st.open_cell(&**self, vblock) else {
            st.release_data_block(data_block);
            drop(st);
            bio.complete(Some(IoError::Io));
            return;
        };
        let (sector, nr_sectors) = {
            let v = bio.view();
            (v.sector(), v.nr_sectors())
        };
        let plan = self.fill_plan(vblock, old, zero_new_blocks);
        let mut provision = Provision {
            vblock,
            data_block,
            epoch,
            breaks_sharing: old.is_some(),
            deferred: None,
        };
        // A plain write at the start of a new block to be zeroed: the block
        // is held open for the writes that follow (`open_block.rs`). Still
        // under the pool lock, so that a committer either finds the block
        // open (and closes it) or is seen by `may_hold_open` first.
        let part = (self.geometry.offset_in_block(sector), nr_sectors);
        let hold = matches!(plan, FillPlan::Zero)
            && bio.has_per_bio()
            && !bio.view().wants_durability()
            && self.wants_open(part)
            && st.may_hold_open();
        if let Some(block) = self.geometry.block_start(data_block).filter(|_| hold) {
            st.note_unmapped_writes(&**self);
            match self.hold_open(bio, provision, (block, part)) {
                Ok(()) => return,
                Err((back, _)) => bio = back,
            }
        }
        drop(st);

        let (Some(to), Some(block)) = (
            self.geometry.remap(data_block, sector),
            self.geometry.block_start(data_block),
        ) else {
            // Not filled: this frees the block and fails, as intended.
            let _ = self.end_provision(&provision, false, None);
            bio.complete(Some(IoError::Io));
            return;
        };
        // The bio writes its part of the block while kcopyd zeroes or copies
        // only the parts it leaves out: one write of the block (and one read
        // of the shared one), not a fill followed by the bio.
        // `None`: no write alongside: the fill from an external origin, and
        // a partial write on a pool that skips zeroing, which (as dm-thin's)
        // maps its block at once and issues the bio after, so the writes
        // parked on the cell do not wait for it.
        let beside = match plan {
            _ if self.geometry.covers_block(sector, nr_sectors) => Some(None),
            FillPlan::Copy { from } => Some(Some(Rest::Copy { from })),
            FillPlan::Zero => Some(Some(Rest::Zeroes)),
            FillPlan::Nothing | FillPlan::Origin { .. } => None,
        };
        // A write at the start of its block is how a stream of smaller
        // writes reaches a block first: its fill waits until it has been
        // written, and then covers only what the writes that parked on the
        // cell meanwhile leave out ([`Self::continue_provision`]). A lone
        // write elsewhere keeps its fill beside it.
        let beside = match beside {
            Some(Some(rest))
                if self.geometry.offset_in_block(sector) == 0 && !bio.view().wants_durability() =>
            {
                provision.deferred = Some(rest);
                Some(None)
            }
            other => other,
        };
        if let Some(rest) = beside {
            let fill = rest.map(|rest| BlockFill {
                kcopyd: &self.pool.kcopyd,
                rest,
                block,
                parts: self.geometry.uncovered(sector, nr_sectors),
            });
            match bio.submit_hooked(self, provision, (&self.pool_bdev, to), fill) {
                Ok(()) => return,
                // No per-bio data: fill the block, waiting, then write (the
                // bio still names its virtual block, which a durable bio's
                // second trip through a worker looks up again).
                Err(b) => bio = b,
            }
        }
        // The rare fill from an external origin (waited for), or none at
        // all; then the bio.
        let filled = self.fill(plan, block).is_ok();
        self.finish_fill(bio, &provision, filled);
    }

    /// How a partial write's new block gets its data: a copy of the shared
    /// block `old`, else of the external origin's part of the block (the
    /// rest zeroed), else zeroes (unless the pool skips zeroing).
    pub(super) fn fill_plan(&self, vblock: u64, old: Option<u64>, zero: bool) -> FillPlan {
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
    pub(super) fn fill(&self, plan: FillPlan, to: u64) -> Result<(), CopyFailed> {
        let bs = self.geometry.sectors();
        let pool = &self.pool_bdev;
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
                    kcopyd.copy((&origin.bdev, begin), (pool, to), in_origin)?;
                }
                if zero_rest && in_origin < bs {
                    kcopyd.zero(pool, to.saturating_add(in_origin), bs - in_origin)?;
                }
                Ok(())
            }
        }
    }

    /// A provision's bio came back on the completion lane: its write and
    /// the fill of the rest of its block ended (`written` if all succeeded).
    /// Map the block, then let the bio complete.
    /// Runs on the completion lane: it must not wait for other provisions,
    /// so a commit the bio asks for is left to the deferred lane.
    pub(super) fn finish_provision(&self, mut bio: OwnedBio, provision: &Provision, written: bool) {
        match self.end_provision(provision, written, None) {
            Ok(()) => {
                let durable = bio.view().wants_durability();
                if durable && !self.changes_committed() && bio.set_commit_then_finish() {
                    self.queues.push(&self.pool.wq, bio);
                } else {
                    bio.finish();
                }
            }
            // The write's (or the fill's) error stays on the bio.
            Err(_) if !written => bio.finish(),
            Err(e) => bio.complete(Some(e)),
        }
    }

    /// The new block of a bio without per-bio data, or of a partial write
    /// over an external origin, was filled (`filled`), waiting:
    /// map it, then issue the bio into it.
    pub(super) fn finish_fill(&self, mut bio: OwnedBio, provision: &Provision, filled: bool) {
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
    pub(super) fn end_provision(
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
        let parked = st.close_cell(self, vblock);
        let rolled_back = st.epoch() != epoch;
        let outcome = match st.mode_state().decide_prepared_mapping(filled, rolled_back) {
            PreparedMappingAction::Insert => st.insert_mapping(self, vblock, data_block),
            PreparedMappingAction::Release(e) => {
                st.release_data_block(data_block);
                Err(e)
            }
            // The block is no longer ours.
            PreparedMappingAction::Forget(e) => Err(e),
        };
        if outcome.is_ok() {
            if let Some(bio) = to_submit {
                // Under the lock that mapped the block: a later unmapping
                // waits for this bio.
                self.track(bio);
            }
            st.cache_new_mapping(self.dev_id, vblock, data_block, self.share_gen());
            let counter = if copied {
                &self.counters.sharing_broken
            } else {
                &self.counters.provisioned
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let (remapped, parked) = match outcome {
            Ok(()) => self.remap_parked(parked, data_block),
            Err(_) => (BioList::new(), parked),
        };
        self.pool.provision_done(st);
        self.submit_remapped(remapped);
        self.requeue(parked);
        outcome
    }

    /// The bios that waited on a provision's cell, once its block is
    /// mapped (under the pool lock that mapped it: the block is this
    /// device's alone, and an unmapping waits for bios tracked now): reads
    /// and writes are remapped into the block, as dm-thin issues a cell's
    /// bios when its mapping goes in, instead of a second trip through a
    /// worker. Bios that ask for durability go back to the deferred list
    /// (they wait for a commit). Returns (remapped, requeued).
    fn remap_parked(&self, mut parked: BioList, data_block: u64) -> (BioList, BioList) {
        let (mut remapped, mut requeued) = (BioList::new(), BioList::new());
        // (`pop` takes from the front: both lists keep the parking order.)
        while let Some(mut bio) = parked.pop() {
            let plain = {
                let v = bio.view();
                matches!(v.kind(), BioKind::Read | BioKind::Write) && !v.wants_durability()
            };
            if plain && self.remap(&mut bio, data_block).is_ok() {
                self.track(&mut bio);
                remapped.push(bio);
            } else {
                requeued.push(bio);
            }
        }
        (remapped, requeued)
    }

    /// Submits bios [`Self::remap_parked`] remapped.
    fn submit_remapped(&self, mut bios: BioList) {
        while let Some(bio) = bios.pop() {
            bio.submit();
        }
    }
}
