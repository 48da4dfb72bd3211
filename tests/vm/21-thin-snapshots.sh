# SPDX-License-Identifier: GPL-2.0
# Copy-on-write in one pass: after create_snap the origin's blocks are shared;
# its reads stay on the fast path, writes to either side break sharing (the
# fast path must stop remapping the origin's writes in place), each side keeps
# its own data, reads of shared blocks work from both, and deleting the
# snapshot returns its blocks.
. /rthin/tests/lib.sh

use_impl rthin

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
vol=$((64 * 2048)) # 64 MiB
mkpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
mkthin origin pool 1 $vol
run dd if=/dev/urandom of=/tmp/a bs=1M count=8 2>/dev/null
run dd if=/tmp/a of=/dev/mapper/origin bs=1M oflag=direct 2>/dev/null
# Read it once so every block is in the origin's mapping cache.
run dd if=/dev/mapper/origin of=/dev/null bs=1M count=8 iflag=direct 2>/dev/null

snap pool 2 1 origin
mkthin snap pool 2 $vol

# The snapshot keeps the origin's reads on the fast path: create_snap marks
# its cached mappings shared instead of forgetting them.
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
origin_dev=$(dmsetup info -c --noheadings -o major,minor origin | tr -d ' ')
deferred() { awk '$1 == "deferred" { print $2 }' "/sys/kernel/debug/rthin-$pool_dev/$origin_dev"; }
before=$(deferred)
run dd if=/dev/mapper/origin of=/dev/null bs=1M count=8 iflag=direct 2>/dev/null
after=$(deferred)
[ -n "$before" ] && [ "$after" = "$before" ] ||
	fail "reads of the snapshotted origin went through the workers (deferred $before -> $after)"

# Overwrite 4 KiB in each of the first 64 blocks of the origin.
run dd if=/dev/urandom of=/tmp/b bs=4k count=64 2>/dev/null
i=0
while [ $i -lt 64 ]; do
	dd if=/tmp/b of=/dev/mapper/origin bs=4k skip=$i seek=$((i * 16 + 3)) count=1 \
		oflag=direct 2>/dev/null || fail "write to origin block $i failed"
	i=$((i + 1))
done
got=$(dd if=/dev/mapper/snap bs=1M count=8 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "the snapshot changed when the origin was written"
# The origin: its own 4 KiB, and the old data around it (copied, not zeroed).
cp /tmp/a /tmp/a2
i=0
while [ $i -lt 64 ]; do
	dd if=/tmp/b of=/tmp/a2 bs=4k skip=$i seek=$((i * 16 + 3)) count=1 conv=notrunc 2>/dev/null
	i=$((i + 1))
done
got=$(dd if=/dev/mapper/origin bs=1M count=8 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a2)" ] || fail "the origin does not hold old data plus its new writes"

# Writes to the snapshot leave the origin alone.
run dd if=/dev/urandom of=/tmp/c bs=1M count=2 2>/dev/null
run dd if=/tmp/c of=/dev/mapper/snap bs=1M seek=4 oflag=direct 2>/dev/null
got=$(dd if=/dev/mapper/origin bs=1M count=8 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a2)" ] || fail "the origin changed when the snapshot was written"
got=$(dd if=/dev/mapper/snap bs=1M skip=4 count=2 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/c)" ] || fail "the snapshot does not read back its own write"

used() { dmsetup status pool | awk '{ split($6, a, "/"); print a[1] }'; }
before=$(used)
echo "data blocks used with the snapshot: $before"
[ "$before" = $((128 + 64 + 32)) ] || fail "expected 224 used data blocks, got $before"
run dmsetup remove snap
run dmsetup message pool 0 "delete 2"
after=$(used)
echo "after deleting it: $after"
# The origin keeps 128 blocks: 64 copies it made and 64 it shared.
[ "$after" = 128 ] || fail "deleting the snapshot left $after blocks used, expected 128"

run dmsetup remove origin
run dmsetup remove pool
run thin_check $meta
