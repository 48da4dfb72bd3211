#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Host packages the workspace build needs beyond a Rust toolchain.
# rthinctl uses the `devicemapper` crate, whose devicemapper-sys build script
# runs bindgen (libclang) over <libdevmapper.h> found through pkg-config.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_host_packages libclang-dev libdevmapper-dev pkg-config
