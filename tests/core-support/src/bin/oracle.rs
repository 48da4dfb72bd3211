// SPDX-License-Identifier: GPL-2.0
//! Oracle driver for `scripts/core-oracle.sh` (host only): writes metadata
//! images with the core for thin-provisioning-tools to check and dump, and
//! reads images that `thin_restore` built from generated XML.
//!
//! Commands:
//! * `gen DIR` — for every scenario write `DIR/NAME.img` and the expected
//!   canonical dump `DIR/NAME.expect` (plus `DIR/NAME.snap.expect`, the view a
//!   held metadata snapshot must show);
//! * `canon XML OUT` — convert a `thin_dump` XML file to the canonical form;
//! * `genxml DIR` — write `DIR/NAME.xml` restore inputs and their canonical form;
//! * `modify IMG EXPECT_IN EXPECT_OUT` — open a restored image with the core,
//!   compare it with `EXPECT_IN`, run the reference-count checker, apply a
//!   deterministic set of changes, commit, and write the new expectation.
#![allow(missing_docs, unreachable_pub)]

use rthin_core::metadata::checker;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core::pdata::block_store::BlockStore;
use rthin_core_support::{dump, FileMedia, FileStore, HostStore, MemMedia, MemStore, Rng};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Canonical text form of a pool's metadata: superblock line, then per
/// device a details line and one line per mapping.
fn canon<S: BlockStore>(md: &ThinMetadata<S>) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "superblock time={} transaction={} data_block_size={} nr_data_blocks={}",
        md.time(),
        md.transaction_id(),
        md.data_block_size(),
        md.data_usage().total
    )
    .unwrap();
    for (d, (det, map)) in dump(md) {
        writeln!(
            s,
            "device {d} mapped={} trans={} ctime={} stime={}",
            det.mapped_blocks, det.transaction_id, det.creation_time, det.snapshotted_time
        )
        .unwrap();
        for (v, (b, t)) in map {
            writeln!(s, "map {v} {b} {t}").unwrap();
        }
    }
    s
}

fn attrs(tag: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut rest = tag;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq]
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let after = &rest[eq + 2..];
        let end = after.find('"').expect("unterminated attribute");
        m.insert(key, after[..end].to_string());
        rest = &after[end + 1..];
    }
    m
}

/// Converts thin_dump XML into the canonical form. Shared subtrees are
/// dumped once as `<def name=..>` blocks and referenced from devices with
/// `<ref name=../>`; they are expanded here.
fn canon_xml(xml: &str) -> String {
    let mut s = String::new();
    let mut defs: BTreeMap<String, Vec<(u64, u64, String)>> = BTreeMap::new();
    let mut cur_def: Option<String> = None;
    let mut dev: Option<Vec<(u64, u64, String)>> = None;
    let flush = |s: &mut String, maps: &mut Vec<(u64, u64, String)>| {
        maps.sort();
        for (o, d, t) in maps.drain(..) {
            writeln!(s, "map {o} {d} {t}").unwrap();
        }
    };
    for raw in xml.split('<').skip(1) {
        let tag = raw.split('>').next().unwrap_or("");
        let name = tag.split_whitespace().next().unwrap_or("");
        let a = attrs(tag);
        let g = |k: &str| {
            a.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("missing {k} in <{tag}>"))
        };
        let mut maps: Vec<(u64, u64, String)> = Vec::new();
        match name {
            "superblock" => writeln!(
                s,
                "superblock time={} transaction={} data_block_size={} nr_data_blocks={}",
                g("time"),
                g("transaction"),
                g("data_block_size"),
                g("nr_data_blocks")
            )
            .unwrap(),
            "def" => {
                cur_def = Some(g("name"));
                defs.insert(g("name"), Vec::new());
            }
            "/def" => cur_def = None,
            "device" => {
                writeln!(
                    s,
                    "device {} mapped={} trans={} ctime={} stime={}",
                    g("dev_id"),
                    g("mapped_blocks"),
                    g("transaction"),
                    g("creation_time"),
                    g("snap_time")
                )
                .unwrap();
                dev = Some(Vec::new());
            }
            "/device" => {
                if let Some(mut m) = dev.take() {
                    flush(&mut s, &mut m);
                }
            }
            "ref" => maps.extend(
                defs.get(&g("name"))
                    .cloned()
                    .unwrap_or_else(|| panic!("undefined ref {}", g("name"))),
            ),
            "single_mapping" => maps.push((
                g("origin_block").parse().unwrap(),
                g("data_block").parse().unwrap(),
                g("time"),
            )),
            "range_mapping" => {
                let o: u64 = g("origin_begin").parse().unwrap();
                let d: u64 = g("data_begin").parse().unwrap();
                let n: u64 = g("length").parse().unwrap();
                for i in 0..n {
                    maps.push((o + i, d + i, g("time")));
                }
            }
            _ => {}
        }
        if !maps.is_empty() {
            if let Some(d) = &cur_def {
                defs.get_mut(d).unwrap().extend(maps);
            } else if let Some(m) = dev.as_mut() {
                m.extend(maps);
            } else {
                panic!("mapping outside a device or def");
            }
        }
    }
    s
}

type Md = ThinMetadata<MemStore>;

fn fresh(meta_blocks: u64, data_blocks: u64) -> Md {
    ThinMetadata::format(HostStore::new(MemMedia::new(meta_blocks)), 128, data_blocks).unwrap()
}

fn map_n(md: &mut Md, dev: u64, vblocks: impl IntoIterator<Item = u64>) {
    for v in vblocks {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(dev, v, b).unwrap();
    }
}

/// Scenarios written by the core. Returns (name, final metadata, snapshot view).
fn scenarios() -> Vec<(&'static str, Md, Option<String>)> {
    let mut out = Vec::new();
    let mut rng = Rng::new(2010);

    out.push(("empty", fresh(256, 1000), None));

    let mut md = fresh(1024, 20_000);
    md.create_thin(0).unwrap();
    map_n(&mut md, 0, 0..3000);
    let vs: Vec<u64> = (0..2000).map(|_| 5000 + rng.below(100_000)).collect();
    map_n(&mut md, 0, vs);
    md.set_transaction_id(0, 17).unwrap();
    md.commit().unwrap();
    out.push(("one-thin", md, None));

    let mut md = fresh(2048, 30_000);
    for d in 0..60 {
        md.create_thin(d * 7).unwrap();
        let n = rng.below(300);
        let vs: Vec<u64> = (0..n).map(|_| rng.below(5000)).collect();
        map_n(&mut md, d * 7, vs);
        if d % 10 == 9 {
            md.commit().unwrap();
        }
    }
    for d in (0..60).step_by(9) {
        md.delete(d * 7).unwrap();
    }
    md.commit().unwrap();
    out.push(("many-thins", md, None));

    let mut md = fresh(2048, 30_000);
    md.create_thin(1).unwrap();
    map_n(&mut md, 1, 0..4000);
    md.commit().unwrap();
    let mut prev = 1;
    for s in 2..8 {
        md.create_snap(s, prev).unwrap();
        let vs: Vec<u64> = (0..300).map(|_| rng.below(4500)).collect();
        map_n(&mut md, s, vs);
        let vs: Vec<u64> = (0..100).map(|_| rng.below(4500)).collect();
        map_n(&mut md, prev, vs);
        md.remove_range(s, 1000 + s * 100, 1050 + s * 100).unwrap();
        prev = s;
        md.commit().unwrap();
    }
    md.delete(4).unwrap();
    md.commit().unwrap();
    out.push(("snapshot-chain", md, None));

    let mut md = fresh(1024, 10_000);
    md.create_thin(0).unwrap();
    map_n(&mut md, 0, 0..600);
    for s in 1..=40 {
        md.create_snap(s, 0).unwrap();
    }
    md.commit().unwrap();
    for s in (1..=40).step_by(3) {
        map_n(&mut md, s, [s * 7, 300 + s]);
    }
    md.commit().unwrap();
    out.push(("large-refcounts", md, None));

    let mut md = fresh(2048, 20_000);
    for d in 0..4 {
        md.create_thin(d).unwrap();
        map_n(&mut md, d, (0..1500).map(|v| v * 2 + d));
    }
    md.create_snap(10, 0).unwrap();
    md.commit().unwrap();
    md.reserve_metadata_snap().unwrap();
    md.commit().unwrap();
    // A held snapshot has no space-map roots: thin_dump reports 0 data blocks.
    let snap_view = canon(&md).replacen("nr_data_blocks=20000", "nr_data_blocks=0", 1);
    map_n(&mut md, 0, 0..500);
    md.delete(1).unwrap();
    md.create_snap(11, 2).unwrap();
    map_n(&mut md, 11, 100..400);
    md.remove_range(3, 0, 2000).unwrap();
    md.set_transaction_id(0, 5).unwrap();
    md.commit().unwrap();
    out.push(("held-snapshot", md, Some(snap_view)));

    // Deep tree, then bulk removals (node unlinking and root collapse).
    let mut md = fresh(4096, 300_000);
    md.create_thin(5).unwrap();
    map_n(&mut md, 5, 0..200_000);
    md.commit().unwrap();
    md.create_snap(6, 5).unwrap();
    md.remove_range(5, 10_000, 190_000).unwrap();
    md.remove_range(6, 0, 150_000).unwrap();
    md.commit().unwrap();
    out.push(("deep-removals", md, None));

    // Growth of both devices: several data bitmaps; the metadata device
    // grows from 600 blocks to two bitmaps.
    let mut md = fresh(600, 1000);
    md.create_thin(0).unwrap();
    map_n(&mut md, 0, 0..900);
    md.commit().unwrap();
    let mut st = md.into_store();
    st.media.nr_blocks = 17_000;
    let mut md = ThinMetadata::open(st, Some(128)).unwrap();
    md.resize_metadata(17_000).unwrap();
    md.resize_data(70_000).unwrap();
    map_n(&mut md, 0, 900..60_000);
    md.commit().unwrap();
    out.push(("resized", md, None));

    out
}

fn write_image(md: Md, path: &Path) {
    std::fs::write(path, md.into_store().media.image()).unwrap();
}

/// Restore inputs: (name, xml). Devices with overlapping data blocks give
/// large data reference counts.
fn xml_scenarios() -> Vec<(&'static str, String)> {
    let mut rng = Rng::new(7);
    let mut v = Vec::new();

    let mut x = String::new();
    writeln!(x, "<superblock uuid=\"\" time=\"3\" transaction=\"9\" flags=\"0\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"50000\">").unwrap();
    for d in 0..120u64 {
        let n = rng.below(200);
        let mut m = BTreeMap::new();
        for _ in 0..n {
            // Data blocks drawn from a small pool: heavy sharing between devices.
            m.insert(rng.below(3000), (rng.below(2000), rng.below(4) as u32));
        }
        writeln!(x, "  <device dev_id=\"{d}\" mapped_blocks=\"{}\" transaction=\"{}\" creation_time=\"{}\" snap_time=\"{}\">", m.len(), d % 5, d % 3, 3).unwrap();
        for (o, (b, t)) in m {
            writeln!(
                x,
                "    <single_mapping origin_block=\"{o}\" data_block=\"{b}\" time=\"{t}\"/>"
            )
            .unwrap();
        }
        writeln!(x, "  </device>").unwrap();
    }
    writeln!(x, "</superblock>").unwrap();
    v.push(("restored-shared", x));

    let mut x = String::new();
    writeln!(x, "<superblock uuid=\"\" time=\"40\" transaction=\"1\" flags=\"0\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"100000\">").unwrap();
    // A snapshot chain: every device maps the same long runs (identical
    // trees) plus a few private blocks; run lengths give range mappings.
    for d in 0..30u64 {
        let priv_n = 50;
        writeln!(x, "  <device dev_id=\"{}\" mapped_blocks=\"{}\" transaction=\"0\" creation_time=\"{d}\" snap_time=\"{}\">", d + 100, 20_000 + priv_n, d + 1).unwrap();
        writeln!(
            x,
            "    <range_mapping origin_begin=\"0\" data_begin=\"0\" length=\"20000\" time=\"0\"/>"
        )
        .unwrap();
        for i in 0..priv_n {
            writeln!(
                x,
                "    <single_mapping origin_block=\"{}\" data_block=\"{}\" time=\"{d}\"/>",
                30_000 + i,
                20_000 + d * priv_n + i
            )
            .unwrap();
        }
        writeln!(x, "  </device>").unwrap();
    }
    writeln!(x, "</superblock>").unwrap();
    v.push(("restored-chain", x));
    v
}

fn modify(img: &Path, expect_in: &Path, expect_out: &Path) -> Result<(), String> {
    let st: FileStore = HostStore::new(FileMedia::open(img).map_err(|e| e.to_string())?);
    let mut md = ThinMetadata::open(st, None).map_err(|e| format!("open: {e:?}"))?;
    let want = std::fs::read_to_string(expect_in).map_err(|e| e.to_string())?;
    let got = canon(&md);
    if got != want {
        return Err(first_diff("core view of restored image", &want, &got));
    }
    checker::check(md.store()).map_err(|e| format!("checker on restored image: {e}"))?;
    let total = md.metadata_usage().total;
    let shared = (1..total)
        .filter(|&b| md.metadata_block_count(b).unwrap_or(0) > 1)
        .count();
    println!("restored image: {shared} shared metadata blocks");
    let mut devs = Vec::new();
    md.for_each_device(&mut |d, _| {
        devs.push(d);
        Ok(())
    })
    .unwrap();
    let mut rng = Rng::new(1);
    let e = |x: rthin_core::core_error::CoreError| format!("{x:?}");
    for (i, &d) in devs.iter().enumerate().take(12) {
        match i % 4 {
            0 => md.delete(d).map_err(e)?,
            1 => {
                for _ in 0..50 {
                    let b = md.alloc_data_block().map_err(e)?;
                    md.insert_mapping(d, rng.below(40_000), b).map_err(e)?;
                }
            }
            2 => {
                md.create_snap(1000 + d, d).map_err(e)?;
                let b = md.alloc_data_block().map_err(e)?;
                md.insert_mapping(1000 + d, 5, b).map_err(e)?;
            }
            _ => {
                md.remove_range(d, 100, 20_010).map_err(e)?;
            }
        }
    }
    md.create_thin(77_777).map_err(e)?;
    let t = md.transaction_id();
    md.set_transaction_id(t, t + 1).map_err(e)?;
    md.commit().map_err(e)?;
    checker::check(md.store()).map_err(|e| format!("checker after modification: {e}"))?;
    std::fs::write(expect_out, canon(&md)).map_err(|e| e.to_string())?;
    Ok(())
}

fn first_diff(what: &str, want: &str, got: &str) -> String {
    for (i, (a, b)) in want.lines().zip(got.lines()).enumerate() {
        if a != b {
            return format!("{what}: line {}: expected `{a}`, got `{b}`", i + 1);
        }
    }
    format!(
        "{what}: {} lines expected, {} lines found",
        want.lines().count(),
        got.lines().count()
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let a = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("missing argument {i}"))
    };
    match a(1) {
        "gen" => {
            let dir = Path::new(a(2));
            std::fs::create_dir_all(dir).unwrap();
            for (name, md, snap) in scenarios() {
                checker::check(md.store()).unwrap_or_else(|e| panic!("{name}: {e}"));
                std::fs::write(dir.join(format!("{name}.expect")), canon(&md)).unwrap();
                if let Some(s) = snap {
                    std::fs::write(dir.join(format!("{name}.snap.expect")), s).unwrap();
                }
                write_image(md, &dir.join(format!("{name}.img")));
                println!("{name}");
            }
        }
        "genxml" => {
            let dir = Path::new(a(2));
            std::fs::create_dir_all(dir).unwrap();
            for (name, x) in xml_scenarios() {
                std::fs::write(dir.join(format!("{name}.xml")), &x).unwrap();
                std::fs::write(dir.join(format!("{name}.expect")), canon_xml(&x)).unwrap();
                // An empty 64 MiB file for thin_restore to write into.
                let f = std::fs::File::create(dir.join(format!("{name}.img"))).unwrap();
                f.set_len(16_384 * 4096).unwrap();
                println!("{name}");
            }
        }
        "canon" => {
            let x = std::fs::read_to_string(a(2)).unwrap();
            std::fs::write(a(3), canon_xml(&x)).unwrap();
        }
        "compare" => {
            let want = std::fs::read_to_string(a(2)).unwrap();
            let got = std::fs::read_to_string(a(3)).unwrap();
            if want != got {
                eprintln!("{}", first_diff("thin_dump vs core", &want, &got));
                std::process::exit(1);
            }
        }
        "modify" => {
            if let Err(e) = modify(Path::new(a(2)), Path::new(a(3)), Path::new(a(4))) {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        other => {
            eprintln!("unknown command {other}");
            std::process::exit(2);
        }
    }
}
