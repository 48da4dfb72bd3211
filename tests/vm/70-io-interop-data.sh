# SPDX-License-Identifier: GPL-2.0
# Data moves with the metadata between the C dm-thin and rthin. The C
# dm-thin formats a pool and fills it (two thins, a snapshot, copy-on-write
# after it, fio-verified patterns); rthin-pool activates it and shows the
# same bytes, status and mapped counts, then writes more (new blocks,
# copy-on-write, a new thin, a new snapshot); back under the C dm-thin all
# of it reads as expected. thin_check after each step. This test is
# cross-implementation by nature: it ignores RTHIN_TEST_IMPLS.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
MB=2048
BLK=65536
VOL=$((64 * MB))
LEN=$((128 * MB))

# activate IMPL IDS...: the pool and thins tN for the given ids under IMPL.
activate() {
	use_impl "$1"
	shift
	openpool pool $META $DATA $LEN
	for id in "$@"; do
		mkthin t$id pool $id $VOL
	done
}
deactivate() {
	for id in "$@"; do
		run dmsetup remove t$id
	done
	run dmsetup remove pool
	check_meta $META
}
# compare IDS...: each active tN against its model /tmp/mN.
compare() {
	for id in "$@"; do
		same /dev/mapper/t$id /tmp/m$id "$IMPL: thin $id"
	done
}
# statuses IDS...: "id:thin status" words and the pool's used data blocks.
statuses() {
	for id in "$@"; do
		echo "$id:$(info t$id | tr ' ' _)"
	done
	echo "used:$(data_used pool)"
}

# ---- C dm-thin formats and fills ----
use_impl c
fill $DATA 128 132
mkpool pool $META $DATA $LEN
run dmsetup message pool 0 "create_thin 1"
run dmsetup message pool 0 "create_thin 2"
mkthin t1 pool 1 $VOL
mkthin t2 pool 2 $VOL
fio_write a1 /dev/mapper/t1 0 8M 64k randwrite 31
fio_write a2 /dev/mapper/t1 8M 4M 4k randwrite 32
fio_write b1 /dev/mapper/t2 0 8M 1M write 33
model_new /tmp/m1 16
capture /dev/mapper/t1 /tmp/m1 16
model_new /tmp/m2 16
capture /dev/mapper/t2 /tmp/m2 16
# Partial blocks of pattern A beyond the fio ranges.
put /dev/mapper/t1 /tmp/m1 A $((200 * BLK + 8192)) 4096 1
put /dev/mapper/t2 /tmp/m2 A $((150 * BLK + 61440)) 4096 1
snap pool 3 1 t1
cp /tmp/m1 /tmp/m3
mkthin t3 pool 3 $VOL
# After the snapshot: copy-on-write in the origin and in the snapshot.
put /dev/mapper/t1 /tmp/m1 B $((3 * BLK + 4096)) 4096 4
put /dev/mapper/t3 /tmp/m3 C $((5 * BLK)) 65536 2
put /dev/mapper/t3 /tmp/m3 C $((200 * BLK)) 4096 1
compare 1 2 3
c_status=$(statuses 1 2 3)
echo "C: $c_status"
deactivate 1 2 3
thin_dump $META >/tmp/c.xml || fail "thin_dump"

# ---- rthin-pool opens it ----
activate rthin 1 2 3
r_status=$(statuses 1 2 3)
echo "rthin: $r_status"
[ "$r_status" = "$c_status" ] || fail "statuses under rthin '$r_status', under C '$c_status'"
compare 1 2 3
fio_verify b1 /dev/mapper/t2 0 8M 1M write 33
# New writes under rthin: fresh blocks, copy-on-write of blocks shared by
# 1 and 3, overwrite of exclusive blocks, a new thin and a new snapshot.
put /dev/mapper/t1 /tmp/m1 D $((14 * 1048576)) 1048576 1
put /dev/mapper/t1 /tmp/m1 D $((7 * BLK + 12288)) 4096 1
put /dev/mapper/t3 /tmp/m3 D $((9 * BLK)) 65536 1
put /dev/mapper/t2 /tmp/m2 D $((150 * BLK)) 4096 2
run dmsetup message pool 0 "create_thin 4"
mkthin t4 pool 4 $VOL
model_new /tmp/m4 16
put /dev/mapper/t4 /tmp/m4 E 0 65536 8
put /dev/mapper/t4 /tmp/m4 E $((100 * BLK + 4096)) 4096 1
snap pool 5 2 t2
cp /tmp/m2 /tmp/m5
mkthin t5 pool 5 $VOL
put /dev/mapper/t5 /tmp/m5 F 0 4096 1
compare 1 2 3 4 5
r_status=$(statuses 1 2 3 4 5)
echo "rthin after writes: $r_status"
deactivate 1 2 3 4 5

# ---- back to the C dm-thin ----
activate c 1 2 3 4 5
c_status=$(statuses 1 2 3 4 5)
echo "C again: $c_status"
[ "$c_status" = "$r_status" ] || fail "statuses under C '$c_status', under rthin before '$r_status'"
compare 1 2 3 4 5
fio_verify b1 /dev/mapper/t2 0 8M 1M write 33
# And C can go on writing over rthin's mappings.
put /dev/mapper/t4 /tmp/m4 G $((2 * BLK + 4096)) 4096 1
put /dev/mapper/t5 /tmp/m5 G 0 65536 1
compare 4 5
deactivate 1 2 3 4 5
echo "all passed"
