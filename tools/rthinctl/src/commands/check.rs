// SPDX-License-Identifier: GPL-2.0
//! `status --check`: the monitoring plugin (Nagios/Icinga).

use serde::Serialize;

use crate::cli::StatusArgs;
use crate::context::{open, print_json, Ctx};
use crate::explain::{exit, Result};
use crate::model::{pool_of, scan_all, select, Pool, Thin};
use crate::report::{self, Level, Thresholds};
use crate::status::PoolStatus;

/// Nagios/Icinga performance data: ` | data=82.10%;80;95;0;100
/// metadata=...` (labels prefixed with the pool's name when there are
/// several pools).
/// `status --check`: never fails; problems reading state are UNKNOWN.
pub fn run(ctx: &Ctx, a: &StatusArgs) -> i32 {
    let th = Thresholds {
        data_warn: a.warn,
        data_crit: a.crit,
        meta_warn: a.meta_warn.unwrap_or(a.warn),
        meta_crit: a.meta_crit.unwrap_or(a.crit),
        data_free_warn: a.warn_free,
        data_free_crit: a.crit_free,
    };
    // (figures of the working pools, their perfdata)
    let mut perf: Vec<(String, Option<f64>, Option<f64>)> = Vec::new();
    let mut perfdata = String::new();
    let result = (|| -> Result<Vec<(Level, String)>> {
        let t = open()?;
        let scan = scan_all(&t)?;
        let (pools, thins) = select(&scan, &a.devs)?;
        for p in &pools {
            if let Ok(PoolStatus::Working(u)) = &p.status {
                perf.push((
                    p.name.clone(),
                    crate::units::round_percent(u.data_used, u.data_total),
                    crate::units::round_percent(u.meta_used, u.meta_total),
                ));
            }
        }
        let with_thins: Vec<(&Pool, Vec<&Thin>)> = pools
            .iter()
            .map(|p| (*p, report::thins_of(&scan, p)))
            .collect();
        perfdata = report::perfdata(&with_thins, a.label.as_deref(), a.thin_perfdata, &th);
        let mut v = Vec::new();
        if pools.is_empty() && thins.is_empty() {
            v.push((Level::Unknown, "no thin pools are active".to_string()));
        }
        for p in &pools {
            v.extend(report::check_pool(p, &report::thins_of(&scan, p), &th));
        }
        for t in &thins {
            if let Some(p) = pool_of(&scan, t) {
                v.extend(report::check_pool(p, &[t], &th));
            }
        }
        Ok(v)
    })();
    let (level, lines, npools) = match result {
        Ok(v) => {
            let level = v.iter().map(|x| x.0).max().unwrap_or(Level::Ok);
            let n = v.len();
            (level, v, n)
        }
        Err(e) => (Level::Unknown, vec![(Level::Unknown, e.text)], 1),
    };
    let code = match level {
        Level::Ok => exit::OK,
        Level::Warn => exit::CHECK_WARN,
        Level::Crit => exit::CHECK_CRIT,
        Level::Unknown => exit::CHECK_UNKNOWN,
    };
    if ctx.json {
        #[derive(Serialize)]
        struct CheckJson<'a> {
            schema: &'static str,
            level: &'static str,
            exit: i32,
            problems: Vec<ProblemJson<'a>>,
        }
        #[derive(Serialize)]
        struct ProblemJson<'a> {
            level: &'static str,
            text: &'a str,
        }
        let j = CheckJson {
            schema: "rthinctl.check/1",
            level: level.name(),
            exit: code,
            problems: lines
                .iter()
                .map(|(l, t)| ProblemJson {
                    level: l.name(),
                    text: t,
                })
                .collect(),
        };
        if print_json(&j).is_err() {
            return exit::CHECK_UNKNOWN;
        }
    } else if lines.is_empty() || npools == 0 {
        let figs: Vec<String> = perf
            .iter()
            .map(|(n, d, m)| {
                let f = |x: &Option<f64>| x.map_or("?".into(), |x| format!("{x:.2}%"));
                format!("{n} data {} metadata {}", f(d), f(m))
            })
            .collect();
        println!(
            "OK: {} thin pool{} healthy ({}){}",
            perf.len(),
            if perf.len() == 1 { "" } else { "s" },
            figs.join(", "),
            perfdata
        );
    } else {
        let mut sorted = lines.clone();
        sorted.sort_by_key(|x| std::cmp::Reverse(x.0));
        let summary: Vec<String> = sorted
            .iter()
            .map(|(l, t)| {
                if *l == level {
                    t.clone()
                } else {
                    format!("[{}] {t}", l.name())
                }
            })
            .collect();
        println!("{}: {}{}", level.name(), summary.join("; "), perfdata);
    }
    code
}
