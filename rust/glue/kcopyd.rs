// SPDX-License-Identifier: GPL-2.0
//! dm-kcopyd, for zeroing new data blocks and copying shared ones.
//!
//! `zero`/`copy` wait for the job (a worker that may sleep; used for the
//! rare fills of external origins); `start_rest` starts the jobs that fill
//! the parts of a new block a partial write leaves out, alongside that write
//! (`glue/hooked.rs`): their ends hand the bio back to its owner, so a worker
//! keeps many fills in flight (as dm-thin does) instead of one.

use core::{
    ffi::{c_int, c_void},
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{bindings, error::from_err_ptr, ffi::c_ulong, prelude::*, sync::Completion};

use super::{bindings as dm, device::BdevHandle};

/// A kcopyd client; destroyed on drop.
pub(crate) struct Kcopyd(NonNull<dm::dm_kcopyd_client>);

// SAFETY: a kcopyd client may be used from any thread; it has its own locks.
unsafe impl Send for Kcopyd {}
// SAFETY: as above.
unsafe impl Sync for Kcopyd {}

/// The completion a kcopyd callback signals, on the waiter's stack.
#[pin_data]
struct Wait {
    #[pin]
    done: Completion,
    failed: AtomicBool,
}

/// kcopyd's notify callback.
///
/// # Safety
/// `context` is the `Wait` passed to kcopyd, alive until `done` completes.
unsafe extern "C" fn notify(read_err: c_int, write_err: c_ulong, context: *mut c_void) {
    // SAFETY: per the contract; the waiter cannot return (and free `Wait`)
    // before `complete_all` releases the completion's lock.
    let wait = unsafe { &*context.cast::<Wait>() };
    if read_err != 0 || write_err != 0 {
        wait.failed.store(true, Ordering::Relaxed);
    }
    wait.done.complete_all();
}

/// What goes into the parts of a new block that its bio does not write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rest {
    /// Zeroes.
    Zeroes,
    /// The same parts of the shared block at sector `from` of the same device.
    Copy { from: u64 },
}

/// A copy or zeroing failed (the device returned an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyFailed;

impl Kcopyd {
    /// Creates a client (unthrottled).
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: a null throttle is allowed; the call returns a client or
        // an ERR_PTR.
        let raw = from_err_ptr(unsafe { dm::dm_kcopyd_client_create(core::ptr::null_mut()) })?;
        NonNull::new(raw).map(Self).ok_or(ENOMEM)
    }

    fn region(bdev: *mut bindings::block_device, sector: u64, count: u64) -> dm::dm_io_region {
        dm::dm_io_region {
            bdev,
            sector,
            count,
        }
    }

    /// Starts zeroing `count` sectors at `sector` of `bdev`; `notify(ctx)`
    /// runs once when it ends.
    fn start_zero(
        &self,
        bdev: *mut bindings::block_device,
        sector: u64,
        count: u64,
        notify: dm::dm_kcopyd_notify_fn,
        ctx: *mut c_void,
    ) {
        let mut dest = Self::region(bdev, sector, count);
        // SAFETY: the client is live; `dest` outlives the call (kcopyd
        // copies regions into its job); the caller keeps `ctx` valid until
        // notify.
        unsafe { dm::dm_kcopyd_zero(self.0.as_ptr(), 1, &mut dest, 0, notify, ctx) }
    }

    /// Starts copying `count` sectors from `from` of `from_bdev` to `to` of
    /// `to_bdev`; `notify(ctx)` runs once when it ends.
    fn start_copy(
        &self,
        (from_bdev, from): (*mut bindings::block_device, u64),
        (to_bdev, to): (*mut bindings::block_device, u64),
        count: u64,
        notify: dm::dm_kcopyd_notify_fn,
        ctx: *mut c_void,
    ) {
        let mut src = Self::region(from_bdev, from, count);
        let mut dest = Self::region(to_bdev, to, count);
        // SAFETY: as in `start_zero`.
        unsafe { dm::dm_kcopyd_copy(self.0.as_ptr(), &mut src, 1, &mut dest, 0, notify, ctx) }
    }

    /// Writes zeroes to `count` sectors at `sector` of `bdev`.
    pub(crate) fn zero(
        &self,
        bdev: &BdevHandle,
        sector: u64,
        count: u64,
    ) -> Result<(), CopyFailed> {
        self.wait_for(|ctx| self.start_zero(bdev.raw(), sector, count, Some(notify), ctx))
    }

    /// Copies `count` sectors from `from` of `from_bdev` to `to` of
    /// `to_bdev`.
    pub(crate) fn copy(
        &self,
        (from_bdev, from): (&BdevHandle, u64),
        (to_bdev, to): (&BdevHandle, u64),
        count: u64,
    ) -> Result<(), CopyFailed> {
        self.wait_for(|ctx| {
            let (from, to) = ((from_bdev.raw(), from), (to_bdev.raw(), to));
            self.start_copy(from, to, count, Some(notify), ctx)
        })
    }

    /// Starts the job that writes `rest` into the `count` sectors at
    /// `offset` of the block at sector `block` of `bdev`, ending in
    /// `notify(ctx)`.
    /// The device stays open until the end: the job fills the block of a bio
    /// its thin target mapped, dm destroys no target while a bio it mapped
    /// is in flight, and the target holds its devices open.
    pub(in crate::glue) fn start_rest(
        &self,
        bdev: &BdevHandle,
        rest: Rest,
        block: u64,
        (offset, count): (u64, u64),
        notify: dm::dm_kcopyd_notify_fn,
        ctx: *mut c_void,
    ) {
        let to = block.saturating_add(offset);
        match rest {
            Rest::Zeroes => self.start_zero(bdev.raw(), to, count, notify, ctx),
            Rest::Copy { from } => {
                let from = (bdev.raw(), from.saturating_add(offset));
                self.start_copy(from, (bdev.raw(), to), count, notify, ctx);
            }
        }
    }

    /// Starts a job with a `Wait` as its context and sleeps until it ends.
    fn wait_for(&self, start: impl FnOnce(*mut c_void)) -> Result<(), CopyFailed> {
        pin_init::stack_pin_init!(let wait = pin_init!(Wait {
            done <- Completion::new(),
            failed: AtomicBool::new(false),
        }));
        let ctx = core::ptr::from_ref::<Wait>(&wait)
            .cast_mut()
            .cast::<c_void>();
        start(ctx);
        wait.done.wait_for_completion();
        if wait.failed.load(Ordering::Relaxed) {
            Err(CopyFailed)
        } else {
            Ok(())
        }
    }
}

impl Drop for Kcopyd {
    fn drop(&mut self) {
        // SAFETY: created in `new`; the pool is only dropped once no thin
        // can start a job, and destroying the client waits for the jobs
        // still running.
        unsafe { dm::dm_kcopyd_client_destroy(self.0.as_ptr()) };
    }
}
