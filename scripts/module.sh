#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds dm-rthin.ko with Kbuild.
#
# By default against the test kernel, inside the sysroot, at W=1 with clippy
# (CLIPPY=1: the kernel's lint set, including undocumented_unsafe_blocks); any
# compiler or clippy warning fails the build.
#   SELFTEST=1   builds the KUnit suites in (the test VM's module, build/module);
#                without it the module carries no test code (build/module-noselftest).
#   KDIR=DIR     builds against another prepared kernel build tree instead (one with
#                CONFIG_RUST=y and its Rust targets built, such as scripts/distro-kernel.sh
#                prepares), into build/module-<its kernel release>. A tree inside the
#                sysroot is built there; any other on this machine, with this machine's
#                toolchain. If DIR holds rthin-make-vars (make variables, one line: the
#                compilers the tree was prepared with), they are passed to make.
#   KVER=RELEASE KDIR defaults to /lib/modules/RELEASE/build.
#   INSTALL_MOD_PATH=DIR  then also Kbuild's modules_install into DIR (which must be
#                under build/; no depmod: scripts/install.sh runs it).
#   RTHIN_SELFCHECK_FAIL=kunit  also builds a KUnit case that must fail (harness check).
#   RTHIN_KERNEL_FLAVOR=debug   builds against the debug kernel, into build/module-debug.
. "$(dirname "$0")/lib.sh"

selftest=${SELFTEST:-0}
case $selftest in 0 | 1) ;; *) die "SELFTEST must be 0 or 1, not $selftest" ;; esac
selfcheck=0
[ "${RTHIN_SELFCHECK_FAIL:-}" = kunit ] && selfcheck=1 selftest=1
kdir=${KDIR:-}
[ -z "$kdir" ] && [ -n "${KVER:-}" ] && kdir=/lib/modules/$KVER/build

make_vars=("${RTHIN_KMAKE_ARGS[@]}" W=1)
if [ -z "$kdir" ]; then
	"$RTHIN_ROOT/scripts/kernel.sh"
	outdir=module
	[ "$selftest" = 0 ] && outdir=module-noselftest
	[ "$selfcheck" = 1 ] && outdir=module-selfcheck
	outdir+=$RTHIN_FLAVOR_SUFFIX
	run=(in_sysroot)
	kdir_make=$RTHIN_KBUILD_IN src=$RTHIN_SRC_IN
	make_vars+=(CLIPPY=1)
else
	kdir=$(cd "$kdir" 2>/dev/null && pwd -P) || die "KDIR ${KDIR:-/lib/modules/$KVER/build}: no such directory"
	sh "$RTHIN_ROOT/scripts/kdir-check.sh" "$kdir" || exit 1
	outdir=module-$(cat "$kdir/include/config/kernel.release")
	[ "$selftest" = 1 ] && outdir+=-selftest
	if [ -f "$kdir/rthin-make-vars" ]; then
		read -r -a tree_vars <"$kdir/rthin-make-vars"
		make_vars+=("${tree_vars[@]}")
	fi
	case $kdir in
	"$RTHIN_SYSROOT"/*) run=(in_sysroot) kdir_make=${kdir#"$RTHIN_SYSROOT"} src=$RTHIN_SRC_IN ;;
	*) run=() kdir_make=$kdir src=$RTHIN_ROOT ;;
	esac
fi
mkdir -p "$RTHIN_OUT/$outdir"
log "building dm-rthin.ko (W=1, SELFTEST=$selftest) against $kdir_make into build/$outdir"
buildlog=$RTHIN_OUT/$outdir/build.log
if ! "${run[@]}" make -s -C "$kdir_make" M="$src" MO="$src/build/$outdir" "${make_vars[@]}" \
	SELFTEST="$selftest" RTHIN_SELFCHECK_FAIL="$selfcheck" -j"$(($(nproc) + 1))" modules >"$buildlog" 2>&1; then
	cat "$buildlog" >&2
	die "module build failed"
fi
if grep -qiE 'warning' "$buildlog"; then
	cat "$buildlog" >&2
	die "module build produced warnings (the build must be warning-free at W=1)"
fi
[ -f "$RTHIN_OUT/$outdir/dm-rthin.ko" ] || die "module build produced no dm-rthin.ko"
[ -n "${INSTALL_MOD_PATH:-}" ] || exit 0
stage=$(cd "$INSTALL_MOD_PATH" && pwd -P)
case $stage in "$RTHIN_ROOT"/build/*) ;; *) die "INSTALL_MOD_PATH must be under $RTHIN_ROOT/build, not $stage" ;; esac
"${run[@]}" make -s -C "$kdir_make" M="$src" MO="$src/build/$outdir" "${make_vars[@]}" SELFTEST="$selftest" \
	INSTALL_MOD_PATH="$src/${stage#"$RTHIN_ROOT"/}" DEPMOD=true modules_install || die "modules_install failed"
