# SPDX-License-Identifier: GPL-2.0
# Running out of metadata space (J62), on the C dm-thin and on rthin.
# The metadata device is 512 KiB (128 blocks, reserve 12) of dm-linear. The
# smallest sizes each implementation accepts (C: 48 KiB, rthin: 128 KiB)
# are too small for dm-thin's scheme: up to 256 KiB dm-thin's own commit
# runs out of space first and the pool goes read-only with needs_check
# instead of out-of-metadata-space. At 512 KiB dm-thin ends in
# out-of-metadata-space, and so must rthin: without its commit before the
# reserve is used up (alloc_data_block) a mapping insert ran out of space
# and left it read-only with needs_check.
# What fills metadata fastest per data block written: snapshots. Thin 1
# gets 1024 whole blocks (fio), then each round takes a snapshot of it and
# writes every 128th block of it (about one per leaf of its mapping tree),
# so that each round copies every leaf; the data device never runs out.
# Expected (dm-thin): the metadata low-water event, then "No free metadata
# blocks" and mode ro without needs_check: the write that found the space
# gone (or the next one) and every later write needing a new block fail
# with EIO, a mapped unshared block takes writes, every block reads as
# acknowledged (model, and fio verify of the first fill through the first
# snapshot), messages fail with EOPNOTSUPP. Growing the metadata device (a
# reload of the linear device, then of the pool, as lvextend
# --poolmetadatasize does) returns the pool to rw, and the refused writes
# succeed. thin_check at the end.
. /rthin/tests/lib.sh

RAW_META=/dev/ram0 DATA=/dev/ram1
MB=2048
BLK=65536
META_KIB=512
T=/dev/mapper/thin
events() { dmsetup info -c --noheadings -o events pool | tr -d ' '; }
# try_put OFF: one whole-block write (pattern A) into thin 1 and its model;
# false (the error in /tmp/try.err) if the write failed.
try_put() {
	(put $T /tmp/mo A "$1" $BLK 1) 2>/tmp/try.err
}

scenario() {
	local ev0 r k off failed= st
	run dmsetup create mmeta --table "0 $((META_KIB * 2)) linear $RAW_META 0"
	mkpool pool /dev/mapper/mmeta $DATA $(sectors $DATA)
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((96 * MB))
	fio_write fill $T 0 64M 64k write 21
	capture $T /tmp/mo 64
	truncate -s 96M /tmp/mo || fail "model"
	# Thin 3: one mapped block that no snapshot ever shares.
	run dmsetup message pool 0 "create_thin 3"
	mkthin t3 pool 3 $((16 * MB))
	model_new /tmp/m3 1
	put /dev/mapper/t3 /tmp/m3 B 0 $BLK 1
	ev0=$(events)
	echo "after the fill: $(info pool)"

	r=0
	while :; do
		[ $r -lt 80 ] || fail "metadata never ran out after $r rounds: $(info pool)"
		# The INFO status commits: the mode may change here.
		[ "$(pool_field pool 5)" = rw ] || break
		snap pool $((100 + r)) 1 thin
		k=0
		while [ $k -lt 8 ]; do
			off=$(((k * 128 + r) * BLK))
			try_put $off || {
				failed=$off
				break 2
			}
			k=$((k + 1))
		done
		echo "round $r: $(info pool)"
		r=$((r + 1))
	done
	echo "round $r: $(info pool)"
	if [ -z "$failed" ]; then
		# The mode changed at a commit between two rounds: the next
		# round's first write (a copy-on-write) must fail.
		failed=$((r * BLK))
		try_put $failed && fail "mode $(info pool), yet a copy-on-write succeeded"
	fi
	st=$(info pool)
	echo "a write failed at byte $failed: $(cat /tmp/try.err)"
	echo "pool: $st"
	grep -q "Input/output error" /tmp/try.err || fail "the failed write: expected EIO, got: $(cat /tmp/try.err)"
	expect_dmesg "reached low water mark for metadata device: sending event."
	expect_dmesg "No free metadata blocks"
	[ "$(events)" -gt "$ev0" ] || fail "no dm event while metadata ran out"
	[ "$(pool_field pool 5)" = ro ] || fail "mode: $st, expected ro (out of metadata space)"
	[ "$(pool_field pool 8)" = - ] || fail "needs_check set on running out of metadata space: $st"
	# A mapped unshared block takes writes; a shared block (the next
	# round's) and a new block do not.
	put /dev/mapper/t3 /tmp/m3 C 4096 4096 1
	same /dev/mapper/t3 /tmp/m3 "a write to a mapped unshared block out of metadata space"
	for off in $(((r + 1) * BLK)) $((90 * 1048576)); do
		if try_put $off; then
			fail "a write needing a new block (at $off) succeeded out of metadata space: $(info pool)"
		fi
		grep -q "Input/output error" /tmp/try.err || fail "write at $off: expected EIO, got: $(cat /tmp/try.err)"
	done
	echo "ok: out of metadata space: copy-on-write and new block EIO"
	expect_error "Operation not supported" dmsetup message pool 0 "create_thin 2"
	same $T /tmp/mo "thin 1 out of metadata space"
	mkthin first pool 100 $((96 * MB))
	fio_verify fill /dev/mapper/first 0 64M 64k write 21

	# Grow the metadata device to 1 MiB, reload the pool: rw again.
	run dmsetup reload mmeta --table "0 $((META_KIB * 4)) linear $RAW_META 0"
	run dmsetup suspend mmeta
	run dmsetup resume mmeta
	run dmsetup reload pool --table "$(dmsetup table pool | cut -d' ' -f1-3) /dev/mapper/mmeta $DATA 128 0"
	run dmsetup suspend pool
	run dmsetup resume pool
	expect_dmesg "growing the metadata device from $((META_KIB / 4)) to $((META_KIB / 2)) blocks"
	st=$(info pool)
	echo "after the grow: $st"
	[ "$(pool_field pool 5)" = rw ] || fail "mode after growing the metadata device: $st"
	try_put $failed || fail "the refused write after the grow: $(cat /tmp/try.err)"
	try_put $(((r + 1) * BLK)) || fail "a copy-on-write after the grow: $(cat /tmp/try.err)"
	try_put $((90 * 1048576)) || fail "a new block after the grow: $(cat /tmp/try.err)"
	run dmsetup message pool 0 "create_thin 2"
	same $T /tmp/mo "thin 1 after the grow"
	fio_verify fill /dev/mapper/first 0 64M 64k write 21
	run dmsetup remove first
	run dmsetup remove t3
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta /dev/mapper/mmeta
	run dmsetup remove mmeta
}

for_each_impl scenario
impl_verdict
