// SPDX-License-Identifier: GPL-2.0
//! `status --check`'s evaluation: levels, thresholds and perfdata.

use super::{block_bytes, data_free_bytes};
use crate::model::{Pool, Thin};
use crate::status::{PoolModeWord, PoolStatus, ThinStatus};
use crate::units::round_percent;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{pool, thin, TH};

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
