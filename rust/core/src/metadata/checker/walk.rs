// SPDX-License-Identifier: GPL-2.0
//! The checker's walk of the metadata trees: every node is visited once
//! (shared subtrees count one reference per parent), the mapping and
//! details trees are read whole, and what they reference is counted.

use crate::core_error::CoreError;
use crate::metadata::superblock::Superblock;
use crate::metadata::thin_metadata::DeviceDetails;
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::TreeKind;
use crate::pdata::checksum::BlockKind;
use crate::pdata::codec::u64_of;
use crate::pdata::space_map::IndexEntry;
use std::collections::{BTreeMap, HashSet};
use std::format;
use std::string::String;

use std::vec::Vec;

use super::{Ctx, Entries, Label, Owners, Report};

/// A failure to read or decode the B-tree node at block `b`, worded as
/// thin_check words it: "bad checksum in btree node (block 11)".
fn in_node(b: u64) -> impl Fn(CoreError) -> String + Copy {
    move |e| format!("{e} in btree node (block {b})")
}

impl<S: BlockStore> Ctx<'_, S> {
    pub(super) fn inc_meta(&mut self, b: u64) -> Result<(), String> {
        if b == 0 && self.meta.nonzero() > 0 || b >= self.nr_meta {
            return Err(format!("metadata reference out of range: {b}"));
        }
        self.meta.inc(b);
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
            // A shared subtree: its mappings count again for this device.
            match self.below.get(&b) {
                Some(n) => self.tally += n,
                None => self.gaps += 1,
            }
            return Ok(());
        }
        let (tally, gaps) = (self.tally, self.gaps);
        let r = self.visit_new(b, kind, lo, hi, depth, leaf_depth, out);
        if r.is_err() {
            self.bad.insert(b);
        } else if kind == TreeKind::Mapping && self.gaps == gaps {
            self.below.insert(b, self.tally - tally);
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
        let g = self.s.read(b, BlockKind::Node).map_err(in_node(b))?;
        let h = node::check(&g, kind.value_size()).map_err(in_node(b))?;
        if depth > 0 && h.nr_entries < h.max_entries / 3 {
            return Err(format!(
                "btree node (block {b}): underfull ({} of {} entries)",
                h.nr_entries, h.max_entries
            ));
        }
        // The values side by side in one buffer (not one allocation each).
        let vs = h.value_size;
        let mut keys = Vec::with_capacity(h.nr_entries);
        let mut vals = Vec::with_capacity(h.nr_entries * vs);
        for i in 0..h.nr_entries {
            let k = node::key(&g, &h, i).map_err(in_node(b))?;
            if k < lo || hi.is_some_and(|h| k >= h) {
                let hi = hi.map_or("end".into(), |h| format!("{h}"));
                return Err(format!(
                    "btree node (block {b}): key {k} outside its parent's range {lo}..{hi}"
                ));
            }
            keys.push(k);
            vals.extend_from_slice(node::value(&g, &h, i).map_err(in_node(b))?);
        }
        drop(g);
        let val = |i: usize| vals.get(i * vs..(i + 1) * vs).unwrap_or(&[]);
        if h.leaf {
            match leaf_depth {
                Some(d) if *d != depth => {
                    return Err(format!("unbalanced tree at leaf (block {b})"))
                }
                _ => *leaf_depth = Some(depth),
            }
            self.tally += keys.len() as u64;
            for (i, k) in keys.iter().enumerate() {
                let v = val(i);
                match kind {
                    TreeKind::Mapping => {
                        let m = u64_of(v).map_err(in_node(b))?;
                        // A mapping is (data block << 24 | time).
                        let t = (m & 0xff_ffff) as u32;
                        if t > self.time {
                            let e = format!(
                                "btree node (block {b}): mapping has time {t}, after the superblock's time {}",
                                self.time
                            );
                            self.damage(*k, Some(*k + 1), e);
                        }
                        self.data.inc(m >> 24);
                    }
                    TreeKind::DataIndex => {
                        let ie = IndexEntry::decode(v).map_err(in_node(b))?;
                        self.inc_meta(ie.blocknr)?;
                    }
                    _ => {}
                }
                if let Some(o) = out.as_mut() {
                    o.push((*k, v.to_vec()));
                }
            }
        } else {
            for i in 0..keys.len() {
                let child = u64_of(val(i)).map_err(in_node(b))?;
                let chi = keys.get(i + 1).copied().or(hi);
                if let Err(e) = self.visit(child, kind, keys[i], chi, depth + 1, leaf_depth, out) {
                    self.damage(keys[i], chi, e);
                    self.gaps += 1;
                }
            }
        }
        Ok(())
    }

    /// Walks the tree at `root`, recording damage under `label`. Returns
    /// the leaf entries read (on the first visit of the root), or None.
    pub(super) fn tree(&mut self, root: u64, kind: TreeKind, label: Label) -> Option<Entries> {
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
            return Err(format!(
                "btree node (block {b}) is reached twice within one tree"
            ));
        }
        let g = self.s.read(b, BlockKind::Node).map_err(in_node(b))?;
        let h = node::check(&g, kind.value_size()).map_err(in_node(b))?;
        let bad = in_node(b);
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

    /// The first (thin device, virtual block) found mapping each of the
    /// data blocks `wanted`, in the order the walk met the devices: named
    /// in the messages about them. Read again only when there is
    /// something to name (a map kept for every block during the walk
    /// cost more than the counts).
    pub(super) fn owners(&self, wanted: &[u64]) -> Owners {
        let mut found = BTreeMap::new();
        for &(dev, root) in &self.dev_roots {
            if found.len() == wanted.len() {
                break;
            }
            let mut v = Vec::new();
            // Damage is reported by the walk; what can be read is enough.
            let _ = self.collect(root, TreeKind::Mapping, 0, &mut v, &mut HashSet::new());
            for (k, m) in v {
                let Ok(m) = u64_of(&m) else { continue };
                if wanted.contains(&(m >> 24)) {
                    found.entry(m >> 24).or_insert((dev, k));
                }
            }
        }
        found
    }

    /// Walks a superblock's mapping and details trees. References from a
    /// top-level leaf to device trees are counted once per leaf node, so
    /// only leaves not seen before (through another superblock) add them.
    /// `held`: the trees of the metadata snapshot.
    pub(super) fn thin_trees(
        &mut self,
        sb: &Superblock,
        rep: &mut Report,
        held: bool,
        count: bool,
    ) {
        let new_top = self
            .tree(sb.mapping_root, TreeKind::TopLevel, Label::Top { held })
            .unwrap_or_default();
        let _ = self.tree(sb.details_root, TreeKind::Details, Label::Details { held });
        for (dev, root) in &new_top {
            self.label = Label::Device { dev: *dev, held };
            let r = u64_of(root)
                .map_err(|e| format!("{e} in the root of its mapping tree"))
                .and_then(|root| {
                    self.dev_roots.push((*dev, root));
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
            let d = match DeviceDetails::decode(d) {
                Ok(d) => d,
                Err(e) => {
                    self.errors
                        .push(format!("thin device {dev}: {e} in its details"));
                    continue;
                }
            };
            // The mappings under the root, counted by the walk (none when
            // a part of the tree could not be read).
            let Some(&n) = u64_of(root).ok().and_then(|r| self.below.get(&r)) else {
                continue;
            };
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
}
