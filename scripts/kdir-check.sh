#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# kdir-check.sh KDIR: fails, saying why, unless KDIR is a kernel build tree that
# can build dm-rthin.ko: prepared (its kernel release known), Rust enabled, and
# the kernel crate built (rust/libkernel.rmeta, rust/libmacros.so), which
# distribution header packages do not ship. Used by scripts/module.sh and by
# dkms (scripts/dkms-make.sh), so both refuse a tree for the same reasons.
set -eu
kdir=$1
if [ ! -f "$kdir/include/config/kernel.release" ]; then
	echo "dm-rthin: $kdir is not a prepared kernel build tree (no include/config/kernel.release): install the kernel's headers, or run make prepare there" >&2
	exit 1
fi
if ! grep -q '^CONFIG_RUST=y' "$kdir/.config" 2>/dev/null; then
	echo "dm-rthin: kernel $(cat "$kdir/include/config/kernel.release") is built without Rust (no CONFIG_RUST=y in $kdir/.config): rthin needs a kernel with CONFIG_RUST=y" >&2
	exit 1
fi
if [ ! -f "$kdir/rust/libkernel.rmeta" ] || [ ! -f "$kdir/rust/libmacros.so" ]; then
	echo "dm-rthin: $kdir lacks the Rust kernel crate (rust/libkernel.rmeta, rust/libmacros.so); distribution header packages do not ship it: prepare a tree with rthin's scripts/distro-kernel.sh (see the admin guide, \"Installing\")" >&2
	exit 1
fi
