// SPDX-License-Identifier: GPL-2.0
//! The device-mapper interface, as `dm-thin.c` defines it: table lines,
//! messages, status lines, the pool's modes and events, argument parsing,
//! block geometry and the errno values dm sees.

pub mod args;
pub mod block_geometry;
pub mod errno;
pub mod events;
pub mod message;
pub mod pool_mode;
pub mod pool_table;
pub mod status;
pub mod status_buf;
pub mod thin_table;
pub mod written_ranges;
