# SPDX-License-Identifier: GPL-2.0
# The cost of `rthinctl ls` with many thin devices, against `dmsetup status`
# over the same devices (both read every device; rthinctl uses one table and
# one no-flush status ioctl per device plus one list).
# In `make check`: 200 devices and a loose 3x bound, which catches a cost that
# grows faster than the device count without flaking under emulation.
# The bound, 1000 devices within 1.5x (about 4 minutes):
#   RTHIN_ONLY=rthinctl-scale RTHIN_VM_ENV="RTHINCTL_SCALE_N=1000 RTHINCTL_SCALE_BOUND=1.5" make check
. /rthin/tests/lib.sh

N=${RTHINCTL_SCALE_N:-200}
BOUND=${RTHINCTL_SCALE_BOUND:-3}
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
# elapsed CMD...: seconds CMD took (10 ms resolution).
elapsed() {
	s=$(now)
	"$@" >/dev/null || fail "$* failed"
	e=$(now)
	awk "BEGIN { print $e - $s }"
}
min() { awk "BEGIN { print ($1 < $2) ? $1 : $2 }"; }
# Interleaved runs, best of five each: both commands see the same load (the
# VM is emulated and shares the host), and the minimum is the least noisy.
d=999 r=999
for i in 1 2 3 4 5; do
	d=$(min "$d" "$(elapsed dmsetup status)")
	r=$(min "$r" "$(elapsed rthinctl ls)")
done
echo "devices: $((N + 1)); dmsetup status: ${d}s; rthinctl ls: ${r}s (best of 5, interleaved)"
awk "BEGIN { exit !($r <= $BOUND * $d + 0.02) }" || fail "rthinctl ls took ${r}s, more than ${BOUND}x dmsetup status (${d}s)"
