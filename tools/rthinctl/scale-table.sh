#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The scale table of Documentation/rthinctl.md: rthinctl meta check, dump
# and ls against thin-provisioning-tools' thin_check, thin_dump and
# thin_ls on the same metadata, side by side, time and peak memory
# (/usr/bin/time), each pair with rthinctl's ratios.
#
#   tools/rthinctl/scale-table.sh METADATA...   (image files or block devices)
#   tools/rthinctl/scale-table.sh               (the issue's images, below)
#
# Without arguments: the two images of scale-xml.py (4.5M mappings over 9
# devices in a 1 GiB image; 16M mappings over a 100M-block data device in
# a 16 GiB one), restored by thin_restore and cached under
# ~/.cache/rthin/scale (made once, about a minute each), each measured as
# a file and on a read-only loop device (needs root).
#
# RTHINCTL: the rthinctl binary (default target/release/rthinctl).
# PDATA: how to run thin-provisioning-tools' pdata_tools (default
#   pdata_tools; e.g. "LOADER --library-path LIBS .../pdata_tools" for a 1.x
#   build from another distribution's tree).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
R=${RTHINCTL:-$root/target/release/rthinctl}
read -r -a P <<<"${PDATA:-pdata_tools}"
[ -x "$R" ] || { echo "no rthinctl at $R (cargo build --release -p rthinctl)" >&2; exit 2; }
loops=()
if [ $# = 0 ]; then
	cache=${RTHIN_CACHE:-$HOME/.cache/rthin}/scale
	mkdir -p "$cache"
	for x in 4.5m:1G 16g:16G; do
		name=${x%%:*} img=$cache/${x%%:*}.img
		if [ ! -s "$img" ]; then
			python3 "$root/tools/rthinctl/scale-xml.py" "$name" >"$cache/$name.xml" &&
				truncate -s "${x#*:}" "$img.tmp" &&
				"${P[@]}" thin_restore -i "$cache/$name.xml" -o "$img.tmp" >/dev/null &&
				mv "$img.tmp" "$img" || { echo "cannot make $img" >&2; exit 1; }
			rm -f "$cache/$name.xml"
		fi
		loop=$(losetup -r -f --show "$img") || { echo "no loop device for $img" >&2; exit 1; }
		loops+=("$loop")
		set -- "$@" "$img" "$loop"
	done
	trap 'for l in "${loops[@]}"; do losetup -d "$l"; done' EXIT
fi
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
	name=$(basename "$m")
	[ -b "$m" ] && kind="block device" && name="$name, $(basename "$(losetup -n -O BACK-FILE "$m" 2>/dev/null)")"
	for pair in "thin_check:meta check -q" "thin_dump:meta dump" \
		"thin_ls -o DEV,MAPPED_BLOCKS,EXCLUSIVE_BLOCKS,SHARED_BLOCKS:meta ls"; do
		tool=${pair%%:*} ours=${pair#*:}
		read -r tt tm <<<"$(measure "${P[@]}" $tool "$m")"
		read -r rt rm <<<"$(measure "$R" $ours "$m")"
		printf '| %s (%s) | %s / %s | %s s, %s MB | %s s, %s MB | %s, %s |\n' "$name" "$kind" \
			"${tool%% *}" "rthinctl ${ours% -q}" "$tt" "$((tm / 1024))" "$rt" "$((rm / 1024))" \
			"$(awk -v a="$rt" -v b="$tt" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')" \
			"$(awk -v a="$rm" -v b="$tm" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')"
	done
done
rm -f /tmp/scale-time.$$ /tmp/scale-err.$$
