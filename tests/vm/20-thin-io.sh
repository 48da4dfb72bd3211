# SPDX-License-Identifier: GPL-2.0
# The thin I/O path in one pass: tables read back as dm-thin prints them;
# writes provision blocks (status counts them), holes read as zeroes, data
# reads back through the mapping (not at the same place on the data device),
# fio verifies random 4k writes, a flush commits, and thin_check accepts the
# metadata afterwards.
. /rthin/tests/lib.sh

use_impl rthin

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
dd if=/dev/urandom of=$data bs=1M count=8 2>/dev/null # stale data a new block must not show
mkpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $size

table=$(dmsetup table pool)
echo "$table"
[ "$table" = "0 $size rthin-pool 1:0 1:1 128 0 0 " ] || fail "unexpected pool table: $table"
table=$(dmsetup table thin)
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
[ "$table" = "0 $size rthin $pool_dev 1" ] || fail "unexpected thin table: $table"

# Sixteen 64 KiB blocks at block 3, then a 4 KiB write into block 40 (its
# other 60 KiB must read as zeroes, not as the data device's stale bytes).
run dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 2>/dev/null
run dd if=/tmp/pattern of=/dev/mapper/thin bs=64k seek=3 oflag=direct 2>/dev/null
run dd if=/dev/urandom of=/tmp/small bs=4k count=1 2>/dev/null
run dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=$((40 * 16 + 5)) oflag=direct 2>/dev/null
want=$(md5sum </tmp/pattern)
got=$(dd if=/dev/mapper/thin bs=64k skip=3 count=16 iflag=direct 2>/dev/null | md5sum)
[ "$want" = "$got" ] || fail "the thin volume does not read back what was written"
got=$(dd if=/dev/mapper/thin bs=4k skip=$((40 * 16 + 5)) count=1 iflag=direct 2>/dev/null | md5sum)
[ "$(md5sum </tmp/small)" = "$got" ] || fail "the 4 KiB write does not read back"
zero=$(dd if=/dev/zero bs=4k count=5 2>/dev/null | md5sum)
got=$(dd if=/dev/mapper/thin bs=4k skip=$((40 * 16)) count=5 iflag=direct 2>/dev/null | md5sum)
[ "$zero" = "$got" ] || fail "a newly provisioned block shows old data instead of zeroes"
zero=$(dd if=/dev/zero bs=64k count=3 2>/dev/null | md5sum)
got=$(dd if=/dev/mapper/thin bs=64k count=3 iflag=direct 2>/dev/null | md5sum)
[ "$zero" = "$got" ] || fail "unprovisioned blocks do not read as zeroes"

# 17 blocks mapped; the highest mapped sector is the last of block 40.
status=$(dmsetup status thin)
echo "$status"
[ "$status" = "0 $size rthin $((17 * 128)) $((41 * 128 - 1))" ] || fail "unexpected thin status: $status"
status=$(dmsetup status pool)
echo "$status"
case $status in
*" 17/"*) ;;
*) fail "pool status does not count 17 used data blocks: $status" ;;
esac

# The counters in debugfs: 17 provisions (16 of them whole-block writes that
# skip zeroing), and cached mappings serve reads in the map call.
run dd if=/dev/mapper/thin of=/dev/null bs=64k skip=3 count=16 iflag=direct 2>/dev/null
# (named by the devices' major:minor, as dm names them in the kernel log)
thin_dev=$(dmsetup info -c --noheadings -o major,minor thin | tr -d ' ')
stats=/sys/kernel/debug/rthin-$pool_dev
counters=$(cat $stats/$thin_dev) || fail "no debugfs counters in $stats"
echo "$counters"
counter() { echo "$counters" | awk -v k="$1" '$1 == k { print $2 }'; }
[ "$(counter provisioned)" = 17 ] || fail "expected 17 provisioned blocks"
[ "$(counter sharing_broken)" = 0 ] || fail "no block was shared"
[ "$(counter fast_remaps)" -ge 16 ] || fail "reads of mapped blocks did not take the fast path"
grep -q '^commits ' $stats/pool || fail "no pool counters"
# A live reload of the thin (as lvextend does) builds the new table while the
# old one holds the device's counters file: the counters go on across it.
run dmsetup reload thin --table "$(thin_table pool 1 $size)"
run dmsetup resume thin
counters=$(cat $stats/$thin_dev) || fail "the counters file went with the reload"
[ "$(counter provisioned)" = 17 ] || fail "the counters restarted at the reload: $counters"

# Without any flush or status call (status commits), the waker commits
# within a second or two, as dm-thin's COMMIT_PERIOD: the on-disk metadata
# then shows an 18th mapped block. (thin_dump opens its device exclusively:
# read a copy, with direct I/O: the pool writes the device underneath its
# page cache, which a buffered copy would keep serving after the first.)
run dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=$((50 * 16)) oflag=direct 2>/dev/null
committed=
for i in 1 2 3 4 5 6 7 8 9 10; do
	sleep 1
	run dd if=$meta of=/tmp/meta.img bs=1M iflag=direct 2>/dev/null
	run thin_dump /tmp/meta.img >/tmp/dump.xml
	if grep -q 'dev_id="1" mapped_blocks="18"' /tmp/dump.xml; then
		committed=$i
		break
	fi
done
rm -f /tmp/meta.img
[ -n "$committed" ] || fail "no periodic commit in 10 s: $(grep dev_id /tmp/dump.xml)"
echo "committed by the waker within $committed s"

run fio --name=verify --filename=/dev/mapper/thin --rw=randwrite --bs=4k --size=32M \
	--ioengine=psync --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
	--randrepeat=1 --output-format=terse >/tmp/fio.out
# A flush commits: the transaction shows in the metadata at once.
run sync
run blockdev --flushbufs /dev/mapper/thin
run dmsetup remove thin
run dmsetup remove pool
# The pool object went with its last table (its debugfs directory with it).
[ ! -e "$stats" ] || fail "the pool object outlived its tables: $stats is still there"
run thin_check $meta
