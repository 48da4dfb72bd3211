# SPDX-License-Identifier: GPL-2.0
# Bad table lines are refused with a message the user can act on, and leave
# no device behind.
. /rthin/tests/lib.sh

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)

expect_error "Invalid argument" dmsetup create bad --table "0 $size rthin-pool $meta $data"
expect_dmesg "Invalid argument count"
expect_error "Invalid argument" dmsetup create bad --table "0 $size rthin-pool $meta $data abc 0"
expect_dmesg "Invalid block size"
expect_error "Invalid argument" dmsetup create bad --table "0 $size rthin-pool $meta $data 128 -1"
expect_dmesg "Invalid low water mark"
expect_error "No such" dmsetup create bad --table "0 $size rthin-pool /dev/nonexistent $data 128 0"
expect_dmesg "Error opening metadata block device"
expect_error "Invalid argument" dmsetup create bad --table "0 $size rthin /dev/ram2"
expect_error "Invalid argument" dmsetup create bad --table "0 $size rthin /dev/ram2 99999999999"
expect_dmesg "Invalid device id"
dmsetup info bad >/dev/null 2>&1 && fail "a failed create left a device behind"
exit 0
