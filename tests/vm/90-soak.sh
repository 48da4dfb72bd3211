# SPDX-License-Identifier: GPL-2.0
# A bounded soak (issue 7): for SOAK_SECONDS (60 in `make check`, 1200 in
# `make soak`) three thins of one pool take mixed fio I/O (randrw, two jobs
# each on their own halves, crc32c-verified) in rounds, while a loop keeps
# creating and deleting snapshots of the busy thins, discarding written
# ranges, suspending and resuming the thins and the pool (with and without
# --noflush) and reloading the pool. Checked:
#   - every round's fio verifies everything it wrote (its own verify pass,
#     after all the churn of the round);
#   - a snapshot of thin 1 taken between rounds still holds that round's data
#     while the next round overwrites the origin (fio --verify_only of the
#     earlier round on the snapshot);
#   - a discarded range reads back as zeroes; the pool stays rw, without
#     needs_check;
#   - at the end the pool is deactivated, thin_check is clean, and after
#     reactivation the last round's data verifies on every thin.
# SOAK_IMPL=c runs the same against the C dm-thin (the reference).
. /rthin/tests/lib.sh

SECONDS_WANTED=${SOAK_SECONDS:-60}
use_impl "${SOAK_IMPL:-rthin}"
meta=/dev/ram0
# Data on a virtio disk when there is one (it outlasts the RAM disks' 256 MiB
# of snapshots' copy-on-write), else a RAM disk.
data=/dev/vdb
[ -b $data ] || data=/dev/ram1
MB=2048 # sectors
# 512 MiB holds the three thins (144 MiB) and four snapshots' worth of
# copies; error_if_no_space turns an unexpected full pool into fio errors
# (a failed test) instead of a hang.
POOL_SECTORS=$((${SOAK_POOL_MIB:-512} * MB))
[ "$(sectors $data)" -ge $POOL_SECTORS ] || POOL_SECTORS=$(sectors $data)
THIN_MIB=48 # 0-16 MiB fio (two 8 MiB jobs), 16-48 MiB discard scratch
RANDOM=${SOAK_SEED:-$$}
echo "soak: $SECONDS_WANTED s on $POOL_T, data $data ($((POOL_SECTORS / MB)) MiB), seed ${SOAK_SEED:-$$}"

now() { cut -d' ' -f1 /proc/uptime | cut -d. -f1; }
end=$(($(now) + SECONDS_WANTED))

# Every step is traced to the kernel log (the console keeps it when the VM
# hangs); a watchdog dumps the devices and the tasks in D state there when no
# step has started for SOAK_STALL seconds (a hang would otherwise only show
# as the runner's timeout).
trace() { echo "rthin-soak: $*" >/dev/kmsg 2>/dev/null; : >/tmp/soak.beat; }
STALL=${SOAK_STALL:-180}
trace start
(
	while sleep 30; do
		[ $(($(date +%s) - $(stat -c %Y /tmp/soak.beat))) -gt $STALL ] || continue
		# Tasks first: a status ioctl may block on the same stall.
		{
			echo "no progress for $STALL s; tasks in D state (command, wchan, stack):"
			for p in /proc/[0-9]*; do
				[ "$(cut -d' ' -f3 $p/stat 2>/dev/null)" = D ] || continue
				echo "$(tr '\0' ' ' <$p/cmdline) $(cat $p/wchan) $(tr '\n' ' ' <$p/stack 2>/dev/null)"
			done
			timeout 20 dmsetup info -c 2>&1
			timeout 20 dmsetup status --noflush 2>&1
		} 2>&1 | while read -r l; do echo "rthin-soak: $l" >/dev/kmsg; done
		break
	done
) &
watchdog=$!

mkpool pool $meta $data $POOL_SECTORS error_if_no_space
for t in 1 2 3; do
	run dmsetup message pool 0 "create_thin $t"
	mkthin thin$t pool $t $((THIN_MIB * MB))
done

# fio_round MODE DEV ROUND [OUT]: round ROUND's workload on DEV's first 16 MiB:
# two jobs on their own 8 MiB, randrw 70% writes, 4-64 KiB blocks. MODE
# write runs it and verifies what it wrote; MODE verify re-reads and checks
# what round ROUND wrote (--verify_only replays the same seed).
fio_round() {
	local how=--do_verify=1
	[ "$1" = verify ] && how=--verify_only=1
	(cd /tmp && fio --filename="$2" --size=8M --rw=randrw --rwmixread=30 --bsrange=4k-64k \
		--blockalign=4k --randseed="$3" --ioengine=psync --direct=1 --verify=crc32c \
		--verify_fatal=1 --verify_state_save=0 --output-format=terse $how \
		--name=j0 --offset=0 --name=j1 --offset=8M >"${4:-/tmp/fio.$3.$1}" 2>&1)
}
# seed ROUND THIN: the fio seed of a thin's round (also names its output).
seed() { echo $(($1 * 10 + $2)); }
# written_kib FILE: KiB written by the jobs of a terse fio output.
written_kib() { awk -F';' '$1 == 3 { s += $47 } END { print s + 0 }' "$1"; }

snaps=  # ids of the live snapshots of busy thins, oldest first
next_id=100
n_snap=0 n_del=0 n_disc=0 n_susp_thin=0 n_susp_thin_nf=0 n_susp_pool=0 n_susp_pool_nf=0 n_reload=0
written=0 verified=0 rounds=0 snapverify=0

# One churn step; which one cycles, the thin and the range are random.
churn() {
	local t=$((RANDOM % 3 + 1)) off len id
	trace "round $round step $1 ($(($1 % 6))) thin$t"
	case $(($1 % 6)) in
	0)
		id=$next_id
		next_id=$((next_id + 1))
		snap pool $id $t thin$t
		snaps="$snaps $id"
		n_snap=$((n_snap + 1))
		# Keep at most three: delete the oldest.
		set -- $snaps
		if [ $# -gt 3 ]; then
			run dmsetup message pool 0 "delete $1"
			shift
			snaps="$*"
			n_del=$((n_del + 1))
		fi
		;;
	1)
		off=$((16 + RANDOM % 28)) len=$((1 + RANDOM % 4))
		put /dev/mapper/thin$t - D $((off * 1048576)) 1048576 $len
		run blkdiscard -o $((off * 1048576)) -l $((len * 1048576)) /dev/mapper/thin$t
		zeroes /dev/mapper/thin$t $off $len "discarded on thin$t" >/dev/null
		n_disc=$((n_disc + 1))
		;;
	2)
		run dmsetup suspend thin$t
		sleep 1
		run dmsetup resume thin$t
		n_susp_thin=$((n_susp_thin + 1))
		;;
	3)
		run dmsetup suspend --noflush thin$t
		sleep 1
		run dmsetup resume thin$t
		n_susp_thin_nf=$((n_susp_thin_nf + 1))
		;;
	4)
		if [ $((RANDOM % 2)) = 0 ]; then
			run dmsetup suspend pool
			n_susp_pool=$((n_susp_pool + 1))
		else
			run dmsetup suspend --noflush pool
			n_susp_pool_nf=$((n_susp_pool_nf + 1))
		fi
		sleep 1
		run dmsetup resume pool
		;;
	5)
		reload_pool pool $meta $data $POOL_SECTORS error_if_no_space
		n_reload=$((n_reload + 1))
		;;
	esac
}

# pool_ok WHEN: the pool is rw without needs_check.
pool_ok() {
	local s
	s=$(info pool)
	case $s in
	*" rw "*" error_if_no_space - "*) ;;
	*) fail "$1: pool status '$s', expected rw without needs_check" ;;
	esac
}

step=0 round=0
while [ "$(now)" -lt $end ] || [ $round = 0 ]; do
	round=$((round + 1))
	trace "round $round begins"
	# A snapshot of thin 1 as the previous round left it, verified while
	# this round overwrites the origin.
	# Each fio writes its exit status to /tmp/rc.NAME when it ends (polling
	# the pids would see zombies as alive).
	rm -f /tmp/rc.*
	jobs="1 2 3" pids=
	if [ $round -gt 1 ]; then
		snap pool 99 1 thin1
		mkthin snap99 pool 99 $((THIN_MIB * MB))
		(
			fio_round verify /dev/mapper/snap99 "$(seed $((round - 1)) 1)" /tmp/fio.snap
			echo $? >/tmp/rc.snap
		) &
		pids=$!
		jobs="$jobs snap"
	fi
	for t in 1 2 3; do
		(
			fio_round write /dev/mapper/thin$t "$(seed $round $t)"
			echo $? >/tmp/rc.$t
		) &
		pids="$pids $!"
	done
	# Churn while any fio of this round runs.
	while :; do
		busy=0
		for j in $jobs; do [ -f /tmp/rc.$j ] || busy=1; done
		[ $busy = 1 ] || break
		churn $step
		step=$((step + 1))
		sleep 1
	done
	wait $pids
	for t in 1 2 3; do
		o=/tmp/fio.$(seed $round $t).write
		[ "$(cat /tmp/rc.$t)" = 0 ] || {
			cat "$o"
			fail "round $round: fio on thin$t failed (seed $(seed $round $t))"
		}
		k=$(written_kib "$o")
		written=$((written + k))
		verified=$((verified + k))
	done
	if [ $round -gt 1 ]; then
		[ "$(cat /tmp/rc.snap)" = 0 ] || {
			cat /tmp/fio.snap
			fail "round $round: the snapshot of thin1 lost round $((round - 1))'s data"
		}
		snapverify=$((snapverify + 1))
		run dmsetup remove snap99
		run dmsetup message pool 0 "delete 99"
	fi
	pool_ok "round $round"
	rounds=$round
	echo "round $round: $((written / 1024)) MiB written so far; snapshots $n_snap (deleted $n_del), discards $n_disc, suspends thin $n_susp_thin+$n_susp_thin_nf noflush, pool $n_susp_pool+$n_susp_pool_nf noflush, reloads $n_reload; $(info pool)"
done
pool_ok "the end"
kill $watchdog
echo "churn done: $(dmsetup ls | wc -l) dm devices; live snapshots:$snaps"

# Deactivate, check the metadata, reactivate: the last round's data (and
# the snapshots' metadata) must have survived.
for t in 1 2 3; do run dmsetup remove thin$t; done
run dmsetup remove pool
check_meta $meta
openpool pool $meta $data $POOL_SECTORS error_if_no_space
pool_ok "reactivated"
for t in 1 2 3; do
	mkthin thin$t pool $t $((THIN_MIB * MB))
	o=/tmp/fio.final.$t
	fio_round verify /dev/mapper/thin$t "$(seed $rounds $t)" $o || {
		cat $o
		fail "after reactivation: thin$t lost round $rounds's data"
	}
	verified=$((verified + $(written_kib /tmp/fio.$(seed $rounds $t).write)))
done
echo "soak: $rounds rounds in $((SECONDS_WANTED + $(now) - end)) s; fio wrote $((written / 1024)) MiB, verified $((verified / 1024)) MiB" \
	"(each round's writes after the round, the last round's again after reactivation)," \
	"$snapverify snapshots of thin1 verified under overwrite; snapshots created $n_snap + $snapverify, deleted $n_del + $snapverify;" \
	"discards $n_disc; suspends: thin $n_susp_thin, thin --noflush $n_susp_thin_nf, pool $n_susp_pool, pool --noflush $n_susp_pool_nf; pool reloads $n_reload;" \
	"thin_check clean"
