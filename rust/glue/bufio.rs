// SPDX-License-Identifier: GPL-2.0
//! The metadata core's [`BlockStore`] over a dm-bufio client (4 KiB blocks on
//! the metadata device), following the contract in `block_store`'s module doc
//! the same way dm-block-manager does for the C dm-thin:
//!
//! * **Validation on load.** Every buffer carries two bytes of dm-bufio aux
//!   data ([`Aux`]). `alloc_callback` clears `validated` when dm-bufio sets a
//!   buffer up for a block; the first typed read (any kind but `Raw`) verifies
//!   the bytes with `pdata::checksum::verify` and records the kind they are valid
//!   as. A buffer we created or modified ourselves is valid as the kind we
//!   wrote. A read as another kind verifies again (dm-block-manager refuses
//!   it: "validator mismatch"), so a damaged pointer (say, a held root that
//!   names a B-tree node) never reads bytes checked as something else. A
//!   failed verification leaves the recorded kind as it was, so a later read
//!   checks again.
//! * **Sealing before any write-back.** dm-bufio may write a dirty buffer at
//!   any time (cache pressure, its own work), so sealing cannot wait for
//!   `flush`: the client's `write_callback`, which dm-bufio calls right
//!   before it submits the write of a buffer, seals the bytes with
//!   `pdata::checksum::seal` for the kind of the buffer's last write access (stored
//!   in the aux data).
//! * **Dirty after modification.** A write guard marks its buffer dirty when
//!   it is dropped, i.e. after the core has changed the bytes (as
//!   `dm_bm_unlock` does). Had we marked it dirty first, a write-back racing
//!   with the modification could clear the dirty bit and lose the change.
//!
//! * **Copies for readers without the mutex.** A [`BufioReader`] shares the
//!   client and copies nodes of the last commit out of it (the workers'
//!   lookups that take no pool lock); it never writes a buffer.
//!
//! Guards release their buffer on drop. The store is used under the pool's
//! mutex only; the aux fields are atomics because `write_callback` reads them
//! from whatever context dm-bufio writes back in.

use core::{
    marker::PhantomData,
    ops::{Deref, DerefMut},
    ptr::{self, NonNull},
    slice,
    sync::atomic::{AtomicU8, Ordering},
};
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

use super::{bindings as dm, device::BdevHandle};
use crate::{
    core_error::{CoreError, CoreResult},
    pdata::block_store::BlockStore,
    pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE},
};

/// Per-buffer state kept in dm-bufio's aux area.
#[repr(C)]
struct Aux {
    /// [`BlockKind`] of the last write access, as [`kind_code`].
    kind: AtomicU8,
    /// The kind the bytes passed `verify` as (or were written as by us), as
    /// [`kind_code`]; `Raw`'s code: not validated.
    validated: AtomicU8,
}

/// The aux byte for a block kind.
fn kind_code(kind: BlockKind) -> u8 {
    match kind {
        BlockKind::Raw => 0,
        BlockKind::Superblock => 1,
        BlockKind::Node => 2,
        BlockKind::Index => 3,
        BlockKind::Bitmap => 4,
    }
}

/// The block kind of an aux byte; unknown codes are `Raw` (never sealed).
fn code_kind(code: u8) -> BlockKind {
    match code {
        1 => BlockKind::Superblock,
        2 => BlockKind::Node,
        3 => BlockKind::Index,
        4 => BlockKind::Bitmap,
        _ => BlockKind::Raw,
    }
}

/// EIO as a core error.
const EIO_CORE: CoreError = CoreError::Io(-5);

/// A dm-bufio client, destroyed once its store and every reader are gone.
struct Client {
    raw: NonNull<dm::dm_bufio_client>,
    /// Keeps the metadata device open until the client is destroyed (its
    /// drop destroys the client before the fields go): the pool object,
    /// which owns the store, and the readers may outlive the table that
    /// opened the device.
    _bdev: BdevHandle,
}

// SAFETY: a dm-bufio client is internally locked and may be used from any
// process context.
unsafe impl Send for Client {}
// SAFETY: as above.
unsafe impl Sync for Client {}

impl Client {
    fn raw(&self) -> *mut dm::dm_bufio_client {
        self.raw.as_ptr()
    }

    /// Holds block `b` (on the device, else an I/O error): read from media
    /// (`dm_bufio_read`) or, if `new`, set up without reading
    /// (`dm_bufio_new`). The caller releases it.
    fn hold(&self, b: u64, new: bool) -> CoreResult<(NonNull<dm::dm_buffer>, NonNull<u8>, &Aux)> {
        let mut bp: *mut dm::dm_buffer = ptr::null_mut();
        // SAFETY: the client is valid while `self` lives; `bp` is a valid
        // out pointer; a block past the device's end fails with an error.
        // Both calls may sleep, which the store's users (ctr, messages,
        // status, workers) and the readers (workers) allow.
        let data = unsafe {
            if new {
                dm::dm_bufio_new(self.raw(), b, &mut bp)
            } else {
                dm::dm_bufio_read(self.raw(), b, &mut bp)
            }
        };
        let data = from_err_ptr(data).map_err(|e| CoreError::Io(e.to_errno()))?;
        let (Some(buf), Some(data)) = (NonNull::new(bp), NonNull::new(data.cast::<u8>())) else {
            return Err(EIO_CORE);
        };
        // SAFETY: the aux area of a held buffer is valid, sized and aligned for
        // `Aux` (requested at client creation; dm-bufio aligns it) and was
        // initialised by `alloc_callback`.
        let aux = unsafe { &*dm::dm_bufio_get_aux_data(buf.as_ptr()).cast::<Aux>() };
        Ok((buf, data, aux))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: the client is valid; no guard outlives the store (guards
        // borrow it) and readers release their buffer before they return, so
        // none is held. Destroying writes back whatever is still dirty
        // (sealed by `write_callback`).
        unsafe { dm::dm_bufio_client_destroy(self.raw()) };
    }
}

/// The metadata core's block store over a dm-bufio client on the metadata
/// device; used under the pool's mutex only.
pub(crate) struct BufioStore {
    client: Arc<Client>,
    nr_blocks: u64,
}

/// Copies of B-tree nodes from the store's client, for readers that do not
/// hold the pool's mutex ([`BufioReader::copy_node`]).
pub(crate) struct BufioReader {
    client: Arc<Client>,
}

impl BufioStore {
    /// Creates a client of 4 KiB blocks on `bdev`, which the client keeps
    /// open for as long as it lives (see `Client`).
    pub(crate) fn new(bdev: BdevHandle) -> Result<Self> {
        // SAFETY: `bdev` is open while the handle lives, which the client
        // keeps until it is destroyed; the callbacks match dm-bufio's
        // prototypes and only touch the buffer they are given; the aux size
        // is that of `Aux`.
        let raw = unsafe {
            dm::dm_bufio_client_create(
                bdev.raw(),
                BLOCK_SIZE as u32,
                1,
                core::mem::size_of::<Aux>() as u32,
                Some(alloc_callback),
                Some(write_callback),
                0,
            )
        };
        let client = from_err_ptr(raw)?;
        let client = Client {
            raw: NonNull::new(client).ok_or(ENOMEM)?,
            _bdev: bdev,
        };
        // SAFETY: `client` was just created and is valid.
        let nr_blocks = unsafe { dm::dm_bufio_get_device_size(client.raw()) };
        let client = Arc::new(client, GFP_KERNEL)?;
        Ok(Self { client, nr_blocks })
    }

    /// A reader of the same client.
    pub(crate) fn reader(&self) -> BufioReader {
        BufioReader {
            client: self.client.clone(),
        }
    }

    /// Re-reads the device size (it may have grown since the client was
    /// created) and returns it in blocks; the store never shrinks.
    pub(crate) fn refresh_size(&mut self) -> u64 {
        // SAFETY: the client is valid for the store's lifetime.
        let now = unsafe { dm::dm_bufio_get_device_size(self.client.raw()) };
        self.nr_blocks = self.nr_blocks.max(now);
        now
    }

    /// Holds block `b`: read from media (`dm_bufio_read`) or, if `new`, set
    /// up without reading (`dm_bufio_new`).
    fn get(&self, b: u64, new: bool) -> CoreResult<(NonNull<dm::dm_buffer>, NonNull<u8>, &Aux)> {
        if b >= self.nr_blocks {
            return Err(EIO_CORE);
        }
        self.client.hold(b, new)
    }

    /// Reads block `b`, validating it as `kind` if not yet validated.
    fn get_validated(&self, b: u64, kind: BlockKind) -> CoreResult<Guard<'_>> {
        let (buf, data, aux) = self.get(b, false)?;
        let guard = Guard {
            buf,
            data,
            dirty: false,
            _store: PhantomData,
        };
        if kind != BlockKind::Raw && aux.validated.load(Ordering::Acquire) != kind_code(kind) {
            verify(kind, b, &guard)?;
            aux.validated.store(kind_code(kind), Ordering::Release);
        }
        Ok(guard)
    }

    /// Turns a held buffer into a write guard sealed as `kind`.
    fn for_write(guard: Guard<'_>, kind: BlockKind) -> Guard<'_> {
        // SAFETY: the buffer is held by `guard`, so its aux area is valid.
        let aux = unsafe { &*dm::dm_bufio_get_aux_data(guard.buf.as_ptr()).cast::<Aux>() };
        aux.kind.store(kind_code(kind), Ordering::Release);
        aux.validated.store(kind_code(kind), Ordering::Release);
        let mut guard = guard;
        guard.dirty = true;
        guard
    }
}

impl BufioReader {
    /// Copies block `b` into `out` (`BLOCK_SIZE` bytes) and checks the copy
    /// is a valid B-tree node of that block (unless the buffer already
    /// passed as one). Sleeps if the block must be read from the media.
    ///
    /// Meant for the last commit's nodes, which nothing writes until the
    /// next commit; after it, a block may be rewritten under the copy, so
    /// the copy may be torn: the caller must learn afterwards whether a
    /// commit happened meanwhile and then discard it (`pool::committed`).
    /// Buffers are held only within this call, so the store's owner may
    /// reset the client once no call is running.
    pub(crate) fn copy_node(&self, b: u64, out: &mut [u8]) -> CoreResult<()> {
        if out.len() != BLOCK_SIZE {
            return Err(CoreError::Invalid);
        }
        let (buf, data, aux) = self.client.hold(b, false)?;
        // Whether the bytes had passed as a node before the copy.
        let passed = aux.validated.load(Ordering::Acquire) == kind_code(BlockKind::Node);
        let words = data.as_ptr().cast::<u64>();
        let validated = words.is_aligned().then(|| {
            for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
                // SAFETY: a held buffer's data is `BLOCK_SIZE` bytes, aligned
                // for u64 (checked above), so word `i < BLOCK_SIZE / 8` is in
                // it, and our hold keeps it from being freed or reused for
                // another block. Another holder (the pool lock's, once a
                // commit let the block be reused) may write it meanwhile.
                // That is acceptable: no Rust reference to the bytes is made
                // (so none aliases the writer's), each load is a whole
                // aligned word read once (READ_ONCE: the kernel's model for
                // data a racing writer changes, never a torn word), and a
                // copy that mixes old and new words is never used, since the
                // caller learns that a commit ended during the walk and
                // discards it (`pool::committed`).
                let w = unsafe { ptr::read_volatile(words.add(i)) };
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
            passed
        });
        // SAFETY: the buffer was obtained above and is released once.
        unsafe { dm::dm_bufio_release(buf.as_ptr()) };
        match validated {
            None => Err(EIO_CORE),
            Some(true) => Ok(()),
            Some(false) => verify(BlockKind::Node, b, out),
        }
    }
}

/// A held buffer; released (and marked dirty first if written) on drop.
pub(crate) struct Guard<'a> {
    buf: NonNull<dm::dm_buffer>,
    data: NonNull<u8>,
    dirty: bool,
    _store: PhantomData<&'a mut BufioStore>,
}

impl Deref for Guard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: a held buffer's data is `BLOCK_SIZE` bytes (the client's
        // block size) and stays put until release.
        unsafe { slice::from_raw_parts(self.data.as_ptr(), BLOCK_SIZE) }
    }
}

impl DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`. Only the store's `&mut self` methods hand
        // out a `Guard` (readers get a `ReadGuard`, which cannot be borrowed
        // mutably), so while one lives no other guard of this store exists
        // and these bytes have no other reference on our side.
        unsafe { slice::from_raw_parts_mut(self.data.as_ptr(), BLOCK_SIZE) }
    }
}

/// A held buffer lent for reading. The core may hold two at once, even of
/// the same block, so it only ever gives shared access.
pub(crate) struct ReadGuard<'a>(Guard<'a>);

impl Deref for ReadGuard<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: the buffer is held by this guard and released exactly once.
        unsafe {
            if self.dirty {
                dm::dm_bufio_mark_buffer_dirty(self.buf.as_ptr());
            }
            dm::dm_bufio_release(self.buf.as_ptr());
        }
    }
}

impl BlockStore for BufioStore {
    fn drop_cache(&mut self) {
        // SAFETY: the client is valid; no guard is alive (guards borrow the
        // store, which `&mut self` excludes). Dirty buffers are written back
        // first (sealed by `write_callback`), then every buffer is freed.
        unsafe { dm::dm_bufio_client_reset(self.client.raw()) };
    }

    type Read<'a> = ReadGuard<'a>;
    type Write<'a> = Guard<'a>;

    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }

    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<ReadGuard<'_>> {
        self.get_validated(b, kind).map(ReadGuard)
    }

    fn write(&mut self, b: u64, kind: BlockKind) -> CoreResult<Guard<'_>> {
        let guard = self.get_validated(b, kind)?;
        Ok(Self::for_write(guard, kind))
    }

    fn zeroed(&mut self, b: u64, kind: BlockKind) -> CoreResult<Guard<'_>> {
        let (buf, data, _) = self.get(b, true)?;
        let mut guard = Self::for_write(
            Guard {
                buf,
                data,
                dirty: false,
                _store: PhantomData,
            },
            kind,
        );
        guard.fill(0);
        Ok(guard)
    }

    fn copy(&mut self, from: u64, to: u64, kind: BlockKind) -> CoreResult<()> {
        let src = self.get_validated(from, kind)?;
        if from == to {
            drop(Self::for_write(src, kind));
            return Ok(());
        }
        let (buf, data, _) = self.get(to, true)?;
        let mut dst = Self::for_write(
            Guard {
                buf,
                data,
                dirty: false,
                _store: PhantomData,
            },
            kind,
        );
        dst.copy_from_slice(&src);
        Ok(())
    }

    fn flush(&mut self) -> CoreResult<()> {
        // SAFETY: the client is valid; both calls wait for their I/O.
        let ret = unsafe { dm::dm_bufio_write_dirty_buffers(self.client.raw()) };
        if ret < 0 {
            return Err(CoreError::Io(ret));
        }
        // SAFETY: as above.
        let ret = unsafe { dm::dm_bufio_issue_flush(self.client.raw()) };
        if ret < 0 {
            return Err(CoreError::Io(ret));
        }
        Ok(())
    }
}

/// dm-bufio's `alloc_callback`: a buffer is being set up for a block whose
/// contents we have not seen yet.
///
/// # Safety
/// Called by dm-bufio only, with a buffer whose aux area has room for `Aux`.
unsafe extern "C" fn alloc_callback(b: *mut dm::dm_buffer) {
    // SAFETY: dm-bufio passes a valid buffer whose aux area (sized for `Aux`
    // at client creation) nothing else uses yet.
    unsafe {
        let aux = dm::dm_bufio_get_aux_data(b).cast::<Aux>();
        aux.write(Aux {
            kind: AtomicU8::new(kind_code(BlockKind::Raw)),
            validated: AtomicU8::new(kind_code(BlockKind::Raw)),
        });
    }
}

/// dm-bufio's `write_callback`: seals a dirty buffer right before its write
/// is submitted (block number and checksum for its last write kind).
///
/// # Safety
/// Called by dm-bufio only, with a valid buffer of `BLOCK_SIZE` bytes that
/// was set up by `alloc_callback`.
unsafe extern "C" fn write_callback(b: *mut dm::dm_buffer) {
    // SAFETY: dm-bufio passes a valid buffer; its aux area holds an `Aux`
    // (`alloc_callback`) and its data `BLOCK_SIZE` bytes. The core may be
    // writing the same bytes under a guard; the resulting write is then
    // superseded, because the guard marks the buffer dirty again on drop.
    let (kind, blocknr, data) = unsafe {
        let aux = &*dm::dm_bufio_get_aux_data(b).cast::<Aux>();
        (
            code_kind(aux.kind.load(Ordering::Acquire)),
            dm::dm_bufio_get_block_number(b),
            slice::from_raw_parts_mut(dm::dm_bufio_get_block_data(b).cast::<u8>(), BLOCK_SIZE),
        )
    };
    // Cannot fail for a full block; a failure would leave a bad checksum,
    // which the next load reports as corruption rather than hiding it.
    let _ = seal(kind, blocknr, data);
}

/// Pure logic of the aux encoding, for KUnit.
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    use super::*;

    /// Every kind survives the aux byte; unknown bytes never seal.
    pub(crate) fn kind_codes_round_trip() -> bool {
        [
            BlockKind::Raw,
            BlockKind::Superblock,
            BlockKind::Node,
            BlockKind::Index,
            BlockKind::Bitmap,
        ]
        .iter()
        .all(|&k| code_kind(kind_code(k)) == k)
            && code_kind(200) == BlockKind::Raw
    }
}
