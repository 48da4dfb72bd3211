// SPDX-License-Identifier: GPL-2.0
//! The commands: read-only reports and the pool messages with their
//! pre-checks, guards and error sentences.

use serde::Serialize;

use crate::dm::{DmErr, DmTransport, Transport};
use crate::explain::{exit, explain_ioctl, explain_message, Error, Facts, Msg, Result};
use crate::model::{read_pool, resolve, scan_all, Pool, Scan, Thin, POOL_TARGETS, THIN_TARGETS};
use crate::report::{self, JReport, Level, Style, Thresholds, STATUS_SCHEMA};
use crate::status::{DevT, PoolModeWord, PoolStatus};
use crate::{IdArg, StatusArgs};

/// Options every command sees.
pub struct Ctx {
    /// `--json`.
    pub json: bool,
    /// `--verbose`.
    pub verbose: bool,
    /// Table style.
    pub style: Style,
    /// `--force`: change a pool that LVM or Stratis owns.
    pub force: bool,
}

/// Refuses to change a pool that LVM or Stratis owns (dm UUID `LVM-...`,
/// `stratis-...`) unless `--force`: the owner keeps its own record of the
/// pool's devices and transaction id, which a message behind its back
/// breaks. Says which tool owns it and what to run instead.
fn owner_guard(ctx: &Ctx, tg: &Target, msg: &Msg) -> Result<()> {
    use crate::dm::{lvm_split, Owner};
    let (tool, instead) = match tg.pool.info.owner {
        Owner::None => return Ok(()),
        Owner::Lvm => {
            let (vg, lv) = match lvm_split(&tg.name) {
                Some((vg, lv, _)) => (vg, lv),
                None => ("VG".to_string(), "POOL".to_string()),
            };
            let how = match msg {
                Msg::CreateThin(_) => format!("lvcreate --thin -V SIZE -n NAME {vg}/{lv}"),
                Msg::CreateSnap(..) => format!("lvcreate -s {vg}/THIN_LV -n NAME"),
                Msg::Delete(_) => format!("lvremove {vg}/THIN_LV"),
                Msg::SetTransactionId(..) => {
                    "nothing: LVM keeps the transaction id in step with its own metadata"
                        .to_string()
                }
                _ => format!("lvs/lvcreate/lvremove on {vg}/{lv}"),
            };
            (format!("LVM (LV {vg}/{lv})"), how)
        }
        Owner::Stratis => (
            "Stratis".to_string(),
            match msg {
                Msg::CreateThin(_) => "stratis filesystem create POOL NAME".to_string(),
                Msg::CreateSnap(..) => "stratis filesystem snapshot POOL FS NAME".to_string(),
                Msg::Delete(_) => "stratis filesystem destroy POOL NAME".to_string(),
                _ => "the stratis command".to_string(),
            },
        ),
    };
    if ctx.force {
        eprintln!(
            "rthinctl: warning: pool {} belongs to {tool}; changing it anyway (--force)",
            tg.name
        );
        return Ok(());
    }
    Err(Error::new(
        exit::REFUSED,
        format!(
            "not sent: pool {} belongs to {tool}, which records the pool's thin devices and transaction id itself; a `{msg}` behind its back makes them disagree",
            tg.name
        ),
    )
    .note(format!("use instead: {instead}"))
    .note("--force sends it anyway"))
}

/// JSON schema of a mutating command's result.
pub const RESULT_SCHEMA: &str = "rthinctl.result/1";

/// Opens the control device.
pub fn open() -> Result<DmTransport> {
    DmTransport::open().map_err(|e| match e.errno {
        Some(6) | Some(19) => Error::new(
            exit::OTHER,
            "device-mapper is not available in this kernel (opening /dev/mapper/control gave ENODEV): load it with modprobe dm-mod",
        ),
        _ => explain_ioctl("opening /dev/mapper/control", "", e.errno, &e.text),
    })
}

fn dm_err(op: &str, dev: &str, e: DmErr) -> Error {
    explain_ioctl(op, dev, e.errno, &e.text)
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
    println!("{s}");
    Ok(())
}

fn pool_of<'a>(scan: &'a Scan, th: &Thin) -> Option<&'a Pool> {
    th.pool
        .and_then(|d| scan.pools.iter().find(|p| p.info.dev == d))
}

/// Selects pools and thins named on the command line (all if none).
fn select<'a>(scan: &'a Scan, devs: &[String]) -> Result<(Vec<&'a Pool>, Vec<&'a Thin>)> {
    if devs.is_empty() {
        let orphans = scan
            .thins
            .iter()
            .filter(|t| pool_of(scan, t).is_none())
            .collect();
        return Ok((scan.pools.iter().collect(), orphans));
    }
    let mut list: Vec<(String, DevT)> = scan
        .pools
        .iter()
        .map(|p| (p.name.clone(), p.info.dev))
        .collect();
    list.extend(scan.thins.iter().map(|t| (t.name.clone(), t.info.dev)));
    list.extend(scan.others.iter().map(|o| (o.0.clone(), o.1)));
    let (mut pools, mut thins) = (Vec::new(), Vec::new());
    for d in devs {
        let name = resolve(d, &list)?;
        if let Some(p) = scan.pools.iter().find(|p| p.name == name) {
            pools.push(p);
        } else if let Some(t) = scan.thins.iter().find(|t| t.name == name) {
            thins.push(t);
        } else {
            let ty = scan
                .others
                .iter()
                .find(|o| o.0 == name)
                .map(|o| o.2.as_str())
                .unwrap_or("");
            return Err(Error::new(
                exit::NOT_FOUND,
                format!(
                    "{name} is a {} device, neither a thin pool nor a thin",
                    if ty.is_empty() { "table-less" } else { ty }
                ),
            ));
        }
    }
    Ok((pools, thins))
}

fn json_report(scan: &Scan, pools: &[&Pool], thins: &[&Thin]) -> JReport {
    JReport {
        schema: STATUS_SCHEMA,
        pools: pools
            .iter()
            .map(|p| report::pool_json(p, &report::thins_of(scan, p)))
            .collect(),
        other_thins: thins
            .iter()
            .map(|t| report::thin_json(pool_of(scan, t), t))
            .collect(),
    }
}

/// `status`.
/// `status --prometheus`: the selected pools (all by default) and their
/// thins in Prometheus's text format.
pub fn prometheus(t: &dyn Transport, devs: &[String]) -> Result<i32> {
    let scan = scan_all(t)?;
    let (pools, _) = select(&scan, devs)?;
    let with_thins: Vec<(&Pool, Vec<&Thin>)> = pools
        .iter()
        .map(|p| (*p, report::thins_of(&scan, p)))
        .collect();
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(report::prometheus(&with_thins).as_bytes())
        .and_then(|_| out.flush())
        .map_err(crate::io_error)?;
    Ok(exit::OK)
}

pub fn status(ctx: &Ctx, t: &dyn Transport, devs: &[String]) -> Result<i32> {
    let scan = scan_all(t)?;
    let (pools, thins) = select(&scan, devs)?;
    if ctx.json {
        print_json(&json_report(&scan, &pools, &thins))?;
        return Ok(exit::OK);
    }
    let mut out = String::new();
    if !pools.is_empty() {
        let rows: Vec<(&Pool, usize)> = pools
            .iter()
            .map(|p| (*p, report::thins_of(&scan, p).len()))
            .collect();
        out.push_str(&report::pool_table(&rows, &ctx.style));
    }
    let mut trows: Vec<(Option<&Pool>, &Thin)> = Vec::new();
    for p in &pools {
        for th in report::thins_of(&scan, p) {
            trows.push((Some(*p), th));
        }
    }
    for th in &thins {
        trows.push((pool_of(&scan, th), th));
    }
    if !trows.is_empty() {
        if !out.is_empty() && ctx.style.headings {
            out.push('\n');
        }
        out.push_str(&report::thin_table(&trows, &ctx.style));
    }
    if pools.is_empty() && thins.is_empty() && ctx.style.headings {
        out.push_str("no thin pools (targets thin-pool, rthin-pool) are active\n");
    }
    print!("{out}");
    Ok(exit::OK)
}

/// `ls`.
pub fn ls(ctx: &Ctx, t: &dyn Transport, pool: Option<&str>) -> Result<i32> {
    let scan = scan_all(t)?;
    let devs: Vec<String> = pool.into_iter().map(String::from).collect();
    let (pools, thins) = select(&scan, &devs)?;
    if pool.is_some() && pools.is_empty() {
        return Err(Error::new(
            exit::NOT_FOUND,
            format!("{} is not a thin pool", devs[0]),
        ));
    }
    if ctx.json {
        print_json(&json_report(&scan, &pools, &thins))?;
    } else {
        print!("{}", report::ls_table(&scan, &pools, &thins, &ctx.style));
    }
    Ok(exit::OK)
}

/// Nagios/Icinga performance data: ` | data=82.10%;80;95;0;100
/// metadata=...` (labels prefixed with the pool's name when there are
/// several pools).
/// `status --check`: never fails; problems reading state are UNKNOWN.
pub fn status_check(ctx: &Ctx, a: &StatusArgs) -> i32 {
    let th = Thresholds {
        data_warn: a.warn,
        data_crit: a.crit,
        meta_warn: a.meta_warn.unwrap_or(a.warn),
        meta_crit: a.meta_crit.unwrap_or(a.crit),
        data_free_warn: a.warn_free,
        data_free_crit: a.crit_free,
    };
    // (figures of the working pools, their perfdata)
    let mut perf: Vec<(String, Option<f64>, Option<f64>)> = Vec::new();
    let mut perfdata = String::new();
    let result = (|| -> Result<Vec<(Level, String)>> {
        let t = open()?;
        let scan = scan_all(&t)?;
        let (pools, thins) = select(&scan, &a.devs)?;
        for p in &pools {
            if let Ok(PoolStatus::Working(u)) = &p.status {
                perf.push((
                    p.name.clone(),
                    crate::units::round_percent(u.data_used, u.data_total),
                    crate::units::round_percent(u.meta_used, u.meta_total),
                ));
            }
        }
        let with_thins: Vec<(&Pool, Vec<&Thin>)> = pools
            .iter()
            .map(|p| (*p, report::thins_of(&scan, p)))
            .collect();
        perfdata = report::perfdata(&with_thins, a.label.as_deref(), a.thin_perfdata, &th);
        let mut v = Vec::new();
        if pools.is_empty() && thins.is_empty() {
            v.push((Level::Unknown, "no thin pools are active".to_string()));
        }
        for p in &pools {
            v.extend(report::check_pool(p, &report::thins_of(&scan, p), &th));
        }
        for t in &thins {
            if let Some(p) = pool_of(&scan, t) {
                v.extend(report::check_pool(p, &[t], &th));
            }
        }
        Ok(v)
    })();
    let (level, lines, npools) = match result {
        Ok(v) => {
            let level = v.iter().map(|x| x.0).max().unwrap_or(Level::Ok);
            let n = v.len();
            (level, v, n)
        }
        Err(e) => (Level::Unknown, vec![(Level::Unknown, e.text)], 1),
    };
    let code = match level {
        Level::Ok => exit::OK,
        Level::Warn => exit::CHECK_WARN,
        Level::Crit => exit::CHECK_CRIT,
        Level::Unknown => exit::CHECK_UNKNOWN,
    };
    if ctx.json {
        #[derive(Serialize)]
        struct J<'a> {
            schema: &'static str,
            level: &'static str,
            exit: i32,
            problems: Vec<JP<'a>>,
        }
        #[derive(Serialize)]
        struct JP<'a> {
            level: &'static str,
            text: &'a str,
        }
        let j = J {
            schema: "rthinctl.check/1",
            level: level.name(),
            exit: code,
            problems: lines
                .iter()
                .map(|(l, t)| JP {
                    level: l.name(),
                    text: t,
                })
                .collect(),
        };
        if print_json(&j).is_err() {
            return exit::CHECK_UNKNOWN;
        }
    } else if lines.is_empty() || npools == 0 {
        let figs: Vec<String> = perf
            .iter()
            .map(|(n, d, m)| {
                let f = |x: &Option<f64>| x.map_or("?".into(), |x| format!("{x:.2}%"));
                format!("{n} data {} metadata {}", f(d), f(m))
            })
            .collect();
        println!(
            "OK: {} thin pool{} healthy ({}){}",
            perf.len(),
            if perf.len() == 1 { "" } else { "s" },
            figs.join(", "),
            perfdata
        );
    } else {
        let mut sorted = lines.clone();
        sorted.sort_by_key(|x| std::cmp::Reverse(x.0));
        let summary: Vec<String> = sorted
            .iter()
            .map(|(l, t)| {
                if *l == level {
                    t.clone()
                } else {
                    format!("[{}] {t}", l.name())
                }
            })
            .collect();
        println!("{}: {}{}", level.name(), summary.join("; "), perfdata);
    }
    code
}

/// Everything a message command needs to know about the pool first.
struct Target {
    name: String,
    pool: Pool,
}

fn find_pool(t: &dyn Transport, arg: &str) -> Result<Target> {
    let list = t.list().map_err(|e| dm_err("listing devices", "", e))?;
    let name = resolve(arg, &list)?;
    let dev = list
        .iter()
        .find(|x| x.0 == name)
        .map(|x| x.1)
        .unwrap_or(DevT { major: 0, minor: 0 });
    let pool = read_pool(t, &name, dev)?;
    Ok(Target { name, pool })
}

fn facts_of(p: &Pool) -> Facts {
    match &p.status {
        Ok(PoolStatus::Working(u)) => Facts {
            transaction_id: Some(u.transaction_id),
            held_root: u.held_root,
            active_as: Vec::new(),
            mode: u.mode.map(|m| m.as_str().to_string()),
            needs_check: u.needs_check,
        },
        Ok(PoolStatus::Fail) => Facts {
            mode: Some("fail".into()),
            ..Facts::default()
        },
        _ => Facts::default(),
    }
}

/// Refuses messages the pool would refuse anyway (FAIL, read-only,
/// needs_check), with the reason, instead of a bare EOPNOTSUPP; and checks
/// `--expect-txn`.
fn precheck(tg: &Target, msg: &Msg, expect_txn: Option<u64>) -> Result<()> {
    let refuse = |why: &str| -> Error {
        let mut e = explain_message(
            &tg.name,
            msg,
            rthin_core::dm::errno::EOPNOTSUPP,
            &facts_of(&tg.pool),
        );
        e.text = format!("not sent: {why}; {}", e.text);
        e
    };
    match &tg.pool.status {
        Ok(PoolStatus::Fail) => return Err(refuse("the pool is in FAIL mode (status Fail)")),
        Ok(PoolStatus::Working(u)) => {
            if u.mode == Some(PoolModeWord::ReadOnly) {
                return Err(refuse("the pool is read-only"));
            }
            if let Some(want) = expect_txn {
                if u.transaction_id != want {
                    return Err(Error::new(
                        exit::REFUSED,
                        format!(
                            "not sent: pool {}'s transaction id is {}, not {want} as --expect-txn requires; someone else changed the pool, re-read it with `rthinctl status {}`",
                            tg.name, u.transaction_id, tg.name
                        ),
                    ));
                }
            }
        }
        // Error / unreadable: let the kernel decide.
        _ => {
            if expect_txn.is_some() {
                return Err(Error::new(
                    exit::REFUSED,
                    format!("not sent: --expect-txn given but pool {}'s transaction id cannot be read from its status", tg.name),
                ));
            }
        }
    }
    Ok(())
}

/// Sends one message; on failure re-reads what it needs to explain it.
fn send(ctx: &Ctx, t: &dyn Transport, tg: &Target, msg: &Msg) -> Result<Option<String>> {
    if ctx.verbose {
        eprintln!("rthinctl: dmsetup message {} 0 \"{msg}\"", tg.name);
    }
    match t.message(&tg.name, &msg.to_string()) {
        Ok(out) => Ok(out),
        Err(e) => {
            let Some(errno) = e.errno else {
                return Err(Error::new(
                    exit::OTHER,
                    format!("sending \"{msg}\" to {} failed", tg.name),
                )
                .note(e.text));
            };
            // Fresh facts: the status now, active users of the id.
            let mut facts = read_pool(t, &tg.name, tg.pool.info.dev)
                .map(|p| facts_of(&p))
                .unwrap_or_else(|_| facts_of(&tg.pool));
            if let Msg::Delete(id) = msg {
                if let Ok(scan) = scan_all(t) {
                    facts.active_as = users_of(&scan, tg.pool.info.dev, *id)
                        .iter()
                        .map(|x| x.name.clone())
                        .collect();
                }
            }
            Err(explain_message(&tg.name, msg, errno, &facts))
        }
    }
}

fn users_of(scan: &Scan, pool: DevT, id: u32) -> Vec<&Thin> {
    scan.thins
        .iter()
        .filter(|x| x.pool == Some(pool) && x.dev_id == Some(id))
        .collect()
}

#[derive(Serialize)]
struct JResult<'a> {
    schema: &'static str,
    pool: &'a str,
    message: String,
    dev_id: Option<u32>,
    origin_id: Option<u32>,
    transaction_id: Option<u64>,
    held_metadata_root: Option<u64>,
    suspended: Vec<String>,
    output: Option<String>,
}

impl<'a> JResult<'a> {
    fn new(pool: &'a str, msg: &Msg) -> Self {
        Self {
            schema: RESULT_SCHEMA,
            pool,
            message: msg.to_string(),
            dev_id: None,
            origin_id: None,
            transaction_id: None,
            held_metadata_root: None,
            suspended: Vec::new(),
            output: None,
        }
    }
}

fn done(ctx: &Ctx, j: &JResult, text: String) -> Result<i32> {
    if ctx.json {
        print_json(j)?;
    } else {
        println!("{text}");
    }
    Ok(exit::OK)
}

fn dry(tg: &str, msg: &Msg) -> i32 {
    println!("dmsetup message {tg} 0 \"{msg}\"");
    exit::OK
}

/// Candidate ids for `--id auto`: above every id active on the pool; an
/// inactive thin may still own one, so the caller retries on EEXIST.
fn auto_ids(t: &dyn Transport, pool: DevT) -> Result<impl Iterator<Item = u32>> {
    let scan = scan_all(t)?;
    let start = scan
        .thins
        .iter()
        .filter(|x| x.pool == Some(pool))
        .filter_map(|x| x.dev_id)
        .max()
        .map(|m| m.saturating_add(1))
        .unwrap_or(1);
    Ok((start..=rthin_core::dm::thin_table::MAX_DEV_ID).take(AUTO_TRIES))
}

/// How many ids `--id auto` tries before giving up.
const AUTO_TRIES: usize = 1024;

/// Sends `make(id)` for each candidate id until one is not EEXIST.
fn with_auto_id(
    ctx: &Ctx,
    t: &dyn Transport,
    tg: &Target,
    id: IdArg,
    make: &dyn Fn(u32) -> Msg,
) -> Result<u32> {
    match id {
        IdArg::Num(n) => {
            send(ctx, t, tg, &make(n))?;
            Ok(n)
        }
        IdArg::Auto => {
            for n in auto_ids(t, tg.pool.info.dev)? {
                match send(ctx, t, tg, &make(n)) {
                    Ok(_) => return Ok(n),
                    Err(e) if e.text.contains("already in use") => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(Error::new(
                exit::REFUSED,
                format!("--id auto found no free id in {AUTO_TRIES} tries above the active ones in pool {}; give --id explicitly", tg.name),
            ))
        }
    }
}

/// `create-thin`.
pub fn create_thin(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    id: IdArg,
    g: &crate::Guard,
) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let probe = Msg::CreateThin(match id {
        IdArg::Num(n) => n,
        IdArg::Auto => 0,
    });
    owner_guard(ctx, &tg, &probe)?;
    precheck(&tg, &probe, g.expect_txn)?;
    if g.dry_run {
        return Ok(match id {
            IdArg::Num(_) => dry(&tg.name, &probe),
            IdArg::Auto => {
                println!("# --id auto: tries create_thin with increasing ids until one is free");
                dry(
                    &tg.name,
                    &Msg::CreateThin(auto_ids(t, tg.pool.info.dev)?.next().unwrap_or(1)),
                )
            }
        });
    }
    let n = with_auto_id(ctx, t, &tg, id, &Msg::CreateThin)?;
    let mut j = JResult::new(&tg.name, &Msg::CreateThin(n));
    j.dev_id = Some(n);
    done(ctx, &j, format!("created thin id {n} in pool {}", tg.name))
}

/// Suspends thins and resumes them when dropped (also on error and panic).
struct SuspendGuard<'a> {
    t: &'a dyn Transport,
    names: Vec<String>,
    verbose: bool,
}

impl SuspendGuard<'_> {
    fn resume_all(&mut self) -> Vec<(String, DmErr)> {
        let mut errs = Vec::new();
        while let Some(n) = self.names.pop() {
            if self.verbose {
                eprintln!("rthinctl: dmsetup resume {n}");
            }
            if let Err(e) = self.t.resume(&n) {
                errs.push((n, e));
            }
        }
        errs
    }
}

impl Drop for SuspendGuard<'_> {
    fn drop(&mut self) {
        for (n, e) in self.resume_all() {
            eprintln!("rthinctl: could not resume {n} ({e}); run `dmsetup resume {n}` now, I/O to it is blocked");
        }
    }
}

/// `create-snap`.
pub fn create_snap(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    id: IdArg,
    origin: u32,
    no_suspend: bool,
    g: &crate::Guard,
) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let probe = Msg::CreateSnap(
        match id {
            IdArg::Num(n) => n,
            IdArg::Auto => 0,
        },
        origin,
    );
    owner_guard(ctx, &tg, &probe)?;
    precheck(&tg, &probe, g.expect_txn)?;
    let scan = scan_all(t)?;
    let users: Vec<String> = users_of(&scan, tg.pool.info.dev, origin)
        .iter()
        .filter(|x| !x.info.suspended)
        .map(|x| x.name.clone())
        .collect();
    let to_suspend = if no_suspend {
        Vec::new()
    } else {
        users.clone()
    };
    if g.dry_run {
        for n in &to_suspend {
            println!("dmsetup suspend {n}");
        }
        let code = match id {
            IdArg::Num(_) => dry(&tg.name, &probe),
            IdArg::Auto => {
                println!("# --id auto: tries create_snap with increasing ids until one is free");
                let first = auto_ids(t, tg.pool.info.dev)?.next().unwrap_or(1);
                dry(&tg.name, &Msg::CreateSnap(first, origin))
            }
        };
        for n in to_suspend.iter().rev() {
            println!("dmsetup resume {n}");
        }
        return Ok(code);
    }
    if no_suspend && !users.is_empty() {
        eprintln!(
            "rthinctl: warning: origin id {origin} is active as {} and is not suspended; writes during the snapshot may corrupt it",
            users.join(", ")
        );
    }
    let mut guard = SuspendGuard {
        t,
        names: Vec::new(),
        verbose: ctx.verbose,
    };
    for n in &to_suspend {
        if ctx.verbose {
            eprintln!("rthinctl: dmsetup suspend {n}");
        }
        t.suspend(n).map_err(|e| {
            let mut err = dm_err(&format!("suspending origin {n}"), n, e);
            err.text = format!("{}; no snapshot was taken", err.text);
            err
        })?;
        guard.names.push(n.clone());
    }
    let sent = with_auto_id(ctx, t, &tg, id, &|n| Msg::CreateSnap(n, origin));
    let resume_errs = guard.resume_all();
    let n = sent?;
    if let Some((name, e)) = resume_errs.into_iter().next() {
        return Err(Error::new(
            exit::OTHER,
            format!("snapshot {n} was created, but origin {name} could not be resumed ({e}); run `dmsetup resume {name}` now"),
        ));
    }
    let mut j = JResult::new(&tg.name, &Msg::CreateSnap(n, origin));
    j.dev_id = Some(n);
    j.origin_id = Some(origin);
    j.suspended = to_suspend.clone();
    let how = if to_suspend.is_empty() {
        String::new()
    } else {
        format!(" (suspended and resumed {})", to_suspend.join(", "))
    };
    done(
        ctx,
        &j,
        format!(
            "created snapshot id {n} of thin id {origin} in pool {}{how}",
            tg.name
        ),
    )
}

/// `delete`.
pub fn delete(ctx: &Ctx, t: &dyn Transport, pool: &str, id: u32, g: &crate::Guard) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let msg = Msg::Delete(id);
    owner_guard(ctx, &tg, &msg)?;
    precheck(&tg, &msg, g.expect_txn)?;
    if g.dry_run {
        return Ok(dry(&tg.name, &msg));
    }
    send(ctx, t, &tg, &msg)?;
    let mut j = JResult::new(&tg.name, &msg);
    j.dev_id = Some(id);
    done(
        ctx,
        &j,
        format!("deleted thin id {id} from pool {}", tg.name),
    )
}

fn current_txn(p: &Pool) -> Option<u64> {
    match &p.status {
        Ok(PoolStatus::Working(u)) => Some(u.transaction_id),
        _ => None,
    }
}

/// `set-transaction-id`.
pub fn set_transaction_id(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    ids: Option<(u64, u64)>,
    bump: bool,
    dry_run: bool,
) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let (old, new) = match (ids, bump) {
        (Some(x), _) => x,
        (None, true) => {
            let cur = current_txn(&tg.pool).ok_or_else(|| {
                Error::new(
                    exit::REFUSED,
                    format!(
                        "--bump: pool {}'s transaction id cannot be read from its status",
                        tg.name
                    ),
                )
            })?;
            let next = cur.checked_add(1).ok_or_else(|| {
                Error::new(
                    exit::REFUSED,
                    format!(
                        "--bump: pool {}'s transaction id is already the maximum",
                        tg.name
                    ),
                )
            })?;
            (cur, next)
        }
        (None, false) => return Err(Error::usage("give OLD and NEW, or --bump")),
    };
    let msg = Msg::SetTransactionId(old, new);
    owner_guard(ctx, &tg, &msg)?;
    precheck(&tg, &msg, None)?;
    // The guard: refuse before sending when the id is already known to differ.
    if let Some(cur) = current_txn(&tg.pool) {
        if cur != old {
            return Err(explain_message(
                &tg.name,
                &msg,
                rthin_core::dm::errno::EINVAL,
                &facts_of(&tg.pool),
            )
            .note("not sent: checked against the status before sending"));
        }
    }
    if dry_run {
        return Ok(dry(&tg.name, &msg));
    }
    send(ctx, t, &tg, &msg)?;
    // Verify, as LVM does.
    let after = read_pool(t, &tg.name, tg.pool.info.dev)
        .ok()
        .and_then(|p| current_txn(&p));
    if let Some(a) = after {
        if a != new {
            return Err(Error::new(
                exit::OTHER,
                format!("pool {} accepted set_transaction_id {old} {new}, but its status now shows {a}; another tool is changing it", tg.name),
            ));
        }
    }
    let mut j = JResult::new(&tg.name, &msg);
    j.transaction_id = Some(new);
    done(
        ctx,
        &j,
        format!("pool {} transaction id {old} -> {new}", tg.name),
    )
}

/// Metadata snapshot operations.
pub enum SnapOp {
    /// reserve_metadata_snap.
    Reserve,
    /// release_metadata_snap.
    Release,
    /// Show the held root.
    Show,
}

fn held_root(p: &Pool) -> Option<u64> {
    match &p.status {
        Ok(PoolStatus::Working(u)) => u.held_root,
        _ => None,
    }
}

/// `metadata-snap`.
pub fn metadata_snap(ctx: &Ctx, t: &dyn Transport, pool: &str, op: SnapOp) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let msg = match op {
        SnapOp::Show => {
            let readable = matches!(tg.pool.status, Ok(PoolStatus::Working(_)));
            let h = held_root(&tg.pool);
            let mut j = JResult::new(&tg.name, &Msg::Raw(String::new()));
            j.message = String::new();
            j.held_metadata_root = h;
            if !readable {
                return Err(Error::new(
                    exit::REFUSED,
                    format!(
                        "pool {}'s status does not show its held root ({})",
                        tg.name,
                        report::pool_state(&tg.pool)
                    ),
                ));
            }
            return done(
                ctx,
                &j,
                match h {
                    Some(b) => format!("pool {} holds a metadata snapshot at block {b}", tg.name),
                    None => format!("pool {} holds no metadata snapshot", tg.name),
                },
            );
        }
        SnapOp::Reserve => Msg::ReserveMetadataSnap,
        SnapOp::Release => Msg::ReleaseMetadataSnap,
    };
    precheck(&tg, &msg, None)?;
    send(ctx, t, &tg, &msg)?;
    let after = read_pool(t, &tg.name, tg.pool.info.dev).ok();
    let h = after.as_ref().and_then(held_root);
    let mut j = JResult::new(&tg.name, &msg);
    j.held_metadata_root = h;
    let text = match (&msg, h) {
        (Msg::ReserveMetadataSnap, Some(b)) => format!("pool {} now holds a metadata snapshot at block {b}; read it with thin_dump --metadata-snap, release it when done", tg.name),
        (Msg::ReserveMetadataSnap, None) => format!("pool {} reserved a metadata snapshot", tg.name),
        _ => format!("pool {} released its metadata snapshot", tg.name),
    };
    done(ctx, &j, text)
}

/// `message`: raw words, validated by the core parser when they name a
/// known pool message.
/// `message`: sends `msg` (its words checked by [`Msg::from_words`]).
pub fn message(ctx: &Ctx, t: &dyn Transport, pool: &str, msg: &Msg) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    owner_guard(ctx, &tg, msg)?;
    let out = send(ctx, t, &tg, msg)?;
    if ctx.json {
        let mut j = JResult::new(&tg.name, msg);
        j.output = out;
        print_json(&j)?;
    } else if let Some(o) = out {
        println!("{o}");
    }
    Ok(exit::OK)
}

/// The block device node of `dev`, from sysfs (`/sys/dev/block/M:N/uevent`).
fn dev_node(dev: DevT) -> Option<String> {
    let u = std::fs::read_to_string(format!("/sys/dev/block/{}:{}/uevent", dev.major, dev.minor))
        .ok()?;
    u.lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|n| format!("/dev/{n}"))
}

/// `meta check --live POOL`: reserve a metadata snapshot (or use the one
/// the pool holds), check it through the running pool's metadata device
/// and release it again (also on failure), as `examine_held` describes.
pub fn check_live(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    quiet: bool,
    ignore_leaks: bool,
) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let mdev = tg
        .pool
        .table
        .as_ref()
        .ok()
        .and_then(|x| x.metadata_dev)
        .ok_or_else(|| {
            Error::new(
                exit::OTHER,
                format!("pool {}: its table names no metadata device", tg.name),
            )
        })?;
    let path = dev_node(mdev).ok_or_else(|| {
        Error::new(
            exit::NOT_FOUND,
            format!(
                "pool {}: no device node for its metadata device {}:{}",
                tg.name, mdev.major, mdev.minor
            ),
        )
    })?;
    let ours = held_root(&tg.pool).is_none();
    if ours {
        send(ctx, t, &tg, &Msg::ReserveMetadataSnap)?;
    }
    struct Release<'a> {
        ctx: &'a Ctx,
        t: &'a dyn Transport,
        tg: &'a Target,
        armed: bool,
    }
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            if self.armed {
                if let Err(e) = send(self.ctx, self.t, self.tg, &Msg::ReleaseMetadataSnap) {
                    eprintln!(
                        "rthinctl: could not release the metadata snapshot of {}: {e}; run: dmsetup message {} 0 release_metadata_snap",
                        self.tg.name, self.tg.name
                    );
                }
            }
        }
    }
    let release = Release {
        ctx,
        t,
        tg: &tg,
        armed: ours,
    };
    let store = crate::meta::FileStore::open(
        &path,
        crate::meta::OpenMode {
            snap: false,
            shared: true,
        },
    )?;
    let r = crate::meta::judge(&tg.name, &store, true, ignore_leaks);
    drop(store);
    drop(release);
    crate::meta::report_check(&r, quiet, ctx.json)
}

/// `version`.
pub fn version(ctx: &Ctx, t: &dyn Transport) -> Result<i32> {
    let (a, b, c) = t
        .driver_version()
        .map_err(|e| dm_err("reading the DM version", "", e))?;
    let targets = t
        .target_versions()
        .map_err(|e| dm_err("listing targets", "", e))?;
    let ours: Vec<&(String, u32, u32, u32)> = targets
        .iter()
        .filter(|x| POOL_TARGETS.contains(&x.0.as_str()) || THIN_TARGETS.contains(&x.0.as_str()))
        .collect();
    if ctx.json {
        #[derive(Serialize)]
        struct J<'a> {
            schema: &'static str,
            rthinctl: &'static str,
            dm_ioctl: String,
            targets: Vec<JT<'a>>,
        }
        #[derive(Serialize)]
        struct JT<'a> {
            name: &'a str,
            version: String,
        }
        return print_json(&J {
            schema: "rthinctl.version/1",
            rthinctl: env!("CARGO_PKG_VERSION"),
            dm_ioctl: format!("{a}.{b}.{c}"),
            targets: ours
                .iter()
                .map(|x| JT {
                    name: &x.0,
                    version: format!("{}.{}.{}", x.1, x.2, x.3),
                })
                .collect(),
        })
        .map(|_| exit::OK);
    }
    // "rthinctl VERSION" is printed before device-mapper is opened.
    println!("device-mapper ioctl interface {a}.{b}.{c}");
    if ours.is_empty() {
        println!("no thin targets are loaded: modprobe dm-rthin (rthin-pool/rthin) or modprobe dm-thin-pool (thin-pool/thin)");
    }
    for x in ours {
        println!("target {} {}.{}.{}", x.0, x.1, x.2, x.3);
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dm::{DevInfo, Target as DmTarget};
    use std::cell::RefCell;
    use std::time::Duration;

    /// The message handler: the reply, or an errno.
    type Reply = Box<dyn Fn(&str) -> std::result::Result<Option<String>, i32>>;
    /// name, device, target, table, status, suspended.
    type FakeDev = (String, DevT, &'static str, &'static str, &'static str, bool);

    /// A scripted device-mapper: fixed devices, recorded calls, and a
    /// message handler.
    struct Fake {
        devs: Vec<FakeDev>,
        calls: RefCell<Vec<String>>,
        reply: Reply,
    }

    fn d(minor: u32) -> DevT {
        DevT { major: 253, minor }
    }

    impl Fake {
        fn new(reply: impl Fn(&str) -> std::result::Result<Option<String>, i32> + 'static) -> Self {
            Fake {
                devs: vec![
                    (
                        "pool".into(),
                        d(0),
                        "thin-pool",
                        "1:1 1:2 128 0 0 ",
                        "3 10/100 2/1000 - rw discard_passdown queue_if_no_space - 25 ",
                        false,
                    ),
                    ("a".into(), d(1), "thin", "253:0 1", "128 127", false),
                    ("b".into(), d(2), "thin", "253:0 1", "128 127", false),
                    ("s".into(), d(3), "thin", "253:0 1", "128 127", true),
                    ("other".into(), d(4), "thin", "253:0 2", "0 -", false),
                    ("failed".into(), d(5), "thin", "Fail", "Fail", false),
                    ("lin".into(), d(6), "linear", "1:3 0", "", false),
                ],
                calls: RefCell::new(Vec::new()),
                reply: Box::new(reply),
            }
        }
        fn find(
            &self,
            name: &str,
        ) -> std::result::Result<
            &(String, DevT, &'static str, &'static str, &'static str, bool),
            DmErr,
        > {
            self.devs.iter().find(|x| x.0 == name).ok_or(DmErr {
                errno: Some(6),
                text: "ENXIO".into(),
            })
        }
        fn info(
            &self,
            x: &(String, DevT, &'static str, &'static str, &'static str, bool),
        ) -> DevInfo {
            DevInfo {
                dev: x.1,
                open_count: 0,
                event_nr: 0,
                suspended: x.5,
                active: true,
                owner: if x.0.starts_with("vg-") {
                    crate::dm::Owner::Lvm
                } else {
                    crate::dm::Owner::None
                },
            }
        }
        fn log(&self, s: String) {
            self.calls.borrow_mut().push(s);
        }
    }

    impl Transport for Fake {
        fn driver_version(&self) -> std::result::Result<(u32, u32, u32), DmErr> {
            Ok((4, 48, 0))
        }
        fn target_versions(&self) -> std::result::Result<Vec<(String, u32, u32, u32)>, DmErr> {
            Ok(vec![("thin-pool".into(), 1, 24, 0)])
        }
        fn list(&self) -> std::result::Result<Vec<(String, DevT)>, DmErr> {
            self.log("list".into());
            Ok(self.devs.iter().map(|x| (x.0.clone(), x.1)).collect())
        }
        fn table(&self, name: &str) -> std::result::Result<(DevInfo, Vec<DmTarget>), DmErr> {
            let x = self.find(name)?;
            self.log(format!("table {name}"));
            Ok((
                self.info(x),
                vec![DmTarget {
                    start: 0,
                    length: 2048,
                    ttype: x.2.into(),
                    params: x.3.into(),
                }],
            ))
        }
        fn status(
            &self,
            name: &str,
            noflush: bool,
        ) -> std::result::Result<(DevInfo, Vec<DmTarget>), DmErr> {
            assert!(noflush, "status must not force a commit");
            let x = self.find(name)?;
            self.log(format!("status {name}"));
            Ok((
                self.info(x),
                vec![DmTarget {
                    start: 0,
                    length: 2048,
                    ttype: x.2.into(),
                    params: x.4.into(),
                }],
            ))
        }
        fn deps(&self, name: &str) -> std::result::Result<Vec<DevT>, DmErr> {
            self.log(format!("deps {name}"));
            Ok(vec![d(0)])
        }
        fn message(&self, name: &str, msg: &str) -> std::result::Result<Option<String>, DmErr> {
            self.log(format!("message {name} {msg}"));
            (self.reply)(msg).map_err(|e| DmErr {
                errno: Some(e),
                text: format!("errno {e}"),
            })
        }
        fn suspend(&self, name: &str) -> std::result::Result<(), DmErr> {
            self.log(format!("suspend {name}"));
            Ok(())
        }
        fn resume(&self, name: &str) -> std::result::Result<(), DmErr> {
            self.log(format!("resume {name}"));
            Ok(())
        }
        fn wait_event(&self, _timeout: Duration) -> std::result::Result<bool, DmErr> {
            Ok(false)
        }
    }

    fn ctx() -> Ctx {
        Ctx {
            json: false,
            verbose: false,
            style: Style::raw(),
            force: false,
        }
    }

    fn guard() -> crate::Guard {
        crate::Guard {
            expect_txn: None,
            dry_run: false,
            force: false,
        }
    }

    fn calls(f: &Fake, prefix: &[&str]) -> Vec<String> {
        f.calls
            .borrow()
            .iter()
            .filter(|c| prefix.iter().any(|p| c.starts_with(p)))
            .cloned()
            .collect()
    }

    #[test]
    fn create_snap_suspends_active_origins_and_resumes_on_error() {
        let f = Fake::new(|m| {
            if m.starts_with("create_snap") {
                Err(17)
            } else {
                Ok(None)
            }
        });
        let e = create_snap(&ctx(), &f, "pool", IdArg::Num(9), 1, false, &guard()).unwrap_err();
        assert!(e.text.contains("thin device id 9 is already in use"), "{e}");
        assert_eq!(
            calls(&f, &["suspend", "resume", "message"]),
            [
                "suspend a",
                "suspend b",
                "message pool create_snap 9 1",
                "resume b",
                "resume a"
            ]
        );
    }

    #[test]
    fn create_snap_auto_id_and_no_suspend() {
        // ids 2 (active as "other") .. : 3 is taken, 4 is free.
        let f = Fake::new(|m| {
            if m == "create_snap 3 1" {
                Err(17)
            } else {
                Ok(None)
            }
        });
        assert_eq!(
            create_snap(&ctx(), &f, "pool", IdArg::Auto, 1, false, &guard()),
            Ok(exit::OK)
        );
        assert_eq!(
            calls(&f, &["message"]),
            [
                "message pool create_snap 3 1",
                "message pool create_snap 4 1"
            ]
        );
        let f = Fake::new(|_| Ok(None));
        assert_eq!(
            create_snap(&ctx(), &f, "pool", IdArg::Num(5), 1, true, &guard()),
            Ok(exit::OK)
        );
        assert!(calls(&f, &["suspend", "resume"]).is_empty());
    }

    #[test]
    fn delete_busy_names_the_devices() {
        let f = Fake::new(|_| Err(16));
        let e = delete(&ctx(), &f, "pool", 1, &guard()).unwrap_err();
        assert!(e.text.contains("active as a, b, s"), "{e}");
    }

    #[test]
    fn prechecks_and_guards() {
        let f = Fake::new(|_| Ok(None));
        let g = crate::Guard {
            expect_txn: Some(4),
            dry_run: false,
            force: false,
        };
        let e = create_thin(&ctx(), &f, "pool", IdArg::Num(1), &g).unwrap_err();
        assert!(e.text.contains("transaction id is 3, not 4"), "{e}");
        let e = set_transaction_id(&ctx(), &f, "pool", Some((1, 2)), false, false).unwrap_err();
        assert!(e.text.contains("transaction id is 3, not 1"), "{e}");
        assert!(calls(&f, &["message"]).is_empty(), "guards must not send");
        let e = create_thin(&ctx(), &f, "lin", IdArg::Num(1), &guard()).unwrap_err();
        assert!(e.text.contains("lin is a linear device"), "{e}");
        let e = create_thin(&ctx(), &f, "a", IdArg::Num(1), &guard()).unwrap_err();
        assert!(e.text.contains("not a thin pool"), "{e}");
        let e = create_thin(&ctx(), &f, "nope", IdArg::Num(1), &guard()).unwrap_err();
        assert_eq!(e.code, exit::NOT_FOUND);
        let dry = crate::Guard {
            expect_txn: None,
            dry_run: true,
            force: false,
        };
        assert_eq!(delete(&ctx(), &f, "pool", 1, &dry), Ok(exit::OK));
        assert_eq!(
            create_snap(&ctx(), &f, "pool", IdArg::Auto, 1, false, &dry),
            Ok(exit::OK)
        );
        assert_eq!(
            create_thin(&ctx(), &f, "pool", IdArg::Auto, &dry),
            Ok(exit::OK)
        );
        assert!(calls(&f, &["suspend", "resume"]).is_empty());
        assert!(
            calls(&f, &["message"]).is_empty(),
            "--dry-run must not send"
        );
    }

    #[test]
    fn scan_finds_the_pool_of_a_failed_thin_and_costs_o_devices() {
        let f = Fake::new(|_| Ok(None));
        let scan = scan_all(&f).unwrap();
        assert_eq!(scan.pools.len(), 1);
        assert_eq!(scan.thins.len(), 5);
        let failed = scan.thins.iter().find(|t| t.name == "failed").unwrap();
        assert_eq!(failed.pool, Some(d(0)));
        assert_eq!(failed.dev_id, None);
        assert_eq!(scan.others.len(), 1);
        // One list, one table per device, one status per pool/thin, one deps
        // for the thin whose table reads Fail.
        assert_eq!(f.calls.borrow().len(), 1 + 7 + 6 + 1);
    }
}
