// SPDX-License-Identifier: GPL-2.0
//! `message`: the escape hatch.

use crate::context::{print_json, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, Msg, Result};
use crate::pool_msg::{find_pool, owner_guard, send, JResult};

/// `message`: sends `msg` (its words checked by [`Msg::from_words`]).
pub fn run(ctx: &Ctx, t: &dyn Transport, pool: &str, msg: &Msg) -> Result<i32> {
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
