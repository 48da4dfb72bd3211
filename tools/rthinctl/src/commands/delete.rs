// SPDX-License-Identifier: GPL-2.0
//! `delete`.

use crate::cli::Guard;
use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{Msg, Result};
use crate::pool_msg::{done, dry, find_pool, owner_guard, precheck, send, JResult};

/// `delete`.
pub fn run(ctx: &Ctx, t: &dyn Transport, pool: &str, id: u32, g: &Guard) -> Result<i32> {
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
