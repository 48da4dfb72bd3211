# SPDX-License-Identifier: GPL-2.0
# Metadata device faults (dm-flakey under the metadata device). A commit
# whose writes fail puts the pool in read-only mode with needs_check (J63):
# provisioning fails with EIO, mapped blocks still take writes, the flag
# survives reactivation and thin_check --clear-needs-check-flag clears it.
# With reads failing too, the rollback fails and the pool enters FAIL mode
# (D32): pool status, thin status and thin table read "Fail", I/O fails,
# new thins are refused. The kernel log must stay free of oopses (the
# harness checks it).
. /rthin/tests/lib.sh

use_impl rthin
modprobe dm-flakey || fail "modprobe dm-flakey"
data=/dev/ram1
size=$(sectors $data)
msize=$(sectors /dev/ram0)
# bad WHY: a failed check that does not stop the test (it fails at the end).
failed=0
bad() {
	echo "FAIL: $*" >&2
	failed=$((failed + 1))
}
word() { dmsetup status "$1" | awk -v n="$2" '{ print $n }'; }
# fault FEATURES...: the metadata device fails as flakey's features say
# (always "down"); no argument: always up.
fault() {
	if [ $# = 0 ]; then
		t="0 $msize flakey /dev/ram0 0 1 0"
	else
		t="0 $msize flakey /dev/ram0 0 0 1 $# $*"
	fi
	swap_table fmeta "$t"
}
meta=/dev/mapper/fmeta
setup() {
	wipe /dev/ram0
	run dmsetup create fmeta --table "0 $msize flakey /dev/ram0 0 1 0"
	openpool pool $meta $data $size
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 131072
	run dd if=/dev/urandom of=/tmp/a bs=64k count=4 2>/dev/null
	run dd if=/tmp/a of=/dev/mapper/thin bs=64k oflag=direct 2>/dev/null
	run dmsetup status pool >/dev/null # commits
}
pool_dev() { dmsetup info -c --noheadings -o major,minor pool | tr -d ' '; }

# --- J63: metadata writes fail.
setup
fault error_writes
# A new block, then an INFO status: its commit fails.
dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=10 count=1 oflag=direct 2>/dev/null
dmsetup status pool >/dev/null
s=$(dmsetup status pool)
echo "after the failed commit: $s"
expect_dmesg "metadata operation 'dm_pool_commit_metadata' failed"
case $s in
*" ro "*" needs_check "*) echo "J63: ro with needs_check" ;;
*) bad "J63: expected 'ro ... needs_check' after a metadata write error (dm-thin sets needs_check in place, no write), got: $s" ;;
esac
if out=$(dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=11 count=1 oflag=direct 2>&1); then
	bad "J63: a provisioning write succeeded after the metadata failure"
else
	case $out in *"Input/output error"*) ;; *) bad "J63: expected EIO for a provisioning write, got: $out" ;; esac
fi
dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=2 count=1 oflag=direct 2>/dev/null ||
	bad "J63: a write to a mapped unshared block failed in read-only mode"
got=$(dd if=/dev/mapper/thin bs=64k count=2 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(dd if=/tmp/a bs=64k count=2 2>/dev/null | md5sum)" ] || bad "J63: mapped reads fail"
# Remove the fault, deactivate, reactivate: still read-only with needs_check.
fault
run dmsetup remove thin
run dmsetup remove pool
openpool pool $meta $data $size
s=$(dmsetup status pool)
echo "reactivated: $s"
case $s in *" ro "*" needs_check "*) ;; *) bad "J63: reactivation after the fault: $s" ;; esac
run dmsetup remove pool
run dmsetup remove fmeta
thin_check --clear-needs-check-flag /dev/ram0 || bad "J63: thin_check --clear-needs-check-flag failed"
openpool pool /dev/ram0 $data $size
s=$(dmsetup status pool)
echo "after thin_check --clear-needs-check-flag: $s"
case $s in *" rw "*" - "*) ;; *) bad "J63: after clearing needs_check: $s" ;; esac
mkthin thin pool 1 131072
# Blocks 0-3 as committed, with block 2 rewritten (from /tmp/a's block 0)
# in read-only mode.
cp /tmp/a /tmp/a2
dd if=/tmp/a of=/tmp/a2 bs=64k seek=2 count=1 conv=notrunc 2>/dev/null
got=$(dd if=/dev/mapper/thin bs=64k count=4 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a2)" ] || bad "J63: committed data lost"
run dmsetup remove thin
run dmsetup remove pool

# --- D32: metadata reads and writes fail: FAIL mode.
setup
fault error_reads error_writes
dd if=/tmp/a of=/dev/mapper/thin bs=64k seek=10 count=1 oflag=direct 2>/dev/null
dmsetup status pool >/dev/null
s=$(dmsetup status pool)
echo "pool: $s"
[ "$s" = "0 $size rthin-pool Fail" ] || bad "D32: pool status '$s', want Fail"
s=$(dmsetup status thin)
[ "$s" = "0 131072 rthin Fail" ] || bad "D32: thin status '$s', want Fail"
s=$(dmsetup table thin)
[ "$s" = "0 131072 rthin Fail" ] || bad "D32: thin table '$s', want Fail"
if out=$(dd if=/dev/mapper/thin of=/dev/null bs=64k count=1 iflag=direct 2>&1); then
	bad "D32: a read of a mapped block succeeded in FAIL mode"
fi
if out=$(dd if=/tmp/a of=/dev/mapper/thin bs=64k count=1 oflag=direct 2>&1); then
	bad "D32: a write succeeded in FAIL mode"
fi
expect_error "Operation not supported" dmsetup message pool 0 "create_thin 2"
expect_error "Invalid argument" dmsetup create thin2 --table "0 2048 rthin $(pool_dev) 1"
dmsetup remove thin2 2>/dev/null
fault
run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove fmeta
[ $failed = 0 ] || fail "$failed checks failed"
