// SPDX-License-Identifier: GPL-2.0
//! Sending one message to a pool: finding it, the owner guard and the
//! pre-checks before sending, the send itself with its error sentence,
//! and the result each message command prints.

use serde::Serialize;

use crate::context::{print_json, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, explain_message, Error, Facts, Msg, Result};
use crate::model::{dm_err, read_pool, resolve, scan_all, Pool, Scan, Thin};
use crate::status::{DevT, PoolModeWord, PoolStatus};

/// Refuses to change a pool that LVM or Stratis owns (dm UUID `LVM-...`,
/// `stratis-...`) unless `--force`: the owner keeps its own record of the
/// pool's devices and transaction id, which a message behind its back
/// breaks. Says which tool owns it and what to run instead.
pub fn owner_guard(ctx: &Ctx, tg: &Target, msg: &Msg) -> Result<()> {
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

/// Everything a message command needs to know about the pool first.
pub struct Target {
    pub name: String,
    pub pool: Pool,
}

pub fn find_pool(t: &dyn Transport, arg: &str) -> Result<Target> {
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

pub fn facts_of(p: &Pool) -> Facts {
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
pub fn precheck(tg: &Target, msg: &Msg, expect_txn: Option<u64>) -> Result<()> {
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
pub fn send(ctx: &Ctx, t: &dyn Transport, tg: &Target, msg: &Msg) -> Result<Option<String>> {
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

pub fn users_of(scan: &Scan, pool: DevT, id: u32) -> Vec<&Thin> {
    scan.thins
        .iter()
        .filter(|x| x.pool == Some(pool) && x.dev_id == Some(id))
        .collect()
}

#[derive(Serialize)]
pub struct JResult<'a> {
    pub schema: &'static str,
    pub pool: &'a str,
    pub message: String,
    pub dev_id: Option<u32>,
    pub origin_id: Option<u32>,
    pub transaction_id: Option<u64>,
    pub held_metadata_root: Option<u64>,
    pub suspended: Vec<String>,
    pub output: Option<String>,
}

impl<'a> JResult<'a> {
    pub fn new(pool: &'a str, msg: &Msg) -> Self {
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

pub fn done(ctx: &Ctx, j: &JResult, text: String) -> Result<i32> {
    if ctx.json {
        print_json(j)?;
    } else {
        println!("{text}");
    }
    Ok(exit::OK)
}

pub fn dry(tg: &str, msg: &Msg) -> i32 {
    println!("dmsetup message {tg} 0 \"{msg}\"");
    exit::OK
}

/// Candidate ids for `--id auto`: above every id active on the pool; an
/// inactive thin may still own one, so the caller retries on EEXIST.
pub fn auto_ids(t: &dyn Transport, pool: DevT) -> Result<impl Iterator<Item = u32>> {
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
pub const AUTO_TRIES: usize = 1024;

pub fn held_root(p: &Pool) -> Option<u64> {
    match &p.status {
        Ok(PoolStatus::Working(u)) => u.held_root,
        _ => None,
    }
}
