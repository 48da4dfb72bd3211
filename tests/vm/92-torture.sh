# SPDX-License-Identifier: GPL-2.0
# The differential torture test (rthin-torture, tests/torture): seeded
# sequences of operations (reads and writes whole, partial and unaligned,
# with and without FUA and fdatasync; discards; create_thin; create_snap as
# LVM does it; delete; reserve/release_metadata_snap; set_transaction_id;
# thin and pool suspend/resume with and without --noflush; reloads of thin
# and pool and swaps to error and back; data and metadata growth; running
# out of data space under both policies and growing out of it; dm-delay
# under the data device; several processes writing disjoint ranges while
# another operation runs) on the C dm-thin and on rthin in the same boot,
# against a model of what every volume must read back. After each
# sequence: every volume reads back its model, the pool's counts match it,
# thin_check passes and thin_dump shows the modelled devices and sharing,
# the same for both implementations. A failure prints the seed and the
# sequence, shrunk. Runs both implementations whatever RTHIN_TEST_IMPLS
# says (it is a comparison).
# TORTURE_SECONDS (default 180): run sequences for that long;
# TORTURE_SEQUENCES=N instead runs exactly N (the long run: 1000);
# TORTURE_SEED=S repeats a run (the seed is printed; default: the time);
# TORTURE_OPS=K operations per sequence (default 40);
# TORTURE_SKIP=KIND,... leaves out operations of those kinds (rthin-torture
# --skip), to look at one bug at a time; by default everything runs.
. /rthin/tests/lib.sh

run modprobe dm-thin-pool
run modprobe dm-delay
for d in /dev/ram0 /dev/ram1; do
	[ "$(sectors $d)" -ge 524288 ] || fail "$d is smaller than 256 MiB"
done
skip=${TORTURE_SKIP:-}
[ -z "$skip" ] || note "torture: not generating $skip (TORTURE_SKIP)"
args="--seed ${TORTURE_SEED:-$(date +%s)} --ops ${TORTURE_OPS:-40} --skip ${skip:-,}"
if [ -n "${TORTURE_SEQUENCES:-}" ]; then
	args="$args --sequences $TORTURE_SEQUENCES"
else
	args="$args --seconds ${TORTURE_SECONDS:-180}"
fi
echo "rthin-torture run $args"
# shellcheck disable=SC2086 # the options are words
rthin-torture run $args || fail "rthin-torture found failures (above: RTHIN FAILURE / DIFFERENCE FROM DM-THIN, with seed and sequence)"
