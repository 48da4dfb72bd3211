// SPDX-License-Identifier: GPL-2.0
//! Safe device-mapper target wrappers.
//!
//! A target implements [`TargetOps`]; `target_type::TargetType` turns it
//! into a registered `struct target_type` whose C callbacks are generic
//! trampolines (`target_type.rs`). The trampolines own every pointer dm hands in: they check it, wrap it
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
    ffi::{c_char, c_int, c_uint},
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
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
    pub(super) fn to_c(self) -> c_int {
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
pub(super) const DM_STATUS_NOFLUSH_FLAG: c_uint = 1 << 0;

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

/// The table a target belongs to, for raising dm events on it: made by
/// [`TargetCtx::table_events`], owned by that target and not copyable. Its
/// drop (the target's destructor, before dm destroys the table) revokes
/// every [`EventSink`] handed out, so none can reach the table afterwards.
pub(crate) struct TableEvents(Arc<EventSink>);

impl TableEvents {
    /// A sink for whoever raises events on the table (the pool object,
    /// which may outlive the table).
    pub(crate) fn sink(&self) -> Arc<EventSink> {
        self.0.clone()
    }
}

impl Drop for TableEvents {
    fn drop(&mut self) {
        *self.0.table.lock() = None;
    }
}

/// A table pointer; only [`EventSink`] holds one.
struct TablePtr(NonNull<dm::dm_table>);

// SAFETY: `dm_table_event` may be called from any process context while the
// table exists; `EventSink` keeps the pointer only while it does.
unsafe impl Send for TablePtr {}

/// Raises dm events on a target's table (what `dmsetup wait` and dmeventd
/// wait for) while that target lives, and does nothing once it has gone.
#[pin_data]
pub(crate) struct EventSink {
    /// The table until its target's [`TableEvents`] goes. A leaf lock
    /// (`Documentation/io-path.md`, "The rules of the I/O path"): taken
    /// inside the pool mutex, or alone; dm's event lock nests inside it.
    #[pin]
    table: Mutex<Option<TablePtr>>,
}

impl EventSink {
    /// Raises a dm event on the table, if its target still lives.
    pub(crate) fn event(&self) {
        if let Some(t) = &*self.table.lock() {
            // SAFETY: the table exists: its target's `TableEvents` clears
            // the pointer (under this lock) before the target goes, and dm
            // destroys a table only after its targets.
            unsafe { dm::dm_table_event(t.0.as_ptr()) };
        }
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
    pub(super) ti: NonNull<dm::dm_target>,
    pub(super) _borrow: PhantomData<&'a mut dm::dm_target>,
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

    /// The table being built, for events once the target is live; held
    /// by the target (see [`TableEvents`]). `Ok(None)` if dm gave no table.
    pub(crate) fn table_events(&self) -> Result<Option<TableEvents>> {
        // SAFETY: `ti` is valid during ctr; dm set its table before ctr.
        let Some(table) = NonNull::new(unsafe { self.ti.as_ref().table }) else {
            return Ok(None);
        };
        let sink = Arc::pin_init(
            pin_init!(EventSink {
                table <- new_mutex!(Some(TablePtr(table)), "rthin_table_events"),
            }),
            GFP_KERNEL,
        )?;
        Ok(Some(TableEvents(sink)))
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
    pub(super) unsafe fn from_argv(argc: c_uint, argv: *mut *mut c_char) -> Result<Self> {
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
pub(crate) struct QueueLimits<'a>(pub(super) &'a mut bindings::queue_limits);

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

/// Scenarios for the module's KUnit suite.
#[cfg(feature = "selftest")]
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
