#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make deb`: the Debian packages, into build/deb:
#   rthin-dkms_V_all.deb     the module's sources under /usr/src/rthin-V with
#                            dkms.conf; postinst builds and installs the module
#                            for the running kernel with dkms
#   rthinctl_V_ARCH.deb      rthinctl (stripped), man pages, completions (make install)
# Both carry the modprobe.d/modules-load.d examples of packaging/ under
# /usr/share/doc/<package>/examples. Needs cargo and dpkg-deb only (no sysroot).
. "$(dirname "$0")/lib.sh"
cd "$RTHIN_ROOT"
command -v dpkg-deb >/dev/null || die "make deb needs dpkg-deb (package dpkg)"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' tools/rthinctl/Cargo.toml | head -1)
[ -n "$version" ] || die "no version in tools/rthinctl/Cargo.toml"
grep -qx "PACKAGE_VERSION=\"$version\"" dkms.conf ||
	die "dkms.conf's PACKAGE_VERSION is not rthinctl's version $version: keep them equal"
arch=$(dpkg --print-architecture)
out=$RTHIN_OUT/deb
rm -rf "$out"
mkdir -p "$out"
maintainer="rthin developers <rthin@localhost>"

# common_files STAGE PACKAGE : copyright and the configuration examples.
common_files() {
	install -Dm644 COPYING "$1/usr/share/doc/$2/copyright"
	install -Dm644 packaging/modprobe.d/rthin.conf "$1/usr/share/doc/$2/examples/modprobe.d/rthin.conf"
	install -Dm644 packaging/modules-load.d/rthin.conf "$1/usr/share/doc/$2/examples/modules-load.d/rthin.conf"
}

# rthinctl
stage=$out/rthinctl
DESTDIR=$stage PREFIX=/usr scripts/install.sh
common_files "$stage" rthinctl
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: rthinctl
Version: $version
Architecture: $arch
Maintainer: $maintainer
Section: admin
Priority: optional
Depends: libc6
Recommends: thin-provisioning-tools, dmsetup
Suggests: rthin-dkms
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Description: administration tool for rthin and dm-thin thin pools
 rthinctl shows and drives thin pools of the dm-rthin kernel module and of the
 kernel's C dm-thin: status, messages, metadata checks and listings.
CONTROL
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out/rthinctl_${version}_$arch.deb" >/dev/null

# rthin-dkms: exactly the files the module build reads (Kbuild, the crate, the
# shim, the core's sources) plus dkms.conf and its build command.
stage=$out/rthin-dkms
src=$stage/usr/src/rthin-$version
git ls-files -z --cached --others --exclude-standard -- Kbuild dkms.conf COPYING scripts/dkms-make.sh scripts/kdir-check.sh rust |
	grep -zvE '^rust/core/(tests|examples)/|Cargo\.toml$' |
	while IFS= read -r -d '' f; do install -Dm644 "$f" "$src/$f"; done
[ -f "$src/rust/rthin_main.rs" ] && [ -f "$src/rust/core/src/lib.rs" ] || die "rthin-dkms: the module's sources are missing from the stage"
common_files "$stage" rthin-dkms
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: rthin-dkms
Version: $version
Architecture: all
Maintainer: $maintainer
Section: kernel
Priority: optional
Depends: dkms (>= 3), make
Recommends: rthinctl
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Description: dm-rthin thin-provisioning device-mapper target (DKMS sources)
 dm-rthin is a drop-in for the kernel's C dm-thin written in Rust: the same
 table lines, messages, status lines and on-disk metadata. dkms builds it for
 each kernel. The kernel needs CONFIG_RUST=y and a build tree with its Rust
 kernel crate: see /usr/share/doc/rthin-dkms and rthin's admin guide.
CONTROL
cat >"$stage/DEBIAN/postinst" <<POSTINST
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
	dkms add -m rthin -v $version >/dev/null 2>&1 || true
	kver=\$(uname -r)
	if ! dkms install -m rthin -v $version -k "\$kver"; then
		echo "rthin-dkms: dm-rthin was not built for kernel \$kver (see the message above); the sources stay registered with dkms" >&2
	fi
fi
POSTINST
cat >"$stage/DEBIAN/prerm" <<PRERM
#!/bin/sh
set -e
dkms remove -m rthin -v $version --all >/dev/null 2>&1 || true
PRERM
chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out/rthin-dkms_${version}_all.deb" >/dev/null
log "built $(cd "$out" && ls ./*.deb | tr '\n' ' ')in build/deb"
