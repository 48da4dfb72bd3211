// SPDX-License-Identifier: GPL-2.0
//! Crash consistency: a workload runs once with every media write logged
//! (with random early write-back of dirty buffers, as dm-bufio may do). Then
//! for every prefix of the write log (a crash after k writes), and for every
//! k with the next write torn (a random number of its 512-byte sectors
//! written), the image must open at exactly the last committed state and pass
//! the independent checker (the full checker on every 4th image and on every
//! torn superblock, the state comparison on all); every 25th crashed image is also modified and
//! committed again.

use rthin_core::core_error::CoreError;
use rthin_core::metadata::checker;
use rthin_core::metadata::thin_metadata::ThinMetadata;
use rthin_core_support::{dump, Devs, HostStore, MemMedia, Rng, RoMedia};

#[derive(Clone, Debug, PartialEq)]
struct State {
    devs: Devs,
    trans_id: u64,
    time: u32,
    held: bool,
}

fn state<S: rthin_core::pdata::block_store::BlockStore>(md: &ThinMetadata<S>) -> State {
    State {
        devs: dump(md),
        trans_id: md.transaction_id(),
        time: md.time(),
        held: md.held_root() != 0,
    }
}

/// Runs the workload; returns the write log and, for every superblock write
/// (by log index), the state that commit made durable.
type WriteLog = Vec<(u64, Box<rthin_core_support::Block>)>;

fn record(seed: u64) -> (WriteLog, Vec<(usize, State)>, u64) {
    let mut rng = Rng::new(seed);
    let mut media = MemMedia::new(300);
    media.log = Some(Vec::new());
    let mut st = HostStore::new(media);
    st.evict = Some(Rng::new(seed ^ 0xabc));
    let mut md = ThinMetadata::format(st, 128, 4000).unwrap();
    let mut commits: Vec<(usize, State)> = Vec::new();
    let sb_count = |md: &ThinMetadata<HostStore<MemMedia>>| {
        md.store()
            .media
            .log
            .as_ref()
            .unwrap()
            .iter()
            .filter(|(b, _)| *b == 0)
            .count()
    };
    let push_new =
        |md: &ThinMetadata<HostStore<MemMedia>>, commits: &mut Vec<(usize, State)>, s: State| {
            let log = md.store().media.log.as_ref().unwrap();
            let idx: Vec<usize> = log
                .iter()
                .enumerate()
                .filter(|(_, (b, _))| *b == 0)
                .map(|(i, _)| i)
                .collect();
            for i in idx.into_iter().skip(commits.len()) {
                commits.push((i, s.clone()));
            }
        };
    push_new(&md, &mut commits, state(&md));
    for _ in 0..160 {
        let r = rng.below(100);
        let dev = rng.below(5);
        if r < 50 {
            if md.device_details(dev).unwrap().is_some() {
                for _ in 0..1 + rng.below(6) {
                    match md.alloc_data_block() {
                        Ok(b) => md.insert_mapping(dev, rng.below(2000), b).unwrap(),
                        Err(CoreError::NoSpace) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
            } else {
                md.create_thin(dev).unwrap();
            }
        } else if r < 58 {
            let _ = md.remove_range(dev, rng.below(2000), rng.below(2000));
        } else if r < 65 {
            let _ = md.create_snap(rng.below(5), dev);
        } else if r < 70 {
            let _ = md.delete(dev);
        } else if r < 73 {
            let t = md.transaction_id();
            md.set_transaction_id(t, t + 1).unwrap();
        } else if r < 76 {
            let before = state(&md);
            let n = sb_count(&md);
            if md.held_root() == 0 {
                md.reserve_metadata_snap().unwrap();
            } else {
                md.release_metadata_snap().unwrap();
            }
            if sb_count(&md) > n {
                push_new(&md, &mut commits, before);
            }
        } else if r < 90 {
            md.commit().unwrap();
            push_new(&md, &mut commits, state(&md));
        } else if r < 93 {
            md.abort().unwrap();
        }
    }
    md.commit().unwrap();
    push_new(&md, &mut commits, state(&md));
    let st = md.into_store();
    let nr = st.media.nr_blocks;
    (st.media.log.unwrap(), commits, nr)
}

fn expect_at(commits: &[(usize, State)], complete_writes: usize) -> Option<&State> {
    commits
        .iter()
        .rev()
        .find(|(i, _)| *i < complete_writes)
        .map(|(_, s)| s)
}

fn check_image(media: RoMedia<'_>, want: Option<&State>, full: bool, ctx: &str) {
    let st = HostStore::new(media);
    match (ThinMetadata::open(st, Some(128)), want) {
        (Err(CoreError::Unformatted), None) => {}
        (Ok(md), Some(w)) => {
            assert_eq!(&state(&md), w, "{ctx}: state after crash");
            if !full {
                return;
            }
            checker::check(md.store()).unwrap_or_else(|e| panic!("{ctx}: checker: {e}"));
        }
        (Ok(_), None) => panic!("{ctx}: opened before the first commit"),
        (Err(e), w) => panic!(
            "{ctx}: open failed: {e:?} (expected state: {})",
            w.is_some()
        ),
    }
}

fn crash_at_every_write(seed: u64) {
    let mut points = 0usize;
    let mut torn = 0usize;
    {
        let (log, commits, nr) = record(seed);
        assert!(
            commits.len() > 10,
            "workload too small: {} commits",
            commits.len()
        );
        let mut rng = Rng::new(seed);
        let mut media = MemMedia::new(nr);
        for k in 0..=log.len() {
            // Crash after exactly k writes.
            let want = expect_at(&commits, k);
            check_image(
                RoMedia {
                    base: &media,
                    overlay: None,
                },
                want,
                k % 4 == 0,
                &format!("seed {seed} drop at {k}"),
            );
            points += 1;
            if let Some((b, data)) = log.get(k) {
                // The next write torn: only its first `s` sectors reach the media.
                let s = 1 + rng.below(7) as usize;
                let mut blk = [0u8; 4096];
                rthin_core_support::Media::read_block(&media, *b, &mut blk).unwrap();
                blk[..s * 512].copy_from_slice(&data[..s * 512]);
                let want_t = if *b == 0 {
                    expect_at(&commits, k + 1)
                } else {
                    want
                };
                check_image(
                    RoMedia {
                        base: &media,
                        overlay: Some((*b, Box::new(blk))),
                    },
                    want_t,
                    k % 4 == 1 || *b == 0,
                    &format!("seed {seed} tear at {k} ({s} sectors of block {b})"),
                );
                torn += 1;
                if k % 25 == 0 && want.is_some() {
                    // Recovery must leave usable metadata.
                    let mut md =
                        ThinMetadata::open(HostStore::new(media.snapshot()), None).unwrap();
                    let _ = md.create_thin(99);
                    if let Ok(b) = md.alloc_data_block() {
                        md.insert_mapping(99, 7, b).unwrap();
                    }
                    md.commit().unwrap();
                    checker::check(md.store())
                        .unwrap_or_else(|e| panic!("seed {seed} reuse at {k}: {e}"));
                }
                rthin_core_support::Media::write_block(&mut media, *b, data).unwrap();
            }
        }
    }
    eprintln!("seed {seed}: {points} dropped-write prefixes, {torn} torn writes");
    assert!(points > 400, "too few crash points: {points}");
}

#[test]
fn crash_seed_1() {
    crash_at_every_write(1);
}

#[test]
fn crash_seed_2() {
    crash_at_every_write(2);
}

#[test]
fn crash_seed_3() {
    // RTHIN_CRASH_SEEDS adds workloads for soak runs.
    let extra: u64 = std::env::var("RTHIN_CRASH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for seed in 3..4 + extra {
        crash_at_every_write(seed);
    }
}
