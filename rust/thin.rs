// SPDX-License-Identifier: GPL-2.0
//! The `rthin` target: one thin volume of a pool.
//!
//! The constructor parses the table line as dm-thin does, opens the pool
//! device, finds the pool object through the registry (by the pool's mapped
//! device, like dm-thin's `thin_ctr`) and checks that the thin device exists
//! in the metadata. The INFO status shows the device's real mapped-block
//! count and highest mapped block from the metadata.
//!
//! **I/O is still pass-through**: a bio goes to the pool device at the same
//! sector, so it lands on the data device unmapped and unprovisioned; no
//! mapping is looked up or inserted. Thin volumes therefore alias each other
//! on the data device until the provisioning slice lands.

use core::fmt;
use kernel::prelude::*;

use crate::{
    dm_errno::{EINVAL, ENODATA, ENOMEM, EOPNOTSUPP},
    dm_pool_mode::PoolMode,
    dm_status::{write_thin_status, ThinStatus},
    dm_status_buf::StatusBuf,
    dm_thin_table::{glue_errors, ThinTable, ThinTableLine},
    glue::{
        bio::Bio,
        dm::{Args, CtrError, DmDev, MapResult, StatusKind, TargetCtx, TargetOps},
    },
    pool::{lookup, to_bytes, SharedPool},
};

/// One thin volume.
pub(crate) struct Thin {
    pool_dev: DmDev,
    pool: SharedPool,
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
        let pool_dev = ti.get_device(pool_word, glue_errors::OPEN_POOL)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        if parsed.external_origin.is_some() {
            return Err(CtrError::new(
                EOPNOTSUPP,
                c"rthin does not support external origins yet",
            ));
        }
        let md = pool_dev
            .get_md()
            .ok_or(CtrError::new(EINVAL, glue_errors::POOL_MD))?;
        let pool = lookup(md.key()).ok_or(CtrError::new(EINVAL, glue_errors::POOL_OBJECT))?;
        drop(md);
        {
            let mut st = pool.lock();
            if st.mode() == PoolMode::Fail {
                return Err(CtrError::new(EINVAL, glue_errors::POOL_FAIL));
            }
            match st.metadata().device_details(parsed.dev_id.into()) {
                Ok(Some(_)) => {}
                Ok(None) => return Err(CtrError::new(ENODATA, glue_errors::OPEN_THIN)),
                Err(e) => return Err(CtrError::new(e.errno(), glue_errors::OPEN_THIN)),
            }
            if st.suspended() {
                return Err(CtrError::new(EINVAL, glue_errors::POOL_SUSPENDED));
            }
            st.open_thin(parsed.dev_id)
                .map_err(|_| CtrError::new(ENOMEM, glue_errors::OUT_OF_MEMORY))?;
        }
        ti.set_num_flush_bios(1);
        let table = ThinTableLine {
            pool_dev: pool_dev.devnum(),
            dev_id: parsed.dev_id,
            external_origin: None,
        };
        Ok(Self {
            pool_dev,
            pool,
            table,
        })
    }

    fn map(&self, bio: &mut Bio<'_>) -> MapResult {
        bio.set_dev(&self.pool_dev);
        MapResult::Remapped
    }

    fn status(&self, kind: StatusKind, _noflush: bool, out: &mut StatusBuf<'_>) -> fmt::Result {
        let st = self.pool.lock();
        let status = if st.mode() == PoolMode::Fail {
            ThinStatus::PoolFailed
        } else {
            match kind {
                StatusKind::Table => ThinStatus::Table(self.table),
                StatusKind::Info => {
                    let md = st.metadata();
                    let dev = u64::from(self.table.dev_id);
                    match (md.device_details(dev), md.highest_mapped(dev)) {
                        (Ok(Some(d)), Ok(highest_mapped)) => ThinStatus::Info {
                            mapped_blocks: d.mapped_blocks,
                            highest_mapped,
                            block_size: md.data_block_size(),
                        },
                        _ => ThinStatus::Error,
                    }
                }
            }
        };
        write_thin_status(out, &status)
    }

    fn device(&self) -> &DmDev {
        &self.pool_dev
    }
}

impl Drop for Thin {
    fn drop(&mut self) {
        self.pool.lock().close_thin(self.table.dev_id);
    }
}
