// SPDX-License-Identifier: GPL-2.0
//! rthin's pure logic, compiled twice: by cargo on the host (this file is the
//! crate root) and by Kbuild inside the kernel module, which mounts each module
//! below with `#[path]` at its own crate root (see `rust/rthin_main.rs`).
//!
//! Rules (enforced by review and by the kernel build): no allocation, no
//! `unsafe`, no floats or 128-bit arithmetic, no panics on any input, no 4 KiB
//! buffers on the stack. Modules refer to each other through `crate::` paths so
//! they resolve the same way in both crates.
//!
//! The module list here must match the one in `rust/rthin_main.rs`;
//! `scripts/check-core-mounts.sh` verifies it.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "checker"))]
extern crate std;

pub mod args;
pub mod block_geometry;
pub mod block_store;
pub mod btree;
// Host-only (it needs std): not mounted in the kernel crate.
#[cfg(feature = "checker")]
pub mod checker;
pub mod checksum;
pub mod codec;
pub mod core_error;
pub mod dm_errno;
pub mod dm_events;
pub mod dm_message;
pub mod dm_pool_mode;
pub mod dm_pool_table;
pub mod dm_status;
pub mod dm_status_buf;
pub mod dm_thin_table;
pub mod mapping_cache;
pub mod space_map;
pub mod superblock;
pub mod thin_metadata;
pub mod tm;
