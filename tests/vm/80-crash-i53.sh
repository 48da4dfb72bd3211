# SPDX-License-Identifier: GPL-2.0
# I53: a write without fsync, then a power cut before the pool commits it.
# Recorded with dm-log-writes under the pool (lib.sh crash_*): a 64 KiB write
# with fsync (committed), the mark "synced", a 64 KiB write to another block
# without fsync, an INFO status (which commits, D31), the mark "committed".
# Replayed to every entry from "synced" to "committed": before the commit's
# superblock write the metadata is exactly the last commit (thin_dump equal
# to the one at "synced"; the new block unmapped and reading zeroes), from
# that write on it holds the new mapping and the block its data; at every
# point thin_check passes before and after the pool's activation.
. /rthin/tests/lib.sh

use_impl rthin
crash_record
mkpool pool /dev/mapper/cmeta /dev/mapper/cdata $CRASH_DATA
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 32768
run dd if=/dev/urandom of=/tmp/a bs=64k count=1 2>/dev/null
run dd if=/dev/urandom of=/tmp/b bs=64k count=1 2>/dev/null
run dd if=/tmp/a of=/dev/mapper/thin bs=64k oflag=direct conv=fsync 2>/dev/null
crash_mark synced
run dd if=/tmp/b of=/dev/mapper/thin bs=64k seek=5 oflag=direct 2>/dev/null
run dmsetup status pool >/dev/null
crash_mark committed
run dmsetup remove thin
run dmsetup remove pool
crash_stop

rthin-crashtest list $CRASH_LOG >/tmp/list || fail "listing the log"
S=$(awk '$5 == "synced" { print $1 }' /tmp/list)
C=$(awk '$5 == "committed" { print $1 }' /tmp/list)
# The superblock is the metadata slice's (and so the log-writes device's)
# first 4 KiB; the first write to it after "synced" makes the commit.
W=$(awk -v s="$S" -v c="$C" '$1 > s && $1 < c && $3 == 0 && $4 > 0 && $2 !~ /MARK|DISCARD/ { print $1; exit }' /tmp/list)
echo "entries: synced $S, superblock write $W, committed $C"
sed -n "$((S + 1)),$((C + 1))p" /tmp/list
[ -n "$S" ] && [ -n "$C" ] || fail "marks missing from the log"
[ -n "$W" ] || fail "no superblock write between the marks: the status did not commit"
zero64=$(dd if=/dev/zero bs=64k count=1 2>/dev/null | md5sum)

# check_i53 INDEX
check_i53() {
	local got want
	thin_dump /dev/mapper/cmeta >/tmp/dump.$1 || fail "point $1: thin_dump"
	if [ "$1" -lt "$W" ]; then
		cmp -s /tmp/dump.$1 /tmp/dump.$S ||
			fail "point $1, before the superblock write: the metadata is not the last commit's: $(diff /tmp/dump.$S /tmp/dump.$1)"
		want=$zero64
	else
		mappings /tmp/dump.$1 1 | grep -q '^5 ' || fail "point $1: block 5 not mapped after the commit: $(cat /tmp/dump.$1)"
		want=$(md5sum </tmp/b)
	fi
	crash_pool
	mkthin thin cpool 1 32768
	got=$(dd if=/dev/mapper/thin bs=64k count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$(md5sum </tmp/a)" ] || fail "point $1: the fsynced block 0 lost its data"
	got=$(dd if=/dev/mapper/thin bs=64k skip=5 count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$want" ] || fail "point $1: block 5 does not read as expected ($([ "$want" = "$zero64" ] && echo zeroes || echo its data))"
	run dmsetup remove thin
	run dmsetup remove cpool
	check_meta /dev/mapper/cmeta
}
seq "$S" "$C" | awk '{ print $1, "-", "-" }' >/tmp/points
crash_points check_i53 /tmp/points
echo "I53: $((W - S)) points before the commit rolled back to it, $((C - W + 1)) from it on hold the new block"
