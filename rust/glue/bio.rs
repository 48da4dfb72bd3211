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
    device::{BdevHandle, DmDev},
    inflight::{IoToken, IoTracker},
};
use crate::dm::pool_mode::IoError;

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

/// How a provision's new block gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// The bio's own write of the whole block.
    Overwrite,
    /// A kcopyd job (zeroes, or a copy of the shared block) before the bio's
    /// partial write.
    Kcopyd,
}

/// A provision in flight with its bio: the mapping goes in once the block
/// holds its data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Provision {
    /// The virtual block.
    pub(crate) vblock: u64,
    /// The new data block.
    pub(crate) data_block: u64,
    /// The pool's metadata epoch when the block was allocated.
    pub(crate) epoch: u64,
    /// The block replaces a shared one (copy-on-write).
    pub(crate) breaks_sharing: bool,
    /// Where its data comes from.
    pub(crate) fill: Fill,
}

/// Whoever gets a hooked bio back when its write completes.
pub(crate) trait Requeue: Send + Sync + 'static {
    /// Takes back a bio whose hooked write or kcopyd fill completed (may
    /// run in interrupt context: only queue it).
    fn requeue_completed(&self, bio: OwnedBio);
}

/// Where a deferred bio stands, in its per-bio data.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum HookState {
    /// Not hooked.
    None,
    /// Submitted with `hooked_endio` as its completion, or parked in a
    /// kcopyd job that ends in `fill_done`.
    Pending,
    /// Its write or fill completed; the owner has it back.
    Completed,
    /// Its provision is mapped; a commit is due before it completes.
    CommitThenFinish,
}

/// The per-bio data dm keeps in front of each clone for targets that ask for
/// it ([`super::dm::TargetCtx::reserve_per_bio_data`]).
#[repr(C)]
pub(crate) struct PerBio {
    state: HookState,
    provision: Provision,
    /// The kcopyd fill succeeded (an overwrite's result is the bio's status).
    fill_ok: bool,
    owner: *const core::ffi::c_void,
    saved_end_io: bindings::bio_end_io_t,
    /// The in-flight read side the bio holds while it may touch a data
    /// block (null: none), ended by the target's `end_io`.
    inflight: *mut bindings::srcu_ctr,
}

/// The per-bio data of `raw`, if dm keeps one in front of it.
///
/// # Safety
/// `raw` is a live bio that the caller owns for the returned lifetime, and
/// dm keeps a [`PerBio`] in front of it if `per_bio` is set.
unsafe fn per_bio_of<'a>(raw: NonNull<bindings::bio>, per_bio: bool) -> Option<&'a mut PerBio> {
    if !per_bio {
        return None;
    }
    // SAFETY: per the contract.
    let p = unsafe { dm::dm_per_bio_data(raw.as_ptr(), size_of::<PerBio>()) };
    // SAFETY: as above; `p` is aligned for the largest member type (dm
    // aligns per-bio data like the bio itself).
    NonNull::new(p.cast::<PerBio>()).map(|mut p| unsafe { p.as_mut() })
}

/// Stores `token`, a read side of `tracker`, in the per-bio data. Ends it
/// at once if there is no per-bio data (the bio is then untracked), and ends
/// one stored before (a bio holds one read side at most).
fn store_token(ctx: Option<&mut PerBio>, tracker: &IoTracker, token: IoToken) {
    let extra = match ctx {
        Some(ctx) => {
            let old = core::mem::replace(&mut ctx.inflight, token.into_raw());
            // SAFETY: a non-null `inflight` was stored from a token here and
            // not ended (it is replaced, so it ends once, below).
            NonNull::new(old).map(|p| unsafe { IoToken::from_raw(p) })
        }
        None => Some(token),
    };
    if let Some(t) = extra {
        tracker.exit(t);
    }
}

/// How a hooked bio's I/O ended.
#[derive(Clone, Copy)]
enum HookEnd {
    /// Its own write, submitted with `hooked_endio`: dm's end_io goes back.
    Write,
    /// The kcopyd fill it was parked in, and whether it succeeded.
    Fill { ok: bool },
}

/// Hands a hooked bio back to the owner its per-bio data names.
///
/// # Safety
/// `raw` is a bio dm lent to our map call with per-bio data, hooked by
/// [`OwnedBio::submit_hooked`] (`end` is `Write`) or [`OwnedBio::into_fill_hook`]
/// (`Fill`) with a live owner of type `T`, and its hooked I/O has just ended.
unsafe fn hand_back<T: Requeue>(raw: *mut bindings::bio, end: HookEnd) {
    let Some(nn) = NonNull::new(raw) else {
        return;
    };
    // It is ours again until we end it.
    let mut bio = OwnedBio {
        raw: nn,
        per_bio: true,
    };
    let Some(ctx) = bio.per_bio() else {
        return;
    };
    ctx.state = HookState::Completed;
    let restore = match end {
        HookEnd::Write => {
            ctx.fill_ok = true;
            Some(ctx.saved_end_io)
        }
        HookEnd::Fill { ok } => {
            ctx.fill_ok = ok;
            None
        }
    };
    let owner = ctx.owner.cast::<T>();
    if let Some(end_io) = restore {
        // SAFETY: we own the bio again; `submit_hooked` saved dm's end_io.
        unsafe { (*nn.as_ptr()).bi_end_io = end_io };
    }
    // SAFETY: per the contract; the owner outlives its in-flight bios.
    unsafe { (*owner).requeue_completed(bio) };
}

/// The completion of a bio submitted by [`OwnedBio::submit_hooked`].
///
/// # Safety
/// Set only by `submit_hooked`, whose per-bio data names a live owner of
/// type `T`.
unsafe extern "C" fn hooked_endio<T: Requeue>(raw: *mut bindings::bio) {
    // SAFETY: per the contract; the write ended.
    unsafe { hand_back::<T>(raw, HookEnd::Write) };
}

/// kcopyd's notify callback for a bio parked by [`OwnedBio::into_fill_hook`].
///
/// # Safety
/// `context` is that bio; its per-bio data names a live owner of type `T`.
unsafe extern "C" fn fill_done<T: Requeue>(
    read_err: kernel::ffi::c_int,
    write_err: kernel::ffi::c_ulong,
    context: *mut core::ffi::c_void,
) {
    let end = HookEnd::Fill {
        ok: read_err == 0 && write_err == 0,
    };
    // SAFETY: per the contract; the kcopyd job ended.
    unsafe { hand_back::<T>(context.cast(), end) };
}

/// A bio parked in a kcopyd job: the job's notify callback and its context.
/// Pass it to exactly one kcopyd call (kcopyd calls notify exactly once,
/// also on failure), or the bio is stranded.
#[must_use]
pub(crate) struct FillHook {
    pub(super) notify: dm::dm_kcopyd_notify_fn,
    pub(super) context: *mut core::ffi::c_void,
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
        let scp = core::mem::take(&mut ctx.inflight);
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
    raw: NonNull<bindings::bio>,
    per_bio: bool,
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

    fn per_bio(&mut self) -> Option<&mut PerBio> {
        // SAFETY: we own the bio, so the borrow of `self` covers its per-bio
        // data, which dm keeps in front of it if `per_bio` is set.
        unsafe { per_bio_of(self.raw, self.per_bio) }
    }

    /// As [`Bio::track`], for a bio a worker remaps.
    pub(crate) fn track(&mut self, tracker: &IoTracker, token: IoToken) {
        store_token(self.per_bio(), tracker, token);
    }

    /// Records the provision and the owner in the per-bio data; `None` if
    /// dm keeps no per-bio data for the bio.
    fn hook<T: Requeue>(&mut self, owner: &T, provision: Provision) -> Option<&mut PerBio> {
        let ctx = self.per_bio()?;
        ctx.state = HookState::Pending;
        ctx.provision = provision;
        ctx.fill_ok = false;
        ctx.owner = core::ptr::from_ref(owner).cast();
        Some(ctx)
    }

    /// Submits a (remapped) bio that writes a whole new block, so that when
    /// its write completes it comes back to `owner`
    /// ([`Requeue::requeue_completed`]) instead of completing; the owner then
    /// finds the provision with [`Self::take_provision`]. Hands the bio back
    /// if dm keeps no per-bio data for it.
    pub(crate) fn submit_hooked<T: Requeue>(
        mut self,
        owner: &T,
        provision: Provision,
    ) -> Result<(), OwnedBio> {
        let raw = self.raw.as_ptr();
        let Some(ctx) = self.hook(owner, provision) else {
            return Err(self);
        };
        // SAFETY: we own the bio; its completion is ours to chain until it
        // ends (`hooked_endio` restores it).
        unsafe {
            ctx.saved_end_io = (*raw).bi_end_io;
            (*raw).bi_end_io = Some(hooked_endio::<T>);
        }
        self.submit();
        Ok(())
    }

    /// Parks the bio while kcopyd fills its new block: the returned hook's
    /// callback hands it back to `owner` ([`Requeue::requeue_completed`])
    /// when the job ends; the owner finds the provision and the job's result
    /// with [`Self::take_provision`]. Hands the bio back if dm keeps no
    /// per-bio data for it.
    pub(crate) fn into_fill_hook<T: Requeue>(
        mut self,
        owner: &T,
        provision: Provision,
    ) -> Result<FillHook, OwnedBio> {
        if self.hook(owner, provision).is_none() {
            return Err(self);
        }
        Ok(FillHook {
            notify: Some(fill_done::<T>),
            context: self.into_raw().cast(),
        })
    }

    /// The provision of a hooked bio whose write or fill completed, and
    /// whether it succeeded; `None` for any other bio.
    pub(crate) fn take_provision(&mut self) -> Option<(Provision, bool)> {
        // SAFETY: we own the bio.
        let written = unsafe { (*self.raw.as_ptr()).bi_status } == 0;
        let ctx = self.per_bio()?;
        if ctx.state != HookState::Completed {
            return None;
        }
        ctx.state = HookState::None;
        let ok = match ctx.provision.fill {
            Fill::Overwrite => written,
            Fill::Kcopyd => ctx.fill_ok,
        };
        Some((ctx.provision, ok))
    }

    /// Marks a bio whose hooked write and provision are done as needing a
    /// commit before it completes ([`Self::take_commit_then_finish`]).
    pub(crate) fn set_commit_then_finish(&mut self) -> bool {
        match self.per_bio() {
            Some(ctx) => {
                ctx.state = HookState::CommitThenFinish;
                true
            }
            None => false,
        }
    }

    /// True (once) for a bio marked by [`Self::set_commit_then_finish`].
    pub(crate) fn take_commit_then_finish(&mut self) -> bool {
        match self.per_bio() {
            Some(ctx) if ctx.state == HookState::CommitThenFinish => {
                ctx.state = HookState::None;
                true
            }
            _ => false,
        }
    }

    /// Completes the bio with whatever status its I/O left.
    pub(crate) fn finish(self) {
        let raw = self.into_raw();
        // SAFETY: we own the bio and end it exactly once.
        unsafe { bindings::bio_endio(raw) };
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

    /// Hands the bio back to dm, which issues it again after the device
    /// resumes (`BLK_STS_DM_REQUEUE`; only during a noflush suspend).
    pub(crate) fn requeue_to_dm(self) {
        let raw = self.into_raw();
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
