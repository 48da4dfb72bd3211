# SPDX-License-Identifier: GPL-2.0
# Metadata interoperability with the C dm-thin, both ways: a pool formatted
# and populated by thin-pool comes up under rthin-pool with the same status,
# transaction id, devices and mapped counts, and leaves the metadata exactly
# as thin_dump saw it; a pool formatted and populated by rthin-pool comes up
# under thin-pool with the same status and passes thin_check after C writes.
. /rthin/tests/lib.sh

run modprobe dm-thin-pool
field() { echo "$1" | cut -d' ' -f"$2"; }
info() { dmsetup status "$1" | cut -d' ' -f4-; }

# ---- C formats and populates, rthin opens ----
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0"
run dmsetup message cpool 0 "create_thin 1"
run dmsetup create cthin --table "0 $((64 * 2048)) thin /dev/mapper/cpool 1"
run dd if=/dev/urandom of=/dev/mapper/cthin bs=64k count=3 oflag=direct 2>/dev/null
run dd if=/dev/urandom of=/dev/mapper/cthin bs=64k seek=9 count=1 oflag=direct 2>/dev/null
run dmsetup suspend cthin
run dmsetup message cpool 0 "create_snap 2 1"
run dmsetup resume cthin
run dmsetup message cpool 0 "set_transaction_id 0 5"
c_pool=$(info cpool)
c_thin=$(info cthin)
echo "C: pool '$c_pool' thin '$c_thin'"
[ "$c_thin" = "512 1279" ] || fail "C thin status '$c_thin'"
run dmsetup remove cthin
run dmsetup remove cpool
run thin_check $meta
run thin_dump $meta >/tmp/c.xml

run dmsetup create rpool --table "0 $size rthin-pool $meta $data 128 0"
r_pool=$(info rpool)
echo "rthin: pool '$r_pool'"
[ "$(field "$r_pool" 1)" = 5 ] || fail "transaction id: '$r_pool' vs C '$c_pool'"
[ "$(field "$r_pool" 3)" = "$(field "$c_pool" 3)" ] || fail "data usage: '$r_pool' vs C '$c_pool'"
[ "$(field "$r_pool" 2 | cut -d/ -f2)" = "$(field "$c_pool" 2 | cut -d/ -f2)" ] ||
	fail "metadata total: '$r_pool' vs C '$c_pool'"
[ "$(echo "$r_pool" | cut -d' ' -f4-)" = "$(echo "$c_pool" | cut -d' ' -f4-)" ] ||
	fail "status tail: '$r_pool' vs C '$c_pool'"
run dmsetup create rthin1 --table "0 $((64 * 2048)) rthin /dev/mapper/rpool 1"
run dmsetup create rthin2 --table "0 $((64 * 2048)) rthin /dev/mapper/rpool 2"
[ "$(info rthin1)" = "512 1279" ] || fail "rthin thin 1 status '$(info rthin1)'"
[ "$(info rthin2)" = "512 1279" ] || fail "rthin snapshot 2 status '$(info rthin2)'"
run dmsetup remove rthin1
run dmsetup remove rthin2
run dmsetup remove rpool
run thin_check $meta
run thin_dump $meta >/tmp/r.xml
cmp /tmp/c.xml /tmp/r.xml || {
	diff /tmp/c.xml /tmp/r.xml
	fail "thin_dump changed by an rthin activation without writes"
}

# ---- rthin formats and populates, C opens ----
meta=/dev/ram0 data=/dev/ram1
wipe $meta
size=$(sectors $data)
run dmsetup create rpool --table "0 $size rthin-pool $meta $data 128 0"
run dmsetup message rpool 0 "create_thin 1"
run dmsetup message rpool 0 "create_thin 4"
run dmsetup message rpool 0 "create_snap 2 1"
run dmsetup message rpool 0 "delete 4"
run dmsetup message rpool 0 "set_transaction_id 0 3"
run dmsetup message rpool 0 "reserve_metadata_snap"
r_pool=$(info rpool)
echo "rthin: pool '$r_pool'"
run dmsetup remove rpool
run thin_check $meta
run thin_dump $meta >/tmp/r2.xml
cat /tmp/r2.xml
grep -q 'transaction="3"' /tmp/r2.xml || fail "thin_dump transaction"
grep -q 'dev_id="4"' /tmp/r2.xml && fail "thin_dump shows deleted device 4"

run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0"
c_pool=$(info cpool)
echo "C: pool '$c_pool'"
[ "$(field "$c_pool" 1)" = 3 ] || fail "C transaction id: '$c_pool'"
[ "$(field "$c_pool" 3)" = "0/$((size / 128))" ] || fail "C data usage: '$c_pool'"
[ "$(field "$c_pool" 4)" = "$(field "$r_pool" 4)" ] || fail "held root: C '$c_pool' rthin '$r_pool'"
[ "$(echo "$c_pool" | cut -d' ' -f4-)" = "$(echo "$r_pool" | cut -d' ' -f4-)" ] ||
	fail "status tail: C '$c_pool' vs rthin '$r_pool'"
run dmsetup message cpool 0 "release_metadata_snap"
run dmsetup create cthin --table "0 $((64 * 2048)) thin /dev/mapper/cpool 2"
run dd if=/dev/urandom of=/dev/mapper/cthin bs=64k count=2 oflag=direct 2>/dev/null
[ "$(info cthin)" = "256 255" ] || fail "C thin on rthin metadata: '$(info cthin)'"
run dmsetup remove cthin
expect_error "File exists" dmsetup message cpool 0 "create_thin 1"
run dmsetup remove cpool
run thin_check $meta
exit 0
