# SPDX-License-Identifier: GPL-2.0
# LVM2 on rthin: with dm-rthin.ko loaded as dm_thin_names=1 (and the C
# dm-thin unloaded) LVM's thin-pool and thin LVs run on rthin. On a RAM disk
# PV: lvcreate --type thin-pool, a thin LV, fio-verified data, a thin
# snapshot (LVM suspends the origin itself), copy-on-write after it, lvs
# data percentages that match the data, deactivation and reactivation (LVM
# runs thin_check on activation), thin_check on the pool's metadata LV
# (component activation), lvremove. Run on the C dm-thin first, for
# reference; the normal module is restored at the end.
. /rthin/tests/lib.sh

command -v lvm >/dev/null || fail "lvm2 is not in the VM image"
export LVM_SUPPRESS_FD_WARNINGS=1
PV=/dev/ram2
CONF='devices { obtain_device_list_from_udev=0 use_devicesfile=0 global_filter=["a|^/dev/ram2$|","r|.*|"] }
activation { udev_sync=0 udev_rules=0 monitoring=0 }
global { locking_dir="/run/lock/lvm" }'
BLK=65536

l() {
	echo "+ lvm $*"
	lvm "$@" --config "$CONF" || fail "lvm $* failed"
}
# lvfield LV FIELD: one lvs field, trimmed.
lvfield() {
	lvm lvs --config "$CONF" --noheadings -o "$2" "$1" | tr -d ' '
}
# percent USED TOTAL: 100 * USED / TOTAL with two decimals, as lvs shows it.
percent() {
	awk -v u="$1" -v t="$2" 'BEGIN { printf "%.2f\n", 100 * u / t }'
}

lvm_case() {
	if [ "$IMPL" = rthin ]; then
		# LVM wants thin-pool/thin: rthin takes those names.
		if lsmod | grep -q '^dm_thin_pool '; then run rmmod dm_thin_pool; fi
		run rmmod dm_rthin
		run insmod /rthin/dm-rthin.ko dm_thin_names=1
	fi
	echo "targets: $(dmsetup targets | tr '\n' ' ')"
	wipe $PV
	l pvcreate -y $PV
	l vgcreate vg $PV
	l lvcreate -y --type thin-pool -L 96M --chunksize 64k --zero y -n pool vg
	l lvcreate -y -V 64M --thin -n thin1 vg/pool
	T=/dev/mapper/vg-thin1
	[ -b $T ] || fail "no $T"
	# Which target serves it: the pool's table names the kernel target.
	dmsetup table vg-pool-tpool
	fio_write l1 $T 0 16M 64k randwrite 61
	put $T - A $((300 * BLK + 4096)) 4096 1
	model_new /tmp/ml 32
	capture $T /tmp/ml 32
	[ "$(lvfield vg/thin1 data_percent)" = "$(percent 257 1024)" ] ||
		fail "lvs thin1 data_percent $(lvfield vg/thin1 data_percent), expected $(percent 257 1024)"
	[ "$(lvfield vg/pool data_percent)" = "$(percent 257 1536)" ] ||
		fail "lvs pool data_percent $(lvfield vg/pool data_percent), expected $(percent 257 1536)"

	l lvcreate -y -s -kn -n snap1 vg/thin1
	S=/dev/mapper/vg-snap1
	[ -b $S ] || fail "no $S"
	cp /tmp/ml /tmp/mls
	same $S /tmp/mls "LVM snapshot"
	put $T /tmp/ml B $((5 * BLK + 8192)) 4096 1
	put $T /tmp/ml B $((20 * BLK)) 65536 2
	put $S /tmp/mls C $((6 * BLK)) 4096 1
	same $T /tmp/ml "origin after copy-on-write"
	same $S /tmp/mls "snapshot after copy-on-write"
	lvm lvs --config "$CONF" -a -o lv_name,segtype,lv_size,data_percent,metadata_percent,pool_lv,origin vg
	[ "$(lvfield vg/pool data_percent)" = "$(percent $((257 + 4)) 1536)" ] ||
		fail "lvs pool data_percent $(lvfield vg/pool data_percent), expected $(percent $((257 + 4)) 1536)"
	[ "$(lvfield vg/snap1 segtype)" = thin ] || fail "snap1 segtype $(lvfield vg/snap1 segtype)"
	[ "$(lvfield vg/snap1 origin)" = thin1 ] || fail "snap1 origin $(lvfield vg/snap1 origin)"

	# Deactivate, check the metadata LV, reactivate (LVM runs thin_check).
	l vgchange -an vg
	dmsetup ls
	l lvchange -ay -y vg/pool_tmeta
	check_meta /dev/mapper/vg-pool_tmeta
	l lvchange -an vg/pool_tmeta
	l vgchange -ay vg
	same $T /tmp/ml "origin after reactivation"
	same $S /tmp/mls "snapshot after reactivation"

	l lvremove -y vg/snap1
	[ "$(lvfield vg/pool data_percent)" = "$(percent 257 1536)" ] ||
		fail "lvs pool data_percent after removing the snapshot $(lvfield vg/pool data_percent), expected $(percent 257 1536)"
	l lvremove -y vg/thin1
	[ "$(lvfield vg/pool data_percent)" = "0.00" ] ||
		fail "lvs pool data_percent after removing every thin $(lvfield vg/pool data_percent)"
	l lvchange -an vg/pool
	l lvchange -ay -y vg/pool_tmeta
	check_meta /dev/mapper/vg-pool_tmeta
	l lvchange -an vg/pool_tmeta
	l lvremove -y vg/pool
	l vgremove -y vg
	l pvremove -y $PV
}

for_each_impl lvm_case
# The normal module again, whatever happened.
dmsetup remove_all --force >/dev/null 2>&1
lsmod | grep -q '^dm_rthin ' && { rmmod dm_rthin || fail "rmmod dm_rthin at the end"; }
run insmod /rthin/dm-rthin.ko
dmsetup targets | grep -q '^rthin-pool ' || fail "rthin-pool not registered after the restore"
impl_verdict
