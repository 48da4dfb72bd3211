# SPDX-License-Identifier: GPL-2.0
# Helpers for the VM tests (busybox sh). Each test is a script that exits 0 on
# success; `fail` explains what went wrong and exits 1. The runner removes
# every dm device after each test.
set -u

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# run CMD...: runs a command and fails the test if it fails.
run() {
	"$@" || fail "command failed ($?): $*"
}

# expect_error "MESSAGE" CMD...: CMD must fail and its output must contain MESSAGE.
expect_error() {
	local want=$1 out
	shift
	if out=$("$@" 2>&1); then
		fail "expected failure with '$want', but it succeeded: $*"
	fi
	case $out in
	*"$want"*) ;;
	*) fail "expected '$want' from: $* ; got: $out" ;;
	esac
	# dm logs the target's constructor message in the kernel log too.
	return 0
}

# expect_rc CODE TEXT CMD...: CMD must exit with CODE and print TEXT; the
# output is echoed, indented, for the log.
expect_rc() {
	want_rc=$1 want=$2
	shift 2
	out=$("$@" 2>&1)
	got=$?
	[ "$got" = "$want_rc" ] || fail "expected exit $want_rc from: $* ; got $got: $out"
	case $out in
	*"$want"*) ;;
	*) fail "expected '$want' from: $* ; got: $out" ;;
	esac
	echo "ok ($got): $*"
	[ -z "$out" ] || echo "$out" | sed 's/^/    /'
}

# expect_dmesg "TEXT": the kernel log must contain TEXT.
expect_dmesg() {
	dmesg | grep -qF "$1" || fail "kernel log lacks '$1'"
}

# sectors DEV: size of a block device in 512-byte sectors.
sectors() {
	blockdev --getsz "$1"
}

# wipe DEV: zeroes the first MiB (old metadata must not leak between tests).
wipe() {
	dd if=/dev/zero of="$1" bs=1M count=1 conv=fsync 2>/dev/null
}
