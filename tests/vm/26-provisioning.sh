# SPDX-License-Identifier: GPL-2.0
# Provisioning under concurrency and without zeroing: 16 concurrent 4 KiB
# writes into one new block allocate exactly one block and all read back
# (E36), and so do concurrent fio jobs over 64 new blocks; with
# skip_block_zeroing the rest of a new block shows the data device's old
# bytes at that block (E35), while breaking sharing still copies the whole
# block (F40).
. /rthin/tests/lib.sh

use_impl rthin

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
vol=$((64 * 2048)) # 64 MiB
# mapped: thin status word 4 (mapped sectors); used: pool data blocks used.
mapped() { dmsetup status "$1" | awk '{ print $4 }'; }
used() { dmsetup status pool | awk '{ split($6, a, "/"); print a[1] }'; }
# data_block DEV V: where thin DEV maps virtual block V, from a dump of a
# copy of the metadata taken after a commit (INFO status commits).
data_block() {
	dmsetup status pool >/dev/null
	dd if=$meta of=/tmp/m.img bs=1M count=16 iflag=direct 2>/dev/null
	# (one device: no <def>/<ref> for subtrees shared with others)
	thin_dump --dev-id "$1" /tmp/m.img >/tmp/d.xml 2>&1 || fail "thin_dump: $(cat /tmp/d.xml)"
	tr '"' ' ' </tmp/d.xml | awk -v v="$2" '
		$1 == "<single_mapping" && $3 == v { print $5 }
		$1 == "<range_mapping" && v >= $3 && v < $3 + $7 { print $5 + v - $3 }'
}

# --- E36 on a zeroing pool.
run dd if=/dev/urandom of=$data bs=1M count=8 2>/dev/null
mkpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $vol
run dd if=/dev/urandom of=/tmp/pieces bs=4k count=16 2>/dev/null
m0=$(mapped thin) u0=$(used)
pids=
i=0
while [ $i -lt 16 ]; do
	dd if=/tmp/pieces of=/dev/mapper/thin bs=4k skip=$i seek=$((20 * 16 + i)) count=1 \
		oflag=direct 2>/dev/null &
	pids="$pids $!"
	i=$((i + 1))
done
for p in $pids; do
	wait $p || fail "E36: one of the 16 concurrent writes failed"
done
m1=$(mapped thin) u1=$(used)
echo "E36: mapped sectors $m0 -> $m1, used blocks $u0 -> $u1"
[ $((m1 - m0)) = 128 ] || fail "E36: thin mapped count grew by $((m1 - m0)) sectors, expected 128"
[ $((u1 - u0)) = 1 ] || fail "E36: pool used data grew by $((u1 - u0)) blocks, expected 1"
got=$(dd if=/dev/mapper/thin bs=4k skip=$((20 * 16)) count=16 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/pieces)" ] || fail "E36: the 16 pieces do not all read back"

# Concurrent jobs over 64 new blocks (4 jobs x 16 blocks, 8 I/Os in flight
# each, random 4 KiB pieces): exactly 64 blocks, every piece verified.
run fio --name=par --filename=/dev/mapper/thin --rw=randwrite --bs=4k --size=1M \
	--offset=2M --offset_increment=1M --numjobs=4 --iodepth=8 --ioengine=libaio \
	--direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting \
	--output-format=terse >/tmp/fio.out
m2=$(mapped thin) u2=$(used)
echo "E36 (fio): mapped sectors $m1 -> $m2, used blocks $u1 -> $u2"
[ $((m2 - m1)) = $((64 * 128)) ] || fail "E36: fio jobs mapped $((m2 - m1)) sectors, expected $((64 * 128))"
[ $((u2 - u1)) = 64 ] || fail "E36: fio jobs used $((u2 - u1)) blocks, expected 64"
run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta

# --- E35 and F40 on a skip_block_zeroing pool, over known old bytes.
run dd if=/dev/urandom of=/tmp/old bs=1M count=8 2>/dev/null
run dd if=/tmp/old of=$data bs=1M oflag=direct 2>/dev/null
mkpool pool $meta $data $size skip_block_zeroing
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $vol
run dd if=/dev/urandom of=/tmp/small bs=4k count=1 2>/dev/null
run dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=$((7 * 16 + 1)) count=1 oflag=direct 2>/dev/null
db=$(data_block 1 7)
[ -n "$db" ] || fail "E35: no mapping for block 7"
[ $db -lt 128 ] || fail "E35: data block $db lies outside the 8 MiB of known old bytes"
# Expected block: the old bytes at data block db, with piece 1 replaced.
run dd if=/tmp/old of=/tmp/want bs=64k skip=$db count=1 2>/dev/null
run dd if=/tmp/small of=/tmp/want bs=4k seek=1 conv=notrunc 2>/dev/null
got=$(dd if=/dev/mapper/thin bs=64k skip=7 count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/want)" ] || fail "E35: the rest of the new block is not the data device's old bytes (data block $db)"
echo "E35: block 7 -> data block $db keeps the old bytes around the write"

# F40: a 4 KiB write into a shared block copies the rest, zeroing or not.
run dd if=/dev/urandom of=/tmp/a bs=64k count=4 2>/dev/null
run dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=40 oflag=direct 2>/dev/null
snap pool 2 1 thin
mkthin snap pool 2 $vol
old_db=$(data_block 1 41)
run dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=$((41 * 16 + 9)) count=1 oflag=direct 2>/dev/null
new_db=$(data_block 1 41)
echo "F40: block 41 moved from data block $old_db to $new_db"
[ -n "$old_db" ] || fail "F40: block 41 not mapped before the write"
[ -n "$new_db" ] && [ "$new_db" != "$old_db" ] || fail "F40: the write into a shared block did not break sharing"
run dd if=/tmp/a of=/tmp/want bs=64k skip=1 count=1 2>/dev/null
run dd if=/tmp/small of=/tmp/want bs=4k seek=9 conv=notrunc 2>/dev/null
got=$(dd if=/dev/mapper/thin bs=64k skip=41 count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/want)" ] || fail "F40: with skip_block_zeroing the copied block does not hold the snapshot's data around the write"
got=$(dd if=/dev/mapper/snap bs=64k skip=40 count=4 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "F40: the snapshot changed"

run dmsetup remove snap
run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta
