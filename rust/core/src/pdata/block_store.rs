// SPDX-License-Identifier: GPL-2.0
//! The block-store interface through which the core does all metadata I/O.
//!
//! The model is dm-bufio's: a cache of 4 KiB buffers over the metadata device.
//!
//! * A block loaded **from media** is validated with
//!   [`crate::pdata::checksum::verify`] for the requested [`BlockKind`] before it is
//!   handed out; a buffer that is already cached (e.g. written in this session)
//!   is returned as is.
//! * A dirty buffer is sealed with [`crate::pdata::checksum::seal`] (block number and
//!   checksum) with the kind of its last write access, when it is written back.
//!   Write-back may happen at any time (cache pressure); [`BlockStore::flush`]
//!   writes back everything dirty and then issues a FLUSH (write barrier).
//!
//! The core never keeps a guard across another store call, so an implementation
//! may hand out guards that borrow the store. Guards are plain slices of
//! exactly [`crate::pdata::checksum::BLOCK_SIZE`] bytes.

use crate::core_error::CoreResult;
use crate::pdata::checksum::BlockKind;
use core::ops::{Deref, DerefMut};

/// Block I/O used by the metadata core (4096-byte blocks).
pub trait BlockStore {
    /// Read guard: the block's bytes.
    type Read<'a>: Deref<Target = [u8]>
    where
        Self: 'a;
    /// Write guard: the block's bytes, marked dirty.
    type Write<'a>: DerefMut<Target = [u8]>
    where
        Self: 'a;

    /// Size of the metadata device in blocks.
    fn nr_blocks(&self) -> u64;

    /// Reads block `b`, validating it as `kind` if it comes from media.
    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<Self::Read<'_>>;

    /// Returns block `b` for modification, with its current contents
    /// (validated as `kind` if it comes from media). It will be sealed as `kind`.
    fn write(&mut self, b: u64, kind: BlockKind) -> CoreResult<Self::Write<'_>>;

    /// Returns block `b` for modification with all bytes zero, without reading
    /// it. It will be sealed as `kind`.
    fn zeroed(&mut self, b: u64, kind: BlockKind) -> CoreResult<Self::Write<'_>>;

    /// Replaces the contents of block `to` with those of `from` (which is read
    /// and validated as `kind` if needed); `to` becomes dirty with `kind`.
    fn copy(&mut self, from: u64, to: u64, kind: BlockKind) -> CoreResult<()>;

    /// Writes back all dirty blocks, then makes them durable (FLUSH).
    fn flush(&mut self) -> CoreResult<()>;

    /// Forgets every cached block (writing back dirty ones first), so the
    /// next read goes to the media: dm-block-manager's reset when dm-thin
    /// aborts a transaction. Stores without a cache need not do anything.
    fn drop_cache(&mut self) {}
}
