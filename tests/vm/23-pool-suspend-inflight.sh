# SPDX-License-Identifier: GPL-2.0
# Suspending a pool while a provision is in flight must not hang (found by
# the soak, 90-soak.sh). A snapshot's origin takes a 4 KiB write, so its
# block is copied (kcopyd, through the pool device, as in dm-thin); the data
# device (dm-delay) delays reads by 3 s, so the copy's read is still in
# flight when the pool is suspended. dm waits for that read, then holds the
# copy's write until resume. The pool's postsuspend commit must not wait
# for the provision (it would never end: resume cannot come before the
# suspend returns). After resume the write completes with the copied data.
. /rthin/tests/lib.sh

use_impl rthin
modprobe dm-delay || fail "modprobe dm-delay"
meta=/dev/ram0 raw=/dev/ram1
size=$(sectors $raw)
run dmsetup create slow --table "0 $size delay $raw 0 0 $raw 0 0"
mkpool pool $meta /dev/mapper/slow $size
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 16384
run dd if=/dev/urandom of=/tmp/blk bs=64k count=1 2>/dev/null
run dd if=/tmp/blk of=/dev/mapper/thin bs=64k count=1 oflag=direct 2>/dev/null
snap pool 2 1 thin
# Reads of the data device now take 3 s.
swap_table slow "0 $size delay $raw 0 3000 $raw 0 0"
# read_delayed: dm-delay holds a read of the data device (the copy's): its
# status counts the reads it delays.
read_delayed() { [ "$(dmsetup status slow | awk '{ print $4 }')" -gt 0 ]; }
run dd if=/dev/urandom of=/tmp/small bs=4k count=1 2>/dev/null
dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=1 count=1 oflag=direct 2>/tmp/w.err &
writer=$!
wait_for 10 read_delayed || fail "the copy's read did not reach the data device: $(cat /tmp/w.err)"
start=$(date +%s)
dmsetup suspend pool &
suspender=$!
wait_for 30 exited $suspender || fail "dmsetup suspend pool still runs after 30 s (a provision was in flight)"
wait $suspender || fail "dmsetup suspend pool failed"
echo "ok: the pool suspended in about $(($(date +%s) - start))s with a copy in flight"
run dmsetup resume pool
wait $writer || fail "the write to the origin failed: $(cat /tmp/w.err)"
cp /tmp/blk /tmp/want
dd if=/tmp/small of=/tmp/want bs=4k seek=1 conv=notrunc 2>/dev/null
got=$(dd if=/dev/mapper/thin bs=64k count=1 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/want)" ] || fail "the origin's block is not the old block with the new 4 KiB"
echo "ok: the origin holds the copied block with the new 4 KiB"
run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove slow
check_meta $meta
