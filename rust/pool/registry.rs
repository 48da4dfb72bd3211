// SPDX-License-Identifier: GPL-2.0
//! The module-global table of pool objects (dm-thin's `dm_thin_pool_table`).
//! Pool constructors add and find entries (`__pool_find`); thin constructors
//! find the pool object of their pool device through it
//! (`__pool_table_lookup`); the entry goes with the pool's last table.

use kernel::prelude::*;

use super::{open::new_pool, SharedPool};
use crate::{
    dm::errno::{EBUSY, EINVAL, ENOMEM},
    dm::pool_table::{glue_errors, PoolFeatures},
    glue::{
        device::{DmDev, MdKey},
        dm::{CtrError, TableMd},
        global_list::global_list,
    },
};

/// One registry entry (`dm_thin_pool_table`).
pub(crate) struct PoolEntry {
    /// The pool's mapped device.
    md: MdKey,
    /// The metadata device's `dev_t`.
    metadata_dev: u32,
    /// The data device's `dev_t`.
    data_dev: u32,
    /// Pool targets (tables) using the object; the entry goes at zero.
    tables: usize,
    /// The pool object.
    pool: SharedPool,
}

global_list! {
    /// The pool objects of all pool tables, behind a global mutex (the pool
    /// table lock, 1st in the lock order: `Documentation/io-path.md`, "The rules of the I/O path"). Module init calls `pools::init` before registering the
    /// targets.
    pub(crate) pools: PoolEntry
}

/// Finds or creates the pool object for a pool table (`__pool_find`), under
/// the registry lock, and counts the table.
pub(crate) fn find_or_create(
    md: TableMd,
    metadata: &DmDev,
    data: &DmDev,
    block_size: u32,
    features: PoolFeatures,
) -> Result<(SharedPool, u64), CtrError> {
    let key = md.key();
    let mut pools = pools::lock().map_err(|_| CtrError::new(ENOMEM, glue_errors::ALLOC_POOL))?;
    let (meta_dev, data_dev) = (metadata.dev_t(), data.dev_t());
    let found = if let Some(e) = pools.iter_mut().find(|e| e.metadata_dev == meta_dev) {
        if e.md != key {
            return Err(CtrError::new(EBUSY, glue_errors::METADATA_IN_USE));
        }
        if e.data_dev != data_dev {
            return Err(CtrError::new(EBUSY, glue_errors::DATA_IN_USE));
        }
        Some(e)
    } else if let Some(e) = pools.iter_mut().find(|e| e.md == key) {
        if e.metadata_dev != meta_dev || e.data_dev != data_dev {
            return Err(CtrError::new(EINVAL, glue_errors::DIFFERENT_POOL));
        }
        Some(e)
    } else {
        None
    };
    if let Some(e) = found {
        let mut st = e.pool.lock();
        if st.features.discard_enabled != features.discard_enabled {
            return Err(CtrError::new(EINVAL, glue_errors::DISCARD_CHANGED));
        }
        st.last_table_id += 1;
        let id = st.last_table_id;
        drop(st);
        e.tables += 1;
        return Ok((e.pool.clone(), id));
    }
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    pools.reserve(1, GFP_KERNEL).map_err(|_| alloc)?;
    let pool = new_pool(md, metadata, block_size, features)?;
    let entry = PoolEntry {
        md: key,
        metadata_dev: meta_dev,
        data_dev,
        tables: 1,
        pool: pool.clone(),
    };
    pools.push_within_capacity(entry).map_err(|_| alloc)?;
    Ok((pool, 1))
}

/// Finds the pool object of the pool whose mapped device is `md`, for a thin
/// target (`__pool_table_lookup`).
pub(crate) fn lookup(md: MdKey) -> Option<SharedPool> {
    let pools = pools::lock().ok()?;
    pools.iter().find(|e| e.md == md).map(|e| e.pool.clone())
}

/// A pool table goes (`__pool_dec`): the entry goes with the last table;
/// the object itself with the last reference (a thin may still hold one).
pub(crate) fn release(pool: &SharedPool, md: MdKey, table_id: u64) {
    {
        let mut st = pool.lock();
        if st.bound_table == table_id {
            st.event_table = None;
        }
    }
    let Ok(mut pools) = pools::lock() else {
        return;
    };
    let mut last = false;
    if let Some(i) = pools.iter().position(|e| e.md == md) {
        last = match pools.get_mut(i) {
            Some(e) => {
                e.tables = e.tables.saturating_sub(1);
                e.tables == 0
            }
            None => false,
        };
        if last {
            let _ = pools.remove(i);
        }
    }
    drop(pools);
    if last {
        // The data device closes with this table: the last commit that
        // can flush it is this one (a thin may keep the object alive).
        let mut st = pool.lock_settled();
        let _ = st.commit();
        st.data_bdev = None;
    }
}
