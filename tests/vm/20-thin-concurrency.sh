# SPDX-License-Identifier: GPL-2.0
# The I/O path under concurrency, on every vCPU: several fio jobs with deep
# queues write 4 KiB pieces (zero-filled provisions, bios parking on cells)
# and whole blocks (hooked overwrites) into the same volume while snapshots
# of it are taken and deleted, then every block is verified; the metadata
# passes thin_check and the snapshots' blocks are accounted for.
. /rthin/tests/lib.sh

use_impl rthin

meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
vol=$((96 * 2048))
mkpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $vol

# Four jobs on disjoint 24 MiB regions (fio verifies each job's own writes):
# two write 4 KiB pieces, two whole 64 KiB blocks; each region is written
# twice, the second pass over blocks the first provisioned (and that the
# snapshots share by then).
cat >/tmp/mixed.fio <<JOB
[global]
filename=/dev/mapper/thin
rw=randwrite
ioengine=libaio
iodepth=16
direct=1
size=24M
loops=2
verify=crc32c
do_verify=1
verify_fatal=1
randrepeat=0
[small1]
bs=4k
offset=0
[small2]
bs=4k
offset=24M
[whole1]
bs=64k
offset=48M
[whole2]
bs=64k
offset=72M
JOB
fio --output-format=terse /tmp/mixed.fio >/tmp/fio.out 2>/tmp/fio.err &
fio_pid=$!
id=2
while kill -0 $fio_pid 2>/dev/null && [ $id -lt 12 ]; do
	run dmsetup suspend thin
	run dmsetup message pool 0 "create_snap $id 1"
	run dmsetup resume thin
	[ $id -gt 3 ] && run dmsetup message pool 0 "delete $((id - 2))"
	id=$((id + 1))
	sleep 1
done
wait $fio_pid || fail "fio failed: $(cat /tmp/fio.err)"
echo "$((id - 2)) snapshots taken during the run"
[ $id -gt 3 ] || fail "fio finished before two snapshots were taken"
cat /sys/kernel/debug/rthin-*/*

run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta
