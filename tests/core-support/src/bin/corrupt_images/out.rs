// SPDX-License-Identifier: GPL-2.0
//! The output: each case's replacement block in `DIR/p/N` and its line in
//! `DIR/cases`, with the choice of the cases `make check` runs.

use std::fmt::Write as _;

/// The images `make check` runs (tier 1, about 50, for the VM time): one of
/// each kind of damage, by (role, what prefix), on the first block of a role.
const TIER1: &[(&str, &str)] = &[
    ("superblock", "magic"),
    ("superblock", "version=0"),
    ("superblock", "version=3"),
    ("superblock", "data_block_size=0"),
    ("superblock", "data_block_size=256"),
    ("superblock", "metadata_block_size"),
    ("superblock", "incompat"),
    ("superblock", "compat_ro"),
    ("superblock", "needs_check"),
    ("superblock", "time"),
    ("superblock", "mapping_root=0"),
    ("superblock", "mapping_root=free"),
    ("superblock", "mapping_root=2^62"),
    ("superblock", "details_root=map-leaf"),
    ("superblock", "held_root=map-leaf"),
    ("superblock", "data_sm.nr_blocks=2^40"),
    ("superblock", "data_sm.bitmap_root=2^62"),
    ("superblock", "meta_sm.nr_blocks>device"),
    ("superblock", "meta_sm.bitmap_root=past"),
    ("superblock", "unused-bytes"),
    ("superblock", "checksum"),
    ("superblock", "node-at-block-0"),
    ("superblock", "zeroed"),
    ("superblock", "raw-flip"),
    ("map-leaf", "nr_entries=max+1"),
    ("map-leaf", "keys-out-of-order"),
    ("map-leaf", "mapping-past"),
    ("map-leaf", "mapping=2^40-1"),
    ("map-leaf", "mapping-to-free"),
    ("map-leaf", "zeroed"),
    ("map-leaf", "raw-flip"),
    ("map-leaf", "node-written-at-wrong-block"),
    ("map-internal", "nr_entries=2^32-1"),
    ("map-internal", "child-is-self"),
    ("map-internal", "child=past"),
    ("map-internal", "all-children-same"),
    ("map-internal", "resealed-flip"),
    ("top-leaf", "subtree-root=top-root"),
    ("top-leaf", "device-id"),
    ("details-leaf", "mapped_blocks"),
    ("dsm-index-leaf", "nr_free"),
    ("ref-leaf", "overflow-count=0"),
    ("dsm-bitmap", "mapped-data-block"),
    ("dsm-bitmap", "data-block"),
    ("dsm-bitmap", "all-data-counts-0"),
    ("msm-bitmap", "in-use-metadata-block"),
    ("msm-bitmap", "all-metadata-counts-0"),
    ("msm-index", "bitmap-blocknr=2^40"),
    ("device", "device-one-block-short"),
    ("device", "device-ends-before"),
];

pub struct Out {
    pub cases: String,
    pub dir: std::path::PathBuf,
    pub n: usize,
}

impl Out {
    /// One image: `blk` replaces metadata block `at`, the device keeps
    /// `dev_blocks` blocks. `tier` 1 proposes it for tier 1, [`TIER1`] decides.
    pub fn case(
        &mut self,
        tier: u8,
        role: &str,
        at: Option<(u64, &[u8])>,
        dev_blocks: u64,
        what: &str,
    ) {
        let tier1 = TIER1.iter().any(|(r, w)| *r == role && what.starts_with(w));
        let tier = if tier == 1 && tier1 { 1 } else { 2 };
        let b = match at {
            Some((b, data)) => {
                std::fs::write(self.dir.join("p").join(self.n.to_string()), data).unwrap();
                b.to_string()
            }
            None => "-".into(),
        };
        writeln!(
            self.cases,
            "{} {tier} {role} {b} {dev_blocks} {what}",
            self.n
        )
        .unwrap();
        self.n += 1;
    }
}
