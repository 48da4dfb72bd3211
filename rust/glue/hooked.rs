// SPDX-License-Identifier: GPL-2.0
//! Handing hooked bios back: a provision submits a bio that writes into its
//! new block together with the kcopyd jobs that fill the rest of the block,
//! so that the last of their completions (a bio end or a kcopyd notify, in
//! interrupt context) pushes the bio on its owner's completion lane instead
//! of ending it
//! (`Documentation/io-path.md`, "Hook states"). What the per-bio data holds
//! meanwhile is in `bio/hook.rs`.
//!
//! The per-bio data holds a reference to the owner (an `Arc`) from the hook
//! until a worker takes the provision back ([`OwnedBio::take_provision`]) or
//! the bio ends, so an owner cannot go while a bio may still come back to it.
//! The completion only borrows it; a worker lets it go.

use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU16, Ordering},
};
use kernel::{
    alloc::KVec,
    bindings,
    sync::{Arc, ArcBorrow},
};

use super::{
    bindings as dm,
    bio::{pending_per_bio, HookState, OwnedBio, PerBio, Provision, SavedIter},
    deferred::{CpuQueues, Drain},
    device::BdevHandle,
    kcopyd::{Kcopyd, Rest},
    queue::IoQueue,
};

/// Whoever gets a hooked bio back when its write or fill completes: the
/// completion (in interrupt context) pushes the bio on the lists named here,
/// whose worker then calls the owner's [`Drain::drain`].
pub(crate) trait Requeue: Drain + Sized {
    /// The per-CPU lists hooked bios come back on, and the queue of their
    /// workers.
    fn completion_lane(&self) -> (&CpuQueues<Self>, &IoQueue);
}

/// Hands a hooked bio back to the owner its per-bio data names.
///
/// # Safety
/// `raw` is a bio dm lent to our map call with per-bio data, hooked by
/// [`OwnedBio::submit_hooked`] with an owner of type `T`; its write and the
/// kcopyd jobs filling the rest of its block have all ended, and nothing
/// else touches it or its per-bio data.
unsafe fn hand_back<T: Requeue>(raw: NonNull<bindings::bio>) {
    // It is ours again until we end it.
    let mut bio = OwnedBio { raw, per_bio: true };
    let Some(ctx) = bio.per_bio() else {
        return;
    };
    ctx.state = HookState::Completed;
    if ctx.fill_failed.load(Ordering::Relaxed) {
        // SAFETY: we own the bio again. A write that succeeded into a block
        // whose fill failed fails too: its block is not mapped.
        unsafe {
            let status = &mut (*raw.as_ptr()).bi_status;
            if *status == 0 {
                *status = dm::RTHIN_BLK_STS_IOERR;
            }
        }
    }
    // SAFETY: per the contract, `owner` holds a reference to a `T`, which
    // the per-bio data keeps until a worker has taken the bio from the lists
    // (`take_provision`) or ended it; `push` touches neither the owner nor
    // its lists once the bio is on them.
    let owner = unsafe { ArcBorrow::<T>::from_raw(ctx.owner.cast()) };
    let (lists, wq) = owner.completion_lane();
    lists.push(wq, bio);
}

/// One part of a hooked bio's I/O (its write or a kcopyd job) ended; the
/// last to end hands the bio back.
///
/// # Safety
/// `raw` is a bio hooked by [`OwnedBio::submit_hooked`] with an owner of
/// type `T`, and `ctx` its per-bio data; the part ending was counted in
/// `parts_pending` and ends once.
unsafe fn part_done<T: Requeue>(raw: NonNull<bindings::bio>, ctx: &PerBio) {
    // AcqRel: the last part sees what the others did to the bio (its
    // status, the restored end_io, `fill_failed`) before it takes it.
    if ctx.parts_pending.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: every part has ended; per the contract otherwise.
        unsafe { hand_back::<T>(raw) };
    }
}

/// Lets go of the owner reference a hook stored in the per-bio data.
///
/// # Safety
/// `owner` came from `Arc::<T>::into_raw` and is let go once.
unsafe fn drop_owner<T: Requeue>(owner: *const core::ffi::c_void) {
    // SAFETY: per the contract.
    drop(unsafe { Arc::<T>::from_raw(owner.cast()) });
}

/// The completion of a bio submitted by [`OwnedBio::submit_hooked`].
///
/// # Safety
/// Set only by `submit_hooked`, whose per-bio data holds an owner of type
/// `T`.
unsafe extern "C" fn hooked_endio<T: Requeue>(raw: *mut bindings::bio) {
    let Some(nn) = NonNull::new(raw) else {
        return;
    };
    // SAFETY: per the contract; the bio's write has ended and its hand-back
    // waits for this part.
    let ctx = unsafe { pending_per_bio(nn) };
    // SAFETY: the bio's own fields are ours again (kcopyd's jobs touch only
    // the per-bio data); `submit_hooked` saved dm's end_io.
    unsafe { (*raw).bi_end_io = ctx.saved_end_io };
    // SAFETY: per the contract; the write was counted as a part.
    unsafe { part_done::<T>(nn, ctx) };
}

/// kcopyd's notify callback for a job filling part of a hooked bio's block.
///
/// # Safety
/// `context` is a bio hooked by [`OwnedBio::submit_hooked`], whose per-bio
/// data holds an owner of type `T` and counted this job.
unsafe extern "C" fn fill_done<T: Requeue>(
    read_err: kernel::ffi::c_int,
    write_err: kernel::ffi::c_ulong,
    context: *mut core::ffi::c_void,
) {
    let Some(nn) = NonNull::new(context.cast::<bindings::bio>()) else {
        return;
    };
    // SAFETY: per the contract; the hand-back waits for this job.
    let ctx = unsafe { pending_per_bio(nn) };
    if read_err != 0 || write_err != 0 {
        ctx.fill_failed.store(true, Ordering::Relaxed);
    }
    // SAFETY: per the contract; the job was counted as a part.
    unsafe { part_done::<T>(nn, ctx) };
}

/// The completion of a member of writes submitted by
/// [`OwnedBio::submit_covering`]: the member waits on its lead's chain, not
/// completed, and the last part of the lead to end hands the lead back.
///
/// # Safety
/// Set only by `submit_covering`, whose lead's per-bio data holds an owner
/// of type `T` and counts this member's write as a part.
unsafe extern "C" fn member_endio<T: Requeue>(raw: *mut bindings::bio) {
    let Some(nn) = NonNull::new(raw) else {
        return;
    };
    // SAFETY: per the contract; the member's write has ended and nothing
    // else touches its per-bio data until its lead comes back.
    let ctx = unsafe { pending_per_bio(nn) };
    let Some(lead) = NonNull::new(ctx.lead) else {
        return;
    };
    // SAFETY: the bio's own fields are ours again; `submit_covering` saved
    // dm's end_io.
    unsafe { (*raw).bi_end_io = ctx.saved_end_io };
    // SAFETY: the lead is hooked and waits for this part, so its per-bio
    // data is live; its chain is touched only by atomics until then.
    let lead_ctx = unsafe { pending_per_bio(lead) };
    let mut head = lead_ctx.members.load(Ordering::Relaxed);
    loop {
        // SAFETY: the member is ours (ended): `bi_next` is free for our use.
        unsafe { (*raw).bi_next = head };
        // Release: the lead's taker sees `bi_next` (and the bio's status).
        match lead_ctx.members.compare_exchange_weak(
            head,
            raw,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(now) => head = now,
        }
    }
    // SAFETY: per the contract; the member's write was counted as a part.
    unsafe { part_done::<T>(lead, lead_ctx) };
}

/// The most writes [`OwnedBio::submit_covering`] takes at once.
pub(crate) const MAX_COVERING: usize = 1024;

/// How the rest of a hooked bio's new block is filled while the bio writes
/// its part.
pub(crate) struct BlockFill<'a> {
    /// The pool's kcopyd client.
    pub(crate) kcopyd: &'a Kcopyd,
    /// What goes into the rest.
    pub(crate) rest: Rest,
    /// The new block's first sector on the device the bio goes to.
    pub(crate) block: u64,
    /// The parts of the block the bio leaves out, `(offset, count)`
    /// (`BlockGeometry::uncovered`).
    pub(crate) parts: [(u64, u64); 2],
}

impl OwnedBio {
    /// Submits a bio that writes into a new block, moved to `sector` of
    /// `dev`, and starts the kcopyd jobs that write `fill`'s rest into the
    /// parts of the block it leaves out (none: the bio writes the whole
    /// block, or the pool skips zeroing), all at once. When the write and the
    /// jobs have all ended, the bio comes back to `owner`'s
    /// [`Requeue::completion_lane`] instead of completing (failed if any of
    /// them failed); the owner then finds the provision with
    /// [`Self::take_provision`]. Hands the bio back as it came (not moved:
    /// its sector still names its virtual block) if dm keeps no per-bio data
    /// for it.
    pub(crate) fn submit_hooked<T: Requeue>(
        mut self,
        owner: &Arc<T>,
        provision: Provision,
        (dev, sector): (&BdevHandle, u64),
        fill: Option<BlockFill<'_>>,
    ) -> Result<(), OwnedBio> {
        let raw = self.raw;
        let parts = fill.as_ref().map_or([(0, 0); 2], |f| f.parts);
        let jobs = parts.iter().filter(|&&(_, count)| count > 0).count();
        if self.per_bio().is_none() {
            return Err(self);
        }
        self.save_position();
        // The write and each job; at most 3, so the cast cannot truncate.
        self.hook_lead(owner, provision, 1 + jobs as u16);
        // SAFETY: we own the bio, not in flight; its completion is ours to
        // chain until it ends (`hooked_endio` restores it).
        unsafe { self.chain_end_io(Some(hooked_endio::<T>)) };
        self.view().remap_bdev(dev, sector);
        // From the first job on, the per-bio data is shared with the
        // completions: nothing here touches it again.
        if let Some(f) = &fill {
            for &part in parts.iter().filter(|&&(_, count)| count > 0) {
                let context = raw.as_ptr().cast();
                f.kcopyd
                    .start_rest(dev, f.rest, f.block, part, Some(fill_done::<T>), context);
            }
        }
        self.submit();
        Ok(())
    }

    /// Submits `writes`, which together write a whole new block, each moved
    /// to its sector (paired with it) of `dev`: nothing fills the block
    /// (dm-thin zeroes or copies it unless a single bio covers it). When all
    /// of them have ended, the first (the *lead*) comes back to `owner`'s
    /// [`Requeue::completion_lane`] with `provision`, and the others (the
    /// *members*, [`Self::take_members`]) with it; none is completed.
    /// Hands the writes back untouched if there are more than
    /// [`MAX_COVERING`] or one has no per-bio data.
    pub(crate) fn submit_covering<T: Requeue>(
        owner: &Arc<T>,
        provision: Provision,
        dev: &BdevHandle,
        mut writes: KVec<(OwnedBio, u64)>,
    ) -> Result<(), KVec<(OwnedBio, u64)>> {
        let usable = !writes.is_empty()
            && writes.len() <= MAX_COVERING
            && writes.iter_mut().all(|(bio, _)| bio.per_bio().is_some());
        if !usable {
            return Err(writes);
        }
        let lead = writes[0].0.raw;
        // At most MAX_COVERING (checked above): the cast cannot truncate.
        let parts = writes.len() as u16;
        for (i, (bio, to)) in writes.iter_mut().enumerate() {
            if i == 0 {
                bio.save_position();
                bio.hook_lead(owner, provision, parts);
                // SAFETY: we own the bio, not in flight; its completion is
                // ours to chain until it ends (`hooked_endio` restores it).
                unsafe { bio.chain_end_io(Some(hooked_endio::<T>)) };
                bio.view().remap_bdev(dev, *to);
            } else {
                bio.hook_member::<T>(lead, dev, *to);
            }
        }
        // Every hook is in place before the first write can end.
        for (bio, _) in writes {
            bio.submit();
        }
        Ok(())
    }

    /// A lead whose own write ended (a provision whose fill was
    /// [`Provision::deferred`]) goes on: `members`, writes that parked on
    /// its cell meanwhile, are submitted into the block, each moved to its
    /// sector (paired with it) of `dev`, while `kcopyd` writes `rest` into
    /// each of `gaps` (`(offset, count)` in the block at sector `block` of
    /// `dev`), the parts of the block none of them wrote.
    /// When all have ended the lead comes back with `provision` and its
    /// members, as from [`Self::submit_covering`]. Hands everything back
    /// untouched if there is nothing to wait for, more than
    /// [`MAX_COVERING`] parts, or a member without per-bio data.
    pub(crate) fn submit_rest<T: Requeue>(
        mut self,
        owner: &Arc<T>,
        provision: Provision,
        (dev, mut members): (&BdevHandle, KVec<(OwnedBio, u64)>),
        (kcopyd, rest, block): (&Kcopyd, Rest, u64),
        gaps: &[(u64, u64)],
    ) -> Result<(), (OwnedBio, KVec<(OwnedBio, u64)>)> {
        let jobs = gaps.iter().filter(|&&(_, count)| count > 0).count();
        let parts = members.len().saturating_add(jobs);
        let usable = parts > 0
            && parts <= MAX_COVERING
            && self.per_bio().is_some()
            && members.iter_mut().all(|(bio, _)| bio.per_bio().is_some());
        if !usable {
            return Err((self, members));
        }
        let lead = self.raw;
        // At most MAX_COVERING (checked above): the cast cannot truncate.
        self.hook_lead(owner, provision, parts as u16);
        for (bio, to) in members.iter_mut() {
            bio.hook_member::<T>(lead, dev, *to);
        }
        // From the first job or write on, the lead's per-bio data is shared
        // with the completions, and the lead is theirs until the last.
        core::mem::forget(self);
        for &part in gaps.iter().filter(|&&(_, count)| count > 0) {
            let context = lead.as_ptr().cast();
            kcopyd.start_rest(dev, rest, block, part, Some(fill_done::<T>), context);
        }
        for (bio, _) in members {
            bio.submit();
        }
        Ok(())
    }

    /// Saves where the bio starts, before its hook moves it
    /// ([`Self::rewind`], [`Self::hooked_range`]).
    fn save_position(&mut self) {
        let raw = self.raw;
        if let Some(ctx) = self.per_bio() {
            // SAFETY: we own the bio, not in flight.
            ctx.saved_iter = Some(unsafe { SavedIter::of(raw) });
        }
    }

    /// Makes the bio a lead that comes back to `owner` with `provision`
    /// once `parts` parts have ended. Its saved position is left as it is:
    /// a lead that goes on ([`Self::submit_rest`]) keeps the one from
    /// before its first hook.
    fn hook_lead<T: Requeue>(&mut self, owner: &Arc<T>, provision: Provision, parts: u16) {
        let Some(ctx) = self.per_bio() else {
            return;
        };
        ctx.state = HookState::Pending;
        ctx.provision = provision;
        ctx.parts_pending = AtomicU16::new(parts);
        ctx.fill_failed = AtomicBool::new(false);
        ctx.members = AtomicPtr::new(core::ptr::null_mut());
        ctx.owner = Arc::into_raw(owner.clone()).cast();
        ctx.release_owner = drop_owner::<T>;
    }

    /// Saves the bio's completion and sets `endio` instead.
    ///
    /// # Safety
    /// The bio is not in flight, and `endio` restores the saved completion
    /// before the bio ends.
    unsafe fn chain_end_io(&mut self, endio: bindings::bio_end_io_t) {
        let raw = self.raw;
        if let Some(ctx) = self.per_bio() {
            // SAFETY: per the contract; we own the bio.
            unsafe {
                ctx.saved_end_io = (*raw.as_ptr()).bi_end_io;
                (*raw.as_ptr()).bi_end_io = endio;
            }
        }
    }

    /// Makes the bio a member of `lead` (one of the lead's parts), moved
    /// to `to` of `dev`.
    fn hook_member<T: Requeue>(&mut self, lead: NonNull<bindings::bio>, dev: &BdevHandle, to: u64) {
        self.save_position();
        let Some(ctx) = self.per_bio() else {
            return;
        };
        ctx.state = HookState::Member;
        ctx.lead = lead.as_ptr();
        // SAFETY: not in flight; `member_endio` restores the completion.
        unsafe { self.chain_end_io(Some(member_endio::<T>)) };
        self.view().remap_bdev(dev, to);
    }
}
