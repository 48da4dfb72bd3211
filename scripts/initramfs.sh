#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds the VM's initramfs in two layers (the kernel unpacks concatenated
# cpio archives in order):
#   base    busybox, dmsetup, fio, the thin tools, lvm2, mkfs/fsck, nvme-cli,
#           their shared libraries and the kernel's modules. Slow-ish, cached outside the
#           clone, keyed on this script, the sysroot and the kernel build.
#   overlay /init, the test scripts, dm-rthin.ko and rthinctl: rebuilt every run.
# Usage: initramfs.sh OUT.cpio.gz [MODULE_DIR]
. "$(dirname "$0")/lib.sh"

out=${1:?usage: initramfs.sh OUT.cpio.gz [MODULE_DIR]}
moddir=${2:-$RTHIN_OUT/module$RTHIN_FLAVOR_SUFFIX}

"$RTHIN_ROOT/scripts/kernel.sh"

# Binaries the VM needs, as paths inside the sysroot, and the names they
# are also called by (thin tools and lvm are multi-call binaries).
BINARIES=(
	/usr/bin/busybox /usr/sbin/dmsetup /usr/bin/fio /usr/sbin/pdata_tools /usr/sbin/lvm
	/usr/sbin/mke2fs /usr/sbin/e2fsck /usr/sbin/mkfs.xfs /usr/sbin/xfs_repair
	/usr/sbin/nvme
)
THIN_TOOLS=(thin_check thin_dump thin_restore thin_repair thin_ls thin_delta thin_trim
	thin_metadata_size thin_metadata_pack thin_metadata_unpack thin_rmap)
LVM_TOOLS=(pvcreate pvremove pvs vgcreate vgremove vgs vgchange lvcreate lvremove lvs
	lvchange lvextend lvconvert lvdisplay vgdisplay)

# (Keyed on this script's base part only: the overlay's code below can change
# without rebuilding the base.)
key=$(cat <(sed '/^# ---- overlay/q' "$0") "$RTHIN_SYSROOT"/.rthin-sysroot-* <(ls "$RTHIN_KBUILD"/.rthin-built-* "$RTHIN_SYSROOT"/.rthin-sysroot-*) | sha256sum | cut -c1-16)
base=$RTHIN_CACHE/initramfs-base-$key.cpio.gz

if [ ! -f "$base" ]; then
	log "assembling the VM base image (binaries, libraries, kernel modules)"
	# A private staging folder: two clones may build the base at once.
	stage_in=/build/initramfs-base.$$
	stage=$RTHIN_SYSROOT$stage_in
	rm -rf "$stage"
	in_sysroot /bin/bash -ec '
		stage=$1 modroot=$2
		shift 2
		mkdir -p $stage/{bin,sbin,etc,proc,sys,dev,tmp,run,root,mnt,results,lib/modules,usr/bin,usr/sbin}
		for bin in "$@"; do
			mkdir -p "$stage$(dirname "$bin")"
			cp -a "$bin" "$stage$bin"
			# Copy every shared library ldd names, at the same path.
			ldd "$bin" 2>/dev/null | grep -oE "/[^ ]+" | while read -r lib; do
				mkdir -p "$stage$(dirname "$lib")"
				cp -L "$lib" "$stage$lib"
			done
		done
		cp -a "$modroot"/lib/modules/. $stage/lib/modules/
		# merged-/usr layout, as trixie has it.
		ln -sfn usr/lib $stage/lib64 2>/dev/null || true
	' base-stage "$stage_in" "$RTHIN_MODROOT_IN" "${BINARIES[@]}"
	for t in "${THIN_TOOLS[@]}"; do ln -sf pdata_tools "$stage/usr/sbin/$t"; done
	for t in "${LVM_TOOLS[@]}"; do ln -sf lvm "$stage/usr/sbin/$t"; done
	ln -sf mke2fs "$stage/usr/sbin/mkfs.ext4"
	ln -sf e2fsck "$stage/usr/sbin/fsck.ext4"
	# nvme-cli's host identity (NQN and id), as Debian's package generated them
	# in the sysroot: nvme connect takes them when none is given.
	mkdir -p "$stage/etc/nvme"
	cp "$RTHIN_SYSROOT"/etc/nvme/hostnqn "$RTHIN_SYSROOT"/etc/nvme/hostid "$stage/etc/nvme/"
	# LVM in a VM without udev: no udev sync, no udev rules, no monitoring daemon.
	mkdir -p "$stage/etc/lvm"
	cat >"$stage/etc/lvm/lvm.conf" <<-'LVM'
	activation {
		udev_sync = 0
		udev_rules = 0
		monitoring = 0
	}
	global {
		use_lvmetad = 0
		thin_check_executable = "/usr/sbin/thin_check"
	}
	devices {
		obtain_device_list_from_udev = 0
	}
	LVM
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$base.tmp.$$"
	mv "$base.tmp.$$" "$base"
	rm -rf "$stage"
fi

# ---- overlay: everything from this clone ----
# The files that go in, as "SOURCE DESTINATION" (a folder: copied whole).
files=("$RTHIN_ROOT/scripts/vm/init /init" "$RTHIN_ROOT/tests/vm/lib.sh /rthin/tests/lib.sh")
for t in "$RTHIN_ROOT"/tests/vm/[0-9]*.sh; do files+=("$t /rthin/tests/${t##*/}"); done
if [ "${RTHIN_SELFCHECK_FAIL:-}" = vm ]; then
	files+=("$RTHIN_ROOT/tests/vm/selfcheck-fail.sh /rthin/tests/99-selfcheck-fail.sh")
fi
files+=("$RTHIN_ROOT/tests/vm/demo.sh /rthin/demo.sh")
# Generated test data (scripts/check.sh: the corrupt_images binary of tests/core-support).
[ ! -d "$RTHIN_OUT/vm-data" ] || files+=("$RTHIN_OUT/vm-data /rthin/data")
files+=("$moddir/dm-rthin.ko /rthin/dm-rthin.ko")
# The ioctl-counting LD_PRELOAD shim (tests/vm/ioctl-count.c, used by
# tests/vm/50-rthinctl-many.sh), built in the sysroot against the VM's libc.
shim_src=$RTHIN_ROOT/tests/vm/ioctl-count.c shim=$RTHIN_OUT/vm-tools/ioctl-count.so
if [ ! -f "$shim" ] || [ "$shim_src" -nt "$shim" ]; then
	mkdir -p "$RTHIN_OUT/vm-tools"
	in_sysroot gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "/tmp/ioctl-count.$$.so" \
		/src/tests/vm/ioctl-count.c -ldl || die "cannot build $shim"
	mv "$RTHIN_SYSROOT/tmp/ioctl-count.$$.so" "$shim"
fi
files+=("$shim /rthin/ioctl-count.so")
[ ! -x "$RTHIN_ROOT/target/release/rthinctl" ] || files+=("$RTHIN_ROOT/target/release/rthinctl /usr/sbin/rthinctl")
# The crash tests' replay and workload tool (tests/crash), when built.
[ ! -x "$RTHIN_ROOT/target/release/rthin-crashtest" ] ||
	files+=("$RTHIN_ROOT/target/release/rthin-crashtest /usr/sbin/rthin-crashtest")
# The differential torture test (tests/torture), when built.
[ ! -x "$RTHIN_ROOT/target/release/rthin-torture" ] ||
	files+=("$RTHIN_ROOT/target/release/rthin-torture /usr/sbin/rthin-torture")
kver=$(ls "$RTHIN_SYSROOT$RTHIN_MODROOT_IN/lib/modules")

# The same inputs give the same image: reuse the last one (the fast loop of
# Documentation/testing.md rebuilds only what changed).
inputs_key=$( {
	echo "$base $kver"
	for f in "${files[@]}"; do
		src=${f% *}
		echo "$f"
		find "$src" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	done
} | sha256sum | cut -c1-16)
if [ -f "$out" ] && [ -f "$out.tests" ] && [ "$(cat "$out.key" 2>/dev/null)" = "$inputs_key" ]; then
	log "initramfs inputs unchanged: reusing ${out#"$RTHIN_ROOT"/}"
	exit 0
fi

overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
# The overlay's root becomes the VM's /: mktemp's 0700 would lock out non-root users.
chmod 755 "$overlay"
mkdir -p "$overlay/rthin/tests"
for f in "${files[@]}"; do
	src=${f% *} dst=$overlay${f##* }
	mkdir -p "$(dirname "$dst")"
	if [ -d "$src" ]; then
		cp -r "$src" "$dst"
	else
		cp "$src" "$dst"
	fi
done
chmod 0755 "$overlay/init"
[ ! -f "$overlay/usr/sbin/rthinctl" ] || chmod 0755 "$overlay/usr/sbin/rthinctl"
[ ! -f "$overlay/usr/sbin/rthin-crashtest" ] || chmod 0755 "$overlay/usr/sbin/rthin-crashtest"
[ ! -f "$overlay/usr/sbin/rthin-torture" ] || chmod 0755 "$overlay/usr/sbin/rthin-torture"
echo "$kver" >"$overlay/rthin/kernel-release"
rm -f "$out.key"
{
	cat "$base"
	(cd "$overlay" && find . | cpio -o -H newc --quiet | gzip -1)
} >"$out"
# The tests it holds, in the order the VM runs them (scripts/vm-suite.sh shards them).
(cd "$overlay/rthin/tests" && LC_ALL=C ls [0-9]*.sh | sed 's/\.sh$//') >"$out.tests"
echo "$inputs_key" >"$out.key"
