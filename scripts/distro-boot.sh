#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make distro-check`: boots Debian's own kernel (vmlinuz of
# linux-image-7.3.4+deb13-amd64, RTHIN_DISTRO_KVER for another) in QEMU with
# its own modules (dm-mod, dm-bufio, brd, and the C dm-thin's), loads the dm-rthin.ko that make
# distro-module built for it, and runs scripts/vm/distro-init's checks (targets,
# a pool and thin volume with data verified, status lines, a snapshot,
# thin_check, Debian's C dm-thin reading rthin's pool).
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
mkdir -p "$work/x" "$work/overlay/rthin/debian-modules"
dpkg-deb --fsys-tarfile "$binary_deb" | tar -x -C "$work/x" "./usr/lib/modules/$kver/vmlinuz"
dpkg-deb --fsys-tarfile "$modules_deb" | tar -x -C "$work/x" \
	"./usr/lib/modules/$kver/kernel/drivers/md/dm-mod.ko.xz" \
	"./usr/lib/modules/$kver/kernel/drivers/md/dm-bufio.ko.xz" \
	"./usr/lib/modules/$kver/kernel/drivers/md/persistent-data/dm-persistent-data.ko.xz" \
	"./usr/lib/modules/$kver/kernel/drivers/md/dm-bio-prison.ko.xz" \
	"./usr/lib/modules/$kver/kernel/drivers/md/dm-thin-pool.ko.xz" \
	"./usr/lib/modules/$kver/kernel/drivers/block/brd.ko.xz"
# busybox insmod does not decompress.
for f in $(find "$work/x/usr/lib/modules/$kver/kernel" -name '*.ko.xz'); do
	xz -dc "$f" >"$work/overlay/rthin/debian-modules/$(basename "${f%.xz}")"
done
# The test VM's image (busybox, dmsetup) with this module, then /init replaced.
"$RTHIN_ROOT/scripts/initramfs.sh" "$work/base.cpio.gz" "$(dirname "$ko")"
install -m755 "$RTHIN_ROOT/scripts/vm/distro-init" "$work/overlay/init"
{
	cat "$work/base.cpio.gz"
	(cd "$work/overlay" && find . | cpio -o -H newc --quiet | gzip -1)
} >"$work/initramfs.cpio.gz"
log "booting Debian's vmlinuz $kver (TCG) with dm-rthin.ko built for it"
console=$work/console.log
timeout -k 10 900 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp 2 -m 2048 \
	-kernel "$work/x/usr/lib/modules/$kver/vmlinuz" -initrd "$work/initramfs.cpio.gz" \
	-append "console=ttyS0 rdinit=/init panic=-1 quiet" -display none -monitor none -no-reboot \
	-serial "file:$console" || true
grep -aE '^(kernel:|pool status:|thin status:|C dm-thin|rthin|DISTRO-CHECK)' "$console" >&2 || true
grep -aq '^DISTRO-CHECK OK' "$console" || die "distro check failed on $kver (console: ${console#"$RTHIN_ROOT"/})"
log "Debian's kernel $kver loads dm-rthin.ko and passes the checks"
