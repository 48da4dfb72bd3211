#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The scale table of Documentation/rthinctl.md: rthinctl meta check, dump
# and ls against thin-provisioning-tools' thin_check, thin_dump and
# thin_ls on the same metadata, side by side, time and peak memory
# (/usr/bin/time), each pair with rthinctl's ratios.
#
#   tools/rthinctl/scale-table.sh METADATA...   (image files or block devices)
#
# RTHINCTL: the rthinctl binary (default target/release/rthinctl).
# PDATA: how to run thin-provisioning-tools' pdata_tools (default
#   pdata_tools; e.g. "LOADER --library-path LIBS .../pdata_tools" for a 1.x
#   build from another distribution's tree).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
R=${RTHINCTL:-$root/target/release/rthinctl}
read -r -a P <<<"${PDATA:-pdata_tools}"
[ $# -gt 0 ] || { echo "usage: $0 METADATA..." >&2; exit 2; }
[ -x "$R" ] || { echo "no rthinctl at $R (cargo build --release -p rthinctl)" >&2; exit 2; }
ver=$("${P[@]}" thin_check -V 2>/dev/null | head -1)
# measure CMD...: "SECONDS PEAK_KB" of CMD, its output thrown away.
measure() {
	/usr/bin/time -f '%e %M' -o /tmp/scale-time.$$ "$@" >/dev/null 2>/tmp/scale-err.$$ ||
		{ echo "failed: $* ($(head -2 /tmp/scale-err.$$))" >&2; }
	cat /tmp/scale-time.$$
}
printf '| metadata | command | thin-provisioning-tools %s | rthinctl | ratio (time, memory) |\n|---|---|---|---|---|\n' "$ver"
for m in "$@"; do
	kind=file
	[ -b "$m" ] && kind="block device"
	for pair in "thin_check:meta check -q" "thin_dump:meta dump" \
		"thin_ls -o DEV,MAPPED_BLOCKS,EXCLUSIVE_BLOCKS,SHARED_BLOCKS:meta ls"; do
		tool=${pair%%:*} ours=${pair#*:}
		read -r tt tm <<<"$(measure "${P[@]}" $tool "$m")"
		read -r rt rm <<<"$(measure "$R" $ours "$m")"
		printf '| %s (%s) | %s / %s | %s s, %s MB | %s s, %s MB | %s, %s |\n' "$(basename "$m")" "$kind" \
			"${tool%% *}" "rthinctl ${ours% -q}" "$tt" "$((tm / 1024))" "$rt" "$((rm / 1024))" \
			"$(awk -v a="$rt" -v b="$tt" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')" \
			"$(awk -v a="$rm" -v b="$tm" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')"
	done
done
rm -f /tmp/scale-time.$$ /tmp/scale-err.$$
