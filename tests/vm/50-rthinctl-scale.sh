# SPDX-License-Identifier: GPL-2.0
# Issue 5's cost bound: with 1000 thin devices active on one pool,
# `rthinctl ls` takes at most 1.5x the time of `dmsetup status` over the same
# devices (both read every device; rthinctl uses one table and one no-flush
# status ioctl per device plus one list).
. /rthin/tests/lib.sh

N=${RTHINCTL_SCALE_N:-1000}
run modprobe dm-thin-pool
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0 0"
i=1
while [ $i -le $N ]; do
	dmsetup message cpool 0 "create_thin $i" || fail "create_thin $i"
	dmsetup create "t$i" --table "0 2048 thin /dev/mapper/cpool $i" || fail "create t$i"
	i=$((i + 1))
done
n=$(rthinctl --raw ls cpool | grep -c ':thin:')
[ "$n" = "$N" ] || fail "rthinctl ls shows $n thins, want $N"

now() { cut -d' ' -f1 /proc/uptime; }
# Best of three runs each, to damp TCG noise.
best() {
	b=
	for r in 1 2 3; do
		s=$(now)
		"$@" >/dev/null || fail "$* failed"
		e=$(now)
		t=$(awk "BEGIN { print $e - $s }")
		if [ -z "$b" ] || awk "BEGIN { exit !($t < $b) }"; then b=$t; fi
	done
	echo "$b"
}
d=$(best dmsetup status)
r=$(best rthinctl ls)
echo "devices: $((N + 1)); dmsetup status: ${d}s; rthinctl ls: ${r}s"
awk "BEGIN { exit !($r <= 1.5 * $d + 0.02) }" || fail "rthinctl ls took ${r}s, more than 1.5x dmsetup status (${d}s)"
