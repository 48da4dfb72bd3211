# SPDX-License-Identifier: GPL-2.0
# External origin (thin table "<pool> <id> <origin>"): unprovisioned blocks
# read from the origin up to its end and as zeroes after it; a partial write
# provisions a block filled from the origin (the part past its end zeroed);
# the origin itself is never written. The table line names the origin.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
wipe $meta
run dd if=/dev/urandom of=/dev/ram2 bs=1M count=8 2>/dev/null
# The origin ends 32 KiB into block 96 (64 KiB blocks).
osize=$((96 * 128 + 64))
run dmsetup create origin --table "0 $osize linear /dev/ram2 0"
openpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
vol=$((16 * 2048))
run dmsetup create thin --table "0 $vol rthin /dev/mapper/pool 1 /dev/mapper/origin"
table=$(dmsetup table thin)
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
origin_dev=$(dmsetup info -c --noheadings -o major,minor origin | tr -d ' ')
[ "$table" = "0 $vol rthin $pool_dev 1 $origin_dev" ] || fail "unexpected thin table: $table"

sum() { dd if="$1" bs=512 skip="$2" count="$3" iflag=direct 2>/dev/null | md5sum; }
zeroes() { dd if=/dev/zero bs=512 count="$1" 2>/dev/null | md5sum; }
origin_sum=$(sum /dev/ram2 0 $osize)
[ "$(sum /dev/mapper/thin 0 $osize)" = "$origin_sum" ] || fail "unprovisioned blocks do not show the origin"
[ "$(sum /dev/mapper/thin $osize 64)" = "$(zeroes 64)" ] || fail "the tail of the origin's last block is not zero"
[ "$(sum /dev/mapper/thin $((97 * 128)) 1024)" = "$(zeroes 1024)" ] || fail "blocks past the origin are not zero"

# 4 KiB into block 3 and into block 96 (the origin's last, partial block).
run dd if=/dev/urandom of=/tmp/w bs=4k count=2 2>/dev/null
run dd if=/tmp/w of=/dev/mapper/thin bs=4k count=1 seek=$((3 * 16 + 2)) oflag=direct 2>/dev/null
run dd if=/tmp/w of=/dev/mapper/thin bs=4k skip=1 count=1 seek=$((96 * 16 + 12)) oflag=direct 2>/dev/null
run dd if=/dev/ram2 of=/tmp/want bs=512 count=$osize iflag=direct 2>/dev/null
run dd if=/dev/zero of=/tmp/want bs=512 seek=$osize count=64 conv=notrunc 2>/dev/null
run dd if=/tmp/w of=/tmp/want bs=4k count=1 seek=$((3 * 16 + 2)) conv=notrunc 2>/dev/null
run dd if=/tmp/w of=/tmp/want bs=4k skip=1 count=1 seek=$((96 * 16 + 12)) conv=notrunc 2>/dev/null
[ "$(sum /dev/mapper/thin 0 $((97 * 128)))" = "$(md5sum </tmp/want)" ] ||
	fail "provisioned blocks do not hold the origin's data plus the writes"
[ "$(sum /dev/ram2 0 $osize)" = "$origin_sum" ] || fail "the origin was written"
status=$(dmsetup status thin)
echo "$status"
[ "$status" = "0 $vol rthin 256 $((97 * 128 - 1))" ] || fail "unexpected thin status: $status"

run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove origin
run thin_check $meta
