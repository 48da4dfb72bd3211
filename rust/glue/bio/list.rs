// SPDX-License-Identifier: GPL-2.0
//! Lists of owned bios, linked through `bi_next`: the deferred lists and the
//! held and waiting bios, with no allocation.

use core::ptr::NonNull;
use kernel::bindings;

use super::OwnedBio;

/// A FIFO of owned bios, linked through `bi_next` (no allocation).
pub(crate) struct BioList {
    head: *mut bindings::bio,
    tail: *mut bindings::bio,
    /// The bios have per-bio data (all come from one target).
    per_bio: bool,
}

// SAFETY: the list owns its bios (see `OwnedBio`'s Send).
unsafe impl Send for BioList {}

impl Default for BioList {
    fn default() -> Self {
        Self::new()
    }
}

impl BioList {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Self {
            head: core::ptr::null_mut(),
            tail: core::ptr::null_mut(),
            per_bio: false,
        }
    }

    /// True if the list holds no bio.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Appends a bio.
    pub(crate) fn push(&mut self, bio: OwnedBio) {
        self.per_bio = bio.per_bio;
        let raw = bio.into_raw();
        // SAFETY: we own `raw` and every bio on the list; `bi_next` is free
        // for the owner's use while a bio is not in flight.
        unsafe {
            (*raw).bi_next = core::ptr::null_mut();
            if self.tail.is_null() {
                self.head = raw;
            } else {
                (*self.tail).bi_next = raw;
            }
        }
        self.tail = raw;
    }

    /// Removes the first bio.
    pub(crate) fn pop(&mut self) -> Option<OwnedBio> {
        let raw = NonNull::new(self.head)?;
        // SAFETY: `raw` is on the list, which owns it.
        unsafe {
            self.head = (*raw.as_ptr()).bi_next;
            (*raw.as_ptr()).bi_next = core::ptr::null_mut();
        }
        if self.head.is_null() {
            self.tail = core::ptr::null_mut();
        }
        // Every bio on a list came from a map call of the same target.
        Some(OwnedBio {
            raw,
            per_bio: self.per_bio,
        })
    }

    /// Moves every bio of `other` to the end of this list.
    pub(crate) fn append(&mut self, other: &mut BioList) {
        let taken = core::mem::take(other);
        if taken.is_empty() {
            return;
        }
        self.per_bio = taken.per_bio;
        if self.tail.is_null() {
            self.head = taken.head;
        } else {
            // SAFETY: `tail` is on this list, which owns it.
            unsafe { (*self.tail).bi_next = taken.head };
        }
        self.tail = taken.tail;
        core::mem::forget(taken);
    }
}

impl Drop for BioList {
    fn drop(&mut self) {
        // Each popped bio ends with an I/O error in `OwnedBio::drop`.
        while self.pop().is_some() {}
    }
}
