// SPDX-License-Identifier: GPL-2.0
//! The model: what every thin must read back, sector by sector, and which
//! pool blocks its virtual blocks share, so that the pool's used data
//! blocks are known exactly (a status commits first, so it counts exactly
//! what is mapped, plus what a held metadata snapshot still references).
//!
//! Which writes allocate follows dm-thin: a mapping counts as shared when
//! it is older than the device's last snapshot (the pool's time, which each
//! `create_snap` advances, against the device's `snapshotted_time`), not
//! when another device still maps the block; so a write to a block whose
//! snapshot has been deleted still moves it to a new block.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::{
    content::{decode, Found, Tag, SECTOR},
    dump::Norm,
};

/// Sectors per pool block (the pools use 64 KiB blocks).
pub const BLOCK_SECTORS: u64 = 128;
/// Every thin is 16 MiB: bigger than the pool's first data device, so that
/// writes can run the pool out of space.
pub const THIN_BLOCKS: u64 = 256;
pub const THIN_SECTORS: u64 = THIN_BLOCKS * BLOCK_SECTORS;

/// One thin device: what each sector holds, which model pool block
/// (`pid`, 0 for none) each virtual block maps and at what pool time.
#[derive(Clone)]
pub struct Volume {
    pub uid: u32,
    sectors: Vec<Tag>,
    blocks: Vec<u32>,
    mapped_at: Vec<u32>,
    snapshotted_time: u32,
}

#[derive(Default)]
pub struct Model {
    pub vols: BTreeMap<u32, Volume>,
    refs: HashMap<u32, u32>,
    next_pid: u32,
    /// Pool blocks a held metadata snapshot references.
    pinned: Option<HashSet<u32>>,
    pub txid: u64,
    /// The pool's time: snapshots taken so far.
    time: u32,
}

/// The pool blocks a sector range touches.
fn block_range(sector: u64, len: u64) -> std::ops::Range<usize> {
    (sector / BLOCK_SECTORS) as usize..(sector + len).div_ceil(BLOCK_SECTORS) as usize
}

impl Model {
    pub fn has(&self, dev: u32) -> bool {
        self.vols.contains_key(&dev)
    }
    pub fn meta_snap_held(&self) -> bool {
        self.pinned.is_some()
    }
    pub fn create(&mut self, dev: u32, uid: u32) {
        self.vols.insert(
            dev,
            Volume {
                uid,
                sectors: vec![Tag::ZERO; THIN_SECTORS as usize],
                blocks: vec![0; THIN_BLOCKS as usize],
                mapped_at: vec![0; THIN_BLOCKS as usize],
                snapshotted_time: self.time,
            },
        );
    }
    /// `dev` becomes a snapshot of `origin` (which exists).
    pub fn snap(&mut self, dev: u32, origin: u32, uid: u32) {
        self.time += 1;
        let time = self.time;
        let Some(o) = self.vols.get_mut(&origin) else {
            return;
        };
        o.snapshotted_time = time;
        let mut v = o.clone();
        v.uid = uid;
        for pid in v.blocks.iter().filter(|p| **p != 0) {
            *self.refs.entry(*pid).or_default() += 1;
        }
        self.vols.insert(dev, v);
    }
    fn unref(&mut self, pid: u32) {
        if pid == 0 {
            return;
        }
        if let Some(n) = self.refs.get_mut(&pid) {
            *n -= 1;
            if *n == 0 {
                self.refs.remove(&pid);
            }
        }
    }
    pub fn delete(&mut self, dev: u32) {
        if let Some(v) = self.vols.remove(&dev) {
            for pid in v.blocks {
                self.unref(pid);
            }
        }
    }
    /// Whether a write to virtual block `b` of `v` allocates.
    fn needs_new_block(v: &Volume, b: usize) -> bool {
        v.blocks[b] == 0 || v.mapped_at[b] < v.snapshotted_time
    }
    /// Pool blocks a write of the range would allocate (new or breaking sharing).
    pub fn blocks_needed(&self, dev: u32, sector: u64, len: u64) -> u64 {
        let Some(v) = self.vols.get(&dev) else {
            return 0;
        };
        block_range(sector, len)
            .filter(|b| Self::needs_new_block(v, *b))
            .count() as u64
    }
    /// A completed write of generation `gen`.
    pub fn write(&mut self, dev: u32, sector: u64, len: u64, gen: u32) {
        let Some(v) = self.vols.get(&dev) else {
            return;
        };
        let breaks: Vec<(usize, u32)> = block_range(sector, len)
            .filter(|b| Self::needs_new_block(v, *b))
            .map(|b| (b, v.blocks[b]))
            .collect();
        for (b, old) in breaks {
            self.unref(old);
            self.next_pid += 1;
            self.refs.insert(self.next_pid, 1);
            let time = self.time;
            if let Some(v) = self.vols.get_mut(&dev) {
                v.blocks[b] = self.next_pid;
                v.mapped_at[b] = time;
            }
        }
        if let Some(v) = self.vols.get_mut(&dev) {
            let tag = Tag { uid: v.uid, gen };
            v.sectors[sector as usize..(sector + len) as usize].fill(tag);
        }
    }
    /// A discard: the whole blocks of the range are unmapped and read
    /// zeroes; partial blocks keep their data (dm-thin discards whole
    /// blocks only).
    pub fn discard(&mut self, dev: u32, sector: u64, len: u64) {
        let first = sector.div_ceil(BLOCK_SECTORS);
        let end = (sector + len) / BLOCK_SECTORS;
        for b in first..end {
            let Some(v) = self.vols.get_mut(&dev) else {
                return;
            };
            let old = std::mem::take(&mut v.blocks[b as usize]);
            let s = (b * BLOCK_SECTORS) as usize;
            v.sectors[s..s + BLOCK_SECTORS as usize].fill(Tag::ZERO);
            self.unref(old);
        }
    }
    pub fn reserve_meta_snap(&mut self) {
        self.pinned = Some(self.refs.keys().copied().collect());
    }
    pub fn release_meta_snap(&mut self) {
        self.pinned = None;
    }
    /// The pool's used data blocks after a commit.
    pub fn used_blocks(&self) -> u64 {
        match &self.pinned {
            None => self.refs.len() as u64,
            Some(p) => {
                (self.refs.len() + p.iter().filter(|x| !self.refs.contains_key(x)).count()) as u64
            }
        }
    }
    pub fn mapped_blocks(&self, dev: u32) -> u64 {
        self.vols
            .get(&dev)
            .map_or(0, |v| v.blocks.iter().filter(|p| **p != 0).count() as u64)
    }
    /// Virtual blocks of `dev` that map nothing.
    pub fn unmapped_blocks(&self, dev: u32) -> Vec<u64> {
        self.vols.get(&dev).map_or(Vec::new(), |v| {
            (0..THIN_BLOCKS)
                .filter(|b| v.blocks[*b as usize] == 0)
                .collect()
        })
    }
    /// What thin_dump must show: each device's mapped blocks, and who
    /// shares each data block (the attributes are not modelled).
    pub fn norm(&self) -> Norm {
        let mut groups: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        let mut n = Norm::default();
        for (dev, v) in &self.vols {
            n.devices
                .insert(*dev, (self.mapped_blocks(*dev), String::new()));
            for (vb, pid) in v.blocks.iter().enumerate() {
                if *pid != 0 {
                    groups.entry(*pid).or_default().push((*dev, vb as u64));
                }
            }
        }
        n.groups = groups.into_values().collect();
        n
    }
    /// Compares what was read from `dev` at `sector` with the model; the
    /// first few differing sectors, described, or None.
    pub fn check(&self, dev: u32, sector: u64, buf: &[u8]) -> Option<String> {
        let v = self.vols.get(&dev)?;
        let mut bad = Vec::new();
        let mut count = 0;
        for (i, s) in buf.chunks_exact(SECTOR).enumerate() {
            let at = sector + i as u64;
            let want = v.sectors[at as usize];
            let found = decode(s);
            let ok = match (&found, want == Tag::ZERO) {
                (Found::Zeroes, true) => true,
                (Found::Data { tag, sector }, false) => *tag == want && *sector == at,
                _ => false,
            };
            if !ok {
                count += 1;
                if bad.len() < 4 {
                    bad.push(format!("sector {at}: expected {want}, found {found}"));
                }
            }
        }
        (count > 0).then(|| format!("{count} sectors differ: {}", bad.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::encode;

    #[test]
    fn sharing_and_space() {
        let mut m = Model::default();
        m.create(0, 1);
        m.write(0, 0, 8, 2);
        m.write(0, 130, 200, 3); // blocks 1..=2
        assert_eq!(m.used_blocks(), 3);
        m.snap(1, 0, 4);
        assert_eq!(m.used_blocks(), 3);
        assert_eq!(m.blocks_needed(0, 0, 1), 1);
        m.write(0, 0, 1, 5); // breaks sharing of block 0
        assert_eq!(m.used_blocks(), 4);
        assert_eq!(m.blocks_needed(0, 0, 1), 0);
        m.reserve_meta_snap();
        m.delete(1);
        m.discard(0, 100, 300); // blocks 1 and 2 whole, 0 and 3 in part
        assert_eq!(m.mapped_blocks(0), 1);
        assert_eq!(m.used_blocks(), 4, "the metadata snapshot holds them");
        m.release_meta_snap();
        assert_eq!(m.used_blocks(), 1);
    }

    #[test]
    fn sharing_is_by_snapshot_time() {
        let mut m = Model::default();
        m.create(0, 1);
        m.write(0, 0, 128, 2);
        m.snap(1, 0, 3);
        m.delete(1);
        // As in dm-thin: the mapping predates thin 0's last snapshot.
        assert_eq!(m.blocks_needed(0, 0, 1), 1);
        m.reserve_meta_snap();
        m.write(0, 0, 1, 4);
        assert_eq!(
            m.used_blocks(),
            2,
            "the old block is held by the metadata snapshot"
        );
        assert_eq!(m.blocks_needed(0, 0, 1), 0);
        m.create(2, 5);
        m.write(2, 0, 1, 6);
        assert_eq!(
            m.blocks_needed(2, 0, 1),
            0,
            "a new thin's own mappings are not shared"
        );
    }

    #[test]
    fn check_names_stale_data() {
        let mut m = Model::default();
        m.create(0, 1);
        m.write(0, 0, 2, 7);
        let mut buf = vec![0u8; 2 * SECTOR];
        encode(&mut buf[..SECTOR], Tag { uid: 1, gen: 7 }, 0);
        assert!(m.check(0, 0, &buf).is_some(), "sector 1 reads zeroes");
        encode(&mut buf[SECTOR..], Tag { uid: 1, gen: 7 }, 1);
        assert_eq!(m.check(0, 0, &buf), None);
        encode(&mut buf[SECTOR..], Tag { uid: 9, gen: 3 }, 1);
        let msg = m.check(0, 0, &buf).unwrap_or_default();
        assert!(msg.contains("volume of op 8"), "{msg}");
    }
}
