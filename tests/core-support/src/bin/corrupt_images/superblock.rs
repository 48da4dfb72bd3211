// SPDX-License-Identifier: GPL-2.0
//! Superblock damage: each field set to an absurd or inconsistent value and
//! resealed, then a wrong checksum and a valid block of another kind at
//! block 0.

use crate::{Ctx, HUGE, META_BLOCKS};
use rthin_core::metadata::superblock::{off, MAGIC};
use rthin_core::pdata::codec::{put_u32, put_u64};
use rthin_core_support::Block;

pub fn cases(ctx: &mut Ctx) {
    let sb_u64 = |o: usize, v: u64| ctx.resealed(0, &move |b: &mut [u8]| put_u64(b, o, v).unwrap());
    let sb_u32 = |o: usize, v: u32| ctx.resealed(0, &move |b: &mut [u8]| put_u32(b, o, v).unwrap());
    let in_use_node = ctx.first("map-leaf");
    let bitmap = ctx.first("dsm-bitmap");
    let sm = |base: usize, field: usize, v: u64| sb_u64(base + field, v);
    let sb_cases: Vec<(&str, Box<Block>)> = vec![
        ("magic+1", sb_u64(off::MAGIC, MAGIC + 1)),
        ("version=0", sb_u32(off::VERSION, 0)),
        ("version=3", sb_u32(off::VERSION, 3)),
        ("data_block_size=0", sb_u32(off::DATA_BLOCK_SIZE, 0)),
        ("data_block_size=127", sb_u32(off::DATA_BLOCK_SIZE, 127)),
        (
            "data_block_size=256(table:128)",
            sb_u32(off::DATA_BLOCK_SIZE, 256),
        ),
        (
            "data_block_size=2^31",
            sb_u32(off::DATA_BLOCK_SIZE, 1 << 31),
        ),
        (
            "metadata_block_size=16",
            sb_u32(off::METADATA_BLOCK_SIZE, 16),
        ),
        (
            "metadata_nr_blocks=2^62",
            sb_u64(off::METADATA_NR_BLOCKS, HUGE),
        ),
        ("metadata_nr_blocks=0", sb_u64(off::METADATA_NR_BLOCKS, 0)),
        ("incompat=2", sb_u32(off::INCOMPAT, 2)),
        ("compat_ro=1", sb_u32(off::COMPAT_RO, 1)),
        ("needs_check", sb_u32(off::FLAGS, 1)),
        ("time=2^32-1", sb_u32(off::TIME, u32::MAX)),
        ("mapping_root=0(superblock)", sb_u64(off::MAPPING_ROOT, 0)),
        (
            "mapping_root=free-block",
            sb_u64(off::MAPPING_ROOT, META_BLOCKS - 1),
        ),
        (
            "mapping_root=past-device",
            sb_u64(off::MAPPING_ROOT, META_BLOCKS + 3),
        ),
        ("mapping_root=2^62", sb_u64(off::MAPPING_ROOT, HUGE)),
        (
            "mapping_root=data-bitmap",
            sb_u64(off::MAPPING_ROOT, bitmap),
        ),
        ("details_root=2^62", sb_u64(off::DETAILS_ROOT, HUGE)),
        (
            "details_root=map-leaf",
            sb_u64(off::DETAILS_ROOT, in_use_node),
        ),
        ("held_root=map-leaf", sb_u64(off::HELD_ROOT, in_use_node)),
        ("held_root=2^62", sb_u64(off::HELD_ROOT, HUGE)),
        ("data_sm.nr_blocks=2^40", sm(off::DATA_SM_ROOT, 0, 1 << 40)),
        ("data_sm.nr_blocks=0", sm(off::DATA_SM_ROOT, 0, 0)),
        ("data_sm.nr_blocks=2^62", sm(off::DATA_SM_ROOT, 0, HUGE)),
        ("data_sm.nr_allocated=2^62", sm(off::DATA_SM_ROOT, 8, HUGE)),
        ("data_sm.bitmap_root=0", sm(off::DATA_SM_ROOT, 16, 0)),
        ("data_sm.bitmap_root=2^62", sm(off::DATA_SM_ROOT, 16, HUGE)),
        (
            "data_sm.ref_count_root=map-leaf",
            sm(off::DATA_SM_ROOT, 24, in_use_node),
        ),
        ("meta_sm.nr_blocks=2^40", sm(off::META_SM_ROOT, 0, 1 << 40)),
        (
            "meta_sm.nr_blocks>device",
            sm(off::META_SM_ROOT, 0, META_BLOCKS * 8),
        ),
        ("meta_sm.nr_blocks=1", sm(off::META_SM_ROOT, 0, 1)),
        ("meta_sm.nr_allocated=2^62", sm(off::META_SM_ROOT, 8, HUGE)),
        ("meta_sm.bitmap_root=0", sm(off::META_SM_ROOT, 16, 0)),
        (
            "meta_sm.bitmap_root=past-device",
            sm(off::META_SM_ROOT, 16, META_BLOCKS + 1),
        ),
        (
            "meta_sm.ref_count_root=2^62",
            sm(off::META_SM_ROOT, 24, HUGE),
        ),
        ("unused-bytes(undetectable)", sb_u64(1000, 0xdead_beef)),
    ];
    for (what, blk) in &sb_cases {
        ctx.out
            .case(1, "superblock", Some((0, &blk[..])), META_BLOCKS, what);
    }
    // Wrong checksum, and a valid block of another kind at block 0.
    let mut blk = ctx.orig(0);
    blk[1] ^= 0x10;
    ctx.out.case(
        1,
        "superblock",
        Some((0, &blk[..])),
        META_BLOCKS,
        "checksum-byte-flipped",
    );
    let node = ctx.orig(in_use_node);
    ctx.out.case(
        1,
        "superblock",
        Some((0, &node[..])),
        META_BLOCKS,
        "node-at-block-0",
    );
}
