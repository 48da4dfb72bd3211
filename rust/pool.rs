// SPDX-License-Identifier: GPL-2.0
//! The `rthin-pool` target.
//!
//! Foundation stage: the constructor parses the table line exactly as dm-thin
//! does (same checks, same order, same messages) and opens the metadata and
//! data devices; I/O sent to the pool device itself goes to the data device,
//! as in dm-thin. Metadata, provisioning and messages arrive with the targets
//! issue.

use core::fmt;
use kernel::prelude::*;

use crate::{
    dm_errno::{EINVAL, ENOMEM},
    dm_pool_table::{glue_errors, write_pool_table, PoolTable, PoolTableLine},
    dm_status_buf::StatusBuf,
    glue::{
        bio::Bio,
        dm::{Args, CtrError, DmDev, MapResult, StatusKind, TargetCtx, TargetOps},
    },
};

/// One pool: its two devices and its table.
pub(crate) struct Pool {
    // Held open for the pool's lifetime; read once metadata support lands.
    _metadata: DmDev,
    data: DmDev,
    table: PoolTableLine,
}

impl TargetOps for Pool {
    const NAME: &'static CStr = c"rthin-pool";
    const COMPAT_NAME: &'static CStr = c"thin-pool";
    const VERSION: [u32; 3] = [1, 23, 0];

    fn ctr(ti: &mut TargetCtx<'_>, args: &Args<'_>) -> Result<Self, CtrError> {
        let words = args.words();
        let bytes: KVec<&[u8]> = to_bytes(words)?;
        let parsed = PoolTable::parse(&bytes);
        // dm-thin checks the block size and low water mark only after opening
        // both devices, so a bad device wins over a bad number: do the same.
        if let Err(e) = parsed {
            if !e.after_device_open() {
                return Err(CtrError::new(e.errno(), e.message()));
            }
        }
        let (Some(metadata_word), Some(data_word)) = (words.first(), words.get(1)) else {
            // Unreachable: parse() rejects fewer than four words before this.
            return Err(CtrError::new(EINVAL, c"Invalid argument count"));
        };
        let metadata = ti.get_device(metadata_word, glue_errors::OPEN_METADATA)?;
        let data = ti.get_device(data_word, glue_errors::OPEN_DATA)?;
        let parsed = parsed.map_err(|e| CtrError::new(e.errno(), e.message()))?;
        ti.set_num_flush_bios(1);
        let table = PoolTableLine {
            metadata_dev: metadata.devnum(),
            data_dev: data.devnum(),
            block_size: parsed.block_size,
            low_water_blocks: parsed.low_water_blocks,
            requested: parsed.features,
        };
        Ok(Self {
            _metadata: metadata,
            data,
            table,
        })
    }

    fn map(&self, bio: &mut Bio<'_>) -> MapResult {
        bio.set_dev(&self.data);
        MapResult::Remapped
    }

    fn status(&self, kind: StatusKind, out: &mut StatusBuf<'_>) -> fmt::Result {
        match kind {
            // No metadata yet, so no honest pool status line to give.
            StatusKind::Info => Ok(()),
            StatusKind::Table => write_pool_table(out, &self.table),
        }
    }

    fn device(&self) -> &DmDev {
        &self.data
    }
}

/// The table words as byte slices, the form the core's parsers take.
pub(crate) fn to_bytes<'a>(words: &[&'a CStr]) -> Result<KVec<&'a [u8]>, CtrError> {
    let mut bytes = KVec::with_capacity(words.len(), GFP_KERNEL)
        .map_err(|_| CtrError::new(ENOMEM, c"Cannot allocate memory"))?;
    for word in words {
        // Cannot fail: the capacity covers every word.
        let _ = bytes.push_within_capacity(word.to_bytes());
    }
    Ok(bytes)
}
