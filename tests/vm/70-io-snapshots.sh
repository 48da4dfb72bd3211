# SPDX-License-Identifier: GPL-2.0
# Snapshot data semantics, on the C dm-thin and on rthin: an origin written
# under fio verify; create_snap with the origin suspended (as LVM does);
# different patterns written to origin and snapshot (partial-block copy-on-
# write, whole-block overwrite, fresh blocks), each device checked against a
# model of what it must hold; a snapshot of the snapshot; exact pool usage
# after every step (copy-on-write allocates one block per shared block
# written, however many devices share it); deletes and discards give the
# space back; 100 snapshots of one volume, then writes to the origin; thin_check.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
MB=2048
BLK=65536
VOL=$((64 * MB))

# at BLOCK PIECE: byte offset of 4 KiB piece PIECE of 64 KiB block BLOCK.
at() { echo $(($1 * BLK + $2 * 4096)); }

scenario() {
	fill $DATA 128 132
	mkpool pool $META $DATA $((128 * MB))
	run dmsetup message pool 0 "create_thin 1"
	mkthin origin pool 1 $VOL
	O=/dev/mapper/origin
	# Blocks 0-255 whole, 256-383 from 4 KiB pieces.
	fio_write o64k $O 0 16M 64k randwrite 21
	fio_write o4k $O 16M 8M 4k randwrite 22
	expect_used pool 384 "origin written"
	capture $O /tmp/mo 32

	# ---- snapshot 2 of the active origin ----
	snap pool 2 1 origin
	mkthin s2 pool 2 $VOL
	S2=/dev/mapper/s2
	cp /tmp/mo /tmp/ms2
	expect_used pool 384 "after create_snap"
	expect_thin s2 "$(thin_status_for 384 383)" "snapshot"
	fio_verify o64k $S2 0 16M 64k randwrite 21
	fio_verify o4k $S2 16M 8M 4k randwrite 22
	fio_verify o64k $O 0 16M 64k randwrite 21

	# Origin: 4 KiB into shared blocks 0,4,..,124 (copy the other 60 KiB),
	# all of shared block 300, and 1 MiB into unmapped blocks 384-399.
	k=0
	while [ $k -lt 32 ]; do
		put $O /tmp/mo B "$(at $((4 * k)) $((k % 16)))" 4096 1
		k=$((k + 1))
	done
	put $O /tmp/mo B "$(at 300 0)" 65536 1
	put $O /tmp/mo B $((24 * 1048576)) 1048576 1
	# Snapshot: 4 KiB into shared blocks 1,5,..,125, and into blocks 8 and
	# 300 that the origin has already broken away from.
	k=0
	while [ $k -lt 32 ]; do
		put $S2 /tmp/ms2 C "$(at $((4 * k + 1)) $(((k + 5) % 16)))" 4096 1
		k=$((k + 1))
	done
	put $S2 /tmp/ms2 C "$(at 8 9)" 4096 1
	put $S2 /tmp/ms2 C "$(at 300 7)" 4096 1
	same $O /tmp/mo "origin after diverging writes"
	same $S2 /tmp/ms2 "snapshot after diverging writes"
	expect_thin origin "$(thin_status_for 400 399)" "origin after writes"
	expect_thin s2 "$(thin_status_for 384 383)" "snapshot after writes"
	# 384 + 65 blocks written on either side (33 origin, 34 snapshot, 2 on
	# both) + 16 fresh.
	expect_used pool 465 "after diverging writes"

	# ---- snapshot 3 of snapshot 2 ----
	snap pool 3 2 s2
	mkthin s3 pool 3 $VOL
	S3=/dev/mapper/s3
	cp /tmp/ms2 /tmp/ms3
	same $S3 /tmp/ms3 "snapshot of snapshot"
	put $S3 /tmp/ms3 D "$(at 1 3)" 4096 1
	put $S3 /tmp/ms3 D "$(at 2 0)" 65536 1
	put $S3 /tmp/ms3 D $((26 * 1048576)) 1048576 1
	expect_used pool 483 "after writes to the snapshot of the snapshot"
	# Snapshot 2 rewrites its block 1, which only it references now that 3
	# has its own copy (dm-thin copies it once more and frees the old one):
	# no block more.
	put $S2 /tmp/ms2 E "$(at 1 3)" 4096 1
	expect_used pool 483 "after snapshot 2 rewrote block 1 that 3 had copied"
	same $O /tmp/mo "origin after snapshot-of-snapshot writes"
	same $S2 /tmp/ms2 "snapshot 2 after snapshot-of-snapshot writes"
	same $S3 /tmp/ms3 "snapshot 3"
	expect_thin s3 "$(thin_status_for 400 431)" "snapshot 3"

	# ---- deletes give space back ----
	run dmsetup remove s3
	expect_error "Device or resource busy" dmsetup message pool 0 "delete 2"
	run dmsetup message pool 0 "delete 3"
	# 3 alone held its blocks 1, 2 and 416-431.
	expect_used pool 465 "after deleting snapshot 3"
	same $S2 /tmp/ms2 "snapshot 2 after deleting 3"
	run dmsetup remove s2
	run dmsetup message pool 0 "delete 2"
	expect_used pool 400 "after deleting snapshot 2"
	same $O /tmp/mo "origin after deleting its snapshots"
	run blkdiscard -o $((24 * 1048576)) -l 1048576 $O
	dd if=/dev/zero of=/tmp/mo bs=1M seek=24 count=1 conv=notrunc 2>/dev/null
	expect_used pool 384 "after discarding 1 MiB of the origin"
	expect_thin origin "$(thin_status_for 384 383)" "origin after discard"
	same $O /tmp/mo "origin after discard"

	# ---- 100 snapshots of one volume ----
	# One suspend of the origin around all hundred (as for a batch).
	run dmsetup suspend origin
	i=100
	while [ $i -lt 200 ]; do
		snap pool $i 1
		i=$((i + 1))
	done
	run dmsetup resume origin
	expect_used pool 384 "after 100 snapshots"
	cp /tmp/mo /tmp/mo100
	k=0
	while [ $k -lt 16 ]; do
		put $O /tmp/mo F "$(at $k $k)" 4096 1
		k=$((k + 1))
	done
	put $O /tmp/mo F "$(at 20 0)" 65536 1
	put $O /tmp/mo F $((28 * 1048576)) 1048576 1
	same $O /tmp/mo "origin written after 100 snapshots"
	# One copy per shared block written, not one per snapshot.
	expect_used pool $((384 + 17 + 16)) "origin written after 100 snapshots"
	for i in 100 150 199; do
		mkthin snap$i pool $i $VOL
		same /dev/mapper/snap$i /tmp/mo100 "snapshot $i of 100"
		expect_thin snap$i "$(thin_status_for 384 383)" "snapshot $i of 100"
		run dmsetup remove snap$i
	done
	i=100
	while [ $i -lt 200 ]; do
		run dmsetup message pool 0 "delete $i"
		i=$((i + 1))
	done
	expect_used pool 400 "after deleting the 100 snapshots"
	same $O /tmp/mo "origin after deleting the 100 snapshots"
	run dmsetup remove origin
	run dmsetup remove pool
	check_meta $META
	thin_dump $META >/tmp/dump.xml || fail "thin_dump"
	[ "$(grep -c '<device ' /tmp/dump.xml)" = 1 ] || fail "thin_dump devices: $(grep '<device ' /tmp/dump.xml | head)"
}

for_each_impl scenario
impl_verdict
