// SPDX-License-Identifier: GPL-2.0
//! A borrowed view of a `struct bio` handed to a target's map function.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::bindings;

use super::{bindings as dm, dm::DmDev};

/// A bio lent to the target for the duration of one map call.
pub(crate) struct Bio<'a> {
    raw: NonNull<bindings::bio>,
    _borrow: PhantomData<&'a mut bindings::bio>,
}

impl Bio<'_> {
    /// Wraps the bio passed to a map callback.
    ///
    /// # Safety
    /// `raw` must point to a live bio that the caller owns exclusively for the
    /// lifetime of the returned value (dm guarantees this during `map`).
    pub(crate) unsafe fn from_raw(raw: NonNull<bindings::bio>) -> Self {
        Self {
            raw,
            _borrow: PhantomData,
        }
    }

    /// Points the bio at another device; the sector is left as it is.
    pub(crate) fn set_dev(&mut self, dev: &DmDev) {
        // SAFETY: the bio is live and ours (`from_raw`'s contract); `dev` holds a
        // reference on the block device for as long as the target exists,
        // which outlives every bio the target maps.
        unsafe { dm::rthin_bio_set_dev(self.raw.as_ptr(), dev.bdev()) };
    }
}
