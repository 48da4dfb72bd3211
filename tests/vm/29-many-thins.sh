# SPDX-License-Identifier: GPL-2.0
# A thousand active thin devices of 1 TiB each on one pool, on the C dm-thin
# and on rthin over the same metadata: the kernel memory they take (slab,
# vmalloc and per-CPU; MemAvailable is shown too, but the page cache moves
# it) must be no more on rthin than on dm-thin plus 10%: an idle thin pins
# no mapping cache of its own. Both activate them in one dmsetup call; I/O to a few of them
# works; the metadata stays clean.
. /rthin/tests/lib.sh

# The memory and activation figures are for `make check`; on the debug kernel
# (KASAN, lockdep), a thousand thins created and removed twice take over an
# hour of a shared host, so it runs the same checks on a hundred.
N=1000
debug_kernel && N=100
meta=/dev/ram0 data=/dev/ram1
TIB=$((1 << 31)) # sectors
nr_blocks=$(($(sectors $data) / 128))

# The metadata, with N empty thin devices, from a generated dump.
{
	echo "<superblock uuid=\"\" time=\"0\" transaction=\"1\" flags=\"0\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"$nr_blocks\">"
	i=1
	while [ $i -le $N ]; do
		echo "<device dev_id=\"$i\" mapped_blocks=\"0\" transaction=\"0\" creation_time=\"0\" snap_time=\"0\"></device>"
		i=$((i + 1))
	done
	echo "</superblock>"
} >/tmp/many.xml
wipe $meta
run thin_restore -i /tmp/many.xml -o $meta

meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
snapshot_mem() { echo "$(meminfo MemAvailable) $(meminfo Slab) $(meminfo VmallocUsed) $(meminfo Percpu)"; }

# activate IMPL: the pool and N thins (one dmsetup call); sets KIB (kernel
# memory the thins took, per thin) and SECS.
activate() {
	local i spec before after t0
	use_impl "$1"
	openpool pool $meta $data "$(sectors $data)"
	spec=
	i=1
	while [ $i -le $N ]; do
		spec="$spec${spec:+;}t$i,,,,0 $TIB $THIN_T /dev/mapper/pool $i"
		i=$((i + 1))
	done
	sync
	before=$(snapshot_mem)
	t0=$(date +%s)
	run dmsetup create --concise "$spec"
	SECS=$(($(date +%s) - t0))
	sleep 1
	after=$(snapshot_mem)
	set -- $before $after
	KIB=$((($6 - $2 + $7 - $3 + $8 - $4) / N))
	echo "$IMPL: $N thins active in ${SECS} s; per thin: $KIB KiB of kernel memory" \
		"(slab $((($6 - $2) / N)), vmalloc $((($7 - $3) / N)), per-CPU $((($8 - $4) / N))), MemAvailable $((($1 - $5) / N)) KiB"
}

# deactivate: the N thins in one dmsetup call (a process per device costs
# most of the test's time under TCG), then the pool.
deactivate() {
	local i=1 names=
	while [ $i -le $N ]; do
		names="$names t$i"
		i=$((i + 1))
	done
	run dmsetup remove $names
	run dmsetup remove pool
}

activate c
c_kib=$KIB
deactivate
activate rthin
r_kib=$KIB
# Data through a few of them, at both ends of the 1 TiB.
for i in 1 $((N / 2)) $N; do
	put /dev/mapper/t$i - A 0 65536 4
	put /dev/mapper/t$i - B $(((TIB - 128) * 512)) 65536 1
	got=$(dd if=/dev/mapper/t$i bs=64k count=4 iflag=direct 2>/dev/null | md5sum)
	want=$(dd if=/tmp/pat.A bs=64k count=4 2>/dev/null | md5sum)
	[ "$got" = "$want" ] || fail "thin $i does not read back its data"
done
echo "ok: thins 1, $((N / 2)) and $N read back their data"
deactivate
check_meta $meta

limit=$((c_kib + c_kib / 10 + 4))
echo "per thin: dm-thin $c_kib KiB, rthin $r_kib KiB (limit $limit KiB)"
[ "$r_kib" -le "$limit" ] || fail "rthin takes $r_kib KiB per idle 1 TiB thin, dm-thin $c_kib KiB"
