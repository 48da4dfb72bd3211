// SPDX-License-Identifier: GPL-2.0
//! `create-snap`: active origins suspended around the message.

use super::with_auto_id;
use crate::cli::{Guard, IdArg};
use crate::context::Ctx;
use crate::dm::{DmErr, Transport};
use crate::explain::{exit, Error, Msg, Result};
use crate::model::{dm_err, scan_all};
use crate::pool_msg::{auto_ids, done, dry, find_pool, owner_guard, precheck, users_of, JResult};

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
pub fn run(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    id: IdArg,
    origin: u32,
    no_suspend: bool,
    g: &Guard,
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
