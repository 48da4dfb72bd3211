// SPDX-License-Identifier: GPL-2.0
//! The registration of a [`TargetOps`] type with dm (`dm_register_target`)
//! and the C callbacks dm calls: generic trampolines that check every
//! pointer dm hands in, wrap it in a safe type and call the target. A
//! target's private state is a `KBox<T>` kept in `ti->private` from a
//! successful `ctr` until `dtr`.

use core::{ffi::CStr, marker::PhantomData, ptr::NonNull};
use kernel::{
    bindings,
    error::to_result,
    ffi::{c_char, c_int, c_uint, c_void},
    prelude::*,
};

use super::{
    bindings as dm,
    bio::{Bio, PerBio},
    dm::{Args, MapResult, QueueLimits, StatusKind, TargetCtx, TargetOps, DM_STATUS_NOFLUSH_FLAG},
};
use crate::dm::status_buf::StatusBuf;

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
