// SPDX-License-Identifier: GPL-2.0
//! The pool's workqueue for the I/O path (`WQ_MEM_RECLAIM`, per CPU), and
//! what `kernel::workqueue` lacks for it: queueing on a given CPU, waiting
//! for a work item.

use core::ptr::NonNull;
use kernel::{
    bindings,
    prelude::*,
    workqueue::{RawWorkItem, Work},
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
}

/// Waits until `work` is neither queued nor running.
pub(super) fn flush_work<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised work item (a `Work` is only made
    // initialised, by `Work::new`); flushing an idle item returns at once.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; destroy drains queued work first. Work
        // items of this queue live in objects that outlive it (they hold a
        // reference on the pool that owns the queue).
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}
