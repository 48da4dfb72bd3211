#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make demo`: builds what is missing, boots the VM and runs tests/vm/demo.sh
# there, showing its output as it goes. Exits 0 only when the demo ended with
# DEMO OK; otherwise its last lines say which step failed.
. "$(dirname "$0")/lib.sh"

SELFTEST=1 "$RTHIN_ROOT/scripts/module.sh"
"$RTHIN_ROOT/scripts/host-deps.sh"
(cd "$RTHIN_ROOT" && cargo build --release --quiet -p rthinctl)
"$RTHIN_ROOT/scripts/initramfs.sh" "$RTHIN_OUT/initramfs-demo.cpio.gz"
out=$RTHIN_OUT/demo
log "booting the test VM (QEMU, software emulation); the demo takes about a minute"
t0=$(date +%s)
# The console, from the demo's start mark to its end mark (the guest keeps
# kernel messages off it; they are in $out/dmesg.txt).
"$RTHIN_ROOT/scripts/vm.sh" --mode demo --timeout 600 "$RTHIN_OUT/initramfs-demo.cpio.gz" "$out" |
	awk '{ sub(/\r$/, "") } /^=== demo end/ { on = 0 } on { print; fflush() } /^=== demo start/ { on = 1 }' ||
	die "the VM did not finish (console: $out/console.log)"
secs=$(($(date +%s) - t0))
rc=$(cat "$out/demo-status" 2>/dev/null) || rc=
if [ "$rc" = 0 ] && [ "$(tail -1 "$out/demo.log")" = "DEMO OK" ]; then
	log "demo passed in ${secs}s (VM boot included); its output: ${out#"$RTHIN_ROOT"/}/demo.log"
	exit 0
fi
die "the demo failed (exit status ${rc:-unknown}): $(grep -a '^DEMO FAILED' "$out/demo.log" || echo "no DEMO OK line"); output and kernel log in ${out#"$RTHIN_ROOT"/}/"
