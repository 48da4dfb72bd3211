// SPDX-License-Identifier: GPL-2.0
//! A periodic work item (dm-thin's `waker`): calls its owner's
//! [`Tick::tick`] every period on the owner's workqueue until stopped.
//!
//! The ticker holds its owner from [`Ticker::start`] to [`Ticker::stop`], so
//! a tick never runs for an owner that has gone, and the owner's queue lives
//! while the ticker may queue on it. An owner that keeps its own ticker is
//! kept alive by it until then: whoever ends the owner's use stops the
//! ticker (the pool's last user, `pool::SharedPool`). Built on
//! `kernel::workqueue`'s `DelayedWork`: a queued tick holds a reference on
//! the ticker.

use kernel::{
    new_delayed_work, new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
    time::msecs_to_jiffies,
    workqueue::{impl_has_delayed_work, DelayedWork, WorkItem},
};

use super::queue::{cancel_delayed_work, IoQueue};

/// What a ticker calls.
pub(crate) trait Tick: Send + Sync + 'static {
    /// Runs once per period (in a worker, may sleep).
    fn tick(&self);
    /// The workqueue the ticks run on: the owner's, so that it lives as
    /// long as the ticker holds the owner.
    fn tick_queue(&self) -> &IoQueue;
}

/// A periodic delayed work item.
#[pin_data]
pub(crate) struct Ticker<T: Tick> {
    #[pin]
    work: DelayedWork<Ticker<T>>,
    /// The owner while started. A leaf lock, held to read or swap it.
    #[pin]
    owner: SpinLock<Option<Arc<T>>>,
    period_ms: u32,
}

impl_has_delayed_work! {
    impl{T: Tick} HasDelayedWork<Self> for Ticker<T> { self.work }
}

impl<T: Tick> WorkItem for Ticker<T> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        let Some(owner) = this.owner.lock().clone() else {
            return;
        };
        owner.tick();
        Self::arm(this, &owner);
    }
}

impl<T: Tick> Ticker<T> {
    /// A stopped ticker with the given period.
    pub(crate) fn new(period_ms: u32) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                work <- new_delayed_work!("rthin_ticker"),
                owner <- new_spinlock!(None, "rthin_ticker_owner"),
                period_ms,
            }),
            GFP_KERNEL,
        )
    }

    /// Queues the next tick on `owner`'s queue. During [`Self::stop`]
    /// queueing fails, and the reference comes back here and goes.
    fn arm(this: Arc<Self>, owner: &T) {
        let delay = msecs_to_jiffies(this.period_ms);
        let _ = owner.tick_queue().enqueue_delayed(this, delay);
    }

    /// Starts ticking for `owner`, holding it until [`Self::stop`]; no
    /// effect if already started.
    pub(crate) fn start(self: &Arc<Self>, owner: &Arc<T>) {
        {
            let mut held = self.owner.lock();
            if held.is_some() {
                return;
            }
            *held = Some(owner.clone());
        }
        Self::arm(self.clone(), owner);
    }

    /// Stops ticking: cancels the queued tick, waits for a running one to
    /// end, and lets the owner go.
    pub(crate) fn stop(self: &Arc<Self>) {
        let owner = self.owner.lock().take();
        if cancel_delayed_work(&self.work) {
            // The cancelled tick's reference (taken by `enqueue_delayed`).
            // SAFETY: a queued instance of this item holds one reference on
            // this `Arc`, leaked by `Arc::into_raw` when it was queued; once
            // cancelled nothing else will release it.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(self)) });
        }
        drop(owner);
    }
}
