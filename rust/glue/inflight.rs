// SPDX-License-Identifier: GPL-2.0
//! In-flight I/O tracking: which bios could still touch a data block.
//!
//! A pool's [`IoTracker`] is an SRCU domain (the *fast up/down* flavour:
//! per-CPU counters, no memory barrier and no shared cache line on the read
//! side, and the read side may end in another context). Every bio that is
//! remapped to a data block opens a read side ([`IoTracker::enter`]) *before*
//! the mapping it uses is looked up, and closes it when the bio completes
//! (the thin target's `end_io`). A grace period that starts after a block
//! was unmapped therefore ends only once every bio that could have been sent
//! to that block has completed: that is what a discard waits for before
//! passing down, and what a freed block waits for before it is reused
//! (dm-thin's deferred sets `all_io_ds` and `shared_read_ds`, without their
//! pool-wide spinlock).
//!
//! Waiting is asynchronous: [`GpCookie`]s are polled, and a [`GpWaiter`]
//! runs its owner's [`GpDone::gp_done`] on a workqueue after a grace period.

use core::{
    marker::PhantomPinned,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, Ordering},
};
use kernel::{bindings, error::to_result, prelude::*, types::Opaque};

use super::{bindings as dm, queue::IoQueue};

/// An SRCU domain for the bios of one pool.
#[pin_data(PinnedDrop)]
pub(crate) struct IoTracker {
    #[pin]
    srcu: Opaque<bindings::srcu_struct>,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: SRCU domains are used from any context; the kernel synchronises.
unsafe impl Send for IoTracker {}
// SAFETY: as above.
unsafe impl Sync for IoTracker {}

/// The read side a bio holds from its remap to its completion. It must be
/// ended exactly once, by [`IoTracker::exit`] on the tracker it came from
/// (the bio glue keeps it in the per-bio data meanwhile).
#[must_use = "a read side that is never ended blocks every grace period"]
pub(crate) struct IoToken(NonNull<bindings::srcu_ctr>);

impl IoToken {
    /// The raw per-CPU counter pointer, for a bio's per-bio data.
    pub(super) fn into_raw(self) -> *mut bindings::srcu_ctr {
        self.0.as_ptr()
    }

    /// The token whose pointer [`Self::into_raw`] gave.
    ///
    /// # Safety
    /// `p` came from `into_raw` and is turned back into a token once.
    pub(super) unsafe fn from_raw(p: NonNull<bindings::srcu_ctr>) -> Self {
        Self(p)
    }
}

/// A point in the tracker's grace-period sequence
/// ([`IoTracker::start_poll`]).
#[derive(Clone, Copy)]
pub(crate) struct GpCookie(kernel::ffi::c_ulong);

impl IoTracker {
    /// A new, empty domain.
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            // SAFETY: the shim initialises the pinned, not yet used struct.
            srcu <- Opaque::try_ffi_init(|p| to_result(unsafe { dm::rthin_srcu_init(p) })),
            _pin: PhantomPinned,
        }? Error)
    }

    fn raw(&self) -> *mut bindings::srcu_struct {
        self.srcu.get()
    }

    /// Opens a read side (never sleeps; not from NMI).
    pub(crate) fn enter(&self) -> Option<IoToken> {
        // SAFETY: the domain is initialised and lives as long as `self`.
        NonNull::new(unsafe { dm::rthin_srcu_down_read(self.raw()) }).map(IoToken)
    }

    /// Ends a read side opened on this tracker (any context but NMI).
    pub(crate) fn exit(&self, token: IoToken) {
        // SAFETY: a token is made only by `enter` (or handed back by the bio
        // glue) and consumed here, so it ends once; a pool's bios only hold
        // tokens of that pool's tracker.
        unsafe { dm::rthin_srcu_up_read(self.raw(), token.into_raw()) };
    }

    /// Starts a grace period (if none is pending) and returns its cookie:
    /// once [`Self::poll`] says it is done, every read side opened before
    /// this call has ended.
    pub(crate) fn start_poll(&self) -> GpCookie {
        // SAFETY: the domain is initialised.
        GpCookie(unsafe { bindings::start_poll_synchronize_srcu(self.raw()) })
    }

    /// Waits for a grace period: every read side opened before the call
    /// has ended (sleeps).
    pub(crate) fn synchronize(&self) {
        // SAFETY: the domain is initialised.
        unsafe { bindings::synchronize_srcu(self.raw()) };
    }

    /// True once the grace period of `cookie` has ended.
    pub(crate) fn poll(&self, cookie: GpCookie) -> bool {
        // SAFETY: the domain is initialised; any cookie value is accepted.
        unsafe { bindings::poll_state_synchronize_srcu(self.raw(), cookie.0) }
    }
}

#[pinned_drop]
impl PinnedDrop for IoTracker {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: no read side is open (every bio ended before its target,
        // and the owner stopped its waiters); callbacks are flushed first.
        unsafe {
            bindings::srcu_barrier(self.raw());
            bindings::cleanup_srcu_struct(self.raw());
        }
    }
}

/// What a [`GpWaiter`] calls after a grace period.
pub(crate) trait GpDone: Send + Sync + 'static {
    /// A grace period armed by [`GpWaiter::arm`] ended (in a worker, may
    /// sleep). The owner rechecks its cookies and arms again if needed.
    fn gp_done(&self);
}

/// Calls its owner back on a workqueue once a grace period of a tracker has
/// ended: one `call_srcu` in flight at a time, whatever the number of
/// waiters.
#[repr(C)]
#[pin_data]
pub(crate) struct GpWaiter<T: GpDone> {
    #[pin]
    head: Opaque<bindings::callback_head>,
    #[pin]
    work: Opaque<bindings::work_struct>,
    /// A `call_srcu` is pending on `head`.
    armed: AtomicBool,
    owner: AtomicPtr<T>,
    wq: AtomicPtr<bindings::workqueue_struct>,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the callback head and the work item are only touched through the
// RCU and workqueue APIs; the rest are atomics pointing at `Sync` objects.
unsafe impl<T: GpDone> Send for GpWaiter<T> {}
// SAFETY: as above.
unsafe impl<T: GpDone> Sync for GpWaiter<T> {}

/// The SRCU callback: queue the owner's work (softirq-like context: no
/// sleeping here).
///
/// # Safety
/// `head` is the `head` field of a live `GpWaiter<T>` (only `arm` passes it).
unsafe extern "C" fn grace_period_ended<T: GpDone>(head: *mut bindings::callback_head) {
    let offset = core::mem::offset_of!(GpWaiter<T>, head);
    // SAFETY: per the contract, stepping back gives the waiter.
    let waiter = unsafe { &*head.cast::<u8>().sub(offset).cast::<GpWaiter<T>>() };
    waiter.armed.store(false, Ordering::Release);
    let wq = waiter.wq.load(Ordering::Acquire);
    if !wq.is_null() {
        // SAFETY: the queue outlives the waiter's work (`stop` clears `wq`
        // and waits for callbacks before the queue goes); queueing a pending
        // item is a no-op.
        unsafe { bindings::queue_work_on(dm::RTHIN_WORK_CPU_UNBOUND, wq, waiter.work.get()) };
    }
}

/// The work function.
///
/// # Safety
/// Called by the workqueue with the `work` field of a live `GpWaiter<T>`.
unsafe extern "C" fn run<T: GpDone>(work: *mut bindings::work_struct) {
    let offset = core::mem::offset_of!(GpWaiter<T>, work);
    // SAFETY: `work` is the `work` field of a `GpWaiter<T>` (only `new` sets
    // this function).
    let waiter = unsafe { &*work.cast::<u8>().sub(offset).cast::<GpWaiter<T>>() };
    let owner = waiter.owner.load(Ordering::Acquire);
    if owner.is_null() {
        return;
    }
    // SAFETY: the owner outlives the waiter's work (`stop` runs before it
    // goes).
    unsafe { (*owner).gp_done() };
}

impl<T: GpDone> GpWaiter<T> {
    /// A stopped waiter.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            head: Opaque::uninit(),
            // SAFETY: INIT_WORK on the waiter's own, pinned item.
            work <- Opaque::ffi_init(|w| unsafe { dm::rthin_init_work(w, Some(run::<T>)) }),
            armed: AtomicBool::new(false),
            owner: AtomicPtr::new(ptr::null_mut()),
            wq: AtomicPtr::new(ptr::null_mut()),
            _pin: PhantomPinned,
        })
    }

    /// Calls `owner` on `wq` from now on; both must stay at their address
    /// until [`Self::stop`] returns.
    pub(crate) fn start(&self, owner: &T, wq: &IoQueue) {
        self.owner
            .store(ptr::from_ref(owner).cast_mut(), Ordering::Release);
        self.wq.store(wq.raw(), Ordering::Release);
    }

    /// Has the owner called back after a grace period of `tracker` that
    /// starts now (or after the one already armed, which started earlier:
    /// the owner then finds its cookie not yet done and arms again).
    pub(crate) fn arm(&self, tracker: &IoTracker) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: the head is ours and idle (`armed` was false: no callback
        // pending on it); the waiter is pinned and outlives the callback
        // (`stop` waits for it).
        unsafe {
            bindings::call_srcu(
                tracker.raw(),
                self.head.get(),
                Some(grace_period_ended::<T>),
            )
        };
    }

    /// Waits until a run of the owner's callback that is queued or running
    /// has returned.
    pub(crate) fn flush(&self) {
        // SAFETY: the work item is initialised (flushing an idle one is fine).
        unsafe { bindings::flush_work(self.work.get()) };
    }

    /// Stops calling back: waits for a pending callback of `tracker` and
    /// for a running or queued work item.
    pub(crate) fn stop(&self, tracker: &IoTracker) {
        self.wq.store(ptr::null_mut(), Ordering::Release);
        // SAFETY: the domain is initialised; the work item is initialised
        // (cancelling an idle item is fine).
        unsafe {
            bindings::srcu_barrier(tracker.raw());
            bindings::cancel_work_sync(self.work.get());
        }
    }
}

/// Scenarios for the module's KUnit suite (they need a running kernel).
pub(crate) mod selftest {
    use kernel::{
        prelude::*,
        time::{delay::fsleep, Delta},
    };

    use super::IoTracker;

    /// A grace period started while a read side is open does not end, however
    /// long one waits, until that read side ends; then it does.
    pub(crate) fn grace_period_waits_for_reader() -> bool {
        let Ok(tracker) = KBox::pin_init(IoTracker::new(), GFP_KERNEL) else {
            return false;
        };
        let Some(token) = tracker.enter() else {
            return false;
        };
        let cookie = tracker.start_poll();
        let mut ok = true;
        for _ in 0..20 {
            fsleep(Delta::from_millis(10));
            ok &= !tracker.poll(cookie);
        }
        tracker.exit(token);
        let mut ended = false;
        for _ in 0..1000 {
            if tracker.poll(cookie) {
                ended = true;
                break;
            }
            fsleep(Delta::from_millis(10));
        }
        ok && ended
    }
}
