// SPDX-License-Identifier: GPL-2.0
//! Corrupted metadata images for the VM test `tests/vm/81-corrupt-metadata.sh`
//! (host only; `scripts/check.sh` runs it before building the initramfs).
//!
//! `corrupt_images DIR` writes a base pool image built by the core (thins,
//! snapshots with shared subtrees, overflow reference counts, a held metadata
//! snapshot) and a list of damages, each one metadata block replaced by
//! `DIR/p/N` (4 KiB) and/or the device cut short:
//! * `DIR/base.img` — the metadata device, `META_BLOCKS` blocks;
//! * `DIR/info` — shell variables: block counts and sizes, the thin ids;
//! * `DIR/cases` — one line per image: `N TIER ROLE BLOCK DEVICE_BLOCKS WHAT`
//!   (`BLOCK` `-` for no replaced block; `TIER` 1 runs in `make check`, 2 only
//!   in the opt-in large run).
//!
//! Raw damage (bit flips, zeroed blocks, a block written at the wrong place)
//! leaves the checksum wrong. Structural damage (cycles, absurd counts and
//! sizes, mappings past the data device, zero reference counts) is resealed
//! with a valid checksum, so only the target's validation can catch it.
//!
//! One module per damage family, run in this order (a case's number names its
//! image, so the order is part of the output): `superblock`, `btree`,
//! `space_map`, `raw`. `base` builds the image and names the role of each of
//! its in-use blocks; `out` writes the cases and chooses tier 1.
#![allow(missing_docs, unreachable_pub)]

mod base;
mod btree;
mod out;
mod raw;
mod space_map;
mod superblock;

use out::Out;
use rthin_core::pdata::checksum::seal;
use rthin_core_support::{sealed_kind, Block, MemMedia, SharedImage};
use std::collections::BTreeMap;

const META_BLOCKS: u64 = 512;
const DATA_BLOCKS: u64 = 1024;
const BLOCK_SECTORS: u32 = SharedImage::BLOCK_SECTORS;
const THINS: [u64; 5] = SharedImage::THINS;
/// An absurd block number, count or size.
const HUGE: u64 = 1 << 62;

/// What the damage families share: the undamaged image, the roles of its
/// in-use blocks and the cases written so far.
struct Ctx {
    base: MemMedia,
    /// Every block the committed metadata references, with its role.
    roles: BTreeMap<u64, &'static str>,
    out: Out,
}

impl Ctx {
    /// Block `b` of the undamaged image.
    fn orig(&self, b: u64) -> Box<Block> {
        self.base.blocks[&b].clone()
    }

    /// The lowest-numbered block of `role`.
    fn first(&self, role: &str) -> u64 {
        *self
            .roles
            .iter()
            .find(|(_, r)| **r == role)
            .unwrap_or_else(|| panic!("no {role}"))
            .0
    }

    /// Block `b` with the damage `f`, resealed with a valid checksum.
    fn resealed(&self, b: u64, f: &dyn Fn(&mut [u8])) -> Box<Block> {
        let mut blk = self.orig(b);
        let kind = sealed_kind(&blk[..], b).expect("in-use block of unknown kind");
        f(&mut blk[..]);
        seal(kind, b, &mut blk[..]).unwrap();
        // A damage the seal undoes (the checksum or block number field) is no damage.
        assert!(
            blk[..] != self.orig(b)[..],
            "block {b}: the damage is a no-op"
        );
        blk
    }

    /// One image: block `b` with the damage `f`, resealed, on a whole device.
    fn resealed_case(&mut self, tier: u8, role: &str, b: u64, what: &str, f: &dyn Fn(&mut [u8])) {
        let blk = self.resealed(b, f);
        self.out
            .case(tier, role, Some((b, &blk[..])), META_BLOCKS, what);
    }
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: corrupt_images DIR"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("p")).unwrap();
    let base = base::build();
    std::fs::write(dir.join("base.img"), base.image()).unwrap();
    let roles = base::block_roles(&base);
    let ids: Vec<String> = THINS.iter().map(u64::to_string).collect();
    std::fs::write(
        dir.join("info"),
        format!(
            "META_BLOCKS={META_BLOCKS}\nDATA_BLOCKS={DATA_BLOCKS}\nBLOCK_SECTORS={BLOCK_SECTORS}\nTHINS=\"{}\"\n",
            ids.join(" ")
        ),
    )
    .unwrap();
    let mut ctx = Ctx {
        base,
        roles,
        out: Out {
            cases: String::new(),
            dir: dir.clone(),
            n: 0,
        },
    };
    superblock::cases(&mut ctx);
    btree::cases(&mut ctx);
    space_map::cases(&mut ctx);
    raw::cases(&mut ctx);
    raw::truncated_devices(&mut ctx);

    let out = &ctx.out;
    std::fs::write(dir.join("cases"), &out.cases).unwrap();
    let t1 = out
        .cases
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("1"))
        .count();
    eprintln!(
        "corrupt_images: {} images ({t1} in tier 1), {} in-use blocks, in {}",
        out.n,
        ctx.roles.len(),
        dir.display()
    );
}
