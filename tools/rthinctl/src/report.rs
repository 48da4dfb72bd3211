// SPDX-License-Identifier: GPL-2.0
//! Presentation: aligned tables, `--raw`, and the versioned JSON schema
//! (`rthinctl.status/1`), plus the `status --check` evaluation.

use serde::Serialize;

use crate::dm::lv_name;
use crate::model::{pool_of, Pool, Scan, Thin};
use crate::status::{PoolModeWord, PoolStatus, PoolUsage, ThinStatus};
use crate::units::{round_percent, Pct, Units};
use crate::view::{Col, View};

/// JSON schema name of `status`/`ls --json`.
pub const STATUS_SCHEMA: &str = "rthinctl.status/1";

/// Metadata blocks are always 4 KiB.
pub const META_BLOCK_BYTES: u64 = 4096;

/// Output options shared by every command.
#[derive(Debug, Clone)]
pub struct Style {
    /// Size units.
    pub units: Units,
    /// Print unit suffixes.
    pub suffix: bool,
    /// Print the heading line.
    pub headings: bool,
    /// Column separator; `None` aligns columns with spaces.
    pub separator: Option<String>,
    /// `-o`, `--sort`, `-S` (tables of `ls` and `status`).
    pub view: View,
}

impl Style {
    /// `--raw`: bytes, no suffix, no headings, `:` separated.
    pub fn raw() -> Self {
        Self {
            units: Units::BYTES,
            suffix: false,
            headings: false,
            separator: Some(":".into()),
            view: View::default(),
        }
    }

    fn size(&self, bytes: Option<u64>) -> String {
        match bytes {
            Some(b) => self.units.format(b, self.suffix),
            None => "-".into(),
        }
    }
}

/// A simple text table.
pub struct Table {
    cols: Vec<Col>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns: (heading, right-aligned).
    pub fn new(cols: &[(&'static str, bool)]) -> Self {
        Self {
            cols: cols
                .iter()
                .map(|&(head, right)| Col {
                    head,
                    right,
                    names: &[],
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Columns with their field names (`-o`, `--sort`, `-S`).
    pub fn with_fields(cols: &[Col]) -> Self {
        Self {
            cols: cols.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders with `style`.
    pub fn render(&self, style: &Style) -> String {
        self.render_aligned(style, &mut Vec::new())
    }

    /// Renders with `style`, each column at least as wide as in `widths`,
    /// which grows to this table's widths: a stream of tables (`watch` prints
    /// one per sample, the headings only with the first) stays aligned.
    pub fn render_aligned(&self, style: &Style, widths: &mut Vec<usize>) -> String {
        let mut out = String::new();
        let (shown, rows) = style.view.apply(&self.cols, self.rows.clone());
        let pick = |r: &[String]| -> Vec<String> {
            shown
                .iter()
                .map(|&i| r.get(i).cloned().unwrap_or_default())
                .collect()
        };
        let right: Vec<bool> = shown
            .iter()
            .map(|&i| self.cols.get(i).is_some_and(|c| c.right))
            .collect();
        let mut all: Vec<Vec<String>> = Vec::new();
        if style.headings {
            let head: Vec<String> = self.cols.iter().map(|c| c.head.to_string()).collect();
            all.push(pick(&head));
        }
        all.extend(rows.iter().map(|r| pick(r)));
        if let Some(sep) = &style.separator {
            for r in all {
                out.push_str(&r.join(sep));
                out.push('\n');
            }
            return out;
        }
        let n = shown.len();
        widths.resize(n, 0);
        let w = widths;
        for r in &all {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        for r in all {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(n) {
                let pad = w[i].saturating_sub(c.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i + 1 < n {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// Short state word of a pool for tables.
pub fn pool_state(p: &Pool) -> String {
    match &p.status {
        Ok(PoolStatus::Fail) => "FAIL".into(),
        Ok(PoolStatus::Error) => "ERROR".into(),
        Ok(PoolStatus::Working(u)) => u.mode.map(|m| m.as_str()).unwrap_or("?").into(),
        Err(_) => "unreadable".into(),
    }
}

fn pool_flags(p: &Pool) -> String {
    let mut f: Vec<String> = Vec::new();
    if let Ok(PoolStatus::Working(u)) = &p.status {
        if u.needs_check {
            f.push("needs_check".into());
        }
        if let Some(d) = u.discard {
            f.push(format!("discard={}", d.short()));
        }
        match u.error_if_no_space {
            Some(true) => f.push("when_full=error".into()),
            Some(false) => f.push("when_full=queue".into()),
            None => {}
        }
        f.extend(u.extra_flags.iter().cloned());
    }
    if p.info.suspended {
        f.push("suspended".into());
    }
    if f.is_empty() {
        "-".into()
    } else {
        f.join(",")
    }
}

/// `status`'s pool table.
pub const POOL_COLUMNS: &[Col] = &[
    Col::new("POOL", false, &["pool", "lv_name", "name"]),
    Col::new("TARGET", false, &["target", "segtype"]),
    Col::new("MODE", false, &["mode"]),
    Col::new("TXN", true, &["txn", "transaction_id"]),
    Col::new("DATA", true, &["data", "data_used"]),
    Col::new("DSIZE", true, &["dsize", "lv_size", "size"]),
    Col::new("DATA%", true, &["data_percent"]),
    Col::new("META", true, &["meta", "metadata_used"]),
    Col::new("MSIZE", true, &["msize", "lv_metadata_size"]),
    Col::new("META%", true, &["metadata_percent"]),
    Col::new("HELD", true, &["held"]),
    Col::new("THINS", true, &["thins", "thin_count"]),
    Col::new("FLAGS", false, &["flags"]),
];

/// `status`'s thin table.
pub const THIN_COLUMNS: &[Col] = &[
    Col::new("THIN", false, &["thin", "lv_name", "name"]),
    Col::new("POOL", false, &["pool", "pool_lv"]),
    Col::new("ID", true, &["id", "thin_id"]),
    Col::new("SIZE", true, &["size", "lv_size"]),
    Col::new("MAPPED", true, &["mapped"]),
    Col::new("MAP%", true, &["data_percent"]),
    Col::new("HIGHEST", true, &["highest"]),
    Col::new("STATE", false, &["state"]),
];

/// `ls`'s table.
pub const LS_COLUMNS: &[Col] = &[
    Col::new("NAME", false, &["name", "lv_name"]),
    Col::new("LV", false, &["lv", "lv_full_name"]),
    Col::new("TYPE", false, &["type"]),
    Col::new("POOL", false, &["pool", "pool_lv"]),
    Col::new("ID", true, &["id", "thin_id"]),
    Col::new("SIZE", true, &["size", "lv_size"]),
    Col::new("USED", true, &["used"]),
    Col::new("USE%", true, &["data_percent"]),
    Col::new("META%", true, &["metadata_percent"]),
    Col::new("STATE", false, &["state"]),
];

/// The `status` table for pools.
pub fn pool_table(pools: &[(&Pool, usize)], style: &Style) -> String {
    let mut t = Table::with_fields(POOL_COLUMNS);
    for (p, nthins) in pools {
        let bb = p.block_bytes();
        let mut row = vec![p.name.clone(), p.target.clone(), pool_state(p)];
        match &p.status {
            Ok(PoolStatus::Working(u)) => row.extend([
                u.transaction_id.to_string(),
                style.size(bb.map(|b| u.data_used.saturating_mul(b))),
                style.size(bb.map(|b| u.data_total.saturating_mul(b))),
                Pct(round_percent(u.data_used, u.data_total)).to_string(),
                style.size(Some(u.meta_used.saturating_mul(META_BLOCK_BYTES))),
                style.size(Some(u.meta_total.saturating_mul(META_BLOCK_BYTES))),
                Pct(round_percent(u.meta_used, u.meta_total)).to_string(),
                opt(u.held_root),
            ]),
            _ => row.extend(std::iter::repeat_n("-".to_string(), 8)),
        }
        row.push(nthins.to_string());
        row.push(pool_flags(p));
        t.push(row);
    }
    t.render(style)
}

/// Thin rows: (pool name, thin).
pub fn thin_table(thins: &[(Option<&Pool>, &Thin)], style: &Style) -> String {
    let mut t = Table::with_fields(THIN_COLUMNS);
    for (pool, th) in thins {
        let j = thin_json(*pool, th);
        t.push(vec![
            th.name.clone(),
            pool.map(|p| p.name.clone())
                .or_else(|| th.pool.map(|d| d.to_string()))
                .unwrap_or_else(|| "-".into()),
            opt(th.dev_id),
            style.size(Some(th.length.saturating_mul(512))),
            style.size(j.mapped_bytes),
            Pct(j.mapped_percent).to_string(),
            style.size(
                j.highest_mapped_sector
                    .map(|s| s.saturating_add(1).saturating_mul(512)),
            ),
            j.state.to_string(),
        ]);
    }
    t.render(style)
}

/// The `ls` table: each pool, then its thins.
pub fn ls_table(scan: &Scan, pools: &[&Pool], orphans: &[&Thin], style: &Style) -> String {
    let mut t = Table::with_fields(LS_COLUMNS);
    for p in pools {
        let j = pool_json(p, &[]);
        t.push(vec![
            p.name.clone(),
            opt(j.lv.as_ref()),
            "pool".into(),
            "-".into(),
            "-".into(),
            style.size(j.data.as_ref().and_then(|d| d.total_bytes)),
            style.size(j.data.as_ref().and_then(|d| d.used_bytes)),
            Pct(j.data.as_ref().and_then(|d| d.used_percent)).to_string(),
            Pct(j.metadata.as_ref().and_then(|d| d.used_percent)).to_string(),
            if j.needs_check == Some(true) {
                format!("{},needs_check", pool_state(p))
            } else {
                pool_state(p)
            },
        ]);
        for th in thins_of(scan, p) {
            t.push(thin_ls_row(Some(p), th, style));
        }
    }
    for th in orphans {
        t.push(thin_ls_row(None, th, style));
    }
    t.render(style)
}

fn thin_ls_row(pool: Option<&Pool>, th: &Thin, style: &Style) -> Vec<String> {
    let j = thin_json(pool, th);
    vec![
        th.name.clone(),
        opt(j.lv.as_ref()),
        "thin".into(),
        pool.map(|p| p.name.clone())
            .or_else(|| th.pool.map(|d| d.to_string()))
            .unwrap_or_else(|| "-".into()),
        opt(th.dev_id),
        style.size(Some(th.length.saturating_mul(512))),
        style.size(j.mapped_bytes),
        Pct(j.mapped_percent).to_string(),
        "-".into(),
        j.state.to_string(),
    ]
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

/// Monitoring levels, in increasing severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Fine.
    Ok,
    /// The state could not be determined.
    Unknown,
    /// Attention needed soon.
    Warn,
    /// Attention needed now.
    Crit,
}

impl Level {
    /// Upper-case name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Unknown => "UNKNOWN",
            Level::Warn => "WARNING",
            Level::Crit => "CRITICAL",
        }
    }
}

/// `status --check` thresholds, in percent.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Data use warning.
    pub data_warn: f64,
    /// Data use critical.
    pub data_crit: f64,
    /// Metadata use warning.
    pub meta_warn: f64,
    /// Metadata use critical.
    pub meta_crit: f64,
    /// Free data space warning, in bytes (absolute; None: none).
    pub data_free_warn: Option<u64>,
    /// Free data space critical, in bytes.
    pub data_free_crit: Option<u64>,
}

/// Evaluates one pool (and its thins) for `status --check`.
pub fn check_pool(p: &Pool, thins: &[&Thin], th: &Thresholds) -> Vec<(Level, String)> {
    let mut v = Vec::new();
    let n = &p.name;
    match &p.status {
        Err(e) => v.push((Level::Unknown, format!("{n}: status unreadable: {e}"))),
        Ok(PoolStatus::Fail) => v.push((
            Level::Crit,
            format!("{n}: pool has failed (status Fail): all I/O errors; tear it down and check its metadata"),
        )),
        Ok(PoolStatus::Error) => v.push((
            Level::Crit,
            format!("{n}: the kernel could not query the pool metadata (status Error)"),
        )),
        Ok(PoolStatus::Working(u)) => {
            if u.needs_check {
                v.push((
                    Level::Crit,
                    format!("{n}: needs_check is set: deactivate and run thin_check"),
                ));
            }
            match u.mode {
                Some(PoolModeWord::ReadOnly) => v.push((
                    Level::Crit,
                    format!("{n}: pool is read-only (metadata failure or out of metadata space)"),
                )),
                Some(PoolModeWord::OutOfDataSpace) => v.push((
                    Level::Crit,
                    format!(
                        "{n}: pool is out of data space ({} on new writes)",
                        if u.error_if_no_space == Some(true) {
                            "erroring"
                        } else {
                            "queueing"
                        }
                    ),
                )),
                _ => {}
            }
            let mut pct = |what: &str, used: u64, total: u64, warn: f64, crit: f64| {
                if let Some(p) = round_percent(used, total) {
                    if p >= crit {
                        v.push((Level::Crit, format!("{n}: {what} {p:.2}% used (>= {crit}%)")));
                    } else if p >= warn {
                        v.push((Level::Warn, format!("{n}: {what} {p:.2}% used (>= {warn}%)")));
                    }
                }
            };
            pct("data", u.data_used, u.data_total, th.data_warn, th.data_crit);
            pct("metadata", u.meta_used, u.meta_total, th.meta_warn, th.meta_crit);
            let data_free = u.data_total.saturating_sub(u.data_used);
            if let Some(free) = data_free_bytes(p) {
                let under = |limit: Option<u64>| limit.is_some_and(|l| free < l);
                let level = if under(th.data_free_crit) {
                    Some((Level::Crit, th.data_free_crit))
                } else if under(th.data_free_warn) {
                    Some((Level::Warn, th.data_free_warn))
                } else {
                    None
                };
                if let Some((level, Some(limit))) = level {
                    v.push((
                        level,
                        format!("{n}: data free {free} bytes, below {limit} bytes"),
                    ));
                }
            }
            if let Ok(t) = &p.table {
                if t.low_water_blocks > 0 && data_free <= t.low_water_blocks {
                    v.push((
                        Level::Warn,
                        format!(
                            "{n}: data free {data_free} blocks is at or below the low-water mark {}",
                            t.low_water_blocks
                        ),
                    ));
                }
            }
            let meta_free = u.meta_total.saturating_sub(u.meta_used);
            if let Some(lw) = u.meta_low_water {
                if meta_free <= lw {
                    v.push((
                        Level::Warn,
                        format!("{n}: metadata free {meta_free} blocks is at or below the low-water mark {lw}"),
                    ));
                }
            }
        }
    }
    for t in thins {
        match &t.status {
            Ok(ThinStatus::Fail) => v.push((Level::Crit, format!("{}: thin failed", t.name))),
            Ok(ThinStatus::Error) => {
                v.push((Level::Crit, format!("{}: thin status Error", t.name)))
            }
            Err(e) => v.push((
                Level::Unknown,
                format!("{}: status unreadable: {e}", t.name),
            )),
            _ => {}
        }
    }
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

/// Nagios perfdata for `status --check`: each pool's data and metadata use
/// and free data bytes under `LABEL_` (the pool's name unless `label`
/// replaces it: the same labels whether one pool or many are checked),
/// and with `thins` each thin's mapped bytes under `LABEL_THIN_mapped`.
pub fn perfdata(
    pools: &[(&Pool, Vec<&Thin>)],
    label: Option<&str>,
    thins: bool,
    th: &Thresholds,
) -> String {
    let quote = |l: String| {
        if l.contains([' ', '=', '\'']) {
            format!("'{}'", l.replace('\'', "''"))
        } else {
            l
        }
    };
    let mut v = Vec::new();
    for (p, ts) in pools {
        let Ok(PoolStatus::Working(u)) = &p.status else {
            continue;
        };
        let pre = label.unwrap_or(&p.name);
        for (what, used, total, w, c) in [
            (
                "data",
                u.data_used,
                u.data_total,
                th.data_warn,
                th.data_crit,
            ),
            (
                "metadata",
                u.meta_used,
                u.meta_total,
                th.meta_warn,
                th.meta_crit,
            ),
        ] {
            if let Some(x) = round_percent(used, total) {
                v.push(format!(
                    "{}={x:.2}%;{w};{c};0;100",
                    quote(format!("{pre}_{what}"))
                ));
            }
        }
        if let (Some(free), Some(b)) = (data_free_bytes(p), block_bytes(p)) {
            let lim = |l: Option<u64>| l.map_or(String::new(), |l| format!("{l}:"));
            v.push(format!(
                "{}={free}B;{};{};0;{}",
                quote(format!("{pre}_data_free")),
                lim(th.data_free_warn),
                lim(th.data_free_crit),
                u.data_total.saturating_mul(b)
            ));
        }
        if thins {
            for t in ts {
                if let Ok(ThinStatus::Working { mapped_sectors, .. }) = &t.status {
                    v.push(format!(
                        "{}={}B;;;0;{}",
                        quote(format!("{pre}_{}_mapped", t.name)),
                        mapped_sectors.saturating_mul(512),
                        t.length.saturating_mul(512)
                    ));
                }
            }
        }
    }
    if v.is_empty() {
        String::new()
    } else {
        format!(" | {}", v.join(" "))
    }
}

/// The pools and their thins in Prometheus's text format, as
/// node_exporter's textfile collector reads it: gauges named
/// `rthin_pool_*` (labels pool, target) and `rthin_thin_*` (pool, thin).
pub fn prometheus(pools: &[(&Pool, Vec<&Thin>)]) -> String {
    fn esc(s: &str) -> String {
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }
    type PoolFig = fn(&Pool, &PoolUsage) -> Option<u64>;
    let pool_metrics: [(&str, &str, PoolFig); 9] = [
        ("data_used_bytes", "Data space in use.", |p, u| {
            block_bytes(p).map(|b| u.data_used.saturating_mul(b))
        }),
        ("data_size_bytes", "Data space.", |p, u| {
            block_bytes(p).map(|b| u.data_total.saturating_mul(b))
        }),
        ("metadata_used_bytes", "Metadata space in use.", |_, u| {
            Some(u.meta_used.saturating_mul(4096))
        }),
        ("metadata_size_bytes", "Metadata space.", |_, u| {
            Some(u.meta_total.saturating_mul(4096))
        }),
        ("transaction_id", "Userspace transaction id.", |_, u| {
            Some(u.transaction_id)
        }),
        ("needs_check", "1 if needs_check is set.", |_, u| {
            Some(u64::from(u.needs_check))
        }),
        ("read_only", "1 if the pool is read-only.", |_, u| {
            Some(u64::from(u.mode == Some(PoolModeWord::ReadOnly)))
        }),
        (
            "out_of_data_space",
            "1 if the pool is out of data space.",
            |_, u| Some(u64::from(u.mode == Some(PoolModeWord::OutOfDataSpace))),
        ),
        (
            "metadata_snapshot_held",
            "1 if a metadata snapshot is held.",
            |_, u| Some(u64::from(u.held_root.is_some())),
        ),
    ];
    let mut out = String::new();
    let pool_labels = |p: &Pool| format!("pool=\"{}\",target=\"{}\"", esc(&p.name), esc(&p.target));
    out.push_str("# HELP rthin_pool_failed 1 if the pool's status is Fail or Error.\n# TYPE rthin_pool_failed gauge\n");
    for (p, _) in pools {
        let failed = !matches!(p.status, Ok(PoolStatus::Working(_)));
        out.push_str(&format!(
            "rthin_pool_failed{{{}}} {}\n",
            pool_labels(p),
            u8::from(failed)
        ));
    }
    for (name, help, f) in pool_metrics {
        out.push_str(&format!(
            "# HELP rthin_pool_{name} {help}\n# TYPE rthin_pool_{name} gauge\n"
        ));
        for (p, _) in pools {
            if let Ok(PoolStatus::Working(u)) = &p.status {
                if let Some(x) = f(p, u) {
                    out.push_str(&format!("rthin_pool_{name}{{{}}} {x}\n", pool_labels(p)));
                }
            }
        }
    }
    let thin_labels = |p: &Pool, t: &Thin| {
        let id = t
            .dev_id
            .map_or(String::new(), |i| format!(",thin_id=\"{i}\""));
        format!("pool=\"{}\",thin=\"{}\"{id}", esc(&p.name), esc(&t.name))
    };
    out.push_str("# HELP rthin_thin_mapped_bytes Data mapped by the thin device.\n# TYPE rthin_thin_mapped_bytes gauge\n");
    for (p, ts) in pools {
        for t in ts {
            if let Ok(ThinStatus::Working { mapped_sectors, .. }) = &t.status {
                out.push_str(&format!(
                    "rthin_thin_mapped_bytes{{{}}} {}\n",
                    thin_labels(p, t),
                    mapped_sectors.saturating_mul(512)
                ));
            }
        }
    }
    out.push_str("# HELP rthin_thin_size_bytes Size of the thin device.\n# TYPE rthin_thin_size_bytes gauge\n");
    for (p, ts) in pools {
        for t in ts {
            out.push_str(&format!(
                "rthin_thin_size_bytes{{{}}} {}\n",
                thin_labels(p, t),
                t.length.saturating_mul(512)
            ));
        }
    }
    out
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
    use crate::dm::DevInfo;
    use crate::status::{parse_pool_status, parse_pool_table, parse_thin_status, DevT};

    fn pool(status: &str) -> Pool {
        Pool {
            name: "pool0".into(),
            info: DevInfo {
                dev: DevT {
                    major: 253,
                    minor: 3,
                },
                open_count: 1,
                event_nr: 4,
                suspended: false,
                active: true,
                owner: Default::default(),
            },
            target: "thin-pool".into(),
            length: 2_097_152,
            table: parse_pool_table("253:1 253:2 128 100 1 skip_block_zeroing ")
                .map_err(|e| e.to_string()),
            status: parse_pool_status(status).map_err(|e| e.to_string()),
        }
    }

    fn thin(status: &str) -> Thin {
        Thin {
            name: "thin1".into(),
            info: DevInfo {
                dev: DevT {
                    major: 253,
                    minor: 4,
                },
                open_count: 0,
                event_nr: 0,
                suspended: false,
                active: true,
                owner: Default::default(),
            },
            target: "thin".into(),
            length: 2048,
            pool: Some(DevT {
                major: 253,
                minor: 3,
            }),
            dev_id: Some(1),
            origin: None,
            status: parse_thin_status(status).map_err(|e| e.to_string()),
        }
    }

    const TH: Thresholds = Thresholds {
        data_warn: 80.0,
        data_crit: 95.0,
        meta_warn: 80.0,
        meta_crit: 95.0,
        data_free_warn: None,
        data_free_crit: None,
    };

    /// Perfdata labels are the same with one pool as with many (graphs
    /// keep their series when a second pool appears), `--label` replaces
    /// the pool's name, free data comes in bytes with absolute thresholds,
    /// and each thin's mapped bytes on request.
    #[test]
    fn perfdata_labels_are_stable() {
        let p = pool("0 61/512 10/16384 - rw discard_passdown queue_if_no_space - 128 ");
        let t = thin("1024 2047");
        let free = (16384 - 10) * 65536u64;
        let one = perfdata(&[(&p, vec![&t])], None, false, &TH);
        assert_eq!(
            one,
            format!(" | pool0_data=0.06%;80;95;0;100 pool0_metadata=11.91%;80;95;0;100 pool0_data_free={free}B;;;0;{}", 16384 * 65536u64)
        );
        let mut q = pool("0 61/512 10/16384 - rw discard_passdown queue_if_no_space - 128 ");
        q.name = "pool1".into();
        let two = perfdata(&[(&p, vec![]), (&q, vec![])], None, false, &TH);
        assert!(
            two.starts_with(&one[..one.find(" pool0_data_free").unwrap()]),
            "{two}"
        );
        let th = Thresholds {
            data_free_warn: Some(10 << 30),
            data_free_crit: Some(1 << 29),
            ..TH
        };
        let labelled = perfdata(&[(&p, vec![&t])], Some("db"), true, &th);
        assert!(labelled.contains(" db_data=0.06%;"), "{labelled}");
        assert!(
            labelled.contains(&format!(" db_data_free={free}B;10737418240:;536870912:;0;")),
            "{labelled}"
        );
        assert!(
            labelled.ends_with(" db_thin1_mapped=524288B;;;0;1048576"),
            "{labelled}"
        );
        // The absolute thresholds judge too: about 1 GiB is free.
        assert!(
            check_pool(&p, &[], &th)
                .iter()
                .any(|x| x.0 == Level::Warn && x.1.contains("below 10737418240 bytes")),
            "{:?}",
            check_pool(&p, &[], &th)
        );
        let crit = Thresholds {
            data_free_crit: Some(2 << 30),
            ..th
        };
        assert_eq!(check_pool(&p, &[], &crit)[0].0, Level::Crit);
    }

    #[test]
    fn prometheus_text_format() {
        let p = pool("7 61/512 10/16384 - rw discard_passdown queue_if_no_space - 128 ");
        let mut t = thin("1024 2047");
        t.name = "th\"in".into();
        let out = prometheus(&[(&p, vec![&t])]);
        for want in [
            "# TYPE rthin_pool_data_used_bytes gauge\n",
            "rthin_pool_data_used_bytes{pool=\"pool0\",target=\"thin-pool\"} 655360\n",
            "rthin_pool_data_size_bytes{pool=\"pool0\",target=\"thin-pool\"} 1073741824\n",
            "rthin_pool_metadata_used_bytes{pool=\"pool0\",target=\"thin-pool\"} 249856\n",
            "rthin_pool_transaction_id{pool=\"pool0\",target=\"thin-pool\"} 7\n",
            "rthin_pool_failed{pool=\"pool0\",target=\"thin-pool\"} 0\n",
            "rthin_pool_needs_check{pool=\"pool0\",target=\"thin-pool\"} 0\n",
            "rthin_thin_mapped_bytes{pool=\"pool0\",thin=\"th\\\"in\",thin_id=\"1\"} 524288\n",
            "rthin_thin_size_bytes{pool=\"pool0\",thin=\"th\\\"in\",thin_id=\"1\"} 1048576\n",
        ] {
            assert!(out.contains(want), "{want} not in\n{out}");
        }
        // Each metric: HELP, TYPE, then its samples, once.
        assert_eq!(out.matches("# TYPE rthin_pool_data_used_bytes").count(), 1);
        assert!(
            out.lines()
                .all(|l| l.starts_with("# ") || l.starts_with("rthin_")),
            "{out}"
        );
    }

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

    #[test]
    fn tables_align_and_raw() {
        let p = pool("5 61/512 10/16384 - rw discard_passdown queue_if_no_space needs_check 128 ");
        let s = pool_table(
            &[(&p, 1)],
            &Style {
                units: Units::default(),
                suffix: true,
                headings: true,
                separator: None,
                view: View::default(),
            },
        );
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("POOL "));
        assert!(lines[1].contains("640.00k"), "{s}");
        assert!(lines[1].contains("needs_check"), "{s}");
        // Right-aligned columns end at the same offset.
        let end0 = lines[0].find("DATA%").unwrap() + 5;
        assert_eq!(&lines[1][end0 - 4..end0], "0.06", "{s}");

        let s = pool_table(&[(&p, 1)], &Style::raw());
        assert_eq!(
            s,
            "pool0:thin-pool:rw:5:655360:1073741824:0.06:249856:2097152:11.91:-:1:needs_check,discard=passdown,when_full=queue\n"
        );
        let t = thin("Fail");
        let s = thin_table(&[(Some(&p), &t)], &Style::raw());
        assert_eq!(s, "thin1:pool0:1:1048576:-:-:-:fail\n");
    }

    #[test]
    fn table_stream_stays_aligned() {
        let mut style = Style {
            units: Units::default(),
            suffix: true,
            headings: true,
            separator: None,
            view: View::default(),
        };
        let table = |name: &str, n: &str| {
            let mut t = Table::new(&[("POOL", false), ("USED", true), ("MODE", false)]);
            t.push(vec![name.into(), n.into(), "rw".into()]);
            t
        };
        let mut widths = Vec::new();
        let first = table("p", "1").render_aligned(&style, &mut widths);
        style.headings = false;
        let second = table("pool0", "12345").render_aligned(&style, &mut widths);
        let third = table("p", "1").render_aligned(&style, &mut widths);
        assert_eq!(first, "POOL  USED  MODE\np        1  rw\n");
        assert_eq!(second, "pool0  12345  rw\n");
        // Never narrower than what came before.
        assert_eq!(third, "p          1  rw\n");
    }

    #[test]
    fn check_levels() {
        let ok = pool("0 61/512 10/16384 - rw discard_passdown queue_if_no_space - 128 ");
        assert!(check_pool(&ok, &[], &TH).is_empty());
        let worst = |p: &Pool| {
            check_pool(p, &[], &TH)
                .iter()
                .map(|x| x.0)
                .max()
                .unwrap_or(Level::Ok)
        };
        assert_eq!(worst(&pool("Fail")), Level::Crit);
        assert_eq!(worst(&pool("Error")), Level::Crit);
        assert_eq!(
            worst(&pool(
                "0 61/512 10/16384 - ro discard_passdown queue_if_no_space - 128 "
            )),
            Level::Crit
        );
        assert_eq!(
            worst(&pool(
                "0 61/512 10/16384 - rw discard_passdown queue_if_no_space needs_check 128 "
            )),
            Level::Crit
        );
        assert_eq!(worst(&pool("0 61/512 16384/16384 - out_of_data_space discard_passdown queue_if_no_space - 128 ")), Level::Crit);
        // 85% data: warn; 96%: crit.
        assert_eq!(
            worst(&pool(
                "0 61/512 850/1000 - rw discard_passdown queue_if_no_space - 128 "
            )),
            Level::Warn
        );
        assert_eq!(
            worst(&pool(
                "0 61/512 960/1000 - rw discard_passdown queue_if_no_space - 128 "
            )),
            Level::Crit
        );
        // Metadata 90%: warn.
        assert_eq!(
            worst(&pool(
                "0 900/1000 10/16384 - rw discard_passdown queue_if_no_space - 50 "
            )),
            Level::Warn
        );
        // Data low-water mark (table says 100 blocks): free 100 → a warning
        // of its own (the percentage is critical here as well).
        let p = pool("0 61/512 16284/16384 - rw discard_passdown queue_if_no_space - 128 ");
        assert!(check_pool(&p, &[], &TH)
            .iter()
            .any(|(l, t)| *l == Level::Warn && t.contains("low-water mark 100")));
        // Metadata low water: free 128 of 512 → warn.
        assert_eq!(
            worst(&pool(
                "0 384/512 10/16384 - rw discard_passdown queue_if_no_space - 128 "
            )),
            Level::Warn
        );
        // A broken status line is unknown.
        assert_eq!(worst(&pool("garbage")), Level::Unknown);
        // A failed thin makes the pool critical.
        let t = thin("Fail");
        assert_eq!(check_pool(&ok, &[&t], &TH)[0].0, Level::Crit);
    }
}
