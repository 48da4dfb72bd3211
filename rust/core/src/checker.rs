// SPDX-License-Identifier: GPL-2.0
//! The metadata checker (a small `thin_check`), host-only: it allocates, so
//! it is built with the `checker` feature and never mounted in the kernel.
//! Used by the core's property and crash tests and by `rthinctl meta check`.
//!
//! It walks every tree from the superblock (and the held snapshot),
//! recomputes the expected reference count of every metadata block (B-tree
//! nodes, space-map index and bitmaps, overflow trees, superblocks) and of
//! every data block, and compares them with the space maps, including index
//! entries, overflow trees and nr_allocated. As in thin_check, a block the
//! space map counts once but nothing references is a *leak* (space lost, no
//! data at risk); every other difference is a bad reference count.

use crate::block_store::BlockStore;
use crate::btree::node;
use crate::btree::TreeKind;
use crate::checksum::BlockKind;
use crate::codec::{get_u64, u64_of};
use crate::space_map::{nr_bitmaps, IndexEntry, ENTRIES_PER_BITMAP, MAX_METADATA_BITMAPS};
use crate::superblock::{SmRoot, Superblock};
use crate::thin_metadata::DeviceDetails;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::format;
use std::string::String;
use std::vec::Vec;

/// What [`examine`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// Metadata blocks in use according to the space map.
    pub meta_allocated: u64,
    /// Data blocks in use according to the space map.
    pub data_allocated: u64,
    /// Thin devices in the live superblock.
    pub devices: usize,
    /// Mappings of the live devices.
    pub mappings: u64,
    /// The highest metadata block in use.
    pub max_meta_block: u64,
    /// Data blocks counted once by the space map and referenced by nothing.
    pub data_leaks: Vec<u64>,
    /// Metadata blocks counted once by the space map and referenced by nothing.
    pub meta_leaks: Vec<u64>,
    /// Damage: unreadable or malformed structures, bad reference counts.
    /// Empty when the metadata is consistent (leaks aside).
    pub errors: Vec<String>,
}

impl Report {
    /// No damage and no leaks.
    pub fn clean(&self) -> bool {
        self.errors.is_empty() && self.data_leaks.is_empty() && self.meta_leaks.is_empty()
    }
}

/// Differences listed one by one; the rest are counted.
const MAX_LISTED: usize = 10;

struct Ctx<'a, S: BlockStore> {
    s: &'a S,
    meta: HashMap<u64, u32>,
    data: HashMap<u64, u32>,
    visited: HashSet<u64>,
    nr_meta: u64,
    time: u32,
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
    // The walk's position (key range, depth, leaf depth) and its output
    // travel as arguments, one recursion per node.
    #[allow(clippy::too_many_arguments)]
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
            let k = node::key(&g, &h, i).map_err(|e| format!("node {b}: {e:?}"))?;
            if k < lo || hi.is_some_and(|h| k >= h) {
                return Err(format!(
                    "node {b}: key {k} outside parent range [{lo}, {hi:?})"
                ));
            }
            keys.push(k);
            vals.push(
                node::value(&g, &h, i)
                    .map_err(|e| format!("node {b}: {e:?}"))?
                    .to_vec(),
            );
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
                        let m = u64_of(v).map_err(|e| format!("node {b}: {e:?}"))?;
                        // A mapping is (data block << 24 | time).
                        let t = (m & 0xff_ffff) as u32;
                        if t > self.time {
                            return Err(format!(
                                "node {b}: block {k} has time {t}, after the superblock's time {}",
                                self.time
                            ));
                        }
                        *self.data.entry(m >> 24).or_default() += 1;
                    }
                    TreeKind::DataIndex => {
                        let ie = IndexEntry::decode(v).map_err(|e| format!("node {b}: {e:?}"))?;
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
                let child = u64_of(&vals[i]).map_err(|e| format!("node {b}: {e:?}"))?;
                let chi = keys.get(i + 1).copied().or(hi);
                self.visit(child, kind, keys[i], chi, depth + 1, leaf_depth, out)?;
            }
        }
        Ok(())
    }

    fn tree(&mut self, root: u64, kind: TreeKind) -> Result<Option<Entries>, String> {
        let mut out = Some(Vec::new());
        let first = !self.visited.contains(&root);
        self.visit(root, kind, 0, None, 0, &mut None, &mut out)?;
        Ok(if first { out } else { None })
    }

    /// All leaf entries under `b` (no counting of references). A node met
    /// twice within one tree (a cycle) is an error, so the walk is bounded
    /// by the tree's size.
    fn collect(
        &self,
        b: u64,
        kind: TreeKind,
        depth: usize,
        out: &mut Entries,
        seen: &mut HashSet<u64>,
    ) -> Result<(), String> {
        if depth > 16 {
            return Err("tree too deep".into());
        }
        if !seen.insert(b) {
            return Err(format!("node {b} is reached twice within one tree"));
        }
        let g = self
            .s
            .read(b, BlockKind::Node)
            .map_err(|e| format!("node {b}: {e:?}"))?;
        let h = node::check(&g, kind.value_size()).map_err(|e| format!("node {b}: {e:?}"))?;
        let bad = |e| format!("node {b}: {e:?}");
        if h.leaf {
            for i in 0..h.nr_entries {
                out.push((
                    node::key(&g, &h, i).map_err(bad)?,
                    node::value(&g, &h, i).map_err(bad)?.to_vec(),
                ));
            }
            return Ok(());
        }
        let kids = (0..h.nr_entries)
            .map(|i| node::value_u64(&g, &h, i))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(bad)?;
        drop(g);
        for c in kids {
            self.collect(c, kind, depth + 1, out, seen)?;
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
                u64_of(root).map_err(|e| format!("mapping tree: {e:?}"))?,
                TreeKind::Mapping,
                0,
                None,
                0,
                &mut None,
                &mut None,
            )?;
        }
        let mut top = Vec::new();
        self.collect(
            sb.mapping_root,
            TreeKind::TopLevel,
            0,
            &mut top,
            &mut HashSet::new(),
        )?;
        let mut det = Vec::new();
        self.collect(
            sb.details_root,
            TreeKind::Details,
            0,
            &mut det,
            &mut HashSet::new(),
        )?;
        if top.iter().map(|e| e.0).collect::<Vec<_>>()
            != det.iter().map(|e| e.0).collect::<Vec<_>>()
        {
            return Err("mapping tree and details tree have different devices".into());
        }
        for ((dev, root), (_, d)) in top.iter().zip(det.iter()) {
            let root = u64_of(root).map_err(|e| format!("device {dev}: {e:?}"))?;
            let d = DeviceDetails::decode(d).map_err(|e| format!("device {dev}: {e:?}"))?;
            let mut entries = Vec::new();
            self.collect(
                root,
                TreeKind::Mapping,
                0,
                &mut entries,
                &mut HashSet::new(),
            )?;
            let n = entries.len() as u64;
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
            if nb > MAX_METADATA_BITMAPS {
                return Err(format!(
                    "metadata space map of {} blocks needs {nb} bitmaps, more than {MAX_METADATA_BITMAPS}",
                    root.nr_blocks
                ));
            }
            self.inc_meta(root.bitmap_root)?;
            let g = self
                .s
                .read(root.bitmap_root, BlockKind::Index)
                .map_err(|e| format!("index: {e:?}"))?;
            for i in 0..nb as usize {
                index.push(
                    IndexEntry::decode(&g[16 + 16 * i..32 + 16 * i])
                        .map_err(|e| format!("index entry {i}: {e:?}"))?,
                );
            }
            for i in nb as usize..MAX_METADATA_BITMAPS as usize {
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
            for (i, v) in e {
                index.push(
                    IndexEntry::decode(&v).map_err(|e| format!("data index entry {i}: {e:?}"))?,
                );
            }
        }
        let overflow: BTreeMap<u64, u32> = self
            .tree(root.ref_count_root, TreeKind::RefCount)?
            .ok_or("shared overflow tree")?
            .into_iter()
            .map(|(k, v)| Ok((k, u32::from_le_bytes([v[0], v[1], v[2], v[3]]))))
            .collect::<Result<_, String>>()?;
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

/// Compares the references found with a space map's counts: leaks (counted
/// once, referenced by nothing) go to `leaks`, every other difference to
/// `errors`.
fn compare(
    what: &str,
    expected: &HashMap<u64, u32>,
    actual: &BTreeMap<u64, u32>,
    leaks: &mut Vec<u64>,
    errors: &mut Vec<String>,
) {
    let mut bad = Vec::new();
    for (b, c) in actual {
        match expected.get(b).copied().unwrap_or(0) {
            0 if *c == 1 => leaks.push(*b),
            e if e != *c => bad.push((*b, format!("space map says {c}, references {e}"))),
            _ => {}
        }
    }
    for (b, e) in expected {
        if !actual.contains_key(b) {
            bad.push((*b, format!("free in space map but referenced {e} times")));
        }
    }
    bad.sort();
    let n = bad.len();
    for (b, t) in bad.into_iter().take(MAX_LISTED) {
        errors.push(format!("{what} block {b}: {t}"));
    }
    if n > MAX_LISTED {
        errors.push(format!(
            "{} more {what} blocks with bad reference counts",
            n - MAX_LISTED
        ));
    }
}

/// Checks the committed metadata seen through `s`: every problem found is
/// in the report (a structure that cannot be read ends the walk there).
pub fn examine<S: BlockStore>(s: &S) -> Report {
    let mut rep = Report::default();
    if let Err(e) = walk(s, &mut rep) {
        rep.errors.insert(0, e);
    }
    rep
}

fn walk<S: BlockStore>(s: &S, rep: &mut Report) -> Result<(), String> {
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
        time: sb.time,
    };
    cx.inc_meta(0)?;
    cx.thin_trees(&sb, rep, true)?;
    if sb.held_root != 0 {
        cx.inc_meta(sb.held_root)?;
        let h = {
            let g = s
                .read(sb.held_root, BlockKind::Superblock)
                .map_err(|e| format!("held root: {e:?}"))?;
            let bad = |e| format!("held root: {e:?}");
            if get_u64(&g, 64).map_err(bad)? != 0 || get_u64(&g, 192).map_err(bad)? != 0 {
                return Err("held snapshot has space-map roots".into());
            }
            Superblock::decode(&g).map_err(bad)?
        };
        cx.thin_trees(&h, rep, false)?;
    }
    let dcounts = cx.sm_counts(&sb.data_sm, false)?;
    let mcounts = cx.sm_counts(&sb.meta_sm, true)?;
    if let Some(b) = cx.data.keys().find(|b| **b >= sb.data_sm.nr_blocks) {
        return Err(format!("data block {b} beyond the data device"));
    }
    compare(
        "data",
        &cx.data,
        &dcounts,
        &mut rep.data_leaks,
        &mut rep.errors,
    );
    compare(
        "metadata",
        &cx.meta,
        &mcounts,
        &mut rep.meta_leaks,
        &mut rep.errors,
    );
    rep.meta_allocated = mcounts.len() as u64;
    rep.max_meta_block = mcounts.keys().next_back().copied().unwrap_or(0);
    rep.data_allocated = dcounts.len() as u64;
    Ok(())
}

/// [`examine`] for callers that accept nothing but clean metadata (the
/// tests): any damage or leak is an error naming it.
pub fn check<S: BlockStore>(s: &S) -> Result<Report, String> {
    let rep = examine(s);
    if rep.clean() {
        return Ok(rep);
    }
    let mut t = rep.errors.clone();
    if !rep.data_leaks.is_empty() {
        t.push(format!("data blocks leaked: {:?}", rep.data_leaks));
    }
    if !rep.meta_leaks.is_empty() {
        t.push(format!("metadata blocks leaked: {:?}", rep.meta_leaks));
    }
    Err(t.join("\n"))
}
