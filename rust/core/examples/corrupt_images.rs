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
#![allow(missing_docs, unreachable_pub)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::{sealed_kind, HostStore, MemMedia, Rng, SharedImage};
use rthin_core::metadata::superblock::{off, Superblock};
use rthin_core::metadata::thin_metadata::{Mapping, ThinMetadata, MAX_DATA_BLOCK};
use rthin_core::pdata::btree::node;
use rthin_core::pdata::checksum::{seal, BLOCK_SIZE};
use rthin_core::pdata::codec::{get_u32, get_u64, put_u32, put_u64};
use rthin_core::pdata::space_map::{bitmap_get, bitmap_set, IndexEntry, INDEX_ENTRIES_OFF};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const META_BLOCKS: u64 = 512;
const DATA_BLOCKS: u64 = 1024;
const BLOCK_SECTORS: u32 = SharedImage::BLOCK_SECTORS;
const THINS: [u64; 5] = SharedImage::THINS;

fn build() -> MemMedia {
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
fn block_roles(m: &MemMedia) -> BTreeMap<u64, &'static str> {
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

struct Out {
    cases: String,
    dir: std::path::PathBuf,
    n: usize,
}

impl Out {
    /// One image: `blk` replaces metadata block `at`, the device keeps
    /// `dev_blocks` blocks. `tier` 1 proposes it for tier 1, [`TIER1`] decides.
    fn case(
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

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: corrupt_images DIR"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("p")).unwrap();
    let base = build();
    std::fs::write(dir.join("base.img"), base.image()).unwrap();
    let roles = block_roles(&base);
    let sb = Superblock::decode(&base.blocks[&0][..]).unwrap();
    let ids: Vec<String> = THINS.iter().map(u64::to_string).collect();
    std::fs::write(
        dir.join("info"),
        format!(
            "META_BLOCKS={META_BLOCKS}\nDATA_BLOCKS={DATA_BLOCKS}\nBLOCK_SECTORS={BLOCK_SECTORS}\nTHINS=\"{}\"\n",
            ids.join(" ")
        ),
    )
    .unwrap();
    let mut out = Out {
        cases: String::new(),
        dir: dir.clone(),
        n: 0,
    };
    let orig = |b: u64| base.blocks[&b].clone();
    let first = |role: &str| {
        *roles
            .iter()
            .find(|(_, r)| **r == role)
            .unwrap_or_else(|| panic!("no {role}"))
            .0
    };
    let resealed = |b: u64, f: &dyn Fn(&mut [u8])| {
        let mut blk = orig(b);
        let kind = sealed_kind(&blk[..], b).expect("in-use block of unknown kind");
        f(&mut blk[..]);
        seal(kind, b, &mut blk[..]).unwrap();
        // A damage the seal undoes (the checksum or block number field) is no damage.
        assert!(blk[..] != orig(b)[..], "block {b}: the damage is a no-op");
        blk
    };

    // ---- superblock fields, resealed ----
    let sb_u64 = |o: usize, v: u64| resealed(0, &move |b: &mut [u8]| put_u64(b, o, v).unwrap());
    let sb_u32 = |o: usize, v: u32| resealed(0, &move |b: &mut [u8]| put_u32(b, o, v).unwrap());
    let huge = 1u64 << 62;
    let in_use_node = first("map-leaf");
    let bitmap = first("dsm-bitmap");
    let sm = |base: usize, field: usize, v: u64| sb_u64(base + field, v);
    let sb_cases: Vec<(&str, Box<[u8; BLOCK_SIZE]>)> = vec![
        (
            "magic+1",
            sb_u64(off::MAGIC, rthin_core::metadata::superblock::MAGIC + 1),
        ),
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
            sb_u64(off::METADATA_NR_BLOCKS, huge),
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
        ("mapping_root=2^62", sb_u64(off::MAPPING_ROOT, huge)),
        (
            "mapping_root=data-bitmap",
            sb_u64(off::MAPPING_ROOT, bitmap),
        ),
        ("details_root=2^62", sb_u64(off::DETAILS_ROOT, huge)),
        (
            "details_root=map-leaf",
            sb_u64(off::DETAILS_ROOT, in_use_node),
        ),
        ("held_root=map-leaf", sb_u64(off::HELD_ROOT, in_use_node)),
        ("held_root=2^62", sb_u64(off::HELD_ROOT, huge)),
        ("data_sm.nr_blocks=2^40", sm(off::DATA_SM_ROOT, 0, 1 << 40)),
        ("data_sm.nr_blocks=0", sm(off::DATA_SM_ROOT, 0, 0)),
        ("data_sm.nr_blocks=2^62", sm(off::DATA_SM_ROOT, 0, huge)),
        ("data_sm.nr_allocated=2^62", sm(off::DATA_SM_ROOT, 8, huge)),
        ("data_sm.bitmap_root=0", sm(off::DATA_SM_ROOT, 16, 0)),
        ("data_sm.bitmap_root=2^62", sm(off::DATA_SM_ROOT, 16, huge)),
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
        ("meta_sm.nr_allocated=2^62", sm(off::META_SM_ROOT, 8, huge)),
        ("meta_sm.bitmap_root=0", sm(off::META_SM_ROOT, 16, 0)),
        (
            "meta_sm.bitmap_root=past-device",
            sm(off::META_SM_ROOT, 16, META_BLOCKS + 1),
        ),
        (
            "meta_sm.ref_count_root=2^62",
            sm(off::META_SM_ROOT, 24, huge),
        ),
        ("unused-bytes(undetectable)", sb_u64(1000, 0xdead_beef)),
    ];
    for (what, blk) in &sb_cases {
        out.case(1, "superblock", Some((0, &blk[..])), META_BLOCKS, what);
    }
    // Wrong checksum, and a valid block of another kind at block 0.
    let mut blk = orig(0);
    blk[1] ^= 0x10;
    out.case(
        1,
        "superblock",
        Some((0, &blk[..])),
        META_BLOCKS,
        "checksum-byte-flipped",
    );
    out.case(
        1,
        "superblock",
        Some((0, &orig(in_use_node)[..])),
        META_BLOCKS,
        "node-at-block-0",
    );

    // ---- B-tree nodes of every role, resealed ----
    for (&b, &role) in roles
        .iter()
        .filter(|(_, r)| r.contains("internal") || r.contains("leaf"))
    {
        let blk = orig(b);
        let h = node::check_structure(&blk[..]).map(|_| ()).and_then(|_| {
            let vs = get_u32(&blk[..], 24)? as usize;
            node::check(&blk[..], vs)
        });
        let h = h.unwrap();
        // Proposed for tier 1: the first node of each role.
        let tier = if first(role) == b { 1 } else { 2 };
        let mut c = |what: &str, f: &dyn Fn(&mut [u8])| {
            let blk = resealed(b, f);
            out.case(tier, role, Some((b, &blk[..])), META_BLOCKS, what);
        };
        let (max, nr) = (h.max_entries as u32, h.nr_entries as u32);
        c("nr_entries=max+1", &|x| put_u32(x, 16, max + 1).unwrap());
        c("nr_entries=2^32-1", &|x| put_u32(x, 16, u32::MAX).unwrap());
        c("max_entries=1", &|x| put_u32(x, 20, 1).unwrap());
        c("value_size=4096", &|x| put_u32(x, 24, 4096).unwrap());
        c("flags=3", &|x| put_u32(x, 4, 3).unwrap());
        c(
            if h.leaf {
                "leaf-as-internal"
            } else {
                "internal-as-leaf"
            },
            &|x| put_u32(x, 4, if h.leaf { node::INTERNAL } else { node::LEAF }).unwrap(),
        );
        if nr >= 2 {
            c("keys-out-of-order", &|x| {
                let (k0, k1) = (get_u64(x, 32).unwrap(), get_u64(x, 40).unwrap());
                put_u64(x, 32, k1).unwrap();
                put_u64(x, 40, k0).unwrap();
            });
            c("duplicate-key", &|x| {
                put_u64(x, 40, get_u64(x, 32).unwrap()).unwrap()
            });
        }
        if !h.leaf {
            let h2 = h;
            c("child-is-self(cycle)", &|x| {
                node::set_key(x, &h2, 0, 0)
                    .and(put_u64(x, h2.val_off(0), b))
                    .unwrap()
            });
            c("child=0(superblock)", &|x| {
                put_u64(x, h2.val_off(0), 0).unwrap()
            });
            c("child=past-device", &|x| {
                put_u64(x, h2.val_off(0), 1 << 40).unwrap()
            });
            c("all-children-same(dag)", &|x| {
                let v = get_u64(x, h2.val_off(0)).unwrap();
                for i in 0..h2.nr_entries {
                    put_u64(x, h2.val_off(i), v).unwrap();
                }
            });
        }
        match role {
            "top-leaf" => {
                let root = sb.mapping_root;
                c("subtree-root=top-root(cycle)", &|x| {
                    put_u64(x, h.val_off(0), root).unwrap()
                });
                c("subtree-root=details-root", &|x| {
                    put_u64(x, h.val_off(0), sb.details_root).unwrap()
                });
                c("device-id=2^24", &|x| {
                    node::set_key(x, &h, nr as usize - 1, 1 << 24).unwrap()
                });
            }
            "map-leaf" => {
                let set = |x: &mut [u8], m: Mapping| put_u64(x, h.val_off(0), m.pack()).unwrap();
                let t = Mapping::unpack(get_u64(&blk[..], h.val_off(0)).unwrap()).time;
                c("mapping-past-data-device", &|x| {
                    set(
                        x,
                        Mapping {
                            data_block: DATA_BLOCKS + 5,
                            time: t,
                        },
                    )
                });
                c("mapping=2^40-1", &|x| {
                    set(
                        x,
                        Mapping {
                            data_block: MAX_DATA_BLOCK,
                            time: t,
                        },
                    )
                });
                c("mapping-to-free-data-block", &|x| {
                    set(
                        x,
                        Mapping {
                            data_block: DATA_BLOCKS - 1,
                            time: t,
                        },
                    )
                });
                c("mapping-time-in-future", &|x| {
                    set(
                        x,
                        Mapping {
                            data_block: Mapping::unpack(get_u64(x, h.val_off(0)).unwrap())
                                .data_block,
                            time: 0xff_ffff,
                        },
                    )
                });
            }
            "details-leaf" => {
                c("mapped_blocks=2^62", &|x| {
                    put_u64(x, h.val_off(0), huge).unwrap()
                });
                c("creation_time=2^32-1", &|x| {
                    put_u32(x, h.val_off(0) + 16, u32::MAX).unwrap()
                });
            }
            "dsm-index-leaf" => {
                c("bitmap-blocknr=map-leaf", &|x| {
                    put_u64(x, h.val_off(0), in_use_node).unwrap()
                });
                c("nr_free=2^32-1", &|x| {
                    put_u32(x, h.val_off(0) + 8, u32::MAX).unwrap()
                });
            }
            "ref-leaf" => c("overflow-count=0", &|x| {
                put_u32(x, h.val_off(0), 0).unwrap()
            }),
            _ => {}
        }
    }

    // ---- space-map bitmaps and index, resealed ----
    let data_map = {
        let md = ThinMetadata::open(HostStore::new(base.snapshot()), None).unwrap();
        let mut used = Vec::new();
        md.for_each_mapping(0, &mut |_, m| {
            used.push(m.data_block);
            Ok(())
        })
        .unwrap();
        used
    };
    let dsm = first("dsm-bitmap");
    let set_count =
        |b: u64, e: u64, v: u32| resealed(b, &move |x: &mut [u8]| bitmap_set(x, e, v).unwrap());
    for (i, &e) in data_map.iter().step_by(97).enumerate() {
        let tier = if i < 2 { 1 } else { 2 };
        let was = bitmap_get(&orig(dsm)[..], e).unwrap();
        out.case(
            tier,
            "dsm-bitmap",
            Some((dsm, &set_count(dsm, e, 0)[..])),
            META_BLOCKS,
            &format!("mapped-data-block-{e}-count-0(was-{was})"),
        );
        // 3 means "see the overflow tree": only a damage below 3.
        if was < 3 {
            out.case(
                tier,
                "dsm-bitmap",
                Some((dsm, &set_count(dsm, e, 3)[..])),
                META_BLOCKS,
                &format!("data-block-{e}-count-3-no-overflow"),
            );
        }
    }
    out.case(
        1,
        "dsm-bitmap",
        Some((dsm, &resealed(dsm, &|x| x[16..].fill(0))[..])),
        META_BLOCKS,
        "all-data-counts-0",
    );
    let msm = first("msm-bitmap");
    for (i, &b) in roles.keys().filter(|b| **b != 0).step_by(5).enumerate() {
        let tier = if i < 2 { 1 } else { 2 };
        out.case(
            tier,
            "msm-bitmap",
            Some((msm, &set_count(msm, b, 0)[..])),
            META_BLOCKS,
            &format!("in-use-metadata-block-{b}-count-0"),
        );
    }
    out.case(
        1,
        "msm-bitmap",
        Some((msm, &resealed(msm, &|x| x[16..].fill(0))[..])),
        META_BLOCKS,
        "all-metadata-counts-0",
    );
    let mi = first("msm-index");
    out.case(
        1,
        "msm-index",
        Some((
            mi,
            &resealed(mi, &|x| put_u64(x, INDEX_ENTRIES_OFF, 0).unwrap())[..],
        )),
        META_BLOCKS,
        "bitmap-blocknr=0",
    );
    out.case(
        1,
        "msm-index",
        Some((
            mi,
            &resealed(mi, &|x| put_u64(x, INDEX_ENTRIES_OFF, 1 << 40).unwrap())[..],
        )),
        META_BLOCKS,
        "bitmap-blocknr=2^40",
    );
    out.case(
        1,
        "msm-index",
        Some((
            mi,
            &resealed(mi, &|x| {
                put_u32(x, INDEX_ENTRIES_OFF + 8, u32::MAX).unwrap()
            })[..],
        )),
        META_BLOCKS,
        "nr_free=2^32-1",
    );

    // ---- raw damage to every in-use block: wrong checksums ----
    let big = std::env::var("RTHIN_CORRUPT_FLIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut rng = Rng::new(8101);
    for (&b, &role) in roles.iter() {
        // Proposed for tier 1: the first block of each role.
        let tier = if first(role) == b { 1 } else { 2 };
        let zero = vec![0u8; BLOCK_SIZE];
        // An all-zero superblock means "format a new pool" to dm-thin.
        let what = if b == 0 {
            "zeroed(formats-a-new-pool)"
        } else {
            "zeroed"
        };
        out.case(tier, role, Some((b, &zero)), META_BLOCKS, what);
        for f in 0..big {
            let mut blk = orig(b);
            let byte = rng.below(BLOCK_SIZE as u64) as usize;
            let bit = rng.below(8);
            blk[byte] ^= 1 << bit;
            let tier = if f == 0 { tier } else { 2 };
            out.case(
                tier,
                role,
                Some((b, &blk[..])),
                META_BLOCKS,
                &format!("raw-flip-byte-{byte}-bit-{bit}"),
            );
            // The same flip resealed: the content is wrong but the checksum right.
            let kind = sealed_kind(&orig(b)[..], b).expect("in-use block of unknown kind");
            seal(kind, b, &mut blk[..]).unwrap();
            if blk[..] != orig(b)[..] {
                out.case(
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
    let leaves: Vec<u64> = roles
        .iter()
        .filter(|(_, r)| **r == "map-leaf")
        .map(|(b, _)| *b)
        .collect();
    out.case(
        1,
        "map-leaf",
        Some((leaves[1], &orig(leaves[0])[..])),
        META_BLOCKS,
        "node-written-at-wrong-block",
    );

    // ---- truncated metadata devices ----
    let last = *roles.keys().last().unwrap();
    for (tier, blocks, what) in [
        (1, 1, "device=1-block"),
        (1, last, "device-ends-before-last-in-use-block"),
        (1, META_BLOCKS - 1, "device-one-block-short"),
        (2, META_BLOCKS / 2, "device-half"),
        (2, 16, "device=16-blocks"),
    ] {
        out.case(tier, "device", None, blocks, what);
    }
    std::fs::write(dir.join("cases"), &out.cases).unwrap();
    let t1 = out
        .cases
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("1"))
        .count();
    eprintln!(
        "corrupt_images: {} images ({t1} in tier 1), {} in-use blocks, in {}",
        out.n,
        roles.len(),
        dir.display()
    );
}
