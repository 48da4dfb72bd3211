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
