// SPDX-License-Identifier: GPL-2.0
//! Handing hooked bios back: a provision submits a bio that writes its new
//! block, or parks it in the kcopyd job that fills the block, so that its
//! completion (a bio end or a kcopyd notify, in interrupt context) pushes it
//! on its owner's completion lane instead of ending it
//! (`Documentation/io-path.md`, "Hook states"). What the per-bio data holds
//! meanwhile is in `bio/hook.rs`.
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

use super::{
    bindings as dm,
    bio::{HookState, OwnedBio, PerBio, Provision},
    deferred::{CpuQueues, Drain},
    device::BdevHandle,
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

    /// Submits a bio that writes a whole new block, moved to `sector` of
    /// `dev`, so that when its write completes it comes back to `owner`'s
    /// [`Requeue::completion_lane`] instead of completing; the owner then
    /// finds the provision with [`Self::take_provision`]. Hands the bio back
    /// as it came (not moved: its sector still names its virtual block) if
    /// dm keeps no per-bio data for it.
    pub(crate) fn submit_hooked<T: Requeue>(
        mut self,
        owner: &Arc<T>,
        provision: Provision,
        dev: &BdevHandle,
        sector: u64,
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
        self.view().remap_bdev(dev, sector);
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
}
