// SPDX-License-Identifier: GPL-2.0
//! The versioned JSON schema `rthinctl.status/1` of `status` and `ls`.

use serde::Serialize;

use super::{thins_of, META_BLOCK_BYTES};
use crate::dm::lv_name;
use crate::model::{pool_of, Pool, Scan, Thin};
use crate::status::{PoolStatus, ThinStatus};
use crate::units::round_percent;

/// JSON schema name of `status`/`ls --json`.
pub const STATUS_SCHEMA: &str = "rthinctl.status/1";

/// Space figures in JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JSpace {
    /// Block size in bytes (null if the table is unknown).
    pub block_size_bytes: Option<u64>,
    /// Used blocks.
    pub used_blocks: u64,
    /// Total blocks.
    pub total_blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Used bytes.
    pub used_bytes: Option<u64>,
    /// Total bytes.
    pub total_bytes: Option<u64>,
    /// Used percentage (LVM rounding, 2 decimals).
    pub used_percent: Option<f64>,
    /// Low-water mark in blocks (data: the table's; metadata: the kernel's
    /// threshold from the status line).
    pub low_water_blocks: Option<u64>,
}

/// A pool in JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JPool {
    /// DM name.
    pub name: String,
    /// `VG/LV` where LVM owns the device.
    pub lv: Option<String>,
    /// `MAJ:MIN`.
    pub dev: String,
    /// Target type.
    pub target: String,
    /// `ok`, `fail` (status `Fail`), `error` (status `Error`) or `unreadable`.
    pub state: &'static str,
    /// `rw`, `ro`, `out_of_data_space` or null.
    pub mode: Option<&'static str>,
    /// Transaction id.
    pub transaction_id: Option<u64>,
    /// Data space.
    pub data: Option<JSpace>,
    /// Metadata space.
    pub metadata: Option<JSpace>,
    /// Held metadata root block.
    pub held_metadata_root: Option<u64>,
    /// `passdown`, `nopassdown`, `ignore` or null.
    pub discards: Option<&'static str>,
    /// `queue` or `error` or null.
    pub when_full: Option<&'static str>,
    /// needs_check flag (null if unknown).
    pub needs_check: Option<bool>,
    /// Unrecognised status words.
    pub extra_flags: Vec<String>,
    /// Table feature words.
    pub features: Vec<String>,
    /// Pool length in bytes.
    pub size_bytes: u64,
    /// Suspended.
    pub suspended: bool,
    /// DM event counter.
    pub event_nr: u32,
    /// Why the status could not be read or parsed.
    pub error: Option<String>,
    /// Active thins of the pool.
    pub thins: Vec<JThin>,
}

/// A thin in JSON.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JThin {
    /// DM name.
    pub name: String,
    /// `VG/LV` where LVM owns the device.
    pub lv: Option<String>,
    /// `MAJ:MIN`.
    pub dev: String,
    /// Target type.
    pub target: String,
    /// Pool name (null if the pool is not active under a known name).
    pub pool: Option<String>,
    /// Pool `MAJ:MIN`.
    pub pool_dev: Option<String>,
    /// Thin device id.
    pub dev_id: Option<u32>,
    /// `ok`, `fail`, `error`, `no_device` or `unreadable`.
    pub state: &'static str,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Size in sectors.
    pub size_sectors: u64,
    /// Mapped sectors.
    pub mapped_sectors: Option<u64>,
    /// Mapped bytes.
    pub mapped_bytes: Option<u64>,
    /// Mapped pool blocks.
    pub mapped_blocks: Option<u64>,
    /// Mapped / size, capped at 100 (LVM's thin Data%).
    pub mapped_percent: Option<f64>,
    /// Highest mapped sector.
    pub highest_mapped_sector: Option<u64>,
    /// External origin `MAJ:MIN`.
    pub external_origin: Option<String>,
    /// Suspended.
    pub suspended: bool,
    /// Why the status could not be read or parsed.
    pub error: Option<String>,
}

/// Builds a pool's JSON object.
pub fn pool_json(p: &Pool, thins: &[&Thin]) -> JPool {
    let bb = p.block_bytes();
    let (table_lwm, features) = match &p.table {
        Ok(t) => (Some(t.low_water_blocks), t.features.clone()),
        Err(_) => (None, Vec::new()),
    };
    let mut j = JPool {
        name: p.name.clone(),
        lv: lv_name(&p.name, p.info.owner),
        dev: p.info.dev.to_string(),
        target: p.target.clone(),
        state: "ok",
        mode: None,
        transaction_id: None,
        data: None,
        metadata: None,
        held_metadata_root: None,
        discards: None,
        when_full: None,
        needs_check: None,
        extra_flags: Vec::new(),
        features,
        size_bytes: p.length.saturating_mul(512),
        suspended: p.info.suspended,
        event_nr: p.info.event_nr,
        error: None,
        thins: thins.iter().map(|t| thin_json(Some(p), t)).collect(),
    };
    match &p.status {
        Ok(PoolStatus::Fail) => j.state = "fail",
        Ok(PoolStatus::Error) => j.state = "error",
        Err(e) => {
            j.state = "unreadable";
            j.error = Some(e.clone());
        }
        Ok(PoolStatus::Working(u)) => {
            j.mode = u.mode.map(|m| m.as_str());
            j.transaction_id = Some(u.transaction_id);
            j.data = Some(JSpace {
                block_size_bytes: bb,
                used_blocks: u.data_used,
                total_blocks: u.data_total,
                free_blocks: u.data_total.saturating_sub(u.data_used),
                used_bytes: bb.map(|b| u.data_used.saturating_mul(b)),
                total_bytes: bb.map(|b| u.data_total.saturating_mul(b)),
                used_percent: round_percent(u.data_used, u.data_total),
                low_water_blocks: table_lwm,
            });
            j.metadata = Some(JSpace {
                block_size_bytes: Some(META_BLOCK_BYTES),
                used_blocks: u.meta_used,
                total_blocks: u.meta_total,
                free_blocks: u.meta_total.saturating_sub(u.meta_used),
                used_bytes: Some(u.meta_used.saturating_mul(META_BLOCK_BYTES)),
                total_bytes: Some(u.meta_total.saturating_mul(META_BLOCK_BYTES)),
                used_percent: round_percent(u.meta_used, u.meta_total),
                low_water_blocks: u.meta_low_water,
            });
            j.held_metadata_root = u.held_root;
            j.discards = u.discard.map(|d| d.short());
            j.when_full = u
                .error_if_no_space
                .map(|e| if e { "error" } else { "queue" });
            j.needs_check = Some(u.needs_check);
            j.extra_flags = u.extra_flags.clone();
        }
    }
    j
}

/// Builds a thin's JSON object.
pub fn thin_json(pool: Option<&Pool>, t: &Thin) -> JThin {
    let bs_sectors = pool
        .and_then(|p| p.table.as_ref().ok())
        .map(|t| u64::from(t.block_size_sectors));
    let mut j = JThin {
        name: t.name.clone(),
        lv: lv_name(&t.name, t.info.owner),
        dev: t.info.dev.to_string(),
        target: t.target.clone(),
        pool: pool.map(|p| p.name.clone()),
        pool_dev: t.pool.map(|d| d.to_string()),
        dev_id: t.dev_id,
        state: "ok",
        size_bytes: t.length.saturating_mul(512),
        size_sectors: t.length,
        mapped_sectors: None,
        mapped_bytes: None,
        mapped_blocks: None,
        mapped_percent: None,
        highest_mapped_sector: None,
        external_origin: t.origin.map(|d| d.to_string()),
        suspended: t.info.suspended,
        error: None,
    };
    match &t.status {
        Ok(ThinStatus::Working {
            mapped_sectors,
            highest_mapped_sector,
        }) => {
            j.mapped_sectors = Some(*mapped_sectors);
            j.mapped_bytes = Some(mapped_sectors.saturating_mul(512));
            j.mapped_blocks = bs_sectors.filter(|&b| b > 0).map(|b| mapped_sectors / b);
            j.mapped_percent = round_percent((*mapped_sectors).min(t.length), t.length);
            j.highest_mapped_sector = *highest_mapped_sector;
        }
        Ok(ThinStatus::Fail) => j.state = "fail",
        Ok(ThinStatus::Error) => j.state = "error",
        Ok(ThinStatus::NoDevice) => j.state = "no_device",
        Err(e) => {
            j.state = "unreadable";
            j.error = Some(e.clone());
        }
    }
    j
}

/// The whole `status`/`ls` JSON document.
#[derive(Debug, Clone, Serialize)]
pub struct JReport {
    /// Always [`STATUS_SCHEMA`].
    pub schema: &'static str,
    /// Pools, each with its thins.
    pub pools: Vec<JPool>,
    /// Thins listed whose pool is not in `pools`.
    pub other_thins: Vec<JThin>,
}

/// The `--json` report of `status` and `ls`: `pools` with their thins,
/// `thins` beside them.
pub fn json_report(scan: &Scan, pools: &[&Pool], thins: &[&Thin]) -> JReport {
    JReport {
        schema: STATUS_SCHEMA,
        pools: pools
            .iter()
            .map(|p| pool_json(p, &thins_of(scan, p)))
            .collect(),
        other_thins: thins
            .iter()
            .map(|t| thin_json(pool_of(scan, t), t))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{pool, thin};

    #[test]
    fn json_schema_golden() {
        let p = pool("5 61/512 10/16384 17 rw ignore_discard queue_if_no_space - 128 ");
        let t = thin("256 1279");
        let r = JReport {
            schema: STATUS_SCHEMA,
            pools: vec![pool_json(&p, &[&t])],
            other_thins: vec![],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["schema"], "rthinctl.status/1");
        let jp = &v["pools"][0];
        assert_eq!(jp["dev"], "253:3");
        assert_eq!(jp["state"], "ok");
        assert_eq!(jp["mode"], "rw");
        assert_eq!(jp["transaction_id"], 5);
        assert_eq!(jp["held_metadata_root"], 17);
        assert_eq!(jp["discards"], "ignore");
        assert_eq!(jp["when_full"], "queue");
        assert_eq!(jp["needs_check"], false);
        assert_eq!(jp["data"]["block_size_bytes"], 65536);
        assert_eq!(jp["data"]["used_bytes"], 655_360);
        assert_eq!(jp["data"]["total_blocks"], 16384);
        assert_eq!(jp["data"]["low_water_blocks"], 100);
        assert_eq!(jp["metadata"]["block_size_bytes"], 4096);
        assert_eq!(jp["metadata"]["used_percent"], 11.91);
        assert_eq!(jp["metadata"]["low_water_blocks"], 128);
        assert_eq!(jp["features"][0], "skip_block_zeroing");
        let jt = &jp["thins"][0];
        assert_eq!(jt["pool"], "pool0");
        assert_eq!(jt["dev_id"], 1);
        assert_eq!(jt["mapped_sectors"], 256);
        assert_eq!(jt["mapped_blocks"], 2);
        assert_eq!(jt["mapped_percent"], 12.5);
        assert_eq!(jt["highest_mapped_sector"], 1279);

        // Unknowns are null, not missing or zero.
        let f = pool_json(&pool("Fail"), &[]);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["state"], "fail");
        assert!(v["transaction_id"].is_null());
        assert!(v["data"].is_null());
        assert!(v["needs_check"].is_null());
        let t = serde_json::to_value(thin_json(None, &thin("Fail"))).unwrap();
        assert_eq!(t["state"], "fail");
        assert!(t["mapped_bytes"].is_null());
        assert!(t["pool"].is_null());
        let t = serde_json::to_value(thin_json(None, &thin("0 -"))).unwrap();
        assert!(t["highest_mapped_sector"].is_null());
        assert!(t["mapped_blocks"].is_null());
        assert_eq!(t["mapped_bytes"], 0);
    }
}
