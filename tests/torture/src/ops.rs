// SPDX-License-Identifier: GPL-2.0
//! The operations and their seeded generator.
//!
//! A sequence is a function of its seed only. The generator keeps a rough
//! state (which thins exist, whether a metadata snapshot is held) so that
//! most operations make sense; the executor checks every operation against
//! the model again and skips one that does not apply, so any subset of a
//! sequence (what shrinking tries) runs too.

use std::fmt;

use crate::{
    model::{BLOCK_SECTORS, THIN_BLOCKS, THIN_SECTORS},
    rng::Rng,
};

/// At most this many thins at once (each is read back in full at the end).
const MAX_THINS: usize = 5;
/// Most I/O goes to the first blocks of a thin, so that writes overwrite,
/// break sharing and discard what earlier ones wrote.
const HOT_BLOCKS: u64 = 96;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Pool,
    Thin(u32),
}

/// A sector range of thin `dev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    pub dev: u32,
    pub sector: u64,
    pub len: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// O_DIRECT write; `fua` opens with O_DSYNC (REQ_FUA), `fsync` ends with fdatasync.
    Write {
        io: Io,
        fua: bool,
        fsync: bool,
    },
    Read(Io),
    Discard(Io),
    CreateThin(u32),
    /// As LVM does it: the origin suspended around the message.
    CreateSnap {
        dev: u32,
        origin: u32,
    },
    /// The thin is read back, deactivated and deleted.
    Delete(u32),
    ReserveMetaSnap,
    ReleaseMetaSnap,
    /// `set_transaction_id` from the current id to the next.
    SetTransactionId,
    SuspendResume {
        target: Target,
        noflush: bool,
    },
    /// The same table loaded again (reload, suspend, resume).
    Reload(Target),
    /// The table swapped to `error` and back.
    ErrorAndBack(Target),
    /// The data device grown by this many blocks, then the pool table.
    GrowData(u64),
    /// The metadata device grown by this many sectors, then the pool reloaded.
    GrowMeta(u64),
    /// The pool reloaded with `error_if_no_space` (`error`) or
    /// `queue_if_no_space`, filled until it runs out of data space, then
    /// grown out of it.
    OutOfSpace {
        error: bool,
    },
    /// The data device reloaded behind dm-delay of this many ms (0: linear).
    SetDelay(u32),
    /// One process per list writes its ranges (disjoint from the others')
    /// while `during` runs.
    Parallel {
        writers: Vec<Vec<Io>>,
        during: Box<Op>,
    },
}

/// The kinds of operation, as `--skip` names them.
pub const KINDS: &[&str] = &[
    "write",
    "read",
    "discard",
    "create_thin",
    "create_snap",
    "delete",
    "metadata_snap",
    "set_transaction_id",
    "suspend_pool",
    "suspend_thin",
    "reload_pool",
    "reload_thin",
    "error_swap_pool",
    "error_swap_thin",
    "grow_data",
    "grow_meta",
    "out_of_space",
    "delay",
    "parallel",
];

impl Op {
    /// Its kind (one of `KINDS`).
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Write { .. } => "write",
            Op::Read(_) => "read",
            Op::Discard(_) => "discard",
            Op::CreateThin(_) => "create_thin",
            Op::CreateSnap { .. } => "create_snap",
            Op::Delete(_) => "delete",
            Op::ReserveMetaSnap | Op::ReleaseMetaSnap => "metadata_snap",
            Op::SetTransactionId => "set_transaction_id",
            Op::SuspendResume {
                target: Target::Pool,
                ..
            } => "suspend_pool",
            Op::SuspendResume { .. } => "suspend_thin",
            Op::Reload(Target::Pool) => "reload_pool",
            Op::Reload(_) => "reload_thin",
            Op::ErrorAndBack(Target::Pool) => "error_swap_pool",
            Op::ErrorAndBack(_) => "error_swap_thin",
            Op::GrowData(_) => "grow_data",
            Op::GrowMeta(_) => "grow_meta",
            Op::OutOfSpace { .. } => "out_of_space",
            Op::SetDelay(_) => "delay",
            Op::Parallel { .. } => "parallel",
        }
    }
    /// Whether it is, or contains, an operation of one of these kinds.
    pub fn is_any_of(&self, kinds: &[String]) -> bool {
        kinds.iter().any(|k| k == self.kind())
            || matches!(self, Op::Parallel { during, .. } if during.is_any_of(kinds))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Pool => write!(f, "pool"),
            Target::Thin(d) => write!(f, "thin {d}"),
        }
    }
}

impl fmt::Display for Io {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "thin {} sectors {}+{}", self.dev, self.sector, self.len)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Write { io, fua, fsync } => write!(
                f,
                "write {io}{}{}",
                if *fua { " fua" } else { "" },
                if *fsync { " fsync" } else { "" }
            ),
            Op::Read(io) => write!(f, "read {io}"),
            Op::Discard(io) => write!(f, "discard {io}"),
            Op::CreateThin(d) => write!(f, "create_thin {d}"),
            Op::CreateSnap { dev, origin } => write!(f, "create_snap {dev} of {origin}"),
            Op::Delete(d) => write!(f, "delete {d}"),
            Op::ReserveMetaSnap => write!(f, "reserve_metadata_snap"),
            Op::ReleaseMetaSnap => write!(f, "release_metadata_snap"),
            Op::SetTransactionId => write!(f, "set_transaction_id"),
            Op::SuspendResume { target, noflush } => write!(
                f,
                "suspend{} and resume {target}",
                if *noflush { " --noflush" } else { "" }
            ),
            Op::Reload(t) => write!(f, "reload {t}"),
            Op::ErrorAndBack(t) => write!(f, "swap {t} to error and back"),
            Op::GrowData(n) => write!(f, "grow data by {n} blocks"),
            Op::GrowMeta(n) => write!(f, "grow metadata by {n} sectors"),
            Op::OutOfSpace { error } => write!(
                f,
                "run out of data space under {} and grow",
                if *error {
                    "error_if_no_space"
                } else {
                    "queue_if_no_space"
                }
            ),
            Op::SetDelay(0) => write!(f, "data device without delay"),
            Op::SetDelay(ms) => write!(f, "data device behind dm-delay {ms} ms"),
            Op::Parallel { writers, during } => {
                write!(f, "while {during}:")?;
                for (i, w) in writers.iter().enumerate() {
                    let ios: Vec<String> = w.iter().map(Io::to_string).collect();
                    write!(f, " [process {i}: {}]", ios.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// The generator's view of the pool.
struct Shape {
    live: Vec<u32>,
    next_dev: u32,
    held: bool,
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

/// A range in a thin: small or whole-block pieces, aligned or not, some
/// across a block boundary, within blocks `lo..hi`.
fn gen_range(rng: &mut Rng, lo: u64, hi: u64) -> (u64, u64) {
    let base = (lo + rng.below(hi - lo)) * BLOCK_SECTORS;
    let (sector, len) = match rng.below(5) {
        0 => (base + rng.below(BLOCK_SECTORS), 1 + rng.below(16)),
        1 => (base, BLOCK_SECTORS),
        2 => (base, 2 * BLOCK_SECTORS),
        3 => {
            let k = 1 + rng.below(64);
            (base + BLOCK_SECTORS - k, k + 1 + rng.below(64))
        }
        _ => (base + rng.below(8) * 8, 8 + rng.below(3 * BLOCK_SECTORS)),
    };
    let end = (hi * BLOCK_SECTORS).min(THIN_SECTORS);
    let len = len.min(end.saturating_sub(sector)).max(1);
    (sector.min(end - 1), len)
}

fn gen_io(rng: &mut Rng, dev: u32) -> Io {
    let hi = if rng.below(8) == 0 {
        THIN_BLOCKS
    } else {
        HOT_BLOCKS
    };
    let (sector, len) = gen_range(rng, 0, hi);
    Io { dev, sector, len }
}

fn gen_target(rng: &mut Rng, s: &Shape) -> Target {
    if s.live.is_empty() || rng.below(2) == 0 {
        Target::Pool
    } else {
        Target::Thin(pick(rng, &s.live))
    }
}

/// An operation that leaves every thin's content alone, to run while
/// processes write (`Parallel`); `busy` are the thins being written.
fn gen_during(rng: &mut Rng, s: &mut Shape, busy: &[u32]) -> Op {
    let idle: Vec<u32> = s
        .live
        .iter()
        .copied()
        .filter(|d| !busy.contains(d))
        .collect();
    match rng.below(7) {
        0 | 1 => Op::SuspendResume {
            target: gen_target(rng, s),
            noflush: rng.below(2) == 0,
        },
        2 => Op::Reload(gen_target(rng, s)),
        // Not a reserve: which in-flight writes its snapshot holds is not
        // known, so neither are the blocks it keeps in use.
        3 if s.held => {
            s.held = false;
            Op::ReleaseMetaSnap
        }
        4 if !idle.is_empty() && s.live.len() < MAX_THINS => {
            let dev = s.next_dev;
            s.next_dev += 1;
            s.live.push(dev);
            Op::CreateSnap {
                dev,
                origin: pick(rng, &idle),
            }
        }
        5 => Op::GrowData(16 + rng.below(48)),
        _ => Op::SetTransactionId,
    }
}

fn gen_op(rng: &mut Rng, s: &mut Shape) -> Op {
    if s.live.is_empty() {
        let dev = s.next_dev;
        s.next_dev += 1;
        s.live.push(dev);
        return Op::CreateThin(dev);
    }
    let dev = pick(rng, &s.live);
    let roll = rng.below(100);
    match roll {
        0..=29 => Op::Write {
            io: gen_io(rng, dev),
            fua: rng.below(5) == 0,
            fsync: rng.below(4) == 0,
        },
        30..=36 => Op::Read(gen_io(rng, dev)),
        37..=43 => Op::Discard(gen_io(rng, dev)),
        44..=48 if s.live.len() < MAX_THINS => {
            let new = s.next_dev;
            s.next_dev += 1;
            s.live.push(new);
            Op::CreateThin(new)
        }
        49..=54 if s.live.len() < MAX_THINS => {
            let new = s.next_dev;
            s.next_dev += 1;
            s.live.push(new);
            Op::CreateSnap {
                dev: new,
                origin: dev,
            }
        }
        55..=58 if s.live.len() > 1 => {
            s.live.retain(|d| *d != dev);
            Op::Delete(dev)
        }
        59..=61 => {
            s.held = !s.held;
            if s.held {
                Op::ReserveMetaSnap
            } else {
                Op::ReleaseMetaSnap
            }
        }
        62..=63 => Op::SetTransactionId,
        64..=70 => Op::SuspendResume {
            target: gen_target(rng, s),
            noflush: rng.below(2) == 0,
        },
        71..=75 => Op::Reload(gen_target(rng, s)),
        76..=78 => Op::ErrorAndBack(gen_target(rng, s)),
        79..=80 => Op::GrowData(16 + rng.below(48)),
        81 => Op::GrowMeta(256 + rng.below(2048)),
        82..=84 if !s.held => Op::OutOfSpace {
            error: rng.below(2) == 0,
        },
        85..=87 => Op::SetDelay(pick(rng, &[0, 0, 5, 20])),
        88..=99 => {
            // Process i writes blocks of its own stripe, so no two overlap.
            let n = 2 + rng.below(2);
            let writers: Vec<Vec<Io>> = (0..n)
                .map(|i| {
                    let d = pick(rng, &s.live);
                    let lo = i * (HOT_BLOCKS / 3);
                    (0..1 + rng.below(4))
                        .map(|_| {
                            let (sector, len) = gen_range(rng, lo, lo + HOT_BLOCKS / 3);
                            Io {
                                dev: d,
                                sector,
                                len,
                            }
                        })
                        .collect()
                })
                .collect();
            let busy: Vec<u32> = writers.iter().flatten().map(|io| io.dev).collect();
            let during = Box::new(gen_during(rng, s, &busy));
            Op::Parallel { writers, during }
        }
        _ => Op::Read(gen_io(rng, dev)),
    }
}

/// The sequence of `n` operations of `seed`.
pub fn sequence(seed: u64, n: usize) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut s = Shape {
        live: Vec::new(),
        next_dev: 0,
        held: false,
    };
    (0..n).map(|_| gen_op(&mut rng, &mut s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        assert_eq!(sequence(5, 200), sequence(5, 200));
        assert_ne!(sequence(5, 50), sequence(6, 50));
        for seed in 0..50 {
            for op in sequence(seed, 200) {
                let ios: Vec<Io> = match &op {
                    Op::Write { io, .. } | Op::Read(io) | Op::Discard(io) => vec![*io],
                    Op::Parallel { writers, .. } => writers.iter().flatten().copied().collect(),
                    _ => vec![],
                };
                for io in ios {
                    assert!(io.len > 0 && io.sector + io.len <= THIN_SECTORS, "{op}");
                }
            }
        }
    }

    #[test]
    fn every_kind_is_generated() {
        let ops: Vec<Op> = (0..20).flat_map(|seed| sequence(seed, 200)).collect();
        for k in KINDS {
            assert!(ops.iter().any(|op| op.kind() == *k), "{k}");
        }
    }

    #[test]
    fn parallel_writers_never_overlap() {
        for seed in 0..200 {
            for op in sequence(seed, 100) {
                if let Op::Parallel { writers, .. } = op {
                    for (i, a) in writers.iter().enumerate() {
                        for b in writers.iter().skip(i + 1) {
                            for x in a {
                                for y in b {
                                    let apart = x.dev != y.dev
                                        || x.sector + x.len <= y.sector
                                        || y.sector + y.len <= x.sector;
                                    assert!(apart, "{x} and {y}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
