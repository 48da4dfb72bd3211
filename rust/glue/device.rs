// SPDX-License-Identifier: GPL-2.0
//! Devices a target uses: a device opened through the table ([`DmDev`],
//! `dm_get_device`), a counted handle on its block device for what outlives
//! the table's borrow ([`BdevHandle`]), and the identity of a mapped device
//! ([`MdKey`], [`MdRef`]).

use core::{fmt, ptr::NonNull};
use kernel::{bindings, error::to_result, prelude::*};

use super::bindings as dm;
use crate::dm::status_buf::DevNum;

/// Identity of a mapped device (the pool's `struct mapped_device`), the key
/// dm-thin uses to find a pool object from a thin's pool device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MdKey(pub(super) usize);

/// A counted reference on the mapped device behind a block device
/// (`dm_get_md`), dropped with `dm_put`.
pub(crate) struct MdRef(NonNull<dm::mapped_device>);

impl MdRef {
    /// The key identifying this device.
    pub(crate) fn key(&self) -> MdKey {
        MdKey(self.0.as_ptr() as usize)
    }
}

impl Drop for MdRef {
    fn drop(&mut self) {
        // SAFETY: the reference was taken by `dm_get_md` in `DmDev::get_md`
        // and is dropped exactly once, here.
        unsafe { dm::dm_put(self.0.as_ptr()) };
    }
}

/// A device opened through the table (`dm_get_device`), released on drop.
pub(crate) struct DmDev {
    pub(super) ti: NonNull<dm::dm_target>,
    pub(super) dev: NonNull<dm::dm_dev>,
}

// SAFETY: a `dm_dev` is a reference-counted handle that dm lets any context use
// until `dm_put_device`; `DmDev` only reads it and releases it once, in drop.
unsafe impl Send for DmDev {}
// SAFETY: as above; shared access only reads immutable fields.
unsafe impl Sync for DmDev {}

impl DmDev {
    /// The block device, for glue that hands it to C.
    pub(super) fn bdev(&self) -> *mut bindings::block_device {
        // SAFETY: `dev` stays valid until drop (see `TargetCtx::get_device`).
        unsafe { self.dev.as_ref().bdev }
    }

    /// The device number, as dm prints it in tables (`major:minor`).
    pub(crate) fn devnum(&self) -> DevNum {
        // SAFETY: `dev` is valid (see `bdev`) and so is its block device,
        // whose `bd_dev` never changes.
        let dev = unsafe { (*self.bdev()).bd_dev };
        // dev_t packs 12 bits of major above 20 bits of minor (MINORBITS).
        DevNum::new(dev >> 20, dev & 0xf_ffff)
    }

    /// A counted handle on the block device (see [`BdevHandle`]); `None`
    /// only if dm left the device without its file, which it never does.
    pub(crate) fn handle(&self) -> Option<BdevHandle> {
        // SAFETY: `dev` stays valid until drop (see `TargetCtx::get_device`).
        let file = NonNull::new(unsafe { self.dev.as_ref().bdev_file })?;
        let bdev = NonNull::new(self.bdev())?;
        // SAFETY: `file` is the file dm opened the device through; this
        // `DmDev` holds dm's count on it until `dm_put_device`, so it is
        // live; `get_file` takes a count of its own, which the handle owns.
        unsafe { bindings::get_file(file.as_ptr()) };
        Some(BdevHandle { file, bdev })
    }

    /// The raw `dev_t`, for comparing devices.
    pub(crate) fn dev_t(&self) -> u32 {
        // SAFETY: as in `devnum`.
        unsafe { (*self.bdev()).bd_dev }
    }

    /// The mapped device behind this device, if it is a dm device.
    pub(crate) fn get_md(&self) -> Option<MdRef> {
        // SAFETY: `dm_get_md` takes a plain device number and returns a
        // counted reference (or NULL if no dm device has that number).
        NonNull::new(unsafe { dm::dm_get_md(self.dev_t()) }).map(MdRef)
    }

    /// The largest discard the device takes, in sectors (0: it does not
    /// discard), as `bdev_max_discard_sectors`.
    pub(crate) fn max_discard_sectors(&self) -> u32 {
        // SAFETY: the block device is open (see `bdev`).
        unsafe { dm::rthin_bdev_max_discard_sectors(self.bdev()) }
    }
}

impl Drop for DmDev {
    fn drop(&mut self) {
        // SAFETY: `dev` was obtained from `dm_get_device` on this `ti`, which
        // outlives the target's private data, and is released only here.
        unsafe { dm::dm_put_device(self.ti.as_ptr(), self.dev.as_ptr()) };
    }
}

/// A block device's kernel name (see [`BdevHandle::name`]).
pub(crate) struct BdevName<'a>(&'a BdevHandle);

impl kernel::fmt::Display for BdevName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bdev = self.0.raw();
        // SAFETY: the handle keeps the device open, so its gendisk and the
        // NUL-terminated name in it stay valid and unchanged.
        let disk_name = unsafe { &(*(*bdev).bd_disk).disk_name };
        // SAFETY: as above.
        let partno = unsafe { dm::rthin_bdev_partno(bdev) };
        // The kernel's `c_char` is `u8` on every architecture.
        let bytes: &[u8] = disk_name;
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let name = core::str::from_utf8(&bytes[..len]).unwrap_or("?");
        f.write_str(name)?;
        if partno == 0 {
            return Ok(());
        }
        // As `bdev_name` in lib/vsprintf.c: `nvme0n1` + 2 is `nvme0n1p2`.
        if name.ends_with(|c: char| c.is_ascii_digit()) {
            f.write_str("p")?;
        }
        write!(f, "{partno}")
    }
}

/// A counted reference on a block device a [`DmDev`] opened, for what may
/// outlive the borrow of that `DmDev` (a thin's I/O state, the pool's
/// metadata store, discards passed down). It holds a count on the file dm
/// opened the device through (`dm_dev.bdev_file`), so the device stays open
/// until the last handle goes, whatever becomes of the table: dm's
/// `dm_put_device` gives up its claim on the device (`bdev_fput`) and its own
/// count, and the last count closes the device. Cloning takes a count;
/// nothing on the I/O path clones (a bio is remapped through a borrow).
pub(crate) struct BdevHandle {
    /// The file, of which the handle owns one count.
    file: NonNull<bindings::file>,
    /// The device `file` holds open.
    bdev: NonNull<bindings::block_device>,
}

// SAFETY: an open block device may be used from any context, and `file`
// keeps it open for as long as the handle exists; the file count is atomic.
unsafe impl Send for BdevHandle {}
// SAFETY: as above; every method only reads the device pointer.
unsafe impl Sync for BdevHandle {}

impl Clone for BdevHandle {
    fn clone(&self) -> Self {
        // SAFETY: the handle owns a count, so the file is live; the clone
        // owns the count `get_file` takes.
        unsafe { bindings::get_file(self.file.as_ptr()) };
        Self {
            file: self.file,
            bdev: self.bdev,
        }
    }
}

impl Drop for BdevHandle {
    fn drop(&mut self) {
        // Synchronously, as dm's own `close_table_device`: when this is the
        // last count the device closes now, so a `dmsetup remove` of a dm
        // device below (the pool, under a thin) that follows in the same
        // ioctl finds it closed; `fput` would close it only at the task's
        // return to user space. Handles go in process context only (target
        // destructors, workers, the pool object's drop), where closing may
        // sleep.
        // SAFETY: the handle owns one count on the file, given back once.
        unsafe { bindings::__fput_sync(self.file.as_ptr()) };
    }
}

impl BdevHandle {
    /// The raw pointer, for dm-kcopyd regions, dm-bufio and bios; valid
    /// while `self` lives.
    pub(super) fn raw(&self) -> *mut bindings::block_device {
        self.bdev.as_ptr()
    }

    /// The device's size in sectors.
    pub(crate) fn nr_sectors(&self) -> u64 {
        // SAFETY: the device is open while the handle lives (type doc).
        unsafe { dm::rthin_bdev_nr_sectors(self.raw()) }
    }

    /// The device's kernel name for log lines, as `%pg` prints it (`dm-3`,
    /// `loop0`, `sda1`, `nvme0n1p2`).
    pub(crate) fn name(&self) -> BdevName<'_> {
        BdevName(self)
    }

    /// Flushes the device's volatile write cache (sleeps until done); the
    /// negative errno on failure.
    pub(crate) fn flush(&self) -> Result<(), i32> {
        // SAFETY: the device is open (type doc); the call sleeps, which its
        // callers (workers, messages, the waker, suspend) may.
        match unsafe { bindings::blkdev_issue_flush(self.raw()) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Discards `count` sectors at `sector` (sleeps until done).
    pub(crate) fn discard(&self, sector: u64, count: u64) -> Result {
        // SAFETY: the device is open (type doc); the call sleeps, which the
        // workers calling it may.
        to_result(unsafe {
            bindings::blkdev_issue_discard(self.raw(), sector, count, dm::RTHIN_GFP_NOIO)
        })
    }
}
