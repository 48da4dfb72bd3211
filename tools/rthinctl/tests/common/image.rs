// SPDX-License-Identifier: GPL-2.0
//! Metadata images for the tests, written with the core crate the module
//! uses (shared by the unit tests in src/meta.rs and by tests/cli.rs).

use std::collections::HashMap;

use rthin_core::core_error::{CoreError, CoreResult};
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core::pdata::block_store::BlockStore;
use rthin_core::pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE};

/// A writable in-memory store: blocks written since the last flush are
/// kept apart and sealed on flush, as a real store does.
pub struct MemRw {
    pub disk: Vec<Vec<u8>>,
    cache: HashMap<u64, (Vec<u8>, BlockKind)>,
}

impl MemRw {
    pub fn new(nr: u64) -> Self {
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

/// The bytes of the test image, changed by `f` before the commit: thin 1
/// maps blocks 0..5 and 9, thin 2 is its snapshot with block 0 rewritten,
/// transaction 7, 1024 metadata blocks, 1000 data blocks of 64 KiB.
pub fn image_bytes_with(f: impl FnOnce(&mut ThinMetadata<MemRw>)) -> Vec<u8> {
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
    md.into_store().disk.concat()
}

/// [`image_bytes_with`] written to a temporary file.
pub fn image_with(f: impl FnOnce(&mut ThinMetadata<MemRw>)) -> (TempPath, String) {
    let p = TempPath::new(&image_bytes_with(f));
    let s = p.0.clone();
    (p, s)
}

/// The unchanged test image in a temporary file.
pub fn image() -> (TempPath, String) {
    image_with(|_| {})
}

/// Changes the superblock of `img` (block 0) with `f` and seals it again,
/// as a tool that rewrites a field does.
pub fn patch_superblock(img: &mut [u8], f: impl FnOnce(&mut [u8])) {
    let sb = &mut img[..BLOCK_SIZE];
    f(sb);
    seal(BlockKind::Superblock, 0, sb).unwrap();
}

/// A temporary file removed on drop (no extra crate for this).
pub struct TempPath(pub String);

impl TempPath {
    pub fn new(bytes: &[u8]) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "rthinctl-test-{}-{}.img",
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

/// Rewrites the image at `path`: `f` gets each block that reads as a
/// B-tree node and may change it; changed blocks are resealed if `reseal`.
pub fn patch_nodes(path: &str, mut f: impl FnMut(&mut [u8]) -> bool, reseal: bool) {
    let mut bytes = std::fs::read(path).unwrap();
    for (b, blk) in bytes.chunks_mut(BLOCK_SIZE).enumerate() {
        if verify(BlockKind::Node, b as u64, blk).is_ok() && f(blk) && reseal {
            seal(BlockKind::Node, b as u64, blk).unwrap();
        }
    }
    std::fs::write(path, &bytes).unwrap();
}

/// Gives the image at `path` the data space-map search hints that
/// thin_restore 0.9.0 writes: nr_free counted over the valid entries of
/// the last bitmap only (1000 blocks, 7 in use: 993, not 16313) and
/// none_free_before past a free entry (9).
pub fn thin_restore_090_hints(path: &str) {
    let mut n = 0;
    patch_nodes(
        path,
        |blk| {
            let h = rthin_core::pdata::btree::node::check(blk, 16).ok();
            let Some(h) = h.filter(|h| h.leaf && h.value_size == 16) else {
                return false;
            };
            let v = h.val_off(0);
            // The live leaf (older copies of it are left in the image).
            if u32::from_le_bytes(blk[v + 8..v + 12].try_into().unwrap()) != 16313 {
                return false;
            }
            blk[v + 8..v + 12].copy_from_slice(&993u32.to_le_bytes());
            blk[v + 12..v + 16].copy_from_slice(&9u32.to_le_bytes());
            n += 1;
            true
        },
        true,
    );
    assert_eq!(n, 1, "one data index leaf");
}
