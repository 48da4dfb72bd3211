# SPDX-License-Identifier: GPL-2.0
# A data block must not be discarded nor handed to a new owner while a bio
# sent to it before it was freed is still in flight (issue 13). The data
# device sits behind dm-delay with slow reads (writes and discards go at
# once), on a pool of four data blocks, so the one block freed is the one the
# next provision gets. A read is started on a block, then, while it waits in
# the delay, the block is freed and reallocated to another virtual block
# whose new contents are written at once. The old read must return the data
# the block held when it was issued; the new owner's data must be intact.
#   discard:      the read's own block is discarded (passdown on), the pool
#                 commits, another block is written;
#   break+delete: a read of an origin block shared with a snapshot, a
#                 whole-block write to it (breaking sharing), the snapshot
#                 deleted (the old block's last reference), a commit, another
#                 block written;
#   release_snap: the read's block discarded while a metadata snapshot
#                 holds it (nothing freed yet), a commit, the snapshot
#                 released (the block's last reference: no unmap, discard or
#                 delete frees it), a commit, a new thin whose first write
#                 gets the block.
. /rthin/tests/lib.sh

READ_DELAY_MS=2000
BLOCK=65536

# blk V PAT: writes the whole 64 KiB virtual block V of the thin DEV with
# pattern PAT (offset V * 64 KiB of it), without zeroing or copying.
blk() { put "$1" - "$3" $(($2 * BLOCK)) $BLOCK 1; }
# expect_blk FILE PAT V WHAT: FILE holds what blk V PAT wrote.
expect_blk() {
	dd if="/tmp/pat.$2" of=/tmp/ifr.want bs=$BLOCK count=1 iflag=skip_bytes \
		skip=$((($3 * BLOCK) % 4194304)) 2>/dev/null || fail "pattern $2"
	cmp -s "$1" /tmp/ifr.want || fail "$4: got $(od -An -tx1 -N8 "$1"), expected pattern $2 ($(od -An -tx1 -N8 /tmp/ifr.want))"
	echo "ok: $4"
}
# slow_read DEV V FILE: starts an O_DIRECT read of virtual block V in the
# background (pid in $reader) and gives it time to reach the delay.
slow_read() {
	dd if="$1" of="$3" bs=$BLOCK skip="$2" count=1 iflag=direct 2>/dev/null &
	reader=$!
	sleep 0.5
}

# setup [READ_MS]: the pool and thin 1, reads of its data device delayed by
# READ_MS (default READ_DELAY_MS).
setup() {
	wipe /dev/ram0
	run dmsetup create ifr-data --table \
		"0 $(sectors /dev/ram1) delay /dev/ram1 0 ${1:-$READ_DELAY_MS} /dev/ram1 0 0"
	# Four data blocks of 64 KiB.
	openpool ifr-pool /dev/ram0 /dev/mapper/ifr-data 512
	run dmsetup message ifr-pool 0 "create_thin 1"
	mkthin ifr-thin ifr-pool 1 4096
	thin=/dev/mapper/ifr-thin
}

# reallocate V WHAT: commits (an INFO status), writes virtual block V whole
# with pattern C (it gets the one free data block: the freed one), then the
# slow read must have returned pattern A (WHAT) and block V must hold C (not
# discarded nor overwritten after the write).
reallocate() {
	info ifr-pool >/dev/null
	blk $thin "$1" C
	wait $reader || fail "the old read failed"
	expect_blk /tmp/ifr.old A 0 "$2"
	run dd if=$thin of=/tmp/ifr.new bs=$BLOCK skip="$1" count=1 iflag=direct 2>/dev/null
	expect_blk /tmp/ifr.new C "$1" "the new owner's block $1 holds its data"
}

discard_then_reuse() {
	setup
	for v in 0 1 2 3; do blk $thin $v A; done
	[ "$(data_used ifr-pool)" = 4 ] || fail "the pool should be full: $(info ifr-pool)"
	slow_read $thin 0 /tmp/ifr.old
	run blkdiscard -o 0 -l $BLOCK $thin
	reallocate 5 "the read issued before the discard returns the block's old data"
}

break_then_delete() {
	setup
	for v in 0 1 2; do blk $thin $v A; done
	snap ifr-pool 2 1 ifr-thin
	slow_read $thin 0 /tmp/ifr.old
	# Breaks sharing without a copy: the origin's block 0 moves to the last
	# free data block, the old one stays the snapshot's.
	blk $thin 0 B
	[ "$(data_used ifr-pool)" = 4 ] || fail "the pool should be full: $(info ifr-pool)"
	run dmsetup message ifr-pool 0 "delete 2"
	reallocate 3 "the read issued before the sharing broke returns the shared block's data"
}

release_snap_then_reuse() {
	# Slower reads: the steps between the read and the reallocation are
	# many (each message commits).
	setup 6000
	for v in 0 1 2 3; do blk $thin $v A; done
	[ "$(data_used ifr-pool)" = 4 ] || fail "the pool should be full: $(info ifr-pool)"
	info ifr-pool >/dev/null
	run dmsetup message ifr-pool 0 reserve_metadata_snap
	slow_read $thin 0 /tmp/ifr.old
	run blkdiscard -o 0 -l $BLOCK $thin
	info ifr-pool >/dev/null
	[ "$(data_used ifr-pool)" = 4 ] || fail "the held snapshot keeps the block: $(info ifr-pool)"
	run dmsetup message ifr-pool 0 release_metadata_snap
	[ "$(data_used ifr-pool)" = 3 ] || fail "the release frees the block: $(info ifr-pool)"
	run dmsetup message ifr-pool 0 "create_thin 2"
	mkthin ifr-thin2 ifr-pool 2 4096
	blk /dev/mapper/ifr-thin2 0 C
	wait $reader || fail "the old read failed"
	expect_blk /tmp/ifr.old A 0 "the read issued before the discard returns the block's old data"
	run dd if=/dev/mapper/ifr-thin2 of=/tmp/ifr.new bs=$BLOCK count=1 iflag=direct 2>/dev/null
	expect_blk /tmp/ifr.new C 0 "the new owner's block 0 holds its data"
}

for_each_impl discard_then_reuse
for_each_impl break_then_delete
for_each_impl release_snap_then_reuse
impl_verdict
