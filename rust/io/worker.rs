// SPDX-License-Identifier: GPL-2.0
//! The workers: what happens to a bio the map call deferred (a read of a
//! block the last commit maps, or a write of one it maps unshared, without
//! the pool lock; else a lookup under it, the mode's decision, a provision,
//! a read of a hole, a discard).

use kernel::{prelude::*, sync::Arc};

use super::{open_block::Offer, ThinIo};
use crate::{
    dm::pool_mode::{BioAction, BioDir, DiscardAction, IoError, Lookup, WorkItem},
    glue::bio::{BioKind, OwnedBio},
    pool::cells::Parking,
};

impl ThinIo {
    pub(super) fn process(self: &Arc<Self>, mut bio: OwnedBio) {
        if bio.commit_then_finish_pending() {
            // Parked until resume, it keeps its mark.
            let Some((mut bio, committed)) = self.commit_for(bio, true) else {
                return;
            };
            bio.take_commit_then_finish();
            match committed {
                Ok(()) => bio.finish(),
                Err(e) => bio.complete(Some(e)),
            }
            return;
        }
        match bio.view().kind() {
            BioKind::Read => self.process_rw(bio, BioDir::Read, false),
            BioKind::Write => self.process_rw(bio, BioDir::Write, false),
            BioKind::EmptyFlush => match self.commit_for(bio, true) {
                Some((mut bio, Ok(()))) => {
                    bio.view().set_bdev(&self.pool_bdev);
                    bio.submit();
                }
                Some((bio, Err(e))) => bio.complete(Some(e)),
                None => {}
            },
            BioKind::Discard => self.process_discard(bio),
            BioKind::Other => bio.complete(Some(IoError::Io)),
        }
    }

    /// A read or write; `after_commit` once a provision for it committed to
    /// free space (see `PoolState::alloc_data_block`).
    pub(super) fn process_rw(self: &Arc<Self>, mut bio: OwnedBio, dir: BioDir, after_commit: bool) {
        let sector = bio.view().sector();
        let vblock = self.geometry.block_of(sector);
        let bio = match self.remap_committed(bio, vblock, dir) {
            Ok(()) => return,
            Err(bio) => bio,
        };
        let mut st = self.pool.lock_unblocked();
        let Some(bio) = self.unless_quiesced(&st, bio) else {
            return;
        };
        let bio = match self.offer_to_open(bio, vblock) {
            Offer::Joined => return,
            Offer::Declined(bio) => bio,
        };
        let mut bio = match st.try_park(&**self, vblock, bio) {
            Parking::Parked => return,
            Parking::HeldByOther(bio) => {
                // Another table of this thin provisions the block: the bio
                // stays this target's, on its waiters (under the pool lock:
                // the cell's close requeues them), not on a cell that
                // target may take away with it.
                self.waiters.lock().push(bio);
                return;
            }
            Parking::NotHeld(bio) => bio,
        };
        let write = dir == BioDir::Write;
        let found = match st.lookup_for(self.dev_id, vblock, write, self.share_gen()) {
            Ok(found) => found,
            Err(_) => {
                drop(st);
                bio.complete(Some(IoError::Io));
                return;
            }
        };
        let lookup = match found {
            None => Lookup::Unmapped,
            Some((_, shared)) => Lookup::Mapped { shared },
        };
        match (
            st.mode_state().decide_bio(WorkItem::Cell, dir, lookup),
            found,
        ) {
            (BioAction::Remap, Some((data_block, _))) => {
                // Under the lock the lookup was made under: an unmapping of
                // the block comes after, and waits for the bio.
                self.track(&mut bio);
                drop(st);
                let durable = bio.view().wants_durability();
                self.commit_and_submit(bio, durable, data_block);
            }
            (BioAction::ReadHole, _) => {
                drop(st);
                self.read_hole(bio);
            }
            (BioAction::Provision | BioAction::BreakSharing, _) => {
                let old = found.map(|(data_block, _)| data_block);
                self.provision(st, bio, vblock, old, after_commit);
            }
            (BioAction::Queue, _) => self.hold(st, bio),
            (BioAction::Error(e), _) => {
                drop(st);
                bio.complete(Some(e));
            }
            // Remap of a hole: only empty writes, which never get here.
            (BioAction::Remap, None) => {
                drop(st);
                bio.complete(None);
            }
        }
    }

    /// A read of a block the last commit maps, or a write of one it maps
    /// unshared, while this device has no change that commit does not
    /// cover: remapped from a walk of the committed tree, without the pool
    /// lock, so that such lookups run side by side on every CPU and never
    /// wait for a commit or a provision. The lock is taken after the bio is
    /// on its way, only to cache the block's leaf, and not waited for. Gives
    /// the bio back when the walk cannot answer (a hole, a newer change, a
    /// commit meanwhile) or the write must break sharing: the locked path
    /// decides then.
    ///
    /// A write needs no cell: no provision or copy can be under way for a
    /// block the last commit maps unshared while the device has not changed
    /// since (breaking sharing is for shared blocks only, and its mapping is
    /// a change), and sharing is judged by the device's snapshot time now,
    /// which a snapshot raises before its message returns.
    fn remap_committed(&self, mut bio: OwnedBio, vblock: u64, dir: BioDir) -> Result<(), OwnedBio> {
        if self.pool.flags.fails_io() || bio.view().wants_durability() {
            return Err(bio);
        }
        // Before the lookup, as in the map call: a block unmapped after it
        // is neither reused nor discarded before the bio completes.
        let Some(token) = self.pool.tracker.enter() else {
            return Err(bio);
        };
        let found = self
            .pool
            .committed
            .lookup_leaf(self.dev_id, vblock, || self.changed_gen());
        let Some(answer) = found.filter(|a| dir == BioDir::Read || !self.shares(&a.mapping)) else {
            self.pool.tracker.exit(token);
            return Err(bio);
        };
        bio.track(&self.pool.tracker, token);
        match self.remap(&mut bio, answer.mapping.data_block) {
            Ok(()) => bio.submit(),
            Err(e) => bio.complete(Some(e)),
        }
        self.counters.unlocked_lookups.inc();
        if let Some(st) = self.pool.try_lock() {
            let (changed, gen) = (self.changed_gen(), self.share_gen());
            st.cache_committed_leaf(self.dev_id, &answer.stamp, changed, &answer.leaf, gen);
        }
        Ok(())
    }

    /// A read of an unprovisioned block: from the external origin where it
    /// reaches, zeroes elsewhere.
    pub(super) fn read_hole(&self, mut bio: OwnedBio) {
        let sector = bio.view().sector();
        let in_origin = self.origin.as_ref().map_or(0, |o| o.sectors_from(sector));
        bio.zero_fill();
        match &self.origin {
            Some(origin) if in_origin > 0 => {
                // Like dm-thin: read what the origin has, the tail stays
                // zero-filled.
                let mut v = bio.view();
                if v.nr_sectors() > in_origin {
                    v.truncate(in_origin);
                }
                v.set_bdev(&origin.bdev);
                bio.submit();
            }
            _ => bio.complete(None),
        }
    }

    pub(super) fn process_discard(&self, mut bio: OwnedBio) {
        let (sector, nr_sectors) = {
            let v = bio.view();
            (v.sector(), v.nr_sectors())
        };
        let (first, end) = self.geometry.whole_blocks(sector, nr_sectors);
        // Writes into a block held open have completed: the discard must
        // come after them, so their blocks close and are mapped first (the
        // settling waits for them; a delete in pieces does not wait).
        if self.close_open_range(first, end) > 0 {
            drop(self.pool.lock_settled_or_deleting());
        }
        let mut st = self.pool.lock_unblocked();
        let Some(bio) = self.unless_quiesced(&st, bio) else {
            return;
        };
        match st.mode_state().decide_discard(WorkItem::Bio) {
            DiscardAction::Process => {}
            DiscardAction::Ignore => {
                drop(st);
                bio.complete(None);
                return;
            }
            DiscardAction::Error(e) => {
                drop(st);
                bio.complete(Some(e));
                return;
            }
        }
        let mut passdown: KVec<u64> = KVec::new();
        let pass_down = st.features().discard_passdown;
        let unmapped = st.unmap_range(self, first, end, |data_block| {
            if pass_down {
                // A failed push only loses the passdown of this block.
                let _ = passdown.push(data_block, GFP_KERNEL);
            }
        });
        if unmapped.is_err() {
            drop(st);
            bio.complete(Some(IoError::Io));
            return;
        }
        // Bios sent to the freed blocks before they were unmapped may still
        // be in flight: the passdown waits for them (asynchronously; the
        // discard itself is done), and the blocks are not reused before it
        // has been issued.
        let queued = !passdown.is_empty()
            && st.queue_passdown(self, passdown, self.pool_bdev.clone(), self.geometry);
        drop(st);
        if queued {
            self.pool.wake_after_grace_period();
        }
        bio.complete(None);
    }
}
