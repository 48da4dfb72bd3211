# SPDX-License-Identifier: GPL-2.0
# LVM with rthinctl as its checker: rthinctl linked as rthin_check is
# lvm.conf's thin_check_executable, with LVM's default thin_check_options
# (-q --clear-needs-check-flag). Activating the LVM thin pool (C dm-thin)
# runs it: clean metadata activates; with needs_check set the check clears
# the flag and the pool comes up writable; damaged metadata is refused.
. /rthin/tests/lib.sh

command -v lvm >/dev/null || {
	echo "SKIP: lvm2 is not in the VM image"
	exit 0
}
export LVM_SUPPRESS_FD_WARNINGS=1
ln -sf /usr/sbin/rthinctl /tmp/rthin_check
# Logs each call LVM makes, and its exit status.
cat >/tmp/logged_check <<'SH'
#!/bin/sh
/tmp/rthin_check "$@" >/tmp/check.out 2>&1
rc=$?
echo "rthin_check $* -> $rc" >>/tmp/check.log
cat /tmp/check.out >>/tmp/check.log
exit $rc
SH
chmod +x /tmp/logged_check
CONF='devices { obtain_device_list_from_udev=0 use_devicesfile=0 global_filter=["a|^/dev/ram2$|","r|.*|"] }
activation { udev_sync=0 udev_rules=0 monitoring=0 }
global { locking_dir="/run/lock/lvm" thin_check_executable="/tmp/logged_check" thin_check_options=["-q","--clear-needs-check-flag"] }'
l() { echo "+ lvm $*"; lvm "$@" --config "$CONF" || fail "lvm $* failed"; }
# activate: the pool's activation, with the checker's calls it made.
activate() {
	: >/tmp/check.log
	lvm vgchange -ay vg --config "$CONF"
	local rc=$?
	echo "+ lvm vgchange -ay vg: exit $rc; checker calls:"
	sed 's/^/    /' /tmp/check.log
	grep -q "^rthin_check -q --clear-needs-check-flag /dev/mapper/vg-pool_tmeta -> " /tmp/check.log ||
		fail "LVM did not run rthin_check on the pool's metadata"
	return $rc
}
# set_needs_check DEV OFFSET: sets needs_check in the thin-pool superblock
# at byte OFFSET of DEV and reseals it: crc32c (Castagnoli, seed ~0, no
# final inversion) of bytes 4..4095, xor 160774, as dm-thin's superblock
# validator computes it (thin_restore ignores flags="1" in its XML, and
# no tool here sets the flag). Busybox awk has xor, and, rshift; its %d
# stops at 2^31 - 1, so the sum is printed with %.0f.
set_needs_check() {
	local dev=$1 off=$2 sum
	printf '\001' | dd of="$dev" bs=1 seek=$((off + 4)) conv=notrunc,fsync 2>/dev/null || fail "dd flags"
	sum=$(dd if="$dev" bs=1 skip=$((off + 4)) count=4092 2>/dev/null | od -An -tu1 -v |
		awk 'BEGIN { c = 4294967295 }
		{ for (i = 1; i <= NF; i++) { c = xor(c, $i); for (k = 0; k < 8; k++) c = and(c, 1) ? xor(rshift(c, 1), 2197175160) : rshift(c, 1) } }
		END { printf "%.0f\n", xor(c, 160774) }')
	[ -n "$sum" ] || fail "crc32c of the superblock"
	printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((sum & 255)) $((sum >> 8 & 255)) $((sum >> 16 & 255)) $((sum >> 24 & 255)))" |
		dd of="$dev" bs=1 seek=$off conv=notrunc,fsync 2>/dev/null || fail "dd checksum"
}
# The pool's metadata LV as it lies on the PV: 512-byte sectors.
get_meta() { dd if=/dev/ram2 of="$1" bs=512 skip=$moff count=$msize 2>/dev/null || fail "dd from the PV"; }

modprobe dm-thin-pool
wipe /dev/ram2
l pvcreate -y /dev/ram2
l vgcreate vg /dev/ram2
l lvcreate -y --type thin-pool -L 64M -n pool vg
l lvcreate -y -V 32M --thin -n thin1 vg/pool
run dd if=/dev/urandom of=/dev/mapper/vg-thin1 bs=64k count=16 oflag=direct
set -- $(dmsetup table vg-pool_tmeta)
[ "$3" = linear ] && [ $# = 5 ] || fail "the metadata LV is not one linear segment: $*"
msize=$2 moff=$5
l vgchange -an vg

echo "== clean metadata"
activate || fail "clean metadata: activation failed"
grep -q -- "-> 0$" /tmp/check.log || fail "rthin_check did not pass clean metadata"
l vgchange -an vg

echo "== needs_check set"
set_needs_check /dev/ram2 $((moff * 512))
get_meta /tmp/m2.img
expect_rc 0 '"needs_check": true' rthinctl --json meta ls /tmp/m2.img
activate || fail "needs_check: activation failed"
status=$(dmsetup status vg-pool-tpool)
echo "pool status: $status"
case $status in *needs_check* | *" ro "*) fail "the pool came up with needs_check or read-only: $status" ;; esac
l vgchange -an vg
get_meta /tmp/m3.img
expect_rc 0 '"needs_check": false' rthinctl --json meta ls /tmp/m3.img

echo "== damaged metadata"
dd if=/dev/urandom of=/dev/ram2 bs=1 count=16 seek=$((moff * 512 + 200)) conv=notrunc,fsync 2>/dev/null
activate && fail "damaged metadata: the pool was activated"
grep -q -- "-> 1$" /tmp/check.log || fail "rthin_check did not exit 1 on damaged metadata"
grep -q "bad checksum in superblock" /tmp/check.log || fail "rthin_check did not name the damage"
dmsetup info vg-pool-tpool >/dev/null 2>&1 && fail "the damaged pool is active"

lvm vgchange -an vg --config "$CONF" >/dev/null 2>&1
l vgremove -ff -y vg
l pvremove -y /dev/ram2
