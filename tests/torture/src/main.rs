// SPDX-License-Identifier: GPL-2.0
//! rthin-torture: the differential torture test of tests/vm/92-torture.sh.
//!
//!   run [--seed S] [--sequences N | --seconds T] [--ops K] [--impls c,rthin]
//!       [--only I,J,...] [--skip KIND,...] [--shrink-seconds X]
//!
//! Sequence n (from 0) has seed S + n: K operations generated from it
//! (ops.rs) run on each implementation in turn, on the same RAM disks, each
//! against the model (model.rs); after each run every volume reads back
//! its model, `thin_check` passes and `thin_dump` shows the modelled
//! devices and sharing (exec.rs); then the two dumps must be the same,
//! attributes included (dump.rs). With --seconds, sequences run until that
//! much time has passed (at least one). --only runs just those ops of each
//! sequence (what a failure prints to reproduce its shrunk sequence);
//! --skip leaves out the operations of those kinds (ops.rs `KINDS`; for a
//! known bug whose fix is not in yet), keeping the rest of each sequence
//! as its seed makes it.
//!
//! An rthin failure, or a difference between the two dumps, fails the run
//! (exit 1) and is shrunk (shrink.rs) for up to X seconds (default 120);
//! a failure of the C dm-thin is reported as its divergence from the model
//! and does not fail the run. Needs root, dmsetup, blkdiscard, thin_check,
//! thin_dump, dm-thin-pool and dm-delay, and /dev/ram0 and /dev/ram1 (256 MiB).

#[path = "../../crash/src/aligned.rs"]
mod aligned;
#[path = "../../crash/src/command.rs"]
mod command;
mod content;
mod dm;
mod dump;
mod exec;
mod io;
mod model;
mod ops;
#[path = "../../crash/src/rng.rs"]
mod rng;
mod shrink;

use std::{
    collections::{BTreeMap, HashMap},
    process::exit,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use dm::{Impl, Res};
use exec::{Failure, Outcome};
use ops::Op;

struct Opts {
    seed: u64,
    sequences: Option<u64>,
    seconds: u64,
    ops: usize,
    impls: Vec<Impl>,
    only: Option<Vec<usize>>,
    skip: Vec<String>,
    shrink_seconds: u64,
}

fn parse_args(args: &[String]) -> Res<Opts> {
    if args.first().map(String::as_str) != Some("run") {
        return Err("usage: rthin-torture run [--seed S] [--sequences N | --seconds T] [--ops K] [--impls c,rthin] [--only I,J,...] [--skip KIND,...] [--shrink-seconds X]".into());
    }
    let mut kv = HashMap::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let name = a
            .strip_prefix("--")
            .ok_or(format!("unexpected argument '{a}'"))?;
        let v = it.next().ok_or(format!("--{name} needs a value"))?;
        kv.insert(name.to_string(), v.clone());
    }
    let num = |name: &str, def: u64| -> Res<u64> {
        kv.get(name).map_or(Ok(def), |s| {
            s.parse()
                .map_err(|_| format!("--{name}: '{s}' is not a number"))
        })
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    let impls = kv
        .get("impls")
        .map_or("c,rthin", String::as_str)
        .split(',')
        .map(|s| match s {
            "c" => Ok(Impl::C),
            "rthin" => Ok(Impl::Rthin),
            _ => Err(format!(
                "--impls: unknown implementation '{s}' (want c, rthin)"
            )),
        })
        .collect::<Res<Vec<_>>>()?;
    let only = kv
        .get("only")
        .map(|s| {
            s.split(',')
                .map(|x| {
                    x.parse()
                        .map_err(|_| format!("--only: '{x}' is not an op index"))
                })
                .collect::<Res<Vec<usize>>>()
        })
        .transpose()?;
    let skip: Vec<String> = kv.get("skip").map_or(Vec::new(), |s| {
        s.split(',')
            .filter(|k| !k.is_empty())
            .map(String::from)
            .collect()
    });
    if let Some(k) = skip.iter().find(|k| !ops::KINDS.contains(&k.as_str())) {
        return Err(format!(
            "--skip: unknown kind '{k}' (one of {})",
            ops::KINDS.join(", ")
        ));
    }
    let known = [
        "seed",
        "sequences",
        "seconds",
        "ops",
        "impls",
        "only",
        "skip",
        "shrink-seconds",
    ];
    if let Some(k) = kv.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown option --{k}"));
    }
    Ok(Opts {
        seed: num("seed", now)?,
        sequences: kv
            .contains_key("sequences")
            .then(|| num("sequences", 1))
            .transpose()?,
        seconds: num("seconds", 0)?,
        ops: num("ops", 40)? as usize,
        impls,
        only,
        skip,
        shrink_seconds: num("shrink-seconds", 120)?,
    })
}

fn describe(f: &Failure, ops: &[(usize, Op)]) -> String {
    match f.op {
        Some(i) => {
            let op = ops
                .iter()
                .find(|(j, _)| *j == i)
                .map(|(_, o)| o.to_string());
            format!("at op {i} ({}): {}", op.unwrap_or_default(), f.what)
        }
        None => format!("in the final checks: {}", f.what),
    }
}

fn print_ops(ops: &[(usize, Op)]) {
    for (i, op) in ops {
        println!("    {i:3} {op}");
    }
}

/// What a sequence showed.
enum Problem {
    Rthin(Failure),
    Differ(Vec<String>),
}

/// Runs `ops` on each implementation; the problem (if any), dm-thin's
/// own failure (if any) and how many ops of each kind ran on the last.
fn run_all(
    impls: &[Impl],
    ops: &[(usize, Op)],
) -> (
    Option<Problem>,
    Option<Failure>,
    BTreeMap<&'static str, u64>,
) {
    let outcomes: Vec<(Impl, Outcome)> = impls.iter().map(|i| (*i, exec::run(*i, ops))).collect();
    let get = |imp| outcomes.iter().find(|(i, _)| *i == imp).map(|(_, o)| o);
    let (c, r) = (get(Impl::C), get(Impl::Rthin));
    let c_fail = c.and_then(|o| o.failure.clone());
    let ran = outcomes
        .last()
        .map(|(_, o)| o.ran.clone())
        .unwrap_or_default();
    if let Some(f) = r.and_then(|o| o.failure.clone()) {
        return (Some(Problem::Rthin(f)), c_fail, ran);
    }
    if let (Some(Some(cd)), Some(Some(rd))) = (c.map(|o| &o.dump), r.map(|o| &o.dump)) {
        let d = dump::differences("dm-thin", cd, "rthin", rd, true);
        if !d.is_empty() {
            return (Some(Problem::Differ(d)), c_fail, ran);
        }
    }
    (None, c_fail, ran)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = parse_args(&args).unwrap_or_else(|e| {
        eprintln!("rthin-torture: {e}");
        exit(2)
    });
    let names: Vec<&str> = o.impls.iter().map(|i| i.name()).collect();
    println!(
        "torture: seed {}, {} ops per sequence, on {}{}",
        o.seed,
        o.ops,
        names.join(" and "),
        if o.skip.is_empty() {
            String::new()
        } else {
            format!(", without {}", o.skip.join(", "))
        }
    );
    let t0 = Instant::now();
    let (mut n, mut ops_run, mut failures, mut differences, mut divergences) = (0u64, 0, 0, 0, 0);
    let mut ran_total: BTreeMap<&str, u64> = BTreeMap::new();
    loop {
        let done = match o.sequences {
            Some(want) => n >= want,
            None => n > 0 && t0.elapsed() >= Duration::from_secs(o.seconds),
        };
        if done {
            break;
        }
        let seed = o.seed.wrapping_add(n);
        let ops: Vec<(usize, Op)> = ops::sequence(seed, o.ops)
            .into_iter()
            .enumerate()
            .filter(|(i, op)| {
                o.only.as_ref().is_none_or(|only| only.contains(i)) && !op.is_any_of(&o.skip)
            })
            .collect();
        let ts = Instant::now();
        let (problem, c_fail, ran) = run_all(&o.impls, &ops);
        for (k, v) in ran {
            *ran_total.entry(k).or_default() += v;
        }
        ops_run += ops.len();
        println!(
            "sequence {n} (seed {seed}, {} ops): {} ({:.1} s)",
            ops.len(),
            match (&problem, &c_fail) {
                (None, None) => "ok",
                (None, Some(_)) => "rthin ok, dm-thin diverges",
                (Some(Problem::Rthin(_)), _) => "RTHIN FAILS",
                (Some(Problem::Differ(_)), _) => "DIFFERS FROM DM-THIN",
            },
            ts.elapsed().as_secs_f64()
        );
        if let Some(f) = &c_fail {
            divergences += 1;
            println!(
                "DM-THIN DIVERGENCE in sequence {n} (seed {seed}) {}",
                describe(f, &ops)
            );
        }
        if let Some(p) = problem {
            match &p {
                Problem::Rthin(f) => {
                    failures += 1;
                    println!(
                        "RTHIN FAILURE in sequence {n} (seed {seed}) {}",
                        describe(f, &ops)
                    );
                }
                Problem::Differ(d) => {
                    differences += 1;
                    println!(
                        "DIFFERENCE FROM DM-THIN in sequence {n} (seed {seed}): {}",
                        d.join("; ")
                    );
                }
            }
            println!("  the sequence:");
            print_ops(&ops);
            let deadline = Instant::now() + Duration::from_secs(o.shrink_seconds);
            // A candidate counts when it shows the same kind of problem
            // and dm-thin passes it: a sequence of an rthin bug.
            let shrunk = shrink::shrink(&ops, deadline, |cand| {
                let (got, c_fail, _) = run_all(&o.impls, cand);
                c_fail.is_none()
                    && matches!(
                        (&p, got),
                        (Problem::Rthin(_), Some(Problem::Rthin(_)))
                            | (Problem::Differ(_), Some(Problem::Differ(_)))
                    )
            });
            if shrunk.len() < ops.len() {
                let idx: Vec<String> = shrunk.iter().map(|(i, _)| i.to_string()).collect();
                println!(
                    "  shrunk to {} ops (reproduce: rthin-torture run --seed {seed} --sequences 1 --ops {} --only {}):",
                    shrunk.len(),
                    o.ops,
                    idx.join(",")
                );
                print_ops(&shrunk);
                match run_all(&o.impls, &shrunk).0 {
                    Some(Problem::Rthin(f)) => {
                        println!("  where rthin fails {}", describe(&f, &shrunk))
                    }
                    Some(Problem::Differ(d)) => {
                        println!("  where the dumps differ: {}", d.join("; "))
                    }
                    None => println!("  which passed when run once more (timing-dependent)"),
                }
            }
        }
        n += 1;
    }
    println!(
        "torture: {n} sequences, {ops_run} ops in {:.0} s: {failures} rthin failures, {differences} differences from dm-thin, {divergences} dm-thin divergences",
        t0.elapsed().as_secs_f64()
    );
    let ran: Vec<String> = ran_total.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "torture: operations that applied and ran: {}",
        ran.join(", ")
    );
    if failures + differences > 0 {
        exit(1);
    }
}
