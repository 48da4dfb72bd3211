// SPDX-License-Identifier: GPL-2.0
//! Scheduling hints.

use super::bindings as dm;

/// `cond_resched()`: lets another task run here if one is due (a no-op on
/// a fully preemptible kernel). For long loops in process context that let
/// their locks go between pieces.
pub(crate) fn cond_resched() {
    // SAFETY: cond_resched may sleep; callers hold no spinlock and are in
    // process context (a dm message, see `pool::message`).
    unsafe { dm::rthin_cond_resched() }
}
