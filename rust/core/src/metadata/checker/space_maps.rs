// SPDX-License-Identifier: GPL-2.0
//! The checker's reading of the space maps (index, bitmaps, overflow tree,
//! `nr_allocated`) and the comparison of their counts with the references
//! the walk found.

use crate::metadata::superblock::SmRoot;
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::TreeKind;
use crate::pdata::checksum::BlockKind;
use crate::pdata::space_map::{nr_bitmaps, IndexEntry, ENTRIES_PER_BITMAP, MAX_METADATA_BITMAPS};
use std::collections::BTreeMap;
use std::format;
use std::string::String;

use std::vec::Vec;

use super::{Counts, Ctx, Label, Owners, MAX_LISTED};

impl<S: BlockStore> Ctx<'_, S> {
    /// Reads a space map's actual counts and checks its internal
    /// consistency. None when it could not be read whole (the damage is in
    /// `self.errors`); hint differences go to `warnings`.
    pub(super) fn sm_counts(
        &mut self,
        root: &SmRoot,
        meta: bool,
        warnings: &mut Vec<String>,
    ) -> Option<Counts> {
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
                        "{e} in metadata space map index (block {})",
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
                            .push(format!("metadata space map index entry {i}: {e}"));
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
                            .push(format!("data space map index entry {i}: {e}"));
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
        let Some(mut counts) = Counts::new(root.nr_blocks) else {
            self.errors.push(format!(
                "{what} space map of {} blocks: no memory for a count of each block",
                root.nr_blocks
            ));
            return None;
        };
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
                    self.errors.push(format!("{e} in {bitmap}"));
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
                counts.set(b, c);
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
        if whole && counts.nonzero() != root.nr_allocated {
            // Only the used-block figure of the status line comes from it
            // (thin_restore 0.9.0 can leave it one off; thin_check accepts that).
            warnings.push(format!(
                "{what} space map: nr_allocated {} but {} blocks in use (a running total, not damage)",
                root.nr_allocated,
                counts.nonzero(),
            ));
        }
        whole.then_some(counts)
    }
}

/// Compares the references found with a space map's counts, block by
/// block over the device: leaks (counted once, referenced by nothing) go
/// to `leaks`, every other difference to `errors`. `owners` names the
/// first users of data blocks.
pub(super) fn compare(
    what: &str,
    expected: &Counts,
    actual: &Counts,
    owners: &dyn Fn(&[u64]) -> Owners,
    leaks: &mut Vec<u64>,
    errors: &mut Vec<String>,
) {
    let mut bad = Vec::new();
    let mut n = 0usize;
    for b in expected.differ(actual) {
        let (e, c) = (expected.get(b), actual.get(b));
        let t = match (e, c) {
            _ if e == c => continue,
            (0, 1) => {
                leaks.push(b);
                continue;
            }
            (_, 0) => format!(
                "free in space map but referenced {e} {}",
                if e == 1 { "time" } else { "times" }
            ),
            _ => format!("space map says {c}, references {e}"),
        };
        n += 1;
        if bad.len() < MAX_LISTED {
            bad.push((b, t));
        }
    }
    let listed: Vec<u64> = bad.iter().map(|(b, _)| *b).collect();
    let owner = owners(&listed);
    for (b, t) in bad {
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
