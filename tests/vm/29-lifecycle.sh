# SPDX-License-Identifier: GPL-2.0
# Pool and thin lifecycle corners: a thin cannot load on a pool that has
# never been resumed (B15); two devices, and an inactive table, for one thin
# id all load (B16); a read_only pool refuses provisioning but serves mapped
# writes and reads (J65); the discard features show in the status line and
# in the thin's queue limits (D29, H50); once every table is gone, so is
# every pool object (its debugfs directory goes with it): the pool's timers,
# which hold the object while they run, were stopped by its last user.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
wipe $meta
# bad WHY: a failed check that does not stop the test (it fails at the end).
failed=0
bad() {
	echo "FAIL: $*" >&2
	failed=$((failed + 1))
}
word() { dmsetup status "$1" | awk -v n="$2" '{ print $n }'; }

# Metadata with thin 1 in it.
openpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
run dmsetup remove pool

# --- B15: a pool object that has not been resumed yet.
run dmsetup create pool --notable
run dmsetup load pool --table "$(pool_table $meta $data $size)"
# (by number: without udev, libdevmapper makes the node only at resume)
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
expect_error "Invalid argument" dmsetup create thin --table "0 2048 rthin $pool_dev 1"
expect_dmesg "Unable to activate thin device while pool is suspended"
dmsetup remove thin 2>/dev/null
run dmsetup resume pool
mkthin thin pool 1 131072
echo "B15 ok"

# --- B16: a second device for thin 1, and an inactive table for it.
mkthin thin_b pool 1 131072
run dmsetup load thin_b --table "$(thin_table pool 1 65536)"
run dmsetup resume thin_b
[ "$(dmsetup table thin_b | cut -d' ' -f2)" = 65536 ] || fail "B16: the reloaded table is not live"
run dd if=/dev/urandom of=/tmp/a bs=64k count=4 2>/dev/null
run dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=8 oflag=direct 2>/dev/null
got=$(dd if=/dev/mapper/thin_b bs=64k skip=8 count=4 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "B16: the second device does not see the first one's writes"
run dmsetup remove thin_b
echo "B16 ok"

# --- J65: read_only reload.
run dd if=/dev/mapper/thin of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null
reload_pool pool $meta $data $size read_only
[ "$(word pool 8)" = ro ] || fail "J65: not ro: $(dmsetup status pool)"
used=$(word pool 6)
if out=$(dd if=/tmp/a of=/dev/mapper/thin bs=4k count=1 seek=$((30 * 16)) oflag=direct 2>&1); then
	bad "J65: a write to an unmapped block succeeded on a read_only pool"
else
	case $out in *"Input/output error"*) ;; *) bad "J65: expected EIO for a provisioning write, got: $out" ;; esac
fi
run dd if=/dev/urandom of=/tmp/b bs=4k count=1 2>/dev/null
dd if=/tmp/b of=/dev/mapper/thin bs=4k count=1 seek=$((9 * 16 + 3)) oflag=direct 2>/dev/null ||
	bad "J65: a write to a mapped unshared block failed on a read_only pool"
got=$(dd if=/dev/mapper/thin bs=4k skip=$((9 * 16 + 3)) count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/b)" ] || bad "J65: the in-place write does not read back"
got=$(dd if=/dev/mapper/thin bs=64k skip=10 count=2 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(dd if=/tmp/a bs=64k skip=2 count=2 2>/dev/null | md5sum)" ] || bad "J65: mapped reads fail"
zero=$(dd if=/dev/zero bs=64k count=1 2>/dev/null | md5sum)
got=$(dd if=/dev/mapper/thin bs=64k skip=30 count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$zero" ] || bad "J65: an unmapped block does not read as zeroes"
[ "$(word pool 6)" = "$used" ] || bad "J65: data usage changed in read_only: $used -> $(word pool 6)"
[ "$(word thin 4)" = $((4 * 128)) ] || bad "J65: thin status $(dmsetup status thin)"
# Back to rw: provisioning works again.
reload_pool pool $meta $data $size
[ "$(word pool 8)" = rw ] || fail "J65: not back to rw: $(dmsetup status pool)"
run dd if=/tmp/a of=/dev/mapper/thin bs=4k count=1 seek=$((30 * 16)) oflag=direct 2>/dev/null
echo "J65 done"

# --- H50: discard limits of a thin with discards on.
thin_q=/sys/block/dm-$(dmsetup info -c --noheadings -o minor thin | tr -d ' ')/queue
echo "thin discard_granularity $(cat $thin_q/discard_granularity) discard_max_bytes $(cat $thin_q/discard_max_bytes)"
[ "$(cat $thin_q/discard_granularity)" = 65536 ] || bad "H50: thin discard_granularity $(cat $thin_q/discard_granularity), want 65536"
[ "$(cat $thin_q/discard_max_bytes)" = $((1024 * 65536)) ] || bad "H50: thin discard_max_bytes $(cat $thin_q/discard_max_bytes), want $((1024 * 65536))"
run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta

# --- D29: discard features in status word 9 (field 6 of the pool's INFO).
for f in ignore_discard no_discard_passdown; do
	mkpool pool $meta $data $size $f
	s=$(dmsetup status pool)
	echo "$f: $s"
	[ "$(word pool 9)" = $f ] || bad "D29: status with $f: $s"
	[ "$(dmsetup table pool)" = "0 $size rthin-pool 1:0 1:1 128 0 1 $f " ] || bad "D29: table with $f: $(dmsetup table pool)"
	if [ $f = ignore_discard ]; then
		run dmsetup message pool 0 "create_thin 1"
		mkthin thin pool 1 131072
		thin_q=/sys/block/dm-$(dmsetup info -c --noheadings -o minor thin | tr -d ' ')/queue
		[ "$(cat $thin_q/discard_max_bytes)" = 0 ] || bad "H50: ignore_discard thin discard_max_bytes $(cat $thin_q/discard_max_bytes)"
		if out=$(blkdiscard /dev/mapper/thin 2>&1); then
			bad "H50: blkdiscard succeeded on an ignore_discard thin"
		else
			case $out in *"not supported"*) ;; *) bad "H50: expected EOPNOTSUPP from blkdiscard, got: $out" ;; esac
		fi
		run dmsetup remove thin
	fi
	# (the pool object's debugfs directory is named by its major:minor)
	gone="${gone:-} /sys/kernel/debug/rthin-$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')"
	run dmsetup remove pool
done
for dir in $gone; do
	wait_for 10 test ! -e "$dir" || bad "the pool object of $dir outlived its last table"
done
[ $failed = 0 ] || fail "$failed checks failed"
