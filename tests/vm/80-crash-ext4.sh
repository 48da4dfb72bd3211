# SPDX-License-Identifier: GPL-2.0
# Crash consistency of ext4 on a thin (issue 7): mkfs.ext4 and a seeded
# churn of creates, overwrites (some fsynced), appends, renames, unlinks,
# mkdir and rmdir, with sync, a manifest (md5 of every file) and a log mark
# after every step, on a pool logged by dm-log-writes (lib.sh crash_*). The
# log is replayed to every FLUSH, FUA and mark entry and CRASH_RANDOM random
# entries; at each point thin_check passes, the pool activates, the ext4
# mounts (replaying its journal), every file of the last mark's manifest that
# the next step does not touch has its content (at a mark itself: exactly the
# manifest's files), and after unmounting e2fsck -fn finds nothing.
# Opt-in: CRASH_POINTS=all, CRASH_STEPS=N, CRASH_SEED=N.
. /rthin/tests/lib.sh

SEED=${CRASH_SEED:-$(date +%s)}
STEPS=${CRASH_STEPS:-3}
OPS=12
RANDOM_POINTS=${CRASH_RANDOM:-5}
echo "seed $SEED, $STEPS steps of $OPS operations"
mnt=/mnt/crash
mkdir -p $mnt

use_impl rthin
crash_record
mkpool pool /dev/mapper/cmeta /dev/mapper/cdata $CRASH_DATA
run dmsetup message pool 0 "create_thin 1"
mkthin fs pool 1 65536
# Inode tables and journal written now, not by the kernel's lazy init later.
run mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 /dev/mapper/fs
run mount -t ext4 /dev/mapper/fs $mnt

# manifest K: the md5 of every file, at mark fK.
manifest() {
	(cd $mnt && find . -type f | sort | xargs -r md5sum) >/tmp/man.$1
}
awk -v s="$SEED" -v n=$((STEPS * OPS)) 'BEGIN { srand(s); for (i = 0; i < n; i++) print int(rand() * 2147483647) }' >/tmp/rand
# end_step: everything on disk, the manifest of mark f<step>, the mark.
step=0
end_step() {
	sync
	manifest $step
	crash_mark "f$step"
	step=$((step + 1))
}
mkdir $mnt/d0 $mnt/d1 $mnt/d2 $mnt/d3 || fail "mkdir"
end_step
i=0
while read -r r; do
	if [ $i -gt 0 ] && [ $((i % OPS)) = 0 ]; then end_step; fi
	i=$((i + 1))
	# The names step <step> touches: their content is unknown before its mark.
	t=/tmp/touched.$step
	f=d$((r % 4))/f$((r / 4 % 6))
	g=d$((r / 24 % 4))/f$((r / 96 % 6))
	echo "./$f" >>$t
	case $((r / 384 % 8)) in
	0 | 1) head -c $((r / 3072 % 40000 + 1)) /dev/urandom >$mnt/$f ;;
	2) head -c $((r / 3072 % 40000 + 1)) /dev/urandom | dd of=$mnt/$f conv=fsync 2>/dev/null ;;
	3) [ -f $mnt/$f ] && head -c 3000 /dev/urandom >>$mnt/$f ;;
	4) [ -f $mnt/$f ] && mv $mnt/$f $mnt/$g && echo "./$g" >>$t ;;
	5) rm -f $mnt/$f ;;
	6) mkdir -p $mnt/d$((r % 4))/s$((r / 4 % 3)) ;;
	7) rmdir $mnt/d$((r % 4))/s$((r / 4 % 3)) 2>/dev/null ;;
	esac
done </tmp/rand
end_step
run umount $mnt
run dmsetup remove fs
run dmsetup remove pool
crash_stop

# check_fs INDEX MARK exact|after
check_fs() {
	local k=${2#f} out
	crash_pool
	mkthin fs cpool 1 65536
	mount -t ext4 /dev/mapper/fs $mnt || fail "point $1 (after $2): mounting the ext4 failed"
	# Files the next step touches may hold anything ext4 allows; at the
	# mark itself the file list must be the manifest's too.
	if [ "$3" = exact ]; then
		cp /tmp/man.$k /tmp/stable
		(cd $mnt && find . -type f | sort) | cmp -s - /tmp/man.$k.files ||
			fail "point $1 (at $2): files differ from the manifest: $(cd $mnt && find . -type f | sort | tr '\n' ' ')"
	else
		grep -vF -f /tmp/touched.$((k + 1)) /tmp/man.$k >/tmp/stable
	fi
	# (md5sum -c refuses an empty list: no files yet at f0.)
	if [ -s /tmp/stable ]; then
		out=$(cd $mnt && md5sum -c /tmp/stable 2>&1) || fail "point $1 (after $2, $3): $out"
	fi
	run umount $mnt
	out=$(e2fsck -fn /dev/mapper/fs 2>&1) || fail "point $1 (after $2): e2fsck: $out"
	run dmsetup remove fs
	run dmsetup remove cpool
}
for m in /tmp/man.*; do awk '{ print $2 }' "$m" >"$m.files"; done
for s in $(seq 0 $step); do touch /tmp/touched.$s; done
if [ "${CRASH_POINTS:-}" = all ]; then
	run rthin-crashtest points $CRASH_LOG --start f0 --all >/tmp/points
else
	run rthin-crashtest points $CRASH_LOG --start f0 --random "$RANDOM_POINTS" --seed "$SEED" >/tmp/points
fi
crash_points check_fs /tmp/points
