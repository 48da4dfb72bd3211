// SPDX-License-Identifier: GPL-2.0
//! dm-rthin: thin provisioning and shared snapshots for device-mapper, with
//! dm-thin's table lines, messages, status lines and on-disk metadata.
//!
//! Crate layout, top down (arrows point down only; see `README.md`):
//!
//! | module | what |
//! |---|---|
//! | `targets` | the two dm targets' callbacks: `rthin-pool` and `rthin` |
//! | `io` | the thin I/O path: map call, workers, provisioning |
//! | `pool` | the pool object: state, commits, registry, cells, cache |
//! | `glue` | every `unsafe` line: safe wrappers of the kernel's C APIs |
//! | `rthin_core` | the pure core (`rust/core/src`, also built and tested by cargo on the host) |
//!
//! The core is mounted as one module from its `lib.rs` (which forbids
//! `unsafe`); its top-level modules are re-exported here so that its
//! `crate::` paths resolve as in its own crate.

use kernel::prelude::*;

#[path = "core/src/lib.rs"]
pub mod rthin_core;
use rthin_core::{core_error, dm, metadata, pdata};

mod glue;
mod io;
// Built only with SELFTEST=1 (the test VM): an installed module carries no test code.
#[cfg(feature = "selftest")]
mod kunit;
mod pool;
mod targets;

use glue::target_type::TargetType;

module! {
    type: Rthin,
    name: "dm_rthin",
    authors: ["rthin developers"],
    description: "device-mapper thin provisioning (dm-thin compatible) in Rust",
    license: "GPL",
    params: {
        dm_thin_names: bool {
            default: false,
            description: "Register as thin-pool/thin instead of rthin-pool/rthin (for LVM2; needs dm-thin-pool unloaded)",
        },
        mapping_cache_mb: u32 {
            default: 64,
            description: "Most memory one pool's mapping cache takes, in MiB (32 bytes per data block up to this; read at pool creation and growth)",
        },

    },
}

struct Rthin {
    _pool: TargetType<targets::pool::Pool>,
    _thin: TargetType<targets::thin::Thin>,
}

impl kernel::Module for Rthin {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let compat = module_parameters::dm_thin_names.value();
        pool::registry::pools::init();
        let pool = TargetType::register(module, compat)?;
        let thin = TargetType::register(module, compat)?;
        pr_info!(
            "registered targets {}\n",
            if compat {
                "thin-pool and thin"
            } else {
                "rthin-pool and rthin"
            }
        );
        Ok(Self {
            _pool: pool,
            _thin: thin,
        })
    }
}
