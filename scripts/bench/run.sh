# SPDX-License-Identifier: GPL-2.0
# The benchmark runner inside the VM (busybox sh), started by /init in
# rthin.mode=bench. Every case runs for dm-linear, the C dm-thin and rthin in
# this one boot, each on its own brd RAM disk of the same size (linear on
# /dev/ram1, dm-thin's pool data on /dev/ram2, rthin's on /dev/ram3; both
# pools' metadata on 64 MiB slices of /dev/ram0). The three volumes exist at
# the same time, so the repetitions are interleaved (rep 1 of linear, dm-thin,
# rthin, then rep 2, ...): a slow spell of the shared host lands on all three
# instead of on one target's block of runs.
#
# Nothing is computed here: each run leaves its fio JSON (or a nanosecond
# timing) under /results/bench/ and one line in /results/bench/manifest.tsv:
#   case <TAB> variant <TAB> target <TAB> rep <TAB> kind <TAB> value
# kind is fio (value: the JSON's path under /results/bench), ns (a duration),
# pool (the pool's status line after a fill) or error (what failed).
# scripts/bench/report.py reads it on the host.
#
# Settings (kernel command line NAME=VALUE words, see scripts/bench.sh):
#   BENCH_CASES    comma list of c1..c9 and c11..c14 (default c2,c4)
#   BENCH_REPS     repetitions per measurement (3)
#   BENCH_RUNTIME  seconds per timed fio run (5)
#   BENCH_VOL_MIB  volume size for the read cases 1-3 and case 6 (256)
#   BENCH_WVOL_MIB volume size for the write cases 4 and 5 (64)
#   BENCH_NJOBS    numjobs list for cases 2 and 3, '+'-separated (1..nproc)
#   BENCH_SNAPS    snapshot counts for case 4, '+'-separated (0+1+2+4+10+100)
#   BENCH_MAPPED   mapped MiB for case 6's snapshot latency, '+'-separated (0+64+256)
#   BENCH_BLOCKS   pool block sizes in sectors for case 1, '+'-separated (128+16384)
#   BENCH_LVOLS    volume sizes in MiB for case 7, '+'-separated (32768)
#   BENCH_C14_MIB  volume sizes in MiB for case 14 (BENCH_LVOLS and 1048576)
#   BENCH_CVOL_MIB volume size for case 8 (1024)
#   BENCH_THINS    thin devices for case 9 (1000)
#   BENCH_MD_ROUNDS snapshot rounds of case 11 (20)
#   BENCH_DATA     brd (default) or nullb (null_blk without memory: no data kept);
#                  cases 7 and 8 always use null_blk (their volumes exceed RAM)
#   BENCH_TARGETS  '+'-separated subset of linear+dm-thin+rthin
#   BENCH_LIMIT    seconds a single step may take before the target is
#                  declared hung (default 120 + 4 x BENCH_RUNTIME)
#
# A step that does not finish in BENCH_LIMIT (an I/O that never completes) is
# recorded as an error, the kernel's view of it is saved in hang-N.txt, and
# that target is left alone for the rest of the boot (its devices may hold
# stuck I/O); the other targets go on.
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
THINS=$(for t in $TARGETS; do [ "$t" = linear ] || echo "$t"; done)
DATA_KIND=${BENCH_DATA:-brd}
LVOLS=$(echo "${BENCH_LVOLS:-32768}" | tr + ' ')
C14_VOLS=$(echo "${BENCH_C14_MIB:-$(echo "$LVOLS" | tr " " +)+1048576}" | tr + " ")
CVOL=${BENCH_CVOL_MIB:-1024}
NTHINS=${BENCH_THINS:-1000}
MD_ROUNDS=${BENCH_MD_ROUNDS:-20}
STEP_LIMIT=${BENCH_LIMIT:-$((120 + 4 * RT))}
LIMIT=$STEP_LIMIT
ON_NULLB=0
DEAD=
CUR=
HANGS=0

say() { echo "bench: $*"; }
# GNU date (busybox's has no %N; busybox sh runs its own applets before PATH).
now() { /rthin/bench/bin/date +%s%N; }
has_case() { case ",$CASES," in *",$1,"*) return 0 ;; esac; return 1; }
reps() { seq 1 "$REPS"; }
# rotated REP LIST...: LIST rotated by REP - 1, so each target takes its turn
# first across the repetitions.
rotated() {
	local r=$1 i
	shift
	for i in $(seq 2 "$r"); do set -- "$@" "$1"; shift; done
	echo "$@"
}

# step CASE VARIANT TARGET REP WHAT...: the run about to start, on the
# console: if the whole guest freezes, the host reads the last one.
step() {
	local c=$1 v=$2 t=$3 r=$4
	shift 4
	echo "bench-run: $c	$v	$t	$r	$*"
}

# record CASE VARIANT TARGET REP KIND VALUE
record() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$M"
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
# null_blk devices as big as the largest volume any case asks for (the RAM
# disk's size when that is bigger).
if [ "$DATA_KIND" = nullb ] || has_case c6 || has_case c7 || has_case c8 || has_case c11 || has_case c14; then
	size_gb=$((($(blockdev --getsize64 /dev/ram1) + (1 << 30) - 1) >> 30))
	for mib in $LVOLS $CVOL; do
		[ $((mib / 1024 + 1)) -gt "$size_gb" ] && size_gb=$((mib / 1024 + 1))
	done
	# Case 14's writer needs room beside the volume: 16 GiB of new blocks.
	if has_case c14; then
		for mib in $C14_VOLS; do
			[ $((mib / 1024 + 17)) -gt "$size_gb" ] && size_gb=$((mib / 1024 + 17))
		done
	fi
	modprobe null_blk nr_devices=3 gb="$size_gb" memory_backed=0 irqmode=0 ||
		say "modprobe null_blk failed"
fi
modprobe dm-thin-pool || say "modprobe dm-thin-pool failed: dm-thin runs will be errors"
rthin_loaded=1
[ -e /results/insmod-failed ] && rthin_loaded=0

# Per-target names: data disk, metadata slice, device names.
data_of() {
	if [ "$DATA_KIND" = nullb ] || [ "$ON_NULLB" = 1 ]; then
		echo "/dev/nullb$(($(brd_data_of "$1" | tr -dc 0-9) - 1))"
	else
		brd_data_of "$1"
	fi
}
# brd_data_of TARGET: its brd RAM disk.
brd_data_of() {
	case $1 in
	dm-thin) echo /dev/ram2 ;;
	rthin) echo /dev/ram3 ;;
	*) echo /dev/ram1 ;;
	esac
}
meta_off() { [ "$1" = rthin ] && echo $((64 * 2048)) || echo 0; }
pool_target() { [ "$1" = rthin ] && echo rthin-pool || echo thin-pool; }
thin_target() { [ "$1" = rthin ] && echo rthin || echo thin; }
dev() { echo "/dev/mapper/bench-$1"; }
pool() { echo "bench-$1-pool"; }
# Each target's newest snapshot id (thin id 1 is the volume).
snap_id() { eval "echo \${SNAP_$(echo "$1" | tr -d -):-1}"; }
set_snap_id() { eval "SNAP_$(echo "$1" | tr -d -)=$2"; }

ERR=/tmp/bench-err
alive() { case " $DEAD " in *" $1 "*) return 1 ;; esac; return 0; }

# hang_report CMD: what the kernel shows while CMD hangs, into hang-N.txt.
hang_report() {
	local f p
	HANGS=$((HANGS + 1))
	f=$B/hang-$HANGS.txt
	{
		echo "target $CUR: no completion after ${LIMIT}s: $1"
		echo "--- tasks in D state (pid, command, wchan)"
		for p in /proc/[0-9]*; do
			grep -q '^State:.*D' "$p/status" 2>/dev/null &&
				echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null) $(cat "$p/wchan" 2>/dev/null)"
		done
		echo "--- dmsetup status"
		timeout 10 dmsetup status
		echo "--- in flight (read write) per block device"
		for p in /sys/block/*/inflight; do echo "$p $(cat "$p")"; done
		echo "--- debugfs"
		for p in $(find /sys/kernel/debug -path '*rthin*' -type f 2>/dev/null); do
			echo "$p:"
			timeout 5 cat "$p" 2>&1 | sed 's/^/    /'
		done
		echo "--- dmesg tail"
		dmesg | tail -50
	} >"$f" 2>&1
	say "HANG: $CUR: $1 (no completion after ${LIMIT}s; see $(basename "$f")); $CUR is skipped from now on"
	DEAD="$DEAD $CUR"
	checkpoint "hang $HANGS ($CUR)"
}

# limited CMD...: runs CMD (a command or function; its side effects on
# variables are lost) in the background with its output in $ERR, and waits
# at most LIMIT seconds. Sets ELAPSED (ns, measured around CMD itself).
# Returns CMD's status, or 124 after a hang (then the current target is dead).
# CMD may print progress lines for the console on file descriptor 3.
# Time is the guest's uptime, not a count of sleeps: under TCG on a loaded
# host a `sleep 0.05` can take far longer than asked.
# CMD may call limited itself (case 11 does, through setup): each depth
# has its own status file, or the inner call's would end the outer wait.
limited() {
	local pid up start alive rc depth=${LIMITED_DEPTH:-0}
	local rcf=/tmp/bench-rc.$depth
	rm -f "$rcf"
	(
		LIMITED_DEPTH=$((depth + 1))
		t0=$(now)
		"$@" 3>&1 >"$ERR" 2>&1
		rc=$?
		echo "$rc $(($(now) - t0))" >"$rcf.tmp"
		mv "$rcf.tmp" "$rcf"
	) &
	pid=$!
	read -r up _ </proc/uptime
	start=${up%.*} alive=${up%.*}
	while [ ! -f "$rcf" ]; do
		sleep 0.05
		read -r up _ </proc/uptime
		up=${up%.*}
		# A sign of life for the host's silence detector during long steps.
		if [ $((up - alive)) -ge 30 ]; then
			echo "bench-alive: $CUR $((up - start))s"
			alive=$up
		fi
		if [ $((up - start)) -ge "$LIMIT" ]; then
			kill -9 "$pid" 2>/dev/null
			echo "hung: no completion after ${LIMIT}s" >"$ERR"
			hang_report "$*"
			return 124
		fi
	done
	wait "$pid"
	read -r rc ELAPSED <"$rcf"
	return "$rc"
}

# try CMD...: limited CMD; on failure keeps a one-line message in $ERR.msg.
try() {
	local rc
	limited "$@" && return 0
	rc=$?
	echo "rc=$rc: $*: $(tr '\n\t' '  ' <"$ERR" | cut -c1-300)" >"$ERR.msg"
	return "$rc"
}
errmsg() { cat "$ERR.msg" 2>/dev/null; }

# teardown TARGET: removes the target's devices (volume, snapshots, pool, meta).
teardown() {
	local d
	alive "$1" || return 0
	for d in $(dmsetup ls 2>/dev/null | awk '{print $1}' | grep -E "^bench-$1(-pool|-meta|-used)?\$"); do
		case $d in *-pool | *-meta) ;; *) dmsetup remove --force "$d" >/dev/null 2>&1 ;; esac
	done
	dmsetup remove "bench-$1-pool" >/dev/null 2>&1
	dmsetup remove "bench-$1-meta" >/dev/null 2>&1
	return 0
}

# setup TARGET BLOCK_SECTORS FEATURES MIB: the volume under test, $(dev
# TARGET), of MIB MiB, on a data disk emptied first (brd frees its pages).
# FEATURES is dm-thin's feature list ("" or "skip_block_zeroing").
setup() {
	local t=$1 bs=$2 feat=$3 mib=$4 nfeat=0 data meta
	CUR=$t
	alive "$t" || { echo "skipped: $t hung earlier in this boot" >"$ERR.msg"; return 1; }
	teardown "$t"
	data=$(data_of "$t")
	[ "$DATA_KIND" = brd ] && try blkdiscard "$data"
	set_snap_id "$t" 1
	if [ "$t" = linear ]; then
		try dmsetup create bench-linear --table "0 $((mib * 2048)) linear $data 0"
		return
	fi
	[ "$t" = rthin ] && [ "$rthin_loaded" = 0 ] && { echo "dm-rthin.ko did not load" >"$ERR.msg"; return 1; }
	meta=/dev/mapper/bench-$t-meta
	try dmsetup create "bench-$t-meta" --table "0 $((64 * 2048)) linear /dev/ram0 $(meta_off "$t")" || return 1
	try dd if=/dev/zero of="$meta" bs=1M count=1 conv=fsync || return 1
	[ -n "$feat" ] && nfeat=$(echo "$feat" | wc -w)
	try dmsetup create "$(pool "$t")" --table \
		"0 $(blockdev --getsz "$data") $(pool_target "$t") $meta $data $bs 0 $nfeat $feat" || return 1
	try dmsetup message "$(pool "$t")" 0 "create_thin 1" || return 1
	try dmsetup create "bench-$t" --table "0 $((mib * 2048)) $(thin_target "$t") /dev/mapper/$(pool "$t") 1"
}

# snap TARGET: a snapshot of the volume (thin id 1), as LVM takes it: the
# origin suspended around the message.
snap_cmds() {
	dmsetup suspend "bench-$1" || return 1
	if ! dmsetup message "$(pool "$1")" 0 "create_snap $2 1"; then
		dmsetup resume "bench-$1"
		return 1
	fi
	dmsetup resume "bench-$1"
}
snap() {
	local id
	id=$(($(snap_id "$1") + 1))
	CUR=$1
	try snap_cmds "$1" $id || return 1
	set_snap_id "$1" $id
}

# fio_run CASE VARIANT TARGET REP FIO-ARGS...: one fio run on the target's volume.
fio_run() {
	local c=$1 v=$2 t=$3 r=$4 rel rc
	shift 4
	CUR=$t
	alive "$t" || { record "$c" "$v" "$t" "$r" error "skipped: $t hung earlier in this boot"; return 1; }
	rel=runs/$c/$v/$t.$r.json
	mkdir -p "$B/runs/$c/$v"
	step "$c" "$v" "$t" "$r" fio "$*"
	# FIO_FILE, when set: another device for the target's volume (case 13:
	# its NVMe/TCP namespace).
	if limited fio --name="$c" --filename="${FIO_FILE:-$(dev "$t")}" --output-format=json --output="$B/$rel" "$@"; then
		record "$c" "$v" "$t" "$r" fio "$rel"
		return 0
	fi
	rc=$?
	record "$c" "$v" "$t" "$r" error "fio rc=$rc: $(tr '\n\t' '  ' <"$ERR" | cut -c1-300)"
	return 1
}

# fill CASE VARIANT TARGET MIB: writes MIB MiB of the volume with 1 MiB
# direct writes (every pool block provisioned) and records the pool status.
fill() {
	fio_run "$1" "$2" "$3" fill --rw=write --bs=1M --size="${4}M" --direct=1 \
		--ioengine=libaio --iodepth=4 --end_fsync=1 || return 1
	[ "$3" = linear ] && return 0
	try dmsetup status "$(pool "$3")" && record "$1" "$2" "$3" fill pool "$(tr '\t\n' '  ' <"$ERR")"
}

# setup_all CASE VARIANT BLOCK FEATURES MIB FILL_MIB: every target set up
# (and filled when FILL_MIB > 0); READY lists the targets that are ready.
setup_all() {
	local t
	READY=
	for t in $TARGETS; do
		if ! setup "$t" "$3" "$4" "$5"; then
			record "$1" "$2" "$t" - error "setup: $(errmsg)"
			say "$1 $2 $t: setup failed: $(errmsg)"
			continue
		fi
		[ "$6" -gt 0 ] && say "$1 $2 $t: writing ${6} MiB"
		if [ "$6" -gt 0 ] && ! fill "$1" "$2" "$t" "$6"; then
			say "$1 $2 $t: fill failed: $(tr '\n' ' ' <"$ERR" | cut -c1-200)"
			continue
		fi
		READY="$READY $t"
	done
}

# timed CASE VARIANT TARGET REP CMD...: records CMD's duration in ns.
timed() {
	local c=$1 v=$2 t=$3 r=$4
	shift 4
	CUR=$t
	alive "$t" || { record "$c" "$v" "$t" "$r" error "skipped: $t hung earlier in this boot"; return 1; }
	step "$c" "$v" "$t" "$r" "$*"
	if try "$@"; then
		record "$c" "$v" "$t" "$r" ns "$ELAPSED"
	else
		record "$c" "$v" "$t" "$r" error "$(errmsg)"
		return 1
	fi
}

# ---- case 1: sequential 4k reads of a fully provisioned volume ----
case1() {
	local bs v ready r mode direct t
	for bs in $BLOCKS; do
		v=blk$((bs / 2))k
		say "c1 sequential 4k reads, $v blocks"
		setup_all c1-seqread "$v" "$bs" skip_block_zeroing "$VOL" "$VOL"
		ready=$READY
		for r in $(reps); do
			for mode in buffered direct; do
				direct=0
				[ $mode = direct ] && direct=1
				for t in $ready; do
					fio_run c1-seqread "$v-$mode" "$t" "$r" --rw=read --bs=4k --size="${VOL}M" \
						--runtime="$RT" --direct=$direct --ioengine=psync --invalidate=1
				done
			done
		done
		checkpoint "c1 $v"
	done
}

RANDREAD="--rw=randread --bs=4k --ioengine=libaio --iodepth=32 --direct=1 --group_reporting --time_based"

# randreads CASE TARGETS: every numjobs, repetitions interleaved.
randreads() {
	local c=$1 targets=$2 nj r t
	for nj in $NJOBS; do
		for r in $(reps); do
			for t in $targets; do
				# shellcheck disable=SC2086
				fio_run "$c" "vcpu$NCPU-nj$nj" "$t" "$r" $RANDREAD --numjobs="$nj" --runtime="$RT" --size="${VOL}M"
			done
		done
	done
}

# ---- cases 2 and 3: 4k random reads, then the same right after a snapshot ----
case23() {
	local ready snapped t
	say "c2 4k random reads, iodepth 32, vcpus $NCPU, numjobs $NJOBS"
	setup_all c2-randread "vcpu$NCPU" 128 skip_block_zeroing "$VOL" "$VOL"
	ready=$READY
	randreads c2-randread "$ready"
	checkpoint c2
	has_case c3 || return 0
	say "c3 the same reads right after a snapshot (every block shared)"
	snapped=
	for t in $ready; do
		[ "$t" = linear ] && continue
		if snap "$t"; then
			snapped="$snapped $t"
		else
			record c3-snap-randread "vcpu$NCPU" "$t" - error "snapshot: $(errmsg)"
		fi
	done
	randreads c3-snap-randread "$snapped"
	checkpoint c3
}

WRITE="--rw=write --bs=4k --ioengine=libaio --iodepth=16 --direct=1"
# The same at random places (each 4 KiB once: fio's random map).
RANDWRITE="--rw=randwrite --bs=4k --ioengine=libaio --iodepth=16 --direct=1"

# The random ones one at a time: nothing in flight to write a block
# together, so each first write pays its block's whole fill or copy.
RANDWRITE_QD1="--rw=randwrite --bs=4k --ioengine=libaio --iodepth=1 --direct=1"

# c4_writes ORDER: the fio arguments of case 4's writes, sequential (seq),
# random (rand) or random one at a time (qd1), and the variant prefix of the
# latter two.
c4_writes() {
	case $1 in
	seq) echo "$WRITE" ;;
	rand) echo "$RANDWRITE" ;;
	qd1) echo "$RANDWRITE_QD1" ;;
	esac
}
c4_prefix() {
	case $1 in
	rand) echo "random-" ;;
	qd1) echo "random-qd1-" ;;
	esac
}
# The orders case 4 runs.
C4_ORDERS="seq rand qd1"

# ---- case 4a: first writes to unprovisioned blocks, zeroing on and off ----
case4a() {
	local z feat v r t o
	for o in $C4_ORDERS; do
		for z in on off; do
			feat=
			[ $z = off ] && feat=skip_block_zeroing
			v=$(c4_prefix $o)zeroing-$z
			say "c4 first writes, $v"
			for r in $(reps); do
				for t in $TARGETS; do
					# A fresh pool and volume each time: every block is a first write.
					if setup "$t" 128 "$feat" "$WVOL"; then
						# shellcheck disable=SC2046
						fio_run c4-provision "$v" "$t" "$r" $(c4_writes $o) --size="${WVOL}M" --runtime="$RT"
					else
						record c4-provision "$v" "$t" "$r" error "setup: $(errmsg)"
					fi
				done
			done
			checkpoint "c4 $v"
		done
	done
}

# ---- case 4b: writes that break sharing with N snapshots ----
# share TARGET N: brings the volume's snapshot count to N with the newest
# taken now, so every block of the volume is shared when the writes start.
share() {
	local t=$1 n=$2 have
	eval "have=\${HAVE_$(echo "$t" | tr -d -):-0}"
	[ "$n" -gt 0 ] || return 0
	if [ "$have" -ge "$n" ]; then
		try dmsetup message "$(pool "$t")" 0 "delete $(snap_id "$t")" || return 1
		have=$((have - 1))
	fi
	while [ "$have" -lt "$n" ]; do
		snap "$t" || return 1
		have=$((have + 1))
		eval "HAVE_$(echo "$t" | tr -d -)=$have"
	done
	eval "HAVE_$(echo "$t" | tr -d -)=$have"
}

case4b() {
	local ready n r t o v ok failed=
	say "c4 writes breaking sharing, snapshots: $SNAPS"
	setup_all c4-break-sharing - 128 skip_block_zeroing "$WVOL" "$WVOL"
	ready=$READY
	for n in $SNAPS; do
		for o in $C4_ORDERS; do
			v=$(c4_prefix $o)snaps$n
			for r in $(reps); do
				for t in $ready; do
					# No snapshots on linear: its overwrite (snaps0) is the reference.
					[ "$t" = linear ] && [ "$n" != 0 ] && continue
					case " $failed " in *" $t "*) continue ;; esac
					# share brings every block back to shared (the newest
					# snapshot taken again) before each run.
					if share "$t" "$n"; then
						# shellcheck disable=SC2046
						fio_run c4-break-sharing "$v" "$t" "$r" $(c4_writes $o) --size="${WVOL}M" --runtime="$RT"
					else
						record c4-break-sharing "$v" "$t" "$r" error "snapshots: $(errmsg)"
						failed="$failed $t"
					fi
				done
			done
			checkpoint "c4 $v"
		done
	done
}

# ---- case 5: fsync-heavy 4k random writes ----
case5() {
	local state r t ok
	for state in fresh provisioned; do
		say "c5 4k random writes with fsync, $state volume"
		for r in $(reps); do
			for t in $TARGETS; do
				if ! setup "$t" 128 skip_block_zeroing "$WVOL"; then
					record c5-fsync "$state" "$t" "$r" error "setup: $(errmsg)"
					continue
				fi
				ok=1
				[ $state = provisioned ] && { fill c5-fsync "$state" "$t" "$WVOL" || ok=0; }
				[ $ok = 1 ] && fio_run c5-fsync "$state" "$t" "$r" --rw=randwrite --bs=4k --ioengine=psync \
					--direct=1 --fsync=1 --size="${WVOL}M" --runtime="$RT" --time_based
			done
		done
		checkpoint "c5 $state"
	done
}

# small_files_deleted TARGET: an ext4 on the volume, mounted on
# /mnt/bench-TARGET, that held 4,000 files of 16 KiB (64 MiB, written by fio,
# synced) which were then deleted: what fstrim finds after a build tree or a
# mail spool is cleaned up.
small_files_deleted() {
	local mnt=/mnt/bench-$1
	mkfs.ext4 -q -F -E nodiscard "$(dev "$1")" || return 1
	mkdir -p "$mnt" && mount "$(dev "$1")" "$mnt" || return 1
	(cd /tmp && fio --name=small --directory="$mnt" --nrfiles=4000 --filesize=16k --bs=16k \
		--rw=write --ioengine=psync --create_on_open=1 --openfiles=64 --output-format=terse \
		--end_fsync=1 >/dev/null) || return 1
	rm -rf "${mnt:?}"/small* && sync
}

# ---- case 6: discard of a fully provisioned volume, fstrim; snapshot latency ----
case6() {
	local r t mib
	say "c6 discard of a fully provisioned ${VOL} MiB volume"
	for r in $(reps); do
		for t in $TARGETS; do
			if setup "$t" 128 skip_block_zeroing "$VOL" && fill c6-discard "${VOL}MiB" "$t" "$VOL"; then
				timed c6-discard "${VOL}MiB" "$t" "$r" blkdiscard "$(dev "$t")"
			else
				record c6-discard "${VOL}MiB" "$t" "$r" error "setup: $(errmsg)"
			fi
		done
	done
	checkpoint "c6 discard"
	say "c6 fstrim of an ext4 on a ${VOL} MiB volume after many small files were deleted"
	for r in $(reps); do
		for t in $TARGETS; do
			if setup "$t" 128 skip_block_zeroing "$VOL" && try small_files_deleted "$t"; then
				timed c6-fstrim "${VOL}MiB" "$t" "$r" fstrim "/mnt/bench-$t"
			else
				record c6-fstrim "${VOL}MiB" "$t" "$r" error "setup: $(errmsg)"
			fi
			umount "/mnt/bench-$t" 2>/dev/null
		done
	done
	checkpoint "c6 fstrim"
	for mib in $MAPPED; do
		snap_latency "mapped${mib}MiB" "$mib"
	done
	# The same with the pool on the null_blk device (tens of GiB, as big as
	# case 7 needs): what grows with the pool, not with the volume, shows.
	if [ -b /dev/nullb1 ]; then
		ON_NULLB=1
		snap_latency "mapped256MiB-pool${size_gb}GiB" 256
		ON_NULLB=0
	fi
	checkpoint "c6 snapshots"
}

# used_thin TARGET ID: thin ID created in the target's pool, active for one
# 1 MiB write, then removed (what lvcreate, use and lvchange -an leave).
used_thin() {
	local p rc=0
	p=$(pool "$1")
	CUR=$1
	try dmsetup message "$p" 0 "create_thin $2" &&
		try dmsetup create "bench-$1-used" --table "0 2048 $(thin_target "$1") /dev/mapper/$p $2" || return 1
	try dd if=/dev/urandom of="/dev/mapper/bench-$1-used" bs=1M count=1 oflag=direct || rc=1
	try dmsetup remove "bench-$1-used" || rc=1
	return $rc
}

# snap_latency VARIANT MIB: snapshot create and delete of a volume with MIB
# MiB written, the delete of a thin that was active, and the cost of a bare
# dmsetup call beside them.
snap_latency() {
	local v=$1 mib=$2 r t id
	say "c6 snapshot create and delete, $v"
	for t in $THINS; do
		setup "$t" 128 skip_block_zeroing "$VOL" || { record c6-snap-create "$v" "$t" - error "setup: $(errmsg)"; continue; }
		[ "$mib" -gt 0 ] && fill c6-snap-create "$v" "$t" "$mib"
	done
	for r in $(reps); do
		for t in $THINS; do
			[ -e "$(dev "$t")" ] || continue
			# create: suspend the origin, the message, resume (what LVM does).
			id=$(($(snap_id "$t") + 1))
			timed c6-snap-create "$v" "$t" "$r" snap_cmds "$t" $id || continue
			set_snap_id "$t" $id
			timed c6-snap-delete "$v" "$t" "$r" dmsetup message "$(pool "$t")" 0 "delete $id"
			# lvremove of a thin that was active: the delete after its table went.
			id=$((1000 + r))
			used_thin "$t" $id || { record c6-thin-delete "$v" "$t" "$r" error "$(errmsg)"; continue; }
			timed c6-thin-delete "$v" "$t" "$r" dmsetup message "$(pool "$t")" 0 "delete $id"
			# What any dmsetup call costs here, to read the two above against.
			timed c6-dmsetup-floor "$v" "$t" "$r" dmsetup info "$(pool "$t")"
		done
	done
}

# ---- case 7: 4k random reads over a large fully provisioned volume ----
# Every block is touched once by the fill (1 MiB direct writes: a row of its
# own, c7-fill), then read at random with fresh offsets in every run
# (randrepeat=0), so a cache warmed by one run does not serve the next.
case7() {
	local mib v r t ready
	for mib in $LVOLS; do
		v=$((mib / 1024))GiB
		say "c7 4k random reads over a fully provisioned $v volume (null_blk data, 64 KiB blocks)"
		ON_NULLB=1
		ready=
		for t in $TARGETS; do
			if ! setup "$t" 128 skip_block_zeroing "$mib"; then
				record c7-large-randread "$v" "$t" - error "setup: $(errmsg)"
				continue
			fi
			say "c7 $v $t: writing $mib MiB"
			# The fill may take minutes under TCG: its own time limit.
			LIMIT=$((120 + mib / 10))
			fio_run c7-fill "$v" "$t" 1 --rw=write --bs=1M --size="${mib}M" \
				--direct=1 --ioengine=libaio --iodepth=4 --end_fsync=1 && ready="$ready $t"
			LIMIT=$STEP_LIMIT
		done
		for r in $(reps); do
			# shellcheck disable=SC2086
			for t in $(rotated "$r" $ready); do
				# shellcheck disable=SC2086
				fio_run c7-large-randread "$v" "$t" "$r" $RANDREAD --numjobs=2 --runtime="$RT" \
					--size="${mib}M" --randrepeat=0
			done
		done
		for t in $TARGETS; do teardown "$t"; done
		ON_NULLB=0
		checkpoint "c7 $v"
	done
}

# reactivate TARGET: the pool and the thin removed and created again from the
# same metadata (what vgchange -an / -ay does): every cache starts cold.
reactivate() {
	local t=$1 pt tt
	[ "$t" = linear ] && return 0
	pt=$(dmsetup table "$(pool "$t")") && tt=$(dmsetup table "bench-$t") || return 1
	dmsetup remove "bench-$t" && dmsetup remove "$(pool "$t")" || return 1
	dmsetup create "$(pool "$t")" --table "$pt" && dmsetup create "bench-$t" --table "$tt"
}

# reload_thin TARGET: the thin's table reloaded alone (lvchange --refresh).
reload_thin() {
	local d=bench-$1 tt
	tt=$(dmsetup table "$d") || return 1
	dmsetup suspend "$d" && dmsetup reload "$d" --table "$tt" && dmsetup resume "$d"
}

# kernel_kib: slab + vmalloc + per-CPU memory in use, KiB.
kernel_kib() {
	awk '$1 == "Slab:" || $1 == "VmallocUsed:" || $1 == "Percpu:" { s += $2 } END { print s }' /proc/meminfo
}

# many_thins TARGET: NTHINS empty thin devices of 1 TiB in the target's
# metadata (from a generated dump), its pool created; the thins are not
# active yet.
many_thins() {
	local t=$1 meta=/dev/mapper/bench-$1-meta data i
	data=$(data_of "$t")
	{
		echo "<superblock uuid=\"\" time=\"0\" transaction=\"1\" flags=\"0\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"$(($(blockdev --getsz "$data") / 128))\">"
		i=1
		while [ $i -le "$NTHINS" ]; do
			echo "<device dev_id=\"$i\" mapped_blocks=\"0\" transaction=\"0\" creation_time=\"0\" snap_time=\"0\"></device>"
			i=$((i + 1))
		done
		echo "</superblock>"
	} >/tmp/many.xml
	dmsetup create "bench-$t-meta" --table "0 $((64 * 2048)) linear /dev/ram0 $(meta_off "$t")" &&
		thin_restore -q -i /tmp/many.xml -o "$meta" &&
		dmsetup create "$(pool "$t")" --table "0 $(blockdev --getsz "$data") $(pool_target "$t") $meta $data 128 0 1 skip_block_zeroing"
}

# activate_thins TARGET: the NTHINS thins of 1 TiB, bench-TARGET-N, in one dmsetup call.
activate_thins() {
	local t=$1 i=1 spec=
	while [ $i -le "$NTHINS" ]; do
		spec="$spec${spec:+;}bench-$t-$i,,,,0 $((1 << 31)) $(thin_target "$t") /dev/mapper/$(pool "$t") $i"
		i=$((i + 1))
	done
	dmsetup create --concise "$spec"
}

# ---- case 9: a thousand thin devices of 1 TiB on one pool ----
# Kernel memory per active idle thin, the time to activate them all, and 4k
# random reads spread over 100 of them (2 MiB written to each first).
case9() {
	local t r before files i
	say "c9 $NTHINS thin devices of 1 TiB each on one pool"
	for t in $THINS; do
		CUR=$t
		alive "$t" || continue
		teardown "$t"
		[ "$DATA_KIND" = brd ] && try blkdiscard "$(data_of "$t")"
		if ! try many_thins "$t"; then
			record c9-many-thins "${NTHINS}thins" "$t" - error "setup: $(errmsg)"
			continue
		fi
		sync
		before=$(kernel_kib)
		if ! timed c9-activate "${NTHINS}thins" "$t" 1 activate_thins "$t"; then
			continue
		fi
		sleep 1
		record c9-many-thins "${NTHINS}thins" "$t" 1 kib $((($(kernel_kib) - before) / NTHINS))
		files=
		i=1
		while [ $i -le 100 ]; do
			dd if=/dev/urandom of="/dev/mapper/bench-$t-$((i * NTHINS / 100))" bs=1M count=2 oflag=direct 2>/dev/null
			files="$files${files:+:}/dev/mapper/bench-$t-$((i * NTHINS / 100))"
			i=$((i + 1))
		done
		eval "FILES_$(echo "$t" | tr -d -)=\$files"
	done
	for r in $(reps); do
		for t in $(rotated "$r" $THINS); do
			eval "files=\${FILES_$(echo "$t" | tr -d -):-}"
			[ -n "$files" ] || continue
			CUR=$t
			alive "$t" || continue
			mkdir -p "$B/runs/c9-randread"
			step c9-randread 100of${NTHINS} "$t" "$r" fio
			# fio's disk statistics walk sysfs for every file's device and
			# its slaves, which takes minutes with a thousand dm devices:
			# off, with the per-device cache invalidation (O_DIRECT reads
			# need none), and a longer limit.
			LIMIT=$((STEP_LIMIT * 4))
			if limited fio --name=c9 --filename="$files" --output-format=json \
				--output="$B/runs/c9-randread/$t.$r.json" $RANDREAD --numjobs=2 --runtime="$RT" \
				--filesize=2M --invalidate=0 --disk_util=0 --randrepeat=0 --file_service_type=random; then
				record c9-randread "100of${NTHINS}" "$t" "$r" fio "runs/c9-randread/$t.$r.json"
			else
				record c9-randread "100of${NTHINS}" "$t" "$r" error "fio: $(tr '\n\t' '  ' <"$ERR" | cut -c1-300)"
			fi
			LIMIT=$STEP_LIMIT
		done
	done
	for t in $THINS; do
		for i in $(seq 1 "$NTHINS"); do dmsetup remove "bench-$t-$i" 2>/dev/null; done
		teardown "$t"
	done
	checkpoint c9
}

# second_volume TARGET: bench-TARGET-b, WVOL MiB, fresh: thin device 2 of
# the target's pool (deleted and created again), or a linear device on the
# linear target's disk after its volume.
second_volume() {
	local t=$1
	dmsetup remove "bench-$t-b" 2>/dev/null
	if [ "$t" = linear ]; then
		dmsetup create bench-linear-b --table "0 $((WVOL * 2048)) linear $(data_of linear) $((VOL * 2048))"
		return
	fi
	dmsetup message "$(pool "$t")" 0 "delete 2" 2>/dev/null
	dmsetup message "$(pool "$t")" 0 "create_thin 2" &&
		dmsetup create "bench-$t-b" --table "0 $((WVOL * 2048)) $(thin_target "$t") /dev/mapper/$(pool "$t") 2"
}

# md_used TARGET: metadata blocks in use after a commit (a status without
# --noflush commits first).
md_used() {
	dmsetup status "$(pool "$1")" | awk '{ split($5, a, "/"); print a[1] }'
}

# md_record TARGET ROW: records the metadata blocks in use for a row of case
# 11 (run under limited: says so on the console).
md_record() {
	local n
	echo "bench-run: c11-metadata-space	$2	$1	1	dmsetup status" >&3
	n=$(md_used "$1") && [ -n "$n" ] && record c11-metadata-space "$2" "$1" 1 blocks "$n"
}

# md_workloads TARGET: the workloads of case 11 on a fresh pool (64 KiB
# blocks, null_blk data), the metadata in use recorded after each.
md_workloads() {
	local t=$1 p i
	p=$(pool "$t")
	setup "$t" 128 skip_block_zeroing $((4 * 1024)) || return 1
	md_record "$t" 0-empty
	# 1. random 64 KiB writes provisioning 1 GiB of a 4 GiB thin (fio's
	# random map: every block written once).
	fio --name=md1 --filename="$(dev "$t")" --rw=randwrite --bs=64k --size=4G --io_size=1G \
		--direct=1 --ioengine=libaio --iodepth=8 --randrepeat=0 --output-format=terse >/dev/null || return 1
	md_record "$t" 1-random-1GiB-of-4GiB
	# 2. a second thin of 1 GiB written whole, in order.
	dmsetup message "$p" 0 "create_thin 2" &&
		dmsetup create "bench-$t-2" --table "0 $((1024 * 2048)) $(thin_target "$t") /dev/mapper/$p 2" &&
		dd if=/dev/zero of="/dev/mapper/bench-$t-2" bs=1M count=1024 oflag=direct 2>/dev/null || return 1
	md_record "$t" 2-sequential-1GiB
	# 3. rounds of: snapshot thin 2 (suspended, as LVM), overwrite 5% of
	# its blocks at random.
	i=1
	while [ $i -le "$MD_ROUNDS" ]; do
		dmsetup suspend "bench-$t-2" && dmsetup message "$p" 0 "create_snap $((1000 + i)) 2" &&
			dmsetup resume "bench-$t-2" || return 1
		fio --name=md3 --filename="/dev/mapper/bench-$t-2" --rw=randwrite --bs=64k --size=1G \
			--io_size=$((1024 / 20))M --direct=1 --ioengine=psync --randrepeat=0 --norandommap \
			--output-format=terse >/dev/null || return 1
		echo "bench-run: c11-metadata-space	3-snapshot-round-$i-of-$MD_ROUNDS	$t	1	create_snap, fio" >&3
		i=$((i + 1))
	done
	md_record "$t" "3-${MD_ROUNDS}-snapshot-rounds"
	# 4. 1,000 empty thins, then 1,000 snapshots of thin 2.
	i=1
	while [ $i -le 1000 ]; do
		dmsetup message "$p" 0 "create_thin $((2000 + i))" || return 1
		i=$((i + 1))
	done
	md_record "$t" 4a-1000-empty-thins
	i=1
	while [ $i -le 1000 ]; do
		dmsetup message "$p" 0 "create_snap $((4000 + i)) 2" || return 1
		i=$((i + 1))
	done
	md_record "$t" 4b-1000-snapshots
	# 5. everything deleted.
	dmsetup remove "bench-$t-2" && dmsetup remove "bench-$t" || return 1
	for i in 1 2 $(seq 1001 $((1000 + MD_ROUNDS))) $(seq 2001 3000) $(seq 4001 5000); do
		dmsetup message "$p" 0 "delete $i" || return 1
	done
	md_record "$t" 5-all-deleted
}

# ---- case 11: metadata space ----
# The metadata blocks in use after each workload, rthin against the C
# dm-thin (dm-linear has no metadata). Counts, not times: a shared host does
# not move them.
case11() {
	local t
	say "c11 metadata space: the same workloads on each pool"
	ON_NULLB=1
	# Minutes of work per target under TCG: one limit for all of it.
	LIMIT=$((STEP_LIMIT * 20))
	for t in $THINS; do
		CUR=$t
		if ! limited md_workloads "$t"; then
			record c11-metadata-space - "$t" - error "$(tr '\n\t' '  ' <"$ERR" | cut -c1-300)"
		fi
		dmsetup remove "bench-$t-2" 2>/dev/null
		teardown "$t"
	done
	LIMIT=$STEP_LIMIT
	ON_NULLB=0
	checkpoint c11
}

# ---- case 12: reads of one thin while another of the pool commits ----
# One job reads 4k at random (psync, one at a time) from a provisioned
# volume while a second job writes 4k to new blocks of another volume of the
# same pool with an fsync after each (every fsync a commit): the read
# latency (p99) shows whether commits stall readers. dm-linear runs the same
# pair on two linear devices of one disk.
case12() {
	local r t second
	say "c12 read latency of one volume during another's 4k write + fsync stream"
	setup_all c12-read-during-fsync - 128 skip_block_zeroing "$VOL" "$VOL"
	for r in $(reps); do
		# shellcheck disable=SC2086
		for t in $(rotated "$r" $READY); do
			second=/dev/mapper/bench-$t-b
			CUR=$t
			# A fresh second volume each time: every write provisions.
			if ! try second_volume "$t"; then
				record c12-read-during-fsync - "$t" "$r" error "second volume: $(errmsg)"
				continue
			fi
			fio_run c12-read-during-fsync - "$t" "$r" --rw=randread --bs=4k --ioengine=psync --direct=1 \
				--size="${VOL}M" --runtime="$RT" --time_based --randrepeat=0 \
				--name=fsync --filename="$second" --rw=randwrite --bs=4k --ioengine=psync --direct=1 \
				--fsync=1 --size="${WVOL}M" --runtime="$RT" --time_based --randrepeat=0
		done
	done
	for t in $TARGETS; do dmsetup remove "bench-$t-b" 2>/dev/null; teardown "$t"; done
	checkpoint c12
}

# ---- case 8: first-touch reads after activation, and after a thin reload ----
case8() {
	local r t ready v
	v=$((CVOL))MiB
	say "c8 4k random reads of a $v volume right after activation, then right after a reload of the thin"
	ON_NULLB=1
	setup_all c8-cold-randread "$v" 128 skip_block_zeroing "$CVOL" "$CVOL"
	ready=$READY
	for r in $(reps); do
		# shellcheck disable=SC2086
		for t in $(rotated "$r" $ready); do
			if try reactivate "$t"; then
				# shellcheck disable=SC2086
				fio_run c8-cold-randread "$v-after-activation" "$t" "$r" $RANDREAD --numjobs=2 \
					--runtime="$RT" --size="${CVOL}M" --randrepeat=0
			else
				record c8-cold-randread "$v-after-activation" "$t" "$r" error "reactivate: $(errmsg)"
			fi
			if try reload_thin "$t"; then
				# shellcheck disable=SC2086
				fio_run c8-cold-randread "$v-after-thin-reload" "$t" "$r" $RANDREAD --numjobs=2 \
					--runtime="$RT" --size="${CVOL}M" --randrepeat=0
			else
				record c8-cold-randread "$v-after-thin-reload" "$t" "$r" error "reload: $(errmsg)"
			fi
		done
	done
	for t in $TARGETS; do teardown "$t"; done
	ON_NULLB=0
	checkpoint c8
}

# ---- case 13: 4k random reads through NVMe/TCP ----
# Each target's fully provisioned volume becomes a namespace of one subsystem
# of the kernel's NVMe target (nvmet, configfs; linear, dm-thin and rthin in
# the order of TARGETS), on a TCP port on 127.0.0.1, and the VM connects to it
# with nvme-cli (nvme-tcp): initiator and target in one guest, so both ends'
# CPU cost lands on the same vCPUs. The same 4k random reads run on each
# volume directly (variant local) and through its namespace (nvme-tcp), the
# repetitions interleaved: the ratio of the two is what the export costs.
NVMET=/sys/kernel/config/nvmet
NQN13=nqn.2026-12.io.rthin:bench

# nvmeof_export TARGETS: the targets' volumes as namespaces 1, 2 ... of
# NQN13, exported on 127.0.0.1:4420 and connected.
nvmeof_export() {
	local s=$NVMET/subsystems/$NQN13 i=0 t
	modprobe nvmet-tcp && modprobe nvme-tcp || return 1
	[ -d $NVMET ] || mount -t configfs none /sys/kernel/config || return 1
	ip link set lo up || return 1
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" || return 1
	for t in $1; do
		i=$((i + 1))
		mkdir "$s/namespaces/$i" && echo -n "$(dev "$t")" >"$s/namespaces/$i/device_path" &&
			echo 1 >"$s/namespaces/$i/enable" || return 1
	done
	mkdir $NVMET/ports/13 && echo ipv4 >$NVMET/ports/13/addr_adrfam && echo tcp >$NVMET/ports/13/addr_trtype &&
		echo 127.0.0.1 >$NVMET/ports/13/addr_traddr && echo 4420 >$NVMET/ports/13/addr_trsvcid &&
		ln -s "$s" "$NVMET/ports/13/subsystems/$NQN13" || return 1
	nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN13 || return 1
	i=0
	while [ $i -lt 100 ]; do
		[ "$(for t in $1; do nvme_dev "$t" "$1"; done | wc -l)" = "$(echo $1 | wc -w)" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	echo "namespaces did not appear: $(ls /sys/block)"
	return 1
}

# nvme_dev TARGET TARGETS: the initiator's block device for TARGET's namespace.
nvme_dev() {
	local nsid=0 t d
	for t in $2; do
		nsid=$((nsid + 1))
		[ "$t" = "$1" ] && break
	done
	for d in /sys/block/nvme*n*; do
		[ "$(cat "$d/device/subsysnqn" 2>/dev/null)" = $NQN13 ] && [ "$(cat "$d/nsid")" = $nsid ] &&
			[ -b "/dev/${d##*/}" ] && echo "/dev/${d##*/}" && return 0
	done
	return 1
}

# nvmeof_unexport: the initiator disconnected, the subsystem and port removed.
nvmeof_unexport() {
	local s=$NVMET/subsystems/$NQN13 n
	nvme disconnect -n $NQN13 >/dev/null 2>&1
	rm -f "$NVMET/ports/13/subsystems/$NQN13"
	rmdir $NVMET/ports/13 2>/dev/null
	for n in "$s"/namespaces/*; do
		[ -d "$n" ] || continue
		echo 0 >"$n/enable"
		rmdir "$n"
	done
	rmdir "$s" 2>/dev/null
	return 0
}

case13() {
	local ready r t nv v=nj2 exported=1
	say "c13 4k random reads, iodepth 32, numjobs 2: on the volume, and through NVMe/TCP on 127.0.0.1"
	setup_all c13-nvmeof-randread "$v-local" 128 skip_block_zeroing "$VOL" "$VOL"
	ready=$READY
	CUR=nvmet
	if ! try nvmeof_export "$ready"; then
		say "c13: exporting over NVMe/TCP failed: $(errmsg)"
		for t in $ready; do record c13-nvmeof-randread "$v-nvme-tcp" "$t" - error "export: $(errmsg)"; done
		try nvmeof_unexport
		exported=0
	fi
	for r in $(reps); do
		# shellcheck disable=SC2086
		for t in $(rotated "$r" $ready); do
			# shellcheck disable=SC2086
			fio_run c13-nvmeof-randread "$v-local" "$t" "$r" $RANDREAD --numjobs=2 --runtime="$RT" --size="${VOL}M"
			[ $exported = 1 ] || continue
			if ! nv=$(nvme_dev "$t" "$ready"); then
				record c13-nvmeof-randread "$v-nvme-tcp" "$t" "$r" error "no NVMe/TCP namespace for $t"
				continue
			fi
			FIO_FILE=$nv
			# shellcheck disable=SC2086
			fio_run c13-nvmeof-randread "$v-nvme-tcp" "$t" "$r" $RANDREAD --numjobs=2 --runtime="$RT" --size="${VOL}M"
			FIO_FILE=
		done
	done
	CUR=nvmet
	try nvmeof_unexport
	for t in $TARGETS; do teardown "$t"; done
	checkpoint c13
}

# ---- case 14: a big delete while another thin provisions ----
# thin 1 maps every block of a MIB MiB volume (null_blk data, 64 KiB blocks;
# its metadata written by thin_restore, the same image for both targets, so
# no fill is needed), thin 2 is empty and active. 4k random writes to new
# blocks of thin 2 run once alone and once with `delete 1` (as lvremove
# sends it) two seconds in: the delete's time, and what the writer saw
# during it (IOPS, p99 and max latency) against the quiet run.
delete_setup() {
	local t=$1 mib=$2 n nb meta data
	CUR=$t
	alive "$t" || { echo "skipped: $t hung earlier in this boot" >"$ERR.msg"; return 1; }
	teardown "$t"
	[ "$t" = rthin ] && [ "$rthin_loaded" = 0 ] && { echo "dm-rthin.ko did not load" >"$ERR.msg"; return 1; }
	data=$(data_of "$t")
	n=$((mib * 16))
	nb=$(($(blockdev --getsz "$data") / 128))
	cat >/tmp/bench-c14.xml <<-XML
	<superblock uuid="" time="0" transaction="1" data_block_size="128" nr_data_blocks="$nb">
	  <device dev_id="1" mapped_blocks="$n" transaction="0" creation_time="0" snap_time="0">
	    <range_mapping origin_begin="0" data_begin="0" length="$n" time="0"/>
	  </device>
	  <device dev_id="2" mapped_blocks="0" transaction="0" creation_time="0" snap_time="0">
	  </device>
	</superblock>
	XML
	meta=/dev/mapper/bench-$t-meta
	if [ "$mib" -le 65536 ]; then
		try dmsetup create "bench-$t-meta" --table "0 $((64 * 2048)) linear /dev/ram0 $(meta_off "$t")" || return 1
	else
		# Over 64 GiB the tree outgrows a 64 MiB slice (1 TiB: 16M mappings,
		# about 270 MiB of leaves): the target's whole brd data disk, which
		# this case leaves unused (its data is on null_blk), holds it.
		try dmsetup create "bench-$t-meta" --table "0 $(blockdev --getsz "$(brd_data_of "$t")") linear $(brd_data_of "$t") 0" || return 1
	fi
	try dd if=/dev/zero of="$meta" bs=1M count=1 conv=fsync || return 1
	try thin_restore -i /tmp/bench-c14.xml -o "$meta" || return 1
	try dmsetup create "$(pool "$t")" --table \
		"0 $(blockdev --getsz "$data") $(pool_target "$t") $meta $data 128 0 1 skip_block_zeroing" || return 1
	# thin 2 spans the space thin 1 does not use: every write lands on a new block.
	try dmsetup create "bench-$t" --table "0 $(((nb - n) * 128)) $(thin_target "$t") /dev/mapper/$(pool "$t") 2"
}

# delete_during_writes TARGET VARIANT REP SECONDS: the delete two seconds
# into a SECONDS-long writer; the writer's result under "VARIANT, delete".
delete_during_writes() {
	local t=$1 v=$2 r=$3 secs=$4 rel fio_pid
	rel=runs/c14-writer/$v-delete/$t.$r.json
	mkdir -p "$B/runs/c14-writer/$v-delete"
	step c14-writer "$v-delete" "$t" "$r" fio with delete 1
	timeout $((secs + STEP_LIMIT)) fio --name=c14 --filename="$(dev "$t")" --output-format=json --output="$B/$rel" $C14_WRITER \
		--runtime="$secs" --offset=50% >/tmp/c14-fio.log 2>&1 &
	fio_pid=$!
	sleep 2
	timed c14-delete "$v" "$t" "$r" dmsetup message "$(pool "$t")" 0 "delete 1"
	if wait "$fio_pid"; then
		record c14-writer "$v-delete" "$t" "$r" fio "$rel"
	else
		record c14-writer "$v-delete" "$t" "$r" error "fio: $(tr '\n\t' '  ' </tmp/c14-fio.log | cut -c1-300)"
	fi
}

C14_WRITER="--rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=8 --time_based --size=25%"
case14() {
	local mib v r t secs
	for mib in $C14_VOLS; do
		# The writer outlasts the delete: a second more per 16 GiB.
		secs=$((3 * RT + mib / 16384))
		v=$((mib / 1024))GiB
		say "c14 delete of a provisioned $v thin while another thin of the pool writes new blocks"
		ON_NULLB=1
		for r in $(reps); do
			for t in $(rotated "$r" $THINS); do
				if ! delete_setup "$t" "$mib"; then
					record c14-delete "$v" "$t" "$r" error "setup: $(errmsg)"
					continue
				fi
				# shellcheck disable=SC2086
				fio_run c14-writer "$v-quiet" "$t" "$r" $C14_WRITER --runtime="$secs" || continue
				LIMIT=$((STEP_LIMIT + secs + mib / 100))
				delete_during_writes "$t" "$v" "$r" "$secs"
				LIMIT=$STEP_LIMIT
				teardown "$t"
			done
		done
		ON_NULLB=0
		checkpoint "c14 $v"
	done
}

say "start: $(/rthin/bench/bin/date -u), vcpus $NCPU, cases $CASES, reps $REPS, runtime ${RT}s, data $DATA_KIND ($(($(blockdev --getsz "$(data_of linear)") / 2048)) MiB each), volume ${VOL} MiB, write volume ${WVOL} MiB"
{
	echo "vcpus=$NCPU"
	echo "cases=$CASES"
	echo "reps=$REPS"
	echo "runtime=$RT"
	echo "vol_mib=$VOL"
	echo "wvol_mib=$WVOL"
	echo "data=$DATA_KIND"
	echo "data_mib=$(($(blockdev --getsz "$(data_of linear)") / 2048))"
	echo "njobs=$NJOBS"
	echo "snaps=$SNAPS"
	echo "targets=$TARGETS"
	echo "kernel=$(uname -r)"
	echo "fio=$(fio --version)"
	echo "mem_kib=$(awk '/MemTotal/ {print $2}' /proc/meminfo)"
	echo "rthin_loaded=$rthin_loaded"
	echo "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
	dmsetup targets | sed 's/^/target=/'
} >"$B/env"
t_start=$(now)
has_case c1 && case1
{ has_case c2 || has_case c3; } && case23
has_case c4 && { case4a; case4b; }
has_case c5 && case5
has_case c6 && case6
has_case c7 && case7
has_case c8 && case8
has_case c9 && case9
has_case c11 && case11
has_case c12 && case12
has_case c13 && case13
has_case c14 && case14
for t in $TARGETS; do teardown "$t"; done
say "done in $((($(now) - t_start) / 1000000000)) s"
echo "elapsed_s=$((($(now) - t_start) / 1000000000))" >>"$B/env"
