# SPDX-License-Identifier: GPL-2.0
# Running out of data space: space freed by a discard is reused at once (the
# allocator commits first, as dm-thin's alloc_data_block); with
# queue_if_no_space a write waits, a noflush suspend of the thin does not
# hang on it, and it completes with its data once the pool grows; with
# error_if_no_space it fails with ENOSPC. dm events (what dmeventd waits
# for) mark the low-water mark and each mode change. thin_check at the end.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0
wipe $meta
# 2 MiB of data: 32 blocks of 64 KiB, on a linear device we can grow.
run dmsetup create data --table "0 4096 linear /dev/ram1 0"
# Low-water mark: 4 free blocks.
run dmsetup create pool --table "0 4096 rthin-pool $meta /dev/mapper/data 128 4"
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 131072
events() { dmsetup info -c --noheadings -o events pool | tr -d ' '; }
ev0=$(events)
run dd if=/dev/urandom of=/dev/mapper/thin bs=64k count=27 oflag=direct 2>/dev/null
[ "$(events)" = "$ev0" ] || fail "event before the low-water mark (5 blocks free)"
run dd if=/dev/urandom of=/dev/mapper/thin bs=64k seek=27 count=5 oflag=direct 2>/dev/null
ev1=$(events)
[ "$ev1" = $((ev0 + 1)) ] || fail "expected one low-water event, events went $ev0 -> $ev1"
expect_dmesg "reached low water mark for data device: sending event."
status=$(dmsetup status pool)
case $status in *" 32/32 "*) ;; *) fail "expected a full pool: $status" ;; esac

# Discard 4 blocks; writing 4 other blocks reuses their space at once.
run blkdiscard -o 0 -l $((256 * 1024)) /dev/mapper/thin
run timeout 20 dd if=/dev/urandom of=/dev/mapper/thin bs=64k seek=100 count=4 oflag=direct 2>/dev/null
case $(dmsetup status pool) in *" rw "*) ;; *) fail "pool left write mode: $(dmsetup status pool)" ;; esac

# queue_if_no_space: the next new block waits.
run dd if=/dev/urandom of=/tmp/blk bs=64k count=1 2>/dev/null
dd if=/tmp/blk of=/dev/mapper/thin bs=64k seek=200 count=1 oflag=direct 2>/dev/null &
writer=$!
# The pool reports out_of_data_space once the write has met the full pool.
out_of_space() { case $(dmsetup status pool) in *" out_of_data_space "*) return 0 ;; esac; return 1; }
wait_for 20 out_of_space || fail "pool not out_of_data_space 20 s after a write to it: $(dmsetup status pool)"
kill -0 $writer 2>/dev/null || fail "the write to a full pool did not wait"
status=$(dmsetup status pool)
echo "$status"
case $status in *" out_of_data_space "*) ;; *) fail "pool not out_of_data_space: $status" ;; esac
expect_dmesg "switching pool to out-of-data-space (queue IO) mode"
[ "$(events)" -gt "$ev1" ] || fail "no event for the switch to out-of-data-space"

# A noflush suspend hands the waiting bio back to dm instead of hanging.
run timeout 20 dmsetup suspend --noflush thin
# Grow the data device, then the pool.
run dmsetup suspend pool
run dmsetup load data --table "0 8192 linear /dev/ram1 0"
run dmsetup resume data
run dmsetup load pool --table "0 8192 rthin-pool $meta /dev/mapper/data 128 4"
run dmsetup resume pool
run dmsetup resume thin
timeout 20 sh -c "wait $writer" 2>/dev/null
wait $writer || fail "the queued write failed after the pool grew"
got=$(dd if=/dev/mapper/thin bs=64k skip=200 count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/blk)" ] || fail "the queued write's data is not there"
status=$(dmsetup status pool)
echo "$status"
case $status in *" rw "*) ;; *) fail "pool did not return to write mode: $status" ;; esac

# error_if_no_space: fill the rest, then a new block fails with ENOSPC.
run dmsetup suspend thin
run dmsetup suspend pool
run dmsetup load pool --table "$(pool_table $meta /dev/mapper/data 8192 error_if_no_space)"
run dmsetup resume pool
run dmsetup resume thin
run dd if=/dev/urandom of=/dev/mapper/thin bs=64k seek=300 count=31 oflag=direct 2>/dev/null
case $(dmsetup status pool) in *" 64/64 "*) ;; *) fail "expected 64/64: $(dmsetup status pool)" ;; esac
if out=$(dd if=/dev/zero of=/dev/mapper/thin bs=64k seek=400 count=1 oflag=direct 2>&1); then
	fail "a write to a full error_if_no_space pool succeeded"
fi
echo "$out"
case $out in *"No space left"*) ;; *) fail "expected ENOSPC, got: $out" ;; esac
# Mapped blocks stay writable and readable.
run dd if=/dev/zero of=/dev/mapper/thin bs=64k seek=300 count=1 oflag=direct 2>/dev/null

run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove data
run thin_check $meta
