// SPDX-License-Identifier: GPL-2.0
//! O_DIRECT reads and writes of a thin: what is read is what the device
//! returns, never the page cache.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::{FileExt, OpenOptionsExt},
};

use crate::{
    aligned::AlignedBuf,
    content::{encode, Tag, SECTOR},
};

/// O_DIRECT and O_DSYNC on Linux (x86, arm64 and most others); O_DSYNC
/// makes a direct write a FUA write.
const O_DIRECT: i32 = 0o40000;
const O_DSYNC: i32 = 0o10000;

fn open(path: &str, write: bool, fua: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(O_DIRECT | if fua { O_DSYNC } else { 0 })
        .open(path)
}

/// Writes `tag`'s content to `len` sectors from `sector`, FUA if asked,
/// then fdatasync if asked.
pub fn write(
    path: &str,
    sector: u64,
    len: u64,
    tag: Tag,
    fua: bool,
    fsync: bool,
) -> io::Result<()> {
    let f = open(path, true, fua)?;
    let bytes = len as usize * SECTOR;
    let mut buf = AlignedBuf::new(bytes);
    let b = buf.slice(bytes);
    for (i, s) in b.chunks_exact_mut(SECTOR).enumerate() {
        encode(s, tag, sector + i as u64);
    }
    f.write_all_at(b, sector * SECTOR as u64)?;
    if fsync {
        f.sync_data()?;
    }
    Ok(())
}

/// Reads `len` sectors from `sector` and hands them to `check` a MiB at a
/// time (with the chunk's first sector).
pub fn read<F: FnMut(u64, &[u8])>(
    path: &str,
    sector: u64,
    len: u64,
    mut check: F,
) -> io::Result<()> {
    const CHUNK: u64 = 2048;
    let f = open(path, false, false)?;
    let mut buf = AlignedBuf::new((CHUNK as usize) * SECTOR);
    let mut at = sector;
    while at < sector + len {
        let n = CHUNK.min(sector + len - at);
        let b = buf.slice(n as usize * SECTOR);
        f.read_exact_at(b, at * SECTOR as u64)?;
        check(at, b);
        at += n;
    }
    Ok(())
}

/// Reads the whole of a device (for the metadata device: a fingerprint of
/// its content, to see that nothing wrote it).
pub fn fingerprint(path: &str, sectors: u64) -> io::Result<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    read(path, 0, sectors, |_, b| {
        for x in b {
            h = (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3);
        }
    })?;
    Ok(h)
}
