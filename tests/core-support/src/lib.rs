// SPDX-License-Identifier: GPL-2.0
//! Host-side test support for `rthin-core` (never mounted in the kernel):
//! block stores over memory and files with dm-bufio-like caching, crash/tear
//! injection and random early write-back; a deterministic PRNG. The core's
//! tests and examples use it as a dev-dependency; its binaries are the
//! oracle driver (`scripts/core-oracle.sh`) and the damaged-image generator
//! (`tests/vm/81-corrupt-metadata.sh`). (The metadata checker that recomputes
//! every reference count is the core's `rthin_core::metadata::checker`.)
#![allow(missing_docs, clippy::too_many_arguments, clippy::type_complexity)]

use rthin_core::core_error::{CoreError, CoreResult};
use rthin_core::pdata::block_store::BlockStore;
use rthin_core::pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

/// xorshift64* PRNG with a fixed seed.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

pub type Block = [u8; BLOCK_SIZE];

/// A fast hasher for block numbers (the default SipHash dominates profiles).
#[derive(Default, Clone, Copy)]
pub struct BlockHasher(u64);

impl std::hash::Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type BlockMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<BlockHasher>>;

/// The "media" below the cache.
pub trait Media {
    fn nr_blocks(&self) -> u64;
    fn read_block(&self, b: u64, out: &mut Block) -> CoreResult<()>;
    fn write_block(&mut self, b: u64, data: &Block) -> CoreResult<()>;
    fn sync(&mut self) -> CoreResult<()>;
}

/// What happens to writes once the crash point is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every write from the crash point on is lost.
    Drop,
    /// The write at the crash point is torn (a prefix of its 512-byte sectors
    /// reaches the media), every later write is lost.
    Tear,
}

/// Sparse in-memory media (missing blocks read as zeroes) with crash injection.
pub struct MemMedia {
    pub blocks: BlockMap<Box<Block>>,
    pub nr_blocks: u64,
    /// Media writes still allowed before the crash point (None = never crash).
    pub budget: Option<u64>,
    pub mode: CrashMode,
    pub writes: u64,
    pub tear_sectors: usize,
    /// If set, every media write is also appended here.
    pub log: Option<Vec<(u64, Box<Block>)>>,
}

impl MemMedia {
    pub fn new(nr_blocks: u64) -> Self {
        MemMedia {
            blocks: BlockMap::default(),
            nr_blocks,
            budget: None,
            mode: CrashMode::Drop,
            writes: 0,
            tear_sectors: 3,
            log: None,
        }
    }

    pub fn from_image(img: &[u8]) -> Self {
        let mut m = MemMedia::new((img.len() / BLOCK_SIZE) as u64);
        for (i, c) in img.chunks_exact(BLOCK_SIZE).enumerate() {
            if c.iter().any(|&x| x != 0) {
                let mut b = Box::new([0u8; BLOCK_SIZE]);
                b.copy_from_slice(c);
                m.blocks.insert(i as u64, b);
            }
        }
        m
    }

    pub fn image(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.nr_blocks as usize * BLOCK_SIZE];
        for (b, d) in &self.blocks {
            let o = *b as usize * BLOCK_SIZE;
            v[o..o + BLOCK_SIZE].copy_from_slice(&d[..]);
        }
        v
    }

    /// A deep copy of the media contents (without crash settings).
    pub fn snapshot(&self) -> MemMedia {
        let mut m = MemMedia::new(self.nr_blocks);
        m.blocks = self.blocks.clone();
        m
    }
}

impl Media for MemMedia {
    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }
    fn read_block(&self, b: u64, out: &mut Block) -> CoreResult<()> {
        match self.blocks.get(&b) {
            Some(d) => out.copy_from_slice(&d[..]),
            None => out.fill(0),
        }
        Ok(())
    }
    fn write_block(&mut self, b: u64, data: &Block) -> CoreResult<()> {
        self.writes += 1;
        if let Some(l) = self.log.as_mut() {
            l.push((b, Box::new(*data)));
        }
        match self.budget {
            Some(0) => return Ok(()),
            Some(n) => {
                self.budget = Some(n - 1);
                if n == 1 && self.mode == CrashMode::Tear {
                    let e = self
                        .blocks
                        .entry(b)
                        .or_insert_with(|| Box::new([0u8; BLOCK_SIZE]));
                    let cut = self.tear_sectors.min(7) * 512;
                    e[..cut].copy_from_slice(&data[..cut]);
                    return Ok(());
                }
            }
            None => {}
        }
        self.blocks.insert(b, Box::new(*data));
        Ok(())
    }
    fn sync(&mut self) -> CoreResult<()> {
        Ok(())
    }
}

/// A read-only view of a [`MemMedia`], optionally with one block replaced
/// (e.g. by a torn write).
pub struct RoMedia<'a> {
    pub base: &'a MemMedia,
    pub overlay: Option<(u64, Box<Block>)>,
}

impl Media for RoMedia<'_> {
    fn nr_blocks(&self) -> u64 {
        self.base.nr_blocks
    }
    fn read_block(&self, b: u64, out: &mut Block) -> CoreResult<()> {
        match &self.overlay {
            Some((ob, d)) if *ob == b => {
                out.copy_from_slice(&d[..]);
                Ok(())
            }
            _ => self.base.read_block(b, out),
        }
    }
    fn write_block(&mut self, _b: u64, _data: &Block) -> CoreResult<()> {
        Err(CoreError::Io(-30))
    }
    fn sync(&mut self) -> CoreResult<()> {
        Ok(())
    }
}

/// A file as media.
pub struct FileMedia {
    file: File,
    nr_blocks: u64,
}

impl FileMedia {
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let nr_blocks = file.metadata()?.len() / BLOCK_SIZE as u64;
        Ok(FileMedia { file, nr_blocks })
    }
    pub fn create(path: &std::path::Path, nr_blocks: u64) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(nr_blocks * BLOCK_SIZE as u64)?;
        Ok(FileMedia { file, nr_blocks })
    }
}

impl Media for FileMedia {
    fn nr_blocks(&self) -> u64 {
        self.nr_blocks
    }
    fn read_block(&self, b: u64, out: &mut Block) -> CoreResult<()> {
        self.file
            .read_exact_at(out, b * BLOCK_SIZE as u64)
            .map_err(|_| CoreError::Io(-5))
    }
    fn write_block(&mut self, b: u64, data: &Block) -> CoreResult<()> {
        self.file
            .write_all_at(data, b * BLOCK_SIZE as u64)
            .map_err(|_| CoreError::Io(-5))
    }
    fn sync(&mut self) -> CoreResult<()> {
        self.file.sync_data().map_err(|_| CoreError::Io(-5))
    }
}

struct Entry {
    data: Rc<Block>,
    kind: BlockKind,
    dirty: bool,
}

/// Read guard of [`HostStore`].
pub struct HostRead(Rc<Block>);

impl Deref for HostRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[..]
    }
}

/// A dm-bufio-like cache over some media.
pub struct HostStore<M: Media> {
    pub media: M,
    cache: RefCell<BlockMap<Entry>>,
    /// If set, every write access may write back a random dirty block early.
    pub evict: Option<Rng>,
    pub flushes: u64,
    /// Read and write accesses so far (each would be a dm-bufio call in
    /// the kernel: what the core's cost is mostly made of there).
    pub reads: std::cell::Cell<u64>,
    pub writes: std::cell::Cell<u64>,
}

impl<M: Media> HostStore<M> {
    pub fn new(media: M) -> Self {
        HostStore {
            media,
            cache: RefCell::new(BlockMap::default()),
            evict: None,
            flushes: 0,
            reads: Default::default(),
            writes: Default::default(),
        }
    }

    /// Drops every cached buffer (dirty ones are lost, as after a crash).
    pub fn drop_cache(&mut self) {
        self.cache.get_mut().clear();
    }

    pub fn dirty_count(&self) -> usize {
        self.cache.borrow().values().filter(|e| e.dirty).count()
    }

    fn load(&self, b: u64, kind: BlockKind) -> CoreResult<Rc<Block>> {
        if b >= self.media.nr_blocks() {
            return Err(CoreError::Io(-5));
        }
        if let Some(e) = self.cache.borrow_mut().get_mut(&b) {
            if e.kind != kind && kind != BlockKind::Raw {
                // A buffer requested with another validator: check it again.
                verify(kind, b, &e.data[..])?;
                e.kind = kind;
            }
            return Ok(e.data.clone());
        }
        let mut buf = Box::new([0u8; BLOCK_SIZE]);
        self.media.read_block(b, &mut buf)?;
        verify(kind, b, &buf[..])?;
        let data: Rc<Block> = Rc::from(buf);
        self.cache.borrow_mut().insert(
            b,
            Entry {
                data: data.clone(),
                kind,
                dirty: false,
            },
        );
        Ok(data)
    }

    fn write_back(&mut self, b: u64) -> CoreResult<()> {
        let cache = self.cache.get_mut();
        if let Some(e) = cache.get_mut(&b) {
            if e.dirty {
                let d = Rc::make_mut(&mut e.data);
                seal(e.kind, b, &mut d[..])?;
                e.dirty = false;
                let copy = *d;
                self.media.write_block(b, &copy)?;
            }
        }
        Ok(())
    }

    fn maybe_evict(&mut self) -> CoreResult<()> {
        let pick = match self.evict.as_mut() {
            Some(r) => {
                if !r.chance(4) {
                    return Ok(());
                }
                r.next_u64()
            }
            None => return Ok(()),
        };
        let mut dirty: Vec<u64> = self
            .cache
            .get_mut()
            .iter()
            .filter(|(b, e)| e.dirty && **b != 0)
            .map(|(b, _)| *b)
            .collect();
        if dirty.is_empty() {
            return Ok(());
        }
        dirty.sort_unstable();
        let b = dirty[(pick % dirty.len() as u64) as usize];
        self.write_back(b)
    }

    fn entry_mut(&mut self, b: u64) -> CoreResult<&mut [u8]> {
        let e = self
            .cache
            .get_mut()
            .get_mut(&b)
            .ok_or(CoreError::Internal)?;
        Ok(&mut Rc::make_mut(&mut e.data)[..])
    }
}

impl<M: Media> BlockStore for HostStore<M> {
    type Read<'a>
        = HostRead
    where
        Self: 'a;
    type Write<'a>
        = &'a mut [u8]
    where
        Self: 'a;

    fn nr_blocks(&self) -> u64 {
        self.media.nr_blocks()
    }

    fn read(&self, b: u64, kind: BlockKind) -> CoreResult<HostRead> {
        self.reads.set(self.reads.get() + 1);
        self.load(b, kind).map(HostRead)
    }

    fn write(&mut self, b: u64, kind: BlockKind) -> CoreResult<&mut [u8]> {
        self.writes.set(self.writes.get() + 1);
        self.maybe_evict()?;
        self.load(b, kind)?;
        {
            let c = self.cache.get_mut();
            let e = c.get_mut(&b).ok_or(CoreError::Internal)?;
            e.dirty = true;
            e.kind = kind;
        }
        self.entry_mut(b)
    }

    fn zeroed(&mut self, b: u64, kind: BlockKind) -> CoreResult<&mut [u8]> {
        self.writes.set(self.writes.get() + 1);
        self.maybe_evict()?;
        if b >= self.media.nr_blocks() {
            return Err(CoreError::Io(-5));
        }
        self.cache.get_mut().insert(
            b,
            Entry {
                data: Rc::new([0u8; BLOCK_SIZE]),
                kind,
                dirty: true,
            },
        );
        self.entry_mut(b)
    }

    fn copy(&mut self, from: u64, to: u64, kind: BlockKind) -> CoreResult<()> {
        self.reads.set(self.reads.get() + 1);
        self.writes.set(self.writes.get() + 1);
        self.maybe_evict()?;
        if to >= self.media.nr_blocks() {
            return Err(CoreError::Io(-5));
        }
        let src = self.load(from, kind)?;
        self.cache.get_mut().insert(
            to,
            Entry {
                data: Rc::new(*src),
                kind,
                dirty: true,
            },
        );
        Ok(())
    }

    fn flush(&mut self) -> CoreResult<()> {
        let mut dirty: Vec<u64> = self
            .cache
            .get_mut()
            .iter()
            .filter(|(_, e)| e.dirty)
            .map(|(b, _)| *b)
            .collect();
        dirty.sort_unstable();
        for b in dirty {
            self.write_back(b)?;
        }
        self.flushes += 1;
        self.media.sync()
    }
}

pub type MemStore = HostStore<MemMedia>;
pub type FileStore = HostStore<FileMedia>;

pub fn mem_store(nr_blocks: u64) -> MemStore {
    HostStore::new(MemMedia::new(nr_blocks))
}

/// Devices with their details and mappings (vblock -> (data block, time)).
pub type Devs = BTreeMap<
    u64,
    (
        rthin_core::metadata::thin_metadata::DeviceDetails,
        BTreeMap<u64, (u64, u32)>,
    ),
>;

/// Collects ordered BTreeMaps from the metadata (helper for comparisons).
pub fn dump(
    md: &rthin_core::metadata::thin_metadata::ThinMetadata<impl BlockStore>,
) -> BTreeMap<
    u64,
    (
        rthin_core::metadata::thin_metadata::DeviceDetails,
        BTreeMap<u64, (u64, u32)>,
    ),
> {
    let mut devs = Vec::new();
    md.for_each_device(&mut |d, det| {
        devs.push((d, det));
        Ok(())
    })
    .unwrap();
    let mut out = BTreeMap::new();
    for (d, det) in devs {
        let mut m = BTreeMap::new();
        md.for_each_mapping(d, &mut |k, v| {
            m.insert(k, (v.data_block, v.time));
            Ok(())
        })
        .unwrap();
        out.insert(d, (det, m));
    }
    out
}

/// The checksummed kind block `b` verifies as (`None`: none, so it is not
/// an in-use metadata block).
pub fn sealed_kind(data: &[u8], b: u64) -> Option<BlockKind> {
    [
        BlockKind::Superblock,
        BlockKind::Node,
        BlockKind::Index,
        BlockKind::Bitmap,
    ]
    .into_iter()
    .find(|k| verify(*k, b, data).is_ok())
}

/// The shape of a metadata image with every structure that corruption tests
/// need to meet: snapshots sharing subtrees (metadata reference counts > 1),
/// sharing broken in one leaf by every device (data counts of 5: overflow
/// entries in the reference-count tree), a thin of scattered mappings, a held
/// metadata snapshot, a deleted device and changes after the reserve.
pub struct SharedImage {
    pub meta_blocks: u64,
    pub data_blocks: u64,
    /// Thin 0's first blocks, mapped before the four snapshots 1-4 of it.
    pub origin_blocks: u64,
    /// Each of devices 0-4 remaps this many random blocks of
    /// `break_from..break_from + break_span` (one leaf or two).
    pub breaks_per_device: u64,
    pub break_from: u64,
    pub break_span: u64,
    /// Thin 7's random mappings, over `0..scatter_span`.
    pub scatter_mappings: u64,
    pub scatter_span: u64,
    pub seed: u64,
}

impl SharedImage {
    /// Thin ids the image holds: snapshot 2 is deleted.
    pub const THINS: [u64; 5] = [0, 1, 3, 4, 7];
    /// The data block size the image is formatted with, in sectors.
    pub const BLOCK_SECTORS: u32 = 128;

    /// Builds the image and returns its media. After
    /// the reserve, snapshot 2 is deleted, thin 3 remaps its first 10 blocks
    /// and thin 0's transaction id becomes 9.
    pub fn build(&self) -> MemMedia {
        use rthin_core::metadata::thin_metadata::ThinMetadata;
        let store = HostStore::new(MemMedia::new(self.meta_blocks));
        let mut md = ThinMetadata::format(store, Self::BLOCK_SECTORS, self.data_blocks).unwrap();
        let mut rng = Rng::new(self.seed);
        let map = |md: &mut ThinMetadata<_>, dev: u64, v: u64| {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(dev, v, b).unwrap();
        };
        md.create_thin(0).unwrap();
        for v in 0..self.origin_blocks {
            map(&mut md, 0, v);
        }
        md.commit().unwrap();
        for s in 1..=4 {
            md.create_snap(s, 0).unwrap();
        }
        md.commit().unwrap();
        for d in 0..=4 {
            for _ in 0..self.breaks_per_device {
                map(&mut md, d, self.break_from + rng.below(self.break_span));
            }
        }
        md.create_thin(7).unwrap();
        for _ in 0..self.scatter_mappings {
            map(&mut md, 7, rng.below(self.scatter_span));
        }
        md.commit().unwrap();
        md.reserve_metadata_snap().unwrap();
        md.delete(2).unwrap();
        for v in 0..10 {
            map(&mut md, 3, v);
        }
        md.set_transaction_id(0, 9).unwrap();
        md.commit().unwrap();
        let mut ids = Vec::new();
        md.for_each_device(&mut |d, _| {
            ids.push(d);
            Ok(())
        })
        .unwrap();
        assert_eq!(ids, Self::THINS);
        md.into_store().media.snapshot()
    }
}
