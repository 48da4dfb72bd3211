// SPDX-License-Identifier: GPL-2.0
//! Module parameters that must be writable at run time, which the `module!`
//! macro cannot declare: they live in the C shim (`rthin_shim.c`) and are
//! read here.

use super::bindings as dm;

/// `no_space_timeout` (seconds; `/sys/module/dm_rthin/parameters/`).
pub(crate) fn no_space_timeout() -> u32 {
    // SAFETY: reads an unsigned int with READ_ONCE; no other effect.
    unsafe { dm::rthin_no_space_timeout() }
}
