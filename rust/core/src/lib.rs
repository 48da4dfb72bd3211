// SPDX-License-Identifier: GPL-2.0
//! rthin's pure logic, compiled twice: by cargo on the host (this file is the
//! crate root) and by Kbuild inside the kernel module, which mounts this file
//! as one module (`rust/rthin_main.rs`) and re-exports its four top-level
//! names at its own root, so `crate::` paths resolve the same way in both.
//!
//! Rules (enforced by review and by the kernel build): no allocation, no
//! `unsafe`, no floats or 128-bit arithmetic, no panics on any input, no 4 KiB
//! buffers on the stack.
//!
//! | module | what |
//! |---|---|
//! | [`pdata`] | persistent data: block store, checksums, B-trees, space maps, transactions (dm's `persistent-data`) |
//! | [`metadata`] | thin metadata: superblock, device details, mappings (`dm-thin-metadata.c`), the mapping cache, the checker |
//! | [`dm`] | the dm interface: table lines, messages, status lines, pool modes, events (`dm-thin.c`'s rules) |
//! | [`core_error`] | the error type all of them share |
#![cfg_attr(not(rthin_kernel), no_std)]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "checker"))]
extern crate std;

pub mod core_error;
pub mod dm;
pub mod metadata;
pub mod pdata;
