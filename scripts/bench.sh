#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make bench` and `make bench-quick`: dm-linear, the C dm-thin and rthin side
# by side, each case for all three in one VM boot on the same data device.
#
# Usage: bench.sh [--quick] [options]
#   --quick           case 2 (4k randread, iodepth 32, numjobs 2), a short case 4,
#                     case 7 at 32 GiB and case 8
#   --cases LIST      comma list of c1..c9, c11..c14 (full default: all of them)
#   --cpus N          vCPUs of the main boot (default 2)
#   --oversub N       vCPUs of the extra case-2 boot of the full bench (case 10: numjobs
#                     1, 2, 4 ... up to twice N), 0 for none (default 4)
#   --reps N          repetitions per measurement (default 3)
#   --runtime S       seconds per timed fio run (default 5)
#   --data brd|nullb  the data device: a brd RAM disk or a null_blk without memory
#   --out DIR         results folder (default build/bench/<UTC timestamp>)
#   --module-dir DIR  bench the dm-rthin.ko in DIR (another clone's build/module)
#                     instead of building this clone's
#   --env NAME=VALUE  passed to the VM runner (BENCH_* settings in scripts/bench/run.sh)
# The results folder gets one vm-<N>cpu/ folder per boot (console, kernel log,
# per-run fio JSON, manifest.tsv) and, from scripts/bench/report.py,
# results.json, table.md and chart.png. build/bench/latest points at it.
. "$(dirname "$0")/lib.sh"

args_given="$*"
stall=${RTHIN_BENCH_STALL:-180}
quick=0 cases= cpus=2 oversub=4 reps=3 runtime=5 data=brd out= envs=() moddir=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1; shift ;;
	--cases) cases=$2; shift 2 ;;
	--cpus) cpus=$2; shift 2 ;;
	--oversub) oversub=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--runtime) runtime=$2; shift 2 ;;
	--data) data=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--module-dir) moddir=$(cd "$2" && pwd); shift 2 ;;
	--env) envs+=("$2"); shift 2 ;;
	*) die "unknown option $1 (see the top of scripts/bench.sh)" ;;
	esac
done

if [ $quick = 1 ]; then
	: "${cases:=c2,c4,c7,c8}"
	oversub=0
	# Short case 4: a 32 MiB volume, 0, 1 and 10 snapshots.
	vm_env=(BENCH_NJOBS=2 BENCH_SNAPS=0+1+10 BENCH_WVOL_MIB=32 BENCH_VOL_MIB=256)
	rd_mib=512 mem=3072 timeout=2400
else
	: "${cases:=c1,c2,c3,c4,c5,c6,c7,c8,c9,c11,c12,c13,c14}"
	# numjobs from 1 to the vCPUs asked for (not what the guest brought up).
	vm_env=(BENCH_VOL_MIB=256 BENCH_WVOL_MIB=64 "BENCH_NJOBS=$(seq -s+ 1 "$cpus")" BENCH_LVOLS=32768+65536)
	rd_mib=1024 mem=4096 timeout=7200
fi
vm_env+=(BENCH_CASES="$cases" BENCH_REPS="$reps" BENCH_RUNTIME="$runtime" BENCH_DATA="$data")

stamp=$(date -u +%Y%m%d-%H%M%S)
suffix=
if [ $quick = 1 ]; then suffix=-quick; fi
out=${out:-$RTHIN_OUT/bench/$stamp$suffix}
mkdir -p "$out"
out=$(cd "$out" && pwd)
mkdir -p "$RTHIN_OUT/bench"
ln -sfn "$out" "$RTHIN_OUT/bench/latest"

# The PNG chart needs matplotlib for the system python3 (apt's package).
ensure_host_packages python3-matplotlib || log "no python3-matplotlib: the report will have no chart"

start=$(date +%s)
# The host is shared: its load is part of the result.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -z "$moddir" ]; then
	SELFTEST=1 "$RTHIN_ROOT/scripts/module.sh"
	moddir=$RTHIN_OUT/module
	modsrc=$(cd "$RTHIN_ROOT" && git describe --always --dirty)
else
	[ -f "$moddir/dm-rthin.ko" ] || die "no dm-rthin.ko in $moddir"
	modsrc="$moddir ($(cd "$moddir" && git describe --always --dirty 2>/dev/null || echo '?'))"
fi
initramfs=$RTHIN_OUT/initramfs-bench.cpio.gz
"$RTHIN_ROOT/scripts/initramfs.sh" "$initramfs" "$moddir"
# The benchmark layer on top: the runner and GNU date (nanosecond timings;
# busybox date has no %N). The kernel unpacks concatenated cpio archives in order.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
mkdir -p "$stage/rthin/bench/bin"
cp "$RTHIN_ROOT/scripts/bench/run.sh" "$stage/rthin/bench/"
cp "$RTHIN_SYSROOT/usr/bin/date" "$stage/rthin/bench/bin/date"
(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >>"$initramfs"

# boot CPUS EXTRA-ENV...: one VM run of the bench runner into $out/vm-<CPUS>cpu.
boot() {
	local n=$1 dir=$out/vm-$1cpu$2 args=() kv
	shift 2
	# Later settings win: the defaults, then this boot's, then --env's.
	local -A set=()
	for kv in "${vm_env[@]}" "$@" "${envs[@]}"; do set[${kv%%=*}]=$kv; done
	for kv in "${set[@]}"; do args+=(--env "$kv"); done
	log "VM with $n vCPUs (TCG): ${set[*]}"
	local t0=$SECONDS
	"$RTHIN_ROOT/scripts/vm.sh" --mode bench --cpus "$n" --mem "$mem" --ramdisk-mib "$rd_mib" \
		--timeout "$timeout" "${args[@]}" "$initramfs" "$dir" |
		grep --line-buffered -aE '^bench:' | sed -u 's/\r$//' >&2 &
	local vm=$!
	# A guest that stops printing (every run prints a bench-run line; the
	# runner's own per-step limit is 120 s + 4 x runtime) has frozen: stop its
	# QEMU, keep what the last checkpoint saved, and name the step it was in.
	local size=-1 quiet=0 cur qemu
	while kill -0 "$vm" 2>/dev/null; do
		sleep 5
		cur=$(stat -c %s "$dir/console.log" 2>/dev/null || echo 0)
		if [ "$cur" = "$size" ]; then quiet=$((quiet + 5)); else quiet=0 size=$cur; fi
		if [ "$quiet" -ge "$stall" ]; then
			grep -a '^bench-run: ' "$dir/console.log" | tail -1 | sed 's/^bench-run: //; s/\r$//' >"$dir/frozen-at"
			log "the guest printed nothing for ${stall}s: frozen in $(cut -f1-4 "$dir/frozen-at" | tr '\t' ' '); stopping its QEMU"
			for qemu in $(pgrep -f -- "file=$dir/.vm/results.img"); do
				[ "$(ps -o comm= -p "$qemu")" = qemu-system-x86 ] && kill "$qemu"
			done
			break
		fi
	done
	wait "$vm" || true
	echo "$((SECONDS - t0))" >"$dir/boot-seconds" 2>/dev/null || true
	echo "$n" >"$dir/requested-cpus" 2>/dev/null || true
	if [ -f "$dir/vm-status" ]; then
		[ "$(cat "$dir/vm-status")" = done ] || log "VM with $n vCPUs did not finish: $(cat "$dir/vm-status")"
	else
		log "VM with $n vCPUs wrote no results; console: $dir/console.log"
	fi
}

# boot_all CPUS EXTRA-ENV...: one boot; if a target froze the guest, one more
# boot of the same cases without that target (vm-<N>cpu-without-<target>), so
# the others are still measured side by side.
boot_all() {
	local n=$1 frozen
	shift
	boot "$n" "" "$@"
	[ -s "$out/vm-${n}cpu/frozen-at" ] || return 0
	frozen=$(cut -f3 "$out/vm-${n}cpu/frozen-at")
	case $frozen in linear | dm-thin | rthin) ;; *) return 0 ;; esac
	log "a boot without $frozen, for the other targets"
	boot "$n" "-without-$frozen" "$@" "BENCH_TARGETS=$(echo linear dm-thin rthin | tr ' ' '\n' | grep -vx "$frozen" | paste -sd+)"
}

boot_all "$cpus"
# Case 10: case 2 oversubscribed, more vCPUs than the host has cores,
# numjobs in powers of two up to twice the vCPUs.
if [ "$oversub" -gt 0 ] && [[ ,$cases, == *,c2,* ]]; then
	boot_all "$oversub" BENCH_CASES=c2 "BENCH_NJOBS=$(seq -s+ 1 $((2 * oversub)) | awk -F+ '{for (i = 1; i <= NF; i *= 2) printf "%s%s", (i > 1 ? "+" : ""), $i}')"
fi
echo "$(($(date +%s) - start))" >"$out/bench-seconds"

# The host the numbers came from.
{
	echo "nproc=$(nproc)"
	echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "mem_gib=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)"
	echo "qemu=$(qemu-system-x86_64 --version | head -1)"
	echo "accel=tcg (multi-threaded TCG, no KVM)"
	echo "git=$(cd "$RTHIN_ROOT" && git describe --always --dirty)"
	echo "module=$modsrc"
	echo "command=${RTHIN_BENCH_COMMAND:-scripts/bench.sh $args_given}"
	echo "quick=$quick"
	echo "seconds=$(cat "$out/bench-seconds")"
	echo "load_start=$load_start"
	echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/host"

py=python3
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null && py=/usr/bin/python3
"$py" "$RTHIN_ROOT/scripts/bench/report.py" "$out"
log "results: $out (table.md, results.json, chart.png); $(cat "$out/bench-seconds") s in all"
