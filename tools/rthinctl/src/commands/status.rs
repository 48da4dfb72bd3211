// SPDX-License-Identifier: GPL-2.0
//! `status`: the pool and thin tables.

use crate::context::{print_json, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, Result};
use crate::model::{pool_of, scan_all, select, Pool, Thin};
use crate::report::{self, json_report};

/// `status`.
pub fn run(ctx: &Ctx, t: &dyn Transport, devs: &[String]) -> Result<i32> {
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
