#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make dkms-check`: `dkms build` of the rthin-dkms package (make deb) for a
# Debian kernel (default 7.3.4+deb13-amd64, RTHIN_DISTRO_KVER), inside the
# sysroot, against the tree scripts/distro-kernel.sh prepared, then the symbol
# check of the module dkms built. dkms (Debian's package) and the package's
# sources are unpacked privately under /build/distro/dkms-check; nothing is
# installed into the sysroot.
. "$(dirname "$0")/lib.sh"
kver=${RTHIN_DISTRO_KVER:-7.3.4+deb13-amd64}
dir_in=/build/distro
dir=$RTHIN_SYSROOT$dir_in
tree_in=$dir_in/linux-$kver
[ -f "$RTHIN_SYSROOT$tree_in/rust/libkernel.rmeta" ] || die "no prepared tree for $kver at $tree_in: run make distro-module first"
"$RTHIN_ROOT/scripts/deb.sh"
pkg=$(compgen -G "$RTHIN_OUT/deb/rthin-dkms_*_all.deb") || die "make deb built no rthin-dkms package"
version=$(dpkg-deb -f "$pkg" Version)
dkms_deb=$(compgen -G "$dir/debs/dkms_*.deb") || {
	in_sysroot /bin/sh -c "cd $dir_in/debs && apt-get download -q dkms" >&2 || die "apt-get download dkms failed"
	dkms_deb=$(compgen -G "$dir/debs/dkms_*.deb")
}
work_in=$dir_in/dkms-check
work=$RTHIN_SYSROOT$work_in
rm -rf "$work"
mkdir -p "$work/tool" "$work/pkg" "$work/tree" "$work/install"
dpkg-deb -x "$dkms_deb" "$work/tool"
dpkg-deb -x "$pkg" "$work/pkg"
log "dkms build -m rthin -v $version -k $kver (rthin-dkms from make deb, dkms $(dpkg-deb -f "$dkms_deb" Version))"
buildlog=$RTHIN_OUT/dkms-check.log
if ! in_sysroot "$work_in/tool/usr/sbin/dkms" build -m rthin -v "$version" -k "$kver" \
	--kernelsourcedir "$tree_in" --sourcetree "$work_in/pkg/usr/src" \
	--dkmstree "$work_in/tree" --installtree "$work_in/install" >"$buildlog" 2>&1; then
	cat "$buildlog" >&2
	cat "$work/tree/rthin/$version/build/make.log" >&2 2>/dev/null || true
	die "dkms build failed for $kver (log: ${buildlog#"$RTHIN_ROOT"/})"
fi
ko=$(compgen -G "$work/tree/rthin/$version/$kver/x86_64/module/dm-rthin.ko*") || {
	cat "$buildlog" >&2
	die "dkms build left no dm-rthin.ko under $work_in/tree/rthin/$version/$kver"
}
case $ko in *.xz) xz -dkf "$ko" && ko=${ko%.xz} ;; *.zst) zstd -dqf "$ko" && ko=${ko%.zst} ;; esac
log "dkms built $ko"
headers=$dir/headers-$kver/usr/src/linux-headers-$kver
"$RTHIN_ROOT/scripts/check-module-symbols.py" "$ko" "$headers/Module.symvers" "$headers/.config" "$(compgen -G "$dir/debs/linux-modules-${kver}_*.deb")"
