# SPDX-License-Identifier: GPL-2.0
# A suspended pool writes nothing to its metadata device, so a copy of it
# (or thin_dump) taken while the pool is suspended is consistent, as with
# dm-thin, which suspends the active thins and stops its periodic commit.
# With the pool suspended, a thin gets work that changes metadata without
# any I/O through the (suspended) pool device: a discard of a mapped block
# (unmapped at once) and a 4 KiB write to a new block with
# skip_block_zeroing (mapped before its write goes to the pool device),
# then an fsync. The metadata device must not change for 4 s (the
# periodic commit runs every second). After the resume both finish and
# the metadata shows them. On the C dm-thin and rthin.
. /rthin/tests/lib.sh

RAW=/dev/ram1
MMETA=16384 # 8 MiB of metadata

md5meta() { dd if=/dev/mapper/qmeta bs=1M iflag=direct 2>/dev/null | md5sum; }

quiesce() {
	wipe /dev/ram0
	run dmsetup create qmeta --table "0 $MMETA linear /dev/ram0 0"
	openpool pool /dev/mapper/qmeta $RAW $(sectors $RAW) skip_block_zeroing
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 65536
	run dd if=/dev/urandom of=/dev/mapper/thin bs=64k count=8 oflag=direct 2>/dev/null
	run dmsetup status pool >/dev/null # commits
	expect_used pool 8 "before the suspend"
	run dmsetup suspend pool
	before=$(md5meta)
	blkdiscard -o 0 -l 65536 /dev/mapper/thin 2>/tmp/q.d &
	discard=$!
	pattern A
	dd if=/tmp/pat.A of=/dev/mapper/thin bs=4k seek=160 count=1 oflag=direct conv=fsync 2>/tmp/q.w &
	writer=$!
	dd if=/dev/zero of=/dev/mapper/thin bs=4k count=0 conv=fsync,notrunc 2>/tmp/q.f &
	flusher=$!
	sleep 4
	after=$(md5meta)
	changed=0
	[ "$before" = "$after" ] || changed=1
	run dmsetup resume pool
	for p in $discard $writer $flusher; do
		wait_for 30 exited $p || fail "a thin's I/O still waits 30 s after the pool resumed"
	done
	[ $changed = 0 ] || fail "the metadata device changed while the pool was suspended"
	echo "ok: the metadata device did not change in 4 s of suspend"
	n=$(dd if=/dev/mapper/thin bs=64k count=1 iflag=direct 2>/dev/null | tr -d '\000' | wc -c)
	[ "$n" = 0 ] || fail "the discarded block holds $n non-zero bytes"
	wait $discard || fail "the discard failed: $(cat /tmp/q.d)"
	wait $writer || fail "the write failed: $(cat /tmp/q.w)"
	wait $flusher || fail "the fsync failed: $(cat /tmp/q.f)"
	run dmsetup status pool >/dev/null # commits
	expect_used pool 8 "one block discarded, one provisioned"
	got=$(dd if=/dev/mapper/thin bs=4k skip=160 count=1 iflag=direct 2>/dev/null | md5sum)
	[ "$got" = "$(dd if=/tmp/pat.A bs=4k count=1 2>/dev/null | md5sum)" ] || fail "the write's data is not there"
	run dmsetup remove thin
	run dmsetup remove pool
	check_meta /dev/mapper/qmeta
	run dmsetup remove qmeta
}

for_each_impl quiesce
impl_verdict
