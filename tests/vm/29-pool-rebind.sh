# SPDX-License-Identifier: GPL-2.0
# The pool object's lifetime, as dm-thin's: it lives while any pool table or
# thin target holds it, and a new pool table for the same metadata device
# binds to it. A pool table swapped for `error` and back while a thin is
# active keeps one allocator (every block keeps its data); while only a thin
# holds the pool, conflicting tables are refused as dm-thin refuses them; a
# pool table load that fails after finding the pool object gives its hold
# back (rthin only: the failure is injected through debugfs). Then table
# details of a pool's activation where rthin behaves as dm-thin, one
# scenario each. Run on both implementations with RTHIN_TEST_IMPLS=c,rthin.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
BLK=65536
SIZE=$(sectors $DATA)

# thin 1 active; the pool's table swapped to error and back; thin 2 created
# and written (blocks 1-4, pattern B), then thin 1 (blocks 1-8, pattern A).
rebind_keeps_one_allocator() {
	mkpool pool $META $DATA $SIZE
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin1 pool 1 $((16 * 2048))
	swap_table pool "0 $SIZE error"
	swap_table pool "$(pool_table $META $DATA $SIZE)"
	run dmsetup message pool 0 "create_thin 2"
	mkthin thin2 pool 2 $((16 * 2048))
	model_new /tmp/m1 1
	model_new /tmp/m2 1
	put /dev/mapper/thin2 /tmp/m2 B $BLK $BLK 4
	put /dev/mapper/thin1 /tmp/m1 A $BLK $BLK 8
	same /dev/mapper/thin2 /tmp/m2 "thin 2 after thin 1's writes"
	same /dev/mapper/thin1 /tmp/m1 "thin 1"
	expect_used pool 12 "4 blocks of thin 2, 8 of thin 1"
	run dmsetup remove thin1
	run dmsetup remove thin2
	run dmsetup remove pool
	check_meta $META
}

# While only thin 1 holds the pool (its table is error), its metadata device
# is still the pool's: another pool device may not take it, nor may the
# pool device take other devices; the pool's own table binds again.
conflicts_refused_while_a_thin_holds_the_pool() {
	run dmsetup create other --table "0 65536 linear /dev/ram2 0"
	mkpool pool $META $DATA $SIZE
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin1 pool 1 $((16 * 2048))
	put /dev/mapper/thin1 - A 0 $BLK 2
	swap_table pool "0 $SIZE error"
	expect_error "Device or resource busy" \
		dmsetup create pool2 --table "$(pool_table $META /dev/mapper/other 65536)"
	expect_dmesg "metadata device already in use by a pool"
	dmsetup remove pool2 >/dev/null 2>&1
	expect_error "Device or resource busy" \
		dmsetup load pool --table "$(pool_table $META /dev/mapper/other 65536)"
	expect_dmesg "data device already in use by a pool"
	wipe /dev/mapper/other
	expect_error "Invalid argument" \
		dmsetup load pool --table "$(pool_table /dev/mapper/other $DATA $SIZE)"
	expect_dmesg "different pool cannot replace a pool"
	swap_table pool "$(pool_table $META $DATA $SIZE)"
	expect_used pool 2 "the pool bound again keeps thin 1's blocks"
	put /dev/mapper/thin1 - A $((2 * BLK)) $BLK 1
	expect_used pool 3 "thin 1 provisions through the rebound pool"
	run dmsetup remove thin1
	run dmsetup remove pool
	check_meta $META
}

# A pool table load failing after it found the pool object leaves the
# registry as it was: once the pool is gone, another pool device may open
# its metadata device. rthin only (dm-thin has no such knob).
failed_load_gives_its_hold_back() {
	[ "$IMPL" = rthin ] || {
		echo "skipped on $IMPL: the failure is injected through rthin's debugfs"
		return 0
	}
	mkpool pool $META $DATA $SIZE
	dbg=/sys/kernel/debug/rthin-$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')/pool
	run sh -c "echo 'fail_next_table_load 1' >$dbg"
	grep -qx "fail_next_table_load 1" $dbg || fail "the knob does not show in $dbg"
	expect_error "Cannot allocate memory" dmsetup load pool --table "$(pool_table $META $DATA $SIZE)"
	grep -qx "fail_next_table_load 0" $dbg || fail "the injected failure was not taken"
	run dmsetup message pool 0 "create_thin 1"
	run dmsetup remove pool
	run dmsetup create pool2 --table "$(pool_table $META $DATA $SIZE)"
	run dmsetup message pool2 0 "create_thin 2"
	run dmsetup remove pool2
	check_meta $META
}

# A read_only table larger than the pool: the pool keeps its size, and its
# metadata device, set read-only, gets no write (the block layer warns of any).
read_only_table_writes_no_metadata() {
	run dmsetup create meta --table "0 16384 linear $META 0"
	mkpool pool /dev/mapper/meta $DATA $((SIZE / 2))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin1 pool 1 $((16 * 2048))
	model_new /tmp/m1 1
	put /dev/mapper/thin1 /tmp/m1 A 0 $BLK 3
	run dmsetup remove thin1
	run dmsetup remove pool
	before=$(md5sum </dev/mapper/meta)
	warned=$(dmesg | grep -c "write to read-only block-device")
	run blockdev --setro /dev/mapper/meta
	openpool pool /dev/mapper/meta $DATA $SIZE read_only
	pool_mode_is pool ro || fail "read_only table: mode $(pool_field pool 5) (status: $(info pool))"
	echo "read_only pool with a larger table: $(info pool)"
	# dm-thin logs a growth here but shows none; rthin waits for write mode.
	[ "$(data_total pool)" = $((SIZE / 256)) ] || fail "the read_only table grew the pool: $(info pool)"
	expect_error "Operation not supported" dmsetup message pool 0 "create_thin 2"
	mkthin thin1 pool 1 $((16 * 2048))
	same /dev/mapper/thin1 /tmp/m1 "thin 1 through the read_only pool"
	run dmsetup remove thin1
	run dmsetup remove pool
	run blockdev --setrw /dev/mapper/meta
	[ "$(dmesg | grep -c "write to read-only block-device")" = "$warned" ] ||
		fail "writes to the read-only metadata device: $(dmesg | grep "write to read-only block-device" | tail -3)"
	[ "$(md5sum </dev/mapper/meta)" = "$before" ] || fail "the read_only table changed the metadata device"
	echo "ok: the read_only table wrote nothing to the metadata device"
	check_meta /dev/mapper/meta
}

# Tables loaded into a new pool device and never resumed: each is checked
# against the default features (discards on), not against the first one.
unbound_tables_checked_against_defaults() {
	wipe $META
	run dmsetup create pool --notable
	run dmsetup load pool --table "$(pool_table $META $DATA $SIZE ignore_discard)"
	run dmsetup load pool --table "$(pool_table $META $DATA $SIZE)"
	expect_error "Invalid argument" dmsetup load pool --table "$(pool_table $META $DATA $SIZE ignore_discard)"
	expect_dmesg "Discard support cannot be disabled once enabled"
	run dmsetup resume pool
	run dmsetup message pool 0 "create_thin 1"
	run dmsetup remove pool
	check_meta $META
}

# The first activation of a new pool sizes its data space map silently; a
# later growth logs its line.
no_growth_line_at_first_activation() {
	line="growing the data device from 0 to"
	before=$(dmesg | grep -c "$line")
	mkpool pool $META $DATA $((SIZE / 2))
	[ "$(dmesg | grep -c "$line")" = "$before" ] ||
		fail "first activation logged: $(dmesg | grep "$line" | tail -1)"
	reload_pool pool $META $DATA $SIZE
	expect_dmesg "growing the data device from $((SIZE / 256)) to $((SIZE / 128)) blocks"
	run dmsetup remove pool
}

for_each_impl rebind_keeps_one_allocator
for_each_impl conflicts_refused_while_a_thin_holds_the_pool
for_each_impl failed_load_gives_its_hold_back
for_each_impl read_only_table_writes_no_metadata
for_each_impl unbound_tables_checked_against_defaults
for_each_impl no_growth_line_at_first_activation
impl_verdict
