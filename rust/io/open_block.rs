// SPDX-License-Identifier: GPL-2.0
//! Blocks held open for more writes. A plain write at the start of a new
//! block (zeroing on) does not wait for its block to be zeroed: the block is
//! *held open*, and that write and every plain write to the block after it
//! are submitted straight into it and complete as soon as they are written
//! (`glue/open_block.rs`), so a stream of small writes never waits for its
//! blocks' provisions. The block is closed — kcopyd zeroes only what no
//! write wrote, and once that and every write into it ended the mapping goes
//! in ([`ThinIo::open_block_ended`]) — as soon as one of these holds:
//! - its writes cover it (nothing is zeroed);
//! - another bio needs the block: a read, a durable write, a write that
//!   leaves the block, a discard of it;
//! - a commit is about to be made (periodic, a flush, a message, the pool's
//!   status), the pool or the thin is being suspended, or the thin's status
//!   is read.
//!
//! Until it is mapped nothing can read the block: a read waits on its cell
//! and closes it first. Nor can a flush pass it: holding a block open notes
//! a change of the thin (`PoolState::note_unmapped_writes`), so flushes and
//! durable bios wait for a commit, whose settling closes the block first and
//! waits for its provision. If the block cannot be mapped (a fill error, a
//! failed write into it, the pool failing), its writes are lost although
//! they completed: the thin's changes count as lost, as after an aborted
//! transaction, and its flushes and durable bios fail from then on.

use core::sync::atomic::Ordering;
use kernel::{prelude::*, sync::Arc};

use super::ThinIo;
use crate::{
    dm::written_ranges::WrittenRanges,
    glue::{
        bio::{Bio, BioKind, OwnedBio, Provision},
        hooked::MAX_COVERING,
        kcopyd::Rest,
        open_block::{OpenBlock as OpenHandle, OpenOwner, WriteSlot},
        queue::IoQueue,
    },
};

/// The most blocks one thin holds open at once; a provision beyond them
/// fills its block at once, as before.
pub(super) const MAX_OPEN: usize = 16;

/// A block held open.
pub(crate) struct OpenBlock {
    vblock: u64,
    handle: OpenHandle<ThinIo>,
    written: WrittenRanges,
    /// Writes submitted into it (the lead's parts: below [`MAX_COVERING`]).
    writes: usize,
    /// Its first sector on the pool device.
    block: u64,
}

/// What [`ThinIo::reserve_join`] found.
enum Join {
    /// The block is not open.
    NotOpen,
    /// It is, but the write cannot join it (or it was no plain write).
    Refused,
    /// The write is counted in: submit it with the slot, to this sector.
    Slot(WriteSlot<ThinIo>, u64),
}

/// What [`ThinIo::offer_to_open`] did with a bio.
pub(super) enum Offer {
    /// Submitted into its open block.
    Joined,
    /// Its block is not open (or was closed for it): it goes its way.
    Declined(OwnedBio),
}

impl ThinIo {
    /// Holds `provision`'s block (its first sector on the pool device:
    /// `block`) open and submits `bio`, a plain write of `part` (`(offset,
    /// count)`, not the whole block) into it. Called under the pool lock,
    /// which checked that the pool allows it (`PoolState::may_hold_open`)
    /// and noted the unmapped writes: only then are blocks added. Hands both
    /// back if there is no memory.
    pub(super) fn hold_open(
        self: &Arc<Self>,
        bio: OwnedBio,
        provision: Provision,
        (block, part): (u64, (u64, u64)),
    ) -> Result<(), (OwnedBio, Provision)> {
        let mut written = WrittenRanges::new(self.geometry.sectors());
        let handle = match written.add(part.0, part.1) && bio.has_per_bio() {
            true => OpenHandle::new(self, provision),
            false => Err(ENOMEM),
        };
        let Ok(handle) = handle else {
            return Err((bio, provision));
        };
        handle
            .reserve()
            .submit(bio, &self.pool_bdev, block.saturating_add(part.0));
        let b = OpenBlock {
            vblock: provision.vblock,
            handle,
            written,
            writes: 1,
            block,
        };
        let mut open = self.open.lock();
        // Published only now that its first write is counted: a close from
        // here on leaves that write's sectors alone. (Room for MAX_OPEN is
        // reserved in `new`.)
        let published = match open.len() < MAX_OPEN && !self.no_open.load(Ordering::Acquire) {
            true => open.push_within_capacity(b).map_err(|e| e.0),
            false => Err(b),
        };
        if let Err(b) = published {
            drop(open);
            self.close_block(b);
            return Ok(());
        }
        self.open_count.store(open.len(), Ordering::Release);
        drop(open);
        self.counters.held_open.fetch_add(1, Ordering::Relaxed);
        // A suspend of the thin that began meanwhile closed what it saw.
        if self.no_open.load(Ordering::Acquire) {
            self.close_open_blocks();
        }
        Ok(())
    }

    /// Whether the block of a plain write of `part` should be held open
    /// rather than filled at once: a write at its start, with no more than
    /// [`MAX_OPEN`] blocks open and no suspend under way.
    pub(super) fn wants_open(&self, part: (u64, u64)) -> bool {
        part.0 == 0
            && part.1 < self.geometry.sectors()
            && !self.no_open.load(Ordering::Acquire)
            && self.open_count.load(Ordering::Acquire) < MAX_OPEN
    }

    /// A bio for `vblock` met on a worker, under the pool lock: a plain
    /// write inside the block joins it if it is held open (closing it if
    /// the block is then covered); any other bio closes it and goes its
    /// way, to wait on the block's cell.
    pub(super) fn offer_to_open(&self, mut bio: OwnedBio, vblock: u64) -> Offer {
        if self.open_count.load(Ordering::Acquire) == 0 {
            return Offer::Declined(bio);
        }
        let part = self.plain_write_part(&bio.view()).map(|(_, part)| part);
        match self.reserve_join(vblock, part, true) {
            Join::Slot(slot, to) => {
                slot.submit(bio, &self.pool_bdev, to);
                Offer::Joined
            }
            Join::NotOpen | Join::Refused => Offer::Declined(bio),
        }
    }

    /// The map call's share of the work: a plain write inside a block held
    /// open joins it right there, without a trip through a worker (dm
    /// submits it once the map call returns it remapped). False, and the
    /// bio untouched, for any other bio (a worker then decides, closing the
    /// block if the bio cannot join it).
    pub(super) fn join_in_map(&self, bio: &mut Bio<'_>) -> bool {
        if self.open_count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let Some((vblock, part)) = self.plain_write_part(bio) else {
            return false;
        };
        match self.reserve_join(vblock, Some(part), false) {
            // Has per-bio data (`plain_write_part`): cannot fail.
            Join::Slot(slot, to) => slot.hook(bio, &self.pool_bdev, to).is_ok(),
            Join::NotOpen | Join::Refused => false,
        }
    }

    /// A plain write (with per-bio data, no PREFLUSH or FUA) inside one
    /// block: that block, and where the write goes in it, `(offset, count)`.
    fn plain_write_part(&self, bio: &Bio<'_>) -> Option<(u64, (u64, u64))> {
        let (sector, n) = (bio.sector(), bio.nr_sectors());
        let vblock = self.geometry.block_of(sector);
        let plain = bio.has_per_bio() && bio.kind() == BioKind::Write && !bio.wants_durability();
        (plain && n > 0 && self.geometry.block_of(sector.saturating_add(n - 1)) == vblock)
            .then(|| (vblock, (self.geometry.offset_in_block(sector), n)))
    }

    /// Counts a write of `part` into `vblock`'s open block, if there is one
    /// and the write fits (`None`: not a plain write). A block the write
    /// covers is closed (after the count, so its gaps leave the write's
    /// sectors alone; nothing to zero, nothing that sleeps); one it cannot
    /// join is closed if `close_refused`.
    fn reserve_join(&self, vblock: u64, part: Option<(u64, u64)>, close_refused: bool) -> Join {
        let mut open = self.open.lock();
        let Some(i) = open.iter().position(|b| b.vblock == vblock) else {
            return Join::NotOpen;
        };
        let b = &mut open[i];
        let fits = part.filter(|&(offset, count)| {
            b.writes + 1 < MAX_COVERING / 2 && b.written.add(offset, count)
        });
        let (joined, close) = match fits {
            Some((offset, _)) => {
                b.writes += 1;
                let joined = (b.handle.reserve(), b.block.saturating_add(offset));
                (Some(joined), b.written.covers())
            }
            None => (None, close_refused),
        };
        let closing = match close {
            true => self.take_open(&mut open, i),
            false => None,
        };
        drop(open);
        if let Some(b) = closing {
            self.close_block(b);
        }
        match joined {
            Some((slot, to)) => Join::Slot(slot, to),
            None => Join::Refused,
        }
    }

    /// Takes the open block at `i` out of `open`.
    fn take_open(&self, open: &mut KVec<OpenBlock>, i: usize) -> Option<OpenBlock> {
        let b = open.remove(i).ok();
        self.open_count.store(open.len(), Ordering::Release);
        b
    }

    /// True if `vblock` is held open.
    pub(super) fn is_open(&self, vblock: u64) -> bool {
        self.open_count.load(Ordering::Acquire) > 0
            && self.open.lock().iter().any(|b| b.vblock == vblock)
    }

    /// Closes the open blocks in `[first, end)` (a discard of them is
    /// coming); returns how many.
    pub(super) fn close_open_range(&self, first: u64, end: u64) -> usize {
        self.close_open_where(|b| first <= b.vblock && b.vblock < end)
    }

    /// Closes every open block of this thin; returns how many.
    pub(crate) fn close_open_blocks(&self) -> usize {
        self.close_open_where(|_| true)
    }

    fn close_open_where(&self, mut which: impl FnMut(&OpenBlock) -> bool) -> usize {
        if self.open_count.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut closing: [Option<OpenBlock>; MAX_OPEN] = [const { None }; MAX_OPEN];
        let mut n = 0;
        let mut open = self.open.lock();
        let mut i = 0;
        while i < open.len() && n < MAX_OPEN {
            if which(&open[i]) {
                closing[n] = self.take_open(&mut open, i);
                n += 1;
            } else {
                i += 1;
            }
        }
        drop(open);
        // Outside the spinlock: kcopyd may sleep for a job.
        for b in closing.into_iter().flatten() {
            self.close_block(b);
        }
        n
    }

    /// kcopyd zeroes what no write wrote; once that and every write into
    /// the block ended, [`Self::open_block_ended`] maps it.
    fn close_block(&self, b: OpenBlock) {
        let OpenBlock {
            handle,
            written,
            block,
            ..
        } = b;
        handle.close(
            (&self.pool.kcopyd, Rest::Zeroes, block),
            &self.pool_bdev,
            written.gaps(),
        );
    }

    /// A block held open was closed but could not be mapped: the writes
    /// that completed into it are lost.
    pub(super) fn open_block_lost(&self) {
        self.changed.store(u64::MAX, Ordering::Release);
    }
}

impl OpenOwner for ThinIo {
    fn open_queue(&self) -> &IoQueue {
        &self.pool.completion_wq
    }

    /// Maps the block (or gives it back), then the bios that waited on its
    /// cell go on. Runs on the completion queue: it waits for nothing but
    /// the pool lock.
    fn open_block_ended(owner: &Arc<Self>, provision: Provision, written: bool, completed: bool) {
        if owner.end_provision(&provision, written, None).is_err() && completed {
            owner.open_block_lost();
        }
    }
}
