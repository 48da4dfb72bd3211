// SPDX-License-Identifier: GPL-2.0
//! The module-global table of pool objects (dm-thin's `dm_thin_pool_table`),
//! behind a global mutex. Pool constructors add and find entries; thin
//! constructors find the pool object of their pool device through it.

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{prelude::*, sync::lock::GlobalGuard};

use crate::pool::PoolEntry;

kernel::sync::global_lock! {
    // SAFETY: `init` initialises it once, from module init, before the targets
    // are registered; `lock` refuses to touch it before that.
    /// The pool objects of all pool tables.
    pub(crate) unsafe(uninit) static POOLS: Mutex<KVec<PoolEntry>> = KVec::new();
}

/// Set once `POOLS` is initialised.
static READY: AtomicBool = AtomicBool::new(false);

/// Initialises the registry; later calls do nothing. Module init calls it
/// before registering the targets.
pub(crate) fn init() {
    if READY
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: the compare-exchange lets exactly one caller get here, so
        // `init` runs once; `lock` does not touch the lock until
        // `INITIALISED` is set, after `init` returned.
        unsafe { POOLS.init() };
        INITIALISED.store(true, Ordering::Release);
    }
}

/// Set once `POOLS.init()` has completed.
static INITIALISED: AtomicBool = AtomicBool::new(false);

/// Locks the registry (the pool table lock). Fails with ENXIO before `init`.
pub(crate) fn lock() -> Result<GlobalGuard<POOLS>> {
    if !INITIALISED.load(Ordering::Acquire) {
        return Err(ENXIO);
    }
    Ok(POOLS.lock())
}
