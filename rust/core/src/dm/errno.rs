// SPDX-License-Identifier: GPL-2.0
//! Linux errno values used by the dm interface code.
//!
//! The interface modules report errors as these positive values; the glue
//! returns their negation to DM core (`-EINVAL`, ...) or maps them to a
//! `blk_status_t`.

/// Operation not permitted.
pub const EPERM: i32 = 1;
/// I/O error.
pub const EIO: i32 = 5;
/// Out of memory.
pub const ENOMEM: i32 = 12;
/// Device or resource busy.
pub const EBUSY: i32 = 16;
/// File exists.
pub const EEXIST: i32 = 17;
/// Invalid argument.
pub const EINVAL: i32 = 22;
/// No space left on device.
pub const ENOSPC: i32 = 28;
/// No data available.
pub const ENODATA: i32 = 61;
/// Operation not supported.
pub const EOPNOTSUPP: i32 = 95;
