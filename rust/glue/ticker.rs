// SPDX-License-Identifier: GPL-2.0
//! A periodic work item (dm-thin's `waker`): calls its owner's
//! [`Tick::tick`] every period on an I/O workqueue until stopped.

use core::{
    marker::PhantomPinned,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{bindings, prelude::*, time::msecs_to_jiffies, types::Opaque};

use super::{bindings as dm, queue::IoQueue};

/// What a ticker calls.
pub(crate) trait Tick: Send + Sync + 'static {
    /// Runs once per period (in a worker, may sleep).
    fn tick(&self);
}

/// A periodic delayed work item.
#[repr(C)]
#[pin_data]
pub(crate) struct Ticker<T: Tick> {
    #[pin]
    work: Opaque<bindings::delayed_work>,
    owner: AtomicPtr<T>,
    wq: AtomicPtr<bindings::workqueue_struct>,
    period_ms: u32,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the work item is only touched through the workqueue API; the rest
// are atomics pointing at `Sync` objects.
unsafe impl<T: Tick> Send for Ticker<T> {}
// SAFETY: as above.
unsafe impl<T: Tick> Sync for Ticker<T> {}

/// The work function.
///
/// # Safety
/// Called by the workqueue with the `work` field (whose first member is the
/// `work_struct`) of a live, started `Ticker<T>`.
unsafe extern "C" fn run<T: Tick>(work: *mut bindings::work_struct) {
    let offset = core::mem::offset_of!(Ticker<T>, work);
    // SAFETY: `work` is the `work_struct` at the start of the `delayed_work`
    // in a `Ticker<T>`'s `work` field (only `Ticker::new` sets this function).
    let ticker = unsafe { &*work.cast::<u8>().sub(offset).cast::<Ticker<T>>() };
    let owner = ticker.owner.load(Ordering::Acquire);
    if owner.is_null() {
        return;
    }
    // SAFETY: the owner outlives the ticker's work (`Ticker::stop` runs
    // before it goes).
    unsafe { (*owner).tick() };
    ticker.arm();
}

impl<T: Tick> Ticker<T> {
    /// A stopped ticker with the given period.
    pub(crate) fn new(period_ms: u32) -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: INIT_DELAYED_WORK on the ticker's own, pinned item.
            work <- Opaque::ffi_init(|w| unsafe { dm::rthin_init_delayed_work(w, Some(run::<T>)) }),
            owner: AtomicPtr::new(ptr::null_mut()),
            wq: AtomicPtr::new(ptr::null_mut()),
            period_ms,
            _pin: PhantomPinned,
        })
    }

    fn arm(&self) {
        let wq = self.wq.load(Ordering::Acquire);
        if wq.is_null() {
            return;
        }
        let delay = msecs_to_jiffies(self.period_ms);
        // SAFETY: the queue outlives the ticker's work (its owner stops the
        // ticker before dropping the queue); the item is initialised.
        unsafe {
            bindings::queue_delayed_work_on(dm::RTHIN_WORK_CPU_UNBOUND, wq, self.work.get(), delay)
        };
    }

    /// Starts ticking on `wq`, calling `owner`, which must stay at its address
    /// until [`Self::stop`] returns (as must `wq`).
    pub(crate) fn start(&self, owner: &T, wq: &IoQueue) {
        self.owner
            .store(ptr::from_ref(owner).cast_mut(), Ordering::Release);
        self.wq.store(wq.raw(), Ordering::Release);
        self.arm();
    }

    /// Stops ticking and waits for a running tick to end.
    pub(crate) fn stop(&self) {
        self.wq.store(ptr::null_mut(), Ordering::Release);
        // SAFETY: the item is initialised; cancelling an idle item is fine.
        unsafe { bindings::cancel_delayed_work_sync(self.work.get()) };
    }
}
