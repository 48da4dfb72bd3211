# SPDX-License-Identifier: GPL-2.0
# The module loaded and registered both targets under rthin's own names.
. /rthin/tests/lib.sh

targets=$(dmsetup targets) || fail "dmsetup targets failed"
echo "$targets"
echo "$targets" | grep -q '^rthin-pool ' || fail "rthin-pool is not registered"
echo "$targets" | grep -q '^rthin ' || fail "rthin is not registered"
echo "$targets" | grep -q '^thin-pool ' && fail "thin-pool must not be registered by default"
grep -q '^dm_rthin ' /proc/modules || fail "dm_rthin is not in /proc/modules"
expect_dmesg "registered targets rthin-pool and rthin"

# The VM runs the vCPUs it was given (per-CPU deferred lists need them).
want=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^rthin.cpus=//p')
got=$(grep -c ^processor /proc/cpuinfo)
[ -n "$want" ] || fail "scripts/vm.sh did not pass rthin.cpus on the kernel command line"
[ "$got" = "$want" ] || fail "the guest sees $got CPUs, QEMU was given $want"
echo "$got CPUs"
