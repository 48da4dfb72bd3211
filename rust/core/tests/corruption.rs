// SPDX-License-Identifier: GPL-2.0
//! Corruption: deterministic bit flips over every in-use block of an image
//! with snapshots, shared subtrees, overflow counts and a held metadata
//! snapshot. Raw flips must be reported as corruption by some operation that
//! reads the block; flips whose checksum is then recomputed (so structural
//! validation is exercised) may succeed or fail, but nothing may panic or hang.

use rthin_core::core_error::CoreError;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core::pdata::checksum::{seal, verify, BlockKind};
use rthin_core_support::{sealed_kind, HostStore, MemMedia, Rng, SharedImage};
use std::panic::{catch_unwind, AssertUnwindSafe};

const DATA: u64 = 400;

fn build() -> MemMedia {
    let media = SharedImage {
        meta_blocks: 160,
        data_blocks: DATA,
        origin_blocks: 300,
        breaks_per_device: 5,
        break_from: 80,
        break_span: 40,
        scatter_mappings: 8,
        scatter_span: 200,
        seed: 5,
    }
    .build();
    let md = ThinMetadata::open(
        HostStore::new(media.snapshot()),
        Some(SharedImage::BLOCK_SECTORS),
    )
    .unwrap();
    assert!(
        (0..DATA).any(|b| md.data_block_count(b).unwrap() >= 3),
        "no data overflow count"
    );
    assert!(
        (0..160).any(|b| md.metadata_block_count(b).unwrap_or(0) >= 3),
        "no metadata overflow count"
    );
    media
}

/// Runs reads and writes over the image; returns every error seen.
fn exercise(media: MemMedia) -> Vec<CoreError> {
    let mut errs = Vec::new();
    let mut md = match ThinMetadata::open(HostStore::new(media), Some(SharedImage::BLOCK_SECTORS)) {
        Ok(m) => m,
        Err(e) => return vec![e],
    };
    let mut devs = Vec::new();
    if let Err(e) = md.for_each_device(&mut |d, _| {
        devs.push(d);
        Ok(())
    }) {
        errs.push(e);
    }
    for &d in &devs {
        if let Err(e) = md.for_each_mapping(d, &mut |_, _| Ok(())) {
            errs.push(e);
        }
        for r in [
            md.highest_mapped(d).err(),
            md.lookup(d, 100).err(),
            md.mapping_is_shared(d, 3).err(),
        ] {
            errs.extend(r);
        }
    }
    for b in 0..DATA {
        errs.extend(md.data_block_count(b).err());
    }
    for b in 1..160 {
        errs.extend(md.metadata_block_count(b).err());
    }
    let w = |md: &mut ThinMetadata<_>| -> Result<(), CoreError> {
        md.create_thin(50)?;
        for &d in devs.iter().take(1) {
            let b = md.alloc_data_block()?;
            md.insert_mapping(d, 255, b)?;
        }
        if let Some(&d) = devs.first() {
            md.delete(d)?;
        }
        md.release_metadata_snap()?;
        md.commit()
    };
    if let Err(e) = w(&mut md) {
        errs.push(e);
        md.abort().unwrap();
    }
    errs
}

fn bit_flips(part: u64, parts: u64) {
    let good = build();
    assert!(
        exercise(good.snapshot()).is_empty(),
        "clean image reports errors"
    );
    let mut in_use: Vec<u64> = good.blocks.keys().copied().collect();
    in_use.sort_unstable();
    // Only blocks the committed state references (free blocks may hold stale data).
    let probe = ThinMetadata::open(HostStore::new(good.snapshot()), None).unwrap();
    in_use.retain(|&b| b == 0 || probe.metadata_block_count(b).unwrap() > 0);
    drop(probe);
    let mut rng = Rng::new(99 + part);
    let (mut raw, mut resealed, mut detected) = (0, 0, 0);
    for &b in in_use.iter().filter(|b| **b % parts == part) {
        let orig = good.blocks[&b].clone();
        let kind = sealed_kind(&orig[..], b).expect("in-use block of unknown kind");
        // RTHIN_FLIPS raises the number of flips per block for soak runs.
        let flips: u64 = std::env::var("RTHIN_FLIPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(40);
        for i in 0..flips {
            let mut m = good.snapshot();
            let blk = m.blocks.get_mut(&b).unwrap();
            // Header bits, entry-area bits and anywhere in the block.
            let byte = match i % 3 {
                0 => rng.below(40),
                1 => rng.below(1024),
                _ => rng.below(4096),
            } as usize;
            blk[byte] ^= 1 << rng.below(8);
            let reseal = i >= 8;
            if reseal {
                seal(kind, b, &mut blk[..]).unwrap();
                if blk[..] == orig[..] {
                    continue;
                }
            }
            let ctx = format!("block {b} ({kind:?}) byte {byte} resealed {reseal}");
            let errs = catch_unwind(AssertUnwindSafe(|| exercise(m)))
                .unwrap_or_else(|_| panic!("{ctx}: panicked"));
            if reseal {
                resealed += 1;
            } else {
                raw += 1;
                assert!(
                    errs.iter().any(|e| matches!(e, CoreError::Corrupt(_))),
                    "{ctx}: raw flip not reported as corruption: {errs:?}"
                );
            }
            if errs
                .iter()
                .any(|e| matches!(e, CoreError::Corrupt(_) | CoreError::Unsupported))
            {
                detected += 1;
            }
        }
    }
    eprintln!(
        "bit flips (part {part}): {} in-use blocks, {raw} raw images (all detected), {resealed} resealed images ({detected} total reported corrupt)",
        in_use.len()
    );
    assert!(raw + resealed > 250);
}

#[test]
fn bit_flips_even_blocks() {
    bit_flips(0, 2);
}

#[test]
fn bit_flips_odd_blocks() {
    bit_flips(1, 2);
}

/// A corrupt internal node whose children all point at the same subtree must
/// not make walks explode: the visit budget (metadata device size) stops them.
#[test]
fn dag_fanout_is_bounded() {
    use rthin_core::pdata::btree::node;
    let mut md = ThinMetadata::format(HostStore::new(MemMedia::new(64)), 128, 1000).unwrap();
    md.create_thin(0).unwrap();
    for v in 0..300 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(0, v, b).unwrap();
    }
    md.commit().unwrap();
    let mut media = md.into_store().media.snapshot();
    // Find the device tree's internal root: the only internal node with leaf children.
    let mut target = None;
    for (&b, blk) in media.blocks.iter() {
        if verify(BlockKind::Node, b, &blk[..]).is_ok() {
            if let Ok(h) = node::check(&blk[..], 8) {
                if !h.leaf && h.nr_entries >= 2 {
                    target = Some((b, node::value_u64(&blk[..], &h, 0).unwrap()));
                }
            }
        }
    }
    let (root, leaf) = target.expect("no internal node");
    {
        let blk = media.blocks.get_mut(&root).unwrap();
        let mut h = node::check(&blk[..], 8).unwrap();
        node::set_nr(&mut blk[..], &mut h, 0).unwrap();
        for i in 0..200 {
            node::insert_at(&mut blk[..], &mut h, i, i as u64 * 2, &leaf.to_le_bytes()).unwrap();
        }
        seal(BlockKind::Node, root, &mut blk[..]).unwrap();
    }
    let md = ThinMetadata::open(HostStore::new(media), None).unwrap();
    let r = md.for_each_mapping(0, &mut |_, _| Ok(()));
    assert_eq!(
        r,
        Err(CoreError::Corrupt(
            rthin_core::core_error::Corruption::TooDeep
        ))
    );
}
