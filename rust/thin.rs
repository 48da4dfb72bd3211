// SPDX-License-Identifier: GPL-2.0
//! The `rthin` target: one thin volume of a pool.
//!
//! Foundation stage: the constructor parses the table line as dm-thin does
//! and opens the pool device; I/O passes through to the pool device
//! unchanged. Mapping lookups and provisioning arrive with the targets issue.

use core::fmt;
use kernel::prelude::*;

use crate::{
    dm_errno::{EINVAL, EOPNOTSUPP},
    dm_status_buf::StatusBuf,
    dm_thin_table::{glue_errors, write_thin_table, ThinTable, ThinTableLine},
    glue::{
        bio::Bio,
        dm::{Args, CtrError, DmDev, MapResult, StatusKind, TargetCtx, TargetOps},
    },
    pool::to_bytes,
};

/// One thin volume.
pub(crate) struct Thin {
    pool: DmDev,
    table: ThinTableLine,
}

impl TargetOps for Thin {
    const NAME: &'static CStr = c"rthin";
    const COMPAT_NAME: &'static CStr = c"thin";
    const VERSION: [u32; 3] = [1, 23, 0];

    fn ctr(ti: &mut TargetCtx<'_>, args: &Args<'_>) -> Result<Self, CtrError> {
        let words = args.words();
        let bytes = to_bytes(words)?;
        let parsed = ThinTable::parse(&bytes);
        if let Err(e) = parsed {
            if !e.after_device_open() {
                return Err(CtrError::new(e.errno(), e.message()));
            }
        }
        let Some(pool_word) = words.first() else {
            return Err(CtrError::new(EINVAL, c"Invalid argument count"));
        };
        let pool = ti.get_device(pool_word, glue_errors::OPEN_POOL)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        if parsed.external_origin.is_some() {
            return Err(CtrError::new(
                EOPNOTSUPP,
                c"rthin does not support external origins yet",
            ));
        }
        ti.set_num_flush_bios(1);
        let table = ThinTableLine {
            pool_dev: pool.devnum(),
            dev_id: parsed.dev_id,
            external_origin: None,
        };
        Ok(Self { pool, table })
    }

    fn map(&self, bio: &mut Bio<'_>) -> MapResult {
        bio.set_dev(&self.pool);
        MapResult::Remapped
    }

    fn status(&self, kind: StatusKind, out: &mut StatusBuf<'_>) -> fmt::Result {
        match kind {
            // No metadata yet, so no mapped-block counts to report.
            StatusKind::Info => Ok(()),
            StatusKind::Table => write_thin_table(out, &self.table),
        }
    }

    fn device(&self) -> &DmDev {
        &self.pool
    }
}
