// SPDX-License-Identifier: GPL-2.0
//! Runs one sequence on one implementation, against the model, and checks
//! the result: every volume reads back its model, the pool's counts match
//! it, `thin_check` passes and `thin_dump` shows the modelled devices and
//! sharing.

use std::{
    collections::BTreeMap,
    thread,
    time::{Duration, Instant},
};

use crate::{
    content::Tag,
    dm::{self, Impl, Res, Stack, DISK_SECTORS, POOL},
    dump::{self, Norm},
    io,
    model::{Model, BLOCK_SECTORS, THIN_SECTORS},
    ops::{Io, Op, Target},
};

/// Data blocks added when writes would otherwise run the pool out of space
/// outside `OutOfSpace` (which is the only place that may).
const GROW_STEP: u64 = 64;
/// How long a write queued on a full pool gets to show as out of space,
/// and to complete once the pool is grown.
const QUEUE_WAIT: Duration = Duration::from_secs(30);

/// Why a run failed: at which op (its index in the generated sequence;
/// None: in setup or the final checks) and what was wrong.
#[derive(Debug, Clone)]
pub struct Failure {
    pub op: Option<usize>,
    pub what: String,
}

pub struct Outcome {
    pub failure: Option<Failure>,
    /// The final thin_dump, when the run got that far.
    pub dump: Option<Norm>,
    /// How many ops of each kind applied and ran.
    pub ran: BTreeMap<&'static str, u64>,
}

struct Run {
    stack: Stack,
    model: Model,
    /// How many ops of each kind applied and ran.
    ran: BTreeMap<&'static str, u64>,
}

/// Runs `ops` (each with its index in the generated sequence, which names
/// the data it writes) on `imp`.
pub fn run(imp: Impl, ops: &[(usize, Op)]) -> Outcome {
    let mut r = Run {
        stack: Stack::new(imp),
        model: Model::default(),
        ran: BTreeMap::new(),
    };
    let mut at = None;
    let result = (|| {
        r.stack.create()?;
        for (i, op) in ops {
            at = Some(*i);
            r.exec(*i, op)?;
        }
        at = None;
        r.finish()
    })();
    match result {
        Ok(dump) => Outcome {
            failure: None,
            dump: Some(dump),
            ran: r.ran,
        },
        Err(what) => {
            let thins: Vec<u32> = r.model.vols.keys().copied().collect();
            let left = r.stack.force_teardown(&thins);
            let what = if left.is_empty() {
                what
            } else {
                format!("{what} (and the teardown failed: {})", left.join("; "))
            };
            Outcome {
                failure: Some(Failure { op: at, what }),
                dump: None,
                ran: r.ran,
            }
        }
    }
}

fn ctx<T>(r: std::io::Result<T>, what: impl FnOnce() -> String) -> Res<T> {
    r.map_err(|e| format!("{}: {e}", what()))
}

impl Run {
    fn tag(&self, dev: u32, i: usize) -> Tag {
        Tag {
            uid: self.model.vols.get(&dev).map_or(0, |v| v.uid),
            gen: i as u32 + 1,
        }
    }

    /// Reads a range of `dev` and compares it with the model.
    fn verify(&self, dev: u32, sector: u64, len: u64) -> Res<()> {
        let mut bad = None;
        ctx(
            io::read(&dm::thin_path(dev), sector, len, |at, b| {
                if bad.is_none() {
                    bad = self.model.check(dev, at, b);
                }
            }),
            || format!("reading thin {dev} sectors {sector}+{len}"),
        )?;
        match bad {
            Some(b) => Err(format!("thin {dev} reads wrong data: {b}")),
            None => Ok(()),
        }
    }

    fn verify_all(&self, dev: u32) -> Res<()> {
        self.verify(dev, 0, THIN_SECTORS)
    }

    fn pool_status(&self) -> Res<dm::PoolStatus> {
        self.stack.pool_status()
    }

    /// The pool's status (which commits) must count what the model holds.
    fn check_counts(&self) -> Res<dm::PoolStatus> {
        let s = self.pool_status()?;
        let want = self.model.used_blocks();
        if s.used != want || s.txid != self.model.txid || s.held != self.model.meta_snap_held() {
            return Err(format!(
                "pool status: {} data blocks used, transaction id {}, metadata snapshot {}; the model has {want}, {}, {}",
                s.used,
                s.txid,
                if s.held { "held" } else { "none" },
                self.model.txid,
                if self.model.meta_snap_held() { "held" } else { "none" }
            ));
        }
        Ok(s)
    }

    /// Grows the data device by `blocks` (to at most the RAM disk), then the pool.
    fn grow_data(&mut self, blocks: u64) -> Res<()> {
        let max = DISK_SECTORS / BLOCK_SECTORS;
        self.stack.data_blocks = (self.stack.data_blocks + blocks).min(max);
        self.stack.reload_data()?;
        self.stack.reload_pool()
    }

    /// Makes room for `needed` new blocks. The RAM disk always has it: at
    /// most 5 thins of 256 blocks are mapped, and a held metadata snapshot
    /// keeps at most as many again, 2,560 of its 4,096 blocks.
    fn ensure_space(&mut self, needed: u64) -> Res<()> {
        let want = self.model.used_blocks() + needed;
        if want > DISK_SECTORS / BLOCK_SECTORS {
            return Err(format!(
                "{want} data blocks needed: more than the data RAM disk holds"
            ));
        }
        while want > self.stack.data_blocks {
            self.grow_data(GROW_STEP)?;
        }
        Ok(())
    }

    fn write(&mut self, i: usize, io: &Io, fua: bool, fsync: bool) -> Res<()> {
        let tag = self.tag(io.dev, i);
        ctx(
            io::write(&dm::thin_path(io.dev), io.sector, io.len, tag, fua, fsync),
            || format!("write to {io}"),
        )?;
        self.model.write(io.dev, io.sector, io.len, tag.gen);
        Ok(())
    }

    /// Suspends `name`, runs `during`, and resumes it whatever `during` returned.
    fn suspended<T>(name: &str, noflush: bool, during: impl FnOnce() -> Res<T>) -> Res<T> {
        dm::suspend(name, noflush)?;
        let r = during();
        dm::resume(name)?;
        r
    }

    fn target_name(&self, t: Target) -> Option<String> {
        match t {
            Target::Pool => Some(POOL.to_string()),
            Target::Thin(d) => self.model.has(d).then(|| dm::thin_name(d)),
        }
    }

    fn table_of(&self, t: Target) -> String {
        match t {
            Target::Pool => self.stack.pool_table(),
            Target::Thin(d) => self.stack.thin_table(d, THIN_SECTORS),
        }
    }

    /// Whether `op` applies to the current state (an op of a shrunk
    /// sequence may not: a write to a thin whose creation was dropped).
    fn applies(&self, op: &Op) -> bool {
        let m = &self.model;
        match op {
            Op::Write { io, .. } | Op::Read(io) | Op::Discard(io) => m.has(io.dev),
            Op::CreateThin(dev) => !m.has(*dev),
            Op::CreateSnap { dev, origin } => !m.has(*dev) && m.has(*origin),
            Op::Delete(dev) => m.has(*dev),
            Op::ReserveMetaSnap => !m.meta_snap_held(),
            Op::ReleaseMetaSnap => m.meta_snap_held(),
            Op::SuspendResume { target: t, .. } | Op::Reload(t) | Op::ErrorAndBack(t) => {
                self.target_name(*t).is_some()
            }
            Op::GrowData(_) => self.stack.data_blocks * BLOCK_SECTORS < DISK_SECTORS,
            Op::GrowMeta(_) => self.stack.meta_sectors < DISK_SECTORS,
            Op::OutOfSpace { .. } => self.out_of_space_targets().is_some(),
            Op::SetDelay(ms) => self.stack.delay_ms != *ms,
            Op::SetTransactionId | Op::Parallel { .. } => true,
        }
    }

    /// Runs `op` if it applies, counting it in `ran`.
    fn exec(&mut self, i: usize, op: &Op) -> Res<()> {
        if !self.applies(op) {
            return Ok(());
        }
        *self.ran.entry(op.kind()).or_default() += 1;
        match op {
            Op::Write { io, fua, fsync } => {
                self.ensure_space(self.model.blocks_needed(io.dev, io.sector, io.len))?;
                self.write(i, io, *fua, *fsync)?;
            }
            Op::Read(io) => self.verify(io.dev, io.sector, io.len)?,
            Op::Discard(io) => {
                let (off, len) = (io.sector * 512, io.len * 512);
                dm::sh(&[
                    "blkdiscard",
                    "-o",
                    &off.to_string(),
                    "-l",
                    &len.to_string(),
                    &dm::thin_path(io.dev),
                ])?;
                self.model.discard(io.dev, io.sector, io.len);
            }
            Op::CreateThin(dev) => {
                self.stack.message(&format!("create_thin {dev}"))?;
                dm::create(
                    &dm::thin_name(*dev),
                    &self.stack.thin_table(*dev, THIN_SECTORS),
                )?;
                self.model.create(*dev, i as u32 + 1);
            }
            Op::CreateSnap { dev, origin } => {
                Self::suspended(&dm::thin_name(*origin), false, || {
                    self.stack.message(&format!("create_snap {dev} {origin}"))
                })?;
                dm::create(
                    &dm::thin_name(*dev),
                    &self.stack.thin_table(*dev, THIN_SECTORS),
                )?;
                self.model.snap(*dev, *origin, i as u32 + 1);
            }
            Op::Delete(dev) => {
                self.verify_all(*dev)?;
                dm::remove(&dm::thin_name(*dev))?;
                self.stack.message(&format!("delete {dev}"))?;
                self.model.delete(*dev);
            }
            Op::ReserveMetaSnap => {
                self.stack.message("reserve_metadata_snap")?;
                self.model.reserve_meta_snap();
            }
            Op::ReleaseMetaSnap => {
                self.stack.message("release_metadata_snap")?;
                self.model.release_meta_snap();
            }
            Op::SetTransactionId => {
                let t = self.model.txid;
                self.stack
                    .message(&format!("set_transaction_id {t} {}", t + 1))?;
                self.model.txid = t + 1;
            }
            Op::SuspendResume { target, noflush } => {
                let name = self.target_name(*target).unwrap_or_default();
                let quiet = *target == Target::Pool;
                Self::suspended(&name, *noflush, || {
                    if quiet {
                        self.pool_writes_nothing_while_suspended()
                    } else {
                        Ok(())
                    }
                })?;
            }
            Op::Reload(t) => {
                let name = self.target_name(*t).unwrap_or_default();
                dm::reload(&name, &self.table_of(*t))?;
            }
            Op::ErrorAndBack(t) => {
                let name = self.target_name(*t).unwrap_or_default();
                self.error_and_back(*t, &name)?;
            }
            Op::GrowData(n) => self.grow_data(*n)?,
            Op::GrowMeta(n) => {
                let new = (self.stack.meta_sectors + n).min(DISK_SECTORS);
                self.stack.meta_sectors = new;
                self.stack.reload_meta()?;
                self.stack.reload_pool()?;
                let s = self.pool_status()?;
                if s.meta_total != new / 8 {
                    return Err(format!(
                        "metadata device grown to {new} sectors, the pool shows {} metadata blocks (want {})",
                        s.meta_total,
                        new / 8
                    ));
                }
            }
            Op::OutOfSpace { error } => self.out_of_space(i, *error)?,
            Op::SetDelay(ms) => {
                self.stack.delay_ms = *ms;
                self.stack.reload_data()?;
            }
            Op::Parallel { writers, during } => self.parallel(i, writers, during)?,
        }
        Ok(())
    }

    /// While the pool is suspended its metadata device must not change,
    /// not even for a status (which commits when the pool is live).
    fn pool_writes_nothing_while_suspended(&self) -> Res<()> {
        let fp = || {
            ctx(
                io::fingerprint(dm::meta_disk(), self.stack.meta_sectors),
                || "reading the metadata disk".into(),
            )
        };
        let before = fp()?;
        dm::sh(&["dmsetup", "status", POOL])?;
        thread::sleep(Duration::from_millis(300));
        if fp()? != before {
            return Err("the metadata device was written while the pool was suspended".into());
        }
        Ok(())
    }

    fn error_and_back(&mut self, t: Target, name: &str) -> Res<()> {
        let sectors = match t {
            Target::Pool => self.stack.data_blocks * BLOCK_SECTORS,
            Target::Thin(_) => THIN_SECTORS,
        };
        dm::reload(name, &Stack::error_table(sectors))?;
        let live = dm::table(name)?;
        if !live.contains(" error") {
            return Err(format!("{name} reloaded with error shows table '{live}'"));
        }
        if let Target::Thin(d) = t {
            if io::read(&dm::thin_path(d), 0, 8, |_, _| {}).is_ok() {
                return Err(format!("thin {d} swapped to error still reads"));
            }
        }
        dm::reload(name, &self.table_of(t))?;
        if t == Target::Pool {
            // The new pool table binds to the pool the thins hold: the same
            // transaction, counts and metadata snapshot.
            self.check_counts()?;
        }
        Ok(())
    }

    /// Whole unmapped blocks to fill the pool with plus one that does not
    /// fit, when the thins have that many and the pool can grow after; the
    /// pool's used blocks must be known exactly, so none while a metadata
    /// snapshot is held.
    fn out_of_space_targets(&self) -> Option<Vec<Io>> {
        let free = self
            .stack
            .data_blocks
            .checked_sub(self.model.used_blocks())?;
        let can_grow = (self.stack.data_blocks + GROW_STEP) * BLOCK_SECTORS <= DISK_SECTORS;
        if self.model.meta_snap_held() || !can_grow {
            return None;
        }
        let targets: Vec<Io> = self
            .model
            .vols
            .keys()
            .flat_map(|dev| {
                self.model.unmapped_blocks(*dev).into_iter().map(|b| Io {
                    dev: *dev,
                    sector: b * BLOCK_SECTORS,
                    len: BLOCK_SECTORS,
                })
            })
            .take(free as usize + 1)
            .collect();
        (targets.len() as u64 > free).then_some(targets)
    }

    /// Fills the pool to its last block under the policy, then one more
    /// write: refused at once with error_if_no_space, queued with
    /// queue_if_no_space until the pool is grown.
    fn out_of_space(&mut self, i: usize, error: bool) -> Res<()> {
        let s = self.check_counts()?;
        let free = s.total - s.used;
        let Some(targets) = self.out_of_space_targets() else {
            return Ok(());
        };
        if self.stack.error_if_no_space != error {
            self.stack.error_if_no_space = error;
            self.stack.reload_pool()?;
        }
        for io in &targets[..free as usize] {
            self.write(i, io, false, false)?;
        }
        let last = targets[free as usize];
        let tag = self.tag(last.dev, i);
        let path = dm::thin_path(last.dev);
        if error {
            if io::write(&path, last.sector, last.len, tag, false, false).is_ok() {
                return Err(format!(
                    "a write to {last} succeeded on a full pool with error_if_no_space"
                ));
            }
            self.expect_mode("out_of_data_space")?;
            self.grow_data(GROW_STEP)?;
            self.expect_mode("rw")?;
            return self.write(i, &last, false, false);
        }
        let writer =
            thread::spawn(move || io::write(&path, last.sector, last.len, tag, false, false));
        let t0 = Instant::now();
        while self.pool_status()?.mode != "out_of_data_space" {
            if writer.is_finished() {
                return Err(format!(
                    "a write to {last} completed on a full pool with queue_if_no_space (pool status {:?})",
                    self.pool_status()?
                ));
            }
            if t0.elapsed() > QUEUE_WAIT {
                return Err("the full pool did not report out_of_data_space".into());
            }
            thread::sleep(Duration::from_millis(100));
        }
        if writer.is_finished() {
            return Err(format!(
                "a write to {last} completed on a full pool with queue_if_no_space"
            ));
        }
        self.grow_data(GROW_STEP)?;
        let t0 = Instant::now();
        while !writer.is_finished() {
            if t0.elapsed() > QUEUE_WAIT {
                return Err(format!(
                    "a write to {last} queued on the full pool did not complete in {QUEUE_WAIT:?} after the pool grew"
                ));
            }
            thread::sleep(Duration::from_millis(100));
        }
        match writer.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("the queued write to {last} failed: {e}")),
            Err(_) => return Err("the writer thread panicked".into()),
        }
        self.model.write(last.dev, last.sector, last.len, tag.gen);
        self.expect_mode("rw")
    }

    fn expect_mode(&self, mode: &str) -> Res<()> {
        let s = self.pool_status()?;
        if s.mode != mode {
            return Err(format!("pool mode {}, expected {mode} ({s:?})", s.mode));
        }
        Ok(())
    }

    /// Processes write their disjoint ranges while `during` runs.
    fn parallel(&mut self, i: usize, writers: &[Vec<Io>], during: &Op) -> Res<()> {
        let writers: Vec<Vec<Io>> = writers
            .iter()
            .map(|w| {
                w.iter()
                    .copied()
                    .filter(|io| self.model.has(io.dev))
                    .collect()
            })
            .collect();
        let needed: u64 = writers
            .iter()
            .flatten()
            .map(|io| self.model.blocks_needed(io.dev, io.sector, io.len))
            .sum();
        self.ensure_space(needed)?;
        let jobs: Vec<(Vec<Io>, Vec<Tag>)> = writers
            .iter()
            .map(|w| (w.clone(), w.iter().map(|io| self.tag(io.dev, i)).collect()))
            .collect();
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(ios, tags)| {
                thread::spawn(move || -> Res<()> {
                    for (io, tag) in ios.iter().zip(tags) {
                        ctx(
                            io::write(&dm::thin_path(io.dev), io.sector, io.len, tag, false, false),
                            || format!("write to {io}"),
                        )?;
                    }
                    Ok(())
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        let during_result = self.exec(i, during);
        let mut errors: Vec<String> = during_result.err().into_iter().collect();
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("a writer thread panicked".into()),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        for io in writers.iter().flatten() {
            self.model.write(io.dev, io.sector, io.len, i as u32 + 1);
        }
        Ok(())
    }

    /// The checks after the last op; the metadata's normalised dump.
    fn finish(&mut self) -> Res<Norm> {
        if self.model.meta_snap_held() {
            self.stack.message("release_metadata_snap")?;
            self.model.release_meta_snap();
        }
        self.check_counts()?;
        let devs: Vec<u32> = self.model.vols.keys().copied().collect();
        for dev in &devs {
            let mapped = dm::thin_mapped_sectors(*dev)?;
            let want = self.model.mapped_blocks(*dev) * BLOCK_SECTORS;
            if mapped != want {
                return Err(format!(
                    "thin {dev} status shows {mapped} mapped sectors, the model {want}"
                ));
            }
            self.verify_all(*dev)?;
        }
        for dev in &devs {
            dm::remove(&dm::thin_name(*dev))?;
        }
        dm::remove(POOL)?;
        let meta = dm::meta_path();
        dm::sh(&["thin_check", &meta])?;
        let norm = dump::dump(&meta)?;
        self.stack.remove_lower()?;
        let diff = dump::differences("thin_dump", &norm, "the model", &self.model.norm(), false);
        if !diff.is_empty() {
            return Err(format!(
                "thin_dump differs from the model: {}",
                diff.join("; ")
            ));
        }
        Ok(norm)
    }
}
