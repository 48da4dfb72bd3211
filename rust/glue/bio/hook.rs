// SPDX-License-Identifier: GPL-2.0
//! Hooked bios: a bio whose write or fill a provision waits for carries the
//! provision and its owner in dm's per-bio data ([`PerBio`]); its completion
//! (a bio end or a kcopyd notify) hands it back to the owner's completion
//! lane instead of ending it (`Documentation/io-path.md`, "Hook states").

use core::ptr::NonNull;
use kernel::bindings;

use super::OwnedBio;
use crate::glue::{
    bindings as dm,
    inflight::{IoToken, IoTracker},
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

/// Whoever gets a hooked bio back when its write completes.
pub(crate) trait Requeue: Send + Sync + 'static {
    /// Takes back a bio whose hooked write or kcopyd fill completed (may
    /// run in interrupt context: only queue it).
    fn requeue_completed(&self, bio: OwnedBio);
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
    owner: *const core::ffi::c_void,
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
/// (`Fill`) with a live owner of type `T`, and its hooked I/O has just ended.
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
    let owner = ctx.owner.cast::<T>();
    if let Some(end_io) = restore {
        // SAFETY: we own the bio again; `submit_hooked` saved dm's end_io.
        unsafe { (*nn.as_ptr()).bi_end_io = end_io };
    }
    // SAFETY: per the contract; the owner outlives its in-flight bios.
    unsafe { (*owner).requeue_completed(bio) };
}

/// The completion of a bio submitted by [`OwnedBio::submit_hooked`].
///
/// # Safety
/// Set only by `submit_hooked`, whose per-bio data names a live owner of
/// type `T`.
unsafe extern "C" fn hooked_endio<T: Requeue>(raw: *mut bindings::bio) {
    // SAFETY: per the contract; the write ended.
    unsafe { hand_back::<T>(raw, HookEnd::Write) };
}

/// kcopyd's notify callback for a bio parked by [`OwnedBio::into_fill_hook`].
///
/// # Safety
/// `context` is that bio; its per-bio data names a live owner of type `T`.
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
    /// Records the provision and the owner in the per-bio data; `None` if
    /// dm keeps no per-bio data for the bio.
    fn hook<T: Requeue>(&mut self, owner: &T, provision: Provision) -> Option<&mut PerBio> {
        let ctx = self.per_bio()?;
        ctx.state = HookState::Pending;
        ctx.provision = provision;
        ctx.fill_ok = false;
        ctx.owner = core::ptr::from_ref(owner).cast();
        Some(ctx)
    }

    /// Submits a (remapped) bio that writes a whole new block, so that when
    /// its write completes it comes back to `owner`
    /// ([`Requeue::requeue_completed`]) instead of completing; the owner then
    /// finds the provision with [`Self::take_provision`]. Hands the bio back
    /// if dm keeps no per-bio data for it.
    pub(crate) fn submit_hooked<T: Requeue>(
        mut self,
        owner: &T,
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
    /// callback hands it back to `owner` ([`Requeue::requeue_completed`])
    /// when the job ends; the owner finds the provision and the job's result
    /// with [`Self::take_provision`]. Hands the bio back if dm keeps no
    /// per-bio data for it.
    pub(crate) fn into_fill_hook<T: Requeue>(
        mut self,
        owner: &T,
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
