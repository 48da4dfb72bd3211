# SPDX-License-Identifier: GPL-2.0
# Until thin mapping lands, a thin volume passes I/O through to the pool's
# data device unchanged; tables read back as dm-thin prints them, fio verifies.
. /rthin/tests/lib.sh

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
wipe $meta
run dmsetup create pool --table "0 $size rthin-pool $meta $data 128 0"
run dmsetup message pool 0 "create_thin 1"
run dmsetup create thin --table "0 $size rthin /dev/mapper/pool 1"

table=$(dmsetup table pool)
echo "$table"
[ "$table" = "0 $size rthin-pool 1:0 1:1 128 0 0 " ] || fail "unexpected pool table: $table"
table=$(dmsetup table thin)
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
[ "$table" = "0 $size rthin $pool_dev 1" ] || fail "unexpected thin table: $table"

# A pattern written through the thin volume lands at the same place on the data device.
run dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 2>/dev/null
run dd if=/tmp/pattern of=/dev/mapper/thin bs=64k seek=3 oflag=direct 2>/dev/null
want=$(md5sum </tmp/pattern)
got=$(dd if=$data bs=64k skip=3 count=16 2>/dev/null | md5sum)
[ "$want" = "$got" ] || fail "data device does not hold what was written"

run fio --name=verify --filename=/dev/mapper/thin --rw=randwrite --bs=4k --size=32M \
	--ioengine=psync --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
	--randrepeat=1 --output-format=terse >/tmp/fio.out
run dmsetup remove thin
run dmsetup remove pool
