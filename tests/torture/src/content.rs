// SPDX-License-Identifier: GPL-2.0
//! What a written 512-byte sector holds: a header naming the volume that
//! wrote it (`uid`), the sector and the write's generation, and a fill
//! derived from the three. Reading a sector back therefore says whose data
//! it is, so stale data of another volume, of another place or of an older
//! write is named, not just "differs".

use crate::rng::Rng;

pub const SECTOR: usize = 512;
const MAGIC: u64 = 0x7274_6869_6e54_5254; // "rthinTRT"

/// The writer of a sector's content: `uid` is the op index (plus one) of the
/// op that created the volume the write went to, `gen` the op index (plus
/// one) of the write. `Tag::ZERO` is a sector that was never written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub uid: u32,
    pub gen: u32,
}

impl Tag {
    pub const ZERO: Tag = Tag { uid: 0, gen: 0 };
}

impl std::fmt::Display for Tag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Tag::ZERO {
            write!(f, "zeroes")
        } else {
            write!(
                f,
                "the write of op {} to the volume of op {}",
                self.gen - 1,
                self.uid - 1
            )
        }
    }
}

fn fill_word(tag: Tag, sector: u64, i: u64) -> u64 {
    Rng(u64::from(tag.uid) << 32 ^ u64::from(tag.gen) ^ sector.rotate_left(20) ^ i.rotate_left(50))
        .next()
}

/// Fills `buf` (one sector) with `tag`'s content for `sector`.
pub fn encode(buf: &mut [u8], tag: Tag, sector: u64) {
    let words = [MAGIC, u64::from(tag.uid), sector, u64::from(tag.gen)];
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        let w = match words.get(i) {
            Some(w) => *w,
            None => fill_word(tag, sector, i as u64),
        };
        chunk.copy_from_slice(&w.to_le_bytes());
    }
}

/// What a sector read back holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// Written by `tag` for sector `sector` (which may be another place).
    Data {
        tag: Tag,
        sector: u64,
    },
    Zeroes,
    /// Neither zeroes nor whole written content (torn, or foreign bytes).
    Garbage,
}

pub fn decode(buf: &[u8]) -> Found {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    if buf.iter().all(|b| *b == 0) {
        return Found::Zeroes;
    }
    let (uid, gen) = (word(1), word(3));
    if word(0) != MAGIC || uid > u64::from(u32::MAX) || gen > u64::from(u32::MAX) {
        return Found::Garbage;
    }
    let tag = Tag {
        uid: uid as u32,
        gen: gen as u32,
    };
    let sector = word(2);
    let mut expect = [0u8; SECTOR];
    encode(&mut expect, tag, sector);
    if expect[..] == buf[..SECTOR] {
        Found::Data { tag, sector }
    } else {
        Found::Garbage
    }
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Data { tag, sector } => write!(f, "{tag} (its sector {sector})"),
            Found::Zeroes => write!(f, "zeroes"),
            Found::Garbage => write!(f, "bytes that are neither zeroes nor any write's"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_names_the_writer() {
        let mut b = [0u8; SECTOR];
        let tag = Tag { uid: 3, gen: 17 };
        encode(&mut b, tag, 99);
        assert_eq!(decode(&b), Found::Data { tag, sector: 99 });
        b[300] ^= 1;
        assert_eq!(decode(&b), Found::Garbage);
        assert_eq!(decode(&[0u8; SECTOR]), Found::Zeroes);
    }
}
