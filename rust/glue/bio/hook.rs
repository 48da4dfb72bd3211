// SPDX-License-Identifier: GPL-2.0
//! dm's per-bio data ([`PerBio`]): the in-flight read side a bio holds, and
//! the state of a bio a provision hooks (`glue/hooked.rs` hooks it and hands
//! it back; `Documentation/io-path.md`, "Hook states"), with the provision
//! and the reference to its owner it carries meanwhile.

use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU16, Ordering},
};
use kernel::bindings;

use super::{BioList, OwnedBio};
use crate::glue::{
    bindings as dm,
    inflight::{IoToken, IoTracker},
    kcopyd::Rest,
};

/// A provision in flight with its bio: the mapping goes in once the block
/// holds its data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Provision {
    /// The virtual block.
    pub(crate) vblock: u64,
    /// The new data block.
    pub(crate) data_block: u64,
    /// The pool's metadata epoch when the block was allocated.
    pub(crate) epoch: u64,
    /// The block replaces a shared one (copy-on-write).
    pub(crate) breaks_sharing: bool,
    /// The fill of the parts the bio leaves out waits until its write has
    /// ended: then the writes that parked on the cell meanwhile are
    /// submitted with it, and only what none of them writes gets this.
    pub(crate) deferred: Option<Rest>,
}

/// Where a deferred bio stands, in its per-bio data.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(in crate::glue) enum HookState {
    /// Not hooked.
    None,
    /// Submitted with `hooked_endio` as its completion, alongside the
    /// kcopyd jobs (ending in `fill_done`) that fill the rest of its block.
    Pending,
    /// Its write and its block's fill completed; the owner has it back.
    Completed,
    /// Submitted with `member_endio` as its completion, one of the writes
    /// that together cover a new block; the provision is its lead's (the
    /// first of them), which comes back once they have all ended.
    Member,
    /// Submitted with `open_write_endio` as its completion into a block
    /// held open (`glue/open_block.rs`): it completes as soon as it is
    /// written.
    EarlyMember,
    /// Its provision is mapped; a commit is due before it completes.
    CommitThenFinish,
}

/// The per-bio data dm keeps in front of each clone for targets that ask for
/// it ([`super::dm::TargetCtx::reserve_per_bio_data`]).
#[repr(C)]
pub(crate) struct PerBio {
    pub(in crate::glue) state: HookState,
    pub(in crate::glue) provision: Provision,
    /// While `Pending`: the bio's write, the kcopyd jobs and the writes of
    /// its members not yet ended; whichever ends last hands the bio back.
    /// Atomic: they end on any CPU.
    pub(in crate::glue) parts_pending: AtomicU16,
    /// While `Pending`: a kcopyd job failed.
    pub(in crate::glue) fill_failed: AtomicBool,
    /// While `Pending` or `Completed`: a reference to the owner, made by
    /// `Arc::into_raw` and let go by `release_owner`.
    pub(in crate::glue) owner: *const core::ffi::c_void,
    /// Drops the reference in `owner` (`drop_owner` of the owner's type).
    pub(in crate::glue) release_owner: unsafe fn(*const core::ffi::c_void),
    pub(in crate::glue) saved_end_io: bindings::bio_end_io_t,
    /// While `Member`: the lead bio, in `Pending` until this bio ended.
    pub(in crate::glue) lead: *mut bindings::bio,
    /// While a lead is `Pending`: its members that ended, linked through
    /// `bi_next` (each pushes itself in its completion).
    pub(in crate::glue) members: AtomicPtr<bindings::bio>,
    /// While `EarlyMember`: the shared state of its open block
    /// (`open_block::OpenState`).
    pub(in crate::glue) open: *const core::ffi::c_void,
    /// A member's (and a lead's) position before it was remapped and
    /// submitted: restored to issue it again ([`OwnedBio::rewind`]).
    /// Set by the hook, taken by `rewind`.
    pub(in crate::glue) saved_iter: Option<SavedIter>,
    /// The in-flight read side the bio holds while it may touch a data
    /// block (null: none), ended by the target's `end_io`.
    pub(super) inflight: *mut bindings::srcu_ctr,
}

/// What a bio's completion changes of its position and flags, saved to
/// issue it again (as dm's `dm_bio_record`). The iterator is kept whole:
/// its fields differ between kernel versions.
pub(crate) struct SavedIter {
    iter: bindings::bvec_iter,
    flags: u16,
}

impl SavedIter {
    /// The position and flags of `raw` now.
    ///
    /// # Safety
    /// `raw` is a live bio the caller owns.
    pub(in crate::glue) unsafe fn of(raw: NonNull<bindings::bio>) -> Self {
        // SAFETY: per the contract; `bvec_iter` is plain data.
        unsafe {
            let b = raw.as_ptr();
            Self {
                iter: core::ptr::read(&raw const (*b).bi_iter),
                flags: (*b).bi_flags,
            }
        }
    }

    /// Puts them back into `raw`.
    ///
    /// # Safety
    /// `raw` is a live bio the caller owns, not in flight.
    unsafe fn restore(self, raw: NonNull<bindings::bio>) {
        // SAFETY: per the contract.
        unsafe {
            let b = raw.as_ptr();
            core::ptr::write(&raw mut (*b).bi_iter, self.iter);
            (*b).bi_flags = self.flags;
        }
    }
}

/// The per-bio data of `raw`, if dm keeps one in front of it.
///
/// # Safety
/// `raw` is a live bio that the caller owns for the returned lifetime, and
/// dm keeps a [`PerBio`] in front of it if `per_bio` is set.
pub(super) unsafe fn per_bio_of<'a>(
    raw: NonNull<bindings::bio>,
    per_bio: bool,
) -> Option<&'a mut PerBio> {
    if !per_bio {
        return None;
    }
    // SAFETY: per the contract.
    let p = unsafe { dm::dm_per_bio_data(raw.as_ptr(), size_of::<PerBio>()) };
    // SAFETY: as above; `p` is aligned for the largest member type (dm
    // aligns per-bio data like the bio itself).
    NonNull::new(p.cast::<PerBio>()).map(|mut p| unsafe { p.as_mut() })
}

/// The per-bio data of a hooked bio whose write and kcopyd jobs are in
/// flight, shared by their completions (which touch only its atomics and
/// the fields the hook set before it started them).
///
/// # Safety
/// `raw` is a bio hooked by `submit_hooked` (so dm keeps a [`PerBio`] in
/// front of it) whose hand-back has not happened yet; no one holds the per-bio
/// data mutably for the returned lifetime.
pub(in crate::glue) unsafe fn pending_per_bio<'a>(raw: NonNull<bindings::bio>) -> &'a PerBio {
    // SAFETY: per the contract.
    let p = unsafe { dm::dm_per_bio_data(raw.as_ptr(), size_of::<PerBio>()) };
    // SAFETY: as above, `p` points to the hook's initialised `PerBio`, aligned
    // as in `per_bio_of`.
    unsafe { &*p.cast::<PerBio>() }
}

/// Stores `token`, a read side of `tracker`, in the per-bio data. Ends it
/// at once if there is no per-bio data (the bio is then untracked), and ends
/// one stored before (a bio holds one read side at most).
pub(super) fn store_token(ctx: Option<&mut PerBio>, tracker: &IoTracker, token: IoToken) {
    let extra = match ctx {
        Some(ctx) => {
            let old = core::mem::replace(&mut ctx.inflight, token.into_raw());
            // SAFETY: a non-null `inflight` was stored from a token here and
            // not ended (it is replaced, so it ends once, below).
            NonNull::new(old).map(|p| unsafe { IoToken::from_raw(p) })
        }
        None => Some(token),
    };
    if let Some(t) = extra {
        tracker.exit(t);
    }
}

/// Lets go of the owner reference of a bio whose hook came back (state
/// `Completed`), if any; in process context only.
pub(super) fn release_owner(ctx: &mut PerBio) {
    if ctx.state == HookState::Completed && !ctx.owner.is_null() {
        // Not `mem::take`: raw pointers implement `Default` only from rustc
        // 1.88, and distribution kernels are built by older ones (Debian's 1.85).
        let owner = ctx.owner;
        ctx.owner = core::ptr::null();
        // SAFETY: a hook stored `owner` with its `release_owner` and nothing
        // let it go yet (it is cleared here).
        unsafe { (ctx.release_owner)(owner) };
    }
}

impl OwnedBio {
    /// The provision of a hooked bio whose write and fill completed, and
    /// whether both succeeded (a failed fill is the bio's error then);
    /// `None` for any other bio.
    pub(crate) fn take_provision(&mut self) -> Option<(Provision, bool)> {
        // SAFETY: we own the bio.
        let written = unsafe { (*self.raw.as_ptr()).bi_status } == 0;
        let ctx = self.per_bio()?;
        if ctx.state != HookState::Completed {
            return None;
        }
        release_owner(ctx);
        ctx.state = HookState::None;
        Some((ctx.provision, written))
    }

    /// The members that ended with this lead, whose write and provision
    /// completed ([`Self::take_provision`] gave it back): each back to no
    /// hook, their writes' statuses kept.
    pub(crate) fn take_members(&mut self) -> BioList {
        let mut list = BioList::new();
        let per_bio = self.per_bio;
        let Some(ctx) = self.per_bio() else {
            return list;
        };
        let mut next = ctx.members.swap(core::ptr::null_mut(), Ordering::Acquire);
        while let Some(raw) = NonNull::new(next) {
            // SAFETY: every member on the chain ended (its completion pushed
            // it, and the lead came back only after all its parts ended), so
            // it is ours, with the per-bio data its hook set up.
            unsafe {
                next = (*raw.as_ptr()).bi_next;
                if let Some(m) = per_bio_of(raw, per_bio) {
                    m.state = HookState::None;
                    m.lead = core::ptr::null_mut();
                }
            }
            list.push(OwnedBio { raw, per_bio });
        }
        list
    }

    /// Where a hooked bio that came back started and how many sectors it
    /// wrote, before its hook moved it (its completion advanced it since).
    pub(crate) fn hooked_range(&mut self) -> Option<(u64, u64)> {
        let ctx = self.per_bio()?;
        let saved = ctx.saved_iter.as_ref()?;
        Some((saved.iter.bi_sector, u64::from(saved.iter.bi_size) >> 9))
    }

    /// Puts a member (or lead) that came back as it was before its hook
    /// remapped and submitted it, with no error: it can go through a worker
    /// again. False (and nothing changed) for a bio that was never hooked.
    pub(crate) fn rewind(&mut self) -> bool {
        let raw = self.raw;
        let Some(ctx) = self.per_bio() else {
            return false;
        };
        if ctx.state != HookState::None {
            return false;
        }
        let Some(saved) = ctx.saved_iter.take() else {
            return false;
        };
        // SAFETY: we own the bio and it is not in flight; `saved` was taken
        // from it before its hook submitted it.
        unsafe {
            saved.restore(raw);
            (*raw.as_ptr()).bi_status = 0;
        }
        true
    }

    /// Marks a bio whose hooked write and provision are done as needing a
    /// commit before it completes ([`Self::take_commit_then_finish`]).
    pub(crate) fn set_commit_then_finish(&mut self) -> bool {
        match self.per_bio() {
            Some(ctx) => {
                ctx.state = HookState::CommitThenFinish;
                true
            }
            None => false,
        }
    }

    /// True for a bio marked by [`Self::set_commit_then_finish`] (the mark
    /// stays until [`Self::take_commit_then_finish`]).
    pub(crate) fn commit_then_finish_pending(&mut self) -> bool {
        self.per_bio()
            .is_some_and(|ctx| ctx.state == HookState::CommitThenFinish)
    }

    /// True (once) for a bio marked by [`Self::set_commit_then_finish`].
    pub(crate) fn take_commit_then_finish(&mut self) -> bool {
        match self.per_bio() {
            Some(ctx) if ctx.state == HookState::CommitThenFinish => {
                ctx.state = HookState::None;
                true
            }
            _ => false,
        }
    }
}
