// SPDX-License-Identifier: GPL-2.0
//! Bios: the one lent to a map call ([`Bio`]), one the target kept to finish
//! later ([`OwnedBio`]), and lists of kept bios ([`BioList`]).
//!
//! A map call either remaps its bio and returns it to dm, or *defers* it:
//! [`Bio::defer`] turns the loan into ownership, the map call returns
//! `DM_MAPIO_SUBMITTED`, and whoever holds the [`OwnedBio`] later submits it
//! ([`OwnedBio::submit`]) or completes it ([`OwnedBio::complete`]). An owned
//! bio that is dropped without either is completed with an I/O error, so no
//! code path can strand a bio (and hang its submitter).

use core::{marker::PhantomData, ptr::NonNull};
use kernel::bindings;

use super::{
    bindings as dm,
    dm::{BdevHandle, DmDev},
};
use crate::dm_pool_mode::IoError;

/// What a bio asks for, as far as thin provisioning cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BioKind {
    /// Reads data.
    Read,
    /// Writes data.
    Write,
    /// A flush without data (`REQ_OP_FLUSH`, or an empty `REQ_PREFLUSH` write).
    EmptyFlush,
    /// Discards a range.
    Discard,
    /// Anything else (write-zeroes, secure erase, zone ops): not supported.
    Other,
}

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

    fn opf(&self) -> u32 {
        // SAFETY: the bio is live and ours (`from_raw`'s contract).
        unsafe { (*self.raw.as_ptr()).bi_opf }
    }

    /// First sector.
    pub(crate) fn sector(&self) -> u64 {
        // SAFETY: as in `opf`.
        unsafe { (*self.raw.as_ptr()).bi_iter.bi_sector }
    }

    /// Length in sectors.
    pub(crate) fn nr_sectors(&self) -> u64 {
        // SAFETY: as in `opf`.
        u64::from(unsafe { (*self.raw.as_ptr()).bi_iter.bi_size }) >> 9
    }

    /// What the bio asks for.
    pub(crate) fn kind(&self) -> BioKind {
        let opf = self.opf();
        match opf & dm::RTHIN_REQ_OP_MASK {
            bindings::req_op_REQ_OP_READ => BioKind::Read,
            bindings::req_op_REQ_OP_WRITE if self.nr_sectors() == 0 => BioKind::EmptyFlush,
            bindings::req_op_REQ_OP_WRITE => BioKind::Write,
            bindings::req_op_REQ_OP_FLUSH => BioKind::EmptyFlush,
            bindings::req_op_REQ_OP_DISCARD => BioKind::Discard,
            _ => BioKind::Other,
        }
    }

    /// The bio asks for durability (`REQ_PREFLUSH` or `REQ_FUA`).
    pub(crate) fn wants_durability(&self) -> bool {
        self.opf() & (dm::RTHIN_REQ_PREFLUSH | dm::RTHIN_REQ_FUA) != 0
    }

    /// Points the bio at another device; the sector is left as it is.
    pub(crate) fn set_dev(&mut self, dev: &DmDev) {
        // SAFETY: the bio is live and ours (`from_raw`'s contract); `dev` holds a
        // reference on the block device for as long as the target exists,
        // which outlives every bio the target maps.
        unsafe { dm::rthin_bio_set_dev(self.raw.as_ptr(), dev.bdev()) };
    }

    /// Points the bio at a device the target holds open.
    pub(crate) fn set_bdev(&mut self, dev: BdevHandle) {
        // SAFETY: the bio is live and ours; the handle's device is open while
        // the target exists (`BdevHandle`'s contract).
        unsafe { dm::rthin_bio_set_dev(self.raw.as_ptr(), dev.raw()) };
    }

    /// Moves the bio to `sector` of `dev`.
    pub(crate) fn remap_bdev(&mut self, dev: BdevHandle, sector: u64) {
        self.set_bdev(dev);
        // SAFETY: as in `opf`.
        unsafe { (*self.raw.as_ptr()).bi_iter.bi_sector = sector };
    }

    /// Keeps the bio past the map call; the map call must then return
    /// `MapResult::Submitted`.
    pub(crate) fn defer(self) -> OwnedBio {
        OwnedBio { raw: self.raw }
    }
}

/// A bio the target kept after its map call returned `DM_MAPIO_SUBMITTED`.
pub(crate) struct OwnedBio {
    raw: NonNull<bindings::bio>,
}

// SAFETY: the bio belongs to the target until it is submitted or completed,
// which any thread (a worker) may do.
unsafe impl Send for OwnedBio {}

impl OwnedBio {
    /// A temporary view with the accessors of a lent bio.
    pub(crate) fn view(&mut self) -> Bio<'_> {
        // SAFETY: we own the bio; the view borrows `self` mutably.
        unsafe { Bio::from_raw(self.raw) }
    }

    fn into_raw(self) -> *mut bindings::bio {
        let raw = self.raw.as_ptr();
        core::mem::forget(self);
        raw
    }

    /// Hands the (remapped) bio to the block layer.
    pub(crate) fn submit(self) {
        // SAFETY: we own the bio and give it away; dm's
        // `dm_submit_bio_remap` accepts the clone it lent to a map call that
        // returned DM_MAPIO_SUBMITTED.
        unsafe { dm::dm_submit_bio_remap(self.into_raw(), core::ptr::null_mut()) };
    }

    /// Completes the bio: success, or the error.
    pub(crate) fn complete(self, error: Option<IoError>) {
        let status = match error {
            None => 0,
            Some(IoError::Io) => dm::RTHIN_BLK_STS_IOERR,
            Some(IoError::NoSpace) => dm::RTHIN_BLK_STS_NOSPC,
        };
        let raw = self.into_raw();
        // SAFETY: we own the bio and end it exactly once.
        unsafe {
            (*raw).bi_status = status;
            bindings::bio_endio(raw);
        }
    }

    /// Fills the bio's pages with zeroes (a read of an unprovisioned block).
    pub(crate) fn zero_fill(&mut self) {
        // SAFETY: we own the bio; its pages are ours to write until it ends.
        unsafe { bindings::zero_fill_bio(self.raw.as_ptr()) };
    }
}

impl Drop for OwnedBio {
    fn drop(&mut self) {
        // Reached only if a path forgot the bio: end it rather than strand it.
        // SAFETY: we own the bio and end it exactly once.
        unsafe {
            (*self.raw.as_ptr()).bi_status = dm::RTHIN_BLK_STS_IOERR;
            bindings::bio_endio(self.raw.as_ptr());
        }
    }
}

/// A FIFO of owned bios, linked through `bi_next` (no allocation).
pub(crate) struct BioList {
    head: *mut bindings::bio,
    tail: *mut bindings::bio,
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
        }
    }

    /// True if the list holds no bio.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Appends a bio.
    pub(crate) fn push(&mut self, bio: OwnedBio) {
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
        Some(OwnedBio { raw })
    }

    /// Moves every bio of `other` to the end of this list.
    pub(crate) fn append(&mut self, other: &mut BioList) {
        let taken = core::mem::take(other);
        if taken.is_empty() {
            return;
        }
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
