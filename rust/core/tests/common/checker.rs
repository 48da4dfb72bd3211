// SPDX-License-Identifier: GPL-2.0
//! An independent metadata checker (a small `thin_check`): walks every tree
//! from the superblock (and the held snapshot), recomputes the expected
//! reference count of every metadata and data block, and compares them with
//! the space maps, including index entries, overflow trees and nr_allocated.

use rthin_core::block_store::BlockStore;
use rthin_core::btree::node;
use rthin_core::btree::TreeKind;
use rthin_core::checksum::BlockKind;
use rthin_core::codec::{get_u64, u64_of};
use rthin_core::space_map::{nr_bitmaps, IndexEntry, ENTRIES_PER_BITMAP};
use rthin_core::superblock::{SmRoot, Superblock};
use rthin_core::thin_metadata::DeviceDetails;
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Default)]
pub struct Report {
    pub meta_allocated: u64,
    pub data_allocated: u64,
    pub devices: usize,
    pub mappings: u64,
    pub max_meta_block: u64,
}

struct Ctx<'a, S: BlockStore> {
    s: &'a S,
    meta: HashMap<u64, u32>,
    data: HashMap<u64, u32>,
    visited: HashSet<u64>,
    nr_meta: u64,
}

type Entries = Vec<(u64, Vec<u8>)>;

impl<S: BlockStore> Ctx<'_, S> {
    fn inc_meta(&mut self, b: u64) -> Result<(), String> {
        if b == 0 && !self.meta.is_empty() || b >= self.nr_meta {
            return Err(format!("metadata reference out of range: {b}"));
        }
        *self.meta.entry(b).or_default() += 1;
        Ok(())
    }

    /// Counts a reference to the tree at `b`; walks it the first time.
    /// Returns the leaf entries (only on first visit) through `out`.
    fn visit(
        &mut self,
        b: u64,
        kind: TreeKind,
        lo: u64,
        hi: Option<u64>,
        depth: usize,
        leaf_depth: &mut Option<usize>,
        out: &mut Option<Entries>,
    ) -> Result<(), String> {
        self.inc_meta(b)?;
        if !self.visited.insert(b) {
            return Ok(());
        }
        if depth > 16 {
            return Err("tree too deep".into());
        }
        let g = self
            .s
            .read(b, BlockKind::Node)
            .map_err(|e| format!("node {b}: {e:?}"))?;
        let h = node::check(&g, kind.value_size()).map_err(|e| format!("node {b}: {e:?}"))?;
        if depth > 0 && h.nr_entries < h.max_entries / 3 {
            return Err(format!(
                "node {b}: underfull ({} of {})",
                h.nr_entries, h.max_entries
            ));
        }
        let mut keys = Vec::new();
        let mut vals = Vec::new();
        for i in 0..h.nr_entries {
            let k = node::key(&g, &h, i).unwrap();
            if k < lo || hi.is_some_and(|h| k >= h) {
                return Err(format!(
                    "node {b}: key {k} outside parent range [{lo}, {hi:?})"
                ));
            }
            keys.push(k);
            vals.push(node::value(&g, &h, i).unwrap().to_vec());
        }
        drop(g);
        if h.leaf {
            match leaf_depth {
                Some(d) if *d != depth => return Err(format!("unbalanced tree at leaf {b}")),
                _ => *leaf_depth = Some(depth),
            }
            for (k, v) in keys.iter().zip(vals.iter()) {
                match kind {
                    TreeKind::Mapping => {
                        *self.data.entry(u64_of(v).unwrap() >> 24).or_default() += 1;
                    }
                    TreeKind::DataIndex => {
                        let ie = IndexEntry::decode(v).unwrap();
                        self.inc_meta(ie.blocknr)?;
                    }
                    _ => {}
                }
                if let Some(o) = out.as_mut() {
                    o.push((*k, v.clone()));
                }
            }
        } else {
            for i in 0..keys.len() {
                let child = u64_of(&vals[i]).unwrap();
                let chi = keys.get(i + 1).copied().or(hi);
                self.visit(child, kind, keys[i], chi, depth + 1, leaf_depth, out)?;
            }
        }
        Ok(())
    }

    /// Number of leaf entries under `b` (no counting of references).
    fn count_entries(&self, b: u64, depth: usize) -> Result<u64, String> {
        if depth > 16 {
            return Err("tree too deep".into());
        }
        let g = self
            .s
            .read(b, BlockKind::Node)
            .map_err(|e| format!("node {b}: {e:?}"))?;
        let h = node::check(&g, 8).map_err(|e| format!("node {b}: {e:?}"))?;
        if h.leaf {
            return Ok(h.nr_entries as u64);
        }
        let kids: Vec<u64> = (0..h.nr_entries)
            .map(|i| node::value_u64(&g, &h, i).unwrap())
            .collect();
        drop(g);
        let mut n = 0;
        for c in kids {
            n += self.count_entries(c, depth + 1)?;
        }
        Ok(n)
    }

    fn tree(&mut self, root: u64, kind: TreeKind) -> Result<Option<Entries>, String> {
        let mut out = Some(Vec::new());
        let first = !self.visited.contains(&root);
        self.visit(root, kind, 0, None, 0, &mut None, &mut out)?;
        Ok(if first { out } else { None })
    }

    /// Walks a superblock's mapping and details trees.
    /// All leaf entries under `b` (no counting of references).
    fn collect(
        &self,
        b: u64,
        kind: TreeKind,
        depth: usize,
        out: &mut Entries,
    ) -> Result<(), String> {
        if depth > 16 {
            return Err("tree too deep".into());
        }
        let g = self
            .s
            .read(b, BlockKind::Node)
            .map_err(|e| format!("node {b}: {e:?}"))?;
        let h = node::check(&g, kind.value_size()).map_err(|e| format!("node {b}: {e:?}"))?;
        if h.leaf {
            for i in 0..h.nr_entries {
                out.push((
                    node::key(&g, &h, i).unwrap(),
                    node::value(&g, &h, i).unwrap().to_vec(),
                ));
            }
            return Ok(());
        }
        let kids: Vec<u64> = (0..h.nr_entries)
            .map(|i| node::value_u64(&g, &h, i).unwrap())
            .collect();
        drop(g);
        for c in kids {
            self.collect(c, kind, depth + 1, out)?;
        }
        Ok(())
    }

    /// Walks a superblock's mapping and details trees. References from a
    /// top-level leaf to device trees are counted once per leaf node, so
    /// only leaves not seen before (through another superblock) add them.
    fn thin_trees(&mut self, sb: &Superblock, rep: &mut Report, live: bool) -> Result<(), String> {
        let new_top = self
            .tree(sb.mapping_root, TreeKind::TopLevel)?
            .unwrap_or_default();
        let _ = self.tree(sb.details_root, TreeKind::Details)?;
        for (_, root) in &new_top {
            self.visit(
                u64_of(root).unwrap(),
                TreeKind::Mapping,
                0,
                None,
                0,
                &mut None,
                &mut None,
            )?;
        }
        let mut top = Vec::new();
        self.collect(sb.mapping_root, TreeKind::TopLevel, 0, &mut top)?;
        let mut det = Vec::new();
        self.collect(sb.details_root, TreeKind::Details, 0, &mut det)?;
        if top.iter().map(|e| e.0).collect::<Vec<_>>()
            != det.iter().map(|e| e.0).collect::<Vec<_>>()
        {
            return Err("mapping tree and details tree have different devices".into());
        }
        for ((dev, root), (_, d)) in top.iter().zip(det.iter()) {
            let root = u64_of(root).unwrap();
            let d = DeviceDetails::decode(d).unwrap();
            let n = self.count_entries(root, 0)?;
            if live && n != d.mapped_blocks {
                return Err(format!(
                    "device {dev}: mapped_blocks {} but {n} mappings",
                    d.mapped_blocks
                ));
            }
            if live {
                rep.mappings += n;
            }
        }
        if live {
            rep.devices = top.len();
        }
        Ok(())
    }

    /// Reads a space map's actual counts and checks its internal consistency.
    fn sm_counts(&mut self, root: &SmRoot, meta: bool) -> Result<BTreeMap<u64, u32>, String> {
        let nb = nr_bitmaps(root.nr_blocks);
        let mut index = Vec::new();
        if meta {
            self.inc_meta(root.bitmap_root)?;
            let g = self
                .s
                .read(root.bitmap_root, BlockKind::Index)
                .map_err(|e| format!("index: {e:?}"))?;
            for i in 0..nb as usize {
                index.push(IndexEntry::decode(&g[16 + 16 * i..32 + 16 * i]).unwrap());
            }
            for i in nb as usize..255 {
                if g[16 + 16 * i..32 + 16 * i].iter().any(|&x| x != 0) {
                    return Err("metadata index entry beyond the last bitmap is not zero".into());
                }
            }
            for ie in &index {
                self.inc_meta(ie.blocknr)?;
            }
        } else {
            let e = self
                .tree(root.bitmap_root, TreeKind::DataIndex)?
                .ok_or("shared data index")?;
            if e.len() as u64 != nb || e.iter().enumerate().any(|(i, (k, _))| *k != i as u64) {
                return Err(format!(
                    "data index has {} entries for {nb} bitmaps",
                    e.len()
                ));
            }
            for (_, v) in e {
                index.push(IndexEntry::decode(&v).unwrap());
            }
        }
        let overflow: BTreeMap<u64, u32> = self
            .tree(root.ref_count_root, TreeKind::RefCount)?
            .ok_or("shared overflow tree")?
            .into_iter()
            .map(|(k, v)| (k, u32::from_le_bytes(v[..4].try_into().unwrap())))
            .collect();
        let mut counts = BTreeMap::new();
        let mut threes = 0usize;
        for (i, ie) in index.iter().enumerate() {
            let g = self
                .s
                .read(ie.blocknr, BlockKind::Bitmap)
                .map_err(|e| format!("bitmap {i}: {e:?}"))?;
            let mut free = 0u32;
            let bytes: Vec<u8> = g[16..].to_vec();
            drop(g);
            for e in 0..ENTRIES_PER_BITMAP {
                let b = i as u64 * ENTRIES_PER_BITMAP + e;
                let byte = bytes[(e / 4) as usize];
                let sh = (e % 4) * 2;
                let v = (u32::from(byte >> sh) & 1) << 1 | (u32::from(byte >> (sh + 1)) & 1);
                if v == 0 && b < root.nr_blocks && e >= u64::from(ie.none_free_before) {
                    free += 1;
                    continue;
                }
                if b >= root.nr_blocks {
                    if v != 0 {
                        return Err(format!("bitmap {i}: entry beyond the end is set"));
                    }
                    free += 1;
                    continue;
                }
                if v == 0 {
                    free += 1;
                    if e < u64::from(ie.none_free_before) {
                        return Err(format!("bitmap {i}: free entry {e} below none_free_before"));
                    }
                    continue;
                }
                let c = if v == 3 {
                    threes += 1;
                    *overflow
                        .get(&b)
                        .ok_or(format!("block {b}: count 3 without overflow entry"))?
                } else {
                    v
                };
                if c < v {
                    return Err(format!("block {b}: overflow count {c} < 3"));
                }
                counts.insert(b, c);
            }
            if free != ie.nr_free {
                return Err(format!(
                    "bitmap {i}: nr_free {} but {free} free",
                    ie.nr_free
                ));
            }
        }
        if threes != overflow.len() {
            return Err("overflow tree has entries for blocks whose bitmap value is not 3".into());
        }
        if counts.len() as u64 != root.nr_allocated {
            return Err(format!(
                "nr_allocated {} but {} blocks in use ({})",
                root.nr_allocated,
                counts.len(),
                if meta { "metadata" } else { "data" }
            ));
        }
        Ok(counts)
    }
}

fn compare(
    what: &str,
    expected: &HashMap<u64, u32>,
    actual: &BTreeMap<u64, u32>,
) -> Result<(), String> {
    let mut errs = Vec::new();
    for (b, c) in actual {
        let e = expected.get(b).copied().unwrap_or(0);
        if e != *c {
            errs.push(format!(
                "{what} block {b}: space map says {c}, references {e}"
            ));
        }
    }
    for (b, e) in expected {
        if !actual.contains_key(b) {
            errs.push(format!(
                "{what} block {b}: free in space map but referenced {e} times"
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        errs.truncate(10);
        Err(errs.join("\n"))
    }
}

/// Checks the committed metadata seen through `s`.
pub fn check<S: BlockStore>(s: &S) -> Result<Report, String> {
    let sb = {
        let g = s
            .read(0, BlockKind::Superblock)
            .map_err(|e| format!("superblock: {e:?}"))?;
        Superblock::decode(&g).map_err(|e| format!("superblock: {e:?}"))?
    };
    let mut cx = Ctx {
        s,
        meta: HashMap::new(),
        data: HashMap::new(),
        visited: HashSet::new(),
        nr_meta: sb.meta_sm.nr_blocks,
    };
    let mut rep = Report::default();
    cx.inc_meta(0)?;
    cx.thin_trees(&sb, &mut rep, true)?;
    if sb.held_root != 0 {
        cx.inc_meta(sb.held_root)?;
        let h = {
            let g = s
                .read(sb.held_root, BlockKind::Superblock)
                .map_err(|e| format!("held root: {e:?}"))?;
            if get_u64(&g, 64).unwrap() != 0 || get_u64(&g, 192).unwrap() != 0 {
                return Err("held snapshot has space-map roots".into());
            }
            Superblock::decode(&g).map_err(|e| format!("held root: {e:?}"))?
        };
        cx.thin_trees(&h, &mut rep, false)?;
    }
    let dcounts = cx.sm_counts(&sb.data_sm, false)?;
    let mcounts = cx.sm_counts(&sb.meta_sm, true)?;
    if let Some(b) = cx.data.keys().find(|b| **b >= sb.data_sm.nr_blocks) {
        return Err(format!("data block {b} beyond the data device"));
    }
    compare("data", &cx.data, &dcounts)?;
    compare("metadata", &cx.meta, &mcounts)?;
    rep.meta_allocated = mcounts.len() as u64;
    rep.max_meta_block = mcounts.keys().next_back().copied().unwrap_or(0);
    rep.data_allocated = dcounts.len() as u64;
    Ok(rep)
}
