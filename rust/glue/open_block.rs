// SPDX-License-Identifier: GPL-2.0
//! A new block held open for more writes (`io/open_block.rs` decides when
//! and why): what the completions of the writes into it and of the kcopyd
//! jobs filling its gaps share. Each write into the block completes as soon
//! as it is written; the shared state counts the writes and the jobs not yet
//! ended, plus one part for the block being open. When the block has been
//! closed and the last part ended (a bio end or a kcopyd notify, in
//! interrupt context), a work item on the owner's queue hands the provision
//! back ([`OpenOwner::open_block_ended`]), which maps the block.
//!
//! The state lives in an `Arc`: the [`OpenBlock`] handle holds one
//! reference, and one more is set aside for the work item from the start;
//! the last part to end takes it back and queues the work with it, so the
//! state outlives every completion that touches it, and is let go in
//! process context.

use core::{
    ffi::c_void,
    marker::PhantomData,
    mem::ManuallyDrop,
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{
    bindings, new_work,
    prelude::*,
    sync::Arc,
    workqueue::{impl_has_work, Work, WorkItem},
};

use super::{
    bio::{pending_per_bio, Bio, HookState, OwnedBio, Provision},
    device::BdevHandle,
    kcopyd::{Kcopyd, Rest},
    queue::IoQueue,
};
use crate::dm::pool_mode::IoError;

/// Whoever holds blocks open: where the work item runs, and what it does.
pub(crate) trait OpenOwner: Send + Sync + Sized + 'static {
    /// The queue the work item of an ended block runs on.
    fn open_queue(&self) -> &IoQueue;

    /// A block held open was closed, and every write into it and every job
    /// filling it ended: `written` if all of them succeeded, `completed` if
    /// any write into it completed successfully (its data is lost if the
    /// block cannot be mapped).
    fn open_block_ended(owner: &Arc<Self>, provision: Provision, written: bool, completed: bool);
}

/// What the completions of one open block share.
#[pin_data]
pub(crate) struct OpenState<T: OpenOwner> {
    #[pin]
    work: Work<OpenState<T>>,
    /// The block being open (until closed), the writes submitted into it
    /// and the kcopyd jobs not yet ended.
    parts: AtomicU32,
    /// A write into the block or a job filling it failed.
    failed: AtomicBool,
    /// A write into the block completed successfully.
    completed: AtomicBool,
    provision: Provision,
    owner: Arc<T>,
}

impl_has_work! {
    impl{T: OpenOwner} HasWork<Self> for OpenState<T> { self.work }
}

impl<T: OpenOwner> WorkItem for OpenState<T> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let written = !this.failed.load(Ordering::Acquire);
        let completed = this.completed.load(Ordering::Acquire);
        T::open_block_ended(&this.owner, this.provision, written, completed);
    }
}

/// One part of an open block ended; the last queues the work item.
///
/// # Safety
/// `state` came from an [`OpenBlock`] whose work reference is still set
/// aside (some part has not ended yet, this one included), and the part
/// ending was counted and ends once.
unsafe fn part_done<T: OpenOwner>(state: *const OpenState<T>) {
    // SAFETY: per the contract, the set-aside reference keeps it alive.
    let s = unsafe { &*state };
    // AcqRel: the last part sees every other part's `failed`.
    if s.parts.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: the set-aside reference (`OpenBlock::new`), taken back once:
        // this was the last part.
        let this = unsafe { Arc::from_raw(state) };
        // (Not the owner's last reference: the queued state holds one.)
        let owner = this.owner.clone();
        let _ = owner.open_queue().enqueue(this);
    }
}

/// The completion of a write into an open block: the write completes at
/// once (dm gets it back), then its part ends. A failed write fails the
/// block: its sectors hold nothing reliable.
///
/// # Safety
/// Set only by [`WriteSlot::submit`], with the state of an open block of an
/// owner of type `T` in the per-bio data, which counted this write.
unsafe extern "C" fn open_write_endio<T: OpenOwner>(raw: *mut bindings::bio) {
    let Some(nn) = NonNull::new(raw) else {
        return;
    };
    let state = {
        // SAFETY: per the contract; the write ended, and its per-bio data
        // is ours until the bio ends below.
        let ctx = unsafe { pending_per_bio(nn) };
        // SAFETY: the bio's own fields are ours again; `submit` saved dm's
        // end_io.
        unsafe { (*raw).bi_end_io = ctx.saved_end_io };
        ctx.open.cast::<OpenState<T>>()
    };
    // SAFETY: this write's part has not ended yet: the state is alive.
    let s = unsafe { &*state };
    // SAFETY: the bio is ours until it ends.
    match unsafe { (*raw).bi_status } {
        0 => s.completed.store(true, Ordering::Relaxed),
        _ => s.failed.store(true, Ordering::Relaxed),
    }
    // SAFETY: we own the bio and end it once; nothing touches it after.
    unsafe { bindings::bio_endio(raw) };
    // SAFETY: per the contract; this write's part ends here.
    unsafe { part_done::<T>(state) };
}

/// kcopyd's notify callback for a job filling a gap of an open block.
///
/// # Safety
/// `context` is the state of an open block of an owner of type `T`, which
/// counted this job.
unsafe extern "C" fn open_fill_done<T: OpenOwner>(
    read_err: kernel::ffi::c_int,
    write_err: kernel::ffi::c_ulong,
    context: *mut c_void,
) {
    let state = context.cast_const().cast::<OpenState<T>>();
    if read_err != 0 || write_err != 0 {
        // SAFETY: the job's part has not ended: the state is alive.
        unsafe { &*state }.failed.store(true, Ordering::Relaxed);
    }
    // SAFETY: per the contract; the job's part ends here.
    unsafe { part_done::<T>(state) };
}

/// A block held open: holds its "open" part. [`Self::close`] lets it go;
/// dropping the handle instead fails the block (its gaps were never filled).
pub(crate) struct OpenBlock<T: OpenOwner> {
    state: Arc<OpenState<T>>,
}

impl<T: OpenOwner> OpenBlock<T> {
    /// Opens the block of `provision` for `owner` (no writes yet).
    pub(crate) fn new(owner: &Arc<T>, provision: Provision) -> Result<Self> {
        let state = Arc::pin_init(
            pin_init!(OpenState {
                work <- new_work!("rthin_open_block"),
                parts: AtomicU32::new(1),
                failed: AtomicBool::new(false),
                completed: AtomicBool::new(false),
                provision,
                owner: owner.clone(),
            }),
            GFP_NOWAIT,
        )?;
        // Set aside for the work item; `part_done` takes it back.
        let _ = Arc::into_raw(state.clone());
        Ok(Self { state })
    }

    /// Counts one more write into the block, to be submitted with the slot
    /// (submitting may sleep: the caller may let go of its locks first).
    pub(crate) fn reserve(&self) -> WriteSlot<T> {
        // The "open" part keeps the count above zero meanwhile.
        self.state.parts.fetch_add(1, Ordering::Relaxed);
        WriteSlot {
            state: Arc::as_ptr(&self.state),
            _owner: PhantomData,
        }
    }

    /// Closes the block: kcopyd writes `rest` into each of `gaps`
    /// (`(offset, count)` in the block at sector `block` of `dev`), the
    /// parts no write wrote; the work item runs once they and every write
    /// into the block have ended.
    pub(crate) fn close(
        self,
        (kcopyd, rest, block): (&Kcopyd, Rest, u64),
        dev: &BdevHandle,
        gaps: impl Iterator<Item = (u64, u64)>,
    ) {
        let this = ManuallyDrop::new(self);
        let state = Arc::as_ptr(&this.state);
        for part in gaps.filter(|&(_, count)| count > 0) {
            this.state.parts.fetch_add(1, Ordering::Relaxed);
            kcopyd.start_rest(
                dev,
                rest,
                block,
                part,
                Some(open_fill_done::<T>),
                state.cast_mut().cast(),
            );
        }
        // SAFETY: the handle's reference is let go here, once (the handle
        // is not dropped).
        drop(unsafe { core::ptr::read(&this.state) });
        // SAFETY: the set-aside reference is still there (this part has not
        // ended); the "open" part ends here, once.
        unsafe { part_done::<T>(state) };
    }
}

impl<T: OpenOwner> Drop for OpenBlock<T> {
    /// Reached only if a path forgot to close the block: its gaps hold
    /// whatever the block held before, so it must not be mapped.
    fn drop(&mut self) {
        self.state.failed.store(true, Ordering::Relaxed);
        // SAFETY: as in `close`; the handle's reference goes with `self`.
        unsafe { part_done::<T>(Arc::as_ptr(&self.state)) };
    }
}

/// One write counted into an open block ([`OpenBlock::reserve`]), to be
/// submitted; dropping the slot instead fails the block.
pub(crate) struct WriteSlot<T: OpenOwner> {
    state: *const OpenState<T>,
    _owner: PhantomData<fn() -> T>,
}

// SAFETY: the state is touched from the slot only through its atomics, and
// kept alive by its set-aside reference until the slot's part ends.
unsafe impl<T: OpenOwner> Send for WriteSlot<T> {}

impl<T: OpenOwner> WriteSlot<T> {
    /// Hooks `bio`, a plain write inside the open block, and moves it to
    /// `to` of `dev`: once submitted (by the caller, or by dm after the map
    /// call returns it remapped) it completes as soon as it is written. A bio
    /// without per-bio data cannot go in: `Err`, and the block fails with it
    /// (the sectors it was counted for stay unwritten).
    pub(crate) fn hook(self, bio: &mut Bio<'_>, dev: &BdevHandle, to: u64) -> Result<(), ()> {
        let Some((raw, ctx)) = bio.for_hook() else {
            drop(self);
            return Err(());
        };
        ctx.state = HookState::EarlyMember;
        ctx.open = self.state.cast();
        // SAFETY: the bio is ours and not in flight; `open_write_endio`
        // restores the completion before the bio ends.
        unsafe {
            ctx.saved_end_io = (*raw.as_ptr()).bi_end_io;
            (*raw.as_ptr()).bi_end_io = Some(open_write_endio::<T>);
        }
        // The write's completion ends the slot's part.
        core::mem::forget(self);
        bio.remap_bdev(dev, to);
        Ok(())
    }

    /// [`Self::hook`], then submits the bio (a worker's); fails it if it
    /// could not be hooked.
    pub(crate) fn submit(self, mut bio: OwnedBio, dev: &BdevHandle, to: u64) {
        match self.hook(&mut bio.view(), dev, to) {
            Ok(()) => bio.submit(),
            Err(()) => bio.complete(Some(IoError::Io)),
        }
    }
}

impl<T: OpenOwner> Drop for WriteSlot<T> {
    /// A write counted but never submitted.
    fn drop(&mut self) {
        // SAFETY: this slot's part keeps the state alive.
        unsafe { &*self.state }
            .failed
            .store(true, Ordering::Relaxed);
        // SAFETY: the slot's part, counted by `reserve`, ends here, once.
        unsafe { part_done::<T>(self.state) };
    }
}
