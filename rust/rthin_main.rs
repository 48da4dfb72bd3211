// SPDX-License-Identifier: GPL-2.0
//! dm-rthin: thin provisioning and shared snapshots for device-mapper, with
//! dm-thin's table lines, messages, status lines and on-disk metadata.
//!
//! Crate layout: the pure core (`rust/core/src`, also built and tested by
//! cargo on the host) is mounted below module by module with `#[path]`, at
//! the same paths as in its own crate, so `crate::` references agree in both
//! builds. `glue` holds every `unsafe` line; `pool` and `thin` are the targets.

use kernel::prelude::*;

// ---- the pure core, shared with `rust/core/src/lib.rs` (keep the lists equal) ----
#[path = "core/src/args.rs"]
pub mod args;
#[path = "core/src/block_geometry.rs"]
pub mod block_geometry;
#[path = "core/src/block_store.rs"]
pub mod block_store;
#[path = "core/src/btree/mod.rs"]
pub mod btree;
#[path = "core/src/checksum.rs"]
pub mod checksum;
#[path = "core/src/codec.rs"]
pub mod codec;
#[path = "core/src/core_error.rs"]
pub mod core_error;
#[path = "core/src/dm_errno.rs"]
pub mod dm_errno;
#[path = "core/src/dm_events.rs"]
pub mod dm_events;
#[path = "core/src/dm_message.rs"]
pub mod dm_message;
#[path = "core/src/dm_pool_mode.rs"]
pub mod dm_pool_mode;
#[path = "core/src/dm_pool_table.rs"]
pub mod dm_pool_table;
#[path = "core/src/dm_status.rs"]
pub mod dm_status;
#[path = "core/src/dm_status_buf.rs"]
pub mod dm_status_buf;
#[path = "core/src/dm_thin_table.rs"]
pub mod dm_thin_table;
#[path = "core/src/mapping_cache.rs"]
pub mod mapping_cache;
#[path = "core/src/space_map/mod.rs"]
pub mod space_map;
#[path = "core/src/superblock.rs"]
pub mod superblock;
#[path = "core/src/thin_metadata.rs"]
pub mod thin_metadata;
#[path = "core/src/tm.rs"]
pub mod tm;
// ---- end of core ----

mod glue;
mod io;
mod kunit;
mod pool;
mod target;

use glue::dm::TargetType;

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
    _pool: TargetType<target::pool::Pool>,
    _thin: TargetType<target::thin::Thin>,
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
