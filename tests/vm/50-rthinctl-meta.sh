# SPDX-License-Identifier: GPL-2.0
# rthinctl meta check|dump|ls on the metadata of a deactivated C dm-thin
# pool agree with thin_check and thin_dump (mappings compared block by
# block), including a held metadata snapshot, a leaked data block (left by
# a failed write to the data device) and damaged metadata: meta check's
# exit status is thin_check's on each image, with and without
# --ignore-non-fatal-errors.
. /rthin/tests/lib.sh

# agree ok|bad [OPTION]: thin_check and rthinctl meta check (with OPTION)
# must both pass (exit 0) or both fail on $meta; prints both outputs. The
# failure codes differ: thin_check 1.x exits 64, rthinctl 1 (its table).
agree() {
	local want=$1 tc rc
	shift
	thin_check "$@" $meta >/tmp/tc.out 2>&1
	tc=$?
	echo "\$ thin_check $* $meta  (exit $tc)"
	sed 's/^/    /' /tmp/tc.out
	rthinctl meta check "$@" $meta >/tmp/rc.out 2>&1
	rc=$?
	echo "\$ rthinctl meta check $* $meta  (exit $rc)"
	sed 's/^/    /' /tmp/rc.out
	if [ $want = ok ]; then
		[ $tc = 0 ] || fail "thin_check $* exited $tc, expected 0"
		[ $rc = 0 ] || fail "rthinctl meta check $* exited $rc, expected 0"
	else
		[ $tc != 0 ] || fail "thin_check $* passed, expected a failure"
		[ $rc = 1 ] || fail "rthinctl meta check $* exited $rc, expected 1 (thin_check: $tc)"
	fi
}

# norm: thin_dump XML -> one line per superblock, device and mapped block.
norm() {
	awk '
	function a(n,   s) {
		if (!match($0, n "=\"[^\"]*\"")) return "-"
		s = substr($0, RSTART + length(n) + 2, RLENGTH - length(n) - 3)
		return s
	}
	/<superblock/ { print "sb", a("time"), a("transaction"), a("data_block_size"), a("nr_data_blocks") }
	/<device / { dev = a("dev_id"); print "dev", dev, a("mapped_blocks"), a("transaction"), a("creation_time"), a("snap_time") }
	/<single_mapping/ { print "map", dev, a("origin_block"), a("data_block"), a("time") }
	/<range_mapping/ {
		o = a("origin_begin") + 0; d = a("data_begin") + 0; n = a("length") + 0; t = a("time")
		for (i = 0; i < n; i++) print "map", dev, o + i, d + i, t
	}' "$1"
}

run modprobe dm-thin-pool
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0 1 skip_block_zeroing"
run rthinctl create-thin cpool --id 1
run rthinctl create-thin cpool --id 7
run dmsetup create thin1 --table "0 65536 thin /dev/mapper/cpool 1"
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=20 conv=fsync 2>/dev/null
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=3 seek=100 conv=fsync 2>/dev/null
run rthinctl create-snap cpool --id 2 --origin 1
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=2 seek=5 conv=fsync 2>/dev/null
run rthinctl set-transaction-id cpool --bump
run rthinctl metadata-snap reserve cpool
run dmsetup remove thin1
run dmsetup remove cpool

agree ok
case $(cat /tmp/rc.out) in *"metadata ok: 3 devices, transaction 1"*"reference counts agree"*) ;; *) fail "meta check: $(cat /tmp/rc.out)" ;; esac
rthinctl meta dump $meta >/tmp/r.xml || fail "meta dump failed"
echo "\$ rthinctl meta dump $meta  (first lines of $(wc -l </tmp/r.xml))"
head -6 /tmp/r.xml | sed 's/^/    /'
thin_dump $meta >/tmp/c.xml || fail "thin_dump failed"
norm /tmp/r.xml >/tmp/r.txt
norm /tmp/c.xml >/tmp/c.txt
wc -l /tmp/r.txt /tmp/c.txt
grep -q '^map 2 ' /tmp/c.txt || fail "thin_dump shows no mappings for the snapshot"
diff /tmp/c.txt /tmp/r.txt || fail "rthinctl meta dump disagrees with thin_dump"
[ "$(grep -c '^map 1 ' /tmp/c.txt)" = 23 ] || fail "expected 23 mappings of thin 1 in thin_dump"
# The XML itself is thin_dump's, byte for byte (thin_dump ends without a newline).
{
	cat /tmp/c.xml
	echo
} >/tmp/c2.xml
diff /tmp/c2.xml /tmp/r.xml || fail "rthinctl meta dump XML differs from thin_dump's"
out=$(rthinctl meta ls $meta) || fail "meta ls failed"
echo "\$ rthinctl meta ls $meta"
echo "$out" | sed 's/^/    /'
[ "$(echo "$out" | grep -c '^ *[0-9]')" = 3 ] || fail "meta ls lists: $out"
out=$(rthinctl --json meta ls $meta) || fail "meta ls --json failed"
case $out in *'"held_metadata_root": '[0-9]*) ;; *) fail "held root not shown: $out" ;; esac

# A leak: a write of a whole block to an unmapped place fails on the data
# device (dm-flakey); dm-thin has allocated the block, does not map it and
# does not free it, and the next commit stores the leak.
modprobe dm-flakey || fail "modprobe dm-flakey"
wipe $meta
run dmsetup create fdata --table "0 $size flakey $data 0 1 0"
run dmsetup create lpool --table "0 $size thin-pool $meta /dev/mapper/fdata 128 0 0"
run dmsetup message lpool 0 "create_thin 1"
run dmsetup create lthin --table "0 65536 thin /dev/mapper/lpool 1"
run dd if=/dev/urandom of=/dev/mapper/lthin bs=64k count=2 oflag=direct 2>/dev/null
run dmsetup load fdata --table "0 $size flakey $data 0 0 1 1 error_writes"
run dmsetup suspend fdata
run dmsetup resume fdata
dd if=/dev/urandom of=/dev/mapper/lthin bs=64k seek=5 count=1 oflag=direct 2>/dev/null &&
	fail "a write through the failing data device succeeded"
run dmsetup load fdata --table "0 $size flakey $data 0 1 0"
run dmsetup suspend fdata
run dmsetup resume fdata
echo "after the failed write: $(dmsetup status lpool)"
run dmsetup remove lthin
run dmsetup remove lpool
run dmsetup remove fdata
agree bad
grep -q "1 data blocks have leaked" /tmp/tc.out || fail "thin_check does not report one leaked data block"
grep -q "1 data block has leaked" /tmp/rc.out || fail "rthinctl does not report one leaked data block"
agree ok --ignore-non-fatal-errors
grep -q "warning: .*1 data block has leaked" /tmp/rc.out || fail "rthinctl does not warn of the accepted leak"

# Damage: both tools must refuse a broken superblock checksum, also with
# --ignore-non-fatal-errors.
dd if=/dev/urandom of=$meta bs=1 count=16 seek=200 conv=notrunc 2>/dev/null
agree bad
grep -q damaged /tmp/rc.out || fail "meta check: $(cat /tmp/rc.out)"
agree bad --ignore-non-fatal-errors
wipe $meta
out=$(rthinctl meta dump $meta 2>&1) && fail "meta dump of a wiped device succeeded"
case $out in *"holds no thin metadata"*) ;; *) fail "meta dump: $out" ;; esac
