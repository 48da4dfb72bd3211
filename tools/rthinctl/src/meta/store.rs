// SPDX-License-Identifier: GPL-2.0
//! The offline metadata store: a metadata device or image, read-only, in
//! large cached chunks, every block through the core's checksum
//! validators; and its errors as sentences.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::rc::Rc;

use rthin_core::core_error::{CoreError, CoreResult};
use rthin_core::metadata::superblock::MAGIC;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core::pdata::block_store::BlockStore;
use rthin_core::pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE};

use crate::explain::{exit, Error, Result};

/// How the metadata is to be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenMode {
    /// Read through the held metadata snapshot (`-m`); the device may be
    /// held by a running pool.
    pub snap: bool,
    /// Open a block device without `O_EXCL` (a running pool holds it).
    pub shared: bool,
}

/// A read-only block store over a file or block device; every read is
/// validated by the core's checksum rules, every write refused. With a
/// held snapshot chosen, block 0 reads as the snapshot's superblock (with
/// the live space-map roots, which the snapshot copy leaves empty).
pub struct FileStore {
    file: File,
    nr_blocks: u64,
    sb0: Option<Vec<u8>>,
    /// pread calls made and blocks verified (the tests count them).
    preads: std::cell::Cell<u64>,
    verifies: std::cell::Cell<u64>,
    /// The chunks read lately (read-ahead and cache).
    chunks: std::cell::RefCell<ChunkCache>,
    /// The blocks verified lately, newest last: the core's tree walk reads
    /// a leaf again for every few entries and a parent again for every
    /// child (in the kernel the block cache makes that free), and the
    /// checksum of every such read was most of `meta ls` and `meta dump`.
    verified: std::cell::RefCell<std::collections::VecDeque<Verified>>,
}

/// A block, the kind it was verified as, its bytes.
type Verified = (u64, BlockKind, Rc<[u8]>);

/// Verified blocks kept: a path from the root (the trees are at most a
/// few levels deep) and the space-map blocks read beside it.
const VERIFIED_BLOCKS: usize = 16;

/// Blocks read at once: a tree walk reads nodes written near each other,
/// and one 256 KiB read costs about what one 4 KiB read does (O_DIRECT on
/// a block device has no page cache to read ahead for it).
const CHUNK_BLOCKS: u64 = 64;
/// Chunks kept: 4 MiB, enough for the upper levels of every tree and the
/// space-map bitmaps while the leaves stream past (16 MiB doubled thin_dump 1.x's memory).
const CACHED_CHUNKS: usize = 16;

/// Chunks of the device by chunk number, the oldest dropped first. Each
/// buffer holds the chunk at offset `start`, aligned for O_DIRECT.
#[derive(Default)]
struct ChunkCache {
    map: std::collections::HashMap<u64, (Vec<u8>, usize)>,
    order: std::collections::VecDeque<u64>,
}

/// Magic numbers of the other persistent-data formats, to name them.
const CACHE_MAGIC: u64 = 0o6142003;
const ERA_MAGIC: u64 = 2126579579;
const CACHE_MAGIC_DEC: u64 = 6142003;

fn open_err(path: &str, e: &std::io::Error) -> Error {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => exit::NOT_FOUND,
        std::io::ErrorKind::PermissionDenied => exit::PERMISSION,
        _ => exit::OTHER,
    };
    Error::new(code, format!("cannot open metadata {path}: {e}"))
}

/// The device-mapper devices that hold the block device `path` (from
/// `/sys/class/block/*/holders`), by name.
fn holders(file: &File) -> Vec<String> {
    let Ok(md) = file.metadata() else {
        return Vec::new();
    };
    use std::os::unix::fs::MetadataExt;
    let rdev = md.rdev();
    let (maj, min) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let dir = format!("/sys/dev/block/{maj}:{min}/holders");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .flatten()
        .map(|e| {
            let k = e.file_name().to_string_lossy().into_owned();
            std::fs::read_to_string(format!("{dir}/{k}/dm/name"))
                .map(|n| n.trim().to_string())
                .unwrap_or(k)
        })
        .collect();
    v.sort();
    v
}

impl FileStore {
    /// Opens `path` read-only: a block device exclusively and with
    /// `O_DIRECT` (shared, when `mode.snap`), a regular file as it is.
    /// Anything that is not thin metadata is named for what it is.
    pub fn open(path: &str, mode: OpenMode) -> Result<Self> {
        let md = std::fs::metadata(path).map_err(|e| open_err(path, &e))?;
        let ft = md.file_type();
        if ft.is_dir() {
            return Err(Error::new(
                exit::REFUSED,
                format!(
                    "not thin-pool metadata: {path} is a directory, not a metadata device or image"
                ),
            ));
        }
        let block = ft.is_block_device();
        if !block && !ft.is_file() {
            return Err(Error::new(
                exit::REFUSED,
                format!(
                    "not thin-pool metadata: {path} is a {}, not a block device or image file",
                    if ft.is_char_device() {
                        "character device"
                    } else if ft.is_fifo() {
                        "pipe"
                    } else {
                        "socket"
                    }
                ),
            ));
        }
        let mut o = OpenOptions::new();
        o.read(true);
        if block {
            let mut flags = nix::libc::O_DIRECT;
            if !mode.snap && !mode.shared {
                flags |= nix::libc::O_EXCL;
            }
            o.custom_flags(flags);
        }
        let mut file = match o.open(path) {
            Ok(f) => f,
            Err(e) if block && e.raw_os_error() == Some(nix::libc::EBUSY) => {
                let held_by = File::open(path).map(|f| holders(&f)).unwrap_or_default();
                let who = if held_by.is_empty() {
                    "in use (mounted, or held by a device-mapper table)".to_string()
                } else {
                    format!("held by {}", held_by.join(", "))
                };
                return Err(Error::new(
                    exit::REFUSED,
                    format!("{path} is {who}: the metadata of an active pool changes under a reader"),
                )
                .note("check a running pool with: rthinctl meta check --live POOL")
                .note("or read a held metadata snapshot: rthinctl metadata-snap reserve POOL, then rthinctl meta ls|dump -m PATH"));
            }
            Err(e) => return Err(open_err(path, &e)),
        };
        let len = file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::new(exit::OTHER, format!("cannot size {path}: {e}")))?;
        let mut st = Self {
            file,
            nr_blocks: len / BLOCK_SIZE as u64,
            sb0: None,
            preads: std::cell::Cell::new(0),
            verifies: std::cell::Cell::new(0),
            chunks: Default::default(),
            verified: Default::default(),
        };
        st.sniff(path, len)?;
        if mode.snap {
            st.sb0 = Some(st.snapshot_superblock(path)?);
        }
        Ok(st)
    }

    /// Refuses input that is not thin metadata, saying what it is.
    fn sniff(&mut self, path: &str, len: u64) -> Result<()> {
        let not = |what: String| {
            Error::new(
                exit::REFUSED,
                format!("not thin-pool metadata: {path} {what}"),
            )
        };
        if len == 0 {
            return Err(not("is empty".into()));
        }
        let mut head = vec![0u8; BLOCK_SIZE];
        let n = if self.nr_blocks == 0 {
            let _ = self.file.seek(SeekFrom::Start(0));
            self.file.read(&mut head).unwrap_or(0)
        } else {
            self.read_raw(0, &mut head)
                .map_err(|e| Error::new(exit::OTHER, format!("{path}: read error: {e}")))?;
            BLOCK_SIZE
        };
        let head = &head[..n];
        // The magic first: a superblock's checksum (its first four bytes)
        // is as likely as not to start like text ('<', '{', '#', a space).
        if self.nr_blocks > 0 && head[32..40] == MAGIC.to_le_bytes() {
            return self.superblock_fits(path, head, len);
        }
        let text = String::from_utf8_lossy(&head[..n.min(512)]);
        let t = text.trim_start();
        if t.starts_with("<superblock") || t.starts_with("<?xml") && t.contains("<superblock") {
            return Err(Error::new(
                exit::REFUSED,
                format!("{path} looks like an XML dump (thin_dump's format), not metadata: use thin_restore -i {path} -o DEV to write it to a metadata device"),
            ));
        }
        if t.starts_with('<') || t.starts_with('{') || t.starts_with('#') {
            return Err(not("is a text file".into()));
        }
        if self.nr_blocks == 0 {
            return Err(not(format!(
                "is {len} bytes, less than one 4096-byte metadata block"
            )));
        }
        if head.iter().all(|&b| b == 0) {
            return Err(Error::new(
                exit::REFUSED,
                format!(
                    "{path} holds no thin metadata (block 0 is all zero): a new pool formats it"
                ),
            ));
        }
        let magic = u64::from_le_bytes(head[32..40].try_into().unwrap_or([0; 8]));
        if magic != MAGIC {
            let other = match magic {
                CACHE_MAGIC | CACHE_MAGIC_DEC => " (it is dm-cache metadata: use cache_check)",
                ERA_MAGIC => " (it is dm-era metadata: use era_check)",
                _ => "",
            };
            let printable = head[..64]
                .iter()
                .all(|&b| b == b'\n' || b == b'\t' || (32..127).contains(&b));
            return Err(not(format!(
                "has no superblock magic{other}{}",
                if printable && other.is_empty() {
                    " (it is text)"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }

    /// Refuses a superblock that cannot be read safely (unknown incompat
    /// features) or that describes more metadata than the file holds. A
    /// superblock whose checksum fails is left to the reader, which
    /// reports it as damage (its fields cannot be trusted).
    fn superblock_fits(&self, path: &str, head: &[u8], len: u64) -> Result<()> {
        use rthin_core::metadata::superblock::{off, Superblock};
        if verify(BlockKind::Superblock, 0, head).is_err() {
            return Ok(());
        }
        let sb = match Superblock::decode_with(head, true) {
            Ok(sb) => sb,
            Err(CoreError::Unsupported) => {
                let flags = u32::from_le_bytes(
                    head[off::INCOMPAT..off::INCOMPAT + 4]
                        .try_into()
                        .unwrap_or([0; 4]),
                );
                return Err(Error::new(
                    exit::UNSUPPORTED,
                    format!("{path}: the metadata uses an unsupported feature (incompat_flags {flags:#x}) that this rthinctl cannot read safely; it is not damage: read it with tools that support the feature"),
                ));
            }
            // Other bad fields are damage: the reader reports them.
            Err(_) => return Ok(()),
        };
        if sb.meta_sm.nr_blocks > self.nr_blocks {
            return Err(Error::new(
                exit::REFUSED,
                format!(
                    "{path} is {} blocks ({len} bytes) but its superblock describes {} metadata blocks: a truncated copy? copy the whole metadata device",
                    self.nr_blocks, sb.meta_sm.nr_blocks
                ),
            ));
        }
        Ok(())
    }

    /// The held snapshot's superblock as block 0: its trees, the live
    /// space-map roots, sealed for block 0.
    fn snapshot_superblock(&self, path: &str) -> Result<Vec<u8>> {
        let bad = |t: String| Error::new(exit::REFUSED, format!("{path}: {t}"));
        let held = rthin_core::metadata::checker::superblock(self)
            .map_err(|t| damaged(path, t))?
            .held_root;
        let live = self
            .read(0, BlockKind::Superblock)
            .map_err(|e| damaged(path, format!("{e} in superblock (block 0)")))?;
        if held == 0 {
            return Err(Error::new(
                exit::REFUSED,
                format!("{path}: the pool holds no metadata snapshot (reserve one: rthinctl metadata-snap reserve POOL)"),
            ));
        }
        let mut h = self
            .read(held, BlockKind::Superblock)
            .map_err(|e| {
                damaged(
                    path,
                    format!("{e} in metadata snapshot superblock (block {held})"),
                )
            })?
            .to_vec();
        // Space-map roots (offsets 64 and 192, 128 bytes each) from the
        // live superblock; no held root of its own.
        h[64..320].copy_from_slice(&live[64..320]);
        h[56..64].copy_from_slice(&0u64.to_le_bytes());
        seal(BlockKind::Superblock, 0, &mut h)
            .map_err(|e| bad(format!("cannot use the metadata snapshot: {e}")))?;
        Ok(h)
    }

    /// How many pread calls the store has made.
    #[cfg(test)]
    pub fn preads(&self) -> u64 {
        self.preads.get()
    }

    /// How many blocks the store has verified (read from its chunks).
    #[cfg(test)]
    pub fn verifies(&self) -> u64 {
        self.verifies.get()
    }

    /// Block `b` into `buf`, from the chunk cache, reading its whole chunk
    /// (clamped to the device's end) when it is not there.
    fn read_raw(&self, b: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let chunk = b / CHUNK_BLOCKS;
        let within = (b % CHUNK_BLOCKS) as usize * BLOCK_SIZE;
        let mut cache = self.chunks.borrow_mut();
        if !cache.map.contains_key(&chunk) {
            let first = chunk * CHUNK_BLOCKS;
            let len = (CHUNK_BLOCKS
                .min(self.nr_blocks.saturating_sub(first))
                .max(1)) as usize
                * BLOCK_SIZE;
            // O_DIRECT wants an aligned buffer: one block of slack.
            let mut raw = vec![0u8; len + BLOCK_SIZE];
            let start = raw.as_ptr().align_offset(BLOCK_SIZE);
            self.preads.set(self.preads.get() + 1);
            self.file
                .read_exact_at(&mut raw[start..start + len], first * BLOCK_SIZE as u64)?;
            if cache.order.len() >= CACHED_CHUNKS {
                if let Some(old) = cache.order.pop_front() {
                    cache.map.remove(&old);
                }
            }
            cache.order.push_back(chunk);
            cache.map.insert(chunk, (raw, start));
        }
        let (raw, start) = cache.map.get(&chunk).ok_or_else(|| {
            std::io::Error::other("metadata chunk cache lost a chunk it had just read")
        })?;
        let from = start + within;
        let src = raw.get(from..from + BLOCK_SIZE).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "block beyond the device")
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl BlockStore for FileStore {
    type Read<'a> = Rc<[u8]>;
    type Write<'a> = Vec<u8>;

    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }

    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<Rc<[u8]>> {
        if b >= self.nr_blocks {
            return Err(CoreError::Corrupt(
                rthin_core::core_error::Corruption::BlockOutOfRange,
            ));
        }
        if b == 0 {
            if let Some(s) = &self.sb0 {
                verify(kind, b, s)?;
                return Ok(s.as_slice().into());
            }
        }
        let mut recent = self.verified.borrow_mut();
        if let Some((_, _, buf)) = recent.iter().find(|(x, k, _)| *x == b && *k == kind) {
            return Ok(buf.clone());
        }
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.read_raw(b, &mut buf)
            .map_err(|e| CoreError::Io(-e.raw_os_error().unwrap_or(5)))?;
        self.verifies.set(self.verifies.get() + 1);
        verify(kind, b, &buf)?;
        let buf: Rc<[u8]> = buf.into();
        if recent.len() >= VERIFIED_BLOCKS {
            recent.pop_front();
        }
        recent.push_back((b, kind, buf.clone()));
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

/// What to do about damaged metadata found by a reader (dump, ls).
const REPAIR_ADVICE: &str =
    "rthinctl meta check lists every problem; thin_repair writes a repaired copy to a new device";

/// Damaged metadata: what is wrong (`what`, in words), and what to do.
pub fn damaged(path: &str, what: String) -> Error {
    Error::new(
        exit::REFUSED,
        format!("{path}: metadata is damaged: {what}"),
    )
    .note(REPAIR_ADVICE)
}

/// A sentence for a core error met while reading metadata.
pub fn core_sentence(path: &str, e: CoreError) -> Error {
    match e {
        CoreError::Unformatted => Error::new(
            exit::REFUSED,
            format!("{path} holds no thin metadata (block 0 is all zero)"),
        ),
        CoreError::Corrupt(c) => damaged(path, c.to_string()),
        CoreError::Io(n) => Error::new(
            exit::OTHER,
            format!("{path}: read error (errno {})", n.unsigned_abs()),
        ),
        CoreError::NotFound => Error::new(
            exit::REFUSED,
            format!("{path}: no such thin device in the metadata"),
        ),
        other => Error::new(
            exit::REFUSED,
            format!("{path}: cannot read the metadata: {other}"),
        ),
    }
}

/// Opens metadata read-only.
#[cfg(test)]
pub fn open_md(path: &str) -> Result<ThinMetadata<FileStore>> {
    open_md_with(path, OpenMode::default())
}

/// Opens metadata read-only, through the held snapshot if asked.
pub fn open_md_with(path: &str, mode: OpenMode) -> Result<ThinMetadata<FileStore>> {
    let store = FileStore::open(path, mode)?;
    // The checker's reading of the superblock names what is wrong with it
    // (and refuses fields the core's reader takes as they are).
    rthin_core::metadata::checker::superblock(&store).map_err(|t| damaged(path, t))?;
    ThinMetadata::open_read_only(store, None).map_err(|e| core_sentence(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::dump::dump_xml;
    use crate::meta::ls::{devices, usage};
    use crate::meta::test_image::{
        image, image_bytes_with, image_with, patch_superblock, TempPath,
    };
    use rthin_core::metadata::superblock::off;

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
        let zero = TempPath::new(&vec![0u8; 64 * 4096]);
        assert!(open_md(&zero.0)
            .err()
            .unwrap()
            .text
            .contains("no thin metadata"));
        let short = TempPath::new(&[1, 2, 3]);
        assert!(open_md(&short.0).is_err());
        let rnd: Vec<u8> = (0..8 * 4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let junk = TempPath::new(&rnd);
        assert!(open_md(&junk.0).is_err());
        assert_eq!(
            open_md("/nonexistent/meta").err().unwrap().code,
            exit::NOT_FOUND
        );
    }

    /// Valid metadata is read whatever its superblock checksum (the first
    /// four bytes of the file) looks like: over many transaction ids, as a
    /// pool commits them, and over random checksums (random uuids).
    #[test]
    fn any_superblock_checksum_is_read() {
        let base = image_bytes_with(|_| {});
        let texty = |b: u8| b"<{#".contains(&b) || b.is_ascii_whitespace();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut text_like = 0;
        let p = TempPath::new(&base);
        for i in 0..3000u64 {
            let mut sb0 = base[..BLOCK_SIZE].to_vec();
            patch_superblock(&mut sb0, |sb| {
                if i < 1500 {
                    sb[off::TRANS_ID..off::TRANS_ID + 8].copy_from_slice(&i.to_le_bytes());
                } else {
                    let u = (random(), random());
                    sb[off::UUID..off::UUID + 8].copy_from_slice(&u.0.to_le_bytes());
                    sb[off::UUID + 8..off::UUID + 16].copy_from_slice(&u.1.to_le_bytes());
                }
            });
            if texty(sb0[0]) {
                text_like += 1;
            }
            // Only block 0 changes: rewrite it in place.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p.0)
                .and_then(|f| f.write_all_at(&sb0, 0))
                .unwrap();
            let md = open_md(&p.0);
            assert!(md.is_ok(), "case {i}: {:?}", md.err());
        }
        // Some checksums did look like text, or the test proves nothing.
        assert!(text_like > 10, "{text_like}");
    }

    #[test]
    fn what_is_not_metadata_is_named() {
        let dir = std::env::temp_dir();
        let d = dir.to_string_lossy().into_owned();
        let t = |p: &str| FileStore::open(p, OpenMode::default()).err().unwrap();
        assert!(t(&d).text.contains("is a directory"), "{}", t(&d));
        assert!(
            t("/dev/null").text.contains("character device"),
            "{}",
            t("/dev/null")
        );
        let xml = TempPath::new(b"<superblock uuid=\"\" time=\"0\">\n</superblock>\n");
        let e = t(&xml.0);
        assert!(
            e.text.contains("XML dump") && e.text.contains("thin_restore"),
            "{e}"
        );
        let mut txt = b"hello, this is a text file\n".repeat(400);
        txt.truncate(8192);
        let txt = TempPath::new(&txt);
        let e = t(&txt.0);
        assert!(
            e.text.contains("not thin-pool metadata") && e.text.contains("no superblock magic"),
            "{e}"
        );
        let empty = TempPath::new(b"");
        assert!(t(&empty.0).text.contains("is empty"));
        for e in [t(&d), t("/dev/null"), t(&xml.0), t(&txt.0)] {
            assert!(
                !e.text.contains("damaged") && !e.text.contains("thin_repair"),
                "{e}"
            );
        }
    }

    /// Reading the metadata whole (a dump) costs few system calls: blocks
    /// are read ahead in large chunks and kept, not read one pread at a
    /// time (35,757 preads for a 2,034-block image, issue 32), and every
    /// block read more than once comes from memory.
    #[test]
    fn reads_are_few_and_large() {
        let (_t, path) = image_with(|md| {
            // 900 data blocks, each mapped many times (as snapshots share).
            let blocks: Vec<u64> = (0..900).map(|_| md.alloc_data_block().unwrap()).collect();
            for v in 100..20_000u64 {
                let b = blocks[v as usize % 900];
                if v >= 1000 {
                    md.data_block_inc(b).unwrap();
                }
                md.insert_mapping(1, v, b).unwrap();
            }
        });
        let md = open_md(&path).unwrap();
        let mut x = Vec::new();
        if dump_xml(&md, &mut x).is_err() {
            panic!("dump failed");
        }
        let ls = usage(&md, &devices(&md).unwrap()).unwrap();
        assert_eq!(ls[0].mapped, 19_906);
        // The image's 1024 blocks in 64-block chunks: at most 16 reads.
        let n = md.store().preads();
        assert!(n <= 16, "{n} preads");
        // Each node's checksum is verified about once per walk (dump and
        // ls: twice), not once for every few entries the core's walk
        // copies out of it (it read a leaf again for every 8 entries).
        let nodes = (19_906 / 100 + 10) as u64;
        let v = md.store().verifies();
        assert!(v <= 3 * nodes, "{v} verifications for about {nodes} nodes");
    }
}
