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
#   --env NAME=VALUE          set an environment variable for the VM's tests (repeatable)
# RTHIN_KERNEL_FLAVOR=debug boots the debug kernel (KASAN, lockdep, ...), which
# needs room for KASAN's shadow memory and quarantine and runs several times slower.
# In check mode the exit status is the tests' status: the results are read
# by scripts/vm/report.py (KUnit cases, VM tests, kernel log), which prints a
# line per test and `N passed, N failed`. A VM that crashed, hung or wrote no
# results fails too. Other modes exit 0 once the guest has written results.
. "$(dirname "$0")/lib.sh"

mode=check cpus=2 mem=2048 rd_mib=256 timeout=3600 test_timeout=900 only=
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
# The guest writes a tar archive of its /results here.
truncate -s 64M "$work/results.img"
drives=(-drive "file=$work/results.img,format=raw,if=virtio,cache=unsafe")
i=0
for gib in "${disks[@]}"; do
	truncate -s "${gib}G" "$work/disk$i.img"
	drives+=(-drive "file=$work/disk$i.img,format=raw,if=virtio,cache=unsafe")
	i=$((i + 1))
done

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
qemu=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$cpus,sockets=$cpus,cores=1,threads=1" -m "$mem"
	-kernel "$RTHIN_KBUILD/vmlinux" -initrd "$initramfs" -append "$cmdline"
	-display none -monitor none -no-reboot "${drives[@]}")

console=$results/console.log
status=0
if [ "$mode" = shell ]; then
	"${qemu[@]}" -serial mon:stdio
elif [ "$mode" = demo ] || [ "$mode" = bench ]; then
	# The demo's and the benchmark's output is for people: show it live, keep a copy.
	timeout -k 10 "$timeout" "${qemu[@]}" -serial stdio | tee "$console" || status=$?
else
	timeout -k 10 "$timeout" "${qemu[@]}" -serial "file:$console" || status=$?
fi
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
	log "the VM hit its ${timeout}s time limit; console log: $console"
fi

if ! tar -xf "$work/results.img" -C "$results" 2>/dev/null || [ ! -f "$results/vm-status" ]; then
	log "the VM wrote no results (crash, panic or timeout). Last console lines:"
	tail -40 "$console" >&2 || true
	rm -rf "$work"
	echo "0 passed, 1 failed"
	exit 1
fi
rm -rf "$work"
[ "$mode" = check ] || exit 0
# The KUnit suites the module declares: each must report, or the run fails.
suites=$(grep -rhoE 'kunit_tests\(([a-z0-9_]+)\)' "$RTHIN_ROOT/rust" --include='*.rs' |
	sed -E 's/kunit_tests\((.*)\)/\1/' | sort -u)
# shellcheck disable=SC2086
exec python3 "$RTHIN_ROOT/scripts/vm/report.py" "$results" $suites
