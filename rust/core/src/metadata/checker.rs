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

use crate::metadata::superblock::{SmRoot, Superblock};
use crate::metadata::thin_metadata::DeviceDetails;
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::TreeKind;
use crate::pdata::checksum::BlockKind;
use crate::pdata::codec::{get_u64, u64_of};
use crate::pdata::space_map::{nr_bitmaps, IndexEntry, ENTRIES_PER_BITMAP, MAX_METADATA_BITMAPS};
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
    /// Damage: unreadable or malformed structures, bad reference counts,
    /// each naming what it affects (the thin device and its block range
    /// where a mapping tree is concerned). Every problem found is listed:
    /// a node that cannot be read ends the walk of its subtree only.
    /// Empty when the metadata is consistent (leaks aside).
    pub errors: Vec<String>,
    /// Search hints and totals that disagree with the bitmaps: an index
    /// entry's `nr_free` or `none_free_before`, a space map's `nr_allocated`. Older tools count `nr_free` over the
    /// valid entries only and the kernel adjusts it by one at a time, so a
    /// difference is not damage (thin_check does not fail on it either).
    pub warnings: Vec<String>,
    /// Whether the reference counts were compared with the space maps (not
    /// when a tree or a space map could not be read whole: the counts
    /// would be wrong).
    pub counts_compared: bool,
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
    /// The first (device, virtual block) seen mapping each data block.
    owner: HashMap<u64, (u64, u64)>,
    visited: HashSet<u64>,
    /// Nodes whose check failed (their subtrees are not walked).
    bad: HashSet<u64>,
    nr_meta: u64,
    time: u32,
    /// What the tree being walked is, for the messages.
    label: Label,
    errors: Vec<String>,
}

/// Which tree a walk is in, to name what a damaged node affects.
#[derive(Clone, Copy)]
enum Label {
    Top { held: bool },
    Details { held: bool },
    Device { dev: u64, held: bool },
    DataIndex,
    Overflow { meta: bool },
}

impl Label {
    fn range(self, lo: u64, hi: Option<u64>) -> String {
        let r = match hi {
            Some(h) if h == lo + 1 => format!("{lo}"),
            Some(h) => format!("{lo}..{}", h - 1),
            None if lo == 0 => "all".into(),
            None => format!("{lo}.."),
        };
        let snap = |held: bool| {
            if held {
                " of the metadata snapshot"
            } else {
                ""
            }
        };
        match self {
            Label::Top { held } => format!("mapping tree{} (devices {r})", snap(held)),
            Label::Details { held } => format!("device details{} (devices {r})", snap(held)),
            Label::Device { dev, held } => {
                format!("thin device {dev}{}, blocks {r}", snap(held))
            }
            Label::DataIndex => format!("data space map index (bitmaps {r})"),
            Label::Overflow { meta } => format!(
                "{} space map reference counts (blocks {r})",
                if meta { "metadata" } else { "data" }
            ),
        }
    }
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

    fn damage(&mut self, lo: u64, hi: Option<u64>, e: String) {
        let t = format!("{}: {e}", self.label.range(lo, hi));
        self.errors.push(t);
    }

    /// Counts a reference to the tree at `b`; walks it the first time.
    /// Returns the leaf entries (only on first visit) through `out`. A
    /// child that fails its checks is recorded as damage with the key range
    /// it covers, and the walk goes on with its siblings; the error of `b`
    /// itself is returned to the caller, who knows its range.
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
            if self.bad.contains(&b) {
                return Err(format!("node {b} is damaged (see above)"));
            }
            return Ok(());
        }
        let r = self.visit_new(b, kind, lo, hi, depth, leaf_depth, out);
        if r.is_err() {
            self.bad.insert(b);
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn visit_new(
        &mut self,
        b: u64,
        kind: TreeKind,
        lo: u64,
        hi: Option<u64>,
        depth: usize,
        leaf_depth: &mut Option<usize>,
        out: &mut Option<Entries>,
    ) -> Result<(), String> {
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
                            let e = format!(
                                "node {b}: mapping has time {t}, after the superblock's time {}",
                                self.time
                            );
                            self.damage(*k, Some(*k + 1), e);
                        }
                        *self.data.entry(m >> 24).or_default() += 1;
                        if let Label::Device { dev, .. } = self.label {
                            self.owner.entry(m >> 24).or_insert((dev, *k));
                        }
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
                if let Err(e) = self.visit(child, kind, keys[i], chi, depth + 1, leaf_depth, out) {
                    self.damage(keys[i], chi, e);
                }
            }
        }
        Ok(())
    }

    /// Walks the tree at `root`, recording damage under `label`. Returns
    /// the leaf entries read (on the first visit of the root), or None.
    fn tree(&mut self, root: u64, kind: TreeKind, label: Label) -> Option<Entries> {
        self.label = label;
        let mut out = Some(Vec::new());
        let first = !self.visited.contains(&root);
        if let Err(e) = self.visit(root, kind, 0, None, 0, &mut None, &mut out) {
            self.damage(0, None, e);
            return None;
        }
        if first {
            out
        } else {
            None
        }
    }

    /// All leaf entries under `b` (no counting of references). A node met
    /// twice within one tree (a cycle) is an error, so the walk is bounded
    /// by the tree's size. Ok(false): a node already found damaged was
    /// met, so the entries are incomplete.
    fn collect(
        &self,
        b: u64,
        kind: TreeKind,
        depth: usize,
        out: &mut Entries,
        seen: &mut HashSet<u64>,
    ) -> Result<bool, String> {
        if self.bad.contains(&b) {
            return Ok(false);
        }
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
            return Ok(true);
        }
        let kids = (0..h.nr_entries)
            .map(|i| node::value_u64(&g, &h, i))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(bad)?;
        drop(g);
        let mut whole = true;
        for c in kids {
            whole &= self.collect(c, kind, depth + 1, out, seen)?;
        }
        Ok(whole)
    }

    /// [`Ctx::collect`] from a root, recording a failure under `label`;
    /// None when the entries are incomplete.
    fn collect_all(&mut self, root: u64, kind: TreeKind, label: Label) -> Option<Entries> {
        let mut v = Vec::new();
        match self.collect(root, kind, 0, &mut v, &mut HashSet::new()) {
            Ok(true) => Some(v),
            Ok(false) => None,
            Err(e) => {
                self.label = label;
                self.damage(0, None, e);
                None
            }
        }
    }

    /// Walks a superblock's mapping and details trees. References from a
    /// top-level leaf to device trees are counted once per leaf node, so
    /// only leaves not seen before (through another superblock) add them.
    /// `held`: the trees of the metadata snapshot.
    fn thin_trees(&mut self, sb: &Superblock, rep: &mut Report, held: bool, count: bool) {
        let new_top = self
            .tree(sb.mapping_root, TreeKind::TopLevel, Label::Top { held })
            .unwrap_or_default();
        let _ = self.tree(sb.details_root, TreeKind::Details, Label::Details { held });
        for (dev, root) in &new_top {
            self.label = Label::Device { dev: *dev, held };
            let r = u64_of(root)
                .map_err(|e| format!("mapping tree root: {e:?}"))
                .and_then(|root| {
                    self.visit(root, TreeKind::Mapping, 0, None, 0, &mut None, &mut None)
                });
            if let Err(e) = r {
                self.label = Label::Device { dev: *dev, held };
                self.damage(0, None, e);
            }
        }
        let top = self.collect_all(sb.mapping_root, TreeKind::TopLevel, Label::Top { held });
        let det = self.collect_all(sb.details_root, TreeKind::Details, Label::Details { held });
        let (Some(top), Some(det)) = (top, det) else {
            return;
        };
        let tk: Vec<u64> = top.iter().map(|e| e.0).collect();
        let dk: Vec<u64> = det.iter().map(|e| e.0).collect();
        if tk != dk {
            let only = |a: &[u64], b: &[u64]| -> Vec<String> {
                a.iter()
                    .filter(|x| !b.contains(x))
                    .map(|x| format!("{x}"))
                    .collect()
            };
            self.errors.push(format!(
                "mapping tree and details tree{} have different devices (only mapped: [{}]; only in details: [{}])",
                if held { " of the metadata snapshot" } else { "" },
                only(&tk, &dk).join(" "),
                only(&dk, &tk).join(" ")
            ));
        }
        let det: BTreeMap<u64, Vec<u8>> = det.into_iter().collect();
        for (dev, root) in &top {
            let Some(d) = det.get(dev) else { continue };
            let label = Label::Device { dev: *dev, held };
            let d = match DeviceDetails::decode(d) {
                Ok(d) => d,
                Err(e) => {
                    self.errors
                        .push(format!("thin device {dev}: details: {e:?}"));
                    continue;
                }
            };
            let Ok(root) = u64_of(root) else { continue };
            let Some(entries) = self.collect_all(root, TreeKind::Mapping, label) else {
                continue;
            };
            let n = entries.len() as u64;
            if n != d.mapped_blocks {
                self.errors.push(format!(
                    "thin device {dev}{}: mapped_blocks {} in its details but {n} mappings",
                    if held {
                        " of the metadata snapshot"
                    } else {
                        ""
                    },
                    d.mapped_blocks
                ));
            }
            if count {
                rep.mappings += n;
            }
        }
        if count {
            rep.devices = top.len();
        }
    }

    /// Reads a space map's actual counts and checks its internal
    /// consistency. None when it could not be read whole (the damage is in
    /// `self.errors`); hint differences go to `warnings`.
    fn sm_counts(
        &mut self,
        root: &SmRoot,
        meta: bool,
        warnings: &mut Vec<String>,
    ) -> Option<BTreeMap<u64, u32>> {
        let what = if meta { "metadata" } else { "data" };
        let nb = nr_bitmaps(root.nr_blocks);
        let mut index = Vec::new();
        let mut whole = true;
        if meta {
            if nb > MAX_METADATA_BITMAPS {
                self.errors.push(format!(
                    "metadata space map of {} blocks needs {nb} bitmaps, more than {MAX_METADATA_BITMAPS}",
                    root.nr_blocks
                ));
                return None;
            }
            if let Err(e) = self.inc_meta(root.bitmap_root) {
                self.errors.push(format!("metadata space map index: {e}"));
                return None;
            }
            let g = match self.s.read(root.bitmap_root, BlockKind::Index) {
                Ok(g) => g,
                Err(e) => {
                    self.errors.push(format!(
                        "metadata space map index (block {}): {e:?}",
                        root.bitmap_root
                    ));
                    return None;
                }
            };
            for i in 0..nb as usize {
                match IndexEntry::decode(&g[16 + 16 * i..32 + 16 * i]) {
                    Ok(ie) => index.push(Some(ie)),
                    Err(e) => {
                        self.errors
                            .push(format!("metadata space map index entry {i}: {e:?}"));
                        index.push(None);
                    }
                }
            }
            for i in nb as usize..MAX_METADATA_BITMAPS as usize {
                if g[16 + 16 * i..32 + 16 * i].iter().any(|&x| x != 0) {
                    self.errors.push(format!(
                        "metadata space map index entry {i}, beyond the last bitmap, is not zero"
                    ));
                    break;
                }
            }
            drop(g);
            for ie in index.iter().flatten() {
                if let Err(e) = self.inc_meta(ie.blocknr) {
                    self.errors.push(format!("metadata space map bitmap: {e}"));
                }
            }
        } else {
            let e = self.tree(root.bitmap_root, TreeKind::DataIndex, Label::DataIndex)?;
            if e.len() as u64 != nb || e.iter().enumerate().any(|(i, (k, _))| *k != i as u64) {
                self.errors.push(format!(
                    "data space map index has {} entries for {nb} bitmaps",
                    e.len()
                ));
                whole = false;
            }
            for (i, v) in e {
                match IndexEntry::decode(&v) {
                    Ok(ie) => index.push(Some(ie)),
                    Err(e) => {
                        self.errors
                            .push(format!("data space map index entry {i}: {e:?}"));
                        index.push(None);
                    }
                }
            }
        }
        let overflow: BTreeMap<u64, u32> = self
            .tree(
                root.ref_count_root,
                TreeKind::RefCount,
                Label::Overflow { meta },
            )?
            .into_iter()
            .map(|(k, v)| (k, u32::from_le_bytes([v[0], v[1], v[2], v[3]])))
            .collect();
        let mut counts = BTreeMap::new();
        let mut threes = 0usize;
        for (i, ie) in index.iter().enumerate() {
            let Some(ie) = ie else {
                whole = false;
                continue;
            };
            let first = i as u64 * ENTRIES_PER_BITMAP;
            let bitmap = format!(
                "{what} space map bitmap {i} (block {}, {what} blocks {first}..{})",
                ie.blocknr,
                (first + ENTRIES_PER_BITMAP).min(root.nr_blocks.max(first + 1)) - 1
            );
            let bytes: Vec<u8> = match self.s.read(ie.blocknr, BlockKind::Bitmap) {
                Ok(g) => g[16..].to_vec(),
                Err(e) => {
                    self.errors.push(format!("{bitmap}: {e:?}"));
                    whole = false;
                    continue;
                }
            };
            // Free entries: all of them, and those below nr_blocks only
            // (the last bitmap's tail); nr_free may count either way.
            let mut free_all = 0u32;
            let mut free_valid = 0u32;
            let mut below_hint = None;
            let mut tail_set = false;
            for e in 0..ENTRIES_PER_BITMAP {
                let b = first + e;
                let byte = bytes[(e / 4) as usize];
                let sh = (e % 4) * 2;
                let v = (u32::from(byte >> sh) & 1) << 1 | (u32::from(byte >> (sh + 1)) & 1);
                if b >= root.nr_blocks {
                    if v != 0 {
                        tail_set = true;
                    }
                    free_all += 1;
                    continue;
                }
                if v == 0 {
                    free_all += 1;
                    free_valid += 1;
                    if e < u64::from(ie.none_free_before) && below_hint.is_none() {
                        below_hint = Some(e);
                    }
                    continue;
                }
                let c = if v == 3 {
                    threes += 1;
                    match overflow.get(&b) {
                        Some(c) if *c >= 3 => *c,
                        Some(c) => {
                            self.errors
                                .push(format!("{what} block {b}: overflow count {c} < 3"));
                            *c
                        }
                        None => {
                            self.errors.push(format!(
                                "{what} block {b}: count 3 or more in the bitmap, no overflow entry"
                            ));
                            3
                        }
                    }
                } else {
                    v
                };
                counts.insert(b, c);
            }
            if tail_set {
                self.errors.push(format!(
                    "{bitmap}: entries beyond the end of the device are set"
                ));
            }
            if ie.nr_free != free_all && ie.nr_free != free_valid {
                warnings.push(format!(
                    "{bitmap}: index says {} free, the bitmap has {free_valid} (a search hint, not damage)",
                    ie.nr_free
                ));
            }
            if let Some(e) = below_hint {
                warnings.push(format!(
                    "{bitmap}: entry {e} is free, below none_free_before {} (a search hint, not damage)",
                    ie.none_free_before
                ));
            }
        }
        if threes != overflow.len() {
            self.errors.push(format!(
                "{what} space map: the overflow tree has entries for blocks whose bitmap value is not 3"
            ));
        }
        if whole && counts.len() as u64 != root.nr_allocated {
            // Only the used-block figure of the status line comes from it
            // (thin_restore 0.9.0 can leave it one off; thin_check accepts that).
            warnings.push(format!(
                "{what} space map: nr_allocated {} but {} blocks in use (a running total, not damage)",
                root.nr_allocated,
                counts.len(),
            ));
        }
        whole.then_some(counts)
    }
}

/// Compares the references found with a space map's counts: leaks (counted
/// once, referenced by nothing) go to `leaks`, every other difference to
/// `errors`. `owner` names a data block's first user.
fn compare(
    what: &str,
    expected: &HashMap<u64, u32>,
    actual: &BTreeMap<u64, u32>,
    owner: &HashMap<u64, (u64, u64)>,
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
        let who = match owner.get(&b) {
            Some((d, v)) => format!(" (thin device {d}, block {v})"),
            None => String::new(),
        };
        errors.push(format!("{what} block {b}{who}: {t}"));
    }
    if n > MAX_LISTED {
        errors.push(format!(
            "{} more {what} blocks with bad reference counts",
            n - MAX_LISTED
        ));
    }
}

/// Checks the committed metadata seen through `s`: every problem found is
/// in the report (a structure that cannot be read ends the walk of that
/// structure only).
pub fn examine<S: BlockStore>(s: &S) -> Report {
    let mut rep = Report::default();
    let sb = match read_sb(s, 0) {
        Ok(sb) => sb,
        Err(e) => {
            rep.errors.push(e);
            return rep;
        }
    };
    let mut cx = Ctx::new(s, &sb);
    let _ = cx.inc_meta(0);
    cx.thin_trees(&sb, &mut rep, false, true);
    if sb.held_root != 0 {
        match cx
            .inc_meta(sb.held_root)
            .and_then(|_| read_held(s, sb.held_root))
        {
            Ok(h) => cx.thin_trees(&h, &mut rep, true, false),
            Err(e) => cx.errors.push(e),
        }
    }
    let dcounts = cx.sm_counts(&sb.data_sm, false, &mut rep.warnings);
    let mcounts = cx.sm_counts(&sb.meta_sm, true, &mut rep.warnings);
    let mut beyond: Vec<u64> = cx
        .data
        .keys()
        .copied()
        .filter(|b| *b >= sb.data_sm.nr_blocks)
        .collect();
    beyond.sort();
    for b in beyond.iter().take(MAX_LISTED) {
        let who = match cx.owner.get(b) {
            Some((d, v)) => format!("thin device {d}, block {v}: "),
            None => String::new(),
        };
        cx.errors.push(format!(
            "{who}maps data block {b}, beyond the data device ({} blocks)",
            sb.data_sm.nr_blocks
        ));
    }
    if let Some(m) = &mcounts {
        rep.meta_allocated = m.len() as u64;
        rep.max_meta_block = m.keys().next_back().copied().unwrap_or(0);
    }
    if let Some(d) = &dcounts {
        rep.data_allocated = d.len() as u64;
    }
    let mut errors = core::mem::take(&mut cx.errors);
    match (dcounts, mcounts) {
        (Some(d), Some(m)) if errors.is_empty() => {
            let none = HashMap::new();
            compare("data", &cx.data, &d, &cx.owner, &mut rep.data_leaks, &mut errors);
            compare("metadata", &cx.meta, &m, &none, &mut rep.meta_leaks, &mut errors);
            rep.counts_compared = true;
        }
        _ => errors.push(
            "reference counts not compared with the space maps: parts of the metadata could not be read"
                .into(),
        ),
    }
    rep.errors = errors;
    rep
}

/// Checks a held metadata snapshot through `s` while the pool runs (the
/// metadata device is being written): the snapshot's trees are immutable
/// while it is held, so they are checked as [`examine`] does; the space
/// maps are not part of the snapshot, so only what cannot change under a
/// running pool is compared with the committed data space map: every data
/// block the snapshot maps lies inside the data device and is counted in
/// use (the snapshot holds a reference to it). Leaks and exact counts are
/// out of reach without stopping the pool.
pub fn examine_held<S: BlockStore>(s: &S) -> Report {
    let mut rep = Report::default();
    let sb = match read_sb(s, 0) {
        Ok(sb) => sb,
        Err(e) => {
            rep.errors.push(e);
            return rep;
        }
    };
    if sb.held_root == 0 {
        rep.errors
            .push("the pool holds no metadata snapshot".into());
        return rep;
    }
    let h = match read_held(s, sb.held_root) {
        Ok(h) => h,
        Err(e) => {
            rep.errors.push(e);
            return rep;
        }
    };
    let mut cx = Ctx::new(s, &h);
    cx.nr_meta = sb.meta_sm.nr_blocks;
    cx.thin_trees(&h, &mut rep, true, true);
    let mut errors = core::mem::take(&mut cx.errors);
    // The committed data space map, as far as it can be read while the
    // pool commits (its blocks may be reused under the reads: a failure to
    // read it is not damage).
    let mut scx = Ctx::new(s, &sb);
    let mut w = Vec::new();
    match scx.sm_counts(&sb.data_sm, false, &mut w) {
        Some(d) if scx.errors.is_empty() => {
            let mut missing: Vec<u64> = cx
                .data
                .keys()
                .copied()
                .filter(|b| !d.contains_key(b))
                .collect();
            missing.sort();
            for b in missing.iter().take(MAX_LISTED) {
                let who = match cx.owner.get(b) {
                    Some((d, v)) => format!(" (thin device {d}, block {v})"),
                    None => String::new(),
                };
                errors.push(format!(
                    "data block {b}{who}: mapped by the metadata snapshot but free in the data space map"
                ));
            }
            rep.data_allocated = d.len() as u64;
            rep.counts_compared = true;
        }
        _ => rep.warnings.push(
            "the data space map changed while it was read (the pool committed): not compared"
                .into(),
        ),
    }
    for b in cx
        .data
        .keys()
        .filter(|b| **b >= sb.data_sm.nr_blocks)
        .take(MAX_LISTED)
    {
        errors.push(format!(
            "data block {b}, mapped by the metadata snapshot, is beyond the data device"
        ));
    }
    rep.errors = errors;
    rep
}

fn read_sb<S: BlockStore>(s: &S, b: u64) -> Result<Superblock, String> {
    let g = s
        .read(b, BlockKind::Superblock)
        .map_err(|e| format!("superblock: {e:?}"))?;
    Superblock::decode(&g).map_err(|e| format!("superblock: {e:?}"))
}

fn read_held<S: BlockStore>(s: &S, b: u64) -> Result<Superblock, String> {
    let g = s
        .read(b, BlockKind::Superblock)
        .map_err(|e| format!("metadata snapshot (block {b}): {e:?}"))?;
    let bad = |e| format!("metadata snapshot (block {b}): {e:?}");
    if get_u64(&g, 64).map_err(bad)? != 0 || get_u64(&g, 192).map_err(bad)? != 0 {
        return Err(format!("metadata snapshot (block {b}) has space-map roots"));
    }
    Superblock::decode(&g).map_err(bad)
}

impl<'a, S: BlockStore> Ctx<'a, S> {
    fn new(s: &'a S, sb: &Superblock) -> Self {
        Ctx {
            s,
            meta: HashMap::new(),
            data: HashMap::new(),
            owner: HashMap::new(),
            visited: HashSet::new(),
            bad: HashSet::new(),
            nr_meta: sb.meta_sm.nr_blocks,
            time: sb.time,
            label: Label::Top { held: false },
            errors: Vec::new(),
        }
    }
}

/// [`examine`] for callers that accept nothing but clean metadata (the
/// tests): any damage or leak is an error naming it.
pub fn check<S: BlockStore>(s: &S) -> Result<Report, String> {
    let rep = examine(s);
    if rep.clean() && rep.warnings.is_empty() {
        return Ok(rep);
    }
    let mut t = rep.errors.clone();
    // The core keeps its hints exact: a difference is a bug here.
    t.extend(rep.warnings.iter().cloned());
    if !rep.data_leaks.is_empty() {
        t.push(format!("data blocks leaked: {:?}", rep.data_leaks));
    }
    if !rep.meta_leaks.is_empty() {
        t.push(format!("metadata blocks leaked: {:?}", rep.meta_leaks));
    }
    Err(t.join("\n"))
}
