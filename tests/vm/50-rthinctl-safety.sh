# SPDX-License-Identifier: GPL-2.0
# rthinctl on pools it must not harm, on the C dm-thin and on rthin:
# - the metadata device of an active pool is refused by meta check/ls/dump
#   (exclusive open, naming the pool), read through a held metadata
#   snapshot with -m, and checked live with `meta check --live POOL`
#   (snapshot reserved and released again; one already held is kept);
# - a pool whose dm UUID says LVM or Stratis owns it is not changed
#   (create-thin, create-snap, delete, set-transaction-id, message) unless
#   --force, with the owner and the command to use instead; a real LVM
#   thin pool (lvcreate --thin) is refused the same way;
# - status --check: a bad command line or threshold is UNKNOWN (3), the OK
#   line has numbers and perfdata.
. /rthin/tests/lib.sh
RTHIN_TEST_IMPLS=c,rthin
meta=/dev/ram2 data=/dev/ram3

held() { dmsetup status --noflush "$1" | cut -d' ' -f7; }

live_case() {
	local size
	size=$(sectors $data)
	mkpool spool $meta $data "$size"
	run rthinctl create-thin spool 1
	mkthin sthin spool 1 65536
	run dd if=/dev/urandom of=/dev/mapper/sthin bs=64k count=20 conv=fsync 2>/dev/null
	run rthinctl create-snap spool 2 1
	run dd if=/dev/urandom of=/dev/mapper/sthin bs=64k count=2 seek=3 conv=fsync 2>/dev/null

	# The live metadata device: held by the pool, refused, named.
	expect_rc 1 "held by spool" rthinctl meta check $meta
	expect_rc 1 "meta check --live" rthinctl meta ls $meta
	expect_rc 1 "held by spool" rthinctl meta dump $meta
	# -m without a held snapshot says how to take one.
	expect_rc 1 "holds no metadata snapshot" rthinctl meta ls -m $meta

	# --live: reserves, checks, releases.
	expect_rc 0 "metadata snapshot ok: 2 devices" rthinctl meta check --live spool
	[ "$(held spool)" = - ] || fail "meta check --live left a snapshot held: $(held spool)"
	expect_rc 0 '"verdict": "ok"' rthinctl --json meta check --live spool
	# A snapshot the pool already holds is used and kept.
	run rthinctl metadata-snap reserve spool
	h=$(held spool)
	expect_rc 0 "metadata snapshot ok" rthinctl meta check --live spool
	[ "$(held spool)" = "$h" ] || fail "meta check --live released a snapshot it did not take"
	# -m reads through the held snapshot of the running pool.
	out=$(rthinctl meta ls -m $meta) || fail "meta ls -m: $out"
	echo "$out"
	[ "$(echo "$out" | grep -c '^ *[12] ')" = 2 ] || fail "meta ls -m lists: $out"
	rthinctl meta dump -m $meta >/tmp/m.xml || fail "meta dump -m failed"
	grep -q '<device dev_id="2"' /tmp/m.xml || fail "meta dump -m: $(head -3 /tmp/m.xml)"
	thin_dump -m $meta >/tmp/c.xml 2>/dev/null && {
		grep -c mapping /tmp/c.xml
		[ "$(grep -c '_mapping' /tmp/m.xml)" = "$(grep -c '_mapping' /tmp/c.xml)" ] ||
			fail "meta dump -m and thin_dump -m differ"
	}
	run rthinctl metadata-snap release spool
	# Once the pool is gone the device opens again.
	run dmsetup remove sthin
	run dmsetup remove spool
	expect_rc 0 "metadata ok: 2 devices" rthinctl meta check $meta
}
for_each_impl live_case

# Owned by Stratis (the UUID is what rthinctl reads).
owned_case() {
	local size
	size=$(sectors $data)
	wipe $meta
	run dmsetup create --uuid stratis-1-0123-thinpool-pool stpool --table "$(pool_table $meta $data $size)"
	expect_rc 1 "belongs to Stratis" rthinctl create-thin stpool 1
	expect_rc 1 "stratis filesystem create" rthinctl create-thin stpool --id 1
	expect_rc 1 "belongs to Stratis" rthinctl message stpool create_thin 1
	expect_rc 1 "belongs to Stratis" rthinctl set-transaction-id stpool --bump
	expect_rc 0 "" rthinctl create-thin stpool 1 --force
	expect_rc 1 "belongs to Stratis" rthinctl delete stpool 1
	expect_rc 0 "" rthinctl delete stpool 1 --force
	run dmsetup remove stpool
}
for_each_impl owned_case

# A real LVM thin pool (C dm-thin; 70-io-lvm2 runs LVM on rthin too).
if command -v lvm >/dev/null; then
	export LVM_SUPPRESS_FD_WARNINGS=1
	CONF='devices { obtain_device_list_from_udev=0 use_devicesfile=0 global_filter=["a|^/dev/ram2$|","r|.*|"] }
activation { udev_sync=0 udev_rules=0 monitoring=0 }
global { locking_dir="/run/lock/lvm" }'
	l() { echo "+ lvm $*"; lvm "$@" --config "$CONF" || fail "lvm $* failed"; }
	modprobe dm-thin-pool
	wipe /dev/ram2
	l pvcreate -y /dev/ram2
	l vgcreate vg /dev/ram2
	l lvcreate -y --type thin-pool -L 64M -n pool vg
	l lvcreate -y -V 32M --thin -n thin1 vg/pool
	dmsetup ls
	expect_rc 1 "belongs to LVM (LV vg/pool)" rthinctl create-thin vg-pool-tpool 9
	expect_rc 1 "lvcreate --thin -V SIZE -n NAME vg/pool" rthinctl create-thin vg-pool-tpool --id 9
	expect_rc 1 "lvcreate -s vg/" rthinctl create-snap vg-pool-tpool 9 1
	expect_rc 1 "lvremove vg/" rthinctl delete vg-pool-tpool 1
	expect_rc 1 "belongs to LVM" rthinctl set-transaction-id vg-pool-tpool --bump
	expect_rc 1 "belongs to LVM" rthinctl message vg-pool-tpool create_thin 9
	expect_rc 0 "dmsetup message" rthinctl create-thin vg-pool-tpool 9 --force --dry-run
	# Listings name the LV next to the dm name.
	expect_rc 0 "vg/thin1" rthinctl ls
	echo "$out" | grep -q '^vg-pool-tpool  *vg/pool ' || fail "the pool's LV is not shown: $out"
	expect_rc 0 '"lv": "vg/thin1"' rthinctl --json ls
	# Reading is fine: the live check of an LVM pool.
	expect_rc 0 "metadata snapshot ok" rthinctl meta check --live vg-pool-tpool
	[ "$(held vg-pool-tpool)" = - ] || fail "--live left a snapshot on the LVM pool"
	l vgchange -an vg
	l vgremove -y vg
	l pvremove -y /dev/ram2
else
	echo "SKIP: lvm2 is not in the VM image (the Stratis UUID case above covers the refusal)"
fi

# status --check: command-line errors and bad thresholds are UNKNOWN.
expect_rc 3 "UNKNOWN" rthinctl status --check --warn nan
expect_rc 3 "UNKNOWN" rthinctl status --check --warn -5
expect_rc 3 "UNKNOWN" rthinctl status --check --warn 96 --crit 95
expect_rc 3 "" rthinctl status --check --frobnicate
expect_rc 2 "" rthinctl status --frobnicate
# The command line is checked before the device is opened.
expect_rc 2 "needs a thin id" rthinctl create-thin nosuchpool
modprobe dm-thin-pool
wipe $meta
run dmsetup create kpool --table "0 $(sectors $data) thin-pool $meta $data 128 0"
expect_rc 0 "| kpool_data=0.00%;80;95;0;100 kpool_metadata=" rthinctl status --check
case $out in "OK: 1 thin pool healthy (kpool data 0.00% metadata "*) ;; *) fail "OK line: $out" ;; esac
expect_rc 0 " kpool_data_free=" rthinctl status --check
expect_rc 0 "| db_data=0.00%;" rthinctl status --check --label db kpool
expect_rc 3 "exactly one POOL" rthinctl status --check --label db
expect_rc 0 "rthin_pool_data_size_bytes{pool=\"kpool\",target=\"thin-pool\"} " rthinctl status --prometheus
expect_rc 2 "CRITICAL: kpool: data free" rthinctl status --check --crit-free 1000P
expect_rc 2 "has no meaning for meta dump" rthinctl --json meta dump $meta
expect_rc 0 "rthinctl " rthinctl -V
run dmsetup remove kpool
impl_verdict
