# SPDX-License-Identifier: GPL-2.0
# The pool-wide mapping cache (rust/core/src/mapping_cache.rs): one worker
# lookup caches the whole B-tree leaf, so the first touch of neighbouring
# blocks after activation stays on the map call's fast path; workers answer
# reads of an unchanged device from the last commit without the pool lock,
# and never for a block changed since; the cache survives a reload of the
# thin; a pool grown at resume gets a bigger cache;
# a deleted device's entries never serve a new device of the same id; a
# snapshot of an origin that was inactive at the time still makes the
# origin's writes break sharing; writes to unshared blocks of an unchanged
# device are answered from the last commit without the pool lock, and those
# to an active origin snapshotted since are not.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
vol=$((64 * 2048)) # 64 MiB, 1024 blocks

# Counters of the pool's debugfs files (by major:minor, kept across reloads).
devno() { dmsetup info -c --noheadings -o major,minor "$1" | tr -d ' '; }
counter() { awk -v k="$3" '$1 == k { print $2 }' "/sys/kernel/debug/rthin-$(devno "$1")/$2"; }
deferred() { counter pool "$(devno "$1")" deferred; }
# read_blocks DEV FIRST N: a 4 KiB O_DIRECT read at the start of blocks FIRST..FIRST+N-1.
read_blocks() {
	local b=$2 end=$(($2 + $3))
	while [ $b -lt $end ]; do
		dd if="$1" of=/dev/null bs=4k skip=$((b * 16)) count=1 iflag=direct 2>/dev/null ||
			fail "read of block $b of $1"
		b=$((b + 1))
	done
}

# ---- a leaf at a time, and across a thin reload ----
# The pool's data device is a linear slice, grown further down.
run dmsetup create data --table "0 $((128 * 2048)) linear $data 0"
mkpool pool $meta /dev/mapper/data $((128 * 2048))
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $vol
fill /dev/mapper/thin 64 132
run dmsetup remove thin
run dmsetup remove pool
# Activated again: nothing cached.
openpool pool $meta /dev/mapper/data $((128 * 2048))
mkthin thin pool 1 $vol
d0=$(deferred thin)
read_blocks /dev/mapper/thin 0 1
d1=$(deferred thin)
read_blocks /dev/mapper/thin 1 100
d2=$(deferred thin)
echo "deferred reads: first block $((d1 - d0)), next 100 blocks $((d2 - d1))"
[ $((d1 - d0)) = 1 ] || fail "the first read after activation was not deferred ($d0 -> $d1)"
# 1024 mappings in leaves of at least 84: the 100 neighbours span at most 2 more leaves.
[ $((d2 - d1)) -le 2 ] || fail "first touches of neighbouring blocks went to the workers: $((d2 - d1)) of 100"
read_blocks /dev/mapper/thin 0 1024
d3=$(deferred thin)
echo "deferred reads over all 1024 blocks: $((d3 - d2))"
[ $((d3 - d2)) -le 12 ] || fail "$((d3 - d2)) of 1024 first touches were deferred (expected one per leaf)"
# A reload of the thin alone (lvchange --refresh) keeps what is cached.
run dmsetup suspend thin
run dmsetup load thin --table "$(thin_table pool 1 $vol)"
run dmsetup resume thin
read_blocks /dev/mapper/thin 0 1024
d4=$(deferred thin)
[ "$d4" = "$d3" ] || fail "reads after a thin reload were deferred ($d3 -> $d4)"
echo "ok: no read deferred after the thin reload"
# Nothing changed since the pool was activated: the workers answered every
# deferred read from the last commit's tree, without the pool lock.
unlocked=$(counter pool "$(devno thin)" unlocked_lookups)
echo "deferred reads answered without the pool lock: $unlocked of $((d3 - d0))"
[ "$unlocked" = $((d3 - d0)) ] ||
	fail "$unlocked of $((d3 - d0)) deferred reads of an unchanged pool were answered without the pool lock"

# ---- the pool grows: its cache grows with it ----
slots=$(counter pool pool mapping_cache_slots)
[ "$slots" = 4096 ] || fail "a pool of 2048 blocks has a cache of $slots slots, expected 4096"
run dmsetup suspend thin
run dmsetup suspend pool
run dmsetup load data --table "0 $((256 * 2048)) linear $data 0"
run dmsetup resume data
run dmsetup load pool --table "$(pool_table $meta /dev/mapper/data $((256 * 2048)))"
run dmsetup resume pool
run dmsetup resume thin
slots=$(counter pool pool mapping_cache_slots)
[ "$slots" = 8192 ] || fail "after growing to 4096 blocks the cache has $slots slots, expected 8192"
# The new cache starts empty, so every read below goes to a worker. A block
# changed since the last commit is never read from that commit's tree: a
# discarded MiB reads as zeroes at once, before the waker's next commit.
for mib in 20 35 50; do
	run blkdiscard -o $((mib * 1048576)) -l 1048576 /dev/mapper/thin
	zeroes /dev/mapper/thin $mib 1 "right after its discard"
done
# The cache fills again; the rest of the data is intact.
run dd if=/dev/mapper/thin of=/tmp/all bs=1M iflag=direct 2>/dev/null
[ "$(tr -d 'Z' </tmp/all | wc -c)" = $((3 * 1048576)) ] ||
	fail "the thin does not read back its data after the pool grew"
rm -f /tmp/all

# ---- a deleted device's entries never serve a new device of the same id ----
run dmsetup remove thin
run dmsetup message pool 0 "delete 1"
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $vol
zeroes /dev/mapper/thin 0 64 "a new device with a deleted device's id"
run dmsetup remove thin

# ---- a snapshot of an inactive origin ----
run dmsetup message pool 0 "create_thin 2"
mkthin origin pool 2 $vol
fill /dev/mapper/origin 8 101
read_blocks /dev/mapper/origin 0 128
run dmsetup remove origin
run dmsetup message pool 0 "create_snap 3 2"
mkthin origin pool 2 $vol
mkthin snap pool 3 $vol
fill /dev/mapper/origin 8 102
got=$(dd if=/dev/mapper/snap bs=1M count=8 iflag=direct 2>/dev/null | tr -d 'A' | wc -c)
[ "$got" = 0 ] || fail "writes to the origin went into blocks it shares with a snapshot taken while it was inactive"
got=$(dd if=/dev/mapper/origin bs=1M count=8 iflag=direct 2>/dev/null | tr -d 'B' | wc -c)
[ "$got" = 0 ] || fail "the origin does not read back its new data"
echo "ok: the snapshot kept its data"

# ---- writes answered from the last commit, and a snapshot of an active origin ----
# heads DEV MODEL PAT: a 4 KiB O_DIRECT write of pattern PAT at the start
# of each of the first 64 blocks of DEV, and into MODEL (lib.sh's put).
heads() {
	local b=0
	while [ $b -lt 64 ]; do
		put "$1" "$2" "$3" $((b * 65536)) 4096 1
		b=$((b + 1))
	done
}
# (Read before the reactivation: reads after it would fill the cache.)
capture /dev/mapper/origin /tmp/origin.model 4
run dmsetup remove snap
run dmsetup remove origin
run dmsetup remove pool
# Activated again: nothing cached, and the origin (2) has no change the
# last commit does not cover. Its first writes, to unshared blocks, are
# answered from that commit's tree without the pool lock.
openpool pool $meta /dev/mapper/data $((256 * 2048))
mkthin origin pool 2 $vol
o=$(devno origin)
d0=$(deferred origin) u0=$(counter pool "$o" unlocked_lookups)
heads /dev/mapper/origin /tmp/origin.model C
d1=$(deferred origin) u1=$(counter pool "$o" unlocked_lookups)
echo "deferred writes to unshared committed blocks: $((d1 - d0)), answered without the pool lock: $((u1 - u0))"
[ $((d1 - d0)) -ge 1 ] || fail "the first write after activation was not deferred ($d0 -> $d1)"
[ $((u1 - u0)) = $((d1 - d0)) ] ||
	fail "$((u1 - u0)) of $((d1 - d0)) deferred writes to unshared blocks were answered without the pool lock"
same /dev/mapper/origin /tmp/origin.model "the origin reads back the writes answered from the last commit"
cp /tmp/origin.model /tmp/snap.model
# Snapshotted while active (suspended around the message, as LVM does): its
# entries are marked shared, so its writes go to the workers, and the
# last commit's tree (which the snapshot's commit made) must not answer
# them: its blocks are shared by the device's new snapshot time.
snap pool 5 2 origin
heads /dev/mapper/origin /tmp/origin.model D
u2=$(counter pool "$o" unlocked_lookups)
[ "$u2" = "$u1" ] || fail "$((u2 - u1)) writes to blocks shared with a new snapshot were answered from the last commit"
mkthin snap pool 5 $vol
same /dev/mapper/snap /tmp/snap.model "the snapshot of an active origin keeps its data after the origin's writes"
same /dev/mapper/origin /tmp/origin.model "the origin reads back its writes after the snapshot"
rm -f /tmp/origin.model /tmp/snap.model
echo "ok: writes after the snapshot of an active origin broke sharing"
run dmsetup remove snap
run dmsetup remove origin
run dmsetup remove pool
run dmsetup remove data
check_meta $meta
