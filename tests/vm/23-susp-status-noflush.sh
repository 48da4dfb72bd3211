# SPDX-License-Identifier: GPL-2.0
# `dmsetup status --noflush` of a pool answers while a provision is held
# below the pool (as LVM's lvs and monitoring read a pool whose data device
# sits on multipath queue_if_no_path with the paths down). The data device,
# a dm-linear, is suspended, then a 4 KiB write to an unprovisioned block of
# a thin starts a provision whose zeroing the suspended data device holds.
# The INFO status with noflush commits nothing, so it must not wait for
# that provision: dm-thin answers at once. After the data device resumes,
# the write completes and its data is there. On the C dm-thin and rthin.
. /rthin/tests/lib.sh

META=/dev/ram0 RAW=/dev/ram1

noflush_status() {
	run dmsetup create sdata --table "0 $(sectors $RAW) linear $RAW 0"
	mkpool pool $META /dev/mapper/sdata $(sectors $RAW)
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 65536
	run dmsetup suspend sdata
	pattern A
	dd if=/tmp/pat.A of=/dev/mapper/thin bs=4k count=1 seek=17 oflag=direct 2>/tmp/nf.w &
	writer=$!
	# The provision reaches the suspended data device (nothing shows it
	# from outside; the write cannot have finished).
	sleep 2
	exited $writer && fail "the write finished with the data device suspended: $(cat /tmp/nf.w)"
	start=$(date +%s)
	dmsetup status --noflush pool >/tmp/nf.s 2>&1 &
	status=$!
	if ! wait_for 20 exited $status; then
		# Unblock it (it cannot be killed) before failing.
		dmsetup resume sdata
		wait_for 60 exited $status
		fail "dmsetup status --noflush pool did not answer in 20 s while a provision was held below the pool"
	fi
	wait $status || fail "dmsetup status --noflush pool failed: $(cat /tmp/nf.s)"
	echo "ok: status --noflush answered in about $(($(date +%s) - start))s: $(cat /tmp/nf.s)"
	case $(cat /tmp/nf.s) in *" rw "*) ;; *) fail "noflush status: $(cat /tmp/nf.s)" ;; esac
	run dmsetup resume sdata
	wait_for 30 exited $writer || fail "the write still waits 30 s after the data device resumed"
	wait $writer || fail "the write failed: $(cat /tmp/nf.w)"
	got=$(dd if=/dev/mapper/thin bs=4k skip=17 count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$(dd if=/tmp/pat.A bs=4k count=1 2>/dev/null | md5sum)" ] || fail "the write's data is not there"
	echo "ok: the held write completed with its data"
	run dmsetup remove thin
	run dmsetup remove pool
	run dmsetup remove sdata
	check_meta $META
}

for_each_impl noflush_status
impl_verdict
