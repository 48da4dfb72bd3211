// SPDX-License-Identifier: GPL-2.0
//! A pool and a thin from status lines, and `status --check` thresholds,
//! for the tests of the report forms.

use crate::dm::DevInfo;
use crate::model::{Pool, Thin};
use crate::report::Thresholds;
use crate::status::{parse_pool_status, parse_pool_table, parse_thin_status, DevT};

pub fn pool(status: &str) -> Pool {
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

pub fn thin(status: &str) -> Thin {
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

pub const TH: Thresholds = Thresholds {
    data_warn: 80.0,
    data_crit: 95.0,
    meta_warn: 80.0,
    meta_crit: 95.0,
    data_free_warn: None,
    data_free_crit: None,
};
