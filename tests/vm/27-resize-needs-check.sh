# SPDX-License-Identifier: GPL-2.0
# J64: a pool whose metadata has needs_check set does not grow: a longer pool
# table still resumes, the data size stays, and the log says why. needs_check
# comes from a metadata write error (dm-flakey under the metadata device).
. /rthin/tests/lib.sh

use_impl rthin
modprobe dm-flakey || fail "modprobe dm-flakey"
msize=$(sectors /dev/ram0)
meta=/dev/mapper/fmeta
wipe /dev/ram0
run dmsetup create fmeta --table "0 $msize flakey /dev/ram0 0 1 0"
run dmsetup create data --table "0 4096 linear /dev/ram1 0"
openpool pool $meta /dev/mapper/data 4096
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 65536
run dd if=/dev/zero of=/dev/mapper/thin bs=64k count=1 oflag=direct 2>/dev/null
run dmsetup status pool >/dev/null # commits
# Metadata writes fail: the next commit fails and sets needs_check.
flakey() {
	swap_table fmeta "$1"
}
flakey "0 $msize flakey /dev/ram0 0 0 1 1 error_writes"
dd if=/dev/zero of=/dev/mapper/thin bs=64k seek=5 count=1 oflag=direct 2>/dev/null
dmsetup status pool >/dev/null
flakey "0 $msize flakey /dev/ram0 0 1 0"
run dmsetup remove thin
run dmsetup remove pool
openpool pool $meta /dev/mapper/data 4096
status=$(dmsetup status pool)
echo "$status"
case $status in *"/32 "*" ro "*" needs_check "*) ;; *) fail "expected ro needs_check with 32 blocks: $status" ;; esac
# Grow the data device and the pool table.
run dmsetup suspend pool
run dmsetup load data --table "0 8192 linear /dev/ram1 0"
run dmsetup suspend data
run dmsetup resume data
run dmsetup load pool --table "$(pool_table $meta /dev/mapper/data 8192)"
run dmsetup resume pool
status=$(dmsetup status pool)
echo "$status"
case $status in *"/32 "*) ;; *) fail "the data size changed despite needs_check: $status" ;; esac
expect_dmesg "unable to grow the data device until repaired."
run dmsetup remove pool
run dmsetup remove data
run dmsetup remove fmeta
