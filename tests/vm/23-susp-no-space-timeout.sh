# SPDX-License-Identifier: GPL-2.0
# The no-space timeout does not run while the pool is suspended. A full pool
# (queue_if_no_space) holds a write; the pool is suspended for longer than
# no_space_timeout (3 s), grown, and resumed: the write must complete, as
# on dm-thin, which cancels the timer at postsuspend and starts it again,
# with the whole timeout, only when a table binds in out-of-data-space
# mode. On the C dm-thin and rthin (the module parameter set through sysfs
# and put back at the end).
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1
MB=2048

param() {
	case $IMPL in
	c) echo /sys/module/dm_thin_pool/parameters/no_space_timeout ;;
	*) echo /sys/module/dm_rthin/parameters/no_space_timeout ;;
	esac
}

timeout_in_suspend() {
	p=$(param)
	old=$(cat "$p") || fail "no $p"
	echo 3 >"$p" || fail "cannot set $p"
	rc=0
	(held_write_survives) || rc=1
	echo "$old" >"$p"
	return $rc
}

held_write_survives() {
	run dmsetup create ndata --table "0 $((2 * MB)) linear $RAW 0"
	mkpool pool $META /dev/mapper/ndata $((2 * MB))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((64 * MB))
	run dd if=/dev/urandom of=/dev/mapper/thin bs=64k count=32 oflag=direct 2>/dev/null
	expect_used pool 32 "full"
	pattern A
	dd if=/tmp/pat.A of=/dev/mapper/thin bs=64k seek=100 count=1 oflag=direct 2>/tmp/ns.w &
	writer=$!
	wait_for 10 pool_mode_is pool out_of_data_space || fail "not out_of_data_space: $(info pool)"
	run dmsetup suspend pool
	start=$(date +%s)
	# Twice the timeout.
	sleep 6
	exited $writer && {
		wait $writer
		fail "the held write ended while the pool was suspended: $(cat /tmp/ns.w)"
	}
	swap_table ndata "0 $((4 * MB)) linear $RAW 0"
	run dmsetup reload pool --table "$(pool_table $META /dev/mapper/ndata $((4 * MB)))"
	run dmsetup resume pool
	echo "resumed after $(($(date +%s) - start))s suspended: $(info pool)"
	wait_for 20 exited $writer || fail "the held write still waits 20 s after the pool grew"
	wait $writer || fail "the held write failed after a suspend longer than no_space_timeout: $(cat /tmp/ns.w)"
	got=$(dd if=/dev/mapper/thin bs=64k skip=100 count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$(dd if=/tmp/pat.A bs=64k count=1 2>/dev/null | md5sum)" ] || fail "the held write's data is not there"
	echo "ok: the held write completed after the grow"
	[ "$(pool_field pool 5)" = rw ] || fail "mode after the grow: $(info pool)"
	run dmsetup remove thin
	run dmsetup remove pool
	run dmsetup remove ndata
	check_meta $META
}

for_each_impl timeout_in_suspend
impl_verdict
