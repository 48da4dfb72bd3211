# SPDX-License-Identifier: GPL-2.0
# Out of data space, with the module parameter no_space_timeout: with 2 s a
# waiting write fails with ENOSPC after about 2 s, and the status policy field
# turns to error_if_no_space while the table line keeps no such feature
# (J60); with 0 a write waits as long as it must, and deleting an inactive
# thin that holds blocks brings the pool back to rw at once and the waiting
# write completes (J61). The module is reloaded; plain insmod at the end.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 raw=/dev/ram1
restore() {
	dmsetup remove_all --force >/dev/null 2>&1
	rmmod dm_rthin 2>/dev/null
	insmod /rthin/dm-rthin.ko || echo "FAIL: could not reload dm-rthin.ko" >&2
}
trap restore EXIT

# bad WHY: a failed check that does not stop the test (it fails at the end).
failed=0
bad() {
	echo "FAIL: $*" >&2
	failed=$((failed + 1))
}

# As dm-thin's, the parameter is visible (and writable, 0644) in sysfs.
param=/sys/module/dm_rthin/parameters/no_space_timeout
reload() {
	dmsetup remove_all --force >/dev/null 2>&1
	run rmmod dm_rthin
	run insmod /rthin/dm-rthin.ko no_space_timeout=$1
	if [ -f $param ]; then
		[ "$(cat $param)" = "$1" ] || bad "$param is $(cat $param), not $1"
		[ -w $param ] || bad "$param is not writable (dm-thin's is 0644)"
	else
		bad "no $param (dm-thin's no_space_timeout is a 0644 module parameter)"
	fi
}

# A full pool of 32 blocks: thin 1 (active) holds 24, thin 2 (inactive) 8.
setup() {
	run dmsetup create data --table "0 4096 linear $raw 0"
	mkpool pool $meta /dev/mapper/data 4096
	run dmsetup message pool 0 "create_thin 1"
	run dmsetup message pool 0 "create_thin 2"
	mkthin t2 pool 2 131072
	run dd if=/dev/urandom of=/dev/mapper/t2 bs=64k count=8 oflag=direct 2>/dev/null
	run dmsetup remove t2
	mkthin thin pool 1 131072
	run dd if=/dev/urandom of=/dev/mapper/thin bs=64k count=24 oflag=direct 2>/dev/null
	[ "$(field 6)" = 32/32 ] || fail "expected a full pool: $(dmsetup status pool)"
}
# field N: the Nth word of the pool's status line (5 mode... see below).
field() { dmsetup status pool | awk -v n="$1" '{ print $n }'; }
# Pool status words: 4 transaction, 5 metadata, 6 data, 7 held root, 8 mode,
# 9 discards, 10 no-space policy, 11 needs_check.

# --- J60: no_space_timeout=2.
reload 2
setup
run dd if=/dev/urandom of=/tmp/blk bs=64k count=1 2>/dev/null
dd if=/tmp/blk of=/dev/mapper/thin bs=64k seek=100 count=1 oflag=direct >/tmp/w.out 2>&1 &
writer=$!
# The write's failed allocation switches the pool out of data space; the
# timeout runs from then (seen within the 0.2 s of wait_for's polling).
wait_for 10 pool_mode_is pool out_of_data_space || fail "J60: not out_of_data_space: $(dmsetup status pool)"
start=$(date +%s)
exited $writer && fail "J60: the write to a full pool did not wait: $(cat /tmp/w.out)"
wait_for 15 exited $writer || fail "J60: the write still waits 15 s after the pool filled"
elapsed=$(($(date +%s) - start))
wait $writer && fail "J60: the waiting write succeeded"
echo "J60: the waiting write failed ${elapsed}s after the pool ran out of space: $(cat /tmp/w.out)"
grep -q "No space left" /tmp/w.out || fail "J60: expected ENOSPC, got: $(cat /tmp/w.out)"
# The waker checks the 2 s deadline once a second, so the write fails 2 to
# 3 s after the switch; whole seconds of `date` make that 1 to 4, and a
# second more is left for a loaded host's TCG.
[ $elapsed -ge 1 ] && [ $elapsed -le 5 ] || fail "J60: failed after ${elapsed}s, expected 2 to 3"
s=$(dmsetup status pool)
echo "$s"
[ "$(field 8)" = out_of_data_space ] || fail "J60: mode after the timeout: $s"
[ "$(field 10)" = error_if_no_space ] || fail "J60: policy field after the timeout: $s"
t=$(dmsetup table pool)
case $t in *" 128 0 0 ") ;; *) fail "J60: the table line changed: $t" ;; esac
expect_dmesg "switching pool to out-of-data-space (error IO) mode"
# A new provisioning write now fails at once.
start=$(date +%s)
if out=$(timeout 20 dd if=/tmp/blk of=/dev/mapper/thin bs=64k seek=101 count=1 oflag=direct 2>&1); then
	fail "J60: a write to a full pool succeeded after the timeout"
fi
elapsed=$(($(date +%s) - start))
case $out in *"No space left"*) ;; *) fail "J60: expected ENOSPC, got: $out" ;; esac
[ $elapsed -le 1 ] || fail "J60: the write after the timeout took ${elapsed}s to fail"
# Mapped blocks still take writes.
run dd if=/tmp/blk of=/dev/mapper/thin bs=64k seek=3 count=1 oflag=direct 2>/dev/null

# --- no_space_timeout=0 and J61.
reload 0
setup
dd if=/tmp/blk of=/dev/mapper/thin bs=64k seek=100 count=1 oflag=direct >/tmp/w.out 2>&1 &
writer=$!
wait_for 10 pool_mode_is pool out_of_data_space || fail "not out_of_data_space: $(dmsetup status pool)"
# That nothing ends the wait can only be seen by waiting: 5 s, more than
# twice J60's timeout.
sleep 5
exited $writer && fail "no_space_timeout=0: the write did not keep waiting: $(cat /tmp/w.out)"
s=$(dmsetup status pool)
echo "after 5 s: $s"
[ "$(field 8)" = out_of_data_space ] || fail "not out_of_data_space: $s"
[ "$(field 10)" = queue_if_no_space ] || fail "no_space_timeout=0: policy field: $s"
# Delete thin 2 (inactive, 8 blocks): messages work out of data space.
start=$(date +%s)
run dmsetup message pool 0 "delete 2"
wait_for 10 exited $writer || fail "J61: the waiting write still waits 10 s after delete freed space"
elapsed=$(($(date +%s) - start))
wait $writer || fail "J61: the waiting write failed after delete: $(cat /tmp/w.out)"
echo "J61: the waiting write completed ${elapsed}s after the delete"
[ $elapsed -le 2 ] || fail "J61: took ${elapsed}s, expected about 1"
s=$(dmsetup status pool)
echo "$s"
[ "$(field 8)" = rw ] || fail "J61: pool not back to rw: $s"
[ "$(field 6)" = 25/32 ] || fail "J61: expected 25/32 data blocks used: $s"
got=$(dd if=/dev/mapper/thin bs=64k skip=100 count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/blk)" ] || fail "J61: the parked write's data is not there"

run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove data
run thin_check $meta
[ $failed = 0 ] || fail "$failed checks failed"
