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
//!
//! Beside this file: `bio/hook.rs` (dm's per-bio data, and the state of a
//! bio a provision hooks; `glue/hooked.rs` hooks it and hands it back) and
//! `bio/list.rs` ([`BioList`]).

use core::{marker::PhantomData, ptr::NonNull};
use kernel::bindings;

use super::{
    bindings as dm,
    device::{BdevHandle, DmDev},
    inflight::{IoToken, IoTracker},
};
use crate::dm::pool_mode::IoError;

mod hook;
mod list;

pub(in crate::glue) use hook::{pending_per_bio, HookState, SavedIter};
use hook::{per_bio_of, release_owner, store_token};
pub(crate) use hook::{PerBio, Provision};
pub(crate) use list::BioList;

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
    /// dm keeps a [`PerBio`] in front of the bio.
    per_bio: bool,
    _borrow: PhantomData<&'a mut bindings::bio>,
}

impl Bio<'_> {
    /// Wraps the bio passed to a map callback.
    ///
    /// # Safety
    /// `raw` must point to a live bio that the caller owns exclusively for the
    /// lifetime of the returned value (dm guarantees this during `map`), and
    /// dm must keep a [`PerBio`] in front of it if `per_bio` is set.
    pub(crate) unsafe fn from_raw(raw: NonNull<bindings::bio>, per_bio: bool) -> Self {
        Self {
            raw,
            per_bio,
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

    /// Points the bio at the device of `dev`.
    pub(crate) fn set_bdev(&mut self, dev: &BdevHandle) {
        // SAFETY: the bio is live and ours; the handle keeps its device open
        // now. Once the bio is remapped it is in flight for its thin target,
        // which dm destroys only after the bio completes and which holds the
        // devices it remaps to open (its `DmDev`s) until then.
        unsafe { dm::rthin_bio_set_dev(self.raw.as_ptr(), dev.raw()) };
    }

    /// Moves the bio to `sector` of `dev`.
    pub(crate) fn remap_bdev(&mut self, dev: &BdevHandle, sector: u64) {
        self.set_bdev(dev);
        // SAFETY: as in `opf`.
        unsafe { (*self.raw.as_ptr()).bi_iter.bi_sector = sector };
    }

    /// Shortens the bio to its first `sectors` sectors (reads that reach
    /// past the end of an external origin: the rest was zero-filled).
    pub(crate) fn truncate(&mut self, sectors: u64) {
        let bytes = u32::try_from(sectors.saturating_mul(512)).unwrap_or(u32::MAX);
        // SAFETY: as in `opf`.
        unsafe {
            let size = &mut (*self.raw.as_ptr()).bi_iter.bi_size;
            *size = (*size).min(bytes);
        }
    }

    /// Whether dm keeps per-bio data for the bio.
    pub(crate) fn has_per_bio(&self) -> bool {
        self.per_bio
    }

    /// The bio and its per-bio data, for a hook to set up (`None` without
    /// per-bio data).
    pub(in crate::glue) fn for_hook(&mut self) -> Option<(NonNull<bindings::bio>, &mut PerBio)> {
        let raw = self.raw;
        self.per_bio_data().map(|ctx| (raw, ctx))
    }

    fn per_bio_data(&mut self) -> Option<&mut PerBio> {
        // SAFETY: the bio is lent to us (`from_raw`'s contract, which also
        // says whether dm keeps a `PerBio`); the borrow of `self` covers it.
        unsafe { per_bio_of(self.raw, self.per_bio) }
    }

    /// Clears the per-bio data: dm does not initialise it, so the map call
    /// does this first.
    pub(crate) fn init_per_bio(&mut self) {
        if let Some(ctx) = self.per_bio_data() {
            ctx.state = HookState::None;
            ctx.inflight = core::ptr::null_mut();
            ctx.owner = core::ptr::null();
            ctx.saved_iter = None;
        }
    }

    /// Records the bio's in-flight read side (of `tracker`), ended when the
    /// bio completes ([`Self::take_inflight`] in `end_io`).
    pub(crate) fn track(&mut self, tracker: &IoTracker, token: IoToken) {
        store_token(self.per_bio_data(), tracker, token);
    }

    /// The in-flight read side recorded by [`Self::track`], once.
    pub(crate) fn take_inflight(&mut self) -> Option<IoToken> {
        let ctx = self.per_bio_data()?;
        // Not `mem::take`: see `hook::release_owner` (rustc 1.85 has no
        // `Default` for raw pointers).
        let scp = ctx.inflight;
        ctx.inflight = core::ptr::null_mut();
        // SAFETY: a non-null `inflight` was stored from a token by `track`
        // and is cleared here, so it is ended once.
        NonNull::new(scp).map(|p| unsafe { IoToken::from_raw(p) })
    }

    /// Keeps the bio past the map call; the map call must then return
    /// `MapResult::Submitted`.
    pub(crate) fn defer(self) -> OwnedBio {
        OwnedBio {
            raw: self.raw,
            per_bio: self.per_bio,
        }
    }
}

/// A bio the target kept after its map call returned `DM_MAPIO_SUBMITTED`.
pub(crate) struct OwnedBio {
    pub(in crate::glue) raw: NonNull<bindings::bio>,
    pub(in crate::glue) per_bio: bool,
}

// SAFETY: the bio belongs to the target until it is submitted or completed,
// which any thread (a worker) may do.
unsafe impl Send for OwnedBio {}

impl OwnedBio {
    /// A temporary view with the accessors of a lent bio.
    pub(crate) fn view(&mut self) -> Bio<'_> {
        // SAFETY: we own the bio; the view borrows `self` mutably; `per_bio`
        // was true of the lent bio we came from.
        unsafe { Bio::from_raw(self.raw, self.per_bio) }
    }

    pub(in crate::glue) fn per_bio(&mut self) -> Option<&mut PerBio> {
        // SAFETY: we own the bio, so the borrow of `self` covers its per-bio
        // data, which dm keeps in front of it if `per_bio` is set.
        unsafe { per_bio_of(self.raw, self.per_bio) }
    }

    /// dm keeps per-bio data for the bio (a provision can hook it).
    pub(crate) fn has_per_bio(&self) -> bool {
        self.per_bio
    }

    /// The bio's I/O ended with an error (its status is not 0).
    pub(crate) fn failed(&self) -> bool {
        // SAFETY: we own the bio.
        unsafe { (*self.raw.as_ptr()).bi_status != 0 }
    }

    /// As [`Bio::track`], for a bio a worker remaps.
    pub(crate) fn track(&mut self, tracker: &IoTracker, token: IoToken) {
        store_token(self.per_bio(), tracker, token);
    }

    /// Lets go of what a hook that came back still holds; every way of
    /// ending an owned bio goes through this.
    fn release_hook(&mut self) {
        if let Some(ctx) = self.per_bio() {
            release_owner(ctx);
        }
    }

    /// The bio, for ending it, with its hook let go.
    fn into_ending(mut self) -> *mut bindings::bio {
        self.release_hook();
        self.into_raw()
    }

    /// Completes the bio with whatever status its I/O left.
    pub(crate) fn finish(self) {
        let raw = self.into_ending();
        // SAFETY: we own the bio and end it exactly once.
        unsafe { bindings::bio_endio(raw) };
    }

    pub(in crate::glue) fn into_raw(self) -> *mut bindings::bio {
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
        let raw = self.into_ending();
        // SAFETY: we own the bio and end it exactly once.
        unsafe {
            (*raw).bi_status = status;
            bindings::bio_endio(raw);
        }
    }

    /// Hands the bio back to dm, which issues it again after the device
    /// resumes (`BLK_STS_DM_REQUEUE`; only during a noflush suspend).
    pub(crate) fn requeue_to_dm(self) {
        let raw = self.into_ending();
        // SAFETY: we own the bio and end it exactly once.
        unsafe {
            (*raw).bi_status = dm::RTHIN_BLK_STS_DM_REQUEUE;
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
        self.release_hook();
        // SAFETY: we own the bio and end it exactly once.
        unsafe {
            (*self.raw.as_ptr()).bi_status = dm::RTHIN_BLK_STS_IOERR;
            bindings::bio_endio(self.raw.as_ptr());
        }
    }
}
