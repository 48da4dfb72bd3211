// SPDX-License-Identifier: GPL-2.0
//! Prometheus's text format of the pools and their thins.

use super::block_bytes;
use crate::model::{Pool, Thin};
use crate::status::{PoolModeWord, PoolStatus, PoolUsage, ThinStatus};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{pool, thin};

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
}
