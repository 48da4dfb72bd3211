// SPDX-License-Identifier: GPL-2.0
//! Declarations generated at build time by the module-local bindgen run (see
//! `Kbuild`) from `rust/shim/rthin_bindgen.h`: device-mapper, dm-bufio, dm-io,
//! dm-kcopyd and the shim. Types the kernel crate already has (`bio`,
//! `block_device`, ...) resolve to `kernel::bindings` through the glob import
//! that bindgen prepends, so both sides agree on one definition.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    improper_ctypes,
    unsafe_op_in_unsafe_fn,
    // `unnecessary_transmutes` exists from rustc 1.88; older compilers that
    // distribution kernels are built with (Debian's 1.85) do not know it.
    unknown_lints,
    unnecessary_transmutes,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::ptr_as_ptr,
    clippy::ref_as_ptr,
    clippy::as_underscore,
    clippy::cast_lossless
)]

use kernel::ffi;

include!(concat!(env!("RTHIN_OBJ"), "/rthin_bindings_generated.rs"));
