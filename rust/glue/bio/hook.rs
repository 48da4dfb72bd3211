// SPDX-License-Identifier: GPL-2.0
//! Hooked bios: a bio whose write or fill a provision waits for carries the
//! provision and its owner in dm's per-bio data ([`PerBio`]); its completion
//! (a bio end or a kcopyd notify) hands it back to the owner's completion
//! lane instead of ending it (`Documentation/io-path.md`, "Hook states").
//!
//! The per-bio data holds a reference to the owner (an `Arc`) from the hook
//! until a worker takes the provision back ([`OwnedBio::take_provision`]) or
//! the bio ends, so an owner cannot go while a bio may still come back to it.
//! The completion only borrows it; a worker lets it go.

use core::ptr::NonNull;
use kernel::{
    bindings,
    sync::{Arc, ArcBorrow},
};

use super::OwnedBio;
use crate::glue::{
    bindings as dm,
    deferred::{CpuQueues, Drain},
    inflight::{IoToken, IoTracker},
    queue::IoQueue,
};

/// How a provision's new block gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// The bio's own write of the whole block.
    Overwrite,
    /// A kcopyd job (zeroes, or a copy of the shared block) before the bio's
    /// partial write.
    Kcopyd,
}

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
    /// Where its data comes from.
    pub(crate) fill: Fill,
}

/// Whoever gets a hooked bio back when its write or fill completes: the
/// completion (in interrupt context) pushes the bio on the lists named here,
/// whose worker then calls the owner's [`Drain::drain`].
pub(crate) trait Requeue: Drain + Sized {
    /// The per-CPU lists hooked bios come back on, and the queue of their
    /// workers.
    fn completion_lane(&self) -> (&CpuQueues<Self>, &IoQueue);
}

/// Where a deferred bio stands, in its per-bio data.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum HookState {
    /// Not hooked.
    None,
    /// Submitted with `hooked_endio` as its completion, or parked in a
    /// kcopyd job that ends in `fill_done`.
    Pending,
    /// Its write or fill completed; the owner has it back.
    Completed,
    /// Its provision is mapped; a commit is due before it completes.
    CommitThenFinish,
}

/// The per-bio data dm keeps in front of each clone for targets that ask for
/// it ([`super::dm::TargetCtx::reserve_per_bio_data`]).
#[repr(C)]
pub(crate) struct PerBio {
    pub(super) state: HookState,
    provision: Provision,
    /// The kcopyd fill succeeded (an overwrite's result is the bio's status).
    fill_ok: bool,
    /// While `Pending` or `Completed`: a reference to the owner, made by
    /// `Arc::into_raw` and let go by `release_owner`.
    pub(super) owner: *const core::ffi::c_void,
    /// Drops the reference in `owner` (`drop_owner` of the owner's type).
    release_owner: unsafe fn(*const core::ffi::c_void),
    saved_end_io: bindings::bio_end_io_t,
    /// The in-flight read side the bio holds while it may touch a data
    /// block (null: none), ended by the target's `end_io`.
    pub(super) inflight: *mut bindings::srcu_ctr,
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

/// How a hooked bio's I/O ended.
#[derive(Clone, Copy)]
enum HookEnd {
    /// Its own write, submitted with `hooked_endio`: dm's end_io goes back.
    Write,
    /// The kcopyd fill it was parked in, and whether it succeeded.
    Fill { ok: bool },
}

/// Hands a hooked bio back to the owner its per-bio data names.
///
/// # Safety
/// `raw` is a bio dm lent to our map call with per-bio data, hooked by
/// [`OwnedBio::submit_hooked`] (`end` is `Write`) or [`OwnedBio::into_fill_hook`]
/// (`Fill`) with an owner of type `T`, and its hooked I/O has just ended.
unsafe fn hand_back<T: Requeue>(raw: *mut bindings::bio, end: HookEnd) {
    let Some(nn) = NonNull::new(raw) else {
        return;
    };
    // It is ours again until we end it.
    let mut bio = OwnedBio {
        raw: nn,
        per_bio: true,
    };
    let Some(ctx) = bio.per_bio() else {
        return;
    };
    ctx.state = HookState::Completed;
    let restore = match end {
        HookEnd::Write => {
            ctx.fill_ok = true;
            Some(ctx.saved_end_io)
        }
        HookEnd::Fill { ok } => {
            ctx.fill_ok = ok;
            None
        }
    };
    if let Some(end_io) = restore {
        // SAFETY: we own the bio again; `submit_hooked` saved dm's end_io.
        unsafe { (*nn.as_ptr()).bi_end_io = end_io };
    }
    // SAFETY: per the contract, `owner` holds a reference to a `T`, which
    // the per-bio data keeps until a worker has taken the bio from the lists
    // (`take_provision`) or ended it; `push` touches neither the owner nor
    // its lists once the bio is on them.
    let owner = unsafe { ArcBorrow::<T>::from_raw(ctx.owner.cast()) };
    let (lists, wq) = owner.completion_lane();
    lists.push(wq, bio);
}

/// Lets go of the owner reference a hook stored in the per-bio data.
///
/// # Safety
/// `owner` came from `Arc::<T>::into_raw` and is let go once.
unsafe fn drop_owner<T: Requeue>(owner: *const core::ffi::c_void) {
    // SAFETY: per the contract.
    drop(unsafe { Arc::<T>::from_raw(owner.cast()) });
}

/// Lets go of the owner reference of a bio whose hook came back (state
/// `Completed`), if any; in process context only.
pub(super) fn release_owner(ctx: &mut PerBio) {
    if ctx.state == HookState::Completed && !ctx.owner.is_null() {
        let owner = core::mem::take(&mut ctx.owner);
        // SAFETY: a hook stored `owner` with its `release_owner` and nothing
        // let it go yet (it is cleared here).
        unsafe { (ctx.release_owner)(owner) };
    }
}

/// The completion of a bio submitted by [`OwnedBio::submit_hooked`].
///
/// # Safety
/// Set only by `submit_hooked`, whose per-bio data holds an owner of type
/// `T`.
unsafe extern "C" fn hooked_endio<T: Requeue>(raw: *mut bindings::bio) {
    // SAFETY: per the contract; the write ended.
    unsafe { hand_back::<T>(raw, HookEnd::Write) };
}

/// kcopyd's notify callback for a bio parked by [`OwnedBio::into_fill_hook`].
///
/// # Safety
/// `context` is that bio; its per-bio data holds an owner of type `T`.
unsafe extern "C" fn fill_done<T: Requeue>(
    read_err: kernel::ffi::c_int,
    write_err: kernel::ffi::c_ulong,
    context: *mut core::ffi::c_void,
) {
    let end = HookEnd::Fill {
        ok: read_err == 0 && write_err == 0,
    };
    // SAFETY: per the contract; the kcopyd job ended.
    unsafe { hand_back::<T>(context.cast(), end) };
}

/// A bio parked in a kcopyd job: the job's notify callback and its context.
/// Pass it to exactly one kcopyd call (kcopyd calls notify exactly once,
/// also on failure), or the bio is stranded.
#[must_use]
pub(crate) struct FillHook {
    pub(in crate::glue) notify: dm::dm_kcopyd_notify_fn,
    pub(in crate::glue) context: *mut core::ffi::c_void,
}

impl OwnedBio {
    /// Records the provision and a reference to the owner in the per-bio
    /// data; `None` if dm keeps no per-bio data for the bio.
    fn hook<T: Requeue>(&mut self, owner: &Arc<T>, provision: Provision) -> Option<&mut PerBio> {
        let ctx = self.per_bio()?;
        ctx.state = HookState::Pending;
        ctx.provision = provision;
        ctx.fill_ok = false;
        ctx.owner = Arc::into_raw(owner.clone()).cast();
        ctx.release_owner = drop_owner::<T>;
        Some(ctx)
    }

    /// Submits a (remapped) bio that writes a whole new block, so that when
    /// its write completes it comes back to `owner`'s
    /// [`Requeue::completion_lane`] instead of completing; the owner then
    /// finds the provision with [`Self::take_provision`]. Hands the bio back
    /// if dm keeps no per-bio data for it.
    pub(crate) fn submit_hooked<T: Requeue>(
        mut self,
        owner: &Arc<T>,
        provision: Provision,
    ) -> Result<(), OwnedBio> {
        let raw = self.raw.as_ptr();
        let Some(ctx) = self.hook(owner, provision) else {
            return Err(self);
        };
        // SAFETY: we own the bio; its completion is ours to chain until it
        // ends (`hooked_endio` restores it).
        unsafe {
            ctx.saved_end_io = (*raw).bi_end_io;
            (*raw).bi_end_io = Some(hooked_endio::<T>);
        }
        self.submit();
        Ok(())
    }

    /// Parks the bio while kcopyd fills its new block: the returned hook's
    /// callback hands it back to `owner`'s [`Requeue::completion_lane`]
    /// when the job ends; the owner finds the provision and the job's result
    /// with [`Self::take_provision`]. Hands the bio back if dm keeps no
    /// per-bio data for it.
    pub(crate) fn into_fill_hook<T: Requeue>(
        mut self,
        owner: &Arc<T>,
        provision: Provision,
    ) -> Result<FillHook, OwnedBio> {
        if self.hook(owner, provision).is_none() {
            return Err(self);
        }
        Ok(FillHook {
            notify: Some(fill_done::<T>),
            context: self.into_raw().cast(),
        })
    }

    /// The provision of a hooked bio whose write or fill completed, and
    /// whether it succeeded; `None` for any other bio.
    pub(crate) fn take_provision(&mut self) -> Option<(Provision, bool)> {
        // SAFETY: we own the bio.
        let written = unsafe { (*self.raw.as_ptr()).bi_status } == 0;
        let ctx = self.per_bio()?;
        if ctx.state != HookState::Completed {
            return None;
        }
        release_owner(ctx);
        ctx.state = HookState::None;
        let ok = match ctx.provision.fill {
            Fill::Overwrite => written,
            Fill::Kcopyd => ctx.fill_ok,
        };
        Some((ctx.provision, ok))
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
