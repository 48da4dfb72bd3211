# SPDX-License-Identifier: GPL-2.0
# Shared helpers for rthin's build and test scripts. Source it; do not run it.
#
# Everything slow (the Debian sysroot, the kernel build) lives in a cache outside
# the clone, so a fresh clone reuses it and `git clean` never throws it away.

set -euo pipefail

RTHIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RTHIN_CACHE=${RTHIN_CACHE:-$HOME/.cache/rthin}
RTHIN_SYSROOT=$RTHIN_CACHE/sysroot-trixie
# The test kernel's flavour: normal, or debug (KASAN, KFENCE, lockdep, RCU and
# atomic-sleep checking; `make check-debug`). Each flavour has its own tree,
# installed modules and clone outputs (suffix -debug), so neither rebuilds the other.
RTHIN_KERNEL_FLAVOR=${RTHIN_KERNEL_FLAVOR:-normal}
case $RTHIN_KERNEL_FLAVOR in
normal) RTHIN_FLAVOR_SUFFIX= ;;
debug) RTHIN_FLAVOR_SUFFIX=-debug ;;
*) printf '[rthin] error: RTHIN_KERNEL_FLAVOR must be normal or debug, not %s\n' "$RTHIN_KERNEL_FLAVOR" >&2; exit 1 ;;
esac
# The kernel tree lives inside the sysroot so that its absolute paths are the
# same whether seen from the chroot (/build/...) or from the host.
RTHIN_KBUILD_IN=/build/linux$RTHIN_FLAVOR_SUFFIX
RTHIN_KBUILD=$RTHIN_SYSROOT$RTHIN_KBUILD_IN
# Where the kernel's modules are installed (the VM image copies them from there).
RTHIN_MODROOT_IN=/build/modroot$RTHIN_FLAVOR_SUFFIX
# Make arguments every build against the tree needs: the debug kernel is
# compiled by clang (see scripts/kernel/config-fragment-debug) and an external
# module must use the kernel's compiler.
RTHIN_KMAKE_ARGS=()
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && RTHIN_KMAKE_ARGS=(LLVM=1)
# Per-clone build output (module objects, initramfs, VM results).
RTHIN_OUT=${RTHIN_OUT:-$RTHIN_ROOT/build}
# Where the clone is visible inside the chroot.
RTHIN_SRC_IN=/src

# The Debian archive the host already uses: the sysroot comes from the same place.
RTHIN_MIRROR=${RTHIN_MIRROR:-http://deb.debian.org/debian}

log() { printf '\033[1m[rthin]\033[0m %s\n' "$*" >&2; }
die() { printf '[rthin] error: %s\n' "$*" >&2; exit 1; }

# hash_of FILE... : a short content hash used to key cached artefacts.
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# ensure_host_packages PKG... : installs the Debian packages the host lacks.
ensure_host_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "host packages missing (${missing[*]}) and not root: install them or run as root"
	log "installing host packages: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# in_sysroot CMD... : runs CMD inside the sysroot with /proc, /sys, /dev and the
# clone bind-mounted. The mounts live in a private mount namespace, so they are
# gone when the command ends, whether it succeeded, failed or was killed.
in_sysroot() {
	[ -x "$RTHIN_SYSROOT/bin/sh" ] || die "no sysroot at $RTHIN_SYSROOT: run scripts/sysroot.sh"
	unshare --mount --propagation private -- /bin/bash -euc '
		root=$1; src=$2; shift 2
		mount -t proc proc "$root/proc"
		mount --rbind /sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mkdir -p "$root/src"
		mount --bind "$src" "$root/src"
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
	' in_sysroot "$RTHIN_SYSROOT" "$RTHIN_ROOT" "$@"
}

# kunit_suites: the KUnit suites the module declares (each must report in
# the VM, or the run fails), one line, space-separated.
kunit_suites() {
	grep -rhoE 'kunit_tests\(([a-z0-9_]+)\)' "$RTHIN_ROOT/rust" --include='*.rs' |
		sed -E 's/kunit_tests\((.*)\)/\1/' | sort -u | tr '\n' ' '
}
