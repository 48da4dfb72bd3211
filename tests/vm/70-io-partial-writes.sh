# SPDX-License-Identifier: GPL-2.0
# Partial writes into new and shared blocks, byte for byte, on the C dm-thin
# and on rthin. rthin writes the bio into the new block while kcopyd zeroes
# or copies only the parts it leaves out (Documentation/io-path.md,
# "Provisioning and breaking sharing"); dm-thin fills the whole block first.
# new_blocks: 4 KiB and 512-byte writes at the start, in the middle and at
#   the end of new blocks, zeroing on, over a data device full of 'Z' bytes:
#   the rest of each block reads as zeroes; a 60 KiB write leaving one 4 KiB
#   piece at each end; one write per block (nothing else queued on it).
# shared_blocks: the same writes into blocks shared with one snapshot, from
#   either side: the rest reads the old data, the other side keeps it.
# io_counts: what one 4 KiB write costs the data device (its sector
#   counters): into a new block, one write of the block (8 sectors from the
#   bio, 120 of zeroes) and no read; into a shared block, a read of the 120
#   sectors the bio leaves out and one write of the block. The C dm-thin
#   writes the whole block, then the bio (136 sectors), and copies the
#   whole shared block (128 read).
# open_blocks: a block held open (rthin: its writes complete before it is
#   mapped) looks as on dm-thin from outside: status, reads, a discard, a
#   snapshot, a suspend, a flush, a removal right after the writes.
# faults: the data device fails a part of every free block, so that either
#   the bio's own part of its new block or the part kcopyd fills fails: the
#   bio gets EIO (rthin, for a write at the start of a new block whose
#   zeroing fails: the write completes, the next flush gets EIO), nothing is
#   mapped (statuses unchanged, the block reads as
#   before), and once the fault is gone a write into the same block reads
#   zeroes (or the old data) around it, never the failed attempt's bytes or
#   stale ones. The C dm-thin leaks the blocks of failed provisions (as in
#   85-data-faults).
# covering_*: writes that together cover a block, submitted at once (fio,
#   libaio, 32 4 KiB writes of two blocks in one io_submit, in random order)
#   so that one worker pass finds them all. rthin provisions such a block
#   without zeroing or copying it (its `coalesced` counter must move);
#   either way each block must read back exactly what the writes put there.
#   covering_new_blocks: new blocks, zeroing on, plus a block covered but
#     one 4 KiB piece, which must read as zeroes there; covering_shared: the
#     same into blocks shared with a snapshot, which keeps its old data, with
#     a flush every 8 writes; covering_snapshot: three snapshots taken
#     (suspend, create_snap, resume) while such writes run; covering_fault: one piece
#     of every free block fails: every write fails, nothing is mapped, the
#     blocks read as before, and rthin frees them all.
# stream_new_blocks: a sequential stream of 4 KiB writes (iodepth 16, one
#   submission each) over 16 new blocks and 40 KiB into a 17th, zeroing on:
#   rthin holds each block open from its first write (`held_open` must
#   move) and writes each block once (at most two blocks more zeroed, for
#   periodic commits that closed them early); the data reads back, the 17th
#   block's last 24 KiB read as zeroes.
# thin_check at the end of each.
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1
MB=2048
BLK=65536
NBLK=64 # data blocks (4 MiB)
T=/dev/mapper/thin S=/dev/mapper/snap

# data_table ERR_START ERR_COUNT USED...: the data device's table: linear
# onto RAW, except sectors [ERR_START, ERR_START + ERR_COUNT) of every data
# block not listed in USED, which are the error target (ERR_COUNT 0: none).
data_table() {
	local start=$1 count=$2
	shift 2
	echo "$@" | tr ' ' '\n' | awk -v n=$NBLK -v raw=$RAW -v es="$start" -v ec="$count" '
		function linear(s, len) { if (len > 0) print s, len, "linear", raw, s }
		NF { used[$1] = 1 }
		END {
			for (b = 0; b < n; b++) {
				s = b * 128
				if (used[b] || ec == 0) { linear(s, 128); continue }
				linear(s, es)
				print s + es, ec, "error"
				linear(s + es + ec, 128 - es - ec)
			}
		}'
}
# set_data ERR_START ERR_COUNT USED...: reloads the data device with it.
set_data() {
	data_table "$@" >/tmp/dtable
	run dmsetup reload fdata /tmp/dtable
	run dmsetup suspend fdata
	run dmsetup resume fdata
	echo "data device: $(grep -c error /tmp/dtable) error piece(s) at sectors $1+$2 of the free blocks"
}
# used_blocks: the data blocks that hold anything but the 'Z' bytes setup
# left (the writes here hold no 64 KiB of 'Z').
used_blocks() {
	local b=0
	while [ $b -lt $NBLK ]; do
		[ "$(dd if=$RAW bs=$BLK skip=$b count=1 iflag=direct 2>/dev/null | tr -d Z | wc -c)" = 0 ] ||
			echo $b
		b=$((b + 1))
	done
}

# setup: stale 'Z' bytes on the data device, pool (zeroing on) over fdata,
# thin 1 (4 MiB), model /tmp/mt (4 MiB, zeroes).
setup() {
	fill $RAW 4 132
	data_table 0 0 >/tmp/dtable
	run dmsetup create fdata /tmp/dtable
	mkpool pool $META /dev/mapper/fdata $((NBLK * 128))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((4 * MB))
	model_new /tmp/mt 4
}
finish() {
	run dmsetup remove_all
	check_meta $META
}

# partial_writes DEV MODEL PAT FIRST: into blocks FIRST.. of DEV: 4 KiB at
# the start, in the middle and at the end of a block, 512 bytes at the start,
# in the middle and at the end, a 60 KiB write in the middle; one block each.
partial_writes() {
	local dev=$1 model=$2 pat=$3 b=$4
	put "$dev" "$model" "$pat" $((b * BLK)) 4096 1
	put "$dev" "$model" "$pat" $(((b + 1) * BLK + 7 * 4096)) 4096 1
	put "$dev" "$model" "$pat" $(((b + 3) * BLK - 4096)) 4096 1
	put "$dev" "$model" "$pat" $(((b + 3) * BLK)) 512 1
	put "$dev" "$model" "$pat" $(((b + 4) * BLK + 77 * 512)) 512 1
	put "$dev" "$model" "$pat" $(((b + 6) * BLK - 512)) 512 1
	put "$dev" "$model" "$pat" $(((b + 6) * BLK + 4096)) $((BLK - 8192)) 1
}

new_blocks() {
	setup
	partial_writes $T /tmp/mt A 0
	expect_thin thin "$(thin_status_for 7 6)" "7 blocks provisioned by partial writes"
	same $T /tmp/mt "partial writes into new blocks, the rest zeroes"
	finish
}

shared_blocks() {
	setup
	put $T /tmp/mt A 0 $BLK 32
	snap pool 2 1 thin
	mkthin snap pool 2 $((4 * MB))
	cp /tmp/mt /tmp/ms
	# Origin side: blocks 0-6, snapshot side: blocks 8-14.
	partial_writes $T /tmp/mt B 0
	partial_writes $S /tmp/ms C 8
	expect_used pool $((32 + 14)) "14 shared blocks broken"
	same $T /tmp/mt "origin after breaking sharing, the rest the old data"
	same $S /tmp/ms "snapshot after breaking sharing, the rest the old data"
	finish
}

# data_sectors: sectors read and written on the data device so far.
data_sectors() {
	awk '{ print $3, $7 }' "/sys/block/dm-$(dmsetup info -c --noheadings -o minor fdata | tr -d ' ')/stat"
}
# expect_io WHAT READ WRITTEN CMD...: CMD makes the data device read and
# write exactly READ and WRITTEN sectors.
expect_io() {
	local what=$1 r=$2 w=$3 before after dr dw
	shift 3
	before=$(data_sectors)
	"$@"
	after=$(data_sectors)
	dr=$((${after% *} - ${before% *})) dw=$((${after#* } - ${before#* }))
	[ "$dr" = "$r" ] && [ "$dw" = "$w" ] ||
		fail "$what: the data device read $dr and wrote $dw sectors, expected $r and $w"
	echo "ok: $what: $r sectors read, $w written on the data device"
}

io_counts() {
	local new_w shared_r shared_w
	case $IMPL in
	rthin) new_w=128 shared_r=120 shared_w=128 ;;
	c) new_w=136 shared_r=128 shared_w=136 ;;
	esac
	setup
	put $T /tmp/mt A 0 $BLK 2
	snap pool 2 1 thin
	mkthin snap pool 2 $((4 * MB))
	expect_io "a 4 KiB write into a new block" 0 $new_w \
		put $T /tmp/mt B $((5 * BLK + 4096)) 4096 1
	expect_io "a 4 KiB write into a shared block" $shared_r $shared_w \
		put $T /tmp/mt B $((1 * BLK + 4096)) 4096 1
	expect_io "a 4 KiB write into the broken block" 0 8 \
		put $T /tmp/mt C $((1 * BLK + 8192)) 4096 1
	same $T /tmp/mt "after the counted writes"
	finish
}

# eio WHAT CMD...: CMD must fail with EIO.
eio() {
	local what=$1
	shift
	if "$@" 2>/tmp/eio.err; then
		fail "$what succeeded on a failing data device"
	fi
	grep -q "Input/output error" /tmp/eio.err || fail "$what: expected EIO, got: $(cat /tmp/eio.err)"
	echo "ok: $what: EIO"
}
# failed_write WHAT DEV OFF: a 4 KiB write of pattern F at byte OFF of DEV
# must fail with EIO.
failed_write() {
	pattern F
	eio "$1" dd if=/tmp/pat.F of="$2" bs=4096 count=1 skip=$(($3 / 4096 % 1024)) \
		seek=$(($3 / 4096)) oflag=direct
}

faults() {
	local used0 used st1 st2 leaked=0
	setup
	# Blocks 0-7 of the origin written whole; shared with the snapshot.
	put $T /tmp/mt A 0 $BLK 8
	snap pool 2 1 thin
	mkthin snap pool 2 $((4 * MB))
	cp /tmp/mt /tmp/ms
	used0=$(data_used pool)
	st1=$(info thin) st2=$(info snap)
	# Before any failed write, which may leave bytes in a free block.
	used=$(used_blocks)

	# The bio's own part fails, the rest (kcopyd's) does not: sectors
	# 0-7 of each free block fail, the writes go to the start.
	set_data 0 8 $used
	failed_write "a 4 KiB write at the start of a new block (its own part fails)" $T $((20 * BLK))
	failed_write "a 4 KiB write at the start of a shared block (its own part fails)" $T $((2 * BLK))
	# kcopyd's part fails, the bio's does not: sectors 64-127 fail, the
	# writes go to the start, the rest is zeroed or copied.
	set_data 64 64 $used
	case $IMPL in
	# rthin holds the new block open: the write completes once written,
	# the zeroing runs when the block closes (here: for the flush's
	# commit) and fails, the block is given back, and the flush reports
	# the lost write, as every later flush of this table does.
	rthin)
		pattern F
		run dd if=/tmp/pat.F of=$T bs=4096 count=1 skip=$((21 * 16 % 1024)) seek=$((21 * 16)) oflag=direct 2>/dev/null
		eio "a flush after a 4 KiB write at the start of a new block whose zeroing fails" \
			dd if=/dev/null of=$T count=0 conv=fsync
		;;
	c) failed_write "a 4 KiB write at the start of a new block (the zeroing fails)" $T $((21 * BLK)) ;;
	esac
	failed_write "a 4 KiB write at the start of a shared block (the copy fails)" $S $((3 * BLK))
	# The same from the end of the block: sectors 0-63 fail.
	set_data 0 64 $used
	failed_write "a 4 KiB write at the end of a new block (the zeroing fails)" $T $((22 * BLK - 4096))
	failed_write "a 4 KiB write at the end of a shared block (the copy fails)" $T $((4 * BLK - 4096))

	# Nothing mapped, nothing else changed.
	expect_thin thin "$st1" "after the failed writes"
	expect_thin snap "$st2" "after the failed writes"
	case $IMPL in
	rthin) expect_used pool "$used0" "the failed provisions gave their blocks back" ;;
	# dm-thin's process_prepared_mapping leaves the block of a failed
	# provision allocated.
	c)
		leaked=6
		expect_used pool $((used0 + leaked)) "C dm-thin: the 6 failed provisions leak their blocks"
		;;
	esac
	same $T /tmp/mt "origin after the failed writes"
	same $S /tmp/ms "snapshot after the failed writes"
	rw_mode

	# The fault gone: writes into the same blocks at other places read
	# zeroes or the old data around them, never pattern F or 'Z'.
	set_data 0 0
	put $T /tmp/mt D $((20 * BLK + 8192)) 4096 1
	put $T /tmp/mt D $((21 * BLK + 8192)) 4096 1
	put $T /tmp/mt D $((22 * BLK + 8192)) 4096 1
	put $T /tmp/mt D $((2 * BLK + 8192)) 4096 1
	put $S /tmp/ms D $((3 * BLK + 8192)) 4096 1
	put $T /tmp/mt D $((4 * BLK + 8192)) 4096 1
	expect_used pool $((used0 + leaked + 6)) "six blocks provisioned with the fault gone"
	same $T /tmp/mt "origin with the fault gone"
	same $S /tmp/ms "snapshot with the fault gone"
	case $IMPL in
	rthin) finish ;;
	c)
		run dmsetup remove_all
		if thin_check $META >/tmp/tc.out 2>&1; then
			fail "thin_check passed: the leaked blocks of the C dm-thin are gone?"
		fi
		grep -q "^$leaked data blocks have leaked" /tmp/tc.out || fail "thin_check: $(cat /tmp/tc.out)"
		echo "ok: thin_check reports the $leaked data blocks the C dm-thin leaked"
		;;
	esac
}
rw_mode() {
	[ "$(pool_field pool 5)" = rw ] || fail "pool mode $(info pool), expected rw"
	echo "ok: pool rw after the write errors"
}

# thin_counter NAME: rthin's debugfs counter NAME of thin (0 on the C
# dm-thin, which has no such counters).
thin_counter() {
	local stats
	[ "$IMPL" = rthin ] || {
		echo 0
		return
	}
	stats=/sys/kernel/debug/rthin-$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
	awk -v n="$1" '$1 == n { print $2 }' "$stats/$(dmsetup info -c --noheadings -o major,minor thin | tr -d ' ')"
}
# coalesced: the blocks written whole by several writes together.
coalesced() { thin_counter coalesced; }
# expect_coalesced BEFORE WHAT: on rthin the counter moved past BEFORE.
expect_coalesced() {
	local now
	now=$(coalesced)
	[ "$IMPL" = rthin ] || return 0
	[ "$now" -gt "$1" ] || fail "$2: no block was written whole by its writes together (coalesced $now)"
	echo "ok: $2: $((now - $1)) block(s) written whole by their writes together"
}
# burst DEV BLOCK SEED [FIO-ARG...]: 4 KiB writes covering blocks BLOCK and
# BLOCK+1 of DEV, 32 of them in random order submitted in one call, then
# read back and verified.
burst() {
	local dev=$1 b=$2 seed=$3
	shift 3
	(cd /tmp && fio --name=burst --filename="$dev" --offset=$((b * BLK)) --size=$((2 * BLK)) \
		--bs=4k --rw=randwrite --randseed="$seed" --ioengine=libaio --iodepth=32 \
		--iodepth_batch_submit=32 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 --output-format=terse "$@" >/tmp/burst.out 2>&1) || {
		cat /tmp/burst.out
		fail "fio burst into blocks $b-$((b + 1)) of $dev (seed $seed)"
	}
	# The model: what fio wrote (read back from the device, which fio
	# has just verified).
	[ -n "${MODEL:-}" ] && dd if="$dev" of="$MODEL" bs=$BLK skip="$b" seek="$b" count=2 \
		iflag=direct conv=notrunc 2>/dev/null
	return 0
}

covering_new_blocks() {
	local c0 b
	setup
	c0=$(coalesced)
	for b in 0 2 4 6 8 10 12 14; do
		MODEL=/tmp/mt burst $T $b $((b + 1))
	done
	expect_coalesced "$c0" "bursts into new blocks"
	expect_thin thin "$(thin_status_for 16 15)" "16 blocks provisioned by the bursts"
	same $T /tmp/mt "new blocks written by bursts, byte for byte"
	# Block 20 covered but one 4 KiB piece (at 32 KiB): it reads zeroes,
	# not the data device's 'Z', there; the rest as written.
	(cd /tmp && fio --name=gap --filename=$T --offset=$((20 * BLK)) --size=$((BLK / 2 - 4096)) \
		--bs=4k --rw=randwrite --randseed=7 --ioengine=libaio --iodepth=32 --iodepth_batch_submit=32 \
		--direct=1 --output-format=terse >/tmp/gap.out 2>&1) || fail "fio gap: $(cat /tmp/gap.out)"
	(cd /tmp && fio --name=gap2 --filename=$T --offset=$((20 * BLK + BLK / 2)) --size=$((BLK / 2)) \
		--bs=4k --rw=randwrite --randseed=8 --ioengine=libaio --iodepth=32 --iodepth_batch_submit=32 \
		--direct=1 --output-format=terse >/tmp/gap.out 2>&1) || fail "fio gap2: $(cat /tmp/gap.out)"
	dd if=$T of=/tmp/gap.blk bs=4096 skip=$((20 * 16 + 7)) count=1 iflag=direct 2>/dev/null
	[ "$(tr -d '\000' </tmp/gap.blk | wc -c)" = 0 ] ||
		fail "the 4 KiB piece no write covered does not read as zeroes"
	echo "ok: the piece no write covered reads as zeroes"
	finish
}

covering_shared() {
	local c0 b
	setup
	put $T /tmp/mt A 0 $BLK 16
	snap pool 2 1 thin
	mkthin snap pool 2 $((4 * MB))
	cp /tmp/mt /tmp/ms
	c0=$(coalesced)
	for b in 0 2 4 6; do
		MODEL=/tmp/mt burst $T $b $((b + 11))
	done
	for b in 8 10 12 14; do
		MODEL=/tmp/mt burst $T $b $((b + 11)) --fsync=8
	done
	expect_coalesced "$c0" "bursts into shared blocks"
	expect_used pool 32 "16 shared blocks broken"
	same $T /tmp/mt "origin after bursts into shared blocks"
	same $S /tmp/ms "snapshot keeps the old data"
	finish
}

covering_snapshot() {
	local pid i
	setup
	# Blocks 0-7 mapped, so that each snapshot shares them (at most 8 + 3 x 8
	# of the pool's 64 blocks in use).
	put $T /tmp/mt A 0 $BLK 8
	# 4 KiB writes at iodepth 32 over blocks 0-7, submitted 32 at a time,
	# 200 passes (each verified), while three snapshots are taken as LVM
	# takes them.
	(cd /tmp && fio --name=mid --filename=$T --size=$((8 * BLK)) --loops=200 --bs=4k \
		--rw=randwrite --randseed=5 --ioengine=libaio --iodepth=32 --iodepth_batch_submit=32 \
		--direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
		--output-format=terse >/tmp/mid.out 2>&1) &
	pid=$!
	for i in 2 3 4; do
		sleep 0.2
		snap pool $i 1 thin
	done
	exited $pid && fail "fio ended before the third snapshot: the test needs more --loops"
	wait $pid || {
		cat /tmp/mid.out
		fail "fio verify with snapshots taken during the writes"
	}
	echo "ok: the origin verifies with three snapshots taken during the writes"
	finish
}

covering_fault() {
	local used0 st1 c0
	setup
	used0=$(data_used pool)
	st1=$(info thin)
	c0=$(coalesced)
	# Sectors 8-15 (the second 4 KiB) of every free block fail.
	set_data 8 8
	(cd /tmp && fio --name=fault --filename=$T --offset=$((30 * BLK)) --size=$((2 * BLK)) --bs=4k \
		--rw=randwrite --randseed=3 --ioengine=libaio --iodepth=32 --iodepth_batch_submit=32 \
		--direct=1 --continue_on_error=all --output-format=terse >/tmp/fault.out 2>&1)
	expect_thin thin "$st1" "after the failed bursts"
	[ "$IMPL" = rthin ] && expect_used pool "$used0" "the failed provisions gave their blocks back"
	[ "$(coalesced)" = "$c0" ] || fail "a set with a failed write was counted as written whole"
	rw_mode
	set_data 0 0
	zeroes $T 1 1 "blocks 16-31 after the failed bursts"
	case $IMPL in
	rthin) finish ;;
	*) run dmsetup remove_all ;; # dm-thin leaks failed provisions' blocks (faults above)
	esac
}

stream_new_blocks() {
	local o0 before after written
	setup
	o0=$(thin_counter held_open)
	before=$(data_sectors)
	(cd /tmp && fio --name=stream --filename=$T --size=$((16 * BLK + 40960)) --bs=4k --rw=write \
		--ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 \
		--verify_state_save=0 --output-format=terse >/tmp/stream.out 2>&1) || {
		cat /tmp/stream.out
		fail "fio stream over new blocks"
	}
	after=$(data_sectors)
	written=$((${after#* } - ${before#* }))
	echo "the stream wrote $written sectors to the data device for 17 blocks ($((17 * 128)) if each block is written once)"
	if [ "$IMPL" = rthin ]; then
		# Each block held open from its first write: written once, but
		# for the unreached tail of the last and any block a periodic
		# commit closed while the stream was in it (two at most).
		[ "$(thin_counter held_open)" -gt "$o0" ] || fail "a stream of 4 KiB writes held no block open"
		[ "$written" -le $((17 * 128 + 2 * 128)) ] ||
			fail "the stream wrote $written sectors: blocks were zeroed before their writes"
		echo "ok: $(($(thin_counter held_open) - o0)) block(s) held open for the stream"
	fi
	expect_thin thin "$(thin_status_for 17 16)" "17 blocks provisioned by the stream"
	dd if=$T of=/tmp/tail.blk bs=4096 skip=$((16 * 16 + 10)) count=6 iflag=direct 2>/dev/null
	[ "$(tr -d '\000' </tmp/tail.blk | wc -c)" = 0 ] ||
		fail "the part of the last block the stream did not reach does not read as zeroes"
	echo "ok: the part of the last block the stream did not reach reads as zeroes"
	finish
}

# open_blocks: what a block held open must look like from outside while
# its writes have completed but it is not yet mapped (rthin; the C dm-thin
# maps before completing, and passes the same checks): the thin's status
# counts it, a read sees the write and zeroes around it, a discard of it
# frees it, a snapshot taken as LVM does has it, a suspend and resume keep
# it, a flush makes it durable (the metadata then maps it, thin_check
# passes), and so does removing the thin and the pool right after it.
open_blocks() {
	local s
	setup
	# One 4 KiB write at the start of each of blocks 0-2: each held open.
	put $T /tmp/mt A 0 4096 1
	put $T /tmp/mt B $BLK 4096 1
	put $T /tmp/mt C $((2 * BLK)) 4096 1
	expect_thin thin "$(thin_status_for 3 2)" "right after three writes into new blocks"
	expect_used pool 3 "three blocks provisioned"
	put $T /tmp/mt D $((3 * BLK)) 4096 1
	same $T /tmp/mt "a read right after a write into a new block"
	# A discard of a block whose write just completed frees it; its
	# neighbours stay.
	put $T /tmp/mt E $((4 * BLK)) 4096 1
	run blkdiscard -o $((4 * BLK)) -l $BLK $T
	dd if=/dev/zero of=/tmp/mt bs=$BLK seek=4 count=1 conv=notrunc 2>/dev/null
	same $T /tmp/mt "after a discard of a block written just before"
	expect_used pool 4 "the discarded block given back"
	# A snapshot as LVM takes it keeps a write that completed just before.
	put $T /tmp/mt F $((5 * BLK)) 4096 1
	snap pool 2 1 thin
	mkthin snap pool 2 $((4 * MB))
	same $S /tmp/mt "the snapshot of writes that completed just before it"
	run dmsetup remove snap
	# A suspend and resume right after a write keep it.
	put $T /tmp/mt G $((6 * BLK)) 4096 1
	run dmsetup suspend thin
	s=$(info thin)
	run dmsetup resume thin
	[ "$s" = "$(thin_status_for 6 6)" ] || fail "thin status while suspended right after a write: '$s'"
	same $T /tmp/mt "after a suspend and resume right after a write"
	# A flush after a write: the mapping is committed.
	put $T /tmp/mt H $((7 * BLK)) 4096 1
	run dd if=/dev/null of=$T count=0 conv=fsync 2>/dev/null
	# A write right before the thin and the pool are removed (as
	# `lvchange -an` does): the pool's last commit has it.
	put $T /tmp/mt I $((8 * BLK)) 4096 1
	run dmsetup remove thin
	run dmsetup remove pool
	run thin_dump $META >/tmp/open.xml
	[ -n "$(mappings /tmp/open.xml 1 | awk '$1 == 7')" ] || fail "the flushed write's block is not in the metadata"
	echo "ok: a flush after a write into a new block committed its mapping"
	[ -n "$(mappings /tmp/open.xml 1 | awk '$1 == 8')" ] ||
		fail "a write right before the removal of the thin and the pool is not in the metadata"
	echo "ok: the pool's last commit has a write made right before the thin was removed"
	check_meta $META
	run dmsetup remove_all
}

for_each_impl open_blocks
for_each_impl new_blocks
for_each_impl shared_blocks
for_each_impl io_counts
for_each_impl faults
for_each_impl covering_new_blocks
for_each_impl covering_shared
for_each_impl covering_snapshot
for_each_impl covering_fault
for_each_impl stream_new_blocks
impl_verdict
