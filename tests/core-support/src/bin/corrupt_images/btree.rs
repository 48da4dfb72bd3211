// SPDX-License-Identifier: GPL-2.0
//! B-tree node damage, resealed, on every node of every role: header fields,
//! key order, children that make cycles or point past the device, and
//! values each kind of tree gets wrong in its own way.

use crate::{Ctx, DATA_BLOCKS, HUGE};
use rthin_core::metadata::superblock::Superblock;
use rthin_core::metadata::thin_metadata::{Mapping, MAX_DATA_BLOCK};
use rthin_core::pdata::btree::node;
use rthin_core::pdata::codec::{get_u32, get_u64, put_u32, put_u64};

pub fn cases(ctx: &mut Ctx) {
    let sb = Superblock::decode(&ctx.orig(0)[..]).unwrap();
    let in_use_node = ctx.first("map-leaf");
    let nodes: Vec<(u64, &'static str)> = ctx
        .roles
        .iter()
        .filter(|(_, r)| r.contains("internal") || r.contains("leaf"))
        .map(|(&b, &role)| (b, role))
        .collect();
    for (b, role) in nodes {
        let blk = ctx.orig(b);
        let h = node::check_structure(&blk[..]).map(|_| ()).and_then(|_| {
            let vs = get_u32(&blk[..], 24)? as usize;
            node::check(&blk[..], vs)
        });
        let h = h.unwrap();
        // Proposed for tier 1: the first node of each role.
        let tier = if ctx.first(role) == b { 1 } else { 2 };
        let mut c = |what: &str, f: &dyn Fn(&mut [u8])| ctx.resealed_case(tier, role, b, what, f);
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
                    put_u64(x, h.val_off(0), HUGE).unwrap()
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
}
