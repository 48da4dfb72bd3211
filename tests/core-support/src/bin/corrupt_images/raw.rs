// SPDX-License-Identifier: GPL-2.0
//! Raw damage to every in-use block (zeroed, random bit flips: the checksum
//! wrong; the same flips resealed), a valid node at the wrong block, and
//! metadata devices cut short.

use crate::{Ctx, META_BLOCKS};
use rthin_core::pdata::checksum::{seal, BLOCK_SIZE};
use rthin_core_support::{sealed_kind, Rng};

pub fn cases(ctx: &mut Ctx) {
    let big = std::env::var("RTHIN_CORRUPT_FLIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut rng = Rng::new(8101);
    for (&b, &role) in ctx.roles.iter() {
        // Proposed for tier 1: the first block of each role.
        let tier = if ctx.first(role) == b { 1 } else { 2 };
        let zero = vec![0u8; BLOCK_SIZE];
        // An all-zero superblock means "format a new pool" to dm-thin.
        let what = if b == 0 {
            "zeroed(formats-a-new-pool)"
        } else {
            "zeroed"
        };
        ctx.out
            .case(tier, role, Some((b, &zero)), META_BLOCKS, what);
        for f in 0..big {
            let mut blk = ctx.orig(b);
            let byte = rng.below(BLOCK_SIZE as u64) as usize;
            let bit = rng.below(8);
            blk[byte] ^= 1 << bit;
            let tier = if f == 0 { tier } else { 2 };
            ctx.out.case(
                tier,
                role,
                Some((b, &blk[..])),
                META_BLOCKS,
                &format!("raw-flip-byte-{byte}-bit-{bit}"),
            );
            // The same flip resealed: the content is wrong but the checksum right.
            let kind = sealed_kind(&ctx.orig(b)[..], b).expect("in-use block of unknown kind");
            seal(kind, b, &mut blk[..]).unwrap();
            if blk[..] != ctx.orig(b)[..] {
                ctx.out.case(
                    tier,
                    role,
                    Some((b, &blk[..])),
                    META_BLOCKS,
                    &format!("resealed-flip-byte-{byte}-bit-{bit}"),
                );
            }
        }
    }
    // A valid node copied to another in-use location: its block number is wrong.
    let leaves: Vec<u64> = ctx
        .roles
        .iter()
        .filter(|(_, r)| **r == "map-leaf")
        .map(|(b, _)| *b)
        .collect();
    let node = ctx.orig(leaves[0]);
    ctx.out.case(
        1,
        "map-leaf",
        Some((leaves[1], &node[..])),
        META_BLOCKS,
        "node-written-at-wrong-block",
    );
}

/// Devices cut short, no block replaced.
pub fn truncated_devices(ctx: &mut Ctx) {
    let last = *ctx.roles.keys().last().unwrap();
    for (tier, blocks, what) in [
        (1, 1, "device=1-block"),
        (1, last, "device-ends-before-last-in-use-block"),
        (1, META_BLOCKS - 1, "device-one-block-short"),
        (2, META_BLOCKS / 2, "device-half"),
        (2, 16, "device=16-blocks"),
    ] {
        ctx.out.case(tier, "device", None, blocks, what);
    }
}
