#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds dm-rthin.ko with Kbuild inside the sysroot, against the test kernel,
# at W=1 with clippy (CLIPPY=1: the kernel's lint set, including
# undocumented_unsafe_blocks); any compiler or clippy warning fails the build.
#   RTHIN_SELFCHECK_FAIL=kunit  also builds a KUnit case that must fail (harness check).
#   RTHIN_KERNEL_FLAVOR=debug   builds against the debug kernel, into build/module-debug.
. "$(dirname "$0")/lib.sh"

"$RTHIN_ROOT/scripts/kernel.sh"

selfcheck=0
[ "${RTHIN_SELFCHECK_FAIL:-}" = kunit ] && selfcheck=1
outdir=module
[ "$selfcheck" = 1 ] && outdir=module-selfcheck
outdir+=$RTHIN_FLAVOR_SUFFIX
mkdir -p "$RTHIN_OUT/$outdir"
log "building dm-rthin.ko (W=1) into build/$outdir"
buildlog=$RTHIN_OUT/$outdir/build.log
if ! in_sysroot make -s "${RTHIN_KMAKE_ARGS[@]}" -C "$RTHIN_KBUILD_IN" M="$RTHIN_SRC_IN" MO="$RTHIN_SRC_IN/build/$outdir" \
	W=1 CLIPPY=1 RTHIN_SELFCHECK_FAIL="$selfcheck" -j"$(($(nproc) + 1))" modules >"$buildlog" 2>&1; then
	cat "$buildlog" >&2
	die "module build failed"
fi
if grep -qiE 'warning' "$buildlog"; then
	cat "$buildlog" >&2
	die "module build produced warnings (the build must be warning-free at W=1)"
fi
[ -f "$RTHIN_OUT/$outdir/dm-rthin.ko" ] || die "module build produced no dm-rthin.ko"
