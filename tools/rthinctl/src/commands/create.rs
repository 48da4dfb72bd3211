// SPDX-License-Identifier: GPL-2.0
//! `create-thin`.

use super::with_auto_id;
use crate::cli::{Guard, IdArg};
use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{Msg, Result};
use crate::pool_msg::{auto_ids, done, dry, find_pool, owner_guard, precheck, JResult};

/// `create-thin`.
pub fn run(ctx: &Ctx, t: &dyn Transport, pool: &str, id: IdArg, g: &Guard) -> Result<i32> {
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
