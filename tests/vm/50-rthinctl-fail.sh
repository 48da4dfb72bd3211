# SPDX-License-Identifier: GPL-2.0
# rthinctl on a pool in FAIL mode, for rthin-pool and the C thin-pool: the
# metadata device (dm-flakey over a RAM disk, as in 28-faults.sh) fails
# reads and writes, the next commit fails, and the pool's and thin's status
# read "Fail". Then `status` shows FAIL, `status --check` is CRITICAL (exit
# 2), `ls` still lists the thin under its pool (found through the thin's
# dependencies, as its table reads "Fail" too), `--json` gives state "fail"
# with unknown numbers (and the thin's id) as null, `--raw` marks the thin "fail", and messages
# are refused before sending with the repair steps.
. /rthin/tests/lib.sh

modprobe dm-flakey || fail "modprobe dm-flakey"
msize=$(sectors /dev/ram0)
data=/dev/ram1
size=$(sectors $data)

# flakey_meta up|down: the metadata device works, or fails every read and write.
flakey_meta() {
	if [ "$1" = up ]; then
		swap_table fmeta "0 $msize flakey /dev/ram0 0 1 0"
	else
		swap_table fmeta "0 $msize flakey /dev/ram0 0 0 1 2 error_reads error_writes"
	fi
}

fail_mode() {
	wipe /dev/ram0
	run dmsetup create fmeta --table "0 $msize flakey /dev/ram0 0 1 0"
	openpool fpool /dev/mapper/fmeta $data $size
	run dmsetup message fpool 0 "create_thin 1"
	mkthin fthin fpool 1 131072
	run dd if=/dev/urandom of=/dev/mapper/fthin bs=64k count=4 oflag=direct 2>/dev/null
	expect_rc 0 "OK: 1 thin pool healthy (fpool data " rthinctl status --check fpool

	flakey_meta down
	# A new block and an INFO status (which commits): the commit fails and,
	# as the rollback cannot read the metadata either, the pool fails.
	dd if=/dev/urandom of=/dev/mapper/fthin bs=64k seek=10 count=1 oflag=direct 2>/dev/null
	dmsetup status fpool >/dev/null
	s=$(info fpool)
	echo "dmsetup status fpool: $s; fthin: $(info fthin); table fthin: $(dmsetup table fthin)"
	[ "$s" = Fail ] || fail "the pool is not in FAIL mode: $s"

	expect_rc 0 "FAIL" rthinctl status
	case $out in *fpool*FAIL*) ;; *) fail "status does not show fpool as FAIL: $out" ;; esac
	case $out in *fthin*fpool*) ;; *) fail "status does not show fthin under fpool: $out" ;; esac
	expect_rc 2 "CRITICAL: fpool: pool has failed (status Fail)" rthinctl status --check
	case $out in *"fthin: thin failed"*) ;; *) fail "status --check does not name the failed thin: $out" ;; esac
	expect_rc 2 "CRITICAL" rthinctl --json status --check fpool
	case $out in *'"level": "CRITICAL"'*'"exit": 2'*) ;; *) fail "JSON check: $out" ;; esac
	expect_rc 0 "fthin" rthinctl ls fpool
	[ "$(echo "$out" | grep -c FAIL)" = 1 ] || fail "ls shows no FAIL pool row: $out"
	[ "$(echo "$out" | grep -c 'fthin.*fail')" = 1 ] || fail "ls shows no failed fthin row: $out"
	expect_rc 0 '"state": "fail"' rthinctl --json status fpool
	case $out in *'"transaction_id": null'*'"data": null'*'"needs_check": null'*) ;; *) fail "JSON of a failed pool: $out" ;; esac
	# The thin's id is unknown: its table reads "Fail".
	case $out in *'"name": "fthin"'*'"pool": "fpool"'*'"dev_id": null'*'"state": "fail"'*'"mapped_bytes": null'*) ;; *) fail "JSON of a failed thin: $out" ;; esac
	expect_rc 0 "fthin:fpool:-:67108864:-:-:-:fail" rthinctl --raw status fthin
	expect_rc 1 "not sent: the pool is in FAIL mode (status Fail)" rthinctl create-thin fpool --id 2
	# The raw message reaches the kernel, which refuses it (EOPNOTSUPP).
	expect_rc 1 "pool fpool refuses all messages" rthinctl message fpool create_thin 2

	flakey_meta up
	run dmsetup remove fthin
	run dmsetup remove fpool
	run dmsetup remove fmeta
}

for impl in c rthin; do
	use_impl $impl
	echo "==== $POOL_T"
	fail_mode
done
