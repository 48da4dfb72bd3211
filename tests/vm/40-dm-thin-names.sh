# SPDX-License-Identifier: GPL-2.0
# dm_thin_names=1 registers rthin as thin-pool/thin (for LVM2), and refuses
# to load while the C dm-thin holds those names.
. /rthin/tests/lib.sh

run rmmod dm_rthin
modprobe dm-thin-pool
out=$(insmod /rthin/dm-rthin.ko dm_thin_names=1 2>&1) && fail "loaded despite dm-thin-pool holding the names"
echo "$out"
expect_dmesg "cannot register target thin-pool: the name is taken"
run rmmod dm_thin_pool
run insmod /rthin/dm-rthin.ko dm_thin_names=1
dmsetup targets | grep -q '^thin-pool ' || fail "thin-pool is not registered by rthin"
dmsetup targets | grep -q '^rthin-pool ' && fail "rthin-pool registered despite dm_thin_names=1"
size=$(sectors /dev/ram1)
run dmsetup create pool --table "0 $size thin-pool /dev/ram0 /dev/ram1 128 0"
run dmsetup remove pool
# Leave the VM as the other tests expect it.
run rmmod dm_rthin
run insmod /rthin/dm-rthin.ko
