// SPDX-License-Identifier: GPL-2.0
//! Host benchmark of the metadata core (no `cargo bench`):
//! `cargo run --release -p rthin-core --example bench [N]`.
//! Runs over the memory-backed store (dm-bufio-like cache, checksums computed
//! at write-back), except the last figure, which commits to a file with fsync.
#![allow(missing_docs, unreachable_pub)]

use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core_support::{FileMedia, HostStore, MemMedia, Rng};
use std::time::Instant;

fn per_sec(n: u64, secs: f64) -> String {
    format!("{:.0}/s", n as f64 / secs)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let meta_blocks = 65_536; // 256 MiB metadata device
    let data_blocks = 4 * n + 100_000;
    let mut md =
        ThinMetadata::format(HostStore::new(MemMedia::new(meta_blocks)), 128, data_blocks).unwrap();
    md.create_thin(1).unwrap();
    md.commit().unwrap();

    // Sequential provisioning as the pool's workers do it: a lookup that
    // misses, an allocation, an insert; a commit every 4,096 blocks.
    let mut seq =
        ThinMetadata::format(HostStore::new(MemMedia::new(meta_blocks)), 128, data_blocks).unwrap();
    seq.create_thin(1).unwrap();
    seq.commit().unwrap();
    let a0 = seq.store().reads.get() + seq.store().writes.get();
    let t = Instant::now();
    for v in 0..n {
        assert!(seq.lookup(1, v).unwrap().is_none());
        let b = seq.alloc_data_block().unwrap();
        seq.insert_mapping(1, v, b).unwrap();
        if v % 4096 == 4095 {
            seq.commit().unwrap();
        }
    }
    seq.commit().unwrap();
    let s = t.elapsed().as_secs_f64();
    let accesses = seq.store().reads.get() + seq.store().writes.get() - a0;
    println!(
        "sequential provisioning (lookup, alloc, insert; commit every 4,096): {n} in {s:.2} s = {}, {:.1} block accesses each",
        per_sec(n, s),
        accesses as f64 / n as f64
    );
    drop(seq);

    let mut rng = Rng::new(42);
    let keys: Vec<u64> = (0..n).map(|_| rng.below(1 << 32)).collect();
    let t = Instant::now();
    for &k in &keys {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, k, b).unwrap();
    }
    let ins = t.elapsed().as_secs_f64();
    let writes0 = md.store().media.writes;
    let t = Instant::now();
    md.commit().unwrap();
    let c1 = t.elapsed().as_secs_f64();
    let written = md.store().media.writes - writes0;
    let used = md.metadata_allocated();
    println!(
        "random inserts (alloc + insert, one transaction): {n} in {ins:.2} s = {}",
        per_sec(n, ins)
    );
    println!("commit of that transaction: {:.1} ms, {written} blocks written, {used} metadata blocks in use", c1 * 1e3);

    let mut order = keys.clone();
    let mut r2 = Rng::new(7);
    for i in (1..order.len()).rev() {
        order.swap(i, r2.below(i as u64 + 1) as usize);
    }
    let t = Instant::now();
    let mut found = 0u64;
    for &k in &order {
        found += u64::from(md.lookup(1, k).unwrap().is_some());
    }
    let lk = t.elapsed().as_secs_f64();
    assert_eq!(found, n);
    println!(
        "random lookups (hits): {n} in {lk:.2} s = {}",
        per_sec(n, lk)
    );

    // Small transactions: 100 random inserts then a commit.
    let rounds = 1000u64;
    let mut commit_t = 0.0;
    let mut blocks = 0u64;
    let t_all = Instant::now();
    for _ in 0..rounds {
        for _ in 0..100 {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(1, rng.below(1 << 32), b).unwrap();
        }
        let w0 = md.store().media.writes;
        let t = Instant::now();
        md.commit().unwrap();
        commit_t += t.elapsed().as_secs_f64();
        blocks += md.store().media.writes - w0;
    }
    let all = t_all.elapsed().as_secs_f64();
    println!(
        "{rounds} transactions of 100 random inserts: {:.2} s total = {} inserts; commit {:.0} us and {} blocks written on average",
        all,
        per_sec(rounds * 100, all),
        commit_t / rounds as f64 * 1e6,
        blocks / rounds
    );

    // Snapshot, then break sharing with random overwrites in the origin.
    let t = Instant::now();
    md.create_snap(2, 1).unwrap();
    md.commit().unwrap();
    let snap = t.elapsed().as_secs_f64();
    let m = n / 10;
    let t = Instant::now();
    for i in 0..m {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, keys[(i * 7 % n) as usize], b).unwrap();
    }
    md.commit().unwrap();
    let cow = t.elapsed().as_secs_f64();
    println!("create_snap + commit: {:.2} ms; then {m} overwrites of shared mappings + commit: {cow:.2} s = {}", snap * 1e3, per_sec(m, cow));

    let t = Instant::now();
    md.delete(1).unwrap();
    md.commit().unwrap();
    println!(
        "delete of the origin ({} mappings, shared with the snapshot) + commit: {:.2} s",
        n + rounds * 100,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    md.delete(2).unwrap();
    md.commit().unwrap();
    println!(
        "delete of the snapshot (releases every data block) + commit: {:.2} s",
        t.elapsed().as_secs_f64()
    );

    // Commits on a real file with fsync.
    let path = std::env::temp_dir().join(format!("rthin-bench-{}.img", std::process::id()));
    let st = HostStore::new(FileMedia::create(&path, 16_384).unwrap());
    let mut md = ThinMetadata::format(st, 128, 1_000_000).unwrap();
    md.create_thin(1).unwrap();
    let rounds = 200u64;
    let t = Instant::now();
    for _ in 0..rounds {
        for _ in 0..10 {
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(1, rng.below(1 << 24), b).unwrap();
        }
        md.commit().unwrap();
    }
    let f = t.elapsed().as_secs_f64();
    println!(
        "file store: {rounds} commits of 10 inserts with fsync: {:.2} ms per commit",
        f / rounds as f64 * 1e3
    );
    let _ = std::fs::remove_file(&path);

    // Stack use: a mixed workload on a thread with a 16 KiB stack (the
    // kernel's stack size); an overflow would crash the process.
    let h = std::thread::Builder::new()
        .stack_size(16 * 1024)
        .spawn(|| {
            let mut rng = Rng::new(3);
            let mut md =
                ThinMetadata::format(HostStore::new(MemMedia::new(20_000)), 128, 400_000).unwrap();
            md.create_thin(0).unwrap();
            for round in 0..40u64 {
                for _ in 0..2000 {
                    let b = md.alloc_data_block().unwrap();
                    md.insert_mapping(0, rng.below(1 << 20), b).unwrap();
                }
                md.create_snap(round + 1, 0).unwrap();
                if round % 4 == 3 {
                    md.delete(round - 2).unwrap();
                    md.remove_range(0, rng.below(1 << 20), rng.below(1 << 20))
                        .unwrap();
                }
                if round == 10 {
                    md.reserve_metadata_snap().unwrap();
                }
                md.commit().unwrap();
            }
            md.release_metadata_snap().unwrap();
            md.commit().unwrap();
        })
        .unwrap();
    h.join().unwrap();
    println!("mixed workload on a 16 KiB stack: ok");
}
