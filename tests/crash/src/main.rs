// SPDX-License-Identifier: GPL-2.0
//! rthin-crashtest: crash-consistency testing of a thin pool with dm-log-writes
//! (used by tests/vm/80-crash-*.sh inside the test VM).
//!
//!   list LOG                       the log's entries: index, flags, offset, length, mark
//!   points LOG --start MARK [--random K --seed S | --all]
//!                                  replay points: "INDEX MARK exact|after" per line
//!   replay LOG DEV --from A --to N apply entries A..=N to DEV
//!   raw-write --pool P --log L --seed S --steps N --mib M [--thin-target T]
//!                                  the seeded raw workload (see model.rs), marks e0..eN
//!   raw-verify --pool P --seed S --steps N --mib M --mark eK [--exact] [--thin-target T]
//!                                  activates the thins of the replayed pool and checks them
//!
//! All block I/O is O_DIRECT: what the tool reads is what the device holds,
//! never a page cache left from an earlier replay.

mod aligned;
mod command;
mod log;
mod model;
mod rng;

use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{self, Read, Seek, SeekFrom, Write},
    os::unix::fs::{FileExt, OpenOptionsExt},
    process::exit,
};

use aligned::AlignedBuf;
use command::sh;
use model::{Op, Plan, Presence, BLOCK};

/// O_DIRECT on Linux (x86, arm64 and most others).
const O_DIRECT: i32 = 0o40000;

type Res<T> = Result<T, String>;

fn open(path: &str, write: bool) -> Res<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(O_DIRECT)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))
}

/// Command-line options after the subcommand: `--name value` pairs, `--flag`s
/// and positional arguments.
struct Args {
    pos: Vec<String>,
    opts: HashMap<String, String>,
}

impl Args {
    fn parse(args: &[String], flags: &[&str]) -> Res<Args> {
        let (mut pos, mut opts) = (Vec::new(), HashMap::new());
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.strip_prefix("--") {
                Some(f) if flags.contains(&f) => {
                    opts.insert(f.to_string(), String::new());
                }
                Some(name) => {
                    let v = it.next().ok_or(format!("--{name} needs a value"))?;
                    opts.insert(name.to_string(), v.clone());
                }
                None => pos.push(a.clone()),
            }
        }
        Ok(Args { pos, opts })
    }
    fn has(&self, f: &str) -> bool {
        self.opts.contains_key(f)
    }
    fn str(&self, name: &str) -> Res<&str> {
        self.opts
            .get(name)
            .map(String::as_str)
            .ok_or(format!("--{name} is required"))
    }
    fn num(&self, name: &str) -> Res<u64> {
        let s = self.str(name)?;
        s.parse()
            .map_err(|_| format!("--{name}: '{s}' is not a number"))
    }
    fn num_or(&self, name: &str, def: u64) -> Res<u64> {
        if self.has(name) {
            self.num(name)
        } else {
            Ok(def)
        }
    }
    fn pos(&self, i: usize, what: &str) -> Res<&str> {
        self.pos
            .get(i)
            .map(String::as_str)
            .ok_or(format!("missing {what}"))
    }
}

fn load_log(path: &str) -> Res<(File, log::Log)> {
    let mut f = open(path, false)?;
    let l = log::parse(&mut f).map_err(|e| format!("{path}: {e}"))?;
    Ok((f, l))
}

fn cmd_list(a: &Args) -> Res<()> {
    let (_, l) = load_log(a.pos(0, "LOG")?)?;
    for (i, e) in l.entries.iter().enumerate() {
        println!(
            "{i} {} {} {} {}",
            e.flag_names(),
            e.offset,
            e.len,
            e.mark.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

fn cmd_points(a: &Args) -> Res<()> {
    let (_, l) = load_log(a.pos(0, "LOG")?)?;
    let seed = a.num_or("seed", 1)?;
    let random = a.num_or("random", 0)? as usize;
    let pts =
        log::points(&l, a.str("start")?, random, a.has("all"), seed).map_err(|e| e.to_string())?;
    for p in pts {
        println!(
            "{} {} {}",
            p.index,
            p.mark,
            if p.exact { "exact" } else { "after" }
        );
    }
    Ok(())
}

fn cmd_replay(a: &Args) -> Res<()> {
    let (mut f, l) = load_log(a.pos(0, "LOG")?)?;
    let dev_path = a.pos(1, "DEV")?;
    let mut dev = open(dev_path, true)?;
    let (from, to) = (a.num("from")? as usize, a.num("to")? as usize);
    if to >= l.entries.len() || from > to + 1 {
        return Err(format!(
            "entries {from}..={to}: the log has {}",
            l.entries.len()
        ));
    }
    log::replay(&l, &mut f, &mut dev, from, to)
        .map_err(|e| format!("replay onto {dev_path}: {e}"))?;
    dev.sync_all().map_err(|e| format!("{dev_path}: {e}"))
}

/// The workload's setting, shared by raw-write and raw-verify.
struct Raw {
    pool: String,
    thin_target: String,
    plan: Plan,
}

impl Raw {
    fn from(a: &Args) -> Res<Raw> {
        let mib = a.num("mib")?;
        let blocks = mib * (1 << 20) / BLOCK;
        if blocks == 0 || blocks % model::POOL_BLOCK != 0 {
            return Err(format!("--mib {mib}: want a whole number of 64 KiB blocks"));
        }
        let seed = a.num("seed")?;
        Ok(Raw {
            pool: a.str("pool")?.to_string(),
            thin_target: a.opts.get("thin-target").cloned().unwrap_or("rthin".into()),
            plan: Plan::new(seed, a.num("steps")? as usize, blocks),
        })
    }
    fn msg(&self, m: &str) -> Res<()> {
        sh(&["dmsetup", "message", &self.pool, "0", m]).map(drop)
    }
    /// Activates thin `id` as `<prefix><id>`.
    fn activate(&self, prefix: &str, id: u32) -> Res<String> {
        let name = format!("{prefix}{id}");
        let table = format!(
            "0 {} {} /dev/mapper/{} {id}",
            self.plan.blocks * BLOCK / 512,
            self.thin_target,
            self.pool
        );
        sh(&["dmsetup", "create", &name, "--table", &table])?;
        Ok(format!("/dev/mapper/{name}"))
    }
}

/// The workload: step 0 creates the thins, each step ends with fdatasync of
/// the devices it wrote and the mark `e<step>`.
fn cmd_raw_write(a: &Args) -> Res<()> {
    let raw = Raw::from(a)?;
    let logdev = a.str("log")?;
    let seed = raw.plan.seed;
    let mut devs: HashMap<u32, File> = HashMap::new();
    let mut buf = AlignedBuf::new((model::POOL_BLOCK * BLOCK) as usize);
    for (k, ops) in raw.plan.steps.iter().enumerate() {
        let mut written = Vec::new();
        for op in ops {
            match *op {
                Op::Create { id, origin } => {
                    match origin {
                        // As LVM does: the origin is suspended around the message.
                        Some(o) => {
                            let oname = format!("ct{o}");
                            sh(&["dmsetup", "suspend", &oname])?;
                            let r = raw.msg(&format!("create_snap {id} {o}"));
                            sh(&["dmsetup", "resume", &oname])?;
                            r?
                        }
                        None => raw.msg(&format!("create_thin {id}"))?,
                    }
                    let path = raw.activate("ct", id)?;
                    devs.insert(id, open(&path, true)?);
                }
                Op::Delete { id } => {
                    devs.remove(&id);
                    sh(&["dmsetup", "remove", &format!("ct{id}")])?;
                    raw.msg(&format!("delete {id}"))?;
                }
                Op::Write {
                    id,
                    block,
                    count,
                    gen,
                } => {
                    let b = buf.slice((count * BLOCK) as usize);
                    for (i, chunk) in b.chunks_exact_mut(BLOCK as usize).enumerate() {
                        model::encode(seed, block + i as u64, gen + i as u64, chunk);
                    }
                    devs[&id]
                        .write_all_at(b, block * BLOCK)
                        .map_err(|e| format!("write to thin {id} block {block}: {e}"))?;
                    written.push(id);
                }
                Op::Discard { id, block, count } => {
                    let (off, len) = ((block * BLOCK).to_string(), (count * BLOCK).to_string());
                    sh(&[
                        "blkdiscard",
                        "-o",
                        &off,
                        "-l",
                        &len,
                        &format!("/dev/mapper/ct{id}"),
                    ])?;
                    written.push(id);
                }
            }
        }
        written.sort();
        written.dedup();
        for id in written {
            devs[&id]
                .sync_data()
                .map_err(|e| format!("fdatasync of thin {id}: {e}"))?;
        }
        sh(&["dmsetup", "message", logdev, "0", "mark", &format!("e{k}")])?;
    }
    println!(
        "raw workload: {} steps, seed {seed}",
        raw.plan.steps.len() - 1
    );
    Ok(())
}

/// Checks the replayed pool against what the workload guaranteed at the
/// mark; every difference is printed, the first few per device.
fn cmd_raw_verify(a: &Args) -> Res<()> {
    let raw = Raw::from(a)?;
    let mark = a.str("mark")?;
    let k: usize = mark
        .strip_prefix('e')
        .and_then(|n| n.parse().ok())
        .filter(|&k| k < raw.plan.steps.len())
        .ok_or(format!("--mark '{mark}' is not a step of this workload"))?;
    let seed = raw.plan.seed;
    let mut errors = Vec::new();
    let (mut checked, mut present) = (0u64, 0);
    let mut buf = AlignedBuf::new((model::POOL_BLOCK * BLOCK) as usize);
    for d in raw.plan.expect(k, a.has("exact")) {
        let path = raw.activate("cv", d.id);
        match (&path, d.presence) {
            (Err(e), Presence::Must) => errors.push(format!("thin {} must exist: {e}", d.id)),
            (Ok(_), Presence::MustNot) => {
                errors.push(format!("thin {} exists, but must not", d.id))
            }
            _ => {}
        }
        let path = match path {
            Ok(p) => p,
            Err(_) => {
                // dmsetup create leaves the failed device's node behind.
                let _ = sh(&["dmsetup", "remove", &format!("cv{}", d.id)]);
                continue;
            }
        };
        present += 1;
        let mut f = open(&path, false)?;
        let mut bad = 0;
        let chunk = model::POOL_BLOCK;
        for start in (0..raw.plan.blocks).step_by(chunk as usize) {
            let b = buf.slice((chunk * BLOCK) as usize);
            f.seek(SeekFrom::Start(start * BLOCK))
                .map_err(|e| e.to_string())?;
            f.read_exact(b)
                .map_err(|e| format!("reading thin {} block {start}: {e}", d.id))?;
            for (i, blk) in b.chunks_exact(BLOCK as usize).enumerate() {
                let n = start + i as u64;
                checked += 1;
                if let Err(why) = model::check_block(seed, n, blk, &d.allowed[n as usize]) {
                    bad += 1;
                    if bad <= 5 {
                        errors.push(format!("thin {} block {n} {why}", d.id));
                    }
                }
            }
        }
        if bad > 5 {
            errors.push(format!("thin {}: {bad} blocks wrong in all", d.id));
        }
        drop(f);
        sh(&["dmsetup", "remove", &format!("cv{}", d.id)])?;
    }
    if errors.is_empty() {
        println!("ok: {mark}: {present} thins, {checked} blocks as expected");
        Ok(())
    } else {
        Err(format!("at {mark}:\n  {}", errors.join("\n  ")))
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match argv.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("", &[][..]),
    };
    let r = Args::parse(rest, &["all", "exact"]).and_then(|a| match cmd {
        "list" => cmd_list(&a),
        "points" => cmd_points(&a),
        "replay" => cmd_replay(&a),
        "raw-write" => cmd_raw_write(&a),
        "raw-verify" => cmd_raw_verify(&a),
        _ => Err(
            "usage: rthin-crashtest list|points|replay|raw-write|raw-verify ... (see main.rs)"
                .into(),
        ),
    });
    if let Err(e) = r {
        let _ = writeln!(io::stderr(), "rthin-crashtest {cmd}: {e}");
        exit(1);
    }
}
