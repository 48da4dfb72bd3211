#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: builds what is missing, boots the VM and shows rthin at work.
. "$(dirname "$0")/lib.sh"

"$RTHIN_ROOT/scripts/module.sh"
"$RTHIN_ROOT/scripts/host-deps.sh"
(cd "$RTHIN_ROOT" && cargo build --release --quiet -p rthinctl)
"$RTHIN_ROOT/scripts/initramfs.sh" "$RTHIN_OUT/initramfs-demo.cpio.gz"
log "booting the test VM (QEMU, software emulation: about a minute)"
"$RTHIN_ROOT/scripts/vm.sh" --mode demo --timeout 600 "$RTHIN_OUT/initramfs-demo.cpio.gz" "$RTHIN_OUT/demo" >/dev/null ||
	die "the VM did not finish (console: $RTHIN_OUT/demo/console.log)"
cat "$RTHIN_OUT/demo/demo.log"
grep -q '^DEMO OK' "$RTHIN_OUT/demo/demo.log"
