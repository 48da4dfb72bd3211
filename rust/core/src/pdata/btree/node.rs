// SPDX-License-Identifier: GPL-2.0
//! One B-tree node inside a 4 KiB block buffer.
//!
//! Layout: 32-byte header (csum u32, flags u32, blocknr u64, nr_entries u32,
//! max_entries u32, value_size u32, padding u32), `keys[max_entries]` (u64)
//! from byte 32, then `values[max_entries]` of `value_size` bytes.

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::codec::BLOCK_SIZE;
use crate::pdata::codec::{
    bytes, bytes_mut, get_u32, get_u64, move_within, put_u32, put_u64, zero,
};

/// Node flag: internal node.
pub const INTERNAL: u32 = 1;
/// Node flag: leaf node.
pub const LEAF: u32 = 2;
/// Size of the node header.
pub const HEADER_SIZE: usize = 32;

const OFF_FLAGS: usize = 4;
const OFF_NR: usize = 16;
const OFF_MAX: usize = 20;
const OFF_VS: usize = 24;

/// `max_entries` for a value size, computed the kernel's way: the largest
/// multiple of 3 such that the entries fit.
pub const fn calc_max_entries(value_size: usize) -> usize {
    // `checked_div`, though the divisor is at least 8: older compilers (rustc 1.85,
    // which distribution kernels are built by) keep a division-by-zero
    // panic here, and objtool does not know that panic never returns.
    match (BLOCK_SIZE - HEADER_SIZE).checked_div(8 + value_size) {
        Some(entries) => 3 * (entries / 3),
        None => 0,
    }
}

/// Decoded, validated node header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// True for a leaf.
    pub leaf: bool,
    /// Number of valid entries.
    pub nr_entries: usize,
    /// Capacity.
    pub max_entries: usize,
    /// Value size in bytes.
    pub value_size: usize,
}

impl Header {
    /// Offset of key `i`.
    pub fn key_off(&self, i: usize) -> usize {
        HEADER_SIZE.saturating_add(i.saturating_mul(8))
    }

    /// Offset of value `i`.
    pub fn val_off(&self, i: usize) -> usize {
        HEADER_SIZE
            .saturating_add(self.max_entries.saturating_mul(8))
            .saturating_add(i.saturating_mul(self.value_size))
    }

    /// True if no further entry fits.
    pub fn is_full(&self) -> bool {
        self.nr_entries >= self.max_entries
    }
}

fn raw_header(buf: &[u8]) -> CoreResult<(u32, usize, usize, usize)> {
    Ok((
        get_u32(buf, OFF_FLAGS)?,
        get_u32(buf, OFF_NR)? as usize,
        get_u32(buf, OFF_MAX)? as usize,
        get_u32(buf, OFF_VS)? as usize,
    ))
}

/// Structural validation of a node loaded from media, independent of the
/// tree it belongs to (called by [`crate::pdata::checksum::verify`]): flags, entry
/// counts, that the entries fit in the block, and strictly increasing keys.
pub fn check_structure(buf: &[u8]) -> CoreResult<()> {
    let (flags, nr, max, vs) = raw_header(buf)?;
    let fits = vs
        .checked_add(8)
        .and_then(|per| per.checked_mul(max))
        .and_then(|b| b.checked_add(HEADER_SIZE))
        .is_some_and(|b| b <= BLOCK_SIZE);
    if (flags != LEAF && flags != INTERNAL) || !fits || nr > max || (flags == INTERNAL && nr == 0) {
        return Err(corrupt(Corruption::NodeHeader));
    }
    let mut prev: Option<u64> = None;
    for i in 0..nr {
        let k = get_u64(buf, HEADER_SIZE + 8 * i)?;
        if prev.is_some_and(|p| p >= k) {
            return Err(corrupt(Corruption::KeyOrder));
        }
        prev = Some(k);
    }
    Ok(())
}

/// Validates a node's header for a tree whose leaves have value size
/// `leaf_vs` (internal nodes must have value size 8), with `max_entries`
/// computed the kernel's way. Key order was checked when the block was
/// loaded ([`check_structure`]).
pub fn check(buf: &[u8], leaf_vs: usize) -> CoreResult<Header> {
    let (flags, nr, max, vs) = raw_header(buf)?;
    let leaf = match flags {
        LEAF => true,
        INTERNAL => false,
        _ => return Err(corrupt(Corruption::NodeHeader)),
    };
    let want_vs = if leaf { leaf_vs } else { 8 };
    if vs != want_vs || max != calc_max_entries(vs) || nr > max || (!leaf && nr == 0) {
        return Err(corrupt(Corruption::NodeHeader));
    }
    Ok(Header {
        leaf,
        nr_entries: nr,
        max_entries: max,
        value_size: vs,
    })
}

/// Like [`check`] but accepts an internal node with no entries (a transient
/// state inside a removal).
pub fn check_allow_empty(buf: &[u8], leaf_vs: usize) -> CoreResult<Header> {
    let (flags, nr, max, vs) = raw_header(buf)?;
    let leaf = match flags {
        LEAF => true,
        INTERNAL => false,
        _ => return Err(corrupt(Corruption::NodeHeader)),
    };
    let want_vs = if leaf { leaf_vs } else { 8 };
    if vs != want_vs || max != calc_max_entries(vs) || nr > max {
        return Err(corrupt(Corruption::NodeHeader));
    }
    Ok(Header {
        leaf,
        nr_entries: nr,
        max_entries: max,
        value_size: vs,
    })
}

/// Minimum number of entries of a non-root node (thin_check rejects fewer).
pub fn min_entries(h: &Header) -> usize {
    h.max_entries / 3
}

/// Writes an empty node header (zeroing the whole node body).
pub fn init(buf: &mut [u8], leaf: bool, value_size: usize) -> CoreResult<Header> {
    let len = buf.len();
    zero(buf, 0, len)?;
    let max = calc_max_entries(value_size);
    put_u32(buf, OFF_FLAGS, if leaf { LEAF } else { INTERNAL })?;
    put_u32(buf, OFF_NR, 0)?;
    put_u32(buf, OFF_MAX, max as u32)?;
    put_u32(buf, OFF_VS, value_size as u32)?;
    Ok(Header {
        leaf,
        nr_entries: 0,
        max_entries: max,
        value_size,
    })
}

/// Key `i`.
pub fn key(buf: &[u8], h: &Header, i: usize) -> CoreResult<u64> {
    get_u64(buf, h.key_off(i))
}

/// Value `i` as bytes.
pub fn value<'a>(buf: &'a [u8], h: &Header, i: usize) -> CoreResult<&'a [u8]> {
    bytes(buf, h.val_off(i), h.value_size)
}

/// Value `i` as a little-endian u64 (value size 8).
pub fn value_u64(buf: &[u8], h: &Header, i: usize) -> CoreResult<u64> {
    get_u64(buf, h.val_off(i))
}

/// Sets key `i`.
pub fn set_key(buf: &mut [u8], h: &Header, i: usize, k: u64) -> CoreResult<()> {
    put_u64(buf, h.key_off(i), k)
}

/// Sets value `i` (`v` must be `value_size` bytes).
pub fn set_value(buf: &mut [u8], h: &Header, i: usize, v: &[u8]) -> CoreResult<()> {
    if v.len() != h.value_size {
        return Err(corrupt(Corruption::Layout));
    }
    bytes_mut(buf, h.val_off(i), h.value_size)?.copy_from_slice(v);
    Ok(())
}

/// Sets `nr_entries`, zeroing the slots from the new count up to the old one.
pub fn set_nr(buf: &mut [u8], h: &mut Header, nr: usize) -> CoreResult<()> {
    if nr > h.max_entries {
        return Err(corrupt(Corruption::Layout));
    }
    if nr < h.nr_entries {
        let cnt = h.nr_entries - nr;
        zero(buf, h.key_off(nr), cnt.saturating_mul(8))?;
        zero(buf, h.val_off(nr), cnt.saturating_mul(h.value_size))?;
    }
    put_u32(buf, OFF_NR, nr as u32)?;
    h.nr_entries = nr;
    Ok(())
}

/// Largest index whose key is `<= k`, if any.
pub fn lower_bound(buf: &[u8], h: &Header, k: u64) -> CoreResult<Option<usize>> {
    // Invariant: keys[..lo] <= k, keys[hi..] > k.
    let mut lo = 0usize;
    let mut hi = h.nr_entries;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if key(buf, h, mid)? <= k {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo.checked_sub(1))
}

/// Inserts `(k, v)` at index `i`, shifting later entries up.
pub fn insert_at(buf: &mut [u8], h: &mut Header, i: usize, k: u64, v: &[u8]) -> CoreResult<()> {
    if h.is_full() || i > h.nr_entries {
        return Err(corrupt(Corruption::Layout));
    }
    let tail = h.nr_entries - i;
    move_within(buf, h.key_off(i), h.key_off(i + 1), tail * 8)?;
    move_within(buf, h.val_off(i), h.val_off(i + 1), tail * h.value_size)?;
    set_key(buf, h, i, k)?;
    set_value(buf, h, i, v)?;
    h.nr_entries += 1;
    put_u32(buf, OFF_NR, h.nr_entries as u32)
}

/// Removes entry `i`, shifting later entries down.
pub fn remove_at(buf: &mut [u8], h: &mut Header, i: usize) -> CoreResult<()> {
    remove_run(buf, h, i, 1)
}

/// Removes the `n` entries from `i` on, shifting later entries down.
pub fn remove_run(buf: &mut [u8], h: &mut Header, i: usize, n: usize) -> CoreResult<()> {
    let end = i.checked_add(n).ok_or(corrupt(Corruption::Layout))?;
    if end > h.nr_entries {
        return Err(corrupt(Corruption::Layout));
    }
    let tail = h.nr_entries - end;
    move_within(buf, h.key_off(end), h.key_off(i), tail * 8)?;
    move_within(buf, h.val_off(end), h.val_off(i), tail * h.value_size)?;
    let nr = h.nr_entries - n;
    set_nr(buf, h, nr)
}

/// Moves all entries up by `n` slots (the first `n` slots keep stale
/// contents for the caller to overwrite) and adds `n` to the count.
pub fn shift_right(buf: &mut [u8], h: &mut Header, n: usize) -> CoreResult<()> {
    let nr = h
        .nr_entries
        .checked_add(n)
        .ok_or(corrupt(Corruption::Layout))?;
    if nr > h.max_entries {
        return Err(corrupt(Corruption::Layout));
    }
    move_within(buf, h.key_off(0), h.key_off(n), h.nr_entries * 8)?;
    move_within(buf, h.val_off(0), h.val_off(n), h.nr_entries * h.value_size)?;
    h.nr_entries = nr;
    put_u32(buf, OFF_NR, nr as u32)
}

/// Drops the first `n` entries, moving the rest to the front.
pub fn drop_front(buf: &mut [u8], h: &mut Header, n: usize) -> CoreResult<()> {
    remove_run(buf, h, 0, n)
}
