# SPDX-License-Identifier: GPL-2.0
# Corrupted metadata (issue 7). The corrupt_images binary of tests/core-support (run by
# scripts/check.sh) writes a base pool image (thins, snapshots with shared
# subtrees, overflow reference counts, a held metadata snapshot) and a list
# of damages: bit flips and zeroed blocks with wrong checksums, resealed
# structural damage (B-tree cycles, absurd counts and roots, mappings past
# the data device, zero reference counts) and metadata devices shorter than
# the superblock says. Each image is activated and exercised: the first
# MiB of every thin read and rewritten, create_thin, create_snap, delete of
# every thin, release_metadata_snap, status, remove. Allowed outcomes: the pool is
# refused at construction or ends in fail or read-only mode, each with a
# kernel log line saying why, or it stays read-write. An image that stays
# read-write without any error while thin_check rejects it is run on the C
# dm-thin too: rthin must catch at least what dm-thin catches. No oops,
# WARNING or hang (each command has a timeout; the harness checks the log).
# RTHIN_CORRUPT_ALL=1 runs every generated image (tier 2), not only tier 1.
. /rthin/tests/lib.sh

dir=/rthin/data/corrupt
[ -f $dir/cases ] || fail "no $dir/cases: scripts/check.sh generates it (cargo run -p rthin-core-support --bin corrupt_images)"
. $dir/info
tier=1
[ "${RTHIN_CORRUPT_ALL:-0}" = 1 ] && tier=2
pool_len=$((DATA_BLOCKS * BLOCK_SECTORS))
T="timeout 60"
run dmsetup create cdata --table "0 $pool_len linear /dev/ram1 0"

# mode: the pool's mode word (rw, ro, out_of_data_space or Fail).
mode() {
	local s
	s=$(info pool 2>/dev/null) || { echo gone; return; }
	case $s in
	Fail*) echo Fail ;;
	*) echo "$s" | cut -d' ' -f5 ;;
	esac
}
# since_mark: this image's kernel log lines from the target (after the marker).
since_mark() {
	dmesg | awk -v m="rthin-test: image $n $1\$" '
		$0 ~ m { on = 1; next }
		on && /rthin-test:/ { exit }
		on && /rthin|thin|device-mapper|metadata/ && !/debugfs:/ { sub(/^\[[^]]*\] /, ""); printf "%s|", $0; if (++k == 2) exit }'
}

# exercise: the pool is up; runs everything against it and sets ERRS to the
# number of failed operations. One device holds the first MiB of every thin
# (one target each: fewer commands, this test runs many images).
exercise() {
	local id start=0 table=
	ERRS=0
	for id in $THINS; do
		table="$table$start 2048 $THIN_T /dev/mapper/pool $id\n"
		start=$((start + 2048))
	done
	if $T dmsetup create thins --table "$(printf "$table")" 2>/dev/null; then
		# Reads, then writes breaking the sharing of the snapshots' blocks:
		# allocations and reference count changes.
		$T dd if=/dev/mapper/thins of=/dev/null bs=1M iflag=direct 2>/dev/null || ERRS=$((ERRS + 1))
		$T dd if=/tmp/blk of=/dev/mapper/thins bs=1M oflag=direct 2>/dev/null || ERRS=$((ERRS + 1))
		$T dmsetup remove thins || ERRS=$((ERRS + 1))
	else
		ERRS=$((ERRS + 1))
	fi
	# Deleting every device walks every mapping tree and decrements every
	# reference count: damage anywhere is touched. The held metadata
	# snapshot's release walks its copy of the trees.
	for m in "create_thin 100" "create_snap 101 0" release_metadata_snap; do
		$T dmsetup message pool 0 "$m" 2>/dev/null || ERRS=$((ERRS + 1))
	done
	for id in $THINS 101; do
		$T dmsetup message pool 0 "delete $id" 2>/dev/null || ERRS=$((ERRS + 1))
	done
	$T dmsetup status pool >/dev/null || ERRS=$((ERRS + 1)) # commits
}

# load: the image: the base, the damaged block, the device's length.
cur_len=
# O_DIRECT: the pool reads the RAM disk through dm-linear, not through
# /dev/ram0's page cache; the flush drops what thin_check read last time.
load() {
	run dd if=$dir/base.img of=/dev/ram0 bs=64k oflag=direct 2>/dev/null
	[ "$blk" = - ] || run dd if=$dir/p/$n of=/dev/ram0 bs=4096 seek=$blk conv=notrunc oflag=direct 2>/dev/null
	if [ "$cur_len" != $dev_blocks ]; then
		dmsetup remove cmeta 2>/dev/null
		run dmsetup create cmeta --table "0 $((dev_blocks * 8)) linear /dev/ram0 0"
		cur_len=$dev_blocks
	fi
	run blockdev --flushbufs /dev/mapper/cmeta
}
# try IMPL: runs the loaded image on IMPL; sets OUT (refused, Fail, ro, rw
# or rw-errors) and ERRS.
try() {
	use_impl "$1"
	echo "rthin-test: image $n $1" >/dev/kmsg
	ERRS=0
	if ! $T dmsetup create pool --table "0 $pool_len $POOL_T /dev/mapper/cmeta /dev/mapper/cdata $BLOCK_SECTORS 0 1 error_if_no_space" 2>/dev/null; then
		OUT=refused
	else
		exercise
		OUT=$(mode)
		[ "$OUT" = rw ] && [ $ERRS -gt 0 ] && OUT=rw-errors
		$T dmsetup remove pool || fail "image $n ($what) on $1: removing the pool failed"
	fi
}

dd if=/dev/urandom of=/tmp/blk bs=1M count=5 2>/dev/null
total=0 refused=0 failmode=0 ro=0 rwerr=0 accepted=0 undetectable=0 tc_bad=0 c_runs=0
while read -r n t role blk dev_blocks what; do
	[ "$t" -le $tier ] || continue
	total=$((total + 1))
	load
	# thin_check first: nothing has written to the image yet.
	if thin_check /dev/mapper/cmeta >/dev/null 2>&1; then tc=ok; else tc=bad tc_bad=$((tc_bad + 1)); fi
	try rthin
	why=$(since_mark rthin)
	echo "image $n [$role $what] thin_check=$tc -> $OUT (errors $ERRS) ${why:+log: $why}"
	case $OUT in
	refused | Fail | ro | out_of_data_space | rw-errors)
		# Refused or degraded: the kernel log must say why.
		[ -n "$why" ] || fail "image $n ($role $what): $OUT without a kernel log line"
		case $OUT in
		refused) refused=$((refused + 1)) ;;
		Fail) failmode=$((failmode + 1)) ;;
		ro | out_of_data_space) ro=$((ro + 1)) ;;
		*) rwerr=$((rwerr + 1)) ;;
		esac
		;;
	rw)
		if [ $tc = ok ]; then
			undetectable=$((undetectable + 1))
		else
			# thin_check rejects what rthin accepted: dm-thin must not catch it either.
			c_runs=$((c_runs + 1))
			load
			try c
			echo "    dm-thin on image $n: $OUT (errors $ERRS)"
			[ "$OUT" = rw ] || fail "image $n ($role $what): rthin accepted it silently, dm-thin reports $OUT"
			accepted=$((accepted + 1))
		fi
		;;
	*) fail "image $n ($role $what): pool mode '$OUT'" ;;
	esac
done <$dir/cases

echo "images: $total (tier <= $tier); thin_check rejects $tc_bad"
echo "outcomes: refused at ctr $refused, fail mode $failmode, read-only or out-of-data-space $ro, rw with failed operations $rwerr, accepted though thin_check rejects (dm-thin accepts too) $accepted, accepted and thin_check passes $undetectable"
echo "dm-thin comparison runs: $c_runs"
[ $total -gt 0 ] || fail "no image ran"
