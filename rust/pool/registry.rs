// SPDX-License-Identifier: GPL-2.0
//! The module-global table of pool objects (dm-thin's `dm_thin_pool_table`).
//! Pool constructors add and find entries (`__pool_find`); thin constructors
//! find the pool object of their pool device through it
//! (`__pool_table_lookup`). Each pool table and each thin target holds its
//! entry ([`PoolHold`], dm-thin's `__pool_inc`/`__pool_dec`); the entry goes
//! with the last hold. So while a thin uses the pool, its metadata device
//! stays the pool's, and a new pool table for it (after the pool device ran
//! another target, as a repair does) binds to the same object rather than
//! building a second allocator over the same metadata.

use kernel::prelude::*;

use core::ops::Deref;

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
    /// Pool targets (tables) holding the entry.
    tables: usize,
    /// Thin targets holding the entry; it goes when both counts are zero.
    thins: usize,
    /// The pool object.
    pool: SharedPool,
}

global_list! {
    /// The pool objects of all pool tables, behind a global mutex (the pool
    /// table lock, 1st in the lock order: `Documentation/io-path.md`, "The rules of the I/O path"). Module init calls `pools::init` before registering the
    /// targets.
    pub(crate) pools: PoolEntry
}

/// Who holds a registry entry.
#[derive(Clone, Copy)]
enum Holder {
    /// A pool table, with its table id.
    Table(u64),
    /// A thin target.
    Thin,
}

/// A pool table's or a thin target's hold on its pool's registry entry and
/// object. Dropping it gives the hold back, so a constructor that fails
/// after taking it leaves the entry as it found it.
pub(crate) struct PoolHold {
    pool: SharedPool,
    md: MdKey,
    holder: Holder,
}

impl Deref for PoolHold {
    type Target = SharedPool;

    fn deref(&self) -> &SharedPool {
        &self.pool
    }
}

impl PoolHold {
    /// The id of the holding pool table (0 for a thin target's hold).
    pub(crate) fn table_id(&self) -> u64 {
        match self.holder {
            Holder::Table(id) => id,
            Holder::Thin => 0,
        }
    }
}

/// Finds or creates the pool object for a pool table (`__pool_find`), under
/// the registry lock, and holds it for the table.
pub(crate) fn find_or_create(
    md: TableMd,
    metadata: &DmDev,
    data: &DmDev,
    block_size: u32,
    features: PoolFeatures,
) -> Result<PoolHold, CtrError> {
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
        return Ok(PoolHold {
            pool: e.pool.clone(),
            md: key,
            holder: Holder::Table(id),
        });
    }
    let alloc = CtrError::new(ENOMEM, glue_errors::ALLOC_POOL);
    pools.reserve(1, GFP_KERNEL).map_err(|_| alloc)?;
    let pool = new_pool(md, metadata, block_size, features.read_only)?;
    let entry = PoolEntry {
        md: key,
        metadata_dev: meta_dev,
        data_dev,
        tables: 1,
        thins: 0,
        pool: pool.clone(),
    };
    pools.push_within_capacity(entry).map_err(|_| alloc)?;
    Ok(PoolHold {
        pool,
        md: key,
        holder: Holder::Table(1),
    })
}

/// Finds the pool object of the pool whose mapped device is `md` and holds
/// it for a thin target (`__pool_table_lookup`, `__pool_inc`).
pub(crate) fn hold_for_thin(md: MdKey) -> Option<PoolHold> {
    let mut pools = pools::lock().ok()?;
    let e = pools.iter_mut().find(|e| e.md == md)?;
    e.thins += 1;
    Some(PoolHold {
        pool: e.pool.clone(),
        md,
        holder: Holder::Thin,
    })
}

impl Drop for PoolHold {
    /// `__pool_dec`: the entry goes with the last hold; the object itself
    /// with the last reference (a thin's I/O state may still hold one).
    fn drop(&mut self) {
        if let Holder::Table(id) = self.holder {
            let mut st = self.pool.lock();
            if st.bound_table == id {
                st.event_table = None;
            }
        }
        let Ok(mut pools) = pools::lock() else {
            return;
        };
        let mut last_table = false;
        if let Some(i) = pools.iter().position(|e| e.md == self.md) {
            let gone = match pools.get_mut(i) {
                Some(e) => {
                    match self.holder {
                        Holder::Table(_) => {
                            e.tables = e.tables.saturating_sub(1);
                            last_table = e.tables == 0;
                        }
                        Holder::Thin => e.thins = e.thins.saturating_sub(1),
                    }
                    e.tables == 0 && e.thins == 0
                }
                None => false,
            };
            if gone {
                let _ = pools.remove(i);
            }
        }
        if last_table {
            // The data device closes with this table: the last commit that
            // can flush it is this one (a thin may keep the object alive).
            // Under the registry lock, so that a new table cannot set its
            // own device in between and lose it here.
            let mut st = self.pool.lock_settled();
            let _ = st.commit();
            st.data_bdev = None;
        }
        drop(pools);
    }
}
