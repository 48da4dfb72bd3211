# SPDX-License-Identifier: GPL-2.0
# Thin volumes served to another host over NVMe/TCP with the kernel's own
# target (nvmet, configured through configfs) and host (nvme-tcp, nvme-cli),
# as OpenStack Cinder's LVM driver serves them; target and initiator are the
# same VM, on 127.0.0.1. Two thin volumes of one pool are namespaces 1 and 2
# of one subsystem; the initiator writes them with fio (crc32c-verified)
# through /dev/nvmeXnY. Then, while fio writes the second half of volume 1
# in order, one 4 KiB write at a time, a snapshot of it is taken through the
# pool as LVM takes it (origin suspended around create_snap), activated and
# added to the live subsystem as namespace 3, and read through it:
#   - its first half, written before and untouched since, passes fio's verify
#     and is byte for byte what the origin held before;
#   - its second half is the new data up to one offset and the old data after
#     it (writes in order, one at a time: the suspend cuts the stream in
#     two), the offset at or past every write the initiator had seen
#     complete before the suspend (at least 1 MiB) and short of the end (fio
#     was still running);
# the origin and volume 2 pass fio's verify of everything written to them.
# Then the initiator disconnects, the subsystem is torn down, the pool is
# removed and thin_check passes. Runs on the C dm-thin and on rthin (both by
# default; RTHIN_TEST_IMPLS picks).
. /rthin/tests/lib.sh

RTHIN_TEST_IMPLS=${RTHIN_TEST_IMPLS:-c,rthin}
CFG=/sys/kernel/config/nvmet
NQN=nqn.2026-12.io.rthin:test-export
HOSTNQN=nqn.2026-12.io.rthin:test-initiator
PORT=1
VOL_MIB=32  # volume 1 (the origin): two halves of 16 MiB
VOL2_MIB=16 # volume 2
HALF=$((VOL_MIB / 2 * 1048576))

nvmeof_setup() {
	modprobe nvmet-tcp || fail "modprobe nvmet-tcp"
	modprobe nvme-tcp || fail "modprobe nvme-tcp"
	[ -d $CFG ] || mount -t configfs none /sys/kernel/config || fail "mounting configfs"
	[ -d $CFG ] || fail "no $CFG after loading nvmet"
	ip link set lo up || fail "bringing up lo"
}

# nvmeof_cleanup: disconnects the initiator and removes every nvmet port,
# subsystem and host, whatever state a failed run left them in.
nvmeof_cleanup() {
	local p s l n h
	nvme disconnect -n $NQN >/dev/null 2>&1
	for p in $CFG/ports/*; do
		[ -d "$p" ] || continue
		for l in "$p"/subsystems/*; do [ -L "$l" ] && rm -f "$l"; done
		rmdir "$p"
	done
	for s in $CFG/subsystems/*; do
		[ -d "$s" ] || continue
		for l in "$s"/allowed_hosts/*; do [ -L "$l" ] && rm -f "$l"; done
		for n in "$s"/namespaces/*; do
			[ -d "$n" ] || continue
			echo 0 >"$n/enable"
			rmdir "$n"
		done
		rmdir "$s"
	done
	for h in $CFG/hosts/*; do [ -d "$h" ] && rmdir "$h"; done
	return 0
}

# export_ns NSID DEV: DEV becomes namespace NSID of the subsystem.
export_ns() {
	local n=$CFG/subsystems/$NQN/namespaces/$1
	mkdir "$n" || fail "mkdir namespace $1"
	echo -n "$2" >"$n/device_path" || fail "namespace $1: device_path $2"
	echo 1 >"$n/enable" || fail "namespace $1: enabling it on $2 (dmesg: $(dmesg | grep nvmet | tail -3))"
	echo "ok: $2 exported as namespace $1 of $NQN"
}

# ns_dev NSID: the initiator's block device for namespace NSID of our
# controller, or nothing yet.
ns_dev() {
	local d
	for d in /sys/block/${CTRL}n*; do
		[ -f "$d/nsid" ] && [ "$(cat "$d/nsid")" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
	done
	return 1
}
has_ns() { ns_dev "$1" >/dev/null && [ -b "$(ns_dev "$1")" ]; }

# writes_kib DEV: KiB written to DEV so far (its /sys/block stat).
writes_kib() { awk '{ print int($7 / 2) }' "/sys/block/${1#/dev/}/stat"; }

# first_difference A B: the 1-based offset of the first byte where files A
# and B differ, or nothing when they are the same.
first_difference() {
	cmp "$1" "$2" 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "byte" || $i == "char") { sub(",", "", $(i + 1)); print $(i + 1) } }'
}
# rewrite_started: 1 MiB of the rewrite has gone through namespace 1 (n1, before_kib).
rewrite_started() { [ $(($(writes_kib "$n1") - before_kib)) -ge 1024 ]; }
# ctrl_gone: the controller's namespaces are gone from the initiator.
ctrl_gone() { ! ls /sys/block | grep -q "^${CTRL}n"; }

scenario() {
	local meta=/dev/ram0 data=/dev/ram1 s c n1 n2 n3 k out before_kib done_kib w1 w2
	nvmeof_setup
	mkpool pool $meta $data "$(sectors $data)"
	run dmsetup message pool 0 "create_thin 1"
	run dmsetup message pool 0 "create_thin 2"
	mkthin origin pool 1 $((VOL_MIB * 2048))
	mkthin vol2 pool 2 $((VOL2_MIB * 2048))

	# The target: one subsystem, open to one host NQN, on 127.0.0.1:4420.
	s=$CFG/subsystems/$NQN
	run mkdir "$s"
	echo 0 >"$s/attr_allow_any_host" || fail "attr_allow_any_host"
	run mkdir "$CFG/hosts/$HOSTNQN"
	run ln -s "$CFG/hosts/$HOSTNQN" "$s/allowed_hosts/$HOSTNQN"
	export_ns 1 /dev/mapper/origin
	export_ns 2 /dev/mapper/vol2
	run mkdir "$CFG/ports/$PORT"
	echo ipv4 >"$CFG/ports/$PORT/addr_adrfam" &&
		echo tcp >"$CFG/ports/$PORT/addr_trtype" &&
		echo 127.0.0.1 >"$CFG/ports/$PORT/addr_traddr" &&
		echo 4420 >"$CFG/ports/$PORT/addr_trsvcid" || fail "configuring port $PORT"
	run ln -s "$s" "$CFG/ports/$PORT/subsystems/$NQN"

	# The initiator.
	out=$(nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN --hostnqn=$HOSTNQN 2>&1) ||
		fail "nvme connect: $out (dmesg: $(dmesg | grep -i nvme | tail -5 | tr '\n' ' '))"
	echo "ok: nvme connect: $out"
	CTRL=
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = $NQN ] && CTRL=${c##*/}
	done
	[ -n "$CTRL" ] || fail "no controller for $NQN after nvme connect: $(ls /sys/class/nvme)"
	[ "$(cat /sys/class/nvme/$CTRL/transport)" = tcp ] || fail "$CTRL is not NVMe/TCP"
	wait_for 20 has_ns 1 && wait_for 20 has_ns 2 || fail "namespaces 1 and 2 did not appear on $CTRL: $(ls /sys/block)"
	n1=$(ns_dev 1) n2=$(ns_dev 2)
	echo "ok: $CTRL over tcp to 127.0.0.1:4420: namespace 1 is $n1, namespace 2 is $n2"
	nvme list 2>&1 | sed 's/^/    /'
	[ "$(sectors "$n1")" = $((VOL_MIB * 2048)) ] || fail "$n1 has $(sectors "$n1") sectors, the volume $((VOL_MIB * 2048))"
	[ "$(sectors "$n2")" = $((VOL2_MIB * 2048)) ] || fail "$n2 has $(sectors "$n2") sectors, the volume $((VOL2_MIB * 2048))"

	# Both volumes written through the initiator at once, libaio at queue
	# depth 16 (4 KiB random writes, read back and verified at the end).
	fio_write a1 "$n1" 0 $HALF 4k randwrite 11 --ioengine=libaio --iodepth=16 &
	w1=$!
	fio_write v2 "$n2" 0 $((VOL2_MIB * 1048576)) 4k randwrite 21 --ioengine=libaio --iodepth=16 &
	w2=$!
	wait $w1 || fail "the writes of volume 1's first half through $n1"
	wait $w2 || fail "the writes of volume 2 through $n2"
	fio_write b1 "$n1" $HALF $HALF 64k write 12 --ioengine=libaio --iodepth=8
	[ "$(data_used pool)" -ge $(((VOL_MIB + VOL2_MIB) * 16)) ] ||
		fail "the pool provisioned $(data_used pool) blocks for $((VOL_MIB + VOL2_MIB)) MiB written"
	echo "ok: the pool provisioned $(data_used pool) blocks of 64 KiB"
	# What the volume holds before the snapshot. (fio's verify checks that
	# each block is one fio wrote for its offset, not which run wrote it: the
	# snapshot's content is compared byte for byte.)
	dd if="$n1" of=/tmp/first bs=1M count=$((VOL_MIB / 2)) iflag=direct 2>/dev/null ||
		fail "reading the first half of $n1"
	dd if="$n1" of=/tmp/before bs=1M skip=$((VOL_MIB / 2)) count=$((VOL_MIB / 2)) iflag=direct 2>/dev/null ||
		fail "reading the second half of $n1"

	# The second half rewritten in order, one 4 KiB write at a time (at most
	# 2 MiB/s: still running when the snapshot comes), while the snapshot is
	# taken once 1 MiB of it has gone through.
	before_kib=$(writes_kib "$n1")
	rm -f /tmp/b2.rc
	(
		(fio_write b2 "$n1" $HALF $HALF 4k write 13 --rate=2m)
		echo $? >/tmp/b2.rc
	) >/tmp/b2.log 2>&1 &
	wait_for 60 rewrite_started ||
		fail "fio's writes through $n1 did not start: $(cat /tmp/b2.log)"
	[ -e /tmp/b2.rc ] && fail "fio ended before the snapshot: $(cat /tmp/b2.log)"
	# Every write the initiator saw complete before the suspend must be in
	# the snapshot.
	done_kib=$(($(writes_kib "$n1") - before_kib))
	snap pool 3 1 origin
	echo "ok: snapshot 3 of volume 1 taken (suspend, create_snap, resume); $done_kib KiB of the rewrite had completed before"
	mkthin snap pool 3 $((VOL_MIB * 2048))
	export_ns 3 /dev/mapper/snap
	# The target tells the initiator (an asynchronous event: namespace list
	# changed), which rescans.
	wait_for 30 has_ns 3 || fail "namespace 3 did not appear on $CTRL: $(ls /sys/block)"
	n3=$(ns_dev 3)
	echo "ok: the snapshot appeared on the initiator as $n3"
	wait_for 120 test -e /tmp/b2.rc || fail "fio's rewrite did not end in 120 s: $(cat /tmp/b2.log)"
	cat /tmp/b2.log
	[ "$(cat /tmp/b2.rc)" = 0 ] || fail "fio's rewrite through $n1 during the snapshot"

	# What each namespace holds.
	fio_verify a1 "$n1" 0 $HALF 4k randwrite 11 --ioengine=libaio --iodepth=16
	fio_verify b2 "$n1" $HALF $HALF 4k write 13
	fio_verify v2 "$n2" 0 $((VOL2_MIB * 1048576)) 4k randwrite 21 --ioengine=libaio --iodepth=16
	fio_verify a1 "$n3" 0 $HALF 4k randwrite 11 --ioengine=libaio --iodepth=16
	same "$n3" /tmp/first "the snapshot's first half, read through $n3, is the origin's from before the snapshot"
	same "$n1" /tmp/first "the origin's first half is unchanged"
	dd if="$n1" of=/tmp/after bs=1M skip=$((VOL_MIB / 2)) count=$((VOL_MIB / 2)) iflag=direct 2>/dev/null ||
		fail "reading the second half of $n1"
	dd if="$n3" of=/tmp/snap bs=1M skip=$((VOL_MIB / 2)) count=$((VOL_MIB / 2)) iflag=direct 2>/dev/null ||
		fail "reading the second half of the snapshot through $n3"
	# k: the first byte where the snapshot differs from the new data.
	k=$(first_difference /tmp/snap /tmp/after)
	[ -n "$k" ] || fail "the snapshot's second half holds all of the rewrite: it was taken after the writes"
	k=$((k - 1))
	[ "$k" -ge $((done_kib * 1024)) ] ||
		fail "the snapshot holds only the rewrite's first $k bytes, though $((done_kib * 1024)) had completed on the initiator before the suspend"
	cmp /tmp/snap /tmp/before "$k" "$k" >/dev/null 2>&1 ||
		fail "the snapshot's second half is neither the new data up to byte $k nor the old data after it: $(cmp /tmp/snap /tmp/before "$k" "$k" 2>&1)"
	echo "ok: the snapshot holds the rewrite's first $k bytes and the old data after them (read through $n3)"
	rm -f /tmp/first /tmp/before /tmp/after /tmp/snap

	# The initiator leaves, the target is torn down, then the pool.
	out=$(nvme disconnect -n $NQN 2>&1) || fail "nvme disconnect: $out"
	case $out in *"disconnected 1 controller"*) ;; *) fail "nvme disconnect: $out" ;; esac
	echo "ok: nvme disconnect: $out"
	wait_for 20 ctrl_gone || fail "$CTRL's namespaces still there after the disconnect"
	nvmeof_cleanup
	[ -z "$(ls $CFG/subsystems)$(ls $CFG/ports)" ] ||
		fail "nvmet configuration left behind: subsystems '$(ls $CFG/subsystems)', ports '$(ls $CFG/ports)'"
	run dmsetup remove snap
	run dmsetup remove vol2
	run dmsetup remove origin
	run dmsetup remove pool
	check_meta $meta
}

# export_case: the scenario in a subshell of its own, so that whatever it
# leaves (an exported namespace holds its dm device open) is cleaned up
# before the next implementation's run.
export_case() {
	local rc=0
	(scenario) || rc=1
	nvmeof_cleanup
	return $rc
}

for_each_impl export_case
impl_verdict
