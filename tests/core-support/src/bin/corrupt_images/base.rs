// SPDX-License-Identifier: GPL-2.0
//! The base image every case damages, and the role of each of its in-use
//! blocks (the cases are chosen and named by role).

use crate::{DATA_BLOCKS, META_BLOCKS};
use rthin_core::metadata::superblock::Superblock;
use rthin_core::pdata::btree::node;
use rthin_core::pdata::codec::get_u64;
use rthin_core::pdata::space_map::{IndexEntry, INDEX_ENTRIES_OFF};
use rthin_core_support::{MemMedia, SharedImage};
use std::collections::BTreeMap;

pub fn build() -> MemMedia {
    SharedImage {
        meta_blocks: META_BLOCKS,
        data_blocks: DATA_BLOCKS,
        // Enough mappings for internal nodes in the device's subtree.
        origin_blocks: 600,
        breaks_per_device: 4,
        break_from: 500,
        break_span: 90,
        scatter_mappings: 150,
        scatter_span: 1024,
        seed: 81,
    }
    .build()
}

/// Records `b` and the nodes below it with their roles; pushes the leaves'
/// first 8 value bytes (subtree roots, bitmap locations) to `leaf_values`.
fn walk(
    m: &MemMedia,
    r: &mut BTreeMap<u64, &'static str>,
    b: u64,
    vs: usize,
    roles: (&'static str, &'static str),
    leaf_values: &mut Vec<u64>,
) {
    let blk = &m.blocks[&b];
    let h = node::check(&blk[..], vs).unwrap();
    r.entry(b).or_insert(if h.leaf { roles.1 } else { roles.0 });
    for i in 0..h.nr_entries {
        let v = node::value(&blk[..], &h, i).unwrap();
        if !h.leaf {
            walk(m, r, get_u64(v, 0).unwrap(), vs, roles, leaf_values);
        } else if vs >= 8 {
            leaf_values.push(get_u64(v, 0).unwrap());
        }
    }
}

/// Every block the committed metadata references, with its role.
pub fn block_roles(m: &MemMedia) -> BTreeMap<u64, &'static str> {
    let mut r = BTreeMap::new();
    let sb = Superblock::decode(&m.blocks[&0][..]).unwrap();
    r.insert(0, "superblock");
    r.insert(sb.held_root, "held-superblock");
    let held = Superblock::decode(&m.blocks[&sb.held_root][..]).unwrap();
    let mut subtrees = Vec::new();
    for root in [sb.mapping_root, held.mapping_root] {
        walk(
            m,
            &mut r,
            root,
            8,
            ("top-internal", "top-leaf"),
            &mut subtrees,
        );
    }
    for s in subtrees {
        walk(
            m,
            &mut r,
            s,
            8,
            ("map-internal", "map-leaf"),
            &mut Vec::new(),
        );
    }
    walk(
        m,
        &mut r,
        sb.details_root,
        24,
        ("details-internal", "details-leaf"),
        &mut Vec::new(),
    );
    let mut bitmaps = Vec::new();
    walk(
        m,
        &mut r,
        sb.data_sm.bitmap_root,
        16,
        ("dsm-index-internal", "dsm-index-leaf"),
        &mut bitmaps,
    );
    for b in bitmaps {
        r.entry(b).or_insert("dsm-bitmap");
    }
    for root in [sb.data_sm.ref_count_root, sb.meta_sm.ref_count_root] {
        walk(
            m,
            &mut r,
            root,
            4,
            ("ref-internal", "ref-leaf"),
            &mut Vec::new(),
        );
    }
    r.insert(sb.meta_sm.bitmap_root, "msm-index");
    let idx = &m.blocks[&sb.meta_sm.bitmap_root];
    let e = IndexEntry::decode(&idx[INDEX_ENTRIES_OFF..]).unwrap();
    r.insert(e.blocknr, "msm-bitmap");
    r
}
