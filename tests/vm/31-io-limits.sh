# SPDX-License-Identifier: GPL-2.0
# Queue limits as dm-thin's (issue 21). The same pool and thin are built on
# the C dm-thin and on rthin, over the same data device, for many block
# sizes (64 KiB to 1 GiB, powers of two and not) and data devices: with and
# without discard support (brd, dm-zero, null_blk with and without discard),
# with small maximum discard sizes (discard_max_bytes lowered on a linear
# device), with a small or odd max_sectors (null_blk) and with their own
# io_min/io_opt (dm-stripe under the pool). For each case these must be
# identical on both: every file under /sys/block/<dm>/queue/ of the pool and
# of the thin, the pool's status and table lines, the "Disabling discard
# passdown" log line (without its module prefix) and the geometry mkfs.xfs -N
# would give the thin. The test always runs both implementations.
. /rthin/tests/lib.sh

META=/dev/ram2
THIN_LEN=$((16 * 1024 * 2048)) # 16 GiB, the same for every case
BIG_MB=16384                   # size of the null_blk and dm-zero devices
NULLB_CFG=/sys/kernel/config/nullb
FAILED=
NCASES=0
NLOGGED=0
START=$(date +%s)

cleanup() {
	dmsetup remove_all --force >/dev/null 2>&1
	local d
	for d in "$NULLB_CFG"/n*; do
		[ -d "$d" ] || continue
		echo 0 >"$d/power" 2>/dev/null
		rmdir "$d" 2>/dev/null
	done
	rmmod null_blk 2>/dev/null
	return 0
}
trap cleanup EXIT

# dm_queue NAME: the queue folder of a dm device (found without a fork: the
# test spawns as few processes as it can, they are slow under TCG).
# Sets Q.
dm_queue() {
	local d n
	for d in /sys/block/dm-*; do
		read -r n <"$d/dm/name" && [ "$n" = "$1" ] && Q=$d/queue && return 0
	done
	fail "no dm device $1"
}

# nullb NAME MB DISCARD MAX_SECTORS: a null_blk device /dev/NAME made through
# configfs (MAX_SECTORS 0: null_blk's default); with DISCARD it is memory
# backed (null_blk discards only then; nothing is written, so no memory).
nullb() {
	local d=$NULLB_CFG/$1
	run mkdir "$d"
	echo "$2" >"$d/size" && echo "$3" >"$d/memory_backed" && echo "$3" >"$d/discard" &&
		echo "$4" >"$d/max_sectors" && echo 1 >"$d/power" || fail "configuring null_blk $1"
	wait_for 5 test -b "/dev/$1" || fail "/dev/$1 did not appear"
}

# queue_files PREFIX DIR: "PREFIX.FILE=VALUE" for every readable file of DIR,
# read with the shell's own read (no fork per file).
queue_files() {
	local f v
	for f in "$2"/*; do
		[ -f "$f" ] || continue
		v=
		if [ -r "$f" ] && { read -r v <"$f" || [ -n "$v" ]; } 2>/dev/null; then
			echo "$1.${f##*/}=$v"
		else
			echo "$1.${f##*/}=<unreadable>"
		fi
	done
}

# build OUT DATA LEN BS FEATURES...: with the current implementation, a pool
# lpool of LEN sectors on DATA with blocks of BS sectors and a 16 GiB thin
# lthin on it; writes what must match into OUT, then removes both.
build() {
	local out=$1 data=$2 len=$3 bs=$4 feat= mark line
	shift 4
	[ $# -gt 0 ] && feat=" $# $*"
	mark="io-limits $NCASES $IMPL"
	echo "rthin-test: $mark" >/dev/kmsg
	wipe $META
	run dmsetup create lpool --table "0 $len $POOL_T $META $data $bs 0$feat"
	run dmsetup message lpool 0 "create_thin 1"
	mkthin lthin lpool 1 $THIN_LEN
	{
		dm_queue lpool && queue_files pool "$Q"
		dm_queue lthin && queue_files thin "$Q"
		# Status and table without the target's name.
		line=$(dmsetup status lpool) && echo "pool.status=${line#* * * }"
		line=$(dmsetup table lpool) && echo "pool.table=${line#* * * }"
		# The passdown line, from "Data device" on (the prefix names the module).
		dmesg | awk -v m="rthin-test: $mark" 'index($0, m) { n = NR } { l[NR] = $0 }
			END { for (i = n + 1; i <= NR; i++) if (j = index(l[i], "Data device")) print "log=" substr(l[i], j) }'
		mkfs.xfs -N /dev/mapper/lthin 2>&1
	} >"$out"
	run dmsetup remove lthin lpool
}

# case DATA LEN BS [FEATURE...]: the stack on both implementations; their
# outputs must be identical.
case_() {
	local desc="$1 bs=$3${4:+ $4}" c=/tmp/lim.c r=/tmp/lim.rthin v
	NCASES=$((NCASES + 1))
	(use_impl c && build $c "$@") || fail "building on dm-thin: $desc"
	(use_impl rthin && build $r "$@") || fail "building on rthin: $desc"
	# A summary line for the log (pool limits, thin discard limits,
	# passdown), or "missing" if dm-thin's output lacks what is compared.
	v=$(awk -F= '
		/^pool\.(minimum_io_size|optimal_io_size|max_sectors_kb|discard_granularity|discard_max_bytes|read_ahead_kb)=/ { p = p " " $2; n++ }
		/^thin\.(minimum_io_size|discard_granularity|discard_max_bytes)=/ { t = t " " $2; n++ }
		/^pool\.status=/ { s = $2; n++ }
		/^meta-data=\/dev\/mapper\/lthin / { n++ }
		/^log=/ { lg = " (logged)" }
		END { if (n != 11) print "missing"; else print "pool" p " | thin" t " |", ((s ~ / no_discard_passdown /) ? "no" : (s ~ / ignore_discard /) ? "ignore_discard" : "yes") lg }' $c)
	[ "$v" != missing ] || fail "$desc: the dm-thin output lacks the limits, status or mkfs geometry: $(cat $c)"
	case $v in *logged*) NLOGGED=$((NLOGGED + 1)) ;; esac
	if diff $c $r >/tmp/lim.diff; then
		echo "same: $desc: $v"
	else
		echo "DIFFERENT: $desc (dm-thin: $v)"
		sed 's/^/    /' /tmp/lim.diff
		FAILED="$FAILED
$desc"
	fi
}

# ---- the data devices ----
modprobe dm-zero || fail "modprobe dm-zero"
modprobe null_blk nr_devices=0 || fail "modprobe null_blk"
[ -d "$NULLB_CFG" ] || mount -t configfs none /sys/kernel/config || fail "mounting configfs"
[ -d "$NULLB_CFG" ] || fail "no $NULLB_CFG"
BIG=$((BIG_MB * 2048))
RAM=/dev/ram3
RAM_LEN=$(sectors $RAM)

# dm-zero: discards (granularity 512, no maximum), max_sectors by default.
run dmsetup create zero0 --table "0 $BIG zero"
# null_blk without discard: default max_sectors, an odd 1000 and 96 (48 KiB,
# less than any block); with discard.
nullb nb0 $BIG_MB 0 0
nullb nb1 $BIG_MB 0 1000
nullb nb2 $BIG_MB 0 96
nullb nb3 $BIG_MB 1 0
# Linear devices on brd with discard_max_bytes lowered to 32 KiB (below any
# block size) and to 1 MiB (below blocks over 1 MiB).
run dmsetup create dmax32k --table "0 $RAM_LEN linear $RAM 0"
dm_queue dmax32k
echo 32768 >"$Q/discard_max_bytes" || fail "lowering discard_max_bytes"
run dmsetup create dmax1m --table "0 $RAM_LEN linear $RAM 0"
dm_queue dmax1m
echo 1048576 >"$Q/discard_max_bytes" || fail "lowering discard_max_bytes"
# Striped: 2 x 64 KiB (io_opt 128 KiB) and 3 x 64 KiB (192 KiB) on dm-zero,
# 4 x 256 KiB (1 MiB) on null_blk without discard.
half=$((BIG / 2)) third=$((BIG / 3 / 128 * 128)) quarter=$((BIG / 4 / 512 * 512))
run dmsetup create zero1 --table "0 $BIG zero"
run dmsetup create zero2 --table "0 $BIG zero"
run dmsetup create stripe2 --table "0 $((half * 2)) striped 2 128 /dev/mapper/zero0 0 /dev/mapper/zero1 0"
run dmsetup create stripe3 --table "0 $((third * 3)) striped 3 128 /dev/mapper/zero0 0 /dev/mapper/zero1 0 /dev/mapper/zero2 0"
nullb nb4 $((BIG_MB / 4)) 0 0
nullb nb5 $((BIG_MB / 4)) 0 0
nullb nb6 $((BIG_MB / 4)) 0 0
nullb nb7 $((BIG_MB / 4)) 0 0
run dmsetup create stripe4 --table "0 $((quarter * 4)) striped 4 512 /dev/nb4 0 /dev/nb5 0 /dev/nb6 0 /dev/nb7 0"

echo "data devices (queue: minimum_io_size optimal_io_size max_sectors_kb discard_granularity discard_max_bytes):"
for d in $RAM /dev/nb0 /dev/nb1 /dev/nb2 /dev/nb3 /dev/mapper/zero0 /dev/mapper/dmax32k \
	/dev/mapper/dmax1m /dev/mapper/stripe2 /dev/mapper/stripe3 /dev/mapper/stripe4; do
	case $d in
	/dev/mapper/*) dm_queue "${d#/dev/mapper/}" ;;
	*) Q=/sys/block/${d#/dev/}/queue ;;
	esac
	echo "  $d: $(cat $Q/minimum_io_size $Q/optimal_io_size $Q/max_sectors_kb $Q/discard_granularity $Q/discard_max_bytes | tr '\n' ' ')"
done

# ---- the cases ----
# Block sizes in sectors: 64 KiB to 1 GiB, powers of two and not (192 KiB,
# 320 KiB, 1.5 MiB, 12 MiB, 1 GiB - 64 KiB). Every one on dm-zero; on the
# others the ones that take a different path there.
echo "each case: pool discard_granularity discard_max_bytes max_sectors_kb minimum_io_size optimal_io_size read_ahead_kb | thin discard_granularity discard_max_bytes minimum_io_size | passdown (logged: dm-thin logged turning it off)"
for bs in 128 256 384 640 2048 3072 4096 24576 2097024 2097152; do
	case_ /dev/mapper/zero0 $BIG $bs
done
for bs in 128 4096 2097152; do
	case_ /dev/nb0 $BIG $bs
done
for bs in 2048 3072; do
	case_ /dev/nb1 $BIG $bs
done
for bs in 128 384 640; do
	case_ /dev/nb2 $BIG $bs
done
case_ /dev/nb3 $BIG 128
for bs in 128 256 384; do
	case_ /dev/mapper/stripe2 $((half * 2)) $bs
done
for bs in 128 256 384 640; do
	case_ /dev/mapper/stripe3 $((third * 3)) $bs
done
for bs in 128 384 2048; do
	case_ /dev/mapper/stripe4 $((quarter * 4)) $bs
done
for bs in 128 3072; do
	case_ $RAM $RAM_LEN $bs
	case_ /dev/mapper/dmax32k $RAM_LEN $bs
done
for bs in 2048 3072; do
	case_ /dev/mapper/dmax1m $RAM_LEN $bs
done
# The features that change the discard limits, on data devices with and
# without discard and with a small maximum.
for f in no_discard_passdown ignore_discard; do
	case_ $RAM $RAM_LEN 128 $f
	case_ $RAM $RAM_LEN 4096 $f
	case_ /dev/nb0 $BIG 128 $f
	case_ /dev/mapper/dmax32k $RAM_LEN 128 $f
done

# dm-thin logged "Disabling discard passdown" somewhere, so the comparison
# of the log lines is not vacuous.
[ "$NLOGGED" -gt 0 ] || fail "dm-thin never turned passdown off: the cases miss the point"
[ -z "$FAILED" ] || fail "rthin's limits differ from dm-thin's in:$FAILED"
echo "all $NCASES cases identical ($NLOGGED with the passdown log line) on dm-thin and rthin ($(($(date +%s) - START)) s)"
