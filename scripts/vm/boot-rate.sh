#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# How often the test kernel dies while booting, before /init runs: boots the
# VM N times (each runs the VM test 00-module only) and counts the boots
# scripts/vm.sh had to repeat (it keeps console-first-boot.log then) and the
# runs that failed anyway.
#
# Usage: scripts/vm/boot-rate.sh [N]   (default 200; needs `make module` first)
. "$(dirname "$0")/../lib.sh"

n=${1:-200}
out=$RTHIN_OUT/boot-rate
initramfs=$out/initramfs.cpio.gz
mkdir -p "$out"
"$RTHIN_ROOT/scripts/initramfs.sh" "$initramfs" >/dev/null
died=0 failed=0
for i in $(seq 1 "$n"); do
	r=$out/run
	if ! "$RTHIN_ROOT/scripts/vm.sh" --only 00-module "$initramfs" "$r" >"$out/last.log" 2>&1; then
		failed=$((failed + 1))
		cp -r "$r" "$out/failed-$i"
	fi
	if [ -f "$r/console-first-boot.log" ]; then
		died=$((died + 1))
		cp "$r/console-first-boot.log" "$out/died-$i.log"
	fi
	echo "boot-rate: $i boots, $died died before /init (booted again), $failed runs failed"
done
