// SPDX-License-Identifier: GPL-2.0
//! Metadata blocks the core uses for the workloads of bench case 11, on the
//! host in seconds (no VM): `cargo run --release -p rthin-core --example
//! metadata_space`. Each figure is the metadata space map's allocated count
//! after a commit, what the pool's status line reports as used. Volumes use
//! 64 KiB blocks; a commit every 256 provisions stands in for the pool's
//! one-second commits. `make bench` (case 11) runs the same workloads on
//! rthin and the C dm-thin in one VM boot.
#![allow(missing_docs, unreachable_pub)]

use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core_support::{HostStore, MemMedia, Rng};

type Md = ThinMetadata<HostStore<MemMedia>>;

/// 1 GiB of 64 KiB blocks.
const GIB_BLOCKS: u64 = 16_384;

fn fresh() -> Md {
    // A 64 MiB metadata device; a 16 GiB data device.
    let mut md =
        ThinMetadata::format(HostStore::new(MemMedia::new(16_384)), 128, 16 * GIB_BLOCKS).unwrap();
    md.commit().unwrap();
    md
}

/// Maps `vblock` of `dev` to a new block, committing every 256 provisions.
fn provision(md: &mut Md, dev: u64, vblock: u64, n: &mut u64) {
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(dev, vblock, b).unwrap();
    *n += 1;
    if *n % 256 == 0 {
        md.commit().unwrap();
    }
}

fn used(md: &mut Md) -> u64 {
    md.commit().unwrap();
    md.metadata_allocated()
}

/// `0..n` in a random order (Fisher-Yates).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
    v
}

fn main() {
    let mut md = fresh();
    let empty = used(&mut md);
    println!("empty pool: {empty} metadata blocks");
    let mut n = 0;

    // 1. Random 4k writes provisioning 1 GiB of a 4 GiB thin.
    md.create_thin(1).unwrap();
    for v in shuffled(4 * GIB_BLOCKS, 1)
        .into_iter()
        .take(GIB_BLOCKS as usize)
    {
        provision(&mut md, 1, v, &mut n);
    }
    println!(
        "1. random provisioning of 1 GiB of a 4 GiB thin: {}",
        used(&mut md)
    );

    // 2. Sequential provisioning of a whole 1 GiB thin.
    md.create_thin(2).unwrap();
    for v in 0..GIB_BLOCKS {
        provision(&mut md, 2, v, &mut n);
    }
    println!(
        "2. sequential provisioning of a 1 GiB thin (with 1. still there): {}",
        used(&mut md)
    );

    // 3. 100 rounds: snapshot thin 2, overwrite 5% of its blocks at random.
    let mut rng = Rng::new(3);
    for round in 0..100u64 {
        md.create_snap(1000 + round, 2).unwrap();
        md.commit().unwrap();
        for _ in 0..GIB_BLOCKS / 20 {
            provision(&mut md, 2, rng.below(GIB_BLOCKS), &mut n);
        }
    }
    println!(
        "3. 100 rounds of snapshot + 5% overwrites of thin 2: {}",
        used(&mut md)
    );

    // 4. 1,000 empty thins, then 1,000 snapshots of thin 2.
    for dev in 0..1000u64 {
        md.create_thin(2000 + dev).unwrap();
    }
    println!("4a. 1,000 empty thins more: {}", used(&mut md));
    for dev in 0..1000u64 {
        md.create_snap(3000 + dev, 2).unwrap();
        if dev % 50 == 49 {
            md.commit().unwrap();
        }
    }
    println!("4b. 1,000 snapshots of thin 2 more: {}", used(&mut md));

    // 5. Delete everything.
    let mut devs = Vec::new();
    let mut from = 0;
    while let Some(d) = md.next_device(from).unwrap() {
        devs.push(d);
        from = d + 1;
    }
    for d in devs {
        md.delete(d).unwrap();
    }
    let end = used(&mut md);
    println!("5. everything deleted: {end} (empty pool: {empty})");
}
