#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds (once) the Debian trixie sysroot that holds the kernel toolchain and the
# VM's userspace. Idempotent: reruns are instant unless the package list changed.
. "$(dirname "$0")/lib.sh"

# Toolchain for the kernel and the module, then the VM's userspace.
PACKAGES=(
	linux-source-7.3 rustc rust-src rust-clippy bindgen clang llvm lld libclang-dev
	gcc make bc bison flex libelf-dev libssl-dev cpio kmod xz-utils
	busybox-static dmsetup fio thin-provisioning-tools lvm2
	e2fsprogs xfsprogs util-linux python3 nvme-cli
)
key=$(printf '%s\n' "${PACKAGES[@]}" | sha256sum | cut -c1-16)
stamp=$RTHIN_SYSROOT/.rthin-sysroot-$key

if [ -f "$stamp" ]; then
	exit 0
fi

ensure_host_packages debootstrap qemu-system-x86 cpio gzip xz-utils

if [ ! -x "$RTHIN_SYSROOT/usr/bin/apt-get" ]; then
	log "debootstrap trixie into $RTHIN_SYSROOT (about 30 s)"
	rm -rf "$RTHIN_SYSROOT"
	mkdir -p "$RTHIN_CACHE"
	debootstrap --variant=minbase trixie "$RTHIN_SYSROOT.tmp" "$RTHIN_MIRROR" >"$RTHIN_CACHE/debootstrap.log" 2>&1 ||
		{ tail -20 "$RTHIN_CACHE/debootstrap.log" >&2; rm -rf "$RTHIN_SYSROOT.tmp"; die "debootstrap failed"; }
	mv "$RTHIN_SYSROOT.tmp" "$RTHIN_SYSROOT"
fi

cat >"$RTHIN_SYSROOT/etc/apt/sources.list" <<SRC
deb $RTHIN_MIRROR trixie main
deb $RTHIN_MIRROR trixie-updates main
deb $RTHIN_MIRROR trixie-backports main
SRC

log "installing the toolchain and VM userspace into the sysroot (about 1 minute)"
in_sysroot /bin/sh -c "
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq &&
	apt-get install -y -qq -t trixie-backports --no-install-recommends ${PACKAGES[*]} >/var/log/rthin-apt.log 2>&1 ||
	{ tail -30 /var/log/rthin-apt.log; exit 1; }
	apt-get clean
"
in_sysroot /bin/sh -c '
	dpkg-query -W -f="\${Package} \${Version}\n" linux-source-7.3 rustc bindgen gcc-14 libclang-dev thin-provisioning-tools fio dmsetup lvm2 busybox-static nvme-cli
' >"$RTHIN_SYSROOT/rthin-versions.txt"
rm -f "$RTHIN_SYSROOT"/.rthin-sysroot-*
touch "$stamp"
log "sysroot ready:"
sed 's/^/    /' "$RTHIN_SYSROOT/rthin-versions.txt" >&2
