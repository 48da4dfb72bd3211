# SPDX-License-Identifier: GPL-2.0
# Faults under the data device, on the C dm-thin and on rthin. The data
# device is a dm table over /dev/ram1 (filled with 'Z' bytes first, so a
# block mapped without being filled shows) whose 64 KiB pieces are either
# linear or the error target; reloading it moves the faults to exact data
# blocks.
# read_fault: one mapped data block fails: reads of that thin block get
#   EIO, every other block reads and writes fine, new blocks provision, the
#   pool stays rw; with the fault gone the block reads its data again.
# write_fault: every free data block fails: a partial write into a new block
#   (its zeroing fails), a whole-block write and a partial write into a
#   block shared with a snapshot (its copy fails) each get EIO, no mapping
#   goes in (thin statuses unchanged, the blocks read as before), the pool
#   stays rw, mapped blocks take writes; with the fault gone the same writes
#   succeed. The C dm-thin keeps the block allocated for a failed
#   provision (used +1 each, thin_check reports them leaked); rthin gives
#   them back.
# thin_check at the end of each.
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1
MB=2048
BLK=65536
NBLK=64 # data blocks (4 MiB)
T=/dev/mapper/thin

# data_table GOOD...: the data device's table: the data blocks listed
# linear onto RAW, every other block the error target.
data_table() {
	echo "$@" | tr ' ' '\n' | awk -v n=$NBLK -v raw=$RAW '
		NF { good[$1] = 1 }
		END {
			for (b = 0; b < n; b = e) {
				for (e = b + 1; e < n && good[e] == good[b]; e++) ;
				if (good[b]) print b * 128, (e - b) * 128, "linear", raw, b * 128
				else print b * 128, (e - b) * 128, "error"
			}
		}'
}
# set_data GOOD...: reloads the data device with data_table GOOD.
set_data() {
	data_table "$@" >/tmp/dtable
	run dmsetup reload fdata /tmp/dtable
	run dmsetup suspend fdata
	run dmsetup resume fdata
	echo "data device: $(grep -c error /tmp/dtable) error piece(s)"
}
all_blocks() { seq 0 $((NBLK - 1)); }

# setup: pool over the data device (all linear), thin 1 (16 MiB) with
# blocks 0-15 written whole (pattern A), model /tmp/mf (2 MiB).
setup() {
	fill $RAW 4 132
	data_table $(all_blocks) >/tmp/dtable
	run dmsetup create fdata /tmp/dtable
	mkpool pool $META /dev/mapper/fdata $((NBLK * 128))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 $((16 * MB))
	model_new /tmp/mf 2
	put $T /tmp/mf A 0 $BLK 16
	expect_used pool 16 "16 blocks written"
}
rw_mode() {
	[ "$(pool_field pool 5)" = rw ] || fail "$1: pool mode $(info pool), expected rw"
	echo "ok: pool rw ($1)"
}
# eio WHAT CMD...: CMD must fail with EIO.
eio() {
	local what=$1
	shift
	if "$@" 2>/tmp/eio.err; then
		fail "$what succeeded on a failing data block"
	fi
	grep -q "Input/output error" /tmp/eio.err || fail "$what: expected EIO, got: $(cat /tmp/eio.err)"
	echo "ok: $what: EIO"
}
finish() {
	run dmsetup remove_all
	check_meta $META
}

read_fault() {
	local bad
	setup
	live_mappings pool $META 1 >/tmp/map
	bad=$(awk '$1 == 5 { print $2 }' /tmp/map)
	[ -n "$bad" ] || fail "no mapping for block 5: $(cat /tmp/map)"
	set_data $(all_blocks | grep -vx "$bad")
	eio "a read of block 5 (data block $bad)" dd if=$T of=/dev/null bs=4096 skip=$((5 * 16 + 3)) count=1 iflag=direct
	# The other blocks: reads, writes in place, a new block.
	dd if=$T of=/tmp/rf bs=$BLK count=5 iflag=direct 2>/dev/null || fail "read of blocks 0-4"
	dd if=/tmp/mf of=/tmp/mf5 bs=$BLK count=5 2>/dev/null
	cmp /tmp/rf /tmp/mf5 || fail "blocks 0-4 differ from the model"
	put $T /tmp/mf B $((7 * BLK + 4096)) 4096 1
	put $T /tmp/mf B $((20 * BLK + 512)) 4096 1
	expect_used pool 17 "one new block beside the failing one"
	rw_mode "after a read error"
	set_data $(all_blocks)
	same $T /tmp/mf "the fault removed"
	finish
}

write_fault() {
	local used0 st1 st2
	setup
	snap pool 2 1 thin
	mkthin snap pool 2 $((16 * MB))
	cp /tmp/mf /tmp/ms
	# Block 10 of thin 1 unshared (a whole-block write).
	put $T /tmp/mf B $((10 * BLK)) $BLK 1
	# Every free data block fails; the used ones work.
	live_mappings pool $META 1 >/tmp/map
	live_mappings pool $META 2 >>/tmp/map
	set_data $(awk '{ print $2 }' /tmp/map | sort -un)
	used0=$(data_used pool)
	st1=$(info thin) st2=$(info snap)
	pattern C
	eio "a 4 KiB write into a new block (zeroing fails)" \
		dd if=/tmp/pat.C of=$T bs=4096 count=1 seek=$((30 * 16 + 2)) oflag=direct
	eio "a whole-block write into a new block" \
		dd if=/tmp/pat.C of=$T bs=$BLK count=1 seek=31 oflag=direct
	# (4 KiB: busybox dd may turn a 512-byte O_DIRECT write into a
	# buffered one, whose error the page cache swallows.)
	eio "a 4 KiB write into a shared block (the copy fails)" \
		dd if=/tmp/pat.C of=/dev/mapper/snap bs=4096 count=1 seek=$((3 * 16 + 5)) oflag=direct
	eio "a 4 KiB write into a block shared with the snapshot (origin side)" \
		dd if=/tmp/pat.C of=$T bs=4096 count=1 seek=$((4 * 16)) oflag=direct
	# Nothing mapped: statuses as before, data as before, unmapped zeroes.
	expect_thin thin "$st1" "after the failed writes"
	expect_thin snap "$st2" "after the failed writes"
	same $T /tmp/mf "origin after the failed writes"
	same /dev/mapper/snap /tmp/ms "snapshot after the failed writes"
	zeroes $T 2 14 "blocks 32-255 of thin 1 after the failed writes"
	case $IMPL in
	rthin) expect_used pool "$used0" "the failed provisions gave their blocks back" ;;
	# dm-thin's process_prepared_mapping leaves the allocated block
	# allocated when the fill or the overwrite failed: leaked.
	c) expect_used pool $((used0 + 4)) "C dm-thin: the 4 failed provisions leak their blocks" ;;
	esac
	rw_mode "after write errors on the data device"
	put $T /tmp/mf D $((10 * BLK + 8192)) 4096 1
	same $T /tmp/mf "a write to a mapped unshared block while the free ones fail"
	set_data $(all_blocks)
	put $T /tmp/mf C $((30 * BLK + 2 * 4096)) 4096 1
	put $T /tmp/mf C $((31 * BLK)) $BLK 1
	put /dev/mapper/snap /tmp/ms C $((3 * BLK + 5 * 4096)) 4096 1
	put $T /tmp/mf C $((4 * BLK)) 4096 1
	same $T /tmp/mf "origin with the fault removed"
	same /dev/mapper/snap /tmp/ms "snapshot with the fault removed"
	rw_mode "with the fault removed"
	case $IMPL in
	rthin) finish ;;
	c)
		run dmsetup remove_all
		if thin_check $META >/tmp/tc.out 2>&1; then
			fail "thin_check passed: the 4 leaked blocks of the C dm-thin are gone?"
		fi
		grep -q "^4 data blocks have leaked" /tmp/tc.out || fail "thin_check: $(cat /tmp/tc.out)"
		echo "ok: thin_check reports the 4 data blocks the C dm-thin leaked: $(tr "\n" " " </tmp/tc.out)"
		;;
	esac
}

for_each_impl read_fault
for_each_impl write_fault
impl_verdict
