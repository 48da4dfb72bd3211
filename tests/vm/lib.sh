# SPDX-License-Identifier: GPL-2.0
# Helpers for the VM tests (busybox sh). Each test is a script that exits 0 on
# success; `fail` explains what went wrong and exits 1. The runner removes
# every dm device after each test.
# A test is a script named NN-what.sh: NN is its area (00 module, 10 tables,
# 20-31 the targets' I/O and lifecycle, 40 names, 50 rthinctl, 60 pool
# messages and modes, 70 data-path scenarios, 80-85 attacks, 90-95 long runs;
# the table is in Documentation/testing.md, "The NN- numbers"); the runner
# takes every tests/vm/[0-9]*.sh, in name order.
set -u

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# run CMD...: runs a command and fails the test if it fails.
run() {
	"$@" || fail "command failed ($?): $*"
}

# expect_error "MESSAGE" CMD...: CMD must fail and its output must contain MESSAGE.
expect_error() {
	local want=$1 out
	shift
	if out=$("$@" 2>&1); then
		fail "expected failure with '$want', but it succeeded: $*"
	fi
	case $out in
	*"$want"*) ;;
	*) fail "expected '$want' from: $* ; got: $out" ;;
	esac
	# dm logs the target's constructor message in the kernel log too.
	return 0
}

# expect_rc CODE TEXT CMD...: CMD must exit with CODE and print TEXT; the
# output is echoed, indented, for the log.
expect_rc() {
	want_rc=$1 want=$2
	shift 2
	out=$("$@" 2>&1)
	got=$?
	[ "$got" = "$want_rc" ] || fail "expected exit $want_rc from: $* ; got $got: $out"
	case $out in
	*"$want"*) ;;
	*) fail "expected '$want' from: $* ; got: $out" ;;
	esac
	echo "ok ($got): $*"
	[ -z "$out" ] || echo "$out" | sed 's/^/    /'
}

# wait_for SECONDS CMD...: runs CMD every 0.2 s until it succeeds (0) or
# SECONDS have passed (1). For waits on a condition instead of a fixed sleep.
wait_for() {
	local end=$(($(date +%s) + $1))
	shift
	while ! "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.2 2>/dev/null || sleep 1
	done
}

# exited PID: the process has ended (for wait_for).
exited() { ! kill -0 "$1" 2>/dev/null; }
# pool_mode_is POOL MODE: the pool's status shows MODE (rw, ro,
# out_of_data_space; for wait_for).
pool_mode_is() { [ "$(pool_field "$1" 5)" = "$2" ]; }

# expect_dmesg "TEXT": the kernel log must contain TEXT.
expect_dmesg() {
	dmesg | grep -qF "$1" || fail "kernel log lacks '$1'"
}

# sectors DEV: size of a block device in 512-byte sectors.
sectors() {
	blockdev --getsz "$1"
}

# wipe DEV: zeroes the first MiB (old metadata must not leak between tests).
wipe() {
	dd if=/dev/zero of="$1" bs=1M count=1 conv=fsync 2>/dev/null
}

# debug_kernel: true on the debug kernel of `make check-debug` (KASAN,
# lockdep; several times slower), where tests that only measure scale may
# run smaller.
debug_kernel() { grep -qw rthin.kernel=debug /proc/cmdline; }

# ---- one scenario, two implementations ----
# The data-path tests (70-io-*) can run the same scenario against the
# kernel's C dm-thin (thin-pool/thin, the reference) and rthin
# (rthin-pool/rthin). RTHIN_TEST_IMPLS (comma-separated) picks them; `make
# check` runs rthin only, to keep its time down, and
# `RTHIN_VM_ENV=RTHIN_TEST_IMPLS=c,rthin make check` checks every scenario's
# expectations against dm-thin too (do that when writing or changing one).

# use_impl c|rthin: sets IMPL, POOL_T and THIN_T (loading dm-thin-pool for c).
use_impl() {
	IMPL=$1
	case $1 in
	c)
		modprobe dm-thin-pool || fail "modprobe dm-thin-pool"
		POOL_T=thin-pool THIN_T=thin
		;;
	rthin) POOL_T=rthin-pool THIN_T=rthin ;;
	*) fail "unknown implementation '$1' (want c or rthin)" ;;
	esac
}
impl_pool_target() { use_impl "$1" && echo "$POOL_T"; }
impl_thin_target() { use_impl "$1" && echo "$THIN_T"; }
test_impls() { echo "${RTHIN_TEST_IMPLS:-rthin}" | tr , ' '; }

# for_each_impl FUNC [ARG...]: runs FUNC in a subshell once per implementation
# (POOL_T/THIN_T set) and removes every dm device after each run. Every run
# happens; a failed one is recorded for impl_verdict and makes for_each_impl
# return 1.
IMPL_FAILURES=
for_each_impl() {
	local impl rc=0
	for impl in $(test_impls); do
		echo "==== [$impl] $*"
		if (use_impl "$impl" && "$@"); then
			echo "==== [$impl] PASS $1"
		else
			echo "==== [$impl] FAIL $1"
			IMPL_FAILURES="$IMPL_FAILURES $1[$impl]"
			rc=1
		fi
		# Bounded: a bio held forever by a target makes this wait (dm's
		# suspend is interruptible).
		timeout 120 dmsetup remove_all --force >/dev/null 2>&1 ||
			note "$1 [$impl]: dmsetup remove_all --force failed or timed out: $(dmsetup ls | tr '\n' ' ')"
	done
	return $rc
}
# note TEXT: to the test log and to the kernel log (the console keeps it
# even when the VM hangs before writing its results).
note() {
	echo "NOTE: $*"
	echo "rthin-test: $*" >/dev/kmsg 2>/dev/null
	return 0
}
# impl_verdict: the last line of a for_each_impl test; fails if any run failed.
impl_verdict() {
	[ -z "$IMPL_FAILURES" ] || fail "failed:$IMPL_FAILURES"
	echo "all passed on: $(test_impls)"
}

# info DEV: the status line after "<start> <len> <target> ".
info() { dmsetup status "$1" | cut -d' ' -f4-; }
# pool_field POOL N: field N of the pool's status (1 trans id ... 5 mode, 7 no-space).
pool_field() { info "$1" | cut -d' ' -f"$2"; }
# data_used POOL / data_total POOL: data blocks in use / in the pool.
data_used() { pool_field "$1" 3 | cut -d/ -f1; }
data_total() { pool_field "$1" 3 | cut -d/ -f2; }
# expect_used POOL N WHAT: the pool's used data blocks must be N.
expect_used() {
	local got
	got=$(data_used "$1")
	[ "$got" = "$2" ] || fail "$3: pool $1 uses $got data blocks, expected $2 (status: $(info "$1"))"
	echo "ok: $1 uses $2 data blocks ($3)"
}
# expect_thin THIN "STATUS" WHAT: the thin's status must be exactly STATUS.
expect_thin() {
	local got
	got=$(info "$1")
	[ "$got" = "$2" ] || fail "$3: thin $1 status '$got', expected '$2'"
	echo "ok: $1 status '$2' ($3)"
}
# thin_status_for NBLOCKS HIGHEST_VBLOCK [BS]: the thin status dm-thin reports
# for NBLOCKS mapped blocks of BS sectors (128) with the highest at HIGHEST_VBLOCK.
thin_status_for() {
	local bs=${3:-128}
	[ "$1" = 0 ] && { echo "0 -"; return; }
	echo "$(($1 * bs)) $((($2 + 1) * bs - 1))"
}

# pool_table META DATA SECTORS [FEATURE...]: the table line of a pool
# (POOL_T) of SECTORS with 64 KiB blocks and low water mark 0.
pool_table() {
	local meta=$1 data=$2 len=$3 feat=
	shift 3
	[ $# -gt 0 ] && feat=" $# $*"
	echo "0 $len $POOL_T $meta $data 128 0$feat"
}
# mkpool NAME META DATA SECTORS [FEATURE...]: wipes META and creates a pool
# (see pool_table).
mkpool() {
	wipe "$2"
	openpool "$@"
}
# openpool NAME META DATA SECTORS [FEATURE...]: the same without wiping META.
openpool() {
	local name=$1
	shift
	run dmsetup create "$name" --table "$(pool_table "$@")"
}
# reload_pool NAME META DATA SECTORS [FEATURE...]: replaces a pool's table
# (see pool_table) and makes it live, as LVM does (reload, suspend, resume).
reload_pool() {
	local name=$1
	shift
	swap_table "$name" "$(pool_table "$@")"
}
# swap_table NAME TABLE: loads TABLE into device NAME and makes it live.
swap_table() {
	run dmsetup reload "$1" --table "$2"
	run dmsetup suspend "$1"
	run dmsetup resume "$1"
}
# thin_table POOL ID SECTORS: the table line of thin device ID of POOL
# (THIN_T), SECTORS long: the line mkthin creates, for loads into a live thin.
thin_table() {
	echo "0 $3 $THIN_T /dev/mapper/$1 $2"
}
# mkthin NAME POOL ID SECTORS: activates thin device ID of POOL as NAME (THIN_T).
mkthin() {
	run dmsetup create "$1" --table "$(thin_table "$2" "$3" "$4")"
}
# snap POOL NEW ORIGIN [ORIGIN_DM_NAME]: create_snap, with the active origin
# suspended around it as LVM does.
snap() {
	[ -n "${4:-}" ] && run dmsetup suspend "$4"
	run dmsetup message "$1" 0 "create_snap $2 $3"
	[ -n "${4:-}" ] && run dmsetup resume "$4"
	return 0
}
# fill DEV MIB BYTE: writes MIB MiB of the octal byte BYTE (e.g. 132 = 'Z')
# to DEV, so that a block that was not zeroed shows.
fill() {
	tr '\000' "\\$3" </dev/zero | dd of="$1" bs=1M count="$2" iflag=fullblock oflag=direct 2>/dev/null ||
		fail "filling $1"
}

# ---- data checks ----
# Random pattern files /tmp/pat.A ... (8 MiB each), made on first use; a write
# at byte offset OFF takes its data from offset OFF mod 4 MiB of the pattern,
# so different places and different patterns hold different bytes.
pattern() {
	[ -f "/tmp/pat.$1" ] || dd if=/dev/urandom of="/tmp/pat.$1" bs=1M count=8 2>/dev/null ||
		fail "making pattern $1"
}
# model_new MODEL MIB: an all-zero (sparse) model of the first MIB MiB of a device.
model_new() {
	rm -f "$1"
	truncate -s "${2}M" "$1" || fail "model $1"
}
# capture DEV MODEL MIB: the model becomes the device's first MIB MiB (O_DIRECT read).
capture() {
	dd if="$1" of="$2" bs=1M count="$3" iflag=direct 2>/dev/null || fail "reading $1 into $2"
}
# put DEV MODEL PAT OFF BS COUNT: writes COUNT blocks of BS bytes of pattern
# PAT at byte offset OFF of DEV, one O_DIRECT write each, and the same bytes
# into the model file (MODEL "-" for none).
put() {
	local dev=$1 model=$2 pat=$3 off=$4 bs=$5 count=$6 src
	pattern "$pat"
	src=$((off % 4194304))
	dd if="/tmp/pat.$pat" of="$dev" bs="$bs" count="$count" iflag=skip_bytes skip="$src" \
		oflag=seek_bytes,direct seek="$off" conv=notrunc 2>/tmp/put.err ||
		fail "write of $count x $bs bytes at $off to $dev failed: $(cat /tmp/put.err)"
	[ "$model" = - ] && return 0
	dd if="/tmp/pat.$pat" of="$model" bs="$bs" count="$count" iflag=skip_bytes skip="$src" \
		oflag=seek_bytes seek="$off" conv=notrunc 2>/dev/null || fail "model write $model"
}
# same DEV MODEL WHAT: the device's first bytes (O_DIRECT) must equal the model file.
same() {
	local mib
	mib=$(($(wc -c <"$2") / 1048576))
	dd if="$1" of=/tmp/readback bs=1M count="$mib" iflag=direct 2>/tmp/same.err ||
		fail "$3: reading $1: $(cat /tmp/same.err)"
	if ! out=$(cmp /tmp/readback "$2" 2>&1); then
		echo "first differing bytes (offset, device, expected, octal):"
		cmp -l /tmp/readback "$2" 2>&1 | head -5
		echo "differing 64 KiB blocks of $1:"
		cmp -l /tmp/readback "$2" 2>/dev/null | awk '{ print int(($1 - 1) / 65536) }' | uniq | head -20 | tr '\n' ' '
		echo
		rm -f /tmp/readback
		fail "$3: $1 differs from its model $2: $out"
	fi
	rm -f /tmp/readback
	echo "ok: $1 matches $2 ($mib MiB, $3)"
}
# zeroes DEV OFF_MIB LEN_MIB WHAT: that range of DEV must read as zeroes.
zeroes() {
	local n
	dd if="$1" of=/tmp/zchk bs=1M skip="$2" count="$3" iflag=direct 2>/tmp/z.err ||
		fail "$4: reading $1: $(cat /tmp/z.err)"
	n=$(wc -c </tmp/zchk)
	[ "$n" = $(($3 * 1048576)) ] || fail "$4: read $n bytes of $1, expected $(($3 * 1048576))"
	n=$(tr -d '\000' </tmp/zchk | wc -c)
	rm -f /tmp/zchk
	[ "$n" = 0 ] || fail "$4: $1 MiB $2+$3 holds $n non-zero bytes, expected zeroes"
	echo "ok: $1 MiB $2+$3 reads as zeroes ($4)"
}

# fio_write NAME DEV OFFSET SIZE BS RW SEED [FIO-ARG...]: writes the range
# with crc32c-verified data (psync, O_DIRECT) and reads it back at the end.
# fio_verify with the same arguments re-reads and checks it (--verify_only).
fio_write() { fio_run write "$@"; }
fio_verify() { fio_run verify "$@"; }
fio_run() {
	local mode=$1 name=$2 dev=$3 off=$4 size=$5 bs=$6 rw=$7 seed=$8 how out
	shift 8
	case $mode in
	write) how=--do_verify=1 out=/tmp/fio.$name.out ;;
	*) how=--verify_only=1 out=/tmp/fio.$name.v.out ;;
	esac
	(cd /tmp && fio --name="$name" --filename="$dev" --offset="$off" --size="$size" --bs="$bs" \
		--rw="$rw" --randseed="$seed" --ioengine=psync --direct=1 --verify=crc32c \
		"$how" --verify_fatal=1 --verify_state_save=0 --output-format=terse "$@" \
		>"$out" 2>&1) || {
		cat "$out"
		fail "fio $mode $name ($rw $bs at $off+$size of $dev, seed $seed)"
	}
	echo "ok: fio $name ${mode}: $rw $bs at $off+$size of $dev"
}
# check_meta META: thin_check must pass on the (inactive) metadata device.
check_meta() {
	thin_check "$1" >/tmp/thin_check.out 2>&1 || {
		cat /tmp/thin_check.out
		fail "thin_check $1"
	}
	echo "ok: thin_check $1"
}

# mappings XML ID: "vblock dblock" lines of device ID in a thin_dump XML file.
mappings() {
	awk -v id="$2" '
	function attr(name,   m) {
		if (!match($0, name "=\"[0-9]+\"")) return -1
		m = substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 3)
		return m + 0
	}
	/<device / { on = (attr("dev_id") == id) }
	/<\/device>/ { on = 0 }
	on && /<range_mapping/ {
		o = attr("origin_begin"); d = attr("data_begin"); n = attr("length")
		for (i = 0; i < n; i++) print o + i, d + i
	}
	on && /<single_mapping/ { print attr("origin_block"), attr("data_block") }
	' "$1"
}
# live_mappings POOL META ID: mappings of device ID of an active pool, read
# through a metadata snapshot (reserve, thin_dump -m, release).
live_mappings() {
	run dmsetup message "$1" 0 reserve_metadata_snap
	thin_dump -m "$2" >/tmp/live.xml 2>/tmp/live.err || fail "thin_dump -m $2: $(cat /tmp/live.err)"
	run dmsetup message "$1" 0 release_metadata_snap
	mappings /tmp/live.xml "$3"
}

# ---- crash consistency (80-crash-*): dm-log-writes under the pool ----
# The pool's metadata and data devices are two linear slices (cmeta, cdata)
# of one dm-log-writes device (lw) over CRASH_DISK, logging to CRASH_LOG: one
# log holds the writes of both in the order they reached stable storage.
# Replaying the log's first N entries onto a zeroed CRASH_REPLAY gives the
# disk as a power cut at that point would leave it; each point is then
# tested on a throwaway dm-snapshot of it (COW on CRASH_COW), so activating
# the pool there writes nothing the next point would see.
CRASH_DISK=/dev/ram0 CRASH_LOG=/dev/ram1 CRASH_REPLAY=/dev/ram2 CRASH_COW=/dev/ram3
CRASH_META=16384  # 8 MiB of metadata
CRASH_DATA=131072 # 64 MiB of data
CRASH_LEN=$((CRASH_META + CRASH_DATA))

# crash_slices DEV: the metadata and data slices over DEV.
crash_slices() {
	run dmsetup create cmeta --table "0 $CRASH_META linear $1 0"
	run dmsetup create cdata --table "0 $CRASH_DATA linear $1 $CRASH_META"
}
# crash_record: zeroes the disk (the replay starts from zeroes too) and
# the log's super, then logs everything written to the slices.
crash_record() {
	modprobe dm-log-writes || fail "modprobe dm-log-writes"
	modprobe dm-snapshot || fail "modprobe dm-snapshot"
	run dd if=/dev/zero of=$CRASH_DISK bs=1M count=$((CRASH_LEN / 2048)) oflag=direct 2>/dev/null
	wipe $CRASH_LOG
	run dmsetup create lw --table "0 $CRASH_LEN log-writes $CRASH_DISK $CRASH_LOG"
	crash_slices /dev/mapper/lw
}
# crash_mark NAME: a mark in the log (after everything logged so far).
crash_mark() { run dmsetup message lw 0 mark "$1"; }
# crash_stop: removes the slices and the log-writes device (which writes the
# log's final mark); the pool and thins must be gone already.
crash_stop() {
	run dmsetup remove cdata
	run dmsetup remove cmeta
	run dmsetup remove lw
	echo "log: $(rthin-crashtest list $CRASH_LOG | wc -l) entries"
}
# crash_open: the slices over a snapshot of the replayed disk; the metadata
# must pass thin_check as the power cut left it.
crash_open() {
	run dmsetup create cs --table "0 $CRASH_LEN snapshot $CRASH_REPLAY $CRASH_COW N 8"
	crash_slices /dev/mapper/cs
	check_meta /dev/mapper/cmeta
}
crash_close() {
	run dmsetup remove cdata
	run dmsetup remove cmeta
	run dmsetup remove cs
}
# crash_pool: activates the replayed pool (POOL_T) as cpool.
crash_pool() {
	run dmsetup create cpool --table "0 $CRASH_DATA $POOL_T /dev/mapper/cmeta /dev/mapper/cdata 128 0"
}
# crash_points CHECK POINTS: replays the log to each point of the file
# POINTS (lines "INDEX MARK exact|after", ascending, as `rthin-crashtest
# points` prints them) and runs CHECK INDEX MARK exact|after between
# crash_open and crash_close; CHECK fails the test.
crash_points() {
	local check=$1 prev=0 n=0 idx mark exact
	run dd if=/dev/zero of=$CRASH_REPLAY bs=1M count=$((CRASH_LEN / 2048)) oflag=direct 2>/dev/null
	while read -r idx mark exact; do
		run rthin-crashtest replay $CRASH_LOG $CRASH_REPLAY --from $prev --to "$idx"
		prev=$((idx + 1))
		crash_open
		"$check" "$idx" "$mark" "$exact"
		crash_close
		n=$((n + 1))
	done <"$2"
	echo "ok: $n replay points ($(awk '$3 == "exact"' "$2" | wc -l) exactly at a mark)"
}
