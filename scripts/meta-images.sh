#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# rthinctl meta check / meta ls on metadata images written by two versions
# of thin-provisioning-tools: 0.9.0 (Debian 12's and RHEL 8's; its
# pdata_tools is taken from the Debian package and run on the host) and the
# sysroot's 1.x. The images are made anew from tests/meta-images/gen-xml.py
# by each tool's thin_restore, plus a damaged copy of each. On every image
# the verdicts of thin_check (both versions) and rthinctl meta check must
# agree, and thin_ls's mapped/exclusive/shared blocks must equal rthinctl
# meta ls's. Prints a table of verdicts and times; the last line is
# "meta-images: N passed, N failed".
. "$(dirname "$0")/lib.sh"
cd "$RTHIN_ROOT"
out=$RTHIN_OUT/meta-images
rm -rf "$out"
mkdir -p "$out"
cargo build --release --quiet -p rthinctl || die "rthinctl build failed"
R=$RTHIN_ROOT/target/release/rthinctl

# thin-provisioning-tools 0.9.0, from the Debian archive (bookworm's version).
old=$RTHIN_CACHE/thin-provisioning-tools-0.9.0
if [ ! -x "$old/usr/sbin/pdata_tools" ]; then
	tmp=$(mktemp -d)
	if (cd "$tmp" && apt-get download -q thin-provisioning-tools=0.9.0-2 >/dev/null 2>&1); then
		mkdir -p "$old"
		dpkg-deb -x "$tmp"/thin-provisioning-tools_0.9.0-2_*.deb "$old"
	fi
	rm -rf "$tmp"
fi
tools=(1x)
if [ -x "$old/usr/sbin/pdata_tools" ]; then
	tools=(09 1x)
else
	log "SKIP: thin-provisioning-tools 0.9.0 cannot be downloaded here; images of 1.x only"
fi
# t VERSION TOOL ARGS...: runs a thin_* tool of that version (paths under $out).
t() {
	local v=$1 tool=$2
	shift 2
	if [ "$v" = 09 ]; then
		"$old/usr/sbin/pdata_tools" "$tool" "$@"
	else
		in_sysroot "$tool" "${@//$RTHIN_ROOT//src}"
	fi
}
python3 tests/meta-images/gen-xml.py "$out"
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() {
	failed=$((failed + 1))
	echo "FAILED: $*"
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
printf '%-34s %-22s %-22s %-22s\n' image "thin_check 0.9.0" "thin_check 1.x" "rthinctl meta check" >"$out/table.txt"
for x in partial-bitmap whole-bitmaps; do
	for v in "${tools[@]}"; do
		img=$out/$x-$v.img
		truncate -s 16M "$img"
		t "$v" thin_restore -i "$out/$x.xml" -o "$img" >/dev/null || bad "thin_restore $v $x"
		cp "$img" "$out/$x-$v-damaged.img"
		# A mapping leaf of the largest device, well inside the image.
		dd if=/dev/urandom of="$out/$x-$v-damaged.img" bs=4096 seek=60 count=1 conv=notrunc 2>/dev/null
		for i in "$img" "$out/$x-$v-damaged.img"; do
			line=$(printf '%-34s' "$(basename "$i")")
			verdicts=
			for c in "${tools[@]}"; do
				a=$(now)
				t "$c" thin_check -q "$i" >/dev/null 2>&1 && r=ok || r=FAIL
				line+=$(printf ' %-22s' "$r ($(secs "$a" "$(now)")s)")
				verdicts+=" $r"
			done
			[ "${#tools[@]}" = 1 ] && line=$(printf '%-34s %-22s%s' "$(basename "$i")" "-" "${line:34}")
			a=$(now)
			"$R" meta check -q "$i" >"$out/rc.out" 2>&1 && r=ok || r=FAIL
			line+=$(printf ' %-22s' "$r ($(secs "$a" "$(now)")s)")
			echo "$line" >>"$out/table.txt"
			for tv in $verdicts; do
				[ "$tv" = "$r" ] && ok || bad "$(basename "$i"): thin_check $tv, rthinctl $r: $(cat "$out/rc.out")"
			done
			case $i in *damaged*) grep -q "thin device\|node\|superblock" "$out/rc.out" || bad "$(basename "$i"): damage not named: $(cat "$out/rc.out")" ;; esac
		done
		# thin_ls against rthinctl meta ls: mapped, exclusive, shared blocks.
		t "$v" thin_ls --no-headers -o DEV,MAPPED_BLOCKS,EXCLUSIVE_BLOCKS,SHARED_BLOCKS "$img" 2>/dev/null |
			awk '{ print $1, $2, $3, $4 }' >"$out/$x-$v.thin_ls"
		"$R" meta ls --raw "$img" | awk -F: '{ print $1, $5, $3 / (8192 * 8), $4 / (8192 * 8) }' >"$out/$x-$v.rthinctl_ls"
		if diff "$out/$x-$v.thin_ls" "$out/$x-$v.rthinctl_ls" >/dev/null; then ok; else
			bad "$x-$v: thin_ls and rthinctl meta ls differ: $(diff "$out/$x-$v.thin_ls" "$out/$x-$v.rthinctl_ls" | head -5)"
		fi
		{
			echo "== $x-$v.img: thin_ls $v (DEV MAPPED EXCLUSIVE SHARED blocks) | rthinctl meta ls"
			paste -d'|' "$out/$x-$v.thin_ls" "$out/$x-$v.rthinctl_ls"
		} >>"$out/ls.txt"
	done
done
cat "$out/table.txt" "$out/ls.txt"
echo "meta-images: $passed passed, $failed failed"
[ "$failed" = 0 ]
