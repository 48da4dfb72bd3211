# SPDX-License-Identifier: GPL-2.0
# Data space exhaustion, on the C dm-thin and on rthin. The data device is a
# dm-linear of 8 MiB (128 blocks) over /dev/ram1, grown later by reloading the
# linear table and then the pool table with the larger length.
# error_if_no_space: a provisioning write fails with ENOSPC at once, status
#   says out_of_data_space/error_if_no_space, writes to mapped blocks and
#   reads still work; after the grow, writes provision again.
# queue_if_no_space (default): a provisioning write waits; mapped writes and
#   reads go on meanwhile; after the grow the waiting write completes, with
#   its data in place. thin_check at the end of each.
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1
MB=2048
T=/dev/mapper/thin

# setup [FEATURE...]: pool on 8 MiB of linear data, thin 1 (64 MiB) with all
# 128 blocks written (pattern A), model /tmp/mn of its first 16 MiB.
setup() {
	FEAT="$*"
	fill $RAW 16 132
	run dmsetup create ndata --table "0 $((8 * MB)) linear $RAW 0"
	mkpool pool $META /dev/mapper/ndata $((8 * MB)) "$@"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((64 * MB))
	model_new /tmp/mn 16
	put $T /tmp/mn A 0 65536 128
	expect_used pool 128 "data device full"
	[ "$(data_total pool)" = 128 ] || fail "data total: $(info pool)"
	[ "$(pool_field pool 5)" = rw ] || fail "mode before any failed allocation: $(info pool)"
}

# grow: data device and pool to 16 MiB (256 blocks).
grow() {
	swap_table ndata "0 $((16 * MB)) linear $RAW 0"
	# ($FEAT unquoted: one argument per feature)
	reload_pool pool $META /dev/mapper/ndata $((16 * MB)) $FEAT
	[ "$(data_total pool)" = 256 ] || fail "data total after grow: $(info pool)"
	[ "$(pool_field pool 5)" = rw ] || fail "mode after grow: $(info pool)"
	echo "ok: grown to 256 blocks: $(info pool)"
}

finish() {
	run dmsetup remove thin
	run dmsetup remove pool
	run dmsetup remove ndata
	check_meta $META
}

error_mode() {
	setup error_if_no_space
	# A whole-block and a partial-block write to unmapped blocks: ENOSPC.
	for w in "$((8 * 1048576)) 65536" "$((12 * 1048576 + 4096)) 4096"; do
		set -- $w
		pattern B
		if timeout 30 dd if=/tmp/pat.B of=$T bs=$2 count=1 oflag=seek_bytes,direct seek=$1 \
			2>/tmp/dd.err; then
			fail "write of $2 bytes at $1 succeeded on a full pool (error_if_no_space): $(info pool)"
		fi
		grep -q "No space left on device" /tmp/dd.err ||
			fail "write of $2 bytes at $1 on a full pool: expected ENOSPC, got: $(cat /tmp/dd.err)"
		echo "ok: write at $1 failed: $(cat /tmp/dd.err)"
	done
	[ "$(pool_field pool 5)" = out_of_data_space ] || fail "mode after ENOSPC: $(info pool)"
	[ "$(pool_field pool 7)" = error_if_no_space ] || fail "no-space policy: $(info pool)"
	expect_thin thin "$(thin_status_for 128 127)" "after refused writes"
	# Mapped blocks stay writable, everything readable (unmapped: zeroes).
	put $T /tmp/mn B $((5 * 65536)) 65536 1
	put $T /tmp/mn B $((7 * 65536 + 8192)) 4096 1
	same $T /tmp/mn "full pool, error_if_no_space"
	expect_used pool 128 "after writes to mapped blocks"
	grow
	put $T /tmp/mn C $((8 * 1048576)) 65536 1
	put $T /tmp/mn C $((12 * 1048576 + 4096)) 4096 1
	expect_used pool 130 "after the grow"
	same $T /tmp/mn "after the grow"
	[ "$(pool_field pool 7)" = error_if_no_space ] || fail "no-space policy after grow: $(info pool)"
	finish
}

queue_mode() {
	setup
	pattern C
	timeout 300 dd if=/tmp/pat.C of=$T bs=4096 count=1 oflag=seek_bytes,direct \
		seek=$((9 * 1048576 + 8192)) 2>/tmp/held.err &
	held=$!
	# Its failed allocation switches the pool out of data space.
	wait_for 10 pool_mode_is pool out_of_data_space || fail "mode with a waiting write: $(info pool)"
	exited $held && {
		wait $held
		fail "a provisioning write on a full pool (queue_if_no_space) did not wait: rc $?, $(cat /tmp/held.err)"
	}
	echo "ok: the provisioning write waits"
	[ "$(pool_field pool 5)" = out_of_data_space ] || fail "mode with a waiting write: $(info pool)"
	[ "$(pool_field pool 7)" = queue_if_no_space ] || fail "no-space policy: $(info pool)"
	# Meanwhile: mapped writes and reads complete.
	pattern B
	timeout 30 dd if=/tmp/pat.B of=$T bs=65536 count=1 oflag=seek_bytes,direct seek=$((3 * 65536)) \
		2>/tmp/dd.err || fail "write to a mapped block while another waits for space: $(cat /tmp/dd.err)"
	dd if=/tmp/pat.B of=/tmp/mn bs=65536 count=1 seek=3 conv=notrunc 2>/dev/null
	timeout 30 dd if=$T of=/tmp/rd bs=1M count=16 iflag=direct 2>/tmp/dd.err ||
		fail "read while a write waits for space: $(cat /tmp/dd.err)"
	cmp /tmp/rd /tmp/mn || fail "read while a write waits for space differs from the model"
	echo "ok: mapped write and reads go on while a write waits"
	exited $held && fail "the waiting write ended before the grow: $(cat /tmp/held.err)"
	grow
	if ! wait_for 30 exited $held; then
		# A bio lost by the target keeps its device busy: the runner's
		# remove_all --force would then hang the VM and lose every result.
		# Try a pool suspend/resume (dm-thin requeues held bios on resume)
		# and tell the console, which outlives the VM.
		note "70-io-nospace [$IMPL]: a write held for data space is still waiting 30 s after the pool grew ($(info pool)); trying a pool suspend/resume"
		timeout 20 dmsetup suspend pool && timeout 20 dmsetup resume pool
		sleep 5
		kill -0 $held 2>/dev/null &&
			note "70-io-nospace [$IMPL]: the write is still held; removing its device may hang"
		fail "the waiting write is still waiting 30 s after the grow: $(info pool)"
	fi
	wait $held || fail "the waiting write failed after the grow: rc $?, $(cat /tmp/held.err)"
	echo "ok: the waiting write completed after the grow"
	dd if=/tmp/pat.C of=/tmp/mn bs=4096 count=1 iflag=skip_bytes skip=0 \
		oflag=seek_bytes seek=$((9 * 1048576 + 8192)) conv=notrunc 2>/dev/null
	expect_used pool 129 "after the waiting write"
	same $T /tmp/mn "after the grow"
	finish
}

for_each_impl error_mode
for_each_impl queue_mode
impl_verdict
