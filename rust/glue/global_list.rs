// SPDX-License-Identifier: GPL-2.0
//! A module-global list behind a kernel mutex, for tables such as the pool
//! registry (`crate::pool::registry`, dm-thin's `dm_thin_pool_table`).
//!
//! The kernel's `global_lock!` needs `unsafe` to declare and to initialise
//! its lock; [`global_list!`] wraps both, so that the module declares its
//! list without `unsafe` and cannot touch it before it is initialised:
//! `lock` fails with ENXIO until `init` (from module init) has run, and
//! `init` runs the lock's initialisation exactly once.

/// Declares `$vis mod $name` holding a global `Mutex<KVec<$entry>>` with
/// two functions: `init()` (module init calls it before registering the
/// targets; later calls do nothing) and `lock()` (fails with ENXIO before
/// `init`). `$entry` is resolved in the module where the macro is used.
macro_rules! global_list {
    ($(#[$attr:meta])* $vis:vis $name:ident: $entry:ty) => {
        $(#[$attr])*
        $vis mod $name {
            use core::sync::atomic::{AtomicBool, Ordering};
            use kernel::{prelude::*, sync::lock::GlobalGuard};

            #[allow(unused_imports)]
            use super::*;

            kernel::sync::global_lock! {
                // SAFETY: `init` initialises it once, from module init, before
                // the targets are registered; `lock` refuses to touch it before
                // that.
                /// The list.
                pub(crate) unsafe(uninit) static LIST: Mutex<KVec<$entry>> = KVec::new();
            }

            /// Set once `init` has started.
            static READY: AtomicBool = AtomicBool::new(false);

            /// Set once `LIST.init()` has completed.
            static INITIALISED: AtomicBool = AtomicBool::new(false);

            /// Initialises the list; later calls do nothing.
            pub(crate) fn init() {
                if READY
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    // SAFETY: the compare-exchange lets exactly one caller get
                    // here, so `init` runs once; `lock` does not touch the lock
                    // until `INITIALISED` is set, after `init` returned.
                    unsafe { LIST.init() };
                    INITIALISED.store(true, Ordering::Release);
                }
            }

            /// Locks the list. Fails with ENXIO before `init`.
            pub(crate) fn lock() -> Result<GlobalGuard<LIST>> {
                if !INITIALISED.load(Ordering::Acquire) {
                    return Err(ENXIO);
                }
                Ok(LIST.lock())
            }
        }
    };
}

pub(crate) use global_list;
