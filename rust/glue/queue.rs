// SPDX-License-Identifier: GPL-2.0
//! The pool's workqueue for the I/O path (`WQ_MEM_RECLAIM`, per CPU), and
//! what `kernel::workqueue` lacks for it: queueing on a given CPU, waiting
//! for a work item, cancelling a delayed one.

use core::ptr::NonNull;
use kernel::{
    bindings, container_of,
    prelude::*,
    time::Jiffies,
    workqueue::{DelayedWork, Queue, RawDelayedWorkItem, RawWorkItem, Work},
};

use super::bindings as dm;

/// A workqueue for the I/O path (`WQ_MEM_RECLAIM`), destroyed on drop.
pub(crate) struct IoQueue(NonNull<bindings::workqueue_struct>);

// SAFETY: workqueues are used from any context; the kernel locks internally.
unsafe impl Send for IoQueue {}
// SAFETY: as above.
unsafe impl Sync for IoQueue {}

impl IoQueue {
    /// Allocates a workqueue named `name`.
    pub(crate) fn new(name: &CStr) -> Result<Self> {
        // SAFETY: `name` is NUL-terminated; the shim returns a queue or NULL.
        NonNull::new(unsafe { dm::rthin_alloc_io_workqueue(name.as_char_ptr()) })
            .map(Self)
            .ok_or(ENOMEM)
    }
}

impl IoQueue {
    /// The raw queue, for other glue that queues on it.
    pub(super) fn raw(&self) -> *mut bindings::workqueue_struct {
        self.0.as_ptr()
    }

    /// Queues `w` to run on `cpu` (`Queue::enqueue` always queues
    /// unbound); as there, an item already queued is handed back.
    pub(super) fn enqueue_on<W, const ID: u64>(&self, cpu: u32, w: W) -> W::EnqueueOutput
    where
        W: RawWorkItem<ID> + Send + 'static,
    {
        let queue = self.raw();
        // `queue_work_on` indexes per-CPU data by the id: one out of range
        // queues unbound instead.
        let cpu = match i32::try_from(cpu) {
            Ok(c) if cpu < kernel::cpu::nr_cpu_ids() => c,
            _ => dm::RTHIN_WORK_CPU_UNBOUND,
        };
        // SAFETY: as in `Queue::enqueue`, with a CPU id that is valid: the
        // closure queues the `work_struct` `__enqueue` hands it, once, on this
        // live queue (which drains queued work before it is destroyed), and
        // returns false only if the item is already queued; `__enqueue`
        // keeps the item valid until its work function runs; `W` is `Send`
        // and `'static`.
        unsafe { w.__enqueue(move |work| bindings::queue_work_on(cpu, queue, work)) }
    }

    /// Queues `w` to run on any CPU (`Queue::enqueue` on this queue).
    pub(super) fn enqueue<W, const ID: u64>(&self, w: W) -> W::EnqueueOutput
    where
        W: RawWorkItem<ID> + Send + 'static,
    {
        // SAFETY: the queue is live for this borrow, and it drains queued
        // work before it is destroyed.
        let queue = unsafe { Queue::from_raw(self.raw()) };
        queue.enqueue(w)
    }

    /// Queues the delayed work item `w` to run after `delay` on any CPU
    /// (`Queue::enqueue_delayed` on this queue).
    ///
    /// The item must be cancelled ([`cancel_delayed_work`]) before the queue
    /// goes: a delayed item sits on a timer, which `destroy_workqueue` does
    /// not drain. The one user, `Ticker`, queues only on its owner's queue
    /// and holds the owner (so the queue) until it has cancelled.
    pub(super) fn enqueue_delayed<W, const ID: u64>(&self, w: W, delay: Jiffies) -> W::EnqueueOutput
    where
        W: RawDelayedWorkItem<ID> + Send + 'static,
    {
        // SAFETY: the queue is live for this borrow (see the doc above for
        // how long the delayed item may use it).
        let queue = unsafe { Queue::from_raw(self.raw()) };
        queue.enqueue_delayed(w, delay)
    }
}

/// Waits until `work` is neither queued nor running.
pub(super) fn flush_work<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised work item (a `Work` is only made
    // initialised, by `Work::new`); flushing an idle item returns at once.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}

/// Cancels `work` if it is queued and waits for a run in progress; true if
/// a queued instance was cancelled (whose reference the caller then owns
/// again). Queueing fails while this runs.
pub(super) fn cancel_work<T: ?Sized, const ID: u64>(work: &Work<T, ID>) -> bool {
    // SAFETY: `work` is a live, initialised work item.
    unsafe { bindings::cancel_work_sync(Work::raw_get(work)) }
}

/// Cancels `work` if it is queued (also on its timer) and waits for a run
/// in progress; true if a queued instance was cancelled (whose reference
/// the caller then owns again). Queueing fails while this runs.
pub(super) fn cancel_delayed_work<T: ?Sized, const ID: u64>(work: &DelayedWork<T, ID>) -> bool {
    // SAFETY: `work` is a live, initialised delayed item, and its
    // `work_struct` is the `work` member of its `delayed_work`.
    unsafe {
        let w = Work::raw_get(DelayedWork::raw_as_work(work));
        bindings::cancel_delayed_work_sync(container_of!(w, bindings::delayed_work, work))
    }
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; destroy drains queued work first. Work
        // items of this queue live in objects that outlive it (they hold a
        // reference on the pool that owns the queue).
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}
