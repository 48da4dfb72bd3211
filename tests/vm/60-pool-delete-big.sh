# SPDX-License-Identifier: GPL-2.0
# The delete of a big thin while another thin of the pool writes (issue 31).
# Thin 1 maps N blocks (its metadata written by thin_restore; its data
# blocks lie on a zero target and are never read); thin 2 lies on a RAM
# disk. While `delete 1` runs, thin 2 takes verified random writes with
# fsyncs (flushes that commit) and a stream of writes to new blocks (each a
# provision), and the pool gets an INFO status (which commits), a
# `create_thin` and a second `delete 1`, a suspend and a resume. Then: every
# one of those succeeded (the second delete found no device), thin 2 holds
# what was written, the pool's counts are thin 2's alone, and thin_check
# passes, on the metadata of the live pool and after a reopen. On rthin,
# thin 2's provisions must go on while the delete runs (the release is done
# in pieces that let the pool lock go); on dm-thin, whose delete holds its
# metadata lock throughout, the number is only noted.
. /rthin/tests/lib.sh

N=${DELETE_BIG_BLOCKS:-1048576}
RAM=$(($(sectors /dev/ram1) / 128))
NB=$((RAM + N))
THIN2_MIB=64
# now_ms: milliseconds since boot (busybox date has no %N).
now_ms() { awk '{ printf "%d\n", $1 * 1000 }' /proc/uptime; }

metadata_xml() {
	cat <<-XML
	<superblock uuid="" time="0" transaction="1" data_block_size="128" nr_data_blocks="$NB">
	  <device dev_id="1" mapped_blocks="$N" transaction="0" creation_time="0" snap_time="0">
	    <range_mapping origin_begin="0" data_begin="$RAM" length="$N" time="0"/>
	  </device>
	  <device dev_id="2" mapped_blocks="0" transaction="0" creation_time="0" snap_time="0">
	  </device>
	</superblock>
	XML
}

# new_block_writer MODEL: writes 4 KiB of pattern B at the start of each
# 64 KiB block of thin 2's first half, one block after the other (each a
# provision), until /tmp/db.stop exists; /tmp/db.count is the number done,
# /tmp/db.times the time each ended (now_ms).
new_block_writer() {
	local i=0
	while [ ! -e /tmp/db.stop ] && [ $i -lt $((THIN2_MIB * 8)) ]; do
		put "$thin" "$1" B $((i * 65536)) 4096 1
		i=$((i + 1))
		echo $i >/tmp/db.count
		now_ms >>/tmp/db.times
	done
}

# written_past N: the new-block writer has written more than N blocks.
written_past() { [ "$(cat /tmp/db.count)" -gt "$1" ]; }
# longest_wait T0 T1: the longest time between two ends of the new-block
# writer's writes (or T0 and the first end after it) around [T0, T1].
longest_wait() {
	awk -v t0="$1" -v t1="$2" '
	{ if (prev != "" && $1 > t0 && prev < t1) { a = (prev < t0 ? t0 : prev); if ($1 - a > m) m = $1 - a } prev = $1 }
	END { print m + 0 }' /tmp/db.times
}
# median_wait T: the median time between two ends of writes before T.
median_wait() {
	awk -v t="$1" '$1 < t { if (prev != "") print $1 - prev; prev = $1 }' /tmp/db.times |
		sort -n | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : 0) }'
}

big_delete() {
	local t0 t1 c0 c1 ms gap med lim fio_pid w_pid s_pid m_pid p_pid used
	rm -f /tmp/db.stop /tmp/db.count /tmp/db.times /tmp/db.*.err
	wipe /dev/ram0
	printf '0 %s linear /dev/ram1 0\n%s %s zero\n' $((RAM * 128)) $((RAM * 128)) $((N * 128)) |
		dmsetup create db-data || fail "db-data"
	metadata_xml >/tmp/db.xml
	run thin_restore -i /tmp/db.xml -o /dev/ram0
	openpool db-pool /dev/ram0 /dev/mapper/db-data $((NB * 128))
	mkthin db-thin db-pool 2 $((THIN2_MIB * 2048))
	thin=/dev/mapper/db-thin
	echo "thin 1: $N mappings; pool: $(info db-pool)"

	# The second half of thin 2: random 4 KiB writes at iodepth 8, an fsync
	# every 16, verified at the end.
	fio_write db-rand "$thin" $((THIN2_MIB / 2))M $((THIN2_MIB / 2))M 4k randwrite 31 \
		--ioengine=libaio --iodepth=8 --fsync=16 >/tmp/db.fio.out 2>&1 &
	fio_pid=$!
	# Whatever ends this run, the writers stop before its devices go.
	db_fio=$fio_pid
	trap 'touch /tmp/db.stop; kill "$db_fio" 2>/dev/null; wait' EXIT
	model_new /tmp/db.model $((THIN2_MIB / 2))
	new_block_writer /tmp/db.model &
	w_pid=$!
	wait_for 30 test -s /tmp/db.count || fail "the new-block writer did not start"
	sleep 2

	c0=$(cat /tmp/db.count)
	t0=$(now_ms)
	dmsetup message db-pool 0 "delete 1" 2>/tmp/db.delete.err &
	p_pid=$!
	sleep 0.3
	# While it runs (if it still does): a committing status, other
	# messages, a suspend and resume of the pool.
	dmsetup status db-pool >/tmp/db.status 2>/tmp/db.status.err &
	s_pid=$!
	dmsetup message db-pool 0 "create_thin 3" 2>/tmp/db.create.err &
	m_pid=$!
	exited $p_pid || echo "the status and create_thin came while the delete ran"
	wait $p_pid || fail "delete 1: $(cat /tmp/db.delete.err)"
	t1=$(now_ms)
	c1=$(cat /tmp/db.count)
	ms=$((t1 - t0))
	# One more write ends after the delete, for the gap it ends.
	wait_for 30 written_past "$c1" || fail "the new-block writer stopped"
	gap=$(longest_wait "$t0" "$t1")
	med=$(median_wait "$t0")
	echo "delete 1 of $N mappings: $ms ms; $((c1 - c0)) new blocks written to thin 2 meanwhile;" \
		"longest wait between two of them $gap ms (median before the delete $med ms)"
	wait $s_pid || fail "the status during the delete: $(cat /tmp/db.status.err)"
	wait $m_pid || fail "create_thin 3 during the delete: $(cat /tmp/db.create.err)"
	expect_error "No data available" dmsetup message db-pool 0 "delete 1"

	# A delete in pieces lets the provisions through: no wait between two
	# new blocks longer than four times the usual one and 500 ms.
	lim=$((4 * med > 500 ? 4 * med : 500))
	if [ "$IMPL" = rthin ]; then
		[ "$gap" -le "$lim" ] ||
			fail "thin 2's provisions waited $gap ms during the $ms ms of the delete (limit $lim ms)"
	else
		note "60-pool-delete-big [$IMPL]: $ms ms of delete, the provisions waited up to $gap ms (median $med ms)"
	fi

	# A second delete, with a suspend and resume of the pool coming in.
	run dmsetup message db-pool 0 "create_snap 4 2"
	dmsetup message db-pool 0 "delete 4" 2>/tmp/db.delete.err &
	p_pid=$!
	run dmsetup suspend db-pool
	run dmsetup resume db-pool
	wait $p_pid || fail "delete 4: $(cat /tmp/db.delete.err)"

	touch /tmp/db.stop
	wait $w_pid || fail "the new-block writer"
	wait $fio_pid || { cat /tmp/db.fio.out; fail "the random writer"; }
	same "$thin" /tmp/db.model "thin 2's new blocks, written during the delete"
	[ "$(pool_field db-pool 5)" = rw ] && [ "$(pool_field db-pool 8)" = - ] ||
		fail "the pool after the deletes: $(info db-pool)"

	# Only thin 2's blocks are in use, all of them on the RAM disk.
	run dmsetup message db-pool 0 reserve_metadata_snap
	thin_dump -m /dev/ram0 >/tmp/db.dump.xml 2>/tmp/db.dump.err || fail "thin_dump -m: $(cat /tmp/db.dump.err)"
	run dmsetup message db-pool 0 release_metadata_snap
	grep -q 'dev_id="1"' /tmp/db.dump.xml && fail "device 1 is still in the metadata"
	grep -q 'dev_id="3"' /tmp/db.dump.xml || fail "device 3 (created during the delete) is missing"
	mappings /tmp/db.dump.xml 2 >/tmp/db.map2
	used=$(wc -l </tmp/db.map2)
	awk -v ram="$RAM" '$2 >= ram { bad = 1 } END { exit bad }' /tmp/db.map2 ||
		fail "thin 2 has blocks past the RAM disk"
	[ "$(data_used db-pool)" = "$used" ] || fail "the pool uses $(data_used db-pool) blocks, thin 2 maps $used"
	echo "ok: the pool's $used used blocks are thin 2's"

	run dmsetup remove db-thin
	run dmsetup remove db-pool
	check_meta /dev/ram0
	openpool db-pool /dev/ram0 /dev/mapper/db-data $((NB * 128))
	mkthin db-thin db-pool 2 $((THIN2_MIB * 2048))
	fio_verify db-rand "$thin" $((THIN2_MIB / 2))M $((THIN2_MIB / 2))M 4k randwrite 31
	same "$thin" /tmp/db.model "thin 2's new blocks, after a reopen"
	run dmsetup remove db-thin
	run dmsetup remove db-pool
	run dmsetup remove db-data
}

for_each_impl big_delete
impl_verdict
