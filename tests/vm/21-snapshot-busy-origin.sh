# SPDX-License-Identifier: GPL-2.0
# Snapshots of an origin that is being written, as LVM takes them (origin
# suspended around create_snap), with the origin's mappings in the pool's
# cache: every snapshot holds exactly the origin as of its suspend, and the
# origin ends with every write. One writer issues 4 KiB O_DIRECT writes one
# after another and logs each that completed; a suspend waits for the one in
# flight, so a snapshot holds the first L or L+1 writes, where L is the count
# logged when the suspend returned.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
vol=$((16 * 2048)) # 16 MiB: 256 blocks, 4096 pieces of 4 KiB
snaps=5
mkpool pool $meta $data "$(sectors $data)"
run dmsetup message pool 0 "create_thin 1"
mkthin origin pool 1 $vol
O=/dev/mapper/origin
model_new /tmp/model 16
# Every block mapped (the pattern files are 8 MiB): no write finds a hole,
# whose lookup would refresh its leaf's cached entries.
put $O /tmp/model A 0 1048576 8
put $O /tmp/model C 8388608 1048576 8
# Read once: every block cached, so writes take the fast path until a snapshot.
run dd if=$O of=/dev/null bs=1M iflag=direct 2>/dev/null
pattern B

# write_piece TARGET G [DIRECT]: write number G: 4 KiB of pattern B (its piece
# G mod 2048) at piece G * 997 mod 4096 of TARGET.
write_piece() {
	dd if=/tmp/pat.B of="$1" bs=4096 count=1 skip=$(($2 % 2048)) seek=$((($2 * 997) % 4096)) \
		conv=notrunc ${3:+oflag=direct} 2>/dev/null
}

rm -f /tmp/stop /tmp/progress
(
	g=1
	while [ ! -e /tmp/stop ]; do
		write_piece $O $g direct || { echo "write $g failed" >/tmp/writer-failed; break; }
		echo $g >/tmp/progress.tmp && mv /tmp/progress.tmp /tmp/progress
		g=$((g + 1))
	done
) &
writer=$!

i=1
while [ $i -le $snaps ]; do
	sleep 1
	run dmsetup suspend origin
	logged=$(cat /tmp/progress 2>/dev/null || echo 0)
	run dmsetup message pool 0 "create_snap $((i + 1)) 1"
	run dmsetup resume origin
	eval "logged_$i=$logged"
	echo "snapshot $i: after $logged or $((logged + 1)) writes"
	i=$((i + 1))
done
touch /tmp/stop
wait $writer
[ -e /tmp/writer-failed ] && fail "$(cat /tmp/writer-failed)"
total=$(cat /tmp/progress)
echo "$total writes in all"
[ "$total" -gt $((snaps * 2)) ] || fail "only $total writes: the origin was not busy"

# Replay the writes into the model, checking each snapshot at its point.
g=1
i=1
while [ $i -le $snaps ]; do
	eval "logged=\$logged_$i"
	while [ $g -le "$logged" ]; do
		write_piece /tmp/model $g
		g=$((g + 1))
	done
	mkthin snap pool $((i + 1)) $vol
	got=$(dd if=/dev/mapper/snap bs=1M iflag=direct 2>/dev/null | md5sum)
	want_l=$(md5sum </tmp/model)
	cp /tmp/model /tmp/model.next
	write_piece /tmp/model.next $g
	want_l1=$(md5sum </tmp/model.next)
	[ "$got" = "$want_l" ] || [ "$got" = "$want_l1" ] ||
		fail "snapshot $i holds neither the origin after $logged writes nor after $((logged + 1))"
	echo "ok: snapshot $i holds the origin as of its suspend"
	run dmsetup remove snap
	i=$((i + 1))
done
while [ $g -le "$total" ]; do
	write_piece /tmp/model $g
	g=$((g + 1))
done
same $O /tmp/model "the origin after all $total writes"
rm -f /tmp/model.next
run dmsetup remove origin
run dmsetup remove pool
check_meta $meta
