# SPDX-License-Identifier: GPL-2.0
# A commit makes the data that its new mappings point at durable first
# (dm-thin's metadata_pre_commit_callback flushes the data device). The data
# device is a dm-log-writes device, the metadata a plain RAM disk, so a power
# cut right after a commit is: the metadata as it is, the data device as of
# its last logged FLUSH. A 4 KiB write provisions a zeroed block, a status
# commits; after the cut the block must read zeroes and the write, never the
# data device's stale bytes ('Z'). The other 80-crash tests log both devices
# as one and so cannot see a missing data flush.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1 LOG=/dev/ram2 REPLAY=/dev/ram3
LEN=131072
modprobe dm-log-writes || fail "modprobe dm-log-writes"
run dd if=/dev/urandom of=/tmp/w bs=4k count=1 2>/dev/null
# The block as it must read: zeroes, the write at 4 KiB, zeroes.
run dd if=/dev/zero of=/tmp/want bs=64k count=1 2>/dev/null
run dd if=/tmp/w of=/tmp/want bs=4k seek=1 conv=notrunc 2>/dev/null

cut_and_check() {
	use_impl "$1"
	wipe $META
	wipe $LOG
	fill $DATA 64 132
	fill $REPLAY 64 132
	run dmsetup create dlw --table "0 $LEN log-writes $DATA $LOG"
	openpool pool $META /dev/mapper/dlw $LEN
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 32768
	run dd if=/tmp/w of=/dev/mapper/thin bs=4k seek=1 oflag=direct 2>/dev/null
	# An INFO status commits (as dm-thin's pool_status).
	run dmsetup status pool >/dev/null
	run dmsetup message dlw 0 mark cut
	# The power cut: the metadata as the commit left it.
	run dd if=$META of=/tmp/meta.img bs=1M count=16 2>/dev/null
	run dmsetup remove thin
	run dmsetup remove pool
	run dmsetup remove dlw
	rthin-crashtest list $LOG >/tmp/log.txt || fail "reading the log"
	cut=$(awk '$5 == "cut" { print $1 }' /tmp/log.txt)
	[ -n "$cut" ] || fail "no cut mark in the log"
	flush=$(awk -v c="$cut" '$1 < c && $2 ~ /FLUSH/ { f = $1 } END { print f }' /tmp/log.txt)
	echo "$IMPL: cut at log entry $cut, last data flush before it: ${flush:-none}"
	# The data device after the cut: the stale bytes plus what was flushed.
	[ -n "$flush" ] && run rthin-crashtest replay $LOG $REPLAY --from 0 --to "$flush"
	run dd if=/tmp/meta.img of=$META bs=1M conv=fsync 2>/dev/null
	thin_dump $META | grep -q 'data_block=' || fail "$IMPL: the commit did not map the block"
	openpool pool $META $REPLAY $LEN
	mkthin thin pool 1 32768
	run dd if=/dev/mapper/thin of=/tmp/got bs=64k count=1 iflag=direct 2>/dev/null
	stale=$(tr -cd 'Z' </tmp/got | wc -c)
	cmp -s /tmp/got /tmp/want ||
		fail "$IMPL: after the cut the committed block holds $stale stale bytes of the data device, not zeroes and the write"
	echo "ok: $IMPL: the committed block reads zeroes and the write after the cut"
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
}

for impl in $(test_impls); do
	cut_and_check "$impl"
done
echo "all passed on: $(test_impls)"
