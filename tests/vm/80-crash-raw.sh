# SPDX-License-Identifier: GPL-2.0
# Crash consistency of raw writes (issue 7): a seeded workload (rthin-crashtest
# raw-write) on two thins, with snapshots created and deleted, 4 KiB and whole
# 64 KiB-block writes and discards, fdatasync and a log mark after every
# step, runs on a pool whose metadata and data are logged by dm-log-writes
# (lib.sh crash_*). The log is then replayed to every FLUSH, FUA and mark
# entry and to CRASH_RANDOM random entries; at each point thin_check passes,
# the pool activates, and every thin reads what the workload guaranteed at
# its last mark (rthin-crashtest raw-verify: data of the last step may be
# there or not, per 4 KiB block; nothing else). Also checked with the C
# dm-thin at the exact mark points when RTHIN_TEST_IMPLS names c.
# Larger, opt-in: CRASH_POINTS=all (every entry of the log), CRASH_STEPS=N,
# CRASH_SEED=N (the seed is printed).
. /rthin/tests/lib.sh

SEED=${CRASH_SEED:-$(date +%s)}
STEPS=${CRASH_STEPS:-4}
RANDOM_POINTS=${CRASH_RANDOM:-8}
echo "seed $SEED, $STEPS steps"
WL="--seed $SEED --steps $STEPS --mib 8"

use_impl rthin
crash_record
mkpool pool /dev/mapper/cmeta /dev/mapper/cdata $CRASH_DATA
run rthin-crashtest raw-write --pool pool --log lw $WL
for t in $(dmsetup ls | awk '$1 ~ /^ct[0-9]+$/ { print $1 }'); do run dmsetup remove "$t"; done
run dmsetup remove pool
crash_stop

check_raw() {
	local exact=
	[ "$3" = exact ] && exact=--exact
	for impl in $(test_impls); do
		# The C dm-thin checks the mark points only: its results cross-check
		# rthin's metadata, the time goes to rthin's points.
		[ "$impl" = c ] && [ -z "$exact" ] && continue
		use_impl "$impl"
		crash_pool
		rthin-crashtest raw-verify --pool cpool $WL --mark "$2" $exact --thin-target $THIN_T ||
			fail "[$impl] replay point $1 (after mark $2, $3)"
		run dmsetup remove cpool
	done
}
if [ "${CRASH_POINTS:-}" = all ]; then
	run rthin-crashtest points $CRASH_LOG --start e0 --all >/tmp/points
else
	run rthin-crashtest points $CRASH_LOG --start e0 --random "$RANDOM_POINTS" --seed "$SEED" >/tmp/points
fi
crash_points check_raw /tmp/points
