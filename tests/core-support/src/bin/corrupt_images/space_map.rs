// SPDX-License-Identifier: GPL-2.0
//! Space-map damage, resealed: reference counts in the data and metadata
//! bitmaps that disagree with what the trees use, and a metadata space-map
//! index pointing at the wrong bitmap.

use crate::Ctx;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core::pdata::codec::{put_u32, put_u64};
use rthin_core::pdata::space_map::{bitmap_get, bitmap_set, INDEX_ENTRIES_OFF};
use rthin_core_support::HostStore;

pub fn cases(ctx: &mut Ctx) {
    let data_map = {
        let md = ThinMetadata::open(HostStore::new(ctx.base.snapshot()), None).unwrap();
        let mut used = Vec::new();
        md.for_each_mapping(0, &mut |_, m| {
            used.push(m.data_block);
            Ok(())
        })
        .unwrap();
        used
    };
    let dsm = ctx.first("dsm-bitmap");
    let set_count = |e: u64, v: u32| move |x: &mut [u8]| bitmap_set(x, e, v).unwrap();
    for (i, &e) in data_map.iter().step_by(97).enumerate() {
        let tier = if i < 2 { 1 } else { 2 };
        let was = bitmap_get(&ctx.orig(dsm)[..], e).unwrap();
        ctx.resealed_case(
            tier,
            "dsm-bitmap",
            dsm,
            &format!("mapped-data-block-{e}-count-0(was-{was})"),
            &set_count(e, 0),
        );
        // 3 means "see the overflow tree": only a damage below 3.
        if was < 3 {
            ctx.resealed_case(
                tier,
                "dsm-bitmap",
                dsm,
                &format!("data-block-{e}-count-3-no-overflow"),
                &set_count(e, 3),
            );
        }
    }
    ctx.resealed_case(1, "dsm-bitmap", dsm, "all-data-counts-0", &|x| {
        x[16..].fill(0)
    });

    let msm = ctx.first("msm-bitmap");
    let in_use: Vec<u64> = ctx.roles.keys().copied().filter(|b| *b != 0).collect();
    for (i, &b) in in_use.iter().step_by(5).enumerate() {
        let tier = if i < 2 { 1 } else { 2 };
        ctx.resealed_case(
            tier,
            "msm-bitmap",
            msm,
            &format!("in-use-metadata-block-{b}-count-0"),
            &set_count(b, 0),
        );
    }
    ctx.resealed_case(1, "msm-bitmap", msm, "all-metadata-counts-0", &|x| {
        x[16..].fill(0)
    });

    let mi = ctx.first("msm-index");
    ctx.resealed_case(1, "msm-index", mi, "bitmap-blocknr=0", &|x| {
        put_u64(x, INDEX_ENTRIES_OFF, 0).unwrap()
    });
    ctx.resealed_case(1, "msm-index", mi, "bitmap-blocknr=2^40", &|x| {
        put_u64(x, INDEX_ENTRIES_OFF, 1 << 40).unwrap()
    });
    ctx.resealed_case(1, "msm-index", mi, "nr_free=2^32-1", &|x| {
        put_u32(x, INDEX_ENTRIES_OFF + 8, u32::MAX).unwrap()
    });
}
