// SPDX-License-Identifier: GPL-2.0
//! The columns of the `status` and `ls` tables and their rows.

use super::json::{pool_json, thin_json};
use super::table::{Style, Table};
use super::{pool_state, thins_of, META_BLOCK_BYTES};
use crate::model::{Pool, Scan, Thin};
use crate::status::PoolStatus;
use crate::units::{round_percent, Pct};
use crate::view::Col;

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{pool, thin};
    use crate::units::Units;
    use crate::view::View;

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
}
