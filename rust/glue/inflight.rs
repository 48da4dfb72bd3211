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
//! runs its owner's [`GpDone::gp_done`] on the owner's workqueue after a
//! grace period.

use core::{
    marker::PhantomPinned,
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{
    bindings, container_of,
    error::to_result,
    new_spinlock_irq, new_work,
    prelude::*,
    sync::{Arc, SpinLockIrq},
    types::Opaque,
    workqueue::{impl_has_work, Work, WorkItem},
};

use super::{
    bindings as dm,
    queue::{cancel_work, flush_work, IoQueue},
};

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
    /// The tracker whose grace periods the waiter waits for: the owner's,
    /// so that it lives as long as the waiter holds the owner.
    fn gp_tracker(&self) -> &IoTracker;
    /// The workqueue [`Self::gp_done`] runs on: the owner's, as the tracker.
    fn gp_queue(&self) -> &IoQueue;
}

/// Calls its owner back on a workqueue once a grace period of the owner's
/// tracker has ended: one `call_srcu` in flight at a time, whatever the
/// number of waiters.
///
/// The waiter holds its owner from [`Self::start`] to [`Self::stop`] (an
/// owner that keeps its own waiter is kept alive by it until then), so no
/// callback runs for an owner that has gone; a pending callback and a
/// queued work item each hold a reference on the waiter
/// (`kernel::workqueue`'s model), so neither outlives it.
#[pin_data]
pub(crate) struct GpWaiter<T: GpDone> {
    #[pin]
    head: Opaque<bindings::callback_head>,
    #[pin]
    work: Work<GpWaiter<T>>,
    /// A `call_srcu` is pending on `head`.
    armed: AtomicBool,
    /// The owner while started. Irq-safe (the SRCU callback reads it), a
    /// leaf lock held to read or swap it and to arm.
    #[pin]
    owner: SpinLockIrq<Option<Arc<T>>>,
}

// SAFETY: the callback head is only touched through the RCU API (by `arm`,
// while no callback is pending on it); everything else is `Send`/`Sync`.
unsafe impl<T: GpDone> Send for GpWaiter<T> {}
// SAFETY: as above.
unsafe impl<T: GpDone> Sync for GpWaiter<T> {}

impl_has_work! {
    impl{T: GpDone} HasWork<Self> for GpWaiter<T> { self.work }
}

impl<T: GpDone> WorkItem for GpWaiter<T> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let Some(owner) = this.owner.lock().clone() else {
            return;
        };
        owner.gp_done();
    }
}

/// The SRCU callback: queue the owner's work (softirq-like context: no
/// sleeping here).
///
/// # Safety
/// `head` is the `head` field of a `GpWaiter<T>` in an `Arc`, for which
/// `arm` leaked one reference that this callback now owns.
unsafe extern "C" fn grace_period_ended<T: GpDone>(head: *mut bindings::callback_head) {
    let head = head.cast::<Opaque<bindings::callback_head>>();
    // SAFETY: per the contract, stepping back from the field gives the
    // waiter, and the reference `arm` leaked is ours.
    let this = unsafe { Arc::from_raw(container_of!(head, GpWaiter<T>, head)) };
    this.armed.store(false, Ordering::Release);
    let owner = this.owner.lock();
    if let Some(owner) = &*owner {
        // Already queued: that run calls the owner anyway.
        let _ = owner.gp_queue().enqueue(this.clone());
    }
}

impl<T: GpDone> GpWaiter<T> {
    /// A stopped waiter.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                head: Opaque::uninit(),
                work <- new_work!("rthin_gp_waiter"),
                armed: AtomicBool::new(false),
                owner <- new_spinlock_irq!(None, "rthin_gp_waiter_owner"),
            }),
            GFP_KERNEL,
        )
    }

    /// Calls `owner` back from now on, holding it until [`Self::stop`]; no
    /// effect if already started.
    pub(crate) fn start(&self, owner: &Arc<T>) {
        let mut held = self.owner.lock();
        if held.is_none() {
            *held = Some(owner.clone());
        }
    }

    /// Has the owner called back after a grace period of its tracker that
    /// starts now (or after the one already armed, which started earlier:
    /// the owner then finds its cookie not yet done and arms again). No
    /// effect unless started.
    pub(crate) fn arm(self: &Arc<Self>) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        let owner = self.owner.lock();
        let Some(owner) = &*owner else {
            self.armed.store(false, Ordering::Release);
            return;
        };
        // The callback's reference, given back by `grace_period_ended`.
        let _ = Arc::into_raw(self.clone());
        // SAFETY: the head is ours and idle (`armed` was false: no callback
        // is pending on it); the callback owns a reference on the waiter;
        // the domain is the owner's, alive while the owner is held, and
        // `stop` waits for pending callbacks before it lets the owner go (it
        // takes the owner under the lock held here, so no arm follows).
        unsafe {
            bindings::call_srcu(
                owner.gp_tracker().raw(),
                self.head.get(),
                Some(grace_period_ended::<T>),
            )
        };
    }

    /// Waits until a run of the owner's callback that is queued or running
    /// has returned.
    pub(crate) fn flush(&self) {
        flush_work(&self.work);
    }

    /// Stops calling back: waits for a pending callback and for a running
    /// or queued work item, and lets the owner go.
    pub(crate) fn stop(self: &Arc<Self>) {
        let Some(owner) = self.owner.lock().take() else {
            return;
        };
        // SAFETY: the owner's domain is initialised and alive (held).
        unsafe { bindings::srcu_barrier(owner.gp_tracker().raw()) };
        if cancel_work(&self.work) {
            // SAFETY: a queued instance of this item holds one reference on
            // this `Arc`, leaked by `Arc::into_raw` when it was queued; once
            // cancelled nothing else will release it.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(self)) });
        }
        drop(owner);
    }
}

/// Scenarios for the module's KUnit suite (they need a running kernel).
#[cfg(feature = "selftest")]
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
