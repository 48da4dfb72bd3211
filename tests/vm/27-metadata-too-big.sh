# SPDX-License-Identifier: GPL-2.0
# A metadata device over 16 GiB (A11): the pool loads, uses only the first
# 33292800 sectors (status: 4161600 metadata blocks) and logs dm-thin's
# warning "Metadata device <name> is larger than 33292800 sectors: excess
# space will not be used.", both at table load and when a metadata device
# grows past 16 GiB (a reload, as lvextend --poolmetadatasize does). The
# device is a loop device on a sparse file of 16 GiB + 64 MiB in the guest's
# RAM file system: only the blocks written take memory. Data written before
# the growth reads back after it; thin_check passes on both metadata images.
# RTHIN_TEST_IMPLS=c,rthin checks the same expectations against dm-thin.
. /rthin/tests/lib.sh

DATA=/dev/ram1
BIG_SECTORS=$((33554432 + 131072))
LOOP=/dev/loop0

# since MARK: the kernel log after the last line MARK (written by note).
since() {
	dmesg | awk -v m="rthin-test: $1" 'index($0, m) { n = NR } { l[NR] = $0 } END { for (i = n + 1; i <= NR; i++) print l[i] }'
}
# expect_warning MARK DEVNAME: the warning, for DEVNAME, logged after MARK.
expect_warning() {
	local want="Metadata device $2 is larger than 33292800 sectors: excess space will not be used."
	since "$1" | grep -qF "$want" || fail "no '$want' in the kernel log after '$1': $(since "$1" | tail -5)"
}
meta_total() { pool_field pool 2 | cut -d/ -f2; }

scenario() {
	local dm_name
	rm -f /tmp/big.img
	run truncate -s $((BIG_SECTORS * 512)) /tmp/big.img
	run losetup $LOOP /tmp/big.img
	[ "$(sectors $LOOP)" = $BIG_SECTORS ] || fail "loop device: $(sectors $LOOP) sectors"

	# Table load with the whole device.
	note "$IMPL: load over 16 GiB"
	mkpool pool $LOOP $DATA $(sectors $DATA)
	expect_warning "$IMPL: load over 16 GiB" loop0
	[ "$(meta_total)" = 4161600 ] || fail "metadata total: $(info pool)"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 8192
	fio_write a /dev/mapper/thin 0 4M 64k write 11
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta $LOOP

	# Growth: 16 MiB of the same device first, then all of it.
	run dmsetup create meta --table "0 32768 linear $LOOP 0"
	dm_name=dm-$(dmsetup info -c --noheadings -o minor meta | tr -d ' ')
	note "$IMPL: load 16 MiB"
	mkpool pool /dev/mapper/meta $DATA $(sectors $DATA)
	[ "$(meta_total)" = 4096 ] || fail "metadata total before the growth: $(info pool)"
	! since "$IMPL: load 16 MiB" | grep -qF "Metadata device $dm_name is larger" ||
		fail "a 16 MiB metadata device drew the too-big warning"
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 8192
	fio_write b /dev/mapper/thin 0 4M 64k write 12
	note "$IMPL: grow over 16 GiB"
	run dmsetup load meta --table "0 $BIG_SECTORS linear $LOOP 0"
	run dmsetup suspend meta
	run dmsetup resume meta
	run dmsetup suspend pool
	run dmsetup resume pool
	since "$IMPL: grow over 16 GiB" | grep -qF "growing the metadata device from 4096 to 4161600 blocks" ||
		fail "no growth line in the kernel log: $(since "$IMPL: grow over 16 GiB" | tail -5)"
	expect_warning "$IMPL: grow over 16 GiB" "$dm_name"
	[ "$(meta_total)" = 4161600 ] || fail "metadata total after the growth: $(info pool)"
	fio_verify b /dev/mapper/thin 0 4M 64k write 12
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta /dev/mapper/meta
	run dmsetup remove meta
	run losetup -d $LOOP
	rm -f /tmp/big.img
}

for_each_impl scenario
losetup -d $LOOP 2>/dev/null
rm -f /tmp/big.img
impl_verdict
