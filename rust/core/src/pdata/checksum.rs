// SPDX-License-Identifier: GPL-2.0
//! CRC-32C and the per-block-type checksums of dm-thin metadata (format.md,
//! "Blocks").
//!
//! `csum = crc32c_raw(!0, block[4..4096]) ^ type_xor`, stored LE at offset 0;
//! the block's own number is stored at offset 8. [`seal`] fills both in before
//! a block is written; [`verify`] checks both after a block is read from media.
//! A [`crate::pdata::block_store::BlockStore`] calls these (the kernel glue from its
//! dm-bufio validator callbacks), so the checksum function can be swapped there.

use crate::core_error::{corrupt, CoreError, CoreResult, Corruption};
pub use crate::pdata::codec::BLOCK_SIZE;
use crate::pdata::codec::{get_u32, get_u64, put_u32, put_u64};

const POLY: u32 = 0x82F6_3B78;

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

static TABLES: [[u32; 256]; 8] = make_tables();

#[inline(always)]
fn tb(t: usize, idx: u32) -> u32 {
    // `t < 8` and `idx & 0xff < 256` always hold: the lookups cannot fail.
    match TABLES.get(t) {
        Some(row) => row.get((idx & 0xff) as usize).copied().unwrap_or(0),
        None => 0,
    }
}

/// CRC-32C (Castagnoli, reflected) of `data` starting from `seed`, without the
/// final inversion (the kernel's `crc32c()` semantics).
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    let mut crc = seed;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        if let &[b0, b1, b2, b3, b4, b5, b6, b7] = c {
            let lo = crc ^ u32::from_le_bytes([b0, b1, b2, b3]);
            crc = tb(7, lo)
                ^ tb(6, lo >> 8)
                ^ tb(5, lo >> 16)
                ^ tb(4, lo >> 24)
                ^ tb(3, u32::from(b4))
                ^ tb(2, u32::from(b5))
                ^ tb(1, u32::from(b6))
                ^ tb(0, u32::from(b7));
        }
    }
    for &b in chunks.remainder() {
        crc = tb(0, crc ^ u32::from(b)) ^ (crc >> 8);
    }
    crc
}

/// Standard CRC-32C (with initial and final inversion), e.g. of "123456789"
/// is 0xE3069283.
pub fn crc32c(data: &[u8]) -> u32 {
    !crc32c_raw(!0, data)
}

/// The kind of a metadata block: decides the checksum XOR and the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// The superblock (block 0) or a held metadata-snapshot copy of it.
    Superblock,
    /// A B-tree node.
    Node,
    /// The metadata space map's index block.
    Index,
    /// A space-map bitmap block.
    Bitmap,
    /// No validation at all (probing for an unformatted device).
    Raw,
}

impl BlockKind {
    /// The XOR constant of this block type, `None` for [`BlockKind::Raw`].
    pub const fn xor(self) -> Option<u32> {
        match self {
            BlockKind::Superblock => Some(160_774),
            BlockKind::Node => Some(121_107),
            BlockKind::Index => Some(160_478),
            BlockKind::Bitmap => Some(240_779),
            BlockKind::Raw => None,
        }
    }
}

fn check_len(buf: &[u8]) -> CoreResult<()> {
    if buf.len() == BLOCK_SIZE {
        Ok(())
    } else {
        Err(CoreError::Invalid)
    }
}

/// Checksum a block of `kind` should carry (computed over bytes 4..4096).
pub fn block_csum(kind: BlockKind, buf: &[u8]) -> CoreResult<u32> {
    check_len(buf)?;
    let body = buf.get(4..).ok_or(corrupt(Corruption::Layout))?;
    Ok(crc32c_raw(!0, body) ^ kind.xor().unwrap_or(0))
}

/// Prepares a block for writing: stores `blocknr` at offset 8 and the checksum
/// at offset 0. Does nothing for [`BlockKind::Raw`].
pub fn seal(kind: BlockKind, blocknr: u64, buf: &mut [u8]) -> CoreResult<()> {
    if kind == BlockKind::Raw {
        return Ok(());
    }
    check_len(buf)?;
    put_u64(buf, 8, blocknr)?;
    let c = block_csum(kind, buf)?;
    put_u32(buf, 0, c)
}

/// Validates a block read from media: its own block number, its checksum
/// and, for B-tree nodes, the node structure (see
/// [`crate::pdata::btree::node::check_structure`]).
pub fn verify(kind: BlockKind, blocknr: u64, buf: &[u8]) -> CoreResult<()> {
    if kind == BlockKind::Raw {
        return Ok(());
    }
    check_len(buf)?;
    if get_u64(buf, 8)? != blocknr {
        return Err(corrupt(Corruption::BlockNr));
    }
    if get_u32(buf, 0)? != block_csum(kind, buf)? {
        return Err(corrupt(Corruption::Checksum));
    }
    if kind == BlockKind::Node {
        crate::pdata::btree::node::check_structure(buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn standard_vector() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        // Unaligned tails go through the byte loop.
        assert_eq!(crc32c(b"1234567890a"), crc32c_bytewise(b"1234567890a"));
    }

    fn crc32c_bytewise(d: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in d {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn dm_thin_vectors() {
        let z = vec![0u8; 4096];
        assert_eq!(block_csum(BlockKind::Superblock, &z).unwrap(), 0x58CF_D397);
        assert_eq!(block_csum(BlockKind::Node, &z).unwrap(), 0x58CC_7E82);
        assert_eq!(block_csum(BlockKind::Index, &z).unwrap(), 0x58CF_D54F);
        assert_eq!(block_csum(BlockKind::Bitmap, &z).unwrap(), 0x58CE_0B1A);
        let mut leaf = vec![0u8; 4096];
        put_u32(&mut leaf, 4, 2).unwrap();
        put_u32(&mut leaf, 20, 252).unwrap();
        put_u32(&mut leaf, 24, 8).unwrap();
        seal(BlockKind::Node, 5, &mut leaf).unwrap();
        assert_eq!(get_u32(&leaf, 0).unwrap(), 0x49D8_085D);
        verify(BlockKind::Node, 5, &leaf).unwrap();
        assert_eq!(
            verify(BlockKind::Node, 6, &leaf),
            Err(corrupt(Corruption::BlockNr))
        );
        assert_eq!(
            verify(BlockKind::Bitmap, 5, &leaf),
            Err(corrupt(Corruption::Checksum))
        );
    }

    #[test]
    fn random_lengths_match_bytewise() {
        let mut x = 0x1234_5678u32;
        let mut data = vec![0u8; 300];
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        for n in 0..data.len() {
            assert_eq!(crc32c(&data[..n]), crc32c_bytewise(&data[..n]));
        }
    }
}
