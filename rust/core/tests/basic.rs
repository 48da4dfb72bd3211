// SPDX-License-Identifier: GPL-2.0
//! Basic behaviour of the metadata core over the host stores.

use rthin_core::core_error::CoreError;
use rthin_core::metadata::checker;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core_support::{mem_store, HostStore, MemMedia};

#[test]
fn format_open_empty() {
    let md = ThinMetadata::format(mem_store(1024), 128, 1000).unwrap();
    let st = md.into_store();
    let rep = checker::check(&st).unwrap();
    assert_eq!(rep.devices, 0);
    let md = ThinMetadata::open(st, Some(128)).unwrap();
    assert_eq!(md.data_usage().total, 1000);
    assert_eq!(md.data_usage().free, 1000);
    assert_eq!(md.transaction_id(), 0);
    let st = md.into_store();
    assert!(matches!(
        ThinMetadata::open(st, Some(256)),
        Err(CoreError::Invalid)
    ));
    assert!(matches!(
        ThinMetadata::open(mem_store(64), None),
        Err(CoreError::Unformatted)
    ));
}

#[test]
fn thin_and_snapshot() {
    let mut md = ThinMetadata::format(mem_store(2048), 128, 100_000).unwrap();
    md.create_thin(1).unwrap();
    assert_eq!(md.create_thin(1), Err(CoreError::Exists));
    for v in 0..2000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v * 3, b).unwrap();
    }
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    md.create_snap(2, 1).unwrap();
    assert_eq!(md.time(), 1);
    let l = md.lookup(1, 30).unwrap().unwrap();
    assert!(l.shared);
    assert_eq!(md.mapping_is_shared(1, 30).unwrap(), Some(true));
    // break sharing on the origin
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(1, 30, b).unwrap();
    assert_eq!(md.lookup(1, 30).unwrap().unwrap().mapping.data_block, b);
    assert!(!md.lookup(1, 30).unwrap().unwrap().shared);
    assert_ne!(md.lookup(2, 30).unwrap().unwrap().mapping.data_block, b);
    assert_eq!(md.device_details(2).unwrap().unwrap().mapped_blocks, 2000);
    assert_eq!(md.highest_mapped(2).unwrap(), Some(1999 * 3));
    // Callbacks may call back into the metadata (no guard is held).
    let mut seen = 0;
    md.for_each_mapping(2, &mut |v, m| {
        assert_eq!(md.lookup(2, v)?.unwrap().mapping, m);
        seen += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, 2000);
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    md.delete(1).unwrap();
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    assert_eq!(md.mapping_is_shared(2, 30).unwrap(), Some(false));
    assert_eq!(md.remove_range(2, 0, 3000).unwrap(), 1000);
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.mappings, 1000);
    md.delete(2).unwrap();
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.data_allocated, 0);
    let st = md.into_store();
    let md = ThinMetadata::open(
        HostStore::new(MemMedia::from_image(&st.media.image())),
        None,
    )
    .unwrap();
    assert_eq!(md.data_usage().free, 100_000);
}

#[test]
fn message_errors_and_flags() {
    let mut md = ThinMetadata::format(mem_store(256), 128, 100).unwrap();
    assert_eq!(md.create_snap(2, 1), Err(CoreError::NotFound));
    assert_eq!(md.delete(1), Err(CoreError::NotFound));
    assert_eq!(md.insert_mapping(1, 0, 0), Err(CoreError::NotFound));
    assert_eq!(md.lookup(1, 0), Err(CoreError::NotFound));
    md.create_thin(1).unwrap();
    assert_eq!(md.create_snap(1, 1), Err(CoreError::Exists));
    assert_eq!(md.insert_mapping(1, 0, 100), Err(CoreError::Invalid));
    assert_eq!(md.set_transaction_id(5, 6), Err(CoreError::Invalid));
    assert_eq!(md.release_metadata_snap(), Err(CoreError::Invalid));
    md.reserve_metadata_snap().unwrap();
    assert_eq!(md.reserve_metadata_snap(), Err(CoreError::Busy));
    assert_eq!(md.resize_data(50), Err(CoreError::Invalid));
    assert!(md.is_dirty());
    md.commit().unwrap();
    assert!(!md.is_dirty());
    // An unchanged pool commits nothing at all.
    let flushes = md.store().flushes;
    md.commit().unwrap();
    assert_eq!(md.store().flushes, flushes);
    assert!(!md.needs_check());
    md.set_needs_check().unwrap();
    let st = md.into_store();
    let md = ThinMetadata::open(st, None).unwrap();
    assert!(md.needs_check());
    assert_ne!(md.held_root(), 0);
    checker::check(md.store()).unwrap();
}

#[test]
fn data_space_exhaustion_and_commit_rule() {
    let mut md = ThinMetadata::format(mem_store(256), 128, 64).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    assert_eq!(md.alloc_data_block(), Err(CoreError::NoSpace));
    md.commit().unwrap();
    // Freed in this transaction: counted free at once, reusable only after commit.
    assert_eq!(md.remove_range(1, 0, 10).unwrap(), 10);
    assert_eq!(md.data_usage().free, 10);
    assert_eq!(md.alloc_data_block(), Err(CoreError::NoSpace));
    md.commit().unwrap();
    let b = md.alloc_data_block().unwrap();
    assert!(b < 10, "reused block {b}");
    md.insert_mapping(1, 100, b).unwrap();
    md.resize_data(200).unwrap();
    for v in 200..300 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.data_allocated, 64 - 10 + 1 + 100);
}

#[test]
fn metadata_space_exhaustion_then_abort() {
    let mut md = ThinMetadata::format(mem_store(64), 128, 20_000).unwrap();
    md.create_thin(1).unwrap();
    md.commit().unwrap();
    let mut committed = 0u64;
    let mut err = None;
    'outer: for round in 0..1000u64 {
        for i in 0..200 {
            let r = md
                .alloc_data_block()
                .and_then(|b| md.insert_mapping(1, round * 1000 + i * 3, b));
            if let Err(e) = r {
                err = Some(e);
                break 'outer;
            }
        }
        // A commit may run out of space too (it writes the cached details).
        if let Err(e) = md.commit() {
            err = Some(e);
            break;
        }
        committed = round + 1;
    }
    assert_eq!(err, Some(CoreError::NoSpace));
    md.abort().unwrap();
    assert_eq!(
        md.device_details(1).unwrap().unwrap().mapped_blocks,
        committed * 200
    );
    // Nothing can be changed any more (every block is used by the committed
    // state); growing the metadata device must still work.
    let mut st = md.into_store();
    st.media.nr_blocks = 16_320 + 300;
    let mut md = ThinMetadata::open(st, None).unwrap();
    md.resize_metadata(16_320 + 300).unwrap();
    md.delete(1).unwrap();
    md.create_thin(2).unwrap();
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(2, 0, b).unwrap();
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.data_allocated, 1);
    let md = ThinMetadata::open(md.into_store(), None).unwrap();
    assert_eq!(md.device_details(2).unwrap().unwrap().mapped_blocks, 1);
    assert_eq!(md.metadata_usage().total, 16_320 + 300);
}

#[test]
fn details_cache_eviction_commit_and_abort() {
    let mut md = ThinMetadata::format(mem_store(1024), 128, 10_000).unwrap();
    for d in 0..20 {
        md.create_thin(d).unwrap();
    }
    md.commit().unwrap();
    // More changed devices in one transaction than cache slots.
    for round in 0..3 {
        for d in 0..20 {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(d, round, b).unwrap();
        }
    }
    for d in 0..20 {
        assert_eq!(md.device_details(d).unwrap().unwrap().mapped_blocks, 3);
    }
    let mut n = 0;
    md.for_each_device(&mut |_, det| {
        assert_eq!(det.mapped_blocks, 3);
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 20);
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    // Abort drops cached and evicted-but-uncommitted changes alike.
    for d in 0..20 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(d, 10, b).unwrap();
    }
    md.delete(3).unwrap();
    md.abort().unwrap();
    for d in 0..20 {
        assert_eq!(md.device_details(d).unwrap().unwrap().mapped_blocks, 3);
    }
    let md = ThinMetadata::open(md.into_store(), None).unwrap();
    assert_eq!(md.device_details(19).unwrap().unwrap().mapped_blocks, 3);
    checker::check(md.store()).unwrap();
}

#[test]
fn compat_ro_features_only_on_read_only_devices() {
    use rthin_core::metadata::superblock::Superblock;
    use rthin_core::pdata::checksum::{seal, BlockKind};
    let mut md = ThinMetadata::format(mem_store(256), 128, 100).unwrap();
    md.create_thin(4).unwrap();
    md.commit().unwrap();
    let mut media = md.into_store().media.snapshot();
    {
        let blk = media.blocks.get_mut(&0).unwrap();
        let mut sb = Superblock::decode(&blk[..]).unwrap();
        sb.compat_ro_flags = 1;
        sb.encode(&mut blk[..]).unwrap();
        seal(BlockKind::Superblock, 0, &mut blk[..]).unwrap();
    }
    let img = media.snapshot();
    assert!(matches!(
        ThinMetadata::open(HostStore::new(img), None),
        Err(CoreError::Unsupported)
    ));
    let mut md = ThinMetadata::open_read_only(HostStore::new(media), None).unwrap();
    assert!(md.is_read_only());
    assert!(md.device_details(4).unwrap().is_some());
    assert_eq!(md.create_thin(5), Err(CoreError::Invalid));
    assert_eq!(md.alloc_data_block(), Err(CoreError::Invalid));
    assert_eq!(md.set_needs_check(), Err(CoreError::Invalid));
    md.commit().unwrap();
    assert_eq!(md.store().flushes, 0);
}

#[test]
fn remove_range_reports_freed_blocks() {
    let mut md = ThinMetadata::format(mem_store(2048), 128, 10_000).unwrap();
    md.create_thin(1).unwrap();
    let mut blocks = Vec::new();
    for v in 0..100u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
        blocks.push(b);
    }
    md.create_snap(2, 1).unwrap();
    // Blocks 0..50 of the origin get private copies; 50..100 stay shared.
    for v in 0..50u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    // Removing 40..60 of the snapshot frees 40..50 (the origin moved away)
    // and only unmaps 50..60 (the origin still has them).
    let mut freed = Vec::new();
    assert_eq!(
        md.remove_range_freeing(2, 40, 60, |b| freed.push(b))
            .unwrap(),
        20
    );
    assert_eq!(freed, blocks[40..50].to_vec());
    for &b in &freed {
        assert_eq!(md.data_block_count(b).unwrap(), 0);
    }
    assert_eq!(md.device_details(2).unwrap().unwrap().mapped_blocks, 80);
    assert!(md.lookup(2, 45).unwrap().is_none());
    assert!(md.lookup(1, 55).unwrap().is_some());
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
}

/// A leaf lookup answers like `lookup` and hands over the whole leaf of a
/// mapped block: the
/// neighbours it reports are real mappings with their sharing, each leaf is
/// a run of keys in order, and walking leaf by leaf visits every mapping.
#[test]
fn lookup_leaf_serves_neighbours() {
    let mut md = ThinMetadata::format(mem_store(2048), 128, 100_000).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..3000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v * 2, b).unwrap();
    }
    md.commit().unwrap();
    md.create_snap(2, 1).unwrap();
    // Half of the origin's blocks get private copies again.
    for v in (0..3000u64).step_by(2) {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v * 2, b).unwrap();
    }
    let mut visited = 0u64;
    let mut leaves = 0;
    let mut next = 0u64;
    while let Some((start, _)) = md.next_mapping(1, next).unwrap() {
        let mut keys = Vec::new();
        let found = md
            .lookup_leaf(1, start, |k, r| {
                assert_eq!(md.lookup(1, k).unwrap(), Some(r));
                keys.push(k);
            })
            .unwrap();
        assert_eq!(found, md.lookup(1, start).unwrap());
        assert!(keys.len() > 1 && keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(keys[0], start);
        visited += keys.len() as u64;
        leaves += 1;
        next = keys[keys.len() - 1] + 1;
    }
    assert_eq!(visited, 3000);
    assert!(leaves > 5, "{leaves} leaves: the test needs several");
    // A hole is just a miss: its neighbours are not walked.
    let mut n = 0;
    assert_eq!(md.lookup_leaf(1, 3, |_, _| n += 1).unwrap(), None);
    assert_eq!(n, 0);
    assert_eq!(md.lookup_leaf(9, 0, |_, _| {}), Err(CoreError::NotFound));
}

/// Leaves of the mapping tree after a fill: how many mappings each holds on
/// average (whole leaves hold 252).
fn mappings_per_leaf(md: &ThinMetadata<HostStore<MemMedia>>, dev: u64) -> f64 {
    let (mut leaves, mut mappings, mut next) = (0u64, 0u64, 0u64);
    while let Some((start, _)) = md.next_mapping(dev, next).unwrap() {
        let mut last = start;
        md.lookup_leaf(dev, start, |k, _| {
            mappings += 1;
            last = k;
        })
        .unwrap();
        leaves += 1;
        next = last + 1;
    }
    mappings as f64 / leaves as f64
}

/// Node fill as persistent-data keeps it: a full node first shares its
/// entries with a sibling that has room, so a sequential fill leaves leaves
/// nearly full (not half full, as splitting alone would) and a random one
/// well above the three quarters splitting alone settles at; removes keep
/// every leaf at least a third full; every image stays valid.
#[test]
fn inserts_keep_nodes_full() {
    let mut md = ThinMetadata::format(mem_store(8192), 128, 400_000).unwrap();
    md.create_thin(1).unwrap();
    md.create_thin(2).unwrap();
    for v in 0..100_000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
        if v % 5000 == 4999 {
            md.commit().unwrap();
        }
    }
    for i in 0..100_000u64 {
        let b = md.alloc_data_block().unwrap();
        // An odd multiplier permutes 0..2^30: distinct keys in random order.
        let v = i.wrapping_mul(2_654_435_761) & ((1 << 30) - 1);
        md.insert_mapping(2, v, b).unwrap();
        if i % 5000 == 4999 {
            md.commit().unwrap();
        }
    }
    md.commit().unwrap();
    let seq = mappings_per_leaf(&md, 1);
    let rnd = mappings_per_leaf(&md, 2);
    println!("mappings per leaf: sequential {seq:.1}, random {rnd:.1}");
    assert!(
        seq >= 0.9 * 252.0,
        "sequential fill: {seq:.1} mappings per leaf"
    );
    assert!(
        rnd >= 0.8 * 252.0,
        "random fill: {rnd:.1} mappings per leaf"
    );
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(rep.mappings, 200_000);
    // Removing three quarters of the random thin's mappings, in another
    // random order, keeps every leaf at least a third full (thin_dump
    // rejects less).
    for i in 0..100_000u64 {
        if i % 4 != 0 {
            let v = i.wrapping_mul(2_654_435_761) & ((1 << 30) - 1);
            assert!(md.remove_mapping(2, v).unwrap());
        }
        if i % 5000 == 4999 {
            md.commit().unwrap();
        }
    }
    md.commit().unwrap();
    let (mut next, mut smallest) = (0u64, usize::MAX);
    while let Some((start, _)) = md.next_mapping(2, next).unwrap() {
        let (mut n, mut last) = (0usize, start);
        md.lookup_leaf(2, start, |k, _| {
            n += 1;
            last = k;
        })
        .unwrap();
        smallest = smallest.min(n);
        next = last + 1;
    }
    println!("after removes: the smallest leaf holds {smallest}");
    assert!(smallest >= 252 / 3, "a leaf holds {smallest} mappings");
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(rep.mappings, 125_000);
}

/// Store accesses (reads + writes) since `since`.
fn accesses(md: &ThinMetadata<HostStore<MemMedia>>, since: u64) -> u64 {
    md.store().reads.get() + md.store().writes.get() - since
}

#[test]
fn provisioning_touches_few_blocks() {
    // A sequential fill as the pool's workers provision: a lookup that
    // misses, an allocation, an insert, and a commit every 4,096 blocks. In
    // the kernel each block access is a dm-bufio call, the bulk of the cost;
    // dm-thin needs about 15 per provision. Once the tree has its depth
    // (three levels here) the allocation updates a bitmap (its index entry
    // stays in core until the commit) and the insert walks one path
    // (shadowing a node that is already this transaction's own reads
    // nothing).
    let n = 300_000u64;
    let mut md = ThinMetadata::format(mem_store(8192), 128, n + 1000).unwrap();
    md.create_thin(1).unwrap();
    md.commit().unwrap();
    let (mut alloc, mut insert, mut ops) = (0u64, 0u64, 0u64);
    for v in 0..n {
        assert!(md.lookup(1, v).unwrap().is_none());
        let a0 = accesses(&md, 0);
        let b = md.alloc_data_block().unwrap();
        let a1 = accesses(&md, 0);
        md.insert_mapping(1, v, b).unwrap();
        if v >= n / 2 {
            alloc += a1 - a0;
            insert += accesses(&md, a1);
            ops += 1;
        }
        if v % 4096 == 4095 {
            md.commit().unwrap();
        }
    }
    md.commit().unwrap();
    let (alloc, insert) = (alloc as f64 / ops as f64, insert as f64 / ops as f64);
    println!("block accesses per provision: allocation {alloc:.2}, insert {insert:.2}");
    assert!(alloc <= 5.0, "allocation: {alloc:.2} block accesses");
    assert!(insert <= 9.0, "insert: {insert:.2} block accesses");
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(rep.mappings, n);
}

#[test]
fn data_index_entries_written_at_commit() {
    // 200 bitmaps' entries change in one transaction: more than the core
    // keeps, so colliding ones are written back early, the rest at commit.
    let per = 16_320u64;
    let nr = 200 * per;
    let mut md = ThinMetadata::format(mem_store(4096), 128, nr).unwrap();
    md.create_thin(1).unwrap();
    md.commit().unwrap();
    for round in 0..2u64 {
        for i in 0..200u64 {
            let b = i * per + round;
            md.data_block_inc(b).unwrap();
            md.insert_mapping(1, 2 * i + round, b).unwrap();
        }
    }
    assert_eq!(md.data_usage().free, nr - 400);
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    // An abort forgets the changed entries, written back early or not.
    md.remove_range(1, 0, 200).unwrap();
    assert_eq!(md.data_usage().free, nr - 200);
    md.abort().unwrap();
    assert_eq!(md.data_usage().free, nr - 400);
    for i in 0..200u64 {
        assert_eq!(md.data_block_count(i * per).unwrap(), 1);
    }
    md.remove_range(1, 0, 400).unwrap();
    md.commit().unwrap();
    let md = ThinMetadata::open(md.into_store(), None).unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(md.data_usage().free, nr);
    for i in 0..200u64 {
        assert_eq!(md.data_block_count(i * per + 1).unwrap(), 0);
    }
}

/// The last commit's tree answers as the metadata did at that commit, for a
/// reader that copies its nodes from the store, however much the live
/// transaction changes meanwhile (its blocks are never written before the
/// next commit), and hands over each mapped block's whole leaf.
#[test]
fn committed_tree_is_stable_until_the_next_commit() {
    use rthin_core::metadata::thin_metadata::Mapping;
    use rthin_core::pdata::block_store::BlockStore;
    use rthin_core::pdata::checksum::BlockKind;
    let mut md = ThinMetadata::format(mem_store(200), 128, 200_000).unwrap();
    md.create_thin(1).unwrap();
    md.create_thin(2).unwrap();
    for v in 0..6000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v * 3, b).unwrap();
    }
    md.commit().unwrap();
    let tree = md.committed_tree();
    let want: Vec<Option<Mapping>> = (0..18_000u64)
        .map(|v| md.lookup(1, v).unwrap().map(|r| r.mapping))
        .collect();
    // Every kind of change, none committed: new mappings (splits), private
    // copies after a snapshot, a removed range, a deleted device, a new one.
    md.create_snap(3, 1).unwrap();
    for v in (0..18_000u64).step_by(7) {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    md.remove_range(1, 9000, 12_000).unwrap();
    md.delete(2).unwrap();
    md.create_thin(4).unwrap();
    // Churn: blocks allocated and freed again in this transaction, so the
    // allocator wraps around the device, past the blocks the changes above
    // freed (which the commit still uses).
    for round in 0..24u64 {
        md.create_thin(10 + round).unwrap();
        for v in 0..3000u64 {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(10 + round, v, b).unwrap();
        }
        md.delete(10 + round).unwrap();
    }
    let copy = |b: u64| -> Result<Vec<u8>, CoreError> {
        Ok(md.store().read(b, BlockKind::Node)?.to_vec())
    };
    let copy = &copy;
    for (v, expected) in want.iter().enumerate() {
        let v = v as u64;
        let mut leaf = Vec::new();
        let got = tree
            .lookup_leaf(1, v, copy, |k, m| leaf.push((k, m)))
            .unwrap();
        assert_eq!(got, *expected, "vblock {v}");
        match got {
            Some(m) => {
                assert!(leaf.contains(&(v, m)) && leaf.len() > 1);
                assert!(leaf.windows(2).all(|w| w[0].0 < w[1].0));
                for (k, m) in leaf {
                    assert_eq!(want[k as usize], Some(m));
                }
            }
            None => assert!(leaf.is_empty()),
        }
    }
    // Device 2 is still in the commit (empty), 4 is not yet.
    assert_eq!(tree.lookup_leaf(2, 0, copy, |_, _| {}).unwrap(), None);
    assert_eq!(tree.lookup_leaf(4, 0, copy, |_, _| {}).unwrap(), None);
    // A pointer outside the metadata device is refused, not followed.
    let bad = rthin_core::metadata::committed::CommittedTree {
        nr_blocks: 10,
        ..tree
    };
    assert!(bad.lookup_leaf(1, 0, copy, |_, _| {}).is_err());
    md.commit().unwrap();
    assert_ne!(md.committed_tree(), tree);
    let copy = |b: u64| -> Result<Vec<u8>, CoreError> {
        Ok(md.store().read(b, BlockKind::Node)?.to_vec())
    };
    assert_eq!(
        md.committed_tree()
            .lookup_leaf(1, 7, copy, |_, _| {})
            .unwrap(),
        md.lookup(1, 7).unwrap().map(|r| r.mapping)
    );
}

#[test]
fn delete_releases_runs_of_blocks_in_few_accesses() {
    // Deleting a provisioned device is one walk of its tree; the data blocks
    // of a leaf are released a bitmap at a time (dm-thin's range decrement),
    // not one space-map update each, so a big delete holds the pool briefly.
    let n = 300_000u64;
    let mut md = ThinMetadata::format(mem_store(8192), 128, n + 1000).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..n {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    md.commit().unwrap();
    let before = accesses(&md, 0);
    let freed = md.data_blocks_freed();
    md.delete(1).unwrap();
    // What arms the reuse grace period counts the runs too.
    assert_eq!(md.data_blocks_freed() - freed, n);
    let per_mapping = accesses(&md, before) as f64 / n as f64;
    println!("block accesses per mapping released by delete: {per_mapping:.3}");
    assert!(
        per_mapping <= 0.25,
        "delete: {per_mapping:.3} block accesses per mapping"
    );
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(rep.data_allocated, 0);
    assert_eq!(md.data_usage().free, n + 1000);
}

#[test]
fn delete_keeps_the_counts_of_shared_blocks() {
    // Runs that cross a bitmap boundary, blocks shared with one snapshot
    // (count 2) and with two (count 3: the overflow tree), holes and
    // out-of-order blocks: deleting each device in turn leaves exactly the
    // survivors' blocks allocated.
    let n = 40_000u64;
    let mut md = ThinMetadata::format(mem_store(8192), 128, 3 * n).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..n {
        if v % 97 == 13 {
            continue;
        }
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, if v % 1000 == 7 { n + v } else { v }, b)
            .unwrap();
    }
    md.commit().unwrap();
    md.create_snap(2, 1).unwrap();
    for v in (0..n).step_by(3) {
        md.remove_range(1, v, v + 1).unwrap();
    }
    md.create_snap(3, 2).unwrap();
    for v in (n / 2..n).step_by(5) {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(2, v, b).unwrap();
    }
    md.commit().unwrap();
    for dev in [2, 1, 3] {
        md.delete(dev).unwrap();
        md.commit().unwrap();
        let rep = checker::check(md.store()).unwrap();
        assert!(
            rep.errors.is_empty(),
            "after deleting {dev}: {:?}",
            rep.errors
        );
        assert_eq!(
            md.data_usage().total - md.data_usage().free,
            rep.data_allocated
        );
    }
    assert_eq!(md.data_usage().free, 3 * n);
}

/// The running count of freed data blocks grows with every path that drops
/// a block's last reference, releasing the metadata snapshot included, and
/// not with one that leaves a reference (the held snapshot's); an abort does
/// not lower it.
#[test]
fn data_blocks_freed_counts_every_free() {
    let mut md = ThinMetadata::format(mem_store(1024), 128, 16).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..4u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    md.commit().unwrap();
    assert_eq!(md.data_blocks_freed(), 0);
    md.reserve_metadata_snap().unwrap();
    md.commit().unwrap();
    assert!(md.remove_mapping(1, 0).unwrap());
    assert_eq!(
        md.data_blocks_freed(),
        0,
        "the snapshot still holds block 0"
    );
    md.commit().unwrap();
    md.release_metadata_snap().unwrap();
    assert_eq!(md.data_blocks_freed(), 1, "the release freed block 0");
    md.commit().unwrap();
    assert!(md.remove_mapping(1, 1).unwrap());
    assert_eq!(md.data_blocks_freed(), 2);
    md.abort().unwrap();
    assert_eq!(md.data_blocks_freed(), 2);
    md.delete(1).unwrap();
    assert_eq!(md.data_blocks_freed(), 5);
}

/// The metadata low-water threshold is checked at every metadata
/// allocation, whatever the operation: unmapping blocks (no message or new
/// mapping) crosses it, and it fires once per downward crossing.
#[test]
fn metadata_low_water_at_every_allocation() {
    let mut md = ThinMetadata::format(mem_store(1024), 128, 100_000).unwrap();
    md.create_thin(1).unwrap();
    for v in 0..20_000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v, b).unwrap();
    }
    md.commit().unwrap();
    let free = md.metadata_usage().free;
    md.set_metadata_low_water(free - 5);
    assert!(!md.take_metadata_low_water());
    // Unmapping one block in each of many leaves shadows each leaf.
    for v in (0..20_000u64).step_by(200) {
        assert!(md.remove_mapping(1, v).unwrap());
    }
    assert!(md.metadata_usage().free <= free - 5);
    assert!(
        md.take_metadata_low_water(),
        "the unmaps crossed the threshold"
    );
    assert!(!md.take_metadata_low_water(), "once per crossing");
    md.commit().unwrap();
    assert!(md.metadata_usage().free > free - 5);
    for v in (1..20_000u64).step_by(200) {
        assert!(md.remove_mapping(1, v).unwrap());
    }
    assert!(md.take_metadata_low_water(), "again after rising above it");
}
