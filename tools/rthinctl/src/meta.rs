// SPDX-License-Identifier: GPL-2.0
//! Offline metadata: `meta ls|dump|check` on an inactive metadata device or
//! an image file, read through the same core crate the kernel module uses
//! (`rthin_core::thin_metadata::ThinMetadata` over a read-only block store).
//!
//! Never run these on the metadata device of an active pool: the kernel
//! changes it underneath (the same rule as for thin_check and thin_dump).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;

use rthin_core::block_store::BlockStore;
use rthin_core::checksum::{verify, BlockKind, BLOCK_SIZE};
use rthin_core::core_error::{CoreError, CoreResult, Corruption};
use rthin_core::thin_metadata::{DeviceDetails, Mapping, ThinMetadata};
use serde::Serialize;

use crate::explain::{exit, Error, Result};

/// A read-only block store over a file or block device; every read is
/// validated by the core's checksum rules, every write refused.
pub struct FileStore {
    file: File,
    nr_blocks: u64,
}

impl FileStore {
    /// Opens `path` read-only.
    pub fn open(path: &str) -> Result<Self> {
        let mut file = File::open(path).map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => exit::PERMISSION,
                _ => exit::OTHER,
            };
            Error::new(code, format!("cannot open metadata {path}: {e}"))
        })?;
        let len = file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::new(exit::OTHER, format!("cannot size {path}: {e}")))?;
        Ok(Self {
            file,
            nr_blocks: len / BLOCK_SIZE as u64,
        })
    }
}

impl BlockStore for FileStore {
    type Read<'a> = Vec<u8>;
    type Write<'a> = Vec<u8>;

    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }

    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<Vec<u8>> {
        if b >= self.nr_blocks {
            return Err(CoreError::Corrupt(Corruption::BlockOutOfRange));
        }
        let mut buf = vec![0u8; BLOCK_SIZE];
        let off = b
            .checked_mul(BLOCK_SIZE as u64)
            .ok_or(CoreError::Corrupt(Corruption::BlockOutOfRange))?;
        self.file
            .read_exact_at(&mut buf, off)
            .map_err(|e| CoreError::Io(-e.raw_os_error().unwrap_or(5)))?;
        verify(kind, b, &buf)?;
        Ok(buf)
    }

    fn write(&mut self, _b: u64, _kind: BlockKind) -> CoreResult<Vec<u8>> {
        Err(CoreError::Unsupported)
    }

    fn zeroed(&mut self, _b: u64, _kind: BlockKind) -> CoreResult<Vec<u8>> {
        Err(CoreError::Unsupported)
    }

    fn copy(&mut self, _from: u64, _to: u64, _kind: BlockKind) -> CoreResult<()> {
        Err(CoreError::Unsupported)
    }

    fn flush(&mut self) -> CoreResult<()> {
        Ok(())
    }
}

/// A sentence for a core error met while reading metadata.
pub fn core_sentence(path: &str, e: CoreError) -> Error {
    let t = match e {
        CoreError::Unformatted => format!("{path} holds no thin metadata (block 0 is all zero)"),
        CoreError::Corrupt(c) => format!(
            "{path}: metadata is damaged ({c:?}); run thin_check on it, then thin_repair to a new device"
        ),
        CoreError::Io(n) => format!("{path}: read error (errno {})", n.unsigned_abs()),
        CoreError::NotFound => format!("{path}: no such thin device in the metadata"),
        other => format!("{path}: cannot read the metadata ({other:?})"),
    };
    Error::new(exit::REFUSED, t)
}

/// Opens metadata read-only.
pub fn open_md(path: &str) -> Result<ThinMetadata<FileStore>> {
    ThinMetadata::open(FileStore::open(path)?, None).map_err(|e| core_sentence(path, e))
}

#[derive(Serialize)]
struct JDev {
    dev_id: u64,
    mapped_blocks: u64,
    transaction_id: u64,
    creation_time: u32,
    snapshotted_time: u32,
}

fn devices(md: &ThinMetadata<FileStore>) -> CoreResult<Vec<(u64, DeviceDetails)>> {
    let mut v = Vec::new();
    md.for_each_device(&mut |d, det| {
        v.push((d, det));
        Ok(())
    })?;
    Ok(v)
}

/// `meta ls`: the devices in the metadata.
pub fn ls(path: &str, json: bool, style: &crate::report::Style) -> Result<i32> {
    let md = open_md(path)?;
    let devs = devices(&md).map_err(|e| core_sentence(path, e))?;
    let bs = u64::from(md.data_block_size()) * 512;
    if json {
        #[derive(Serialize)]
        struct J {
            schema: &'static str,
            transaction_id: u64,
            time: u32,
            data_block_size_bytes: u64,
            needs_check: bool,
            held_metadata_root: Option<u64>,
            devices: Vec<JDev>,
        }
        let j = J {
            schema: "rthinctl.meta-ls/1",
            transaction_id: md.transaction_id(),
            time: md.time(),
            data_block_size_bytes: bs,
            needs_check: md.needs_check(),
            held_metadata_root: Some(md.held_root()).filter(|&h| h != 0),
            devices: devs
                .iter()
                .map(|(d, x)| JDev {
                    dev_id: *d,
                    mapped_blocks: x.mapped_blocks,
                    transaction_id: x.transaction_id,
                    creation_time: x.creation_time,
                    snapshotted_time: x.snapshotted_time,
                })
                .collect(),
        };
        let s = serde_json::to_string_pretty(&j)
            .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
        println!("{s}");
        return Ok(exit::OK);
    }
    let mut t = crate::report::Table::new(&[
        ("DEV", true),
        ("MAPPED", true),
        ("MAPPED_BLOCKS", true),
        ("TXN", true),
        ("CTIME", true),
        ("STIME", true),
    ]);
    for (d, x) in &devs {
        t.push(vec![
            d.to_string(),
            style
                .units
                .format(x.mapped_blocks.saturating_mul(bs), style.suffix),
            x.mapped_blocks.to_string(),
            x.transaction_id.to_string(),
            x.creation_time.to_string(),
            x.snapshotted_time.to_string(),
        ]);
    }
    print!("{}", t.render(style));
    Ok(exit::OK)
}

fn uuid_text(u: &[u8; 16]) -> String {
    if u.iter().all(|&b| b == 0) {
        String::new()
    } else {
        u.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Writes thin_dump's XML for the metadata. Runs of consecutive virtual and
/// data blocks with the same time become one `range_mapping`.
pub fn dump_xml(md: &ThinMetadata<FileStore>, out: &mut String) -> CoreResult<()> {
    use std::fmt::Write;
    let sb = md.committed_superblock();
    let _ = write!(
        out,
        "<superblock uuid=\"{}\" time=\"{}\" transaction=\"{}\"",
        uuid_text(&sb.uuid),
        sb.time,
        sb.trans_id
    );
    if sb.flags != 0 {
        let _ = write!(out, " flags=\"{}\"", sb.flags);
    }
    let _ = writeln!(
        out,
        " version=\"{}\" data_block_size=\"{}\" nr_data_blocks=\"{}\">",
        sb.version, sb.data_block_size, sb.data_sm.nr_blocks
    );
    for (d, x) in devices(md)? {
        let _ = writeln!(
            out,
            "  <device dev_id=\"{d}\" mapped_blocks=\"{}\" transaction=\"{}\" creation_time=\"{}\" snap_time=\"{}\">",
            x.mapped_blocks, x.transaction_id, x.creation_time, x.snapshotted_time
        );
        // (origin_begin, data_begin, length, time)
        let mut run: Option<(u64, u64, u64, u32)> = None;
        let flush = |out: &mut String, r: (u64, u64, u64, u32)| {
            if r.2 == 1 {
                let _ = writeln!(
                    out,
                    "    <single_mapping origin_block=\"{}\" data_block=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.3
                );
            } else {
                let _ = writeln!(
                    out,
                    "    <range_mapping origin_begin=\"{}\" data_begin=\"{}\" length=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.2, r.3
                );
            }
        };
        md.for_each_mapping(d, &mut |v, m: Mapping| {
            match run {
                Some((o, db, len, t))
                    if t == m.time
                        && o.checked_add(len) == Some(v)
                        && db.checked_add(len) == Some(m.data_block) =>
                {
                    run = Some((o, db, len + 1, t));
                }
                Some(r) => {
                    flush(out, r);
                    run = Some((v, m.data_block, 1, m.time));
                }
                None => run = Some((v, m.data_block, 1, m.time)),
            }
            Ok(())
        })?;
        if let Some(r) = run {
            flush(out, r);
        }
        let _ = writeln!(out, "  </device>");
    }
    let _ = writeln!(out, "</superblock>");
    Ok(())
}

/// `meta dump`.
pub fn dump(path: &str) -> Result<i32> {
    let md = open_md(path)?;
    let mut s = String::new();
    dump_xml(&md, &mut s).map_err(|e| core_sentence(path, e))?;
    print!("{s}");
    Ok(exit::OK)
}

/// `meta check`: the core's checker (`rthin_core::checker`, the one the
/// core's property and crash tests use) walks the superblock, the details
/// tree, every mapping tree, the held snapshot's trees and both space maps
/// (every node read through the core's validators), recounts the references
/// to every data and metadata block and compares them with the space maps.
/// As in thin_check: a leak (a block the space map counts once that nothing
/// references) fails the check unless `ignore_leaks` (thin_check's
/// --ignore-non-fatal-errors); every other finding is damage and always
/// fails it.
pub fn check(path: &str, quiet: bool, ignore_leaks: bool) -> Result<i32> {
    let md = open_md(path)?;
    let sb = *md.committed_superblock();
    let rep = rthin_core::checker::examine(md.store());
    let mut leaks = Vec::new();
    for (what, blocks) in [("data", &rep.data_leaks), ("metadata", &rep.meta_leaks)] {
        if blocks.is_empty() {
            continue;
        }
        let shown: Vec<String> = blocks.iter().take(10).map(u64::to_string).collect();
        leaks.push(format!(
            "{} {what} blocks have leaked (counted in use, referenced by nothing): {}{}",
            blocks.len(),
            shown.join(" "),
            if blocks.len() > 10 { " ..." } else { "" }
        ));
    }
    if !rep.errors.is_empty() {
        let mut notes = rep.errors;
        notes.extend(leaks);
        return Err(Error {
            text: format!(
                "{path}: metadata is damaged; run thin_check, then thin_repair to a new device"
            ),
            code: exit::REFUSED,
            notes,
        });
    }
    if !leaks.is_empty() && !ignore_leaks {
        return Err(Error {
            text: format!(
                "{path}: space is leaked, no data is at risk; thin_check --auto-repair (or thin_repair) reclaims it, --ignore-non-fatal-errors accepts it"
            ),
            code: exit::REFUSED,
            notes: leaks,
        });
    }
    for l in &leaks {
        eprintln!("rthinctl: warning: {path}: {l}");
    }
    if !quiet {
        println!(
            "{path}: metadata ok: {} devices, transaction {}, time {}; {} mappings, {} data and {} metadata blocks in use, reference counts agree{}{}",
            rep.devices,
            sb.trans_id,
            sb.time,
            rep.mappings,
            rep.data_allocated,
            rep.meta_allocated,
            if leaks.is_empty() {
                ""
            } else {
                " apart from the leaks"
            },
            if md.needs_check() {
                " (needs_check is set: clear it with thin_check --clear-needs-check-flag)"
            } else {
                ""
            }
        );
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rthin_core::checksum::seal;
    use std::collections::HashMap;

    /// A writable in-memory store, to build metadata images for the tests.
    struct MemRw {
        disk: Vec<Vec<u8>>,
        cache: HashMap<u64, (Vec<u8>, BlockKind)>,
    }

    impl MemRw {
        fn new(nr: u64) -> Self {
            Self {
                disk: vec![vec![0u8; BLOCK_SIZE]; nr as usize],
                cache: HashMap::new(),
            }
        }
        fn load(&self, b: u64, kind: BlockKind) -> CoreResult<Vec<u8>> {
            if let Some((d, _)) = self.cache.get(&b) {
                return Ok(d.clone());
            }
            let d = self.disk.get(b as usize).ok_or(CoreError::Io(-5))?.clone();
            verify(kind, b, &d)?;
            Ok(d)
        }
    }

    impl BlockStore for MemRw {
        type Read<'a> = Vec<u8>;
        type Write<'a> = &'a mut [u8];
        fn nr_blocks(&self) -> u64 {
            self.disk.len() as u64
        }
        fn read(&self, b: u64, kind: BlockKind) -> CoreResult<Vec<u8>> {
            self.load(b, kind)
        }
        fn write(&mut self, b: u64, kind: BlockKind) -> CoreResult<&mut [u8]> {
            let d = self.load(b, kind)?;
            let e = self.cache.entry(b).or_insert((d, kind));
            e.1 = kind;
            Ok(&mut e.0[..])
        }
        fn zeroed(&mut self, b: u64, kind: BlockKind) -> CoreResult<&mut [u8]> {
            if b >= self.nr_blocks() {
                return Err(CoreError::Io(-5));
            }
            self.cache.insert(b, (vec![0u8; BLOCK_SIZE], kind));
            Ok(&mut self.cache.get_mut(&b).ok_or(CoreError::Internal)?.0[..])
        }
        fn copy(&mut self, from: u64, to: u64, kind: BlockKind) -> CoreResult<()> {
            let d = self.load(from, kind)?;
            self.cache.insert(to, (d, kind));
            Ok(())
        }
        fn flush(&mut self) -> CoreResult<()> {
            for (b, (mut d, kind)) in self.cache.drain() {
                seal(kind, b, &mut d)?;
                self.disk[b as usize] = d;
            }
            Ok(())
        }
    }

    fn image() -> (tempfile_path::TempPath, String) {
        image_with(|_| {})
    }

    /// The test image, changed by `f` before the commit.
    fn image_with(f: impl FnOnce(&mut ThinMetadata<MemRw>)) -> (tempfile_path::TempPath, String) {
        let mut md = ThinMetadata::format(MemRw::new(1024), 128, 1000).unwrap();
        md.set_transaction_id(0, 7).unwrap();
        md.create_thin(1).unwrap();
        for v in 0..5 {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(1, v, b).unwrap();
        }
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, 9, b).unwrap();
        md.create_snap(2, 1).unwrap();
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(2, 0, b).unwrap();
        f(&mut md);
        md.commit().unwrap();
        let disk = md.into_store().disk.concat();
        let p = tempfile_path::TempPath::new(&disk);
        let s = p.0.clone();
        (p, s)
    }

    /// A temporary file removed on drop (no extra crate for this).
    mod tempfile_path {
        pub struct TempPath(pub String);
        impl TempPath {
            pub fn new(bytes: &[u8]) -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "rthinctl-meta-{}-{}.img",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&p, bytes).unwrap();
                Self(p.to_string_lossy().into_owned())
            }
        }
        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn dump_matches_what_was_written() {
        let (_tmp, path) = image();
        let md = open_md(&path).unwrap();
        let mut x = String::new();
        dump_xml(&md, &mut x).unwrap();
        let want = "<superblock uuid=\"\" time=\"1\" transaction=\"7\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"1000\">
  <device dev_id=\"1\" mapped_blocks=\"6\" transaction=\"7\" creation_time=\"0\" snap_time=\"1\">
    <range_mapping origin_begin=\"0\" data_begin=\"0\" length=\"5\" time=\"0\"/>
    <single_mapping origin_block=\"9\" data_block=\"5\" time=\"0\"/>
  </device>
  <device dev_id=\"2\" mapped_blocks=\"6\" transaction=\"7\" creation_time=\"1\" snap_time=\"1\">
    <single_mapping origin_block=\"0\" data_block=\"6\" time=\"1\"/>
    <range_mapping origin_begin=\"1\" data_begin=\"1\" length=\"4\" time=\"0\"/>
    <single_mapping origin_block=\"9\" data_block=\"5\" time=\"0\"/>
  </device>
</superblock>
";
        assert_eq!(x, want);
        assert_eq!(check(&path, true, false), Ok(exit::OK));
    }

    #[test]
    fn damage_and_garbage_are_errors() {
        let (tmp, path) = image();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let e = open_md(&path).err().unwrap();
        assert_eq!(e.code, exit::REFUSED);
        assert!(e.text.contains("damaged"), "{}", e.text);
        drop(tmp);
        let zero = tempfile_path::TempPath::new(&vec![0u8; 64 * 4096]);
        assert!(open_md(&zero.0)
            .err()
            .unwrap()
            .text
            .contains("no thin metadata"));
        let short = tempfile_path::TempPath::new(&[1, 2, 3]);
        assert!(open_md(&short.0).is_err());
        let rnd: Vec<u8> = (0..8 * 4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let junk = tempfile_path::TempPath::new(&rnd);
        assert!(open_md(&junk.0).is_err());
        assert_eq!(
            open_md("/nonexistent/meta").err().unwrap().code,
            exit::NOT_FOUND
        );
    }

    #[test]
    fn check_recounts_references() {
        // A data block allocated and never mapped: a leak, which fails the
        // check unless leaks are accepted (thin_check's exit status).
        let (_t, path) = image_with(|md| {
            assert_eq!(md.alloc_data_block().unwrap(), 7);
        });
        let e = check(&path, true, false).unwrap_err();
        assert_eq!(e.code, exit::REFUSED);
        assert!(e.text.contains("space is leaked"), "{}", e.text);
        assert_eq!(
            e.notes,
            ["1 data blocks have leaked (counted in use, referenced by nothing): 7"]
        );
        assert_eq!(check(&path, true, true), Ok(exit::OK));

        // A mapped block counted once too often: damage, whatever the option.
        let (_t, path) = image_with(|md| md.data_block_inc(5).unwrap());
        for ignore in [false, true] {
            let e = check(&path, true, ignore).unwrap_err();
            assert_eq!(e.code, exit::REFUSED);
            assert!(e.text.contains("damaged"), "{}", e.text);
            assert_eq!(e.notes, ["data block 5: space map says 3, references 2"]);
        }

        // A mapping whose block the space map calls free.
        let (_t, path) = image_with(|md| md.data_block_dec(6).unwrap());
        let e = check(&path, true, true).unwrap_err();
        assert_eq!(
            e.notes,
            ["data block 6: free in space map but referenced 1 times"]
        );
    }
}
