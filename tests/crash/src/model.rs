// SPDX-License-Identifier: GPL-2.0
//! The raw workload and what a crash may leave of it.
//!
//! The workload is a list of steps ("epochs"), all derived from a seed, so
//! the writer and the verifier compute the same list. Step 0 creates thins
//! 1 and 2. Every later step first may delete a snapshot and may create one
//! (of a device that existed before the step), then writes 4 KiB blocks or
//! whole 64 KiB pool blocks to the live devices and discards whole pool
//! blocks, each write with a unique generation number. A step ends with
//! fdatasync of every device it wrote and a log mark `e<step>`; the pool
//! commits messages before they return, so every step's effects are on
//! disk at its mark.
//!
//! A crash after mark k (before mark k+1) must show step k's state, except
//! where step k+1 may have reached the disk in part: a block may then hold
//! its state-k value, any value step k+1 wrote to it, or zeroes if step k+1
//! discarded it; a device that step k+1 creates or deletes may or may not
//! exist. Nothing else is allowed: not another block's data, not data of an
//! older generation, not a deleted device, not torn 4 KiB blocks.

use std::collections::BTreeMap;

use crate::rng::Rng;

/// The unit the workload writes and checks.
pub const BLOCK: u64 = 4096;
/// 4 KiB blocks per pool block (the tests' pools use 64 KiB blocks).
pub const POOL_BLOCK: u64 = 16;
/// Thins 1 and 2 exist from step 0; snapshots take ids from here on.
const FIRST_SNAP: u32 = 3;
/// At most this many devices live at once (reads at every point cost time).
const MAX_LIVE: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create {
        id: u32,
        origin: Option<u32>,
    },
    Delete {
        id: u32,
    },
    /// `count` 4 KiB blocks from `block`, generations `gen..gen + count`.
    Write {
        id: u32,
        block: u64,
        count: u64,
        gen: u64,
    },
    Discard {
        id: u32,
        block: u64,
        count: u64,
    },
}

/// What a 4 KiB block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Val {
    Zero,
    Gen(u64),
}

pub struct Plan {
    pub seed: u64,
    /// 4 KiB blocks per device.
    pub blocks: u64,
    pub steps: Vec<Vec<Op>>,
}

type State = BTreeMap<u32, Vec<Val>>;

impl Plan {
    /// The workload of `steps` steps after step 0 on devices of `blocks`
    /// 4 KiB blocks (a whole number of pool blocks).
    pub fn new(seed: u64, steps: usize, blocks: u64) -> Plan {
        assert!(blocks >= POOL_BLOCK && blocks % POOL_BLOCK == 0);
        let mut rng = Rng(seed);
        let mut live = vec![1u32, 2];
        let mut next_id = FIRST_SNAP;
        let mut gen = 1;
        let mut all = vec![vec![
            Op::Create {
                id: 1,
                origin: None,
            },
            Op::Create {
                id: 2,
                origin: None,
            },
        ]];
        for _ in 0..steps {
            let mut ops = Vec::new();
            let before = live.clone();
            let snaps: Vec<u32> = live.iter().copied().filter(|&i| i >= FIRST_SNAP).collect();
            if !snaps.is_empty() && rng.below(3) == 0 {
                let id = snaps[rng.below(snaps.len() as u64) as usize];
                live.retain(|&i| i != id);
                ops.push(Op::Delete { id });
            }
            if live.len() < MAX_LIVE && rng.below(2) == 0 {
                let cand: Vec<u32> = before
                    .iter()
                    .copied()
                    .filter(|i| live.contains(i))
                    .collect();
                let origin = cand[rng.below(cand.len() as u64) as usize];
                ops.push(Op::Create {
                    id: next_id,
                    origin: Some(origin),
                });
                live.push(next_id);
                next_id += 1;
            }
            let writes = 6 + rng.below(8);
            let discard_at = (rng.below(3) == 0).then(|| rng.below(writes + 1));
            for w in 0..=writes {
                let id = live[rng.below(live.len() as u64) as usize];
                if discard_at == Some(w) {
                    let count = POOL_BLOCK * (1 + rng.below(2));
                    let block = rng.below(blocks / POOL_BLOCK) * POOL_BLOCK;
                    ops.push(Op::Discard {
                        id,
                        block,
                        count: count.min(blocks - block),
                    });
                }
                if w == writes {
                    break;
                }
                let (block, count) = if rng.below(4) == 0 {
                    (rng.below(blocks / POOL_BLOCK) * POOL_BLOCK, POOL_BLOCK)
                } else {
                    (rng.below(blocks), 1)
                };
                ops.push(Op::Write {
                    id,
                    block,
                    count,
                    gen,
                });
                gen += count;
            }
            all.push(ops);
        }
        Plan {
            seed,
            blocks,
            steps: all,
        }
    }

    /// The devices and their blocks after steps `0..=k`.
    pub fn state(&self, k: usize) -> State {
        let mut st = State::new();
        for ops in &self.steps[..=k] {
            for op in ops {
                apply(&mut st, self.blocks, op);
            }
        }
        st
    }

    /// Ids deleted in steps `0..=k`.
    fn deleted(&self, k: usize) -> Vec<u32> {
        self.steps[..=k]
            .iter()
            .flatten()
            .filter_map(|op| match op {
                Op::Delete { id } => Some(*id),
                _ => None,
            })
            .collect()
    }

    /// What a crash after mark `k` may show; with `exact`, nothing of step
    /// k+1 can be on disk.
    pub fn expect(&self, k: usize, exact: bool) -> Vec<DevExpect> {
        let st = self.state(k);
        let mut out: BTreeMap<u32, DevExpect> = st
            .iter()
            .map(|(&id, vals)| {
                let e = DevExpect {
                    id,
                    presence: Presence::Must,
                    allowed: vals.iter().map(|&v| vec![v]).collect(),
                };
                (id, e)
            })
            .collect();
        for id in self.deleted(k) {
            out.insert(
                id,
                DevExpect {
                    id,
                    presence: Presence::MustNot,
                    allowed: Vec::new(),
                },
            );
        }
        let next = match self.steps.get(k + 1) {
            Some(ops) => ops,
            None => return out.into_values().collect(),
        };
        for op in next {
            match *op {
                Op::Create { id, origin } => {
                    // Snapshots start from their origin at state k (the
                    // step's writes come after its snapshot messages).
                    let allowed = match origin {
                        Some(o) => st[&o].iter().map(|&v| vec![v]).collect(),
                        None => vec![vec![Val::Zero]; self.blocks as usize],
                    };
                    let presence = if exact {
                        Presence::MustNot
                    } else {
                        Presence::May
                    };
                    out.insert(
                        id,
                        DevExpect {
                            id,
                            presence,
                            allowed,
                        },
                    );
                }
                Op::Delete { id } if !exact => out.get_mut(&id).unwrap().presence = Presence::May,
                Op::Write {
                    id,
                    block,
                    count,
                    gen,
                } if !exact => {
                    let d = out.get_mut(&id).unwrap();
                    for b in 0..count {
                        d.allow(block + b, Val::Gen(gen + b));
                    }
                }
                Op::Discard { id, block, count } if !exact => {
                    let d = out.get_mut(&id).unwrap();
                    for b in block..block + count {
                        d.allow(b, Val::Zero);
                    }
                }
                _ => {}
            }
        }
        out.into_values().collect()
    }
}

fn apply(st: &mut State, blocks: u64, op: &Op) {
    match *op {
        Op::Create { id, origin } => {
            let vals = match origin {
                Some(o) => st[&o].clone(),
                None => vec![Val::Zero; blocks as usize],
            };
            st.insert(id, vals);
        }
        Op::Delete { id } => {
            st.remove(&id);
        }
        Op::Write {
            id,
            block,
            count,
            gen,
        } => {
            let d = st.get_mut(&id).unwrap();
            for b in 0..count {
                d[(block + b) as usize] = Val::Gen(gen + b);
            }
        }
        Op::Discard { id, block, count } => {
            let d = st.get_mut(&id).unwrap();
            d[block as usize..(block + count) as usize].fill(Val::Zero);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Must,
    May,
    MustNot,
}

/// One device's expectation: whether it exists, and per 4 KiB block the
/// values it may hold.
#[derive(Debug)]
pub struct DevExpect {
    pub id: u32,
    pub presence: Presence,
    pub allowed: Vec<Vec<Val>>,
}

impl DevExpect {
    fn allow(&mut self, block: u64, v: Val) {
        let a = &mut self.allowed[block as usize];
        if !a.contains(&v) {
            a.push(v);
        }
    }
}

// ---- block contents ----
// A written 4 KiB block starts with a magic, the seed, its block number and
// its generation; the rest is filler generated from those three, so a block
// is recognised whole or not at all (a torn or misplaced write shows).

const MAGIC: u64 = 0x5254_4849_4e43_5253; // "RTHINCRS"

pub fn encode(seed: u64, block: u64, gen: u64, out: &mut [u8]) {
    assert_eq!(out.len() as u64, BLOCK);
    let mut rng = Rng(seed ^ block.rotate_left(20) ^ gen.rotate_left(40));
    for (i, w) in out.chunks_exact_mut(8).enumerate() {
        let v = match i {
            0 => MAGIC,
            1 => seed,
            2 => block,
            3 => gen,
            _ => rng.next(),
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// What a 4 KiB block read back holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    Zero,
    /// A whole block written by this workload: where it was written and its
    /// generation.
    Data {
        block: u64,
        gen: u64,
    },
    Garbage,
}

pub fn decode(seed: u64, buf: &[u8]) -> Seen {
    if buf.iter().all(|&b| b == 0) {
        return Seen::Zero;
    }
    let w = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
    if w(0) != MAGIC || w(1) != seed {
        return Seen::Garbage;
    }
    let (block, gen) = (w(2), w(3));
    let mut want = vec![0u8; BLOCK as usize];
    encode(seed, block, gen, &mut want);
    if want != buf {
        return Seen::Garbage;
    }
    Seen::Data { block, gen }
}

/// Checks block `block` read back as `buf` against the allowed values;
/// `Err` explains the difference.
pub fn check_block(seed: u64, block: u64, buf: &[u8], allowed: &[Val]) -> Result<(), String> {
    let ok = match decode(seed, buf) {
        Seen::Zero => allowed.contains(&Val::Zero),
        Seen::Data { block: b, gen } => b == block && allowed.contains(&Val::Gen(gen)),
        Seen::Garbage => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "holds {:?}, allowed {:?}",
            decode(seed, buf),
            allowed
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(seed: u64, b: u64, gen: u64) -> Vec<u8> {
        let mut v = vec![0u8; BLOCK as usize];
        encode(seed, b, gen, &mut v);
        v
    }

    #[test]
    fn codec_round_trip_and_damage() {
        let b = block(5, 17, 99);
        assert_eq!(decode(5, &b), Seen::Data { block: 17, gen: 99 });
        assert_eq!(decode(6, &b), Seen::Garbage, "another seed's data");
        let mut torn = b.clone();
        torn[2048..].copy_from_slice(&block(5, 17, 100)[2048..]);
        assert_eq!(
            decode(5, &torn),
            Seen::Garbage,
            "half of one write, half of another"
        );
        assert_eq!(decode(5, &vec![0u8; 4096]), Seen::Zero);
        assert!(check_block(5, 17, &b, &[Val::Zero, Val::Gen(99)]).is_ok());
        assert!(
            check_block(5, 18, &b, &[Val::Gen(99)]).is_err(),
            "misplaced"
        );
        assert!(
            check_block(5, 17, &b, &[Val::Gen(98)]).is_err(),
            "other generation"
        );
    }

    #[test]
    fn plan_is_deterministic_and_valid() {
        let a = Plan::new(42, 30, 256);
        let b = Plan::new(42, 30, 256);
        assert_eq!(a.steps, b.steps);
        assert_ne!(a.steps, Plan::new(43, 30, 256).steps);
        // Every op names a device alive at that moment, and generations
        // increase; state() would panic on a dead device.
        let mut last_gen = 0;
        for k in 0..a.steps.len() {
            let st = a.state(k);
            assert!(st.len() <= MAX_LIVE);
            for op in &a.steps[k] {
                if let Op::Write {
                    gen, count, block, ..
                } = *op
                {
                    assert!(gen > last_gen && block + count <= 256);
                    last_gen = gen + count - 1;
                }
            }
        }
        let kinds = |f: fn(&Op) -> bool| a.steps.iter().flatten().filter(|o| f(o)).count();
        assert!(
            kinds(|o| matches!(
                o,
                Op::Create {
                    origin: Some(_),
                    ..
                }
            )) > 0
        );
        assert!(kinds(|o| matches!(o, Op::Delete { .. })) > 0);
        assert!(kinds(|o| matches!(o, Op::Discard { .. })) > 0);
    }

    /// A hand-made plan: the expectation model on known steps.
    #[test]
    fn expectations() {
        let p = Plan {
            seed: 1,
            blocks: 32,
            steps: vec![
                vec![Op::Create {
                    id: 1,
                    origin: None,
                }],
                vec![Op::Write {
                    id: 1,
                    block: 0,
                    count: 16,
                    gen: 1,
                }],
                vec![
                    Op::Create {
                        id: 3,
                        origin: Some(1),
                    },
                    Op::Write {
                        id: 1,
                        block: 1,
                        count: 1,
                        gen: 17,
                    },
                    Op::Discard {
                        id: 1,
                        block: 16,
                        count: 16,
                    },
                ],
                vec![
                    Op::Delete { id: 3 },
                    Op::Write {
                        id: 1,
                        block: 1,
                        count: 1,
                        gen: 18,
                    },
                ],
            ],
        };
        let find = |v: &Vec<DevExpect>, id| {
            v.iter()
                .find(|d| d.id == id)
                .map(|d| (d.presence, d.allowed.clone()))
        };
        // After mark 1, step 2 in flight.
        let e = p.expect(1, false);
        let (pr, a) = find(&e, 1).unwrap();
        assert_eq!(pr, Presence::Must);
        assert_eq!(a[0], vec![Val::Gen(1)]);
        assert_eq!(a[1], vec![Val::Gen(2), Val::Gen(17)]);
        assert_eq!(a[16], vec![Val::Zero], "discard of zeroes");
        let (pr, a) = find(&e, 3).unwrap();
        assert_eq!(pr, Presence::May);
        assert_eq!(
            a[1],
            vec![Val::Gen(2)],
            "the snapshot holds its origin at mark 1"
        );
        // Exactly at mark 1: step 2 cannot have started.
        let e = p.expect(1, true);
        assert_eq!(find(&e, 1).unwrap().1[1], vec![Val::Gen(2)]);
        assert_eq!(find(&e, 3).unwrap().0, Presence::MustNot);
        // After mark 2 the snapshot must exist; its deletion is in flight.
        let e = p.expect(2, false);
        let (pr, a) = find(&e, 3).unwrap();
        assert_eq!(pr, Presence::May);
        assert_eq!(a[1], vec![Val::Gen(2)]);
        assert_eq!(find(&e, 1).unwrap().1[1], vec![Val::Gen(17), Val::Gen(18)]);
        assert_eq!(find(&p.expect(2, true), 3).unwrap().0, Presence::Must);
        // After the last mark: exactly the final state.
        let e = p.expect(3, false);
        assert_eq!(find(&e, 3).unwrap().0, Presence::MustNot);
        assert_eq!(find(&e, 1).unwrap().1[1], vec![Val::Gen(18)]);
    }
}
