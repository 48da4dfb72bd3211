# SPDX-License-Identifier: GPL-2.0
# A flush must not complete before the commit that covers the writes before
# it is on disk, even when that commit is already being written when the
# flush arrives (issue 13). The metadata device sits behind dm-delay, so each
# commit takes seconds to reach the RAM disk below; pool INFO statuses in a
# loop (as lvs and dmeventd send them) keep commits coming. Each round
# provisions a block with a plain O_DIRECT write, lets a commit start, then
# fsyncs the thin and at once copies the RAM disk under the delay: the copy is
# what a power cut right after the fsync would leave. The block must be
# mapped there.
. /rthin/tests/lib.sh

META_SECTORS=32768 # 16 MiB: quick to copy
DELAY_MS=300       # per metadata write and flush

uptime_ms() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }

scenario() {
	wipe /dev/ram0
	run dmsetup create fdc-meta --table \
		"0 $META_SECTORS delay /dev/ram0 0 0 /dev/ram0 0 $DELAY_MS"
	data=/dev/ram1
	openpool fdc-pool /dev/mapper/fdc-meta $data "$(sectors $data)"
	run dmsetup message fdc-pool 0 "create_thin 9"
	mkthin fdc-thin fdc-pool 9 131072
	thin=/dev/mapper/fdc-thin
	rm -f /tmp/fdc.stop
	(while [ ! -e /tmp/fdc.stop ]; do dmsetup status fdc-pool >/dev/null; done) &
	looper=$!
	lost=0
	for v in 1 2 3 4 5 6; do
		run dd if=/dev/urandom of=$thin bs=64k seek=$v count=1 oflag=direct 2>/dev/null
		# The status loop starts a commit that covers the write (each takes
		# four delayed steps: blocks, flush, superblock, flush).
		sleep 0.3
		t0=$(uptime_ms)
		run dd if=/dev/null of=$thin conv=notrunc,fsync 2>/dev/null
		t1=$(uptime_ms)
		# The power cut: the metadata as it is on the RAM disk right now.
		dd if=/dev/ram0 of=/tmp/fdc.img bs=1M count=$((META_SECTORS / 2048)) iflag=direct 2>/dev/null ||
			fail "copying the metadata"
		thin_dump /tmp/fdc.img >/tmp/fdc.xml 2>/tmp/fdc.err || fail "thin_dump of the copy: $(cat /tmp/fdc.err)"
		if mappings /tmp/fdc.xml 9 | grep -q "^$v "; then
			echo "round $v: fsync took $((t1 - t0)) ms; block $v mapped on disk"
		else
			echo "round $v: fsync took $((t1 - t0)) ms; block $v NOT mapped on disk:" \
				"$(mappings /tmp/fdc.xml 9 | tr '\n' ' ')"
			lost=$((lost + 1))
		fi
	done
	touch /tmp/fdc.stop
	wait $looper
	[ $lost = 0 ] || fail "$lost of 6 fsyncs returned before the commit mapping their block was on disk"
}

for_each_impl scenario
impl_verdict
