// SPDX-License-Identifier: GPL-2.0
//! A big device's delete in pieces (`begin_delete`, `delete_step`): stopped
//! at every piece boundary, with other devices changing between the pieces
//! (new mappings, sharing broken with the tree being released), then
//! committed or aborted, the metadata passes the checker with no leak, and
//! holds what a model says: the deletion whole after a commit, nothing of
//! it after an abort.

use rthin_core::metadata::checker;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core_support::{dump, Devs, HostStore, MemMedia};

type Md = ThinMetadata<HostStore<MemMedia>>;

const DATA_BLOCKS: u64 = 80_000;

/// Device 1 (to delete, `n` mappings, some out of order), its snapshot 2
/// with part of the sharing broken, device 3 empty; committed.
fn image(n: u64) -> Vec<u8> {
    let mut md =
        ThinMetadata::format(HostStore::new(MemMedia::new(2048)), 128, DATA_BLOCKS).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..n {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, if v % 50 == 7 { 3 * n + v } else { v }, b)
            .unwrap();
    }
    md.commit().unwrap();
    md.create_snap(2, 1).unwrap();
    for v in (0..n).step_by(401) {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(2, v, b).unwrap();
    }
    md.create_thin(3).unwrap();
    md.commit().unwrap();
    md.store().media.image()
}

fn open(img: &[u8]) -> Md {
    ThinMetadata::open(HostStore::new(MemMedia::from_image(img)), None).unwrap()
}

/// Changes of the other devices between two pieces: a new mapping of
/// device 3, and of device 2 over a block it shares with device 1 (which
/// shadows nodes the release may not have reached yet).
fn other_work(md: &mut Md, piece: u64, n: u64) {
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(3, piece, b).unwrap();
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(2, (piece * 37 + 5) % n, b).unwrap();
}

/// What the metadata must hold after `pieces` pieces of other work.
fn model(before: &Devs, md_after: &Devs, deleted: bool) -> Devs {
    let mut want = before.clone();
    if deleted {
        want.remove(&1);
    }
    // Devices 2 and 3 changed by the other work: taken from the metadata,
    // but checked below against the mappings the work inserted.
    for dev in [2, 3] {
        if let Some(d) = md_after.get(&dev) {
            want.insert(dev, d.clone());
        }
    }
    want
}

fn assert_clean(md: &Md, what: &str) {
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{what}: {:?}", rep.errors);
    assert!(
        rep.data_leaks.is_empty(),
        "{what}: data leaks {:?}",
        rep.data_leaks
    );
    assert!(
        rep.meta_leaks.is_empty(),
        "{what}: metadata leaks {:?}",
        rep.meta_leaks
    );
    let usage = md.data_usage();
    assert_eq!(usage.total - usage.free, rep.data_allocated, "{what}");
}

fn interrupted_at_every_boundary(n: u64, budget: usize) {
    let img = image(n);
    let before = dump(&open(&img));
    // How many pieces the whole release takes.
    let mut md = open(&img);
    md.begin_delete(1).unwrap();
    let mut pieces = 0u64;
    while !md.delete_step(budget).unwrap() {
        pieces += 1;
    }
    assert!(pieces > 10, "only {pieces} pieces");
    for stop in 0..=pieces {
        for commit in [true, false] {
            let what = format!("stopped after {stop} of {pieces} pieces, commit {commit}");
            let mut md = open(&img);
            md.begin_delete(1).unwrap();
            for p in 0..stop {
                other_work(&mut md, p, n);
                assert!(!md.delete_step(budget).unwrap(), "{what}");
                assert!(md.deleting(), "{what}");
            }
            other_work(&mut md, stop, n);
            if commit {
                md.commit().unwrap();
                assert!(!md.deleting(), "{what}");
            } else {
                md.abort().unwrap();
                assert!(!md.deleting(), "{what}");
            }
            assert_clean(&md, &what);
            let got = dump(&open(&md.store().media.image()));
            assert_eq!(got, model(&before, &got, commit), "{what}");
            if commit {
                // Every mapping the other work made is there.
                let d3 = &got[&3].1;
                assert_eq!(d3.len() as u64, stop + 1, "{what}");
                let d2 = &got[&2].1;
                for p in 0..=stop {
                    assert!(d2.contains_key(&((p * 37 + 5) % n)), "{what}");
                }
            } else {
                assert_eq!(got, before, "{what}");
            }
        }
    }
}

/// A two-level tree, one step per piece: every node boundary.
#[test]
fn delete_stopped_at_every_step_then_committed_or_aborted() {
    interrupted_at_every_boundary(6_000, 1);
}

/// A three-level tree (leaves half full: keys inserted out of order at the
/// breaks of sharing), pieces of several steps.
#[test]
fn delete_of_a_deeper_tree_in_pieces() {
    interrupted_at_every_boundary(70_000, 32);
}

/// A release already going on is finished by the next delete, and the
/// deletion of a device whose tree is shared whole is one step.
#[test]
fn deletes_one_after_another() {
    let img = image(5_000);
    let mut md = open(&img);
    md.create_snap(4, 3).unwrap();
    md.begin_delete(1).unwrap();
    assert!(md.deleting());
    md.delete_step(3).unwrap();
    md.begin_delete(2).unwrap();
    md.begin_delete(4).unwrap();
    md.delete(3).unwrap();
    assert!(!md.deleting());
    md.commit().unwrap();
    assert_clean(&md, "all deleted");
    assert_eq!(md.data_usage().free, DATA_BLOCKS);
    assert!(dump(&md).is_empty());
}
