// SPDX-License-Identifier: GPL-2.0
//! `status --prometheus`.

use crate::dm::Transport;
use crate::explain::{exit, io_error, Result};
use crate::model::{scan_all, select, Pool, Thin};
use crate::report;

/// `status --prometheus`: the selected pools (all by default) and their
/// thins in Prometheus's text format.
pub fn run(t: &dyn Transport, devs: &[String]) -> Result<i32> {
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
        .map_err(io_error)?;
    Ok(exit::OK)
}
