// SPDX-License-Identifier: GPL-2.0
//! Model-based property tests: random operation sequences run against the
//! metadata core and against a plain BTreeMap model; after every commit the
//! committed image is checked with the independent reference-count checker,
//! and after every reopen everything is compared with the model.

use rthin_core::core_error::CoreError;
use rthin_core::metadata::checker;
use rthin_core::metadata::thin_metadata::{DeviceDetails, ThinMetadata};
use rthin_core_support::{dump, Devs, HostStore, MemMedia, MemStore, Rng};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Default, Debug, PartialEq)]
struct Model {
    devs: Devs,
    trans_id: u64,
    time: u32,
    held: Option<Devs>,
}

impl Model {
    fn referenced_data(&self) -> BTreeSet<u64> {
        let mut s = BTreeSet::new();
        for (_, m) in self.devs.values() {
            s.extend(m.values().map(|v| v.0));
        }
        if let Some(h) = &self.held {
            for (_, m) in h.values() {
                s.extend(m.values().map(|v| v.0));
            }
        }
        s
    }
}

struct Cfg {
    meta_blocks: u64,
    data_blocks: u64,
    max_dev: u64,
    vrange: u64,
    ops: usize,
}

fn compare(md: &ThinMetadata<MemStore>, m: &Model, ctx: &str) {
    assert_eq!(dump(md), m.devs, "{ctx}: devices/mappings differ");
    assert_eq!(md.transaction_id(), m.trans_id, "{ctx}");
    assert_eq!(md.time(), m.time, "{ctx}");
    assert_eq!(md.held_root() != 0, m.held.is_some(), "{ctx}");
    let used = m.referenced_data().len() as u64;
    let u = md.data_usage();
    assert_eq!(u.total - u.free, used, "{ctx}: data blocks in use");
    for (d, (det, map)) in &m.devs {
        assert_eq!(
            md.highest_mapped(*d).unwrap(),
            map.keys().next_back().copied(),
            "{ctx}"
        );
        if let Some((&k, &(b, t))) = map.iter().next() {
            let l = md.lookup(*d, k).unwrap().unwrap();
            assert_eq!((l.mapping.data_block, l.mapping.time), (b, t));
            assert_eq!(l.shared, det.snapshotted_time > t);
            assert_eq!(md.next_mapping(*d, 0).unwrap().map(|x| x.0), Some(k));
        }
    }
}

fn reopen(md: ThinMetadata<MemStore>) -> ThinMetadata<MemStore> {
    let st = md.into_store();
    let img = st.media.snapshot();
    ThinMetadata::open(HostStore::new(img), Some(128)).unwrap()
}

fn run(seed: u64, cfg: &Cfg) -> (usize, usize, u64) {
    let mut rng = Rng::new(seed);
    let mut md = ThinMetadata::format(
        HostStore::new(MemMedia::new(cfg.meta_blocks)),
        128,
        cfg.data_blocks,
    )
    .unwrap();
    let mut m = Model::default();
    let mut committed = m.clone();
    let mut commits = 0;
    let mut checks = 0;
    let mut max_meta = 0;
    for step in 0..cfg.ops {
        let ctx = format!("seed {seed} step {step}");
        let dev = rng.below(cfg.max_dev);
        let r = rng.below(1000);
        let existing: Vec<u64> = m.devs.keys().copied().collect();
        let pick = |rng: &mut Rng| {
            existing
                .get(rng.below(existing.len().max(1) as u64) as usize)
                .copied()
        };
        if r < 500 {
            let Some(d) = pick(&mut rng) else { continue };
            let n = 1 + rng.below(8);
            let base = rng.below(cfg.vrange);
            for i in 0..n {
                let v = (base + i * (1 + rng.below(3))) % cfg.vrange;
                let b = match md.alloc_data_block() {
                    Ok(b) => b,
                    Err(CoreError::NoSpace) => break,
                    Err(e) => panic!("{ctx}: alloc {e:?}"),
                };
                md.insert_mapping(d, v, b).unwrap();
                let e = m.devs.get_mut(&d).unwrap();
                if e.1.insert(v, (b, m.time)).is_none() {
                    e.0.mapped_blocks += 1;
                }
            }
        } else if r < 600 {
            let Some(d) = pick(&mut rng) else { continue };
            let v = rng.below(cfg.vrange);
            let was = md.remove_mapping(d, v).unwrap();
            let e = m.devs.get_mut(&d).unwrap();
            assert_eq!(was, e.1.remove(&v).is_some(), "{ctx}");
            if was {
                e.0.mapped_blocks -= 1;
            }
        } else if r < 630 {
            let Some(d) = pick(&mut rng) else { continue };
            let a = rng.below(cfg.vrange);
            let b = a + rng.below(cfg.vrange / 4 + 1);
            let n = md.remove_range(d, a, b).unwrap();
            let e = m.devs.get_mut(&d).unwrap();
            let ks: Vec<u64> = e.1.range(a..b).map(|x| *x.0).collect();
            assert_eq!(n, ks.len() as u64, "{ctx}");
            for k in ks {
                e.1.remove(&k);
            }
            e.0.mapped_blocks -= n;
        } else if r < 690 {
            let res = md.create_thin(dev);
            if m.devs.contains_key(&dev) {
                assert_eq!(res, Err(CoreError::Exists), "{ctx}");
            } else {
                res.unwrap();
                let d = DeviceDetails {
                    mapped_blocks: 0,
                    transaction_id: m.trans_id,
                    creation_time: m.time,
                    snapshotted_time: m.time,
                };
                m.devs.insert(dev, (d, BTreeMap::new()));
            }
        } else if r < 740 {
            let origin = pick(&mut rng).unwrap_or(dev);
            let res = md.create_snap(dev, origin);
            if m.devs.contains_key(&dev) {
                assert_eq!(res, Err(CoreError::Exists), "{ctx}");
            } else if !m.devs.contains_key(&origin) {
                assert_eq!(res, Err(CoreError::NotFound), "{ctx}");
            } else {
                res.unwrap();
                m.time += 1;
                let o = m.devs.get_mut(&origin).unwrap();
                o.0.snapshotted_time = m.time;
                let d = DeviceDetails {
                    mapped_blocks: o.0.mapped_blocks,
                    transaction_id: m.trans_id,
                    creation_time: m.time,
                    snapshotted_time: m.time,
                };
                let map = o.1.clone();
                m.devs.insert(dev, (d, map));
            }
        } else if r < 780 {
            let d = if rng.chance(4) {
                dev
            } else {
                pick(&mut rng).unwrap_or(dev)
            };
            let res = md.delete(d);
            if m.devs.remove(&d).is_some() {
                res.unwrap();
            } else {
                assert_eq!(res, Err(CoreError::NotFound), "{ctx}");
            }
        } else if r < 800 {
            let cur = if rng.chance(5) {
                m.trans_id + 1
            } else {
                m.trans_id
            };
            let new = rng.next_u64();
            let res = md.set_transaction_id(cur, new);
            if cur == m.trans_id {
                res.unwrap();
                m.trans_id = new;
            } else {
                assert_eq!(res, Err(CoreError::Invalid));
            }
        } else if r < 870 {
            md.commit().unwrap();
            committed = m.clone();
            commits += 1;
            let rep = checker::check(md.store()).unwrap_or_else(|e| panic!("{ctx}: checker: {e}"));
            max_meta = max_meta.max(rep.max_meta_block);
            checks += 1;
        } else if r < 890 {
            md.abort().unwrap();
            m = committed.clone();
            compare(&md, &m, &ctx);
        } else if r < 920 {
            if m.held.is_some() {
                if rng.chance(2) {
                    assert_eq!(md.reserve_metadata_snap(), Err(CoreError::Busy));
                } else {
                    md.release_metadata_snap().unwrap();
                    m.held = None;
                }
            } else if rng.chance(3) {
                assert_eq!(md.release_metadata_snap(), Err(CoreError::Invalid));
            } else {
                md.reserve_metadata_snap().unwrap();
                committed = m.clone();
                m.held = Some(m.devs.clone());
            }
        } else if r < 940 {
            let u = md.data_usage().total;
            md.resize_data(u + rng.below(cfg.data_blocks / 2 + 1))
                .unwrap();
        } else if r < 950 {
            let cur = md.metadata_usage().total;
            let max = md.store().media.nr_blocks;
            if cur < max {
                md.resize_metadata(cur + rng.below(max - cur + 1)).unwrap();
            }
        } else {
            md.commit().unwrap();
            committed = m.clone();
            md = reopen(md);
            compare(&md, &m, &ctx);
        }
    }
    md.commit().unwrap();
    checker::check(md.store()).unwrap_or_else(|e| panic!("seed {seed} end: checker: {e}"));
    let md = reopen(md);
    compare(&md, &m, &format!("seed {seed} end"));
    (commits + 1, checks + 1, max_meta)
}

#[test]
fn small_trees_many_collisions() {
    let cfg = Cfg {
        meta_blocks: 400,
        data_blocks: 3000,
        max_dev: 14,
        vrange: 300,
        ops: 400,
    };
    let mut c = (0, 0);
    // RTHIN_MODEL_SEEDS raises the number of cases for soak runs.
    let seeds: u64 = std::env::var("RTHIN_MODEL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    for seed in 1..=seeds {
        let r = run(seed, &cfg);
        c = (c.0 + r.0, c.1 + r.1);
    }
    eprintln!(
        "small: {seeds} cases, {} commits, {} checker runs",
        c.0, c.1
    );
}

fn deep_trees(seeds: std::ops::Range<u64>) {
    let cfg = Cfg {
        meta_blocks: 3000,
        data_blocks: 60_000,
        max_dev: 4,
        vrange: 200_000,
        ops: 1200,
    };
    for seed in seeds {
        run(seed, &cfg);
    }
}

#[test]
fn deep_trees_a() {
    deep_trees(100..102);
}

#[test]
fn deep_trees_b() {
    // RTHIN_DEEP_SEEDS adds cases for soak runs.
    let extra: u64 = std::env::var("RTHIN_DEEP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    deep_trees(102..104 + extra);
}

#[test]
fn multi_bitmap_space_maps() {
    // A metadata device with two bitmaps and a data device with three: the
    // moving allocation cursor wraps metadata allocations across both
    // metadata bitmaps (shadowing bitmaps and the index block as it goes).
    let mut rng = Rng::new(77);
    let st = HostStore::new(MemMedia::new(16_320 + 700));
    let mut md = ThinMetadata::format(st, 128, 40_000).unwrap();
    md.create_thin(0).unwrap();
    let mut m: BTreeMap<u64, u64> = BTreeMap::new();
    let mut max_meta = 0;
    let mut wrapped_at = None;
    for it in 0..6000u64 {
        for _ in 0..4 {
            let v = rng.below(30_000);
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(0, v, b).unwrap();
            m.insert(v, b);
        }
        if it % 50 == 0 {
            let _ = md.delete(1);
            md.create_snap(1, 0).unwrap();
        }
        md.commit().unwrap();
        if it % 500 == 0 || wrapped_at.is_some() {
            let rep = checker::check(md.store()).unwrap_or_else(|e| panic!("iteration {it}: {e}"));
            max_meta = max_meta.max(rep.max_meta_block);
            if max_meta >= 16_320 && wrapped_at.is_none() {
                wrapped_at = Some(it);
            }
        }
        if wrapped_at.is_some_and(|w| it > w + 30) {
            break;
        }
    }
    assert!(
        max_meta >= 16_320,
        "second metadata bitmap never used ({max_meta})"
    );
    let md = reopen(md);
    let got = dump(&md);
    let map0: BTreeMap<u64, u64> = got[&0].1.iter().map(|(k, v)| (*k, v.0)).collect();
    assert_eq!(map0, m);
}
