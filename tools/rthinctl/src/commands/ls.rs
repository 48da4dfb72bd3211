// SPDX-License-Identifier: GPL-2.0
//! `ls`: pools, each followed by its active thins.

use crate::context::{print_json, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, Error, Result};
use crate::model::{scan_all, select};
use crate::report::{self, json_report};

/// `ls`.
pub fn run(ctx: &Ctx, t: &dyn Transport, pool: Option<&str>) -> Result<i32> {
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
