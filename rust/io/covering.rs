// SPDX-License-Identifier: GPL-2.0
//! Writes that together cover a block: a worker's batch of deferred bios is
//! searched for plain writes to one virtual block that is unmapped (or
//! shared) which, between them, write every sector of it once. Those are
//! provisioned together: one allocation and one cell, all of them submitted
//! to the new block at once, no zeroing and no copy (the block holds only
//! their data), and the mapping inserted when the last has ended. A
//! sequential stream of small writes at some queue depth fills its blocks
//! like this; dm-thin skips the fill only for a single bio that covers its
//! block.
//!
//! The same happens later for a write at the start of a new block whose
//! fill was deferred ([`ThinIo::continue_provision`]): once it has been
//! written, the writes that parked on its cell meanwhile join it, and kcopyd
//! fills only what none of them writes.
//!
//! The search allocates with `GFP_NOWAIT` (a worker on the I/O path must
//! not wait for reclaim): without memory the bios just go one by one.
//!
//! If one of them fails, the block is not mapped: the failed writes end
//! with their error and the others go through a worker again, one by one,
//! as if they had just arrived (the block's other sectors then get zeroes
//! or the shared block's data, as a lone partial write's would).

use core::sync::atomic::Ordering;
use kernel::{alloc::KVec, prelude::*, sync::Arc};

use super::ThinIo;
use crate::{
    dm::pool_mode::{BioAction, BioDir, IoError, Lookup, WorkItem},
    glue::{
        bio::{BioKind, BioList, OwnedBio, Provision},
        hooked::MAX_COVERING,
    },
    pool::{cells::Parking, PoolState, Reuse},
};

/// The most bios of a batch searched together (a worker may find many more
/// on its list after a commit held it up).
const CHUNK: usize = 256;

/// What a batch's search needs of one bio.
#[derive(Clone, Copy)]
struct Reach {
    /// The virtual blocks it touches, `[first, last]` (none: `first > last`).
    first: u64,
    last: u64,
    /// A plain write inside one block, not the whole of it, that a
    /// provision can hook: it may be one of a covering set.
    partial_write: bool,
}

impl ThinIo {
    /// A worker's batch from the deferred lane: the covering sets provisioned
    /// together ([`Self::provision_covering`]), then every other bio in
    /// its order. A set's block is touched by no other bio of the batch, so
    /// nothing is reordered against a bio of the same block.
    pub(super) fn process_batch(self: &Arc<Self>, mut bios: BioList) {
        while let Some(first) = bios.pop() {
            if bios.is_empty() {
                self.process(first);
                return;
            }
            self.process_chunk(first, &mut bios);
        }
    }

    /// `first` and up to [`CHUNK`] - 1 more bios of `bios`, searched
    /// together.
    fn process_chunk(self: &Arc<Self>, first: OwnedBio, bios: &mut BioList) {
        let mut batch: KVec<Option<OwnedBio>> = KVec::new();
        let mut reach: KVec<Reach> = KVec::new();
        if batch.reserve(CHUNK, GFP_NOWAIT).is_err() || reach.reserve(CHUNK, GFP_NOWAIT).is_err() {
            // No memory: one by one.
            self.process(first);
            while let Some(bio) = bios.pop() {
                self.process(bio);
            }
            return;
        }
        let mut next = Some(first);
        while let Some(mut bio) = next.take() {
            // Reserved above: neither push can fail.
            let _ = reach.push(self.reach(&mut bio), GFP_NOWAIT);
            let _ = batch.push(Some(bio), GFP_NOWAIT);
            if batch.len() < CHUNK {
                next = bios.pop();
            }
        }
        self.provision_covering_sets(&mut batch, &reach);
        for bio in batch.into_iter().flatten() {
            self.process(bio);
        }
    }

    fn reach(&self, bio: &mut OwnedBio) -> Reach {
        let per_bio = bio.has_per_bio();
        let v = bio.view();
        let (sector, nr_sectors) = (v.sector(), v.nr_sectors());
        let first = self.geometry.block_of(sector);
        let last = match nr_sectors {
            0 => {
                return Reach {
                    first: 1,
                    last: 0,
                    partial_write: false,
                }
            }
            n => self.geometry.block_of(sector.saturating_add(n - 1)),
        };
        let partial_write = per_bio
            && v.kind() == BioKind::Write
            && !v.wants_durability()
            && first == last
            && !self.geometry.covers_block(sector, nr_sectors)
            && !self.is_open(first);
        Reach {
            first,
            last,
            partial_write,
        }
    }

    /// Finds the covering sets of `batch` (taking their bios out of it) and
    /// provisions each.
    fn provision_covering_sets(self: &Arc<Self>, batch: &mut [Option<OwnedBio>], reach: &[Reach]) {
        // The partial writes, by virtual block.
        let mut writes: KVec<(u64, usize)> = KVec::new();
        for (i, r) in reach.iter().enumerate() {
            if r.partial_write && writes.push((r.first, i), GFP_NOWAIT).is_err() {
                return;
            }
        }
        if writes.len() < 2 {
            return;
        }
        writes.sort_unstable();
        let mut start = 0;
        while start < writes.len() {
            let vblock = writes[start].0;
            let end = writes[start..]
                .iter()
                .position(|&(b, _)| b != vblock)
                .map_or(writes.len(), |n| start + n);
            let members = &writes[start..end];
            start = end;
            if members.len() < 2 || members.len() > MAX_COVERING {
                continue;
            }
            // Any other bio touching the block keeps the set apart.
            let touched = reach
                .iter()
                .any(|r| !r.partial_write && r.first <= vblock && vblock <= r.last);
            if touched || !self.tiles(batch, members, vblock) {
                continue;
            }
            let mut set: KVec<OwnedBio> = KVec::new();
            if set.reserve(members.len(), GFP_NOWAIT).is_err() {
                continue;
            }
            for &(_, i) in members {
                if let Some(bio) = batch.get_mut(i).and_then(Option::take) {
                    // Reserved above: cannot fail.
                    let _ = set.push(bio, GFP_NOWAIT);
                }
            }
            self.provision_covering(set, vblock);
        }
    }

    /// True if the writes at `members` of `batch` write every sector of
    /// `vblock` once.
    fn tiles(&self, batch: &mut [Option<OwnedBio>], members: &[(u64, usize)], vblock: u64) -> bool {
        let mut ranges: KVec<(u64, u64)> = KVec::new();
        for &(_, i) in members {
            let Some(Some(bio)) = batch.get_mut(i) else {
                return false;
            };
            let v = bio.view();
            if ranges
                .push((v.sector(), v.nr_sectors()), GFP_NOWAIT)
                .is_err()
            {
                return false;
            }
        }
        self.geometry.tiles_block(vblock, &mut ranges)
    }

    /// Provisions `vblock` for `set`, writes that together cover it: if
    /// the block needs a provision or a sharing break, no provision of it
    /// is under way, and a block can be allocated at once, they are all
    /// submitted to the new block; the mapping goes in when they have all
    /// ended ([`Self::finish_covering`]). Otherwise each goes its own way.
    fn provision_covering(self: &Arc<Self>, set: KVec<OwnedBio>, vblock: u64) {
        let count = set.len();
        let mut set = set.into_iter();
        let Some(lead) = set.next() else {
            return;
        };
        let mut st = self.pool.lock_unblocked();
        if self.is_open(vblock) {
            // Opened since the search: each joins it.
            drop(st);
            self.process(lead);
            set.for_each(|bio| self.process(bio));
            return;
        }
        let lead = match st.quiesced() {
            true => Err(lead),
            false => match st.try_park(&**self, vblock, lead) {
                Parking::NotHeld(bio) => Ok(bio),
                // A provision of the block is under way: the others park
                // on its cell (or wait) one by one, as the lead did.
                Parking::Parked => {
                    drop(st);
                    set.for_each(|bio| self.process(bio));
                    return;
                }
                Parking::HeldByOther(bio) => Err(bio),
            },
        };
        let (lead, provision) = match lead {
            Ok(bio) => (bio, self.plan_covering(&mut st, vblock)),
            Err(bio) => (bio, None),
        };
        drop(st);
        let mut writes: KVec<(OwnedBio, u64)> = KVec::new();
        let start = provision.and_then(|p| self.geometry.block_start(p.data_block));
        let (Some(provision), Some(start), Ok(())) =
            (provision, start, writes.reserve(count, GFP_NOWAIT))
        else {
            if let Some(provision) = provision {
                // Not started: this frees the block.
                let _ = self.end_provision(&provision, false, None);
            }
            // Each on its own: the worker's path decides (and reports) it.
            self.process(lead);
            set.for_each(|bio| self.process(bio));
            return;
        };
        for mut bio in Iterator::chain(core::iter::once(lead), set) {
            // Inside the block (checked by the search): no overflow.
            let to = start.saturating_add(self.geometry.offset_in_block(bio.view().sector()));
            // Reserved above: cannot fail.
            let _ = writes.push((bio, to), GFP_NOWAIT);
        }
        if let Err(writes) = OwnedBio::submit_covering(self, provision, &self.pool_bdev, writes) {
            // Not hooked (checked before the search): each on its own.
            let _ = self.end_provision(&provision, false, None);
            for (bio, _) in writes {
                self.process(bio);
            }
        }
    }

    /// Under the pool lock: if `vblock` needs a provision or a sharing
    /// break for a write and one can start now, allocates its block and
    /// opens its cell. `None` (and nothing changed) otherwise.
    fn plan_covering(&self, st: &mut PoolState, vblock: u64) -> Option<Provision> {
        let found = st
            .lookup_for(self.dev_id, vblock, true, self.share_gen())
            .ok()?;
        let lookup = match found {
            None => Lookup::Unmapped,
            Some((_, shared)) => Lookup::Mapped { shared },
        };
        let action = st
            .mode_state()
            .decide_bio(WorkItem::Cell, BioDir::Write, lookup);
        if !matches!(action, BioAction::Provision | BioAction::BreakSharing)
            || !st.cell_available(self.dev_id, vblock)
            || st.reuse_state() != Reuse::Ready
        {
            return None;
        }
        let data_block = st.alloc_data_block(false).ok()?;
        let Some(epoch) = st.open_cell(self, vblock) else {
            st.release_data_block(data_block);
            return None;
        };
        Some(Provision {
            vblock,
            data_block,
            epoch,
            breaks_sharing: found.is_some(),
            deferred: None,
        })
    }

    /// The lead of a provision whose fill was deferred came back, its own
    /// write ended (`written` if it succeeded): the writes to the block
    /// that parked on its cell meanwhile (plain ones, none overlapping
    /// another or the lead) are submitted into the new block, kcopyd fills
    /// only the parts none of them writes, and the lead comes back once all
    /// have ended, with them as its members ([`Self::finish_covering`]).
    pub(super) fn continue_provision(
        self: &Arc<Self>,
        mut lead: OwnedBio,
        provision: Provision,
        written: bool,
    ) {
        let rest = provision.deferred;
        let provision = Provision {
            deferred: None,
            ..provision
        };
        if !written {
            // Its error stays on it; the block is given back.
            self.finish_provision(lead, &provision, false);
            return;
        }
        let (Some(rest), Some(block), Some((sector, nr_sectors))) = (
            rest,
            self.geometry.block_start(provision.data_block),
            lead.hooked_range(),
        ) else {
            // Not reached (the provision deferred its fill, and the hook
            // saved where the lead started): the block cannot be filled.
            let _ = self.end_provision(&provision, false, None);
            lead.complete(Some(IoError::Io));
            return;
        };
        let bs = self.geometry.sectors();
        let lead_part = (self.geometry.offset_in_block(sector), nr_sectors);
        let mut parts: KVec<(u64, u64)> = KVec::new();
        let mut members: KVec<(OwnedBio, u64)> = KVec::new();
        let room = parts.reserve(MAX_COVERING, GFP_NOWAIT).is_ok()
            && members.reserve(MAX_COVERING, GFP_NOWAIT).is_ok();
        // (Reserved: the pushes below cannot fail.)
        let _ = parts.push(lead_part, GFP_NOWAIT);
        if room {
            let mut st = self.pool.lock();
            let mut parked = st.take_parked(&**self, provision.vblock);
            let mut keep = BioList::new();
            while let Some(mut bio) = parked.pop() {
                match self.fits(&mut bio, provision.vblock, &parts) {
                    // Members and gaps (at most one more than the parts)
                    // are the lead's parts: at most MAX_COVERING.
                    Some(part) if 2 * members.len() + 4 < MAX_COVERING => {
                        let _ = parts.push(part, GFP_NOWAIT);
                        let _ = members.push((bio, block.saturating_add(part.0)), GFP_NOWAIT);
                    }
                    _ => keep.push(bio),
                }
            }
            st.return_parked(&**self, provision.vblock, keep);
        }
        // The parts of the block nobody writes.
        parts.sort_unstable();
        let mut gaps: KVec<(u64, u64)> = KVec::new();
        let mut listed = gaps.reserve(parts.len() + 1, GFP_NOWAIT).is_ok();
        let mut next = 0;
        for &(offset, count) in Iterator::chain(parts.iter(), core::iter::once(&(bs, 0))) {
            if offset > next {
                listed &= gaps.push((next, offset - next), GFP_NOWAIT).is_ok();
            }
            next = next.max(offset.saturating_add(count));
        }
        if !listed {
            // No memory for the list of gaps: the block cannot be filled.
            self.fail_continued(lead, members, &provision);
            return;
        }
        let kcopyd = (&self.pool.kcopyd, rest, block);
        if let Err((lead, members)) =
            lead.submit_rest(self, provision, (&self.pool_bdev, members), kcopyd, &gaps)
        {
            self.fail_continued(lead, members, &provision);
        }
    }

    /// Where `bio`, parked on the cell of `vblock`, would go into the
    /// block, `(offset, count)`, if it is a plain write inside it that
    /// overlaps none of `parts`.
    fn fits(&self, bio: &mut OwnedBio, vblock: u64, parts: &[(u64, u64)]) -> Option<(u64, u64)> {
        let per_bio = bio.has_per_bio();
        let v = bio.view();
        let (sector, nr_sectors) = (v.sector(), v.nr_sectors());
        let plain =
            per_bio && v.kind() == BioKind::Write && !v.wants_durability() && nr_sectors > 0;
        let inside = self.geometry.block_of(sector) == vblock
            && self
                .geometry
                .block_of(sector.saturating_add(nr_sectors - 1))
                == vblock;
        if !plain || !inside {
            return None;
        }
        let (offset, end) = (
            self.geometry.offset_in_block(sector),
            self.geometry.offset_in_block(sector) + nr_sectors,
        );
        let overlaps = parts
            .iter()
            .any(|&(o, c)| offset < o.saturating_add(c) && o < end);
        (!overlaps).then_some((offset, nr_sectors))
    }

    /// A continued provision could not go on: its block is given back, the
    /// lead (written into it) and the members (not yet) go through a worker
    /// again.
    fn fail_continued(
        &self,
        mut lead: OwnedBio,
        members: KVec<(OwnedBio, u64)>,
        provision: &Provision,
    ) {
        let _ = self.end_provision(provision, false, None);
        let mut again = BioList::new();
        for (bio, _) in members {
            again.push(bio);
        }
        match lead.rewind() {
            true => again.push(lead),
            false => lead.complete(Some(IoError::Io)),
        }
        self.requeue(again);
    }

    /// A covering set came back (its `lead` with `members`): its writes all
    /// ended. Map the block if they all succeeded, then let them complete;
    /// otherwise the failed ones end with their errors and the others go
    /// through a worker again.
    pub(super) fn finish_covering(
        &self,
        lead: OwnedBio,
        mut members: BioList,
        provision: &Provision,
    ) {
        let mut set = BioList::new();
        set.push(lead);
        set.append(&mut members);
        let mut all_written = true;
        let mut check = BioList::new();
        while let Some(bio) = set.pop() {
            all_written &= !bio.failed();
            check.push(bio);
        }
        let mapped = self.end_provision(provision, all_written, None);
        if mapped.is_ok() {
            self.counters.coalesced.fetch_add(1, Ordering::Relaxed);
        }
        let mut again = BioList::new();
        while let Some(mut bio) = check.pop() {
            match mapped {
                Ok(()) => bio.finish(),
                Err(e) if all_written => bio.complete(Some(e)),
                Err(_) if bio.failed() => bio.finish(),
                Err(_) => match bio.rewind() {
                    true => again.push(bio),
                    false => bio.complete(Some(IoError::Io)),
                },
            }
        }
        self.requeue(again);
    }
}
