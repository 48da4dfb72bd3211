#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Oracle test of the metadata core against thin-provisioning-tools (run inside
# the Debian sysroot): images written by the core must pass thin_check (exit 0,
# no leaked blocks) and thin_dump back to exactly what the core wrote
# (including the held metadata snapshot); images built by thin_restore from
# generated XML must read back identically in the core, pass its reference-count
# checker, and still pass thin_check / thin_dump after the core modified them.
# Prints "N passed, N failed" last; exits non-zero on any failure.
. "$(dirname "$0")/lib.sh"

out=$RTHIN_OUT/oracle
rm -rf "$out"
mkdir -p "$out/core" "$out/restore"
rel() { printf '/src/%s' "${1#"$RTHIN_ROOT"/}"; }

[ -x "$RTHIN_SYSROOT/usr/sbin/thin_check" ] || die "no thin_check in $RTHIN_SYSROOT: run scripts/sysroot.sh"
log "building the oracle driver"
(cd "$RTHIN_ROOT" && cargo build -q --release -p rthin-core-support --bin oracle) || die "cargo build failed"
drv=$RTHIN_ROOT/target/release/oracle

pass=0
fail=0
ok() { pass=$((pass + 1)); printf 'ok   %s\n' "$1"; }
ko() { fail=$((fail + 1)); printf 'FAIL %s\n' "$1"; [ -z "${2:-}" ] || sed 's/^/     /' "$2" | head -20; }

# thin_check IMG NAME: exit status 0 and no mention of leaks.
check() {
	if in_sysroot thin_check "$(rel "$1")" >"$1.check" 2>&1 && ! grep -qi leak "$1.check"; then
		ok "thin_check $2"
	else
		ko "thin_check $2" "$1.check"
	fi
}

# dump_cmp IMG EXPECT NAME [thin_dump args]: thin_dump, canonicalise, compare.
dump_cmp() {
	local img=$1 expect=$2 name=$3
	shift 3
	if in_sysroot thin_dump "$@" "$(rel "$img")" >"$img.xml" 2>"$img.dump.err" &&
		"$drv" canon "$img.xml" "$img.canon" && "$drv" compare "$expect" "$img.canon" 2>"$img.cmp"; then
		ok "thin_dump $name"
	else
		cat "$img.dump.err" >>"$img.cmp" 2>/dev/null || true
		ko "thin_dump $name" "$img.cmp"
	fi
}

log "core -> thin_check / thin_dump"
for name in $("$drv" gen "$out/core"); do
	img=$out/core/$name.img
	check "$img" "$name"
	dump_cmp "$img" "$out/core/$name.expect" "$name"
	if [ -f "$out/core/$name.snap.expect" ]; then
		check_snap_out=$img.snapcheck
		if in_sysroot thin_check --metadata-snap "$(rel "$img")" >"$check_snap_out" 2>&1; then
			ok "thin_check --metadata-snap $name"
		else
			ko "thin_check --metadata-snap $name" "$check_snap_out"
		fi
		cp "$img" "$img.snap.img"
		dump_cmp "$img.snap.img" "$out/core/$name.snap.expect" "--metadata-snap $name" --metadata-snap
	fi
done

log "thin_restore -> core -> thin_check / thin_dump"
for name in $("$drv" genxml "$out/restore"); do
	base=$out/restore/$name
	if in_sysroot thin_restore -i "$(rel "$base.xml")" -o "$(rel "$base.img")" >"$base.restore" 2>&1; then
		ok "thin_restore $name"
	else
		ko "thin_restore $name" "$base.restore"
		continue
	fi
	check "$base.img" "$name (restored)"
	if "$drv" modify "$base.img" "$base.expect" "$base.after" >"$base.modify" 2>&1; then
		ok "core reads and modifies $name"
	else
		ko "core reads and modifies $name" "$base.modify"
		continue
	fi
	check "$base.img" "$name (modified by the core)"
	dump_cmp "$base.img" "$base.after" "$name (modified by the core)"
done

log "thin_dump of core images -> thin_restore (shared subtrees) -> core"
for xml in "$out"/core/*.img.xml; do
	name=$(basename "$xml" .img.xml)
	case $name in *.snap) continue ;; esac
	base=$out/restore/rt-$name
	cp "$xml" "$base.xml"
	"$drv" canon "$base.xml" "$base.expect"
	truncate -s 128M "$base.img"
	if in_sysroot thin_restore -i "$(rel "$base.xml")" -o "$(rel "$base.img")" >"$base.restore" 2>&1; then
		ok "thin_restore $name dump"
	else
		ko "thin_restore $name dump" "$base.restore"
		continue
	fi
	if "$drv" modify "$base.img" "$base.expect" "$base.after" >"$base.modify" 2>&1; then
		ok "core reads and modifies restored $name"
	else
		ko "core reads and modifies restored $name" "$base.modify"
		continue
	fi
	check "$base.img" "restored $name (modified by the core)"
	dump_cmp "$base.img" "$base.after" "restored $name (modified by the core)"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
