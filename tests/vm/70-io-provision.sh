# SPDX-License-Identifier: GPL-2.0
# Provisioning and reads on one thin volume, on the C dm-thin and on rthin:
# fio crc32c-verified 4 KiB random writes (partial blocks: each 64 KiB block
# is provisioned by a 4 KiB write, then filled by 15 more), 64 KiB writes
# (whole blocks) and 1 MiB writes (16 blocks per write); single 4 KiB writes
# whose 60 KiB rest must read as zeroes although the data device held other
# bytes; never-written ranges read as zeroes without provisioning; exact
# mapped counts in the thin and pool status; the same data after
# deactivation and reactivation; thin_check.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
MB=2048          # sectors per MiB
BLK=65536        # data block bytes
POOL_MIB=128

scenario() {
	# Stale bytes on the data device: zeroing (or its absence) shows.
	fill $DATA $POOL_MIB 132
	mkpool pool $META $DATA $((POOL_MIB * MB))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((128 * MB))
	T=/dev/mapper/thin
	expect_thin thin "0 -" "fresh thin"
	[ "$(data_total pool)" = $((POOL_MIB * 16)) ] || fail "data total: $(info pool)"

	# Reads of a never-written volume: zeroes, nothing provisioned.
	zeroes $T 0 128 "never written"
	expect_thin thin "0 -" "after reading everything"
	expect_used pool 0 "after reading everything"

	# [0, 16M): 4 KiB random writes covering every 4 KiB once.
	fio_write r1 $T 0 16M 4k randwrite 11
	expect_thin thin "$(thin_status_for 256 255)" "after 4k random writes"
	# [16M, 32M): whole 64 KiB blocks in random order.
	fio_write r2 $T 16M 16M 64k randwrite 12
	# [32M, 64M): 1 MiB writes.
	fio_write r3 $T 32M 32M 1M write 13
	expect_thin thin "$(thin_status_for 1024 1023)" "after 64k and 1M writes"
	expect_used pool 1024 "after 64 MiB of writes"

	# [64M, 72M): a single 4 KiB write into every other block, at a
	# different place in each; the odd blocks stay unprovisioned.
	model_new /tmp/m4 72
	k=0
	while [ $k -lt 64 ]; do
		put $T /tmp/m4 A $((64 * 1048576 + 2 * k * BLK + (k % 16) * 4096)) 4096 1
		k=$((k + 1))
	done
	# One 8 KiB write straddling blocks 125 and 126 of the range.
	put $T /tmp/m4 B $((64 * 1048576 + 126 * BLK - 4096)) 8192 1
	# 1024 + 64 blocks + block 125 (126 is even: already mapped).
	nblocks=1089
	expect_thin thin "$(thin_status_for $nblocks $((1024 + 126)))" "after 4k writes"
	expect_used pool $nblocks "after 4k writes"
	check_data
	status_before=$(info thin)

	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
	thin_dump $META >/tmp/dump.xml || fail "thin_dump"
	grep -q "dev_id=\"1\" mapped_blocks=\"$nblocks\"" /tmp/dump.xml ||
		fail "thin_dump: $(grep dev_id /tmp/dump.xml)"

	# Reactivated: the same mappings and data.
	openpool pool $META $DATA $((POOL_MIB * MB))
	mkthin thin pool 1 $((128 * MB))
	expect_thin thin "$status_before" "after reactivation"
	expect_used pool $nblocks "after reactivation"
	check_data
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
}

check_data() {
	fio_verify r1 $T 0 16M 4k randwrite 11
	fio_verify r2 $T 16M 16M 64k randwrite 12
	fio_verify r3 $T 32M 32M 1M write 13
	# The model covers 0..72M; only its last 8 MiB are meaningful.
	dd if=/tmp/m4 of=/tmp/m4tail bs=1M skip=64 2>/dev/null
	dd if=$T of=/tmp/t4 bs=1M skip=64 count=8 iflag=direct 2>/dev/null || fail "reading 64M+8M"
	if ! cmp /tmp/t4 /tmp/m4tail; then
		cmp -l /tmp/t4 /tmp/m4tail | head -5
		fail "4k-write range [64M,72M) differs from its model (4 KiB pieces of pattern, zeroes elsewhere)"
	fi
	echo "ok: [64M,72M) holds the 4 KiB pieces and zeroes around them"
	zeroes $T 72 56 "never written tail"
}

for_each_impl scenario
impl_verdict
