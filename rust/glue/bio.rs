// SPDX-License-Identifier: GPL-2.0
//! A borrowed view of a `struct bio` handed to a target's map function.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::bindings;

use super::{bindings as dm, dm::DmDev};

/// What a bio asks the device to do, as far as a thin target cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BioOp {
    /// A read.
    Read,
    /// A write (possibly empty, carrying only a flush).
    Write,
    /// A discard.
    Discard,
    /// A pure cache flush.
    Flush,
    /// Anything else (write zeroes, zone operations, ...).
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

    fn get(&self) -> &bindings::bio {
        // SAFETY: `from_raw`'s contract: the bio is live and exclusively ours.
        unsafe { self.raw.as_ref() }
    }

    fn get_mut(&mut self) -> &mut bindings::bio {
        // SAFETY: as in `get`; `&mut self` makes this the only reference.
        unsafe { self.raw.as_mut() }
    }

    /// The first sector, relative to the start of the device the bio targets.
    pub(crate) fn sector(&self) -> u64 {
        self.get().bi_iter.bi_sector
    }

    /// Sets the first sector on the device the bio will be sent to.
    pub(crate) fn set_sector(&mut self, sector: u64) {
        self.get_mut().bi_iter.bi_sector = sector;
    }

    /// The operation.
    pub(crate) fn op(&self) -> BioOp {
        // SAFETY: the bio is live (see `get`); `rthin_bio_op` only reads it.
        let op = unsafe { dm::rthin_bio_op(self.raw.as_ptr()) };
        match op {
            bindings::req_op_REQ_OP_READ => BioOp::Read,
            bindings::req_op_REQ_OP_WRITE => BioOp::Write,
            bindings::req_op_REQ_OP_DISCARD => BioOp::Discard,
            bindings::req_op_REQ_OP_FLUSH => BioOp::Flush,
            _ => BioOp::Other,
        }
    }

    /// Whether the bio asks for the device cache to be flushed first.
    pub(crate) fn has_preflush(&self) -> bool {
        self.get().bi_opf & dm::RTHIN_REQ_PREFLUSH != 0
    }

    /// Points the bio at another device; the sector is left as it is.
    pub(crate) fn set_dev(&mut self, dev: &DmDev) {
        // SAFETY: the bio is live and ours (see `get`); `dev` holds a
        // reference on the block device for as long as the target exists,
        // which outlives every bio the target maps.
        unsafe { dm::rthin_bio_set_dev(self.raw.as_ptr(), dev.bdev()) };
    }
}
