// SPDX-License-Identifier: GPL-2.0
//! Little-endian field access inside block buffers, without panics.
//!
//! Every accessor checks bounds and returns [`Corruption::Layout`] instead of
//! indexing out of range.

use crate::core_error::{corrupt, CoreResult, Corruption};

/// Size of a metadata block in bytes.
pub const BLOCK_SIZE: usize = 4096;

fn range(off: usize, len: usize) -> CoreResult<core::ops::Range<usize>> {
    let end = off.checked_add(len).ok_or(corrupt(Corruption::Layout))?;
    Ok(off..end)
}

/// Borrows `len` bytes at `off`.
pub fn bytes(buf: &[u8], off: usize, len: usize) -> CoreResult<&[u8]> {
    buf.get(range(off, len)?).ok_or(corrupt(Corruption::Layout))
}

/// Mutably borrows `len` bytes at `off`.
pub fn bytes_mut(buf: &mut [u8], off: usize, len: usize) -> CoreResult<&mut [u8]> {
    buf.get_mut(range(off, len)?)
        .ok_or(corrupt(Corruption::Layout))
}

/// Reads a little-endian u32 at `off`.
pub fn get_u32(buf: &[u8], off: usize) -> CoreResult<u32> {
    let b = bytes(buf, off, 4)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    Ok(u32::from_le_bytes(a))
}

/// Reads a little-endian u64 at `off`.
pub fn get_u64(buf: &[u8], off: usize) -> CoreResult<u64> {
    let b = bytes(buf, off, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// Writes a little-endian u32 at `off`.
pub fn put_u32(buf: &mut [u8], off: usize, v: u32) -> CoreResult<()> {
    bytes_mut(buf, off, 4)?.copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// Writes a little-endian u64 at `off`.
pub fn put_u64(buf: &mut [u8], off: usize, v: u64) -> CoreResult<()> {
    bytes_mut(buf, off, 8)?.copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// Decodes a little-endian u64 from a slice of at least 8 bytes.
pub fn u64_of(b: &[u8]) -> CoreResult<u64> {
    get_u64(b, 0)
}

/// Sets `len` bytes at `off` to zero.
pub fn zero(buf: &mut [u8], off: usize, len: usize) -> CoreResult<()> {
    bytes_mut(buf, off, len)?.fill(0);
    Ok(())
}

/// Moves `len` bytes inside `buf` from `src` to `dst` (ranges may overlap).
pub fn move_within(buf: &mut [u8], src: usize, dst: usize, len: usize) -> CoreResult<()> {
    let r = range(src, len)?;
    let d = range(dst, len)?;
    if r.end > buf.len() || d.end > buf.len() {
        return Err(corrupt(Corruption::Layout));
    }
    buf.copy_within(r, dst);
    Ok(())
}
