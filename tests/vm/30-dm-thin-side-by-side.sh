# SPDX-License-Identifier: GPL-2.0
# The C dm-thin loads beside rthin (for side-by-side runs) and its pools pass
# thin_check: the reference we compare against works in this VM.
. /rthin/tests/lib.sh

run modprobe dm-thin-pool
dmsetup targets | grep -q '^thin-pool ' || fail "thin-pool did not register"
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0 1 skip_block_zeroing"
run dmsetup message cpool 0 "create_thin 1"
run dmsetup create cthin --table "0 $((64 * 2048)) thin /dev/mapper/cpool 1"
run fio --name=verify --filename=/dev/mapper/cthin --rw=randwrite --bs=4k --size=16M \
	--ioengine=psync --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=terse >/tmp/fio.out
dmsetup status cpool
run dmsetup remove cthin
run dmsetup remove cpool
run thin_check $meta
