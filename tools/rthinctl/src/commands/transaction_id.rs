// SPDX-License-Identifier: GPL-2.0
//! `set-transaction-id`.

use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{exit, explain_message, Error, Msg, Result};
use crate::model::{read_pool, Pool};
use crate::pool_msg::{done, dry, facts_of, find_pool, owner_guard, precheck, send, JResult};
use crate::status::PoolStatus;

fn current_txn(p: &Pool) -> Option<u64> {
    match &p.status {
        Ok(PoolStatus::Working(u)) => Some(u.transaction_id),
        _ => None,
    }
}

/// `set-transaction-id`.
pub fn run(
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
