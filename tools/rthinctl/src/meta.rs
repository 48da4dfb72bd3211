// SPDX-License-Identifier: GPL-2.0
//! Offline metadata: `meta ls|dump|check` on an inactive metadata device or
//! an image file, read through the same core crate the kernel module uses
//! (`rthin_core::metadata::thin_metadata::ThinMetadata` over a read-only block store).
//!
//! A block device is opened exclusively (`O_EXCL`) and with `O_DIRECT`, so
//! the metadata device of an active pool is refused (the kernel changes it
//! underneath; the same rule as for thin_check and thin_dump), unless the
//! reader goes through a held metadata snapshot (`-m`), whose blocks do not
//! change while it is held. `meta check --live POOL` does that for a
//! running pool: reserve a snapshot, check it, release it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};

use rthin_core::core_error::{CoreError, CoreResult};
use rthin_core::metadata::superblock::{FLAG_NEEDS_CHECK, MAGIC};
use rthin_core::metadata::thin_metadata::{DeviceDetails, Mapping, ThinMetadata};
use rthin_core::pdata::block_store::BlockStore;
use rthin_core::pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE};
use serde::Serialize;

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
    /// pread calls made (the tests count them).
    preads: std::cell::Cell<u64>,
    /// The chunks read lately (read-ahead and cache).
    chunks: std::cell::RefCell<ChunkCache>,
}

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
            chunks: Default::default(),
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
        let mut h = self.read(held, BlockKind::Superblock).map_err(|e| {
            damaged(
                path,
                format!("{e} in metadata snapshot superblock (block {held})"),
            )
        })?;
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
    type Read<'a> = Vec<u8>;
    type Write<'a> = Vec<u8>;

    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }

    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<Vec<u8>> {
        if b >= self.nr_blocks {
            return Err(CoreError::Corrupt(
                rthin_core::core_error::Corruption::BlockOutOfRange,
            ));
        }
        if b == 0 {
            if let Some(s) = &self.sb0 {
                verify(kind, b, s)?;
                return Ok(s.clone());
            }
        }
        let mut buf = vec![0u8; BLOCK_SIZE];
        self.read_raw(b, &mut buf)
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

/// What to do about damaged metadata found by a reader (dump, ls).
const REPAIR_ADVICE: &str =
    "rthinctl meta check lists every problem; thin_repair writes a repaired copy to a new device";

/// Damaged metadata: what is wrong (`what`, in words), and what to do.
fn damaged(path: &str, what: String) -> Error {
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

#[derive(Serialize)]
struct JDev {
    dev_id: u64,
    mapped_blocks: u64,
    mapped_bytes: u64,
    exclusive_blocks: u64,
    exclusive_bytes: u64,
    shared_blocks: u64,
    shared_bytes: u64,
    highest_mapped_block: Option<u64>,
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

/// thin_ls's figures of one device: mapped blocks, those mapped by no
/// other device (exclusive), the rest (shared), the highest mapped block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub mapped: u64,
    pub exclusive: u64,
    pub shared: u64,
    pub highest: Option<u64>,
}

/// Which data blocks are mapped once and which more than once: two bits
/// per data block (all thin_ls's exclusive and shared figures need),
/// where a map from block to count cost some 40 bytes per mapped block.
/// The bitsets grow to the highest block mapped; blocks past the data
/// device (damage; thin_check reports it) are counted in a map.
struct Sharing {
    nr_data_blocks: u64,
    once: Vec<u64>,
    twice: Vec<u64>,
    beyond: std::collections::HashMap<u64, u32>,
}

impl Sharing {
    fn new(nr_data_blocks: u64) -> Self {
        Self {
            nr_data_blocks,
            once: Vec::new(),
            twice: Vec::new(),
            beyond: Default::default(),
        }
    }

    fn add(&mut self, b: u64) {
        if b >= self.nr_data_blocks {
            *self.beyond.entry(b).or_default() += 1;
            return;
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if w >= self.once.len() {
            self.once.resize(w + 1, 0);
            self.twice.resize(w + 1, 0);
        }
        if self.once[w] & bit != 0 {
            self.twice[w] |= bit;
        }
        self.once[w] |= bit;
    }

    fn shared(&self, b: u64) -> bool {
        if b >= self.nr_data_blocks {
            return self.beyond.get(&b).is_some_and(|&n| n > 1);
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        self.twice.get(w).is_some_and(|x| x & bit != 0)
    }
}

/// Counts, over every device, which data blocks are mapped more than once,
/// then each device's exclusive and shared blocks (as thin_ls does). The
/// trees are walked once: the data blocks each device maps are kept (8
/// bytes a mapping, about a third of what thin_ls 1.x holds) for the
/// second count, which a second walk made twice as slow.
pub fn usage(
    md: &ThinMetadata<FileStore>,
    devs: &[(u64, DeviceDetails)],
) -> CoreResult<Vec<Usage>> {
    let mut refs = Sharing::new(md.committed_superblock().data_sm.nr_blocks);
    let mut mapped: Vec<u64> = Vec::new();
    // Per device: (its range in `mapped`, its highest mapped block).
    let mut spans = Vec::with_capacity(devs.len());
    for (d, _) in devs {
        let start = mapped.len();
        let mut highest = None;
        md.for_each_mapping(*d, &mut |v, m: Mapping| {
            refs.add(m.data_block);
            mapped.push(m.data_block);
            highest = Some(v);
            Ok(())
        })?;
        spans.push((start..mapped.len(), highest));
    }
    Ok(spans
        .into_iter()
        .map(|(range, highest)| {
            let blocks = &mapped[range];
            let shared = blocks.iter().filter(|&&b| refs.shared(b)).count() as u64;
            Usage {
                mapped: blocks.len() as u64,
                exclusive: blocks.len() as u64 - shared,
                shared,
                highest,
            }
        })
        .collect())
}

/// `meta ls`: the devices in the metadata, with thin_ls's columns.
pub fn ls(path: &str, mode: OpenMode, json: bool, style: &crate::report::Style) -> Result<i32> {
    let md = open_md_with(path, mode)?;
    let devs = devices(&md).map_err(|e| core_sentence(path, e))?;
    let us = usage(&md, &devs).map_err(|e| core_sentence(path, e))?;
    let bs = u64::from(md.data_block_size()) * 512;
    if json {
        #[derive(Serialize)]
        struct J {
            schema: &'static str,
            metadata_snapshot: bool,
            transaction_id: u64,
            time: u32,
            data_block_size_bytes: u64,
            needs_check: bool,
            held_metadata_root: Option<u64>,
            devices: Vec<JDev>,
        }
        let j = J {
            schema: "rthinctl.meta-ls/1",
            metadata_snapshot: mode.snap,
            transaction_id: md.transaction_id(),
            time: md.time(),
            data_block_size_bytes: bs,
            needs_check: md.needs_check(),
            held_metadata_root: Some(md.held_root()).filter(|&h| h != 0),
            devices: devs
                .iter()
                .zip(&us)
                .map(|((d, x), u)| JDev {
                    dev_id: *d,
                    mapped_blocks: x.mapped_blocks,
                    mapped_bytes: x.mapped_blocks.saturating_mul(bs),
                    exclusive_blocks: u.exclusive,
                    exclusive_bytes: u.exclusive.saturating_mul(bs),
                    shared_blocks: u.shared,
                    shared_bytes: u.shared.saturating_mul(bs),
                    highest_mapped_block: u.highest,
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
        ("EXCLUSIVE", true),
        ("SHARED", true),
        ("MAPPED_BLOCKS", true),
        ("HIGHEST", true),
        ("TXN", true),
        ("CTIME", true),
        ("STIME", true),
    ]);
    let sz = |b: u64| style.units.format(b.saturating_mul(bs), style.suffix);
    for ((d, x), u) in devs.iter().zip(&us) {
        t.push(vec![
            d.to_string(),
            sz(x.mapped_blocks),
            sz(u.exclusive),
            sz(u.shared),
            x.mapped_blocks.to_string(),
            u.highest.map_or("-".into(), |h| h.to_string()),
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

/// A failure of the XML writer: the output (a closed pipe is reported by
/// the caller) or the metadata.
pub enum DumpError {
    Io(std::io::Error),
    Core(CoreError),
}

/// Writes thin_dump's XML for the metadata, a device at a time, to `out`
/// (nothing is built in memory). Runs of consecutive virtual and data
/// blocks with the same time become one `range_mapping`.
pub fn dump_xml(
    md: &ThinMetadata<FileStore>,
    out: &mut dyn Write,
) -> std::result::Result<(), DumpError> {
    let sb = md.committed_superblock();
    let io = DumpError::Io;
    write!(
        out,
        "<superblock uuid=\"{}\" time=\"{}\" transaction=\"{}\"",
        uuid_text(&sb.uuid),
        sb.time,
        sb.trans_id
    )
    .map_err(io)?;
    if sb.flags != 0 {
        write!(out, " flags=\"{}\"", sb.flags).map_err(io)?;
    }
    writeln!(
        out,
        " version=\"{}\" data_block_size=\"{}\" nr_data_blocks=\"{}\">",
        sb.version, sb.data_block_size, sb.data_sm.nr_blocks
    )
    .map_err(io)?;
    for (d, x) in devices(md).map_err(DumpError::Core)? {
        writeln!(
            out,
            "  <device dev_id=\"{d}\" mapped_blocks=\"{}\" transaction=\"{}\" creation_time=\"{}\" snap_time=\"{}\">",
            x.mapped_blocks, x.transaction_id, x.creation_time, x.snapshotted_time
        )
        .map_err(io)?;
        // (origin_begin, data_begin, length, time)
        let mut run: Option<(u64, u64, u64, u32)> = None;
        let mut werr: Option<std::io::Error> = None;
        let flush = |out: &mut dyn Write, r: (u64, u64, u64, u32)| {
            if r.2 == 1 {
                writeln!(
                    out,
                    "    <single_mapping origin_block=\"{}\" data_block=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.3
                )
            } else {
                writeln!(
                    out,
                    "    <range_mapping origin_begin=\"{}\" data_begin=\"{}\" length=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.2, r.3
                )
            }
        };
        let walked = md.for_each_mapping(d, &mut |v, m: Mapping| {
            match run {
                Some((o, db, len, t))
                    if t == m.time
                        && o.checked_add(len) == Some(v)
                        && db.checked_add(len) == Some(m.data_block) =>
                {
                    run = Some((o, db, len + 1, t));
                }
                Some(r) => {
                    if let Err(e) = flush(out, r) {
                        werr = Some(e);
                        // Stop the walk: the reader is gone.
                        return Err(CoreError::Io(-32));
                    }
                    run = Some((v, m.data_block, 1, m.time));
                }
                None => run = Some((v, m.data_block, 1, m.time)),
            }
            Ok(())
        });
        if let Some(e) = werr {
            return Err(DumpError::Io(e));
        }
        walked.map_err(DumpError::Core)?;
        if let Some(r) = run {
            flush(out, r).map_err(io)?;
        }
        writeln!(out, "  </device>").map_err(io)?;
    }
    writeln!(out, "</superblock>").map_err(io)?;
    Ok(())
}

/// `meta dump`: streamed to stdout.
pub fn dump(path: &str, mode: OpenMode) -> Result<i32> {
    let md = open_md_with(path, mode)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let r = dump_xml(&md, &mut out).and_then(|_| out.flush().map_err(DumpError::Io));
    match r {
        Ok(()) => Ok(exit::OK),
        Err(DumpError::Io(e)) => Err(crate::explain::io_error(e)),
        Err(DumpError::Core(e)) => Err(core_sentence(path, e)),
    }
}

/// `n` things, in good English: "1 problem", "3 problems".
fn count(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// Problems listed in full; past this they are counted.
const MAX_SHOWN: usize = 100;

/// What `meta check` found, as printed and as JSON.
#[derive(Serialize, Debug)]
pub struct CheckReport {
    pub schema: &'static str,
    pub path: String,
    /// ok | leaked | damaged
    pub verdict: &'static str,
    pub exit: i32,
    pub live: bool,
    pub transaction_id: Option<u64>,
    pub devices: usize,
    pub mappings: u64,
    pub data_blocks_in_use: u64,
    pub metadata_blocks_in_use: u64,
    pub needs_check: bool,
    pub damage: Vec<String>,
    pub leaked_data_blocks: Vec<u64>,
    pub leaked_metadata_blocks: Vec<u64>,
    pub warnings: Vec<String>,
}

fn leak_lines(r: &CheckReport) -> Vec<String> {
    let mut v = Vec::new();
    for (what, blocks) in [
        ("data", &r.leaked_data_blocks),
        ("metadata", &r.leaked_metadata_blocks),
    ] {
        if blocks.is_empty() {
            continue;
        }
        let shown: Vec<String> = blocks.iter().take(10).map(u64::to_string).collect();
        v.push(format!(
            "{} {} leaked (counted in use, referenced by nothing): {}{}",
            count(blocks.len(), &format!("{what} block")),
            if blocks.len() == 1 { "has" } else { "have" },
            shown.join(" "),
            if blocks.len() > 10 { " ..." } else { "" }
        ));
    }
    v
}

/// Runs the core's checker over `store` and judges as thin_check does.
pub fn judge(path: &str, store: &FileStore, live: bool, ignore_leaks: bool) -> CheckReport {
    let rep = if live {
        rthin_core::metadata::checker::examine_held(store)
    } else {
        rthin_core::metadata::checker::examine(store)
    };
    let sb = store
        .read(0, BlockKind::Superblock)
        .ok()
        .and_then(|g| rthin_core::metadata::superblock::Superblock::decode(&g).ok());
    let leaked = !rep.data_leaks.is_empty() || !rep.meta_leaks.is_empty();
    let (verdict, code) = if !rep.errors.is_empty() {
        ("damaged", exit::REFUSED)
    } else if leaked && !ignore_leaks {
        ("leaked", exit::REFUSED)
    } else {
        ("ok", exit::OK)
    };
    CheckReport {
        schema: "rthinctl.meta-check/1",
        path: path.to_string(),
        verdict,
        exit: code,
        live,
        transaction_id: sb.map(|s| s.trans_id),
        devices: rep.devices,
        mappings: rep.mappings,
        data_blocks_in_use: rep.data_allocated,
        metadata_blocks_in_use: rep.meta_allocated,
        needs_check: sb.is_some_and(|s| s.flags & FLAG_NEEDS_CHECK != 0),
        damage: rep.errors,
        leaked_data_blocks: rep.data_leaks,
        leaked_metadata_blocks: rep.meta_leaks,
        warnings: rep.warnings,
    }
}

/// Prints a check report (text or JSON) and gives the exit status.
pub fn report_check(r: &CheckReport, quiet: bool, json: bool) -> Result<i32> {
    if json {
        let s = serde_json::to_string_pretty(r)
            .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
        println!("{s}");
        return Ok(r.exit);
    }
    let path = &r.path;
    // -q: nothing at all when the check passes (cron mails what it prints).
    if !quiet {
        for w in &r.warnings {
            eprintln!("rthinctl: warning: {path}: {w}");
        }
    }
    let leaks = leak_lines(r);
    let cut = |v: &[String]| -> Vec<String> {
        let mut o: Vec<String> = v.iter().take(MAX_SHOWN).cloned().collect();
        if v.len() > MAX_SHOWN {
            o.push(format!("... and {} more problems", v.len() - MAX_SHOWN));
        }
        o
    };
    if r.verdict == "damaged" {
        let mut notes = cut(&r.damage);
        notes.extend(leaks);
        return Err(Error {
            text: format!(
                "{path}: metadata is damaged ({}); {}",
                count(r.damage.len(), "problem"),
                if r.live {
                    "take the pool down, check its metadata with rthinctl meta check, then thin_repair it to a new device"
                } else {
                    "thin_repair writes a repaired copy to a new device"
                }
            ),
            code: exit::REFUSED,
            notes,
        });
    }
    if r.verdict == "leaked" {
        return Err(Error {
            text: format!(
                "{path}: space is leaked, no data is at risk; thin_check --auto-repair (or thin_repair) reclaims it, --ignore-non-fatal-errors accepts it"
            ),
            code: exit::REFUSED,
            notes: leaks,
        });
    }
    if !quiet {
        for l in &leaks {
            eprintln!("rthinctl: warning: {path}: {l}");
        }
        if r.live {
            println!(
                "{path}: metadata snapshot ok: {}, transaction {}; {}, every mapped block counted in use by the data space map",
                count(r.devices, "device"),
                r.transaction_id.unwrap_or(0),
                count(r.mappings as usize, "mapping")
            );
        } else {
            println!(
                "{path}: metadata ok: {}, transaction {}; {}, {} data and {} metadata blocks in use, reference counts agree{}{}",
                count(r.devices, "device"),
                r.transaction_id.unwrap_or(0),
                count(r.mappings as usize, "mapping"),
                r.data_blocks_in_use,
                r.metadata_blocks_in_use,
                if leaks.is_empty() {
                    ""
                } else {
                    " apart from the leaks"
                },
                if r.needs_check {
                    " (needs_check is set: --clear-needs-check-flag clears it)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(exit::OK)
}

/// `meta check`: the core's checker (`rthin_core::metadata::checker`, the one the
/// core's property and crash tests use) walks the superblock, the details
/// tree, every mapping tree, the held snapshot's trees and both space maps
/// (every node read through the core's validators), recounts the references
/// to every data and metadata block and compares them with the space maps.
/// As in thin_check: a leak (a block the space map counts once that nothing
/// references) fails the check unless `ignore_leaks` (thin_check's
/// --ignore-non-fatal-errors); every other finding is damage and always
/// fails it. Search hints that disagree are warnings.
#[cfg(test)]
pub fn check(path: &str, quiet: bool, ignore_leaks: bool) -> Result<i32> {
    check_with(
        path,
        &CheckOptions {
            quiet,
            ignore_leaks,
            ..CheckOptions::default()
        },
    )
}

/// What `meta check PATH` is asked to do (thin_check's options).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// -q: print nothing when the check passes.
    pub quiet: bool,
    /// --ignore-non-fatal-errors: leaks pass.
    pub ignore_leaks: bool,
    /// --json.
    pub json: bool,
    /// --clear-needs-check-flag: clear needs_check when the check passes.
    pub clear_needs_check: bool,
    /// --super-block-only.
    pub super_block_only: bool,
    /// -m: the held metadata snapshot's trees only.
    pub snapshot: bool,
}

/// [`check`], with thin_check's options.
pub fn check_with(path: &str, o: &CheckOptions) -> Result<i32> {
    let mode = OpenMode {
        snap: false,
        shared: o.snapshot,
    };
    let store = FileStore::open(path, mode)?;
    if o.super_block_only {
        let sb = rthin_core::metadata::checker::superblock(&store)
            .map_err(|t| Error::new(exit::REFUSED, format!("{path}: metadata is damaged: {t}")))?;
        let needs_check = sb.flags & FLAG_NEEDS_CHECK != 0;
        if o.json {
            let j = serde_json::json!({
                "schema": "rthinctl.meta-check-superblock/1",
                "path": path,
                "verdict": "ok",
                "transaction_id": sb.trans_id,
                "needs_check": needs_check,
            });
            println!("{j:#}");
        } else if !o.quiet {
            println!(
                "{path}: superblock ok: transaction {}, {} metadata blocks{}",
                sb.trans_id,
                sb.meta_sm.nr_blocks,
                if needs_check { ", needs_check set" } else { "" }
            );
        }
        return Ok(exit::OK);
    }
    let r = judge(path, &store, o.snapshot, o.ignore_leaks);
    // The exclusive (read-only) open ends before the one that writes.
    drop(store);
    let code = report_check(&r, o.quiet, o.json)?;
    if o.clear_needs_check && r.needs_check {
        clear_needs_check(path)?;
        if !o.quiet && !o.json {
            println!("{path}: needs_check cleared");
        }
    }
    Ok(code)
}

/// Clears the needs_check flag in the superblock of `path` (checked just
/// before, by the caller) and reseals it, as thin_check
/// --clear-needs-check-flag does. A block device is opened exclusively.
fn clear_needs_check(path: &str) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            exit::OTHER,
            format!("{path}: cannot clear needs_check: {what}: {e}"),
        )
    };
    let block = std::fs::metadata(path)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false);
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if block {
        o.custom_flags(nix::libc::O_EXCL);
    }
    let f = o.open(path).map_err(|e| fail("open", e))?;
    let mut sb = vec![0u8; BLOCK_SIZE];
    f.read_exact_at(&mut sb, 0).map_err(|e| fail("read", e))?;
    verify(BlockKind::Superblock, 0, &sb)
        .map_err(|e| damaged(path, format!("{e} in superblock (block 0)")))?;
    let at = rthin_core::metadata::superblock::off::FLAGS;
    let flags = u32::from_le_bytes(sb[at..at + 4].try_into().unwrap_or([0; 4]));
    sb[at..at + 4].copy_from_slice(&(flags & !FLAG_NEEDS_CHECK).to_le_bytes());
    seal(BlockKind::Superblock, 0, &mut sb).map_err(|e| {
        Error::new(
            exit::OTHER,
            format!("{path}: cannot seal the superblock: {e}"),
        )
    })?;
    f.write_all_at(&sb, 0).map_err(|e| fail("write", e))?;
    f.sync_all().map_err(|e| fail("sync", e))
}

#[cfg(test)]
#[path = "../tests/common/image.rs"]
#[allow(dead_code)]
mod test_image;

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_image::{
        image, image_bytes_with, image_with, patch_nodes, patch_superblock, thin_restore_090_hints,
        TempPath,
    };
    use rthin_core::metadata::superblock::off;

    #[test]
    fn dump_matches_what_was_written() {
        let (_tmp, path) = image();
        let md = open_md(&path).unwrap();
        let mut x = Vec::new();
        if dump_xml(&md, &mut x).is_err() {
            panic!("dump failed");
        }
        let x = String::from_utf8(x).unwrap();
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
    }

    #[test]
    fn exclusive_and_shared_as_thin_ls() {
        // Thin 2 is a snapshot of thin 1 with its block 0 rewritten.
        let (_t, path) = image();
        let md = open_md(&path).unwrap();
        let u = usage(&md, &devices(&md).unwrap()).unwrap();
        let figs: Vec<(u64, u64, u64, Option<u64>)> = u
            .iter()
            .map(|u| (u.mapped, u.exclusive, u.shared, u.highest))
            .collect();
        assert_eq!(figs, [(6, 1, 5, Some(9)), (6, 1, 5, Some(9))]);
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
            ["1 data block has leaked (counted in use, referenced by nothing): 7"]
        );
        assert_eq!(check(&path, true, true), Ok(exit::OK));

        // A mapped block counted once too often: damage, whatever the option.
        let (_t, path) = image_with(|md| md.data_block_inc(5).unwrap());
        for ignore in [false, true] {
            let e = check(&path, true, ignore).unwrap_err();
            assert_eq!(e.code, exit::REFUSED);
            assert!(e.text.contains("damaged"), "{}", e.text);
            assert_eq!(
                e.notes,
                ["data block 5 (thin device 1, block 9): space map says 3, references 2"]
            );
        }

        // A mapping whose block the space map calls free.
        let (_t, path) = image_with(|md| md.data_block_dec(6).unwrap());
        let e = check(&path, true, true).unwrap_err();
        assert_eq!(
            e.notes,
            ["data block 6 (thin device 2, block 0): free in space map but referenced 1 time"]
        );
    }

    #[test]
    fn search_hints_are_warnings() {
        // thin_restore 0.9.0 counts nr_free over the valid entries of the
        // last bitmap only (1000 blocks, 7 in use: 993, not 16313), and
        // can leave none_free_before past a free entry: both are hints.
        let (_t, path) = image();
        thin_restore_090_hints(&path);
        let store = FileStore::open(&path, OpenMode::default()).unwrap();
        let r = judge(&path, &store, false, false);
        assert_eq!(r.verdict, "ok", "{r:?}");
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(
            r.warnings[0].contains("entry 7 is free, below none_free_before 9"),
            "{r:?}"
        );
        assert_eq!(check(&path, true, false), Ok(exit::OK));
        // Neither convention: still only a warning.
        patch_nodes(
            &path,
            |blk| {
                let Some(h) = rthin_core::pdata::btree::node::check(blk, 16)
                    .ok()
                    .filter(|h| h.leaf && h.value_size == 16)
                else {
                    return false;
                };
                let v = h.val_off(0);
                blk[v + 8..v + 12].copy_from_slice(&5u32.to_le_bytes());
                true
            },
            true,
        );
        let r = judge(
            &path,
            &FileStore::open(&path, OpenMode::default()).unwrap(),
            false,
            false,
        );
        assert_eq!(r.verdict, "ok", "{r:?}");
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("index says 5 free, the bitmap has 993")),
            "{r:?}"
        );
    }

    #[test]
    fn every_damaged_tree_is_named() {
        // Break the mapping leaves of both devices (each maps block 9):
        // both are reported, by device, and the walk goes on.
        let (_t, path) = image();
        let mut n = 0;
        patch_nodes(
            &path,
            |blk| {
                let Some(h) = rthin_core::pdata::btree::node::check(blk, 8)
                    .ok()
                    .filter(|h| h.leaf)
                else {
                    return false;
                };
                let has9 = (0..h.nr_entries)
                    .any(|i| rthin_core::pdata::btree::node::key(blk, &h, i) == Ok(9));
                if has9 {
                    blk[200] ^= 0xff;
                    n += 1;
                }
                has9
            },
            false,
        );
        assert_eq!(n, 2);
        let e = check(&path, true, true).unwrap_err();
        assert!(e.text.contains("damaged (3 problems)"), "{e}");
        assert!(
            e.notes[0].starts_with("thin device 1, blocks all: bad checksum in btree node (block "),
            "{:?}",
            e.notes
        );
        assert!(
            e.notes[1].starts_with("thin device 2, blocks all: bad checksum in btree node (block "),
            "{:?}",
            e.notes
        );
        assert!(e.notes[2].contains("not compared"), "{:?}", e.notes);
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
}
