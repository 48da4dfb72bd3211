#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# dkms's build command for dm-rthin (dkms.conf's MAKE, run in the module's
# source copy): checks the kernel's build tree (scripts/kdir-check.sh), then
# builds the module with Kbuild, without selftests, with the compilers the tree
# was prepared with (its rthin-make-vars, if any: a kernel's Rust modules must be
# built by the rustc that built the kernel).
set -eu
kdir=$1
here=$(cd "$(dirname "$0")/.." && pwd)
sh "$here/scripts/kdir-check.sh" "$kdir"
vars=
[ -f "$kdir/rthin-make-vars" ] && vars=$(cat "$kdir/rthin-make-vars")
# shellcheck disable=SC2086 # vars is a list of make variables
exec make -C "$kdir" M="$here" $vars modules
