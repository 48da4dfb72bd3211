// SPDX-License-Identifier: GPL-2.0
//! The dm-log-writes log (facts from drivers/md/dm-log-writes.c), its replay,
//! and the choice of replay points.
//!
//! Layout, in units of the logged device's logical block size (`sectorsize`):
//! block 0 holds the super (magic, version, nr_entries, sectorsize; little
//! endian); entries follow from block 1. Each entry is one block starting
//! with its header (sector, nr_sectors, flags, data_len), followed by
//! nr_sectors blocks of written data, except for discards, which carry no
//! data. A mark keeps its name in the header block, after the header.
//! Writes are logged in the order they reached stable storage: a plain
//! write once a later flush completed, a FUA write when it completed.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::{aligned::AlignedBuf, rng::Rng};

pub const FLUSH: u64 = 1 << 0;
pub const FUA: u64 = 1 << 1;
pub const DISCARD: u64 = 1 << 2;
pub const MARK: u64 = 1 << 3;
pub const METADATA: u64 = 1 << 4;

const MAGIC: u64 = 0x006a_7366_7773_6872;
const VERSION: u64 = 1;
/// dm-log-writes' own mark at the end of every log (written by its destructor).
pub const END_MARK: &str = "dm-log-writes-end";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where the write went, in bytes on the logged device.
    pub offset: u64,
    /// How many bytes it wrote (or discarded).
    pub len: u64,
    pub flags: u64,
    /// The mark's name, for a MARK entry.
    pub mark: Option<String>,
    /// Where its data starts in the log, in bytes.
    pub data_at: u64,
}

impl Entry {
    /// Whether replaying the entry changes the device (a write or a discard).
    pub fn changes_data(&self) -> bool {
        self.len > 0 && self.flags & MARK == 0
    }

    pub fn flag_names(&self) -> String {
        let names = [
            (FLUSH, "FLUSH"),
            (FUA, "FUA"),
            (DISCARD, "DISCARD"),
            (MARK, "MARK"),
            (METADATA, "META"),
        ];
        let s: Vec<&str> = names
            .iter()
            .filter(|(f, _)| self.flags & f != 0)
            .map(|(_, n)| *n)
            .collect();
        if s.is_empty() {
            "WRITE".into()
        } else {
            s.join("|")
        }
    }
}

#[derive(Debug)]
pub struct Log {
    pub entries: Vec<Entry>,
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads `len` bytes at `at` into `buf` (aligned for O_DIRECT).
fn read_at<R: Read + Seek>(r: &mut R, at: u64, buf: &mut [u8]) -> io::Result<()> {
    r.seek(SeekFrom::Start(at))?;
    r.read_exact(buf)
}

/// Reads the log's super and every entry header (not the data).
pub fn parse<R: Read + Seek>(r: &mut R) -> io::Result<Log> {
    // The super fits in 512 bytes, the smallest block size.
    let mut buf = AlignedBuf::new(4096);
    let b = buf.slice(512);
    read_at(r, 0, b)?;
    if le64(b, 0) != MAGIC {
        return Err(bad(format!(
            "not a dm-log-writes log (magic {:#x})",
            le64(b, 0)
        )));
    }
    if le64(b, 8) != VERSION {
        return Err(bad(format!("log version {}, want {VERSION}", le64(b, 8))));
    }
    let nr = le64(b, 16);
    let ss = u32::from_le_bytes(b[24..28].try_into().unwrap()) as u64;
    if !ss.is_power_of_two() || !(512..=4096).contains(&ss) {
        return Err(bad(format!("log sector size {ss}")));
    }
    let mut entries = Vec::new();
    let mut at = ss;
    for i in 0..nr {
        let h = buf.slice(ss as usize);
        read_at(r, at, h).map_err(|e| bad(format!("entry {i} at byte {at}: {e}")))?;
        let (sector, nr_sectors, flags, data_len) =
            (le64(h, 0), le64(h, 8), le64(h, 16), le64(h, 24));
        let mark = if flags & MARK != 0 {
            let n = (data_len as usize).min(ss as usize - 32);
            Some(String::from_utf8_lossy(&h[32..32 + n]).into_owned())
        } else {
            None
        };
        at += ss;
        entries.push(Entry {
            offset: sector * ss,
            len: nr_sectors * ss,
            flags,
            mark,
            data_at: at,
        });
        if flags & DISCARD == 0 {
            at += nr_sectors * ss;
        }
    }
    Ok(Log { entries })
}

/// Applies entries `from..=to` of the log to `dev`, in log order. A discard
/// is replayed as zeroes, what a thin-provisioned or RAM disk reads after one.
pub fn replay<R: Read + Seek, W: Write + Seek>(
    log: &Log,
    r: &mut R,
    dev: &mut W,
    from: usize,
    to: usize,
) -> io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = AlignedBuf::new(CHUNK as usize);
    for (i, e) in log.entries.iter().enumerate().take(to + 1).skip(from) {
        if !e.changes_data() {
            continue;
        }
        let mut done = 0;
        while done < e.len {
            let n = (e.len - done).min(CHUNK);
            let b = buf.slice(n as usize);
            if e.flags & DISCARD != 0 {
                b.fill(0);
            } else {
                read_at(r, e.data_at + done, b)
                    .map_err(|err| bad(format!("data of entry {i}: {err}")))?;
            }
            dev.seek(SeekFrom::Start(e.offset + done))?;
            dev.write_all(b)?;
            done += n;
        }
    }
    Ok(())
}

/// A replay point: replay entries `0..=index`, then expect what the workload
/// guaranteed at `mark` (its last mark at or before `index`); `exact` when
/// nothing changed the device between that mark and `index`, so nothing of
/// the next step of the workload can be on the device.
#[derive(Debug, PartialEq, Eq)]
pub struct Point {
    pub index: usize,
    pub mark: String,
    pub exact: bool,
}

/// The replay points from the first mark named `start` on: every FLUSH,
/// FUA and MARK entry, plus `random` entries drawn with `seed` (or every
/// entry with `all`). Points that leave the device in the same state are
/// tested once, at the last of them, whose expectation is the strictest
/// (the latest mark).
pub fn points(
    log: &Log,
    start: &str,
    random: usize,
    all: bool,
    seed: u64,
) -> io::Result<Vec<Point>> {
    let n = log.entries.len();
    let first = log
        .entries
        .iter()
        .position(|e| e.mark.as_deref() == Some(start))
        .ok_or_else(|| bad(format!("no mark '{start}' in the log")))?;
    let mut chosen = vec![false; n];
    for (i, e) in log.entries.iter().enumerate().skip(first) {
        chosen[i] = all || e.flags & (FLUSH | FUA | MARK) != 0;
    }
    let mut rng = Rng(seed);
    for _ in 0..random {
        chosen[first + rng.below((n - first) as u64) as usize] = true;
    }
    // Walk backwards: the first chosen entry seen for each device state
    // (count of data-changing entries up to it) is its last.
    let mut state = log.entries.iter().filter(|e| e.changes_data()).count();
    let mut seen_state = usize::MAX;
    let mut out = Vec::new();
    for i in (first..n).rev() {
        if chosen[i] && state != seen_state {
            seen_state = state;
            out.push(i);
        }
        if log.entries[i].changes_data() {
            state -= 1;
        }
    }
    out.reverse();
    // The workload's mark at or before each point, and whether any data
    // entry lies between them.
    let mut res = Vec::new();
    let (mut mark, mut exact) = (String::new(), false);
    let mut next = 0;
    for (i, e) in log.entries.iter().enumerate() {
        match &e.mark {
            Some(m) if m != END_MARK => (mark, exact) = (m.clone(), true),
            _ if e.changes_data() => exact = false,
            _ => {}
        }
        if next < out.len() && out[next] == i {
            res.push(Point {
                index: i,
                mark: mark.clone(),
                exact,
            });
            next += 1;
        }
    }
    Ok(res)
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::io::Cursor;

    /// Builds a log as dm-log-writes writes it, with 512-byte sectors.
    pub struct LogBuilder {
        pub bytes: Vec<u8>,
        nr: u64,
    }
    impl LogBuilder {
        pub fn new() -> Self {
            LogBuilder {
                bytes: vec![0; 512],
                nr: 0,
            }
        }
        fn header(&mut self, sector: u64, nr_sectors: u64, flags: u64, data: &[u8]) {
            let mut h = vec![0u8; 512];
            for (k, v) in [sector, nr_sectors, flags, data.len() as u64]
                .iter()
                .enumerate()
            {
                h[k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
            h[32..32 + data.len()].copy_from_slice(data);
            self.bytes.extend_from_slice(&h);
            self.nr += 1;
        }
        pub fn write(&mut self, sector: u64, data: &[u8], flags: u64) -> &mut Self {
            assert_eq!(data.len() % 512, 0);
            self.header(sector, data.len() as u64 / 512, flags, &[]);
            self.bytes.extend_from_slice(data);
            self
        }
        pub fn flush(&mut self) -> &mut Self {
            self.header(0, 0, FLUSH, &[]);
            self
        }
        pub fn discard(&mut self, sector: u64, nr: u64) -> &mut Self {
            self.header(sector, nr, DISCARD, &[]);
            self
        }
        pub fn mark(&mut self, name: &str) -> &mut Self {
            self.header(0, 0, MARK, name.as_bytes());
            self
        }
        pub fn finish(&mut self) -> Vec<u8> {
            let mut b = self.bytes.clone();
            b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            b[8..16].copy_from_slice(&VERSION.to_le_bytes());
            b[16..24].copy_from_slice(&self.nr.to_le_bytes());
            b[24..28].copy_from_slice(&512u32.to_le_bytes());
            b
        }
    }

    fn sample() -> Vec<u8> {
        LogBuilder::new()
            .mark("e0") // 0
            .write(2, &[1u8; 1024], 0) // 1
            .flush() // 2
            .mark("e1") // 3
            .write(0, &[2u8; 512], FUA) // 4
            .discard(3, 1) // 5
            .write(5, &[3u8; 512], 0) // 6
            .flush() // 7
            .mark("e2") // 8
            .mark(END_MARK) // 9
            .finish()
    }

    #[test]
    fn parses_entries() {
        let log = parse(&mut Cursor::new(sample())).unwrap();
        let e = &log.entries;
        assert_eq!(e.len(), 10);
        assert_eq!(e[0].mark.as_deref(), Some("e0"));
        assert_eq!((e[1].offset, e[1].len, e[1].data_at), (1024, 1024, 1536));
        assert_eq!(e[2].flag_names(), "FLUSH");
        assert_eq!(e[4].flag_names(), "FUA");
        // The flush and the mark take a header block each, the write its data too.
        assert_eq!(e[4].data_at, 512 + 512 + 512 + 1024 + 512 + 512 + 512);
        assert_eq!(e[5].flag_names(), "DISCARD");
        // A discard carries no data: the next entry follows its header.
        assert_eq!(e[6].data_at, e[5].data_at + 512);
        assert!(e[5].changes_data() && !e[3].changes_data() && !e[7].changes_data());
    }

    #[test]
    fn rejects_garbage() {
        let mut b = sample();
        b[0] ^= 1;
        assert!(parse(&mut Cursor::new(b)).is_err());
        let mut b = sample();
        b[16] = 11; // more entries than the log holds
        assert!(parse(&mut Cursor::new(b)).is_err());
    }

    #[test]
    fn replays_prefixes() {
        let bytes = sample();
        let log = parse(&mut Cursor::new(bytes.clone())).unwrap();
        let mut dev = Cursor::new(vec![9u8; 4096]);
        replay(&log, &mut Cursor::new(bytes.clone()), &mut dev, 0, 3).unwrap();
        let d = dev.get_ref();
        assert!(d[..1024].iter().all(|&b| b == 9));
        assert!(d[1024..2048].iter().all(|&b| b == 1));
        // Then the rest, from where the first replay stopped.
        replay(&log, &mut Cursor::new(bytes), &mut dev, 4, 9).unwrap();
        let d = dev.get_ref();
        assert!(d[..512].iter().all(|&b| b == 2));
        assert!(d[1024..1536].iter().all(|&b| b == 1));
        assert!(
            d[1536..2048].iter().all(|&b| b == 0),
            "discard replayed as zeroes"
        );
        assert!(d[2560..3072].iter().all(|&b| b == 3));
    }

    #[test]
    fn chooses_points() {
        let log = parse(&mut Cursor::new(sample())).unwrap();
        let p = points(&log, "e0", 0, false, 1).unwrap();
        let got: Vec<(usize, &str, bool)> = p
            .iter()
            .map(|p| (p.index, p.mark.as_str(), p.exact))
            .collect();
        // 0 (e0, nothing written yet), 2 and 3 are one state: 3 with e1.
        // 4 (FUA) is its own state; 7, 8 and the end mark 9 are one state.
        assert_eq!(
            got,
            vec![
                (0, "e0", true),
                (3, "e1", true),
                (4, "e1", false),
                (9, "e2", true)
            ]
        );
        let all = points(&log, "e1", 0, true, 1).unwrap();
        let idx: Vec<usize> = all.iter().map(|p| p.index).collect();
        assert_eq!(idx, vec![3, 4, 5, 9]);
        assert!(points(&log, "nope", 0, false, 1).is_err());
        // Random points are seeded: the same seed, the same points.
        let a = points(&log, "e0", 3, false, 7).unwrap();
        assert_eq!(a, points(&log, "e0", 3, false, 7).unwrap());
    }
}
