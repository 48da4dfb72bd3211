// SPDX-License-Identifier: GPL-2.0
//! The pool's workqueue for the I/O path (`WQ_MEM_RECLAIM`, per CPU).

use core::ptr::NonNull;
use kernel::{bindings, prelude::*};

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
}

impl Drop for IoQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; destroy drains queued work first. Work
        // items of this queue live in objects that outlive it (they hold a
        // reference on the pool that owns the queue).
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}
