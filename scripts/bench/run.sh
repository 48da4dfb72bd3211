# SPDX-License-Identifier: GPL-2.0
# The benchmark runner inside the VM (busybox sh), started by /init in
# rthin.mode=bench. Every case runs for dm-linear, the C dm-thin and rthin on
# the same data device in this one boot; each measurement is repeated
# BENCH_REPS times. Nothing is computed here: each run leaves its fio JSON
# (or a nanosecond timing) under /results/bench/ and one line in
# /results/bench/manifest.tsv:
#   case <TAB> variant <TAB> target <TAB> rep <TAB> kind <TAB> value <TAB> note
# kind is fio (value: the JSON's path under /results/bench), ns (value: a
# duration), pool (value: the pool's status line after a fill) or error
# (value: what failed). scripts/bench/report.py reads it on the host.
#
# Settings (kernel command line NAME=VALUE words, see scripts/bench.sh):
#   BENCH_CASES    comma list of c1..c6 (default c2,c4)
#   BENCH_REPS     repetitions per measurement (3)
#   BENCH_RUNTIME  seconds per timed fio run (5)
#   BENCH_VOL_MIB  thin volume size for the read cases (256)
#   BENCH_WVOL_MIB volume size for the write cases 4 and 5 (64)
#   BENCH_NJOBS    numjobs list for case 2/3, '+'-separated (1..nproc)
#   BENCH_SNAPS    snapshot counts for case 4, '+'-separated (0+1+2+4+10+100)
#   BENCH_MAPPED   mapped sizes in MiB for case 6 snapshot latency (0+64+256)
#   BENCH_BLOCKS   pool block sizes in sectors for case 1 (128+16384)
#   BENCH_DATA     brd (/dev/ram1, default) or nullb (null_blk, not memory backed)
#   BENCH_TARGETS  '+'-separated subset of linear+dm-thin+rthin
set -u

B=/results/bench
mkdir -p "$B/runs"
M=$B/manifest.tsv
: >"$M"

CASES=${BENCH_CASES:-c2,c4}
REPS=${BENCH_REPS:-3}
RT=${BENCH_RUNTIME:-5}
VOL=${BENCH_VOL_MIB:-256}
WVOL=${BENCH_WVOL_MIB:-64}
NCPU=$(nproc)
NJOBS=$(echo "${BENCH_NJOBS:-$(seq -s+ 1 "$NCPU")}" | tr + ' ')
SNAPS=$(echo "${BENCH_SNAPS:-0+1+2+4+10+100}" | tr + ' ')
MAPPED=$(echo "${BENCH_MAPPED:-0+64+256}" | tr + ' ')
BLOCKS=$(echo "${BENCH_BLOCKS:-128+16384}" | tr + ' ')
TARGETS=$(echo "${BENCH_TARGETS:-linear+dm-thin+rthin}" | tr + ' ')
DATA_KIND=${BENCH_DATA:-brd}

say() { echo "bench: $*"; }
# GNU date (busybox's has no %N; busybox sh runs its own applets before PATH).
now() { /rthin/bench/bin/date +%s%N; }
has_case() { case ",$CASES," in *",$1,"*) return 0 ;; esac; return 1; }

# record CASE VARIANT TARGET REP KIND VALUE [NOTE]
record() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "${7:-}" >>"$M"
}

# checkpoint WHAT: writes the results so far onto /dev/vda, so a VM that
# dies later (panic, hang, time limit) still hands back what it measured.
checkpoint() {
	echo "incomplete: last finished step: $1" >/results/vm-status
	dmesg >/results/dmesg.txt
	sync
	tar -cf /dev/vda -C /results . 2>/dev/null
	sync
}

# ---- devices ----
# Metadata: a 64 MiB dm-linear slice of /dev/ram0 (the same for both pools).
# Data: /dev/ram1 (brd) or /dev/nullb0; linear maps the first VOL MiB of it.
META=/dev/mapper/bench-meta
if [ "$DATA_KIND" = nullb ]; then
	size_gb=$((($(blockdev --getsize64 /dev/ram1) + (1 << 30) - 1) >> 30))
	modprobe null_blk nr_devices=1 gb="$size_gb" memory_backed=0 irqmode=0 ||
		say "modprobe null_blk failed"
	DATA=/dev/nullb0
else
	DATA=/dev/ram1
fi
DATA_SECTORS=$(blockdev --getsz "$DATA")
modprobe dm-thin-pool || say "modprobe dm-thin-pool failed: dm-thin runs will be errors"
rthin_loaded=1
[ -e /results/insmod-failed ] && rthin_loaded=0

pool_target() { [ "$1" = rthin ] && echo rthin-pool || echo thin-pool; }
thin_target() { [ "$1" = rthin ] && echo rthin || echo thin; }

ERR=/tmp/bench-err
# try CMD...: runs CMD, keeping its output for an error record.
try() {
	"$@" >"$ERR" 2>&1 && return 0
	echo "rc=$?: $*: $(tr '\n\t' '  ' <"$ERR" | cut -c1-300)" >"$ERR.msg"
	return 1
}
errmsg() { cat "$ERR.msg" 2>/dev/null; }

teardown() {
	dmsetup remove_all --force >/dev/null 2>&1
	[ -e /dev/mapper/bench-meta ] && dmsetup remove bench-meta >/dev/null 2>&1
	return 0
}

# fresh_data: every setup starts on an empty data device (brd frees its pages).
fresh_data() {
	[ "$DATA_KIND" = brd ] && blkdiscard "$DATA" >/dev/null 2>&1
	return 0
}

# setup TARGET BLOCK_SECTORS FEATURES MIB: creates the volume under test,
# /dev/mapper/bench-vol, of MIB MiB. FEATURES is dm-thin's feature list
# ("" or "skip_block_zeroing"). Sets DEV; returns non-zero with errmsg set.
setup() {
	local t=$1 bs=$2 feat=$3 mib=$4 nfeat=0
	teardown
	fresh_data
	DEV=/dev/mapper/bench-vol
	SNAP_ID=1
	if [ "$t" = linear ]; then
		try dmsetup create bench-vol --table "0 $((mib * 2048)) linear $DATA 0" || return 1
		return 0
	fi
	[ "$t" = rthin ] && [ "$rthin_loaded" = 0 ] && { echo "dm-rthin.ko did not load" >"$ERR.msg"; return 1; }
	try dmsetup create bench-meta --table "0 $((64 * 2048)) linear /dev/ram0 0" || return 1
	try dd if=/dev/zero of=$META bs=1M count=1 conv=fsync || return 1
	[ -n "$feat" ] && nfeat=$(echo "$feat" | wc -w)
	try dmsetup create bench-pool --table "0 $DATA_SECTORS $(pool_target "$t") $META $DATA $bs 0 $nfeat $feat" || return 1
	try dmsetup message bench-pool 0 "create_thin 1" || return 1
	try dmsetup create bench-vol --table "0 $((mib * 2048)) $(thin_target "$t") /dev/mapper/bench-pool 1" || return 1
	return 0
}

# snap TARGET: a snapshot of the volume (thin id 1), as LVM takes it: the
# origin suspended around the message. Prints the new id.
snap() {
	SNAP_ID=$((SNAP_ID + 1))
	try dmsetup suspend bench-vol || return 1
	try dmsetup message bench-pool 0 "create_snap $SNAP_ID 1" || { dmsetup resume bench-vol; return 1; }
	try dmsetup resume bench-vol || return 1
}

# fio_run CASE VARIANT TARGET REP FIO-ARGS...: one fio run on $DEV, recorded.
fio_run() {
	local c=$1 v=$2 t=$3 r=$4 rel
	shift 4
	rel=runs/$c/$v/$t.$r.json
	mkdir -p "$B/runs/$c/$v"
	if fio --name="$c" --filename="$DEV" --output-format=json --output="$B/$rel" "$@" >"$ERR" 2>&1; then
		record "$c" "$v" "$t" "$r" fio "$rel"
		return 0
	fi
	record "$c" "$v" "$t" "$r" error "fio rc=$?: $(tr '\n\t' '  ' <"$ERR" | cut -c1-300)"
	return 1
}

# fill CASE VARIANT TARGET MIB: writes the whole volume (1 MiB direct writes,
# so every pool block is provisioned), records the fill and the pool status.
fill() {
	local c=$1 v=$2 t=$3 mib=$4
	fio_run "$c" "$v" "$t" fill --rw=write --bs=1M --size="${mib}M" --direct=1 \
		--ioengine=libaio --iodepth=4 --end_fsync=1 || return 1
	[ "$t" = linear ] || record "$c" "$v" "$t" fill pool "$(dmsetup status bench-pool | tr '\t' ' ')"
}

# fail_all CASE VARIANT TARGET: one error record for a setup that failed.
fail_setup() { record "$1" "$2" "$3" - error "setup: $(errmsg)"; say "$1 $2 $3: setup failed: $(errmsg)"; }

RANDREAD="--rw=randread --bs=4k --ioengine=libaio --iodepth=32 --direct=1 --group_reporting --time_based"

# ---- case 1: sequential 4k reads of a fully provisioned volume ----
case1() {
	local bs t mode direct r v
	for bs in $BLOCKS; do
		for t in $TARGETS; do
			v=blk$((bs / 2))k
			say "c1 $v $t"
			setup "$t" "$bs" skip_block_zeroing "$VOL" || { fail_setup c1-seqread "$v" "$t"; continue; }
			fill c1-seqread "$v" "$t" "$VOL" || continue
			for mode in buffered direct; do
				direct=0
				[ $mode = direct ] && direct=1
				r=1
				while [ $r -le "$REPS" ]; do
					fio_run c1-seqread "$v-$mode" "$t" $r --rw=read --bs=4k --size="${VOL}M" \
						--runtime="$RT" --direct=$direct --ioengine=psync --invalidate=1
					r=$((r + 1))
				done
			done
		done
		checkpoint "c1 blk $bs"
	done
}

# ---- cases 2 and 3: 4k random reads, then the same right after a snapshot ----
case23() {
	local t nj r v
	for t in $TARGETS; do
		say "c2 $t (vcpus $NCPU, numjobs $NJOBS)"
		setup "$t" 128 skip_block_zeroing "$VOL" || { fail_setup c2-randread "vcpu$NCPU" "$t"; continue; }
		fill c2-randread "vcpu$NCPU" "$t" "$VOL" || continue
		for nj in $NJOBS; do
			v=vcpu$NCPU-nj$nj
			r=1
			while [ $r -le "$REPS" ]; do
				# shellcheck disable=SC2086
				fio_run c2-randread "$v" "$t" $r $RANDREAD --numjobs="$nj" --runtime="$RT" --size="${VOL}M"
				r=$((r + 1))
			done
		done
		if has_case c3 && [ "$t" != linear ]; then
			say "c3 $t: snapshot, then the same reads (every block shared)"
			if snap "$t"; then
				for nj in $NJOBS; do
					v=vcpu$NCPU-nj$nj
					r=1
					while [ $r -le "$REPS" ]; do
						# shellcheck disable=SC2086
						fio_run c3-snap-randread "$v" "$t" $r $RANDREAD --numjobs="$nj" --runtime="$RT" --size="${VOL}M"
						r=$((r + 1))
					done
				done
			else
				record c3-snap-randread "vcpu$NCPU" "$t" - error "snapshot: $(errmsg)"
			fi
		fi
		checkpoint "c2/c3 $t"
	done
}

# ---- case 4a: first writes to unprovisioned blocks, zeroing on and off ----
WRITE="--rw=write --bs=4k --ioengine=libaio --iodepth=16 --direct=1"
case4a() {
	local z feat t r v
	for z in on off; do
		feat=
		[ $z = off ] && feat=skip_block_zeroing
		v=zeroing-$z
		for t in $TARGETS; do
			say "c4 provisioning $v $t"
			r=1
			while [ $r -le "$REPS" ]; do
				# A fresh pool and volume each time: every block is a first write.
				if setup "$t" 128 "$feat" "$WVOL"; then
					# shellcheck disable=SC2086
					fio_run c4-provision "$v" "$t" $r $WRITE --size="${WVOL}M" --runtime="$RT"
				else
					record c4-provision "$v" "$t" $r error "setup: $(errmsg)"
				fi
				r=$((r + 1))
			done
		done
		checkpoint "c4 provisioning $z"
	done
}

# ---- case 4b: writes that break sharing with N snapshots ----
case4b() {
	local t n have r v
	for t in $TARGETS; do
		say "c4 break sharing $t (snapshots: $SNAPS)"
		setup "$t" 128 skip_block_zeroing "$WVOL" || { fail_setup c4-break-sharing - "$t"; continue; }
		fill c4-break-sharing - "$t" "$WVOL" || continue
		have=0
		for n in $SNAPS; do
			v=snaps$n
			if [ "$t" = linear ]; then
				# No snapshots on linear: the same overwrite, as the reference.
				[ "$n" = 0 ] || continue
			fi
			r=1
			while [ $r -le "$REPS" ]; do
				# Bring the count to n; the newest snapshot is taken now, so every
				# block of the volume is shared when the writes start.
				ok=1
				if [ "$n" -gt 0 ]; then
					if [ "$have" -ge "$n" ]; then
						try dmsetup message bench-pool 0 "delete $SNAP_ID" || ok=0
						have=$((have - 1))
					fi
					while [ $ok = 1 ] && [ "$have" -lt "$n" ]; do
						snap "$t" || { ok=0; break; }
						have=$((have + 1))
					done
				fi
				if [ $ok = 1 ]; then
					# shellcheck disable=SC2086
					fio_run c4-break-sharing "$v" "$t" $r $WRITE --size="${WVOL}M" --runtime="$RT"
				else
					record c4-break-sharing "$v" "$t" $r error "snapshots: $(errmsg)"
					break 2
				fi
				r=$((r + 1))
			done
		done
		checkpoint "c4 break sharing $t"
	done
}

# ---- case 5: fsync-heavy 4k random writes ----
case5() {
	local t r state
	for state in fresh provisioned; do
		for t in $TARGETS; do
			say "c5 fsync $state $t"
			r=1
			while [ $r -le "$REPS" ]; do
				if setup "$t" 128 skip_block_zeroing "$WVOL"; then
					ok=1
					[ $state = provisioned ] && { fill c5-fsync "$state" "$t" "$WVOL" >/dev/null || ok=0; }
					[ $ok = 1 ] && fio_run c5-fsync "$state" "$t" $r --rw=randwrite --bs=4k --ioengine=psync \
						--direct=1 --fsync=1 --size="${WVOL}M" --runtime="$RT" --time_based
				else
					record c5-fsync "$state" "$t" $r error "setup: $(errmsg)"
				fi
				r=$((r + 1))
			done
		done
		checkpoint "c5 $state"
	done
}

# timed CASE VARIANT TARGET REP CMD...: records CMD's duration in ns.
timed() {
	local c=$1 v=$2 t=$3 r=$4 t0 t1
	shift 4
	t0=$(now)
	if try "$@"; then
		t1=$(now)
		record "$c" "$v" "$t" "$r" ns $((t1 - t0))
	else
		record "$c" "$v" "$t" "$r" error "$(errmsg)"
	fi
}

# ---- case 6: discard of a fully provisioned volume; snapshot latency ----
case6() {
	local t r mib
	for t in $TARGETS; do
		say "c6 discard $t"
		r=1
		while [ $r -le "$REPS" ]; do
			if setup "$t" 128 skip_block_zeroing "$VOL" && fill c6-discard "${VOL}MiB" "$t" "$VOL" >/dev/null; then
				timed c6-discard "${VOL}MiB" "$t" $r blkdiscard "$DEV"
			else
				record c6-discard "${VOL}MiB" "$t" $r error "setup: $(errmsg)"
			fi
			r=$((r + 1))
		done
	done
	checkpoint "c6 discard"
	for t in $TARGETS; do
		[ "$t" = linear ] && continue
		for mib in $MAPPED; do
			say "c6 snapshot create/delete, ${mib} MiB mapped, $t"
			if ! setup "$t" 128 skip_block_zeroing "$VOL"; then
				fail_setup c6-snap-create "mapped${mib}MiB" "$t"
				continue
			fi
			if [ "$mib" -gt 0 ]; then
				fio_run c6-snap-create "mapped${mib}MiB" "$t" fill --rw=write --bs=1M --size="${mib}M" \
					--direct=1 --ioengine=libaio --iodepth=4 --end_fsync=1 || continue
			fi
			r=1
			while [ $r -le "$REPS" ]; do
				# create: suspend the origin, the message, resume (what LVM does).
				timed c6-snap-create "mapped${mib}MiB" "$t" $r snap "$t"
				timed c6-snap-delete "mapped${mib}MiB" "$t" $r dmsetup message bench-pool 0 "delete $SNAP_ID"
				# What any dmsetup call costs here, to read the two above against.
				timed c6-dmsetup-floor "mapped${mib}MiB" "$t" $r dmsetup info bench-pool
				r=$((r + 1))
			done
		done
	done
	checkpoint "c6 snapshots"
}

say "start: $(date -u), vcpus $NCPU, cases $CASES, reps $REPS, runtime ${RT}s, data $DATA_KIND ($((DATA_SECTORS / 2048)) MiB), volume ${VOL} MiB, write volume ${WVOL} MiB"
{
	echo "vcpus=$NCPU"
	echo "cases=$CASES"
	echo "reps=$REPS"
	echo "runtime=$RT"
	echo "vol_mib=$VOL"
	echo "wvol_mib=$WVOL"
	echo "data=$DATA_KIND"
	echo "data_mib=$((DATA_SECTORS / 2048))"
	echo "njobs=$NJOBS"
	echo "snaps=$SNAPS"
	echo "targets=$TARGETS"
	echo "kernel=$(uname -r)"
	echo "fio=$(fio --version)"
	echo "mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
	echo "rthin_loaded=$rthin_loaded"
	dmsetup targets | sed 's/^/target=/'
} >"$B/env"
t_start=$(now)
has_case c1 && case1
{ has_case c2 || has_case c3; } && case23
has_case c4 && { case4a; case4b; }
has_case c5 && case5
has_case c6 && case6
teardown
say "done in $((($(now) - t_start) / 1000000000)) s"
echo "elapsed_s=$((($(now) - t_start) / 1000000000))" >>"$B/env"
