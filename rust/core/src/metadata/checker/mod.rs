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
//!
//! This file holds the report and the entry points; `checker/walk.rs` walks
//! the trees and counts what they reference, `checker/space_maps.rs` reads
//! the space maps and compares their counts with those references.

use crate::dm::pool_table::valid_block_size;
use crate::metadata::superblock::Superblock;
use crate::pdata::block_store::BlockStore;
use crate::pdata::checksum::BlockKind;
use crate::pdata::codec::get_u64;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::format;
use std::string::String;
use std::vec::Vec;

mod counts;
mod space_maps;
mod walk;

use counts::Counts;
use space_maps::compare;

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
    meta: Counts,
    data: Counts,
    /// The mapping trees walked, (device, root), in order (to name the
    /// users of a block a message is about: [`Ctx::owners`]).
    dev_roots: Vec<(u64, u64)>,
    /// Mappings under each mapping-tree node whose subtree was read
    /// whole: a device sharing the node counts them without a second walk.
    below: HashMap<u64, u64>,
    /// Leaf entries met so far, and subtrees that could not be counted
    /// (damaged, or met again before their count was known).
    tally: u64,
    gaps: u64,
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
    /// What the keys `lo..hi` (`hi` None: to the end) of this tree are,
    /// in words: "thin device 1, block 9", "device details (devices 3..5)".
    fn range(self, lo: u64, hi: Option<u64>) -> String {
        let r = match hi {
            Some(h) if h == lo + 1 => format!("{lo}"),
            Some(h) => format!("{lo}..{}", h - 1),
            None if lo == 0 => "all".into(),
            None => format!("{lo}.."),
        };
        // "blocks all", "blocks 3..5", but "block 3".
        let blocks = if hi == Some(lo + 1) {
            "block"
        } else {
            "blocks"
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
                format!("thin device {dev}{}, {blocks} {r}", snap(held))
            }
            Label::DataIndex => format!("data space map index (bitmaps {r})"),
            Label::Overflow { meta } => format!(
                "{} space map reference counts ({blocks} {r})",
                if meta { "metadata" } else { "data" }
            ),
        }
    }
}

type Entries = Vec<(u64, Vec<u8>)>;

/// Data blocks and the first (thin device, virtual block) mapping each.
type Owners = BTreeMap<u64, (u64, u64)>;

/// The superblock (block 0) seen through `s`, or what is wrong with it
/// in words (a bad checksum, an invalid field), as [`examine`] reports it.
pub fn superblock<S: BlockStore>(s: &S) -> Result<Superblock, String> {
    read_sb(s, 0)
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
    let mut cx = match Ctx::new(s, &sb) {
        Ok(cx) => cx,
        Err(e) => {
            rep.errors.push(e);
            return rep;
        }
    };
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
    let beyond: Vec<u64> = cx.data.beyond.keys().copied().take(MAX_LISTED).collect();
    let owners = cx.owners(&beyond);
    for b in &beyond {
        let who = match owners.get(b) {
            Some((d, v)) => format!("thin device {d}, block {v}: "),
            None => String::new(),
        };
        cx.errors.push(format!(
            "{who}maps data block {b}, beyond the data device ({} blocks)",
            sb.data_sm.nr_blocks
        ));
    }
    if let Some(m) = &mcounts {
        rep.meta_allocated = m.nonzero();
        rep.max_meta_block = m.highest().unwrap_or(0);
    }
    if let Some(d) = &dcounts {
        rep.data_allocated = d.nonzero();
    }
    let mut errors = core::mem::take(&mut cx.errors);
    match (dcounts, mcounts) {
        (Some(d), Some(m)) if errors.is_empty() => {
            let owners = |b: &[u64]| cx.owners(b);
            compare("data", &cx.data, &d, &owners, &mut rep.data_leaks, &mut errors);
            compare("metadata", &cx.meta, &m, &|_| BTreeMap::new(), &mut rep.meta_leaks, &mut errors);
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
    // The sizes (the snapshot's copy has no space-map roots) from the
    // live superblock, the time from the snapshot's.
    let (mut cx, mut scx) = match (Ctx::new(s, &sb), Ctx::new(s, &sb)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            rep.errors.push(e);
            return rep;
        }
    };
    cx.time = h.time;
    cx.thin_trees(&h, &mut rep, true, true);
    let mut errors = core::mem::take(&mut cx.errors);
    // The committed data space map, as far as it can be read while the
    // pool commits (its blocks may be reused under the reads: a failure to
    // read it is not damage).
    let mut w = Vec::new();
    match scx.sm_counts(&sb.data_sm, false, &mut w) {
        Some(d) if scx.errors.is_empty() => {
            let missing: Vec<u64> = cx
                .data
                .differ(&d)
                .filter(|&b| cx.data.get(b) > 0 && d.get(b) == 0)
                .take(MAX_LISTED)
                .collect();
            let owners = cx.owners(&missing);
            for b in &missing {
                let who = match owners.get(b) {
                    Some((d, v)) => format!(" (thin device {d}, block {v})"),
                    None => String::new(),
                };
                errors.push(format!(
                    "data block {b}{who}: mapped by the metadata snapshot but free in the data space map"
                ));
            }
            rep.data_allocated = d.nonzero();
            rep.counts_compared = true;
        }
        _ => rep.warnings.push(
            "the data space map changed while it was read (the pool committed): not compared"
                .into(),
        ),
    }
    for b in cx.data.beyond.keys().take(MAX_LISTED) {
        errors.push(format!(
            "data block {b}, mapped by the metadata snapshot, is beyond the data device"
        ));
    }
    rep.errors = errors;
    rep
}

/// The superblock at block `b`. The checker only reads, so unknown
/// compat_ro features (which forbid writing only) are accepted, as
/// dm-thin accepts them on a read-only metadata device.
fn read_sb<S: BlockStore>(s: &S, b: u64) -> Result<Superblock, String> {
    let bad = |e| format!("{e} in superblock (block {b})");
    let g = s.read(b, BlockKind::Superblock).map_err(bad)?;
    let sb = Superblock::decode_with(&g, true).map_err(bad)?;
    if !valid_block_size(u64::from(sb.data_block_size)) {
        return Err(format!(
            "superblock (block {b}): data block size {} sectors is invalid (a multiple of 128 from 128 to 2097152)",
            sb.data_block_size
        ));
    }
    Ok(sb)
}

fn read_held<S: BlockStore>(s: &S, b: u64) -> Result<Superblock, String> {
    let bad = |e| format!("{e} in metadata snapshot superblock (block {b})");
    let g = s.read(b, BlockKind::Superblock).map_err(bad)?;
    if get_u64(&g, 64).map_err(bad)? != 0 || get_u64(&g, 192).map_err(bad)? != 0 {
        return Err(format!("metadata snapshot (block {b}) has space-map roots"));
    }
    Superblock::decode_with(&g, true).map_err(bad)
}

impl<'a, S: BlockStore> Ctx<'a, S> {
    /// A walk over the metadata `sb` describes; Err when its counts
    /// cannot be had (the space maps' sizes are beyond memory).
    fn new(s: &'a S, sb: &Superblock) -> Result<Self, String> {
        let counts = |what, nr| {
            Counts::new(nr).ok_or_else(|| {
                format!("{what} space map of {nr} blocks: no memory for a count of each block")
            })
        };
        Ok(Ctx {
            s,
            meta: counts("metadata", sb.meta_sm.nr_blocks)?,
            data: counts("data", sb.data_sm.nr_blocks)?,
            dev_roots: Vec::new(),
            below: HashMap::new(),
            tally: 0,
            gaps: 0,
            visited: HashSet::new(),
            bad: HashSet::new(),
            nr_meta: sb.meta_sm.nr_blocks,
            time: sb.time,
            label: Label::Top { held: false },
            errors: Vec::new(),
        })
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

#[cfg(test)]
mod tests {
    use super::Label;

    #[test]
    fn ranges_count_in_good_english() {
        let dev = Label::Device {
            dev: 1,
            held: false,
        };
        assert_eq!(dev.range(9, Some(10)), "thin device 1, block 9");
        assert_eq!(dev.range(3, Some(6)), "thin device 1, blocks 3..5");
        assert_eq!(dev.range(0, None), "thin device 1, blocks all");
        let top = Label::Top { held: true };
        assert_eq!(
            top.range(4, Some(5)),
            "mapping tree of the metadata snapshot (devices 4)"
        );
        let ov = Label::Overflow { meta: false };
        assert_eq!(
            ov.range(7, Some(8)),
            "data space map reference counts (block 7)"
        );
    }
}
