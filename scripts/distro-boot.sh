#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make distro-check`: boots Debian's own kernel (vmlinuz of
# linux-image-7.3.4+deb13-amd64, RTHIN_DISTRO_KVER for another) in QEMU with
# its own modules (dm-mod, dm-bufio, brd, and the C dm-thin's), loads the dm-rthin.ko that make
# distro-module built for it, and runs scripts/vm/distro-init's checks (targets,
# a pool and thin volume with data verified, status lines, a snapshot,
# thin_check, Debian's C dm-thin reading rthin's pool), then a subset of
# tests/vm (RTHIN_DISTRO_TESTS).
# Opt-in: it needs make distro-module first and is not part of make check.
. "$(dirname "$0")/lib.sh"
kver=${RTHIN_DISTRO_KVER:-7.3.4+deb13-amd64}
debs=$RTHIN_SYSROOT/build/distro/debs
ko=$RTHIN_OUT/module-$kver/dm-rthin.ko
[ -f "$ko" ] || die "no $ko: run make distro-module first"
binary_deb=$(compgen -G "$debs/linux-binary-${kver}_*.deb") || {
	in_sysroot /bin/sh -c "cd /build/distro/debs && apt-get download -q linux-binary-$kver" >&2 ||
		die "apt-get download linux-binary-$kver failed"
	binary_deb=$(compgen -G "$debs/linux-binary-${kver}_*.deb")
}
modules_deb=$(compgen -G "$debs/linux-modules-${kver}_*.deb") || die "no linux-modules-$kver package: run make distro-module first"
work=$RTHIN_OUT/distro-vm
rm -rf "$work"
mods=$work/overlay/lib/modules/$kver
mkdir -p "$work/x" "$mods"
dpkg-deb --fsys-tarfile "$binary_deb" | tar -x -C "$work/x" "./usr/lib/modules/$kver/vmlinuz"
# The device-mapper modules (the C dm-thin's among them) and brd, with their
# index (depmod), so that modprobe works as on the test kernel.
dpkg-deb --fsys-tarfile "$modules_deb" | tar -x -C "$work/x" --wildcards \
	"./usr/lib/modules/$kver/kernel/drivers/md/*" "./usr/lib/modules/$kver/kernel/drivers/block/brd.ko.xz"
# busybox modprobe does not decompress.
(cd "$work/x/usr/lib/modules/$kver" && find kernel -name '*.ko.xz') | while read -r f; do
	mkdir -p "$mods/$(dirname "$f")"
	xz -dc "$work/x/usr/lib/modules/$kver/$f" >"$mods/${f%.xz}"
done
# (The package's lists of built-in and ordered modules are not needed here.)
touch "$mods/modules.order" "$mods/modules.builtin" "$mods/modules.builtin.modinfo"
in_sysroot depmod -b "$RTHIN_SRC_IN/${work#"$RTHIN_ROOT"/}/overlay" "$kver" || die "depmod of Debian's modules failed"
# The test VM's image (busybox, dmsetup) with this module, then /init replaced.
"$RTHIN_ROOT/scripts/initramfs.sh" "$work/base.cpio.gz" "$(dirname "$ko")"
install -m755 "$RTHIN_ROOT/scripts/vm/distro-init" "$work/overlay/init"
{
	cat "$work/base.cpio.gz"
	(cd "$work/overlay" && find . | cpio -o -H newc --quiet | gzip -1)
} >"$work/initramfs.cpio.gz"
# Then these tests of tests/vm (comma-separated), as the test VM runs them.
tests=${RTHIN_DISTRO_TESTS:-10-table-errors,20-thin-io,21-thin-snapshots,40-dm-thin-names,50-rthinctl-status,60-pool-messages,60-pool-interop,70-io-interop-data,70-io-snapshots,70-io-discard,70-io-lvm2}
log "booting Debian's vmlinuz $kver (TCG) with dm-rthin.ko built for it"
console=$work/console.log
timeout -k 10 900 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
	-kernel "$work/x/usr/lib/modules/$kver/vmlinuz" -initrd "$work/initramfs.cpio.gz" \
	-append "console=ttyS0 rdinit=/init panic=-1 quiet rthin.distro_tests=$tests" -display none -monitor none -no-reboot \
	-serial "file:$console" || true
grep -aE '^(kernel:|pool status:|thin status:|C dm-thin|rthin|PASS |FAIL |    |DISTRO-CHECK)' "$console" >&2 || true
grep -aq '^DISTRO-CHECK OK' "$console" || die "distro check failed on $kver (console: ${console#"$RTHIN_ROOT"/})"
log "Debian's kernel $kver loads dm-rthin.ko and passes the checks"
