# SPDX-License-Identifier: GPL-2.0
# The metadata low-water event goes out from the metadata allocation that
# crosses the threshold (free metadata blocks at or below min(1024, device
# blocks / 4)), whatever the operation, as dm-thin's metadata space map
# checks it: here a discard, with no message and no new mapping after it.
# A 1 MiB metadata device (256 blocks: threshold 64, reserve 25) holds a
# thin of N mapped blocks (thin_restore), then empty thins until a few
# blocks over the threshold are free; a discard of 2048 blocks (some eight
# leaves of the mapping tree, each shadowed) must raise the event at once.
. /rthin/tests/lib.sh

N=16384
THRESHOLD=64 RESERVE=25
events() { dmsetup info -c --noheadings -o events lw-pool | tr -d ' '; }
# raw_free: free metadata blocks, the reserve included (the status line's
# used/total leaves the reserve out of the free count).
raw_free() {
	local m
	m=$(pool_field lw-pool 2)
	echo $((${m#*/} - ${m%/*} + RESERVE))
}

discard_crosses_low_water() {
	local id=10 ev0 ev1
	wipe /dev/ram0
	run dmsetup create lw-meta --table "0 2048 linear /dev/ram0 0"
	{
		echo "<superblock uuid=\"\" time=\"0\" transaction=\"1\" flags=\"0\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"$N\">"
		echo "<device dev_id=\"1\" mapped_blocks=\"$N\" transaction=\"0\" creation_time=\"0\" snap_time=\"0\">"
		echo "<range_mapping origin_begin=\"0\" data_begin=\"0\" length=\"$N\" time=\"0\"/>"
		echo "</device>"
		echo "</superblock>"
	} >/tmp/lw.xml
	run thin_restore -i /tmp/lw.xml -o /dev/mapper/lw-meta
	openpool lw-pool /dev/mapper/lw-meta /dev/vdb $((N * 128))
	echo "restored: $(info lw-pool), $(raw_free) blocks free"
	[ "$(raw_free)" -gt $((THRESHOLD + 3)) ] || fail "the restored metadata leaves too little free: $(info lw-pool)"
	while [ "$(raw_free)" -gt $((THRESHOLD + 3)) ]; do
		run dmsetup message lw-pool 0 "create_thin $id"
		id=$((id + 1))
	done
	[ "$(raw_free)" -gt $THRESHOLD ] || fail "the empty thins crossed the threshold already: $(info lw-pool)"
	mkthin lw-thin lw-pool 1 $((N * 128))
	ev0=$(events)
	run blkdiscard -o 0 -l $((2048 * 65536)) /dev/mapper/lw-thin
	ev1=$(events)
	echo "events $ev0 -> $ev1 across the discard; after a commit: $(info lw-pool)"
	[ "$ev1" -gt "$ev0" ] || fail "no event from the discard that crossed the metadata low-water threshold"
	expect_dmesg "reached low water mark for metadata device: sending event."
	echo "ok: the discard's metadata allocations raised the low-water event"
}

for_each_impl discard_crosses_low_water
impl_verdict
