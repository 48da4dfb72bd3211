// SPDX-License-Identifier: GPL-2.0
//! Safe device-mapper target wrappers.
//!
//! A target implements [`TargetOps`]; [`TargetType`] turns it into a
//! registered `struct target_type` whose C callbacks are generic trampolines
//! below. The trampolines own every pointer dm hands in: they check it, wrap it
//! in a safe type and call the target. A target's private state is a
//! `KBox<T>` kept in `ti->private` from a successful `ctr` until `dtr`.

use core::{
    ffi::CStr,
    fmt,
    marker::PhantomData,
    ptr::{self, NonNull},
};
use kernel::{
    bindings,
    error::to_result,
    ffi::{c_char, c_int, c_uint, c_void},
    prelude::*,
};

use super::{
    bindings as dm,
    bio::{Bio, PerBio},
    device::{DmDev, MdKey},
};
use crate::dm::status_buf::StatusBuf;

/// How a map call disposed of a bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapResult {
    /// The bio was remapped; dm submits it to its new device.
    Remapped,
    /// The target kept the bio ([`Bio::defer`]) and will finish it.
    Submitted,
    /// dm completes the bio with an I/O error.
    Kill,
}

impl MapResult {
    fn to_c(self) -> c_int {
        match self {
            // The DM_MAPIO_* values are small positive constants.
            Self::Remapped => dm::DM_MAPIO_REMAPPED as c_int,
            Self::Submitted => dm::DM_MAPIO_SUBMITTED as c_int,
            Self::Kill => dm::DM_MAPIO_KILL as c_int,
        }
    }
}

/// Which status dm asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusKind {
    /// `dmsetup status`: the target's run-time state.
    Info,
    /// `dmsetup table`: the table line that would recreate the target.
    Table,
}

/// dm's `DM_STATUS_NOFLUSH_FLAG` (drivers/md/dm.h, not in include/): the
/// status request asks the target not to flush (`dmsetup status --noflush`).
const DM_STATUS_NOFLUSH_FLAG: c_uint = 1 << 0;

/// The mapped device a table belongs to: used for its identity and its name.
///
/// A table's mapped device outlives the table's targets, and a pool object
/// that keeps one lives no longer than the last target (pool or thin) that
/// uses it; a thin target holds the pool device open, which pins the pool's
/// mapped device.
pub(crate) struct TableMd(NonNull<dm::mapped_device>);

// SAFETY: `dm_device_name` may be called from any context while the device
// exists (see the type's doc for why it does); nothing else is accessed.
unsafe impl Send for TableMd {}
// SAFETY: as above; only shared reads.
unsafe impl Sync for TableMd {}

impl TableMd {
    /// The key identifying this device.
    pub(crate) fn key(&self) -> MdKey {
        MdKey(self.0.as_ptr() as usize)
    }

    /// The device's name (what `dmsetup ls` shows), as dm-thin prefixes logs.
    pub(crate) fn name(&self) -> &str {
        // SAFETY: the device is alive (type doc); `dm_device_name` returns
        // its NUL-terminated name, which lives as long as the device.
        let name = unsafe { CStr::from_char_ptr(dm::dm_device_name(self.0.as_ptr())) };
        name.to_str().unwrap_or("?")
    }
}

/// The table a target belongs to, for raising dm events on it. The table
/// lives as long as its targets; whoever keeps a `TableRef` drops it before
/// the target that gave it goes (the pool forgets its bound table's
/// reference in the pool target's destructor).
#[derive(Clone, Copy)]
pub(crate) struct TableRef(NonNull<dm::dm_table>);

// SAFETY: `dm_table_event` may be called from any process context while the
// table exists (see the type's doc for why it does).
unsafe impl Send for TableRef {}
// SAFETY: as above.
unsafe impl Sync for TableRef {}

impl TableRef {
    /// Raises a dm event (what `dmsetup wait` and dmeventd wait for).
    pub(crate) fn event(self) {
        // SAFETY: the table exists (type doc).
        unsafe { dm::dm_table_event(self.0.as_ptr()) };
    }
}

/// A constructor failure: the errno returned to dm and the message stored in
/// `ti->error`, which dmsetup and the kernel log show to the user.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CtrError {
    /// The errno.
    pub(crate) error: Error,
    /// What the user reads.
    pub(crate) message: &'static CStr,
}

impl CtrError {
    /// A failure with a positive errno from the core and its message.
    pub(crate) fn new(errno: i32, message: &'static CStr) -> Self {
        Self {
            error: Error::from_errno(errno.saturating_neg()),
            message,
        }
    }
}

/// The target being constructed, as seen by `TargetOps::ctr`.
pub(crate) struct TargetCtx<'a> {
    ti: NonNull<dm::dm_target>,
    _borrow: PhantomData<&'a mut dm::dm_target>,
}

impl TargetCtx<'_> {
    /// Opens `path` (a device path or `major:minor`) with the table's mode;
    /// on failure the error carries `message`.
    pub(crate) fn get_device(
        &mut self,
        path: &CStr,
        message: &'static CStr,
    ) -> Result<DmDev, CtrError> {
        // SAFETY: `ti` is valid during ctr.
        let mode = unsafe { dm::rthin_dm_table_mode(self.ti.as_ptr()) };
        self.get_device_mode(path, mode, message)
    }

    /// Opens `path` for reading only (an external origin).
    pub(crate) fn get_device_read_only(
        &mut self,
        path: &CStr,
        message: &'static CStr,
    ) -> Result<DmDev, CtrError> {
        self.get_device_mode(path, dm::RTHIN_BLK_OPEN_READ, message)
    }

    fn get_device_mode(
        &mut self,
        path: &CStr,
        mode: bindings::blk_mode_t,
        message: &'static CStr,
    ) -> Result<DmDev, CtrError> {
        let mut dev: *mut dm::dm_dev = ptr::null_mut();
        // SAFETY: `ti` is valid during ctr; `path` is NUL-terminated; `dev`
        // is a valid out pointer. dm keeps the device until `dm_put_device`.
        let ret =
            unsafe { dm::dm_get_device(self.ti.as_ptr(), path.as_char_ptr(), mode, &mut dev) };
        if let Err(error) = to_result(ret) {
            return Err(CtrError { error, message });
        }
        let dev = NonNull::new(dev).ok_or(CtrError {
            error: ENODEV,
            message,
        })?;
        Ok(DmDev { ti: self.ti, dev })
    }

    /// The mapped device of the table being built.
    pub(crate) fn table_md(&self) -> Option<TableMd> {
        // SAFETY: `ti` and its table are valid during ctr; the table's
        // mapped device outlives it.
        NonNull::new(unsafe { dm::dm_table_get_md(self.ti.as_ref().table) }).map(TableMd)
    }

    /// The table being built, for events once the target is live.
    pub(crate) fn table(&self) -> Option<TableRef> {
        // SAFETY: `ti` is valid during ctr; dm set its table before ctr.
        NonNull::new(unsafe { self.ti.as_ref().table }).map(TableRef)
    }

    /// The target's length in sectors.
    pub(crate) fn len(&self) -> u64 {
        // SAFETY: `ti` is valid during ctr; dm set `len` before calling it.
        unsafe { self.ti.as_ref().len }
    }

    /// How many empty flush bios each PREFLUSH sends to the target.
    pub(crate) fn set_num_flush_bios(&mut self, n: u32) {
        // SAFETY: ctr has exclusive use of `ti`.
        unsafe { self.ti.as_mut().num_flush_bios = n };
    }

    /// The target takes flushes (and FUA) even when the device below has no
    /// volatile cache: its own metadata needs them (dm-thin's thin does).
    pub(crate) fn set_flush_supported(&mut self) {
        // SAFETY: ctr has exclusive use of `ti`.
        unsafe { self.ti.as_mut().set_flush_supported(true) };
    }

    /// Splits bios so that none crosses a `sectors` boundary.
    pub(crate) fn set_max_io_len(&mut self, sectors: u32) -> Result {
        // SAFETY: ctr has exclusive use of `ti`.
        to_result(unsafe { dm::dm_set_target_max_io_len(self.ti.as_ptr(), sectors.into()) })
    }

    /// Asks dm to keep a [`PerBio`] in front of every bio it maps to the
    /// target (what `OwnedBio::submit_hooked` needs), and tells it that
    /// deferred bios go out through `dm_submit_bio_remap` (for I/O
    /// accounting).
    pub(crate) fn reserve_per_bio_data(&mut self) {
        // SAFETY: ctr has exclusive use of `ti`; the size is small.
        unsafe {
            let ti = self.ti.as_mut();
            ti.per_io_data_size = size_of::<PerBio>() as c_uint;
            ti.set_accounts_remapped_io(true);
        }
    }

    /// Accepts discards whatever the device below supports, one bio per
    /// discard, split on block boundaries only.
    pub(crate) fn enable_discards(&mut self) {
        // SAFETY: ctr has exclusive use of `ti`.
        let ti = unsafe { self.ti.as_mut() };
        ti.num_discard_bios = 1;
        ti.set_discards_supported(true);
        ti.set_max_discard_granularity(true);
    }
}

/// The words of a table line, as dm split them.
pub(crate) struct Args<'a> {
    words: KVec<&'a CStr>,
}

impl<'a> Args<'a> {
    /// Collects the `argc` words dm passes to `ctr` and `message`.
    ///
    /// # Safety
    /// `argv` must hold `argc` valid NUL-terminated strings that stay alive
    /// and unchanged for `'a`.
    unsafe fn from_argv(argc: c_uint, argv: *mut *mut c_char) -> Result<Self> {
        let argc = argc as usize;
        let mut words = KVec::with_capacity(argc, GFP_KERNEL)?;
        for i in 0..argc {
            // SAFETY: the caller guarantees `argc` valid strings in `argv`
            // that outlive `'a`.
            let word = unsafe { CStr::from_char_ptr(*argv.add(i)) };
            // Cannot fail: the capacity covers every word.
            let _ = words.push_within_capacity(word);
        }
        Ok(Self { words })
    }

    /// The words as C strings, for passing back to dm (device paths).
    pub(crate) fn words(&self) -> &[&'a CStr] {
        &self.words
    }
}

/// A device-mapper target type.
#[vtable]
pub(crate) trait TargetOps: Sized + Send + Sync + 'static {
    /// Target name when rthin registers under its own names.
    const NAME: &'static CStr;
    /// Target name when the module parameter asks for dm-thin's names.
    const COMPAT_NAME: &'static CStr;
    /// The version dm reports for the target.
    const VERSION: [c_uint; 3];
    /// `DM_TARGET_*` feature flags ([`features`]).
    const FEATURES: u64 = 0;

    /// Builds the target from its table line.
    fn ctr(ti: &mut TargetCtx<'_>, args: &Args<'_>) -> Result<Self, CtrError>;
    /// Routes one bio; must not sleep. A target that keeps the bio
    /// ([`Bio::defer`]) returns [`MapResult::Submitted`].
    fn map(&self, bio: Bio<'_>) -> MapResult;
    /// A bio this target mapped completed (any context but NMI: no
    /// sleeping); its status is left as it is. Optional: dm calls it only
    /// for a target that implements it (`#[vtable]`'s `HAS_END_IO`).
    fn end_io(&self, _bio: &mut Bio<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Writes the status or table line; `noflush` is set for
    /// `dmsetup status --noflush`.
    fn status(&self, kind: StatusKind, noflush: bool, out: &mut StatusBuf<'_>) -> fmt::Result;
    /// Handles `dmsetup message` (words as dm split them, name first).
    /// Optional: a target without it has no `message` callback, and dm
    /// answers "Target type does not support messages".
    fn message(&self, _words: &[&CStr]) -> Result {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Before the first I/O of a (re)loaded or resumed table.
    fn preresume(&self) -> Result {
        Ok(())
    }
    /// After the table went live.
    fn resume(&self) {}
    /// Before the device is suspended; `noflush` for a suspend that keeps
    /// queued I/O for after the resume (`dmsetup suspend --noflush`).
    fn presuspend(&self, _noflush: bool) {}
    /// A suspend was cancelled after `presuspend`.
    fn presuspend_undo(&self) {}
    /// After the device was suspended (no I/O in flight).
    fn postsuspend(&self) {}
    /// The one device under the target, for dm's queue-limit stacking.
    fn device(&self) -> &DmDev;
    /// Adjusts the limits dm stacked from the device.
    fn io_hints(&self, _limits: &mut QueueLimits<'_>) {}
    /// How many sectors of [`Self::device`] the target uses (by default its
    /// own length `ti_len`); `None` reports no device.
    fn device_len(&self, ti_len: u64) -> Option<u64> {
        Some(ti_len)
    }
}

/// The queue limits dm computed for a target's device, lent to `io_hints`.
pub(crate) struct QueueLimits<'a>(&'a mut bindings::queue_limits);

impl QueueLimits<'_> {
    /// The largest read or write, in sectors.
    pub(crate) fn max_sectors(&self) -> u32 {
        self.0.max_sectors
    }

    /// Sets the largest read or write, in sectors.
    pub(crate) fn set_max_sectors(&mut self, sectors: u32) {
        self.0.max_sectors = sectors;
    }

    /// The optimal I/O size in bytes (0: none).
    pub(crate) fn io_opt(&self) -> u32 {
        self.0.io_opt
    }

    /// Sets the minimum and the optimal I/O size, in bytes.
    pub(crate) fn set_io_min_opt(&mut self, io_min: u32, io_opt: u32) {
        self.0.io_min = io_min;
        self.0.io_opt = io_opt;
    }

    /// Discards are accepted in units of `bytes` (0: not at all).
    pub(crate) fn set_discard_granularity(&mut self, bytes: u32) {
        self.0.discard_granularity = bytes;
    }

    /// The largest discard the device takes, in sectors (0: none).
    pub(crate) fn set_max_hw_discard_sectors(&mut self, sectors: u32) {
        self.0.max_hw_discard_sectors = sectors;
    }
}

/// dm's target feature flags, as the C targets declare them.
pub(crate) mod features {
    use super::dm;

    /// The table holds no other target.
    pub(crate) const SINGLETON: u64 = dm::DM_TARGET_SINGLETON as u64;
    /// The table is always opened for writing.
    pub(crate) const ALWAYS_WRITEABLE: u64 = dm::DM_TARGET_ALWAYS_WRITEABLE as u64;
    /// A reload may not replace the target by another type.
    pub(crate) const IMMUTABLE: u64 = dm::DM_TARGET_IMMUTABLE as u64;
    /// Inline encryption passes through.
    pub(crate) const PASSES_CRYPTO: u64 = dm::DM_TARGET_PASSES_CRYPTO as u64;
}

/// A registered target type for `T`; unregistered on drop.
pub(crate) struct TargetType<T: TargetOps> {
    raw: Pin<KBox<dm::target_type>>,
    _ops: PhantomData<T>,
}

// SAFETY: after registration dm owns the `target_type` and only reads it; we
// touch it again only to unregister, from module exit.
unsafe impl<T: TargetOps> Send for TargetType<T> {}
// SAFETY: as above; `&TargetType` gives no access to the raw structure.
unsafe impl<T: TargetOps> Sync for TargetType<T> {}

impl<T: TargetOps> TargetType<T> {
    /// Registers the target with dm, under dm-thin's name if `compat`.
    pub(crate) fn register(module: &'static ThisModule, compat: bool) -> Result<Self> {
        // SAFETY: an all-zero `target_type` is valid: null names and callbacks
        // and an empty (null) list head that `dm_register_target` initialises.
        let mut tt: dm::target_type = unsafe { core::mem::zeroed() };
        let name = if compat { T::COMPAT_NAME } else { T::NAME };
        tt.name = name.as_char_ptr();
        tt.module = module.as_ptr();
        tt.version = T::VERSION;
        tt.features = T::FEATURES;
        tt.ctr = Some(ctr_trampoline::<T>);
        tt.dtr = Some(dtr_trampoline::<T>);
        tt.map = Some(map_trampoline::<T>);
        if T::HAS_END_IO {
            tt.end_io = Some(end_io_trampoline::<T>);
        }
        tt.status = Some(status_trampoline::<T>);
        tt.iterate_devices = Some(iterate_devices_trampoline::<T>);
        tt.io_hints = Some(io_hints_trampoline::<T>);
        if T::HAS_MESSAGE {
            tt.message = Some(message_trampoline::<T>);
        }
        tt.preresume = Some(preresume_trampoline::<T>);
        tt.resume = Some(resume_trampoline::<T>);
        tt.presuspend = Some(presuspend_trampoline::<T>);
        tt.presuspend_undo = Some(presuspend_undo_trampoline::<T>);
        tt.postsuspend = Some(postsuspend_trampoline::<T>);
        let mut raw = KBox::pin(tt, GFP_KERNEL)?;
        // SAFETY: `raw` is pinned and stays registered until `drop` below
        // unregisters it, so dm never sees a dangling pointer.
        let ret = unsafe { dm::dm_register_target(raw.as_mut().get_mut()) };
        if let Err(e) = to_result(ret) {
            if e == EBUSY {
                pr_err!(
                    "cannot register target {}: the name is taken (unload the module that holds it, e.g. dm-thin-pool, or load without dm_thin_names=1)\n",
                    name.to_str().unwrap_or("?")
                );
            } else {
                pr_err!(
                    "cannot register target {}: error {}\n",
                    name.to_str().unwrap_or("?"),
                    e.to_errno()
                );
            }
            return Err(e);
        }
        Ok(Self {
            raw,
            _ops: PhantomData,
        })
    }
}

impl<T: TargetOps> Drop for TargetType<T> {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; module exit runs after every
        // table using the target is gone (dm holds a module reference).
        unsafe { dm::dm_unregister_target(self.raw.as_mut().get_mut()) };
    }
}

/// Borrows the private state that `ctr_trampoline` stored.
///
/// # Safety
/// `ti` must be a target of type `T` whose ctr succeeded and whose dtr has
/// not run.
unsafe fn private<'a, T: TargetOps>(ti: *mut dm::dm_target) -> &'a T {
    // SAFETY: per the contract, `ti->private` holds `KBox<T>::into_raw`.
    unsafe { &*(*ti).private.cast::<T>() }
}

/// dm's `ctr` callback for `T`.
///
/// # Safety
/// Called by dm only: `ti` is a new target and `argv` holds `argc` valid C
/// strings, all alive for the call.
unsafe extern "C" fn ctr_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    argc: c_uint,
    argv: *mut *mut c_char,
) -> c_int {
    let Some(ti) = NonNull::new(ti) else {
        return EINVAL.to_errno();
    };
    let mut ctx = TargetCtx {
        ti,
        _borrow: PhantomData,
    };
    // SAFETY: dm passes `argc` valid strings in `argv`, alive for the whole
    // ctr call, which bounds the `Args` lifetime.
    let args = match unsafe { Args::from_argv(argc, argv) } {
        Ok(args) => args,
        Err(e) => return e.to_errno(),
    };
    match T::ctr(&mut ctx, &args) {
        Ok(target) => match KBox::new(target, GFP_KERNEL) {
            Ok(boxed) => {
                // SAFETY: ctr has exclusive use of `ti`; the box is reclaimed
                // in `dtr_trampoline`.
                unsafe { (*ti.as_ptr()).private = KBox::into_raw(boxed).cast::<c_void>() };
                0
            }
            Err(_) => {
                set_error(ti, c"Cannot allocate target state");
                ENOMEM.to_errno()
            }
        },
        Err(e) => {
            set_error(ti, e.message);
            e.error.to_errno()
        }
    }
}

fn set_error(ti: NonNull<dm::dm_target>, message: &'static CStr) {
    // dm reads `ti->error` after a failed ctr and never writes through it, so a
    // static string is what it expects (the C targets do the same).
    // SAFETY: ctr has exclusive use of `ti`.
    unsafe { (*ti.as_ptr()).error = message.as_char_ptr().cast_mut() };
}

/// dm's `dtr` callback for `T`.
///
/// # Safety
/// Called by dm only, once, after a successful `ctr` and with no bio in flight.
unsafe extern "C" fn dtr_trampoline<T: TargetOps>(ti: *mut dm::dm_target) {
    // SAFETY: dm calls dtr once, after a successful ctr, when no bio is in
    // flight; `private` holds the box made by `ctr_trampoline`.
    let boxed = unsafe { KBox::from_raw((*ti).private.cast::<T>()) };
    drop(boxed);
}

/// dm's `map` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, with a bio lent for the call.
unsafe extern "C" fn map_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    bio: *mut bindings::bio,
) -> c_int {
    let Some(raw) = NonNull::new(bio) else {
        // A negative errno from map is a BUG() in dm: kill instead.
        return MapResult::Kill.to_c();
    };
    // SAFETY: map only runs between ctr and dtr; dm lends us the bio
    // exclusively until we return.
    // dm keeps `per_io_data_size` bytes in front of every clone it maps.
    let (target, bio) = unsafe {
        let per_bio = (*ti).per_io_data_size as usize >= size_of::<PerBio>();
        (private::<T>(ti), Bio::from_raw(raw, per_bio))
    };
    target.map(bio).to_c()
}

/// dm's `end_io` callback for `T` (set only if `T::HAS_END_IO`).
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, for a bio the target mapped,
/// which is ours again until we return.
unsafe extern "C" fn end_io_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    bio: *mut bindings::bio,
    _error: *mut bindings::blk_status_t,
) -> c_int {
    if let Some(raw) = NonNull::new(bio) {
        // SAFETY: as in `map_trampoline`: dm lends us the completed clone,
        // with the same per-bio data, for the call.
        let (target, mut bio) = unsafe {
            let per_bio = (*ti).per_io_data_size as usize >= size_of::<PerBio>();
            (private::<T>(ti), Bio::from_raw(raw, per_bio))
        };
        target.end_io(&mut bio);
    }
    dm::DM_ENDIO_DONE as c_int
}

/// dm's `status` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, with a writable `result` buffer
/// of `maxlen` bytes.
unsafe extern "C" fn status_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    status_type: dm::status_type_t,
    status_flags: c_uint,
    result: *mut c_char,
    maxlen: c_uint,
) {
    let kind = match status_type {
        dm::status_type_t_STATUSTYPE_INFO => StatusKind::Info,
        dm::status_type_t_STATUSTYPE_TABLE => StatusKind::Table,
        // IMA measurement status is not provided.
        _ => return,
    };
    if result.is_null() || maxlen == 0 {
        return;
    }
    // SAFETY: dm hands a writable buffer of `maxlen` bytes that nothing
    // else touches during the call; status runs between ctr and dtr.
    let (target, buf) = unsafe {
        (
            private::<T>(ti),
            core::slice::from_raw_parts_mut(result.cast::<u8>(), maxlen as usize),
        )
    };
    let mut out = StatusBuf::new(buf);
    // A full buffer truncates the line, which is what dm does with DMEMIT;
    // dm notices and retries with a larger buffer.
    let _ = target.status(kind, status_flags & DM_STATUS_NOFLUSH_FLAG != 0, &mut out);
}

/// dm's `message` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, with `argc` valid C strings
/// in `argv` for the call.
unsafe extern "C" fn message_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    argc: c_uint,
    argv: *mut *mut c_char,
    _result: *mut c_char,
    _maxlen: c_uint,
) -> c_int {
    // SAFETY: dm passes `argc` valid strings in `argv` that live for the
    // whole call, which bounds the borrow.
    let args = match unsafe { Args::from_argv(argc, argv) } {
        Ok(args) => args,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: message runs between ctr and dtr.
    let target = unsafe { private::<T>(ti) };
    match target.message(args.words()) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// dm's `preresume` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`.
unsafe extern "C" fn preresume_trampoline<T: TargetOps>(ti: *mut dm::dm_target) -> c_int {
    // SAFETY: called between ctr and dtr.
    match unsafe { private::<T>(ti) }.preresume() {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// dm's `resume` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`.
unsafe extern "C" fn resume_trampoline<T: TargetOps>(ti: *mut dm::dm_target) {
    // SAFETY: called between ctr and dtr.
    unsafe { private::<T>(ti) }.resume();
}

/// dm's `presuspend` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`.
unsafe extern "C" fn presuspend_trampoline<T: TargetOps>(ti: *mut dm::dm_target) {
    // SAFETY: called between ctr and dtr; `dm_noflush_suspending` only
    // reads the suspend flags of the target's device.
    let (target, noflush) = unsafe { (private::<T>(ti), dm::dm_noflush_suspending(ti)) };
    target.presuspend(noflush != 0);
}

/// dm's `presuspend_undo` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`.
unsafe extern "C" fn presuspend_undo_trampoline<T: TargetOps>(ti: *mut dm::dm_target) {
    // SAFETY: called between ctr and dtr.
    unsafe { private::<T>(ti) }.presuspend_undo();
}

/// dm's `postsuspend` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`.
unsafe extern "C" fn postsuspend_trampoline<T: TargetOps>(ti: *mut dm::dm_target) {
    // SAFETY: called between ctr and dtr.
    unsafe { private::<T>(ti) }.postsuspend();
}

/// dm's `io_hints` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, with the limits being built.
unsafe extern "C" fn io_hints_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    limits: *mut bindings::queue_limits,
) {
    // SAFETY: called between ctr and dtr; dm lends the limits exclusively
    // for the call.
    let (target, limits) = unsafe { (private::<T>(ti), limits.as_mut()) };
    if let Some(limits) = limits {
        target.io_hints(&mut QueueLimits(limits));
    }
}

/// dm's `iterate_devices` callback for `T`.
///
/// # Safety
/// Called by dm only, between `ctr` and `dtr`, with a callout and its data.
unsafe extern "C" fn iterate_devices_trampoline<T: TargetOps>(
    ti: *mut dm::dm_target,
    callout: dm::iterate_devices_callout_fn,
    data: *mut c_void,
) -> c_int {
    let Some(callout) = callout else {
        return 0;
    };
    // SAFETY: called between ctr and dtr with a valid target.
    let (target, len) = unsafe { (private::<T>(ti), (*ti).len) };
    let dev = target.device();
    let Some(len) = target.device_len(len) else {
        return 0;
    };
    // SAFETY: `callout` and `data` come from dm together; the device handle
    // is live for the target's lifetime.
    unsafe { callout(ti, dev.dev.as_ptr(), 0, len, data) }
}

/// Scenarios for the module's KUnit suite.
pub(crate) mod selftest {
    use kernel::{ffi::c_char, prelude::*};

    use super::Args;

    /// `Args::from_argv` keeps dm's words, in order, as C strings; an empty
    /// argument vector gives no words.
    pub(crate) fn args_from_argv() -> bool {
        let words = [c"0", c"rthin-pool", c"/dev/ram0", c"128"];
        let mut argv: [*mut c_char; 4] = words.map(|w| w.as_char_ptr().cast_mut());
        // SAFETY: `argv` holds `words.len()` pointers to static C strings.
        let Ok(args) = (unsafe { Args::from_argv(words.len() as u32, argv.as_mut_ptr()) }) else {
            return false;
        };
        let same = args.words().len() == words.len()
            && args.words().iter().zip(words.iter()).all(|(a, b)| a == b);
        // SAFETY: zero words are read from `argv`.
        let empty =
            unsafe { Args::from_argv(0, argv.as_mut_ptr()) }.is_ok_and(|a| a.words().is_empty());
        same && empty
    }
}
