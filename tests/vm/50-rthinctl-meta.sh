# SPDX-License-Identifier: GPL-2.0
# rthinctl meta check|dump|ls on the metadata of a deactivated C dm-thin
# pool agree with thin_check and thin_dump (mappings compared block by
# block), including a held metadata snapshot and damaged metadata.
. /rthin/tests/lib.sh

# norm: thin_dump XML -> one line per superblock, device and mapped block.
norm() {
	awk '
	function a(n,   s) {
		if (!match($0, n "=\"[^\"]*\"")) return "-"
		s = substr($0, RSTART + length(n) + 2, RLENGTH - length(n) - 3)
		return s
	}
	/<superblock/ { print "sb", a("time"), a("transaction"), a("data_block_size"), a("nr_data_blocks") }
	/<device / { dev = a("dev_id"); print "dev", dev, a("mapped_blocks"), a("transaction"), a("creation_time"), a("snap_time") }
	/<single_mapping/ { print "map", dev, a("origin_block"), a("data_block"), a("time") }
	/<range_mapping/ {
		o = a("origin_begin") + 0; d = a("data_begin") + 0; n = a("length") + 0; t = a("time")
		for (i = 0; i < n; i++) print "map", dev, o + i, d + i, t
	}' "$1"
}

run modprobe dm-thin-pool
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0 1 skip_block_zeroing"
run rthinctl create-thin cpool --id 1
run rthinctl create-thin cpool --id 7
run dmsetup create thin1 --table "0 65536 thin /dev/mapper/cpool 1"
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=20 conv=fsync 2>/dev/null
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=3 seek=100 conv=fsync 2>/dev/null
run rthinctl create-snap cpool --id 2 --origin 1
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=2 seek=5 conv=fsync 2>/dev/null
run rthinctl set-transaction-id cpool --bump
run rthinctl metadata-snap reserve cpool
run dmsetup remove thin1
run dmsetup remove cpool

run thin_check $meta
out=$(rthinctl meta check $meta) || fail "meta check failed: $out"
echo "$out"
case $out in *"metadata ok: 3 devices, transaction 1"*) ;; *) fail "meta check: $out" ;; esac
rthinctl meta dump $meta >/tmp/r.xml || fail "meta dump failed"
thin_dump $meta >/tmp/c.xml || fail "thin_dump failed"
norm /tmp/r.xml >/tmp/r.txt
norm /tmp/c.xml >/tmp/c.txt
wc -l /tmp/r.txt /tmp/c.txt
grep -q '^map 2 ' /tmp/c.txt || fail "thin_dump shows no mappings for the snapshot"
diff /tmp/c.txt /tmp/r.txt || fail "rthinctl meta dump disagrees with thin_dump"
[ "$(grep -c '^map 1 ' /tmp/c.txt)" = 23 ] || fail "expected 23 mappings of thin 1 in thin_dump"
# The XML itself is thin_dump's, byte for byte (thin_dump ends without a newline).
{
	cat /tmp/c.xml
	echo
} >/tmp/c2.xml
diff /tmp/c2.xml /tmp/r.xml || fail "rthinctl meta dump XML differs from thin_dump's"
out=$(rthinctl meta ls $meta) || fail "meta ls failed"
echo "$out"
[ "$(echo "$out" | grep -c '^ *[0-9]')" = 3 ] || fail "meta ls lists: $out"
out=$(rthinctl --json meta ls $meta) || fail "meta ls --json failed"
case $out in *'"held_metadata_root": '[0-9]*) ;; *) fail "held root not shown: $out" ;; esac

# Damage: both tools must refuse a broken superblock checksum.
dd if=/dev/urandom of=$meta bs=1 count=16 seek=200 conv=notrunc 2>/dev/null
thin_check $meta >/dev/null 2>&1 && fail "thin_check accepted damaged metadata"
out=$(rthinctl meta check $meta 2>&1)
[ $? = 1 ] || fail "meta check on damaged metadata: $out"
case $out in *damaged*) ;; *) fail "meta check: $out" ;; esac
wipe $meta
out=$(rthinctl meta dump $meta 2>&1) && fail "meta dump of a wiped device succeeded"
case $out in *"holds no thin metadata"*) ;; *) fail "meta dump: $out" ;; esac
