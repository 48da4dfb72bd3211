#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs the VM test suite in several VMs at once (shards) and gives one verdict.
#
# Usage: vm-suite.sh [--shards N] [--only PATTERN] [vm.sh options] INITRAMFS RESULTS_DIR
#   --shards N      N VMs (default $RTHIN_SHARDS); without either, at most 4
#                   and one per 150 s of tests (a few selected tests: one VM).
#                   Never more VMs than tests, nor than the host's free memory holds.
#   --only PATTERN  the tests whose name contains PATTERN; PATTERN may list
#                   several, comma-separated (RTHIN_ONLY=thin-io,70-io)
#   other options (--disk, --env, --mem, --cpus, --test-timeout, --timeout)
#   go to every VM (scripts/vm.sh).
# The tests are those INITRAMFS holds (INITRAMFS.tests, written by
# scripts/initramfs.sh). They are split by their measured durations
# (tests/vm/durations.txt; a test not listed there counts 60 s) with
# scripts/vm/shards.py, longest first onto the least loaded VM. Each VM has its
# own disks and results folder, RESULTS_DIR/shard-K; scripts/vm/report.py
# then reads them all: KUnit is checked in every VM and counted once, a VM
# that hangs or crashes fails the run and its tests are named. The last line
# is `N passed, N failed`; the exit status is non-zero on any failure.
# RESULTS_DIR/shards.txt: one line per VM, "K SECONDS EXIT_STATUS TESTS...";
# RESULTS_DIR/timing.txt: per test wall, host CPU and guest CPU time.
. "$(dirname "$0")/lib.sh"

shards=${RTHIN_SHARDS:-} only=${RTHIN_ONLY:-} vm_args=() timeout=
while [ $# -gt 2 ]; do
	case $1 in
	--shards) shards=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--timeout) timeout=$2; shift 2 ;;
	--disk | --env | --mem | --cpus | --test-timeout | --ramdisk-mib) vm_args+=("$1" "$2"); shift 2 ;;
	*) die "unknown option $1" ;;
	esac
done
initramfs=${1:?usage: vm-suite.sh [options] INITRAMFS RESULTS_DIR}
results=${2:?usage: vm-suite.sh [options] INITRAMFS RESULTS_DIR}
# Asked for a number of VMs: that many (at most one per test); else at most 4.
asked=1
[ -n "$shards" ] || { shards=4 asked=0; }
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "RTHIN_SHARDS/--shards must be a positive number, not '$shards'"

# The tests, in suite order.
if [ -f "$initramfs.tests" ]; then
	all=$(cat "$initramfs.tests")
else
	all=$(cd "$RTHIN_ROOT/tests/vm" && LC_ALL=C ls [0-9]*.sh | sed 's/\.sh$//')
fi
selected=()
for name in $all; do
	if [ -n "$only" ]; then
		hit=0
		IFS=, read -ra pats <<<"$only"
		for p in "${pats[@]}"; do [ -n "$p" ] && [[ $name == *"$p"* ]] && hit=1; done
		[ "$hit" = 1 ] || continue
	fi
	selected+=("$name")
done
[ ${#selected[@]} -gt 0 ] || die "no VM test matches '$only'"

durations=$RTHIN_ROOT/tests/vm/durations.txt
default_s=60
# Fewer VMs when there is little to share: a VM's boot and KUnit cost
# about 15 s of one host core, so every VM should get 150 s of tests or more.
estimate=$(printf '%s\n' "${selected[@]}" | python3 "$RTHIN_ROOT/scripts/vm/shards.py" 1 "$durations" $default_s | cut -d' ' -f1)
by_time=$((estimate / 150))
[ "$by_time" -ge 1 ] || by_time=1
[ "$asked" = 1 ] || [ "$shards" -le "$by_time" ] || shards=$by_time
[ "$shards" -le ${#selected[@]} ] || shards=${#selected[@]}
# And no more VMs than the host's free memory holds (guest RAM plus ~300 MiB of QEMU each).
mem=2048
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && mem=4096
for ((i = 0; i < ${#vm_args[@]}; i++)); do [ "${vm_args[i]}" = --mem ] && mem=${vm_args[i + 1]}; done
avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
by_mem=$((avail / (mem + 300)))
[ "$by_mem" -ge 1 ] || by_mem=1
if [ "$shards" -gt "$by_mem" ]; then
	log "only $avail MiB of memory available: $by_mem VMs instead of $shards"
	shards=$by_mem
fi

rm -rf "$results"
mkdir -p "$results"
mapfile -t plan < <(printf '%s\n' "${selected[@]}" | python3 "$RTHIN_ROOT/scripts/vm/shards.py" "$shards" "$durations" $default_s)
log "VM suite: ${#selected[@]} tests in ${#plan[@]} VM(s) (estimated ${estimate}s of tests; tests/vm/durations.txt)"

# run_shard K EST TESTS...: one VM; its log lines carry the prefix "[shard K]".
run_shard() {
	local k=$1 est=$2 t0 rc=0 limit cap
	shift 2
	printf '%s\n' "$@" >"$results/shard-$k.tests"
	# A hung kernel must not hold the run for the whole hour: three times the
	# estimate plus a test's limit, at most the VM's default (scripts/vm.sh;
	# the debug kernel runs about three times slower).
	if [ "$RTHIN_KERNEL_FLAVOR" = debug ]; then
		limit=$((9 * est + 2700)) cap=5400
	else
		limit=$((3 * est + 900)) cap=3600
	fi
	[ "$limit" -le "$cap" ] || limit=$cap
	limit=${timeout:-$limit}
	t0=$(date +%s)
	"$RTHIN_ROOT/scripts/vm.sh" --no-report --timeout "$limit" --tests "$results/shard-$k.tests" \
		"${vm_args[@]}" "$initramfs" "$results/shard-$k" 2>&1 | sed -u "s/^/[shard $k] /" >&2 ||
		rc=$?
	echo "$k $(($(date +%s) - t0)) $rc $*" >"$results/shard-$k.done"
}

t0=$(date +%s)
pids=()
k=0
for line in "${plan[@]}"; do
	read -r est names <<<"$line"
	# shellcheck disable=SC2086
	log "shard $k: $(echo $names | wc -w) tests, estimated ${est}s: $names"
	# shellcheck disable=SC2086
	run_shard $k "$est" $names &
	pids+=($!)
	k=$((k + 1))
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
wall=$(($(date +%s) - t0))

: >"$results/shards.txt"
dirs=()
for ((k = 0; k < ${#plan[@]}; k++)); do
	dirs+=("$results/shard-$k")
	if [ -f "$results/shard-$k.done" ]; then
		cat "$results/shard-$k.done" >>"$results/shards.txt"
		read -r _ secs rc _ <"$results/shard-$k.done"
		log "shard $k: ${secs}s (VM exit status $rc)"
	else
		echo "$k ? ? $(tr '\n' ' ' <"$results/shard-$k.tests")" >>"$results/shards.txt"
	fi
done
log "VM suite: ${wall}s wall for ${#plan[@]} VM(s)"
echo "all $wall" >>"$results/shards.txt"

# Conveniences: every test's log and a combined summary at the top.
for d in "${dirs[@]}"; do
	[ -f "$d/summary" ] && cat "$d/summary" >>"$results/summary"
	for f in "$d"/[0-9]*.log; do [ -e "$f" ] && ln -sf "${d##*/}/${f##*/}" "$results/${f##*/}"; done
done
python3 "$RTHIN_ROOT/scripts/vm/timing.py" "${dirs[@]}" >"$results/timing.txt" 2>&1 || true
exec python3 "$RTHIN_ROOT/scripts/vm/report.py" --suites "$(kunit_suites)" "${dirs[@]}"
