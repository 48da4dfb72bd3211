// SPDX-License-Identifier: GPL-2.0
//! Presentation: aligned tables, `--raw`, and the versioned JSON schema
//! (`rthinctl.status/1`), plus the `status --check` evaluation.
//! One module per form: [`table`], [`columns`], [`json`], [`thresholds`]
//! (`status --check`) and [`prometheus`]; the figures they share are here.

mod columns;
#[cfg(test)]
mod fixtures;
mod json;
mod prometheus;
mod table;
mod thresholds;

pub use columns::{ls_table, pool_table, thin_table, LS_COLUMNS, POOL_COLUMNS, THIN_COLUMNS};
pub use json::{json_report, pool_json, JPool};
pub use prometheus::prometheus;
pub use table::{Style, Table};
pub use thresholds::{check_pool, perfdata, Level, Thresholds};

use crate::model::{Pool, Scan, Thin};
use crate::status::PoolStatus;

/// Metadata blocks are always 4 KiB.
pub const META_BLOCK_BYTES: u64 = 4096;

/// Short state word of a pool for tables.
pub fn pool_state(p: &Pool) -> String {
    match &p.status {
        Ok(PoolStatus::Fail) => "FAIL".into(),
        Ok(PoolStatus::Error) => "ERROR".into(),
        Ok(PoolStatus::Working(u)) => u.mode.map(|m| m.as_str()).unwrap_or("?").into(),
        Err(_) => "unreadable".into(),
    }
}

/// Thins of `pool`, ordered by id.
pub fn thins_of<'a>(scan: &'a Scan, pool: &Pool) -> Vec<&'a Thin> {
    let mut v: Vec<&Thin> = scan
        .thins
        .iter()
        .filter(|t| t.pool == Some(pool.info.dev))
        .collect();
    v.sort_by_key(|t| (t.dev_id, t.name.clone()));
    v
}

/// The pool's data block size in bytes, from its table.
fn block_bytes(p: &Pool) -> Option<u64> {
    p.table
        .as_ref()
        .ok()
        .map(|t| u64::from(t.block_size_sectors) * 512)
}

/// Free data space of a working pool, in bytes.
pub fn data_free_bytes(p: &Pool) -> Option<u64> {
    let Ok(PoolStatus::Working(u)) = &p.status else {
        return None;
    };
    block_bytes(p).map(|b| u.data_total.saturating_sub(u.data_used).saturating_mul(b))
}
