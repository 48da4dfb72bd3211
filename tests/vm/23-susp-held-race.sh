# SPDX-License-Identifier: GPL-2.0
# Writes held for data space are never stranded by a grow that races them.
# A full pool (queue_if_no_space) takes 8 writes to new blocks while it is
# grown by 8 blocks (reload, suspend, resume: LVM's autoextend), 15 times
# with the grow at different moments. A worker that decided to hold a
# write must put it on the held list before a resume can look at that
# list, or the resume finds it empty, the pool is back to rw, and the
# write waits for some later resume. Every write must end within 30 s.
# On the C dm-thin and rthin.
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1
BLK=128

held_race() {
	blocks=32
	mkpool pool $META $RAW $((blocks * BLK))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((1024 * BLK))
	run dd if=/dev/zero of=/dev/mapper/thin bs=64k count=$blocks oflag=direct 2>/dev/null
	next=$blocks
	for round in $(seq 1 15); do
		pids=
		for w in 1 2 3 4 5 6 7 8; do
			dd if=/dev/zero of=/dev/mapper/thin bs=4k seek=$(((next + w) * 16)) count=1 \
				oflag=direct 2>/dev/null &
			pids="$pids $!"
		done
		next=$((next + 8))
		case $((round % 3)) in
		1) ;;
		2) sleep 0.1 ;;
		0) sleep 0.3 ;;
		esac
		blocks=$((blocks + 8))
		run dmsetup reload pool --table "$(pool_table $META $RAW $((blocks * BLK)))"
		run dmsetup suspend pool
		run dmsetup resume pool
		for p in $pids; do
			wait_for 30 exited $p || fail "round $round: a write still waits 30 s after the pool grew: $(info pool)"
			wait $p || fail "round $round: a write failed: $(info pool)"
		done
		expect_used pool $blocks "round $round"
	done
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $META
}

for_each_impl held_race
impl_verdict
