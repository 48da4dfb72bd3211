#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boots the test kernel (PVH, uncompressed vmlinux) under QEMU/TCG with the
# initramfs, RAM disks and optional sparse-file virtio disks; collects the
# guest's /results into RESULTS_DIR.
#
# Usage: vm.sh [options] INITRAMFS RESULTS_DIR
#   --mode check|demo|bench|shell   what the guest runs (default check; bench: scripts/bench.sh)
#   --cpus N --mem MiB        guest size (default 2 vCPUs, 2048 MiB; debug kernel 4096)
#   --ramdisk-mib N           size of each of the 4 brd RAM disks (default 256)
#   --disk GiB                add a sparse-file virtio disk (repeatable: vdb, vdc, ...)
#   --timeout S               hard limit for the whole VM run (default 3600; debug kernel 5400)
#   --test-timeout S          limit for each VM test (default 900; debug kernel 2700)
#   --only PATTERN            run only the tests whose name contains PATTERN
#   --tests FILE              run exactly the tests named in FILE (one per line, in order;
#                             scripts/vm-suite.sh gives each shard its list this way)
#   --no-report               check mode: collect the results, leave the verdict to the
#                             caller (scripts/vm-suite.sh reads every shard at once)
#   --env NAME=VALUE          set an environment variable for the VM's tests (repeatable)
# RTHIN_KERNEL_FLAVOR=debug boots the debug kernel (KASAN, lockdep, ...), which
# needs room for KASAN's shadow memory and quarantine and runs several times slower.
# In check mode the exit status is the tests' status: the results are read
# by scripts/vm/report.py (KUnit cases, VM tests, kernel log), which prints a
# line per test and `N passed, N failed`. A VM that crashed, hung or wrote no
# results fails too. Other modes exit 0 once the guest has written results.
. "$(dirname "$0")/lib.sh"

mode=check cpus=2 mem=2048 rd_mib=256 timeout=3600 test_timeout=900 only= tests_file= report=1
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && mem=4096 timeout=5400 test_timeout=2700
disks=() envs=()
while [ $# -gt 2 ]; do
	case $1 in
	--mode) mode=$2; shift 2 ;;
	--cpus) cpus=$2; shift 2 ;;
	--mem) mem=$2; shift 2 ;;
	--ramdisk-mib) rd_mib=$2; shift 2 ;;
	--disk) disks+=("$2"); shift 2 ;;
	--timeout) timeout=$2; shift 2 ;;
	--test-timeout) test_timeout=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--tests) tests_file=$2; shift 2 ;;
	--no-report) report=0; shift ;;
	--env) envs+=("$2"); shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done
initramfs=${1:?usage: vm.sh [options] INITRAMFS RESULTS_DIR}
results=${2:?usage: vm.sh [options] INITRAMFS RESULTS_DIR}

rm -rf "$results"
mkdir -p "$results"
work=$results/.vm
mkdir -p "$work"
# prepare_disks: the results disk (with the test list, for --tests) and the
# empty data disks, new for each boot.
prepare_disks() {
	rm -f "$work"/*.img
	# The guest writes a tar archive of its /results here. With --tests, the
	# disk first holds a tar archive with the list (scripts/vm/init reads it).
	if [ -n "$tests_file" ]; then
		mkdir -p "$work/input"
		cp "$tests_file" "$work/input/tests"
		cp "$tests_file" "$results/expected-tests"
		tar -cf "$work/results.img" -C "$work/input" tests
	fi
	truncate -s 64M "$work/results.img"
	drives=(-drive "file=$work/results.img,format=raw,if=virtio,cache=unsafe")
	i=0
	for gib in "${disks[@]}"; do
		truncate -s "${gib}G" "$work/disk$i.img"
		drives+=(-drive "file=$work/disk$i.img,format=raw,if=virtio,cache=unsafe")
		i=$((i + 1))
	done
}

cmdline="console=ttyS0 rdinit=/init panic=-1 oops=panic rthin.mode=$mode rthin.cpus=$cpus"
# On a loaded host the IO-APIC timer check at boot can miss its ticks under
# TCG and panic ("IO-APIC + timer doesn't work!"); the timer works, skip the check.
cmdline+=" no_timer_check"
# The kernel log is saved once, at the end (scripts/vm/init), and checked for
# KUnit results and reports: the default 128 KiB ring lost the boot lines of
# a full run, and would have lost the KUnit results (and any report) next.
cmdline+=" log_buf_len=16M"
cmdline+=" brd.rd_nr=4 brd.rd_size=$((rd_mib * 1024)) rthin.test_timeout=$test_timeout"
[ -n "$only" ] && cmdline+=" rthin.only=$only"
# KASAN prints only its first report unless told otherwise; a debug run is
# slow, so have it show every bug it meets.
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && cmdline+=" kasan_multi_shot"
# Tests that only scale on a debug kernel ask for it (tests/vm/lib.sh, debug_kernel).
cmdline+=" rthin.kernel=$RTHIN_KERNEL_FLAVOR"
if [ "$mode" = bench ] && [ "${RTHIN_BENCH_TSC:-1}" = 1 ]; then
	# Timings need a fine clock. Under TCG the guest's PIT calibration of the
	# TSC fails when the host is busy, and the kernel then falls back to the
	# jiffies clocksource (4 ms steps). Guest TSC ticks at the host's rate
	# under TCG, so hand the kernel that rate and skip the watchdog.
	khz=$(awk -F: '/^cpu MHz/ {printf "%d", $2 * 1000; exit}' /proc/cpuinfo)
	[ -n "$khz" ] && cmdline+=" tsc_early_khz=$khz tsc=reliable"
fi
# The kernel hands NAME=VALUE words it does not know to /init's environment.
for kv in "${envs[@]}"; do
	[[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*$ ]] || die "--env wants NAME=VALUE without spaces, got '$kv'"
	cmdline+=" $kv"
done

# One socket per vCPU: the kernel has no ACPI, so it counts CPUs from the
# firmware's MP table, which lists one processor per socket (with -smp N
# alone the guest brings up a single CPU).
prepare_disks
qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$cpus,sockets=$cpus,cores=1,threads=1" -m "$mem"
	-kernel "$RTHIN_KBUILD/vmlinux" -initrd "$initramfs" -append "$cmdline"
	-display none -monitor none -no-reboot "${drives[@]}")

# sample_host PID PIDFILE CONSOLE: while PID (the VM's timeout wrapper)
# lives, prints "NAME EPOCH CPU" when the console shows "=== NAME" (a test
# starts; scripts/vm/init prints it): the host's clock and the QEMU process's
# CPU time (user + system, in 1/CLK_TCK s) then, checked once a second. The
# first line is "boot", the last "exit". scripts/vm/timing.py turns this
# into each test's wall and host CPU time.
sample_host() {
	local pid=$1 pidfile=$2 console=$3 qpid= seen=0 cpu=0
	marks() {
		local n now
		now=$(date +%s.%N)
		[ -n "$qpid" ] || qpid=$(cat "$pidfile" 2>/dev/null) || true
		if [ -n "$qpid" ] && [ -r "/proc/$qpid/stat" ]; then
			cpu=$(awk '{print $14 + $15}' "/proc/$qpid/stat" 2>/dev/null) || true
		fi
		n=$(grep -ac '^=== ' "$console" 2>/dev/null) || n=0
		if [ "$n" -gt "$seen" ]; then
			grep -a '^=== ' "$console" | sed -n "$((seen + 1)),${n}p" | tr -d '\r' |
				while read -r _ name _; do echo "$name $now $cpu"; done
			seen=$n
		fi
	}
	echo "boot $(date +%s.%N) 0"
	while kill -0 "$pid" 2>/dev/null; do
		marks
		sleep 1
	done
	marks
	echo "exit $(date +%s.%N) $cpu"
	echo "clk_tck $(getconf CLK_TCK) 0"
}

console=$results/console.log
# boot: one run of the VM; sets status to its exit status.
boot() {
	status=0
	if [ "$mode" = shell ]; then
		"${qemu[@]}" -serial mon:stdio
	elif [ "$mode" = demo ] || [ "$mode" = bench ]; then
		# The demo's and the benchmark's output is for people: show it live, keep a copy.
		timeout -k 10 "$timeout" "${qemu[@]}" -serial stdio | tee "$console" || status=$?
	else
		: >"$console"
		timeout -k 10 "$timeout" "${qemu[@]}" -serial "file:$console" -pidfile "$work/qemu.pid" &
		vm=$!
		sample_host "$vm" "$work/qemu.pid" "$console" >"$results/host-timing" &
		sampler=$!
		wait "$vm" || status=$?
		wait "$sampler" || true
	fi
}
boot
# A kernel that dies before /init runs has tested nothing: under
# multi-threaded TCG about one boot in twenty of the test kernel was seen to
# take an int3 trap while the kernel patched its own text (a static key
# flipped from an interrupt as rtc_cmos set the clock) and panic at about
# 1.8 s. That is the emulator's race, not a test result: boot once more, and
# say so. A second such death, or any death after /init said it is up, fails.
if [ "$mode" != shell ] && ! grep -qa '^rthin-init: up' "$console" 2>/dev/null; then
	log "the VM died while booting, before /init ran (last console lines below); booting it once more"
	tail -15 "$console" >&2 || true
	cp "$console" "$results/console-first-boot.log" 2>/dev/null || true
	prepare_disks
	boot
fi
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
	log "the VM hit its ${timeout}s time limit; console log: $console"
fi

if ! tar -xf "$work/results.img" -C "$results" 2>/dev/null || [ ! -f "$results/vm-status" ]; then
	log "the VM wrote no results (crash, panic or timeout). Last console lines:"
	tail -40 "$console" >&2 || true
	rm -rf "$work"
	[ "$report" = 1 ] || exit 1
	echo "0 passed, 1 failed"
	exit 1
fi
rm -rf "$work"
[ "$mode" = check ] || exit 0
[ "$report" = 1 ] || exit 0
# The KUnit suites the module declares: each must report, or the run fails.
exec python3 "$RTHIN_ROOT/scripts/vm/report.py" --suites "$(kunit_suites)" "$results"
