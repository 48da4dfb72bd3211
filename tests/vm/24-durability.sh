# SPDX-License-Identifier: GPL-2.0
# Durability points, read from a copy of the live metadata device taken right
# after the operation returns (a "power cut" there), well inside the waker's
# one-second commit period: a message is committed on return (C27), a write
# followed by fsync is committed with its data on the data device (I52), a
# FUA (O_DSYNC) write that provisions is committed before it completes (I57),
# a pool INFO status commits and a --noflush one does not (D31), a flush
# through a reloaded thin commits the writes its old table took.
. /rthin/tests/lib.sh

use_impl rthin

wipe /dev/ram0
# A 16 MiB metadata device: copying it is quick.
run dmsetup create meta --table "0 32768 linear /dev/ram0 0"
meta=/dev/mapper/meta data=/dev/ram1
size=$(sectors $data)
run dd if=/dev/urandom of=$data bs=1M count=4 2>/dev/null
mkpool pool $meta $data $size
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
dbg=/sys/kernel/debug/rthin-$pool_dev/pool
[ -r $dbg ] || fail "no debugfs file $dbg"
# bad WHY: records a failed check and goes on with the next item; the test
# fails at the end if any check failed.
failed=0
bad() {
	echo "FAIL: $*" >&2
	failed=$((failed + 1))
}
counter() { awk -v k="$1" '$1 == k { print $2 }' $dbg; }
# cut: copy the metadata device as it is on "disk" now, and dump the copy
# (thin_dump opens devices exclusively).
cut() {
	dd if=$meta of=/tmp/m.img bs=1M iflag=direct 2>/dev/null || fail "copying $meta"
	thin_dump /tmp/m.img >/tmp/d.xml 2>/tmp/d.err || fail "thin_dump of the copy: $(cat /tmp/d.err)"
}
# data_block V: the data block the dump maps virtual block V of thin 9 to.
data_block() {
	sed -n '/dev_id="9"/,/<\/device>/p' /tmp/d.xml | tr '"' ' ' | awk -v v="$1" '
		$1 == "<single_mapping" && $3 == v { print $5 }
		$1 == "<range_mapping" && v >= $3 && v < $3 + $7 { print $5 + v - $3 }'
}

# --- C27: create_thin is on disk when the message returns.
cut
grep -q 'dev_id="9"' /tmp/d.xml && fail "thin 9 exists before create_thin"
run dmsetup message pool 0 "create_thin 9"
dirty=$(counter dirty)
cut
grep -q 'dev_id="9"' /tmp/d.xml || bad "C27: create_thin 9 not committed on return: $(grep dev_id /tmp/d.xml)"
[ "$dirty" = 0 ] || bad "C27: metadata dirty right after the message"
echo "C27: checked"

mkthin thin pool 9 131072
# The thin behaves as a disk with a volatile write cache (dm-thin sets
# flush_supported), whatever the data device: else the block layer drops
# flushes and FUA before they reach the target. brd has no write cache.
wc=$(cat /sys/block/dm-$(dmsetup info -c --noheadings -o minor thin | tr -d ' ')/queue/write_cache)
echo "thin write_cache: $wc (data device: $(cat /sys/block/ram1/queue/write_cache))"
[ "$wc" = "write back" ] || bad "the thin volume advertises no write cache ('$wc'): flushes and FUA never reach it"
run dd if=/dev/urandom of=/tmp/p bs=4k count=1 2>/dev/null

# --- I52: write + fsync: mapping committed, data at the mapped data block.
run dd if=/tmp/p of=/dev/mapper/thin bs=4k seek=$((5 * 16 + 2)) count=1 oflag=direct conv=fsync 2>/dev/null
dirty=$(counter dirty)
cut
db=$(data_block 5)
[ "$dirty" = 0 ] || bad "I52: metadata dirty right after fsync"
if [ -z "$db" ]; then
	bad "I52: block 5 not mapped on disk after fsync: $(sed -n '/dev_id="9"/,/<\/device>/p' /tmp/d.xml)"
else
	got=$(dd if=$data bs=4k skip=$((db * 16 + 2)) count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$(md5sum </tmp/p)" ] || bad "I52: data block $db of the data device does not hold the written 4 KiB"
	zero=$(dd if=/dev/zero bs=4k count=2 2>/dev/null | md5sum)
	got=$(dd if=$data bs=4k skip=$((db * 16)) count=2 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$zero" ] || bad "I52: data block $db was not zeroed before its mapping was committed"
	echo "I52: block 5 -> data block $db on disk"
fi

# --- I57: an O_DSYNC direct write (REQ_FUA) provisioning block 6.
run fio --name=fua --filename=/dev/mapper/thin --rw=write --bs=4k --size=4k \
	--offset=$((6 * 65536)) --ioengine=psync --direct=1 --sync=1 --output-format=terse >/dev/null
dirty=$(counter dirty)
cut
db=$(data_block 6)
[ -n "$db" ] || bad "I57: the FUA write's mapping is not on disk when it completes"
[ "$dirty" = 0 ] || bad "I57: metadata dirty right after the FUA write"
echo "I57: block 6 -> data block '$db' on disk"

# --- D31: INFO status commits; --noflush does not. The waker commits too
# while the metadata is dirty, so its commits are held from here through the
# reload case: every commit counted is then one a call asked for, however
# slow the kernel is.
echo "hold_periodic_commits 2" >$dbg 2>/dev/null && bad "the pool's debugfs file took a bad knob value"
echo "hold_periodic_commits 1" >$dbg || fail "holding the waker's commits"
grep -qx "hold_periodic_commits 1" $dbg || fail "the pool's debugfs file does not show the waker held"
status_commits=0 noflush_commits=0
v=10
while [ $v -lt 20 ]; do
	run dd if=/tmp/p of=/dev/mapper/thin bs=4k seek=$((v * 16)) count=1 oflag=direct 2>/dev/null
	before=$(counter commits)
	if [ $((v % 2)) = 0 ]; then
		dmsetup status pool >/dev/null || fail "status"
	else
		dmsetup status --noflush pool >/dev/null || fail "status --noflush"
	fi
	own=$(($(counter commits) - before))
	if [ $((v % 2)) = 0 ]; then
		[ $own = 1 ] && status_commits=$((status_commits + 1))
		echo "status: commits of its own $own"
	else
		[ $own = 0 ] && noflush_commits=$((noflush_commits + 1))
		echo "status --noflush: commits of its own $own"
	fi
	v=$((v + 1))
done
echo "D31: INFO status committed in $status_commits/5 rounds, --noflush did not in $noflush_commits/5"
[ $status_commits = 5 ] || bad "D31: an INFO status did not commit"
[ $noflush_commits = 5 ] || bad "D31: a --noflush status committed"
# And on disk: a mapping made just before an INFO status is in the copy.
run dd if=/tmp/p of=/dev/mapper/thin bs=4k seek=$((30 * 16)) count=1 oflag=direct 2>/dev/null
run dmsetup status pool >/dev/null
cut
[ -n "$(data_block 30)" ] || bad "D31: block 30 not on disk after an INFO status"

# --- Reload: lvextend builds the new table while the old one still takes
# writes; a flush through the new table after the swap must commit them. With
# the waker held, every round's write is still uncommitted when the flush
# comes.
reload_rounds=0 reload_ok=0
v=40
while [ $v -lt 50 ]; do
	run dmsetup reload thin --table "$(thin_table pool 9 131072)"
	run dd if=/tmp/p of=/dev/mapper/thin bs=4k seek=$((v * 16)) count=1 oflag=direct 2>/dev/null
	run dmsetup suspend thin
	run dmsetup resume thin
	changes=$(counter changes)
	if [ "$(counter committed)" -lt "$changes" ]; then
		# An empty flush (fsync of the device, nothing written through it).
		run dd if=/dev/null of=/dev/mapper/thin conv=fsync,notrunc 2>/dev/null
		committed=$(counter committed)
		reload_rounds=$((reload_rounds + 1))
		[ "$committed" -ge "$changes" ] && reload_ok=$((reload_ok + 1))
		echo "reload: changes $changes, committed after the flush $committed"
	fi
	v=$((v + 1))
done
echo "hold_periodic_commits 0" >$dbg || fail "releasing the waker's commits"
echo "reload: the flush committed the old table's write in $reload_ok/$reload_rounds rounds"
[ $reload_rounds = 10 ] || bad "reload: the write was committed before the flush in $((10 - reload_rounds)) of 10 rounds, with the waker held"
[ $reload_ok = $reload_rounds ] || bad "reload: a flush through the new table completed before the old table's write was committed"

run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta
run dmsetup remove meta

# Control: the same fsync on a pool whose data device has a write cache
# (virtio, "write back"), from which the thin inherits flush support.
echo "vdb write_cache: $(cat /sys/block/vdb/queue/write_cache)"
wipe /dev/ram0
run dmsetup create meta --table "0 32768 linear /dev/ram0 0"
mkpool pool $meta /dev/vdb 2097152
run dmsetup message pool 0 "create_thin 9"
mkthin thin pool 9 131072
run dd if=/tmp/p of=/dev/mapper/thin bs=4k seek=$((5 * 16 + 2)) count=1 oflag=direct conv=fsync 2>/dev/null
cut
[ -n "$(data_block 5)" ] || bad "I52 (control, data on vdb): block 5 not on disk after fsync"
run fio --name=fua --filename=/dev/mapper/thin --rw=write --bs=4k --size=4k \
	--offset=$((6 * 65536)) --ioengine=psync --direct=1 --sync=1 --output-format=terse >/dev/null
cut
[ -n "$(data_block 6)" ] || bad "I57 (control, data on vdb): block 6 not on disk after the FUA write"
echo "control on vdb: block 5 -> $(data_block 5), block 6 -> $(data_block 6)"
run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove meta
[ $failed = 0 ] || fail "$failed checks failed"
