# SPDX-License-Identifier: GPL-2.0
# Two dm devices on one thin id ("a" and "b", both thin 1): a bio of b that
# waits for a's provision of the same block belongs to b, and must never
# end up depending on a, which may be removed meanwhile.
#
# The data device's writes go to an error target through dm-delay (3 s), so
# a's whole-block write to block 0 takes a data block and holds the block's
# cell for 3 s; b's write to block 0 arrives meanwhile and waits for that
# cell. a's write fails; a is removed at once; then the data device is
# healed and b writes block 0 again. b's first write may fail (dm-thin fails
# the bios waiting behind a failed provision; rthin tries them again), but it
# must end, and b's second write must succeed and read back, the pool must
# answer its status, suspend and resume, and the metadata must check.
#
# Before the fix, rthin handed b's waiting bio to a's lanes: a's worker
# provisioned it again as a's, a went away with that provision in flight,
# its completion found a's lanes closed, and the cell of block 0 was never
# released: b's second write waited forever. On the C dm-thin and rthin.
. /rthin/tests/lib.sh

modprobe dm-delay || fail "modprobe dm-delay"
META=/dev/ram0 RAW=/dev/ram1
BLK=128
SIZE=$((16 * BLK))

# writes_delayed: dm-delay holds a write of the data device.
writes_delayed() { [ "$(dmsetup status data | awk '{ print $5 }')" -gt 0 ]; }

twin_targets() {
	run dmsetup create under --table "0 $SIZE error"
	run dmsetup create data --table \
		"0 $SIZE delay /dev/mapper/under 0 0 /dev/mapper/under 0 3000 /dev/mapper/under 0 0"
	mkpool pool $META /dev/mapper/data $SIZE
	run dmsetup message pool 0 "create_thin 1"
	mkthin a pool 1 $SIZE
	mkthin b pool 1 $SIZE
	pattern A
	pattern B
	pattern C
	dd if=/tmp/pat.A of=/dev/mapper/a bs=64k count=1 oflag=direct 2>/tmp/a.err &
	wa=$!
	wait_for 20 writes_delayed || fail "a's write did not reach the data device: $(cat /tmp/a.err)"
	dd if=/tmp/pat.B of=/dev/mapper/b bs=64k count=1 oflag=direct 2>/tmp/b.err &
	wb=$!
	# b's write reaches the cell of block 0 well within a's 3 s.
	sleep 1
	wait_for 30 exited $wa || fail "a's write still runs after 30 s"
	if wait $wa; then
		fail "a's write into the failing data device succeeded"
	fi
	echo "ok: a's write failed: $(tail -1 /tmp/a.err)"
	run dmsetup remove a
	wait_for 30 exited $wb || fail "b's write, which waited for a's provision, still runs 30 s after a was removed"
	if wait $wb; then
		echo "ok: b's first write ended, with success"
	else
		echo "ok: b's first write ended, with an error: $(tail -1 /tmp/b.err)"
	fi
	swap_table under "0 $SIZE linear $RAW 0"
	dd if=/tmp/pat.C of=/dev/mapper/b bs=64k count=1 oflag=direct 2>/tmp/c.err &
	wc=$!
	wait_for 30 exited $wc ||
		fail "b's second write to block 0 still runs after 30 s (the block's cell was never released?)"
	wait $wc || fail "b's second write to block 0 failed: $(cat /tmp/c.err)"
	dd if=/tmp/pat.C of=/dev/mapper/b bs=64k count=1 seek=1 oflag=direct 2>/tmp/c.err ||
		fail "b's write to block 1 failed: $(cat /tmp/c.err)"
	got=$(dd if=/dev/mapper/b bs=64k count=1 iflag=direct 2>/dev/null | md5sum)
	want=$(dd if=/tmp/pat.C bs=64k count=1 2>/dev/null | md5sum)
	[ "$got" = "$want" ] || fail "b's block 0 does not hold b's second write"
	echo "ok: b's block 0 holds b's second write"
	timeout 30 dmsetup status pool >/tmp/st.out 2>&1 || fail "the pool's status did not answer in 30 s"
	echo "ok: pool status: $(cut -d' ' -f4- /tmp/st.out)"
	timeout 30 dmsetup suspend pool || fail "the pool did not suspend in 30 s"
	timeout 30 dmsetup resume pool || fail "the pool did not resume in 30 s"
	echo "ok: the pool suspends and resumes"
	run dmsetup remove b
	run dmsetup remove pool
	# dm-thin leaks the data block of a failed provision (it neither maps
	# nor frees it); thin_check counts that as a non-fatal error.
	if [ "$IMPL" = c ]; then
		thin_check --ignore-non-fatal-errors $META >/tmp/thin_check.out 2>&1 || {
			cat /tmp/thin_check.out
			fail "thin_check $META"
		}
		echo "ok: thin_check --ignore-non-fatal-errors $META (dm-thin)"
	else
		check_meta $META
	fi
	run dmsetup remove data
	run dmsetup remove under
}

for_each_impl twin_targets
impl_verdict
