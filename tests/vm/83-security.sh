# SPDX-License-Identifier: GPL-2.0
# No data leaks between volumes, on the C dm-thin and on rthin.
# (a) With zeroing on (the default): a thin fills the whole 16 MiB pool with
#     'Z' bytes and is then deleted (or, on a pool with
#     no_discard_passdown, discarded), so every free data block holds stale
#     bytes (checked on the data device). New thins then provision blocks
#     with partial writes (512 B, 1 KiB, 4 KiB, 8 KiB, at 512-byte-aligned
#     but not 4 KiB-aligned offsets, at a block's start and end, one
#     straddling two blocks), two thins at once: every whole block reads as
#     the written pieces with zeroes around them. A snapshot's shared block
#     broken by a 512-byte write (on either side) holds the origin's bytes
#     around the piece, not the stale ones.
# (b) Deleting a thin and creating another with the same id: the new one
#     is empty (status "0 -", reads zeroes) and its partial writes land in
#     blocks that held the deleted thin's data: zeroes around them again.
# (c) skip_block_zeroing: the rest of a block provisioned by a partial
#     write is whatever the data device held there: the deleted volume's
#     bytes (dm-thin leaks by design; Documentation/admin-guide.md says so).
#     Whole-block writes leave nothing stale.
# (d) Unprivileged callers cannot reach a pool: as uid 1000 (busybox su),
#     dmsetup create/message/status and opening the pool's node for writing
#     fail with EACCES, also with /dev/mapper/control opened up to them (then
#     dm's CAP_SYS_ADMIN check refuses the ioctls); the pool is unchanged.
. /rthin/tests/lib.sh

META=/dev/ram0 DATA=/dev/ram1
MB=2048
BLK=65536
POOL_MIB=16 # 256 data blocks

# stale_pool HOW [FEATURE...]: a pool whose every data block holds 'Z'
# bytes written through thin 1, which is then deleted (HOW=delete) or
# discarded (HOW=discard); the freed blocks must still hold the bytes.
stale_pool() {
	local how=$1 n
	shift
	mkpool pool $META $DATA $((POOL_MIB * MB)) "$@"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin1 pool 1 $((POOL_MIB * MB))
	fill /dev/mapper/thin1 $POOL_MIB 132
	expect_used pool 256 "thin 1 filled the pool"
	case $how in
	delete)
		run dmsetup remove thin1
		run dmsetup message pool 0 "delete 1"
		;;
	discard)
		run blkdiscard /dev/mapper/thin1
		expect_thin thin1 "0 -" "thin 1 discarded"
		run dmsetup remove thin1
		;;
	esac
	expect_used pool 0 "thin 1 gone ($how)"
	n=$(dd if=$DATA bs=1M count=$POOL_MIB 2>/dev/null | tr -d Z | wc -c)
	[ "$n" = 0 ] || fail "the data device lost its stale bytes after the $how ($n other bytes): nothing to test"
	echo "ok: every free data block holds 'Z' bytes"
}

# PIECES: "block offset length" of the partial writes into a fresh thin;
# the last one straddles blocks 9 and 10 (offsets 512-byte aligned, the
# sector size, some not 4 KiB aligned).
PIECES="0 0 512
1 65024 512
2 3584 4096
3 33280 4096
4 1536 1024
5 61440 4096
6 0 4096
7 12800 8192
8 512 512
9 63488 4096"
NPIECE_BLOCKS=11

# partial_writes THIN MODEL PAT: writes PIECES (pattern PAT) into THIN,
# whose MiB-long model (zeroes) receives them too.
partial_writes() {
	echo "$PIECES" | while read -r b off len; do
		put "$1" "$2" "$3" $((b * BLK + off)) "$len" 1
	done || fail "partial writes to $1"
}

zeroing() {
	local how=$1 feat=
	[ "$how" = discard ] && feat=no_discard_passdown
	stale_pool "$how" $feat

	# (a) Two thins provision at the same time with partial writes.
	run dmsetup message pool 0 "create_thin 2"
	run dmsetup message pool 0 "create_thin 3"
	mkthin thin2 pool 2 $((POOL_MIB * MB))
	mkthin thin3 pool 3 $((POOL_MIB * MB))
	model_new /tmp/m2 1
	model_new /tmp/m3 1
	(partial_writes /dev/mapper/thin2 /tmp/m2 A) &
	w2=$!
	(partial_writes /dev/mapper/thin3 /tmp/m3 B) &
	w3=$!
	wait $w2 || fail "partial writes to thin 2"
	wait $w3 || fail "partial writes to thin 3"
	expect_used pool $((2 * NPIECE_BLOCKS)) "partial writes to thins 2 and 3"
	same /dev/mapper/thin2 /tmp/m2 "thin 2: zeroes around the pieces"
	same /dev/mapper/thin3 /tmp/m3 "thin 3: zeroes around the pieces"
	zeroes /dev/mapper/thin2 1 $((POOL_MIB - 1)) "thin 2 beyond its writes"

	# A snapshot's shared blocks broken by 512-byte writes, on the
	# snapshot side (blocks 0-3) and the origin side (blocks 4-7).
	run dmsetup message pool 0 "create_thin 4"
	mkthin thin4 pool 4 $((POOL_MIB * MB))
	model_new /tmp/m4 1
	put /dev/mapper/thin4 /tmp/m4 C 0 $BLK 8
	snap pool 5 4 thin4
	mkthin thin5 pool 5 $((POOL_MIB * MB))
	cp /tmp/m4 /tmp/m5
	for b in 0 1 2 3; do
		put /dev/mapper/thin5 /tmp/m5 D $((b * BLK + b * 7680 + 512)) 512 1
		put /dev/mapper/thin4 /tmp/m4 D $(((b + 4) * BLK + b * 7680 + 1024)) 512 1
	done
	expect_used pool $((2 * NPIECE_BLOCKS + 16)) "8 blocks shared, 8 copies"
	same /dev/mapper/thin5 /tmp/m5 "snapshot: the origin's bytes around the pieces"
	same /dev/mapper/thin4 /tmp/m4 "origin: its own bytes around the pieces"

	# (b) Thin 2 deleted, a new thin 2: empty, and its partial writes go
	# to blocks that held the old thin 2's (or 3's) bytes.
	run dmsetup remove thin2
	run dmsetup remove thin3
	run dmsetup message pool 0 "delete 2"
	run dmsetup message pool 0 "delete 3"
	expect_used pool 16 "thins 2 and 3 deleted"
	run dmsetup message pool 0 "create_thin 2"
	mkthin thin2 pool 2 $((POOL_MIB * MB))
	expect_thin thin2 "0 -" "new thin 2"
	zeroes /dev/mapper/thin2 0 $POOL_MIB "new thin 2 before any write"
	expect_used pool 16 "after reading the new thin 2"
	model_new /tmp/m2 1
	partial_writes /dev/mapper/thin2 /tmp/m2 E
	same /dev/mapper/thin2 /tmp/m2 "new thin 2: zeroes around the pieces"
	zeroes /dev/mapper/thin2 1 $((POOL_MIB - 1)) "new thin 2 beyond its writes"
	expect_used pool $((16 + NPIECE_BLOCKS)) "new thin 2 written"

	run dmsetup remove thin2
	run dmsetup remove thin5
	run dmsetup remove thin4
	run dmsetup remove pool
	check_meta $META
}

# (c) skip_block_zeroing: the deleted thin's bytes show through.
no_zeroing() {
	stale_pool delete skip_block_zeroing
	run dmsetup message pool 0 "create_thin 2"
	mkthin thin2 pool 2 $((POOL_MIB * MB))
	# The model: block 3 all 'Z' but for the 4 KiB written, block 5 all
	# written, zeroes elsewhere (unprovisioned).
	model_new /tmp/m2 1
	tr '\000' Z </dev/zero | dd of=/tmp/m2 bs=$BLK seek=3 count=1 iflag=fullblock conv=notrunc 2>/dev/null ||
		fail "model"
	put /dev/mapper/thin2 /tmp/m2 A $((3 * BLK + 8192)) 4096 1
	put /dev/mapper/thin2 /tmp/m2 B $((5 * BLK)) $BLK 1
	expect_used pool 2 "two blocks provisioned"
	same /dev/mapper/thin2 /tmp/m2 "skip_block_zeroing: the deleted thin's bytes around a partial write (as dm-thin), none after a whole-block write"
	run dmsetup remove thin2
	run dmsetup remove pool
	check_meta $META
}

# (d) As an unprivileged user.
USER_UID=1000
as_user() { su -s /bin/sh rthintest -c "$*"; }
# refused WHAT CMD: CMD run as the user must fail with "Permission denied".
refused() {
	local what=$1 out
	shift
	if out=$(as_user "$@" 2>&1); then
		fail "$what succeeded as uid $USER_UID: $out"
	fi
	case $out in
	*"Permission denied"*) echo "ok: $what refused as uid $USER_UID: $(echo "$out" | head -1)" ;;
	*) fail "$what as uid $USER_UID: expected EACCES, got: $out" ;;
	esac
}
unprivileged() {
	local before after param
	[ "$(as_user id -u)" = $USER_UID ] || fail "su to uid $USER_UID does not work: $(as_user id 2>&1)"
	mkpool pool $META $DATA $((POOL_MIB * MB))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin1 pool 1 $((POOL_MIB * MB))
	put /dev/mapper/thin1 - A 0 $BLK 2
	state() { echo "$(dmsetup table) / $(info pool) / $(info thin1) / $(dmsetup ls | sort | tr '\n' ' ')"; }
	before=$(state)
	for pass in "closed" "opened"; do
		# Second pass: the control node open to all, so that the ioctls
		# reach dm, whose CAP_SYS_ADMIN check must refuse them.
		[ $pass = opened ] && run chmod 0666 /dev/mapper/control
		refused "dmsetup create ($pass control)" "dmsetup create intruder --table '0 $((POOL_MIB * MB)) $THIN_T /dev/mapper/pool 1'"
		refused "create_thin 5 ($pass control)" "dmsetup message pool 0 'create_thin 5'"
		refused "dmsetup status ($pass control)" "dmsetup status pool"
		refused "dmsetup remove ($pass control)" "dmsetup remove thin1"
	done
	run chmod 0600 /dev/mapper/control
	refused "opening the pool for writing" "dd if=/dev/zero of=/dev/mapper/pool bs=4096 count=1 oflag=direct conv=notrunc"
	refused "opening the thin for writing" "dd if=/dev/zero of=/dev/mapper/thin1 bs=4096 count=1 oflag=direct conv=notrunc"
	refused "opening the thin for reading" "dd if=/dev/mapper/thin1 of=/dev/null bs=4096 count=1"
	case $IMPL in
	c) param=/sys/module/dm_thin_pool/parameters/no_space_timeout ;;
	rthin)
		param=/sys/module/dm_rthin/parameters/no_space_timeout
		for f in /sys/kernel/debug/rthin-*/pool; do
			[ -e "$f" ] || fail "no rthin debugfs file"
			refused "reading $f" "cat $f"
		done
		;;
	esac
	refused "writing $param" "echo 1 >$param"
	after=$(state)
	[ "$after" = "$before" ] || fail "the pool changed: before: $before; after: $after"
	echo "ok: pool unchanged: $after"
	# Thin 5 does not exist: root can create it now.
	run dmsetup message pool 0 "create_thin 5"
	run dmsetup remove thin1
	run dmsetup remove pool
	check_meta $META
	note "83-security [$IMPL]: uid 0 without CAP_SYS_ADMIN not tried: busybox setpriv cannot drop a bounding capability and the kernel has no user namespaces"
}

for_each_impl zeroing delete
for_each_impl zeroing discard
for_each_impl no_zeroing
# The user, in a copy of /etc/passwd put back afterwards.
rm -f /tmp/passwd.saved
[ -e /etc/passwd ] && cp /etc/passwd /tmp/passwd.saved
grep -q '^root:' /etc/passwd 2>/dev/null || echo "root:x:0:0::/root:/bin/sh" >>/etc/passwd
echo "rthintest:x:$USER_UID:$USER_UID::/tmp:/bin/sh" >>/etc/passwd
for_each_impl unprivileged
if [ -f /tmp/passwd.saved ]; then mv /tmp/passwd.saved /etc/passwd; else rm -f /etc/passwd; fi
impl_verdict
