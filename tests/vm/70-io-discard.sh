# SPDX-License-Identifier: GPL-2.0
# Discards on a thin volume, on the C dm-thin and on rthin, with passdown
# (the default) and with no_discard_passdown: whole blocks are unmapped
# (thin and pool counts drop) and read back as zeroes; a discard that covers
# part of a block leaves it mapped and intact; passdown discards exactly the
# freed blocks on the data device (brd reads them back as zeroes), and no
# block still shared with a snapshot; without passdown the data device
# keeps the bytes. With ignore_discard, discards are refused. thin_check.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
MB=2048
BLK=65536
T=/dev/mapper/thin

# data_block_is DBLOCK zero|FILE OFF WHAT: the data device's block DBLOCK
# holds zeroes, or the 64 KiB at byte OFF of FILE.
data_block_is() {
	dd if=$DATA of=/tmp/db bs=$BLK skip="$1" count=1 iflag=direct 2>/dev/null || fail "reading $DATA"
	if [ "$2" = zero ]; then
		[ "$(tr -d '\000' </tmp/db | wc -c)" = 0 ] || fail "$4: data block $1 was not discarded"
	else
		dd if="$2" of=/tmp/dbm bs=$BLK skip=$(($3 / BLK)) count=1 2>/dev/null
		cmp -s /tmp/db /tmp/dbm || fail "$4: data block $1 changed on the data device"
	fi
}

# discard_case "" | no_discard_passdown
discard_case() {
	local feat=$1 want dl
	fill $DATA 128 132
	mkpool pool $META $DATA $((128 * MB)) $feat
	want=discard_passdown
	# dm-thin turns passdown off when the data device cannot discard.
	if [ -n "$feat" ] || [ "$(cat /sys/block/ram1/queue/discard_max_bytes)" = 0 ]; then
		want=no_discard_passdown
	fi
	[ "$(pool_field pool 6)" = $want ] || fail "pool discard field: $(info pool), expected $want"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((64 * MB))
	dm=dm-$(dmsetup info -c --noheadings -o minor thin | tr -d ' ')
	[ "$(cat /sys/block/$dm/queue/discard_granularity)" = $BLK ] ||
		fail "thin discard_granularity $(cat /sys/block/$dm/queue/discard_granularity), expected $BLK"
	[ "$(cat /sys/block/$dm/queue/discard_max_bytes)" = $((1024 * BLK)) ] ||
		fail "thin discard_max_bytes $(cat /sys/block/$dm/queue/discard_max_bytes), expected $((1024 * BLK))"

	fio_write d1 $T 0 16M 64k write 51
	capture $T /tmp/md 16
	cp /tmp/md /tmp/md.orig
	expect_used pool 256 "written"
	live_mappings pool $META 1 >/tmp/map1
	[ "$(wc -l </tmp/map1)" = 256 ] || fail "thin_dump -m shows $(wc -l </tmp/map1) mappings, expected 256"

	# Whole blocks 16-47.
	run blkdiscard -o $((1 * 1048576)) -l $((2 * 1048576)) $T
	dd if=/dev/zero of=/tmp/md bs=1M seek=1 count=2 conv=notrunc 2>/dev/null
	expect_thin thin "$(thin_status_for 224 255)" "after discarding blocks 16-47"
	expect_used pool 224 "after discarding blocks 16-47"
	same $T /tmp/md "after discarding blocks 16-47"
	awk '$1 >= 16 && $1 < 48 { print $2 }' /tmp/map1 >/tmp/freed
	[ "$(wc -l </tmp/freed)" = 32 ] || fail "freed blocks: $(cat /tmp/freed)"
	for d in $(cat /tmp/freed); do
		v=$(awk -v d="$d" '$2 == d { print $1 }' /tmp/map1)
		if [ "$want" = discard_passdown ]; then
			data_block_is "$d" zero x "passdown of vblock $v"
		else
			data_block_is "$d" /tmp/md.orig $((v * BLK)) "$feat, vblock $v"
		fi
	done
	echo "ok: freed data blocks $( [ $want = discard_passdown ] && echo discarded || echo untouched) on $DATA"

	# 4K..132K of MiB 4: only block 65 lies wholly inside.
	run blkdiscard -o $((4 * 1048576 + 4096)) -l $((2 * BLK)) $T
	dd if=/dev/zero of=/tmp/md bs=$BLK seek=65 count=1 conv=notrunc 2>/dev/null
	# 8 KiB inside block 97: nothing.
	run blkdiscard -o $((97 * BLK + 4096)) -l 8192 $T
	expect_thin thin "$(thin_status_for 223 255)" "after partial-block discards"
	expect_used pool 223 "after partial-block discards"
	same $T /tmp/md "after partial-block discards"

	# Blocks shared with a snapshot: the origin loses them, the snapshot
	# keeps them, the data device keeps them.
	snap pool 2 1 thin
	cp /tmp/md /tmp/ms
	run blkdiscard -o $((8 * 1048576)) -l 1048576 $T
	dd if=/dev/zero of=/tmp/md bs=1M seek=8 count=1 conv=notrunc 2>/dev/null
	expect_thin thin "$(thin_status_for 207 255)" "origin after discarding shared blocks"
	expect_used pool 223 "after discarding blocks shared with a snapshot"
	same $T /tmp/md "origin after discarding shared blocks"
	mkthin s2 pool 2 $((64 * MB))
	same /dev/mapper/s2 /tmp/ms "snapshot after the origin discarded shared blocks"
	for d in $(awk '$1 >= 128 && $1 < 144 { print $2 }' /tmp/map1); do
		v=$(awk -v d="$d" '$2 == d { print $1 }' /tmp/map1)
		data_block_is "$d" /tmp/md.orig $((v * BLK)) "shared block (vblock $v) after origin discard"
	done
	echo "ok: shared blocks kept on $DATA"
	run dmsetup remove s2
	run dmsetup message pool 0 "delete 2"
	expect_used pool 207 "after deleting the snapshot"

	# Everything.
	run blkdiscard $T
	expect_thin thin "0 -" "after discarding the whole volume"
	expect_used pool 0 "after discarding the whole volume"
	zeroes $T 0 64 "after discarding the whole volume"
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
}

passdown() { discard_case ""; }
no_passdown() { discard_case no_discard_passdown; }

ignore() {
	mkpool pool $META $DATA $((128 * MB)) ignore_discard
	[ "$(pool_field pool 6)" = ignore_discard ] || fail "pool discard field: $(info pool)"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((64 * MB))
	fio_write i1 $T 0 4M 64k write 52
	dm=dm-$(dmsetup info -c --noheadings -o minor thin | tr -d ' ')
	[ "$(cat /sys/block/$dm/queue/discard_max_bytes)" = 0 ] ||
		fail "ignore_discard: thin discard_max_bytes $(cat /sys/block/$dm/queue/discard_max_bytes)"
	blkdiscard $T 2>/tmp/bd.err && fail "blkdiscard succeeded on an ignore_discard pool"
	echo "ok: blkdiscard refused: $(cat /tmp/bd.err)"
	expect_used pool 64 "after a refused discard"
	fio_verify i1 $T 0 4M 64k write 52
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
}

echo "brd discard_max_bytes: $(cat /sys/block/ram1/queue/discard_max_bytes)"
for_each_impl passdown
for_each_impl no_passdown
for_each_impl ignore
impl_verdict
