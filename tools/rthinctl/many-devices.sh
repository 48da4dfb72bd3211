#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The 1,000-thin table of Documentation/rthinctl.md ("Cost with many
# devices"): builds the module, rthinctl and the VM image, boots the test VM
# once and runs tests/vm/50-rthinctl-many.sh with MANY_N thin LVs (default
# 1000) and MANY_RUNS timed runs (default 5), on the C dm-thin and then on
# rthin; prints the test's tables (and exits non-zero if the test failed).
#
#   tools/rthinctl/many-devices.sh            (as root, like make vm-test)
#   MANY_N=200 MANY_RUNS=3 tools/rthinctl/many-devices.sh
#
# The VM's log is build/results-many/50-rthinctl-many.log (setup times,
# per-run times, ioctl counts by type).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
n=${MANY_N:-1000} runs=${MANY_RUNS:-5}
SELFTEST=1 scripts/module.sh >&2 || exit 2
cargo build --release -q -p rthinctl >&2 || exit 2
scripts/initramfs.sh build/initramfs-many.cpio.gz >&2 || exit 2
rc=0
scripts/vm.sh --only rthinctl-many --env "MANY_N=$n" --env "MANY_RUNS=$runs" \
	--test-timeout 5400 --timeout 6000 build/initramfs-many.cpio.gz build/results-many >&2 || rc=1
log=build/results-many/50-rthinctl-many.log
[ -f "$log" ] || { echo "no $log" >&2; exit 1; }
sed -n '/^## table$/,/^## end$/p' "$log" | sed '1d;$d'
grep '^FAIL' "$log" >&2 && rc=1
exit $rc
