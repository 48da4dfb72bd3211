# SPDX-License-Identifier: GPL-2.0
# `make demo`, inside the VM (busybox sh): what rthin does today, on RAM disks,
# with the commands on screen. Every figure in the closing summary is one this
# run measured, and every claim is checked: the first step that does not hold
# ends the demo with "DEMO FAILED at step N (...)" and a non-zero exit;
# "DEMO OK" comes only after all of them.
#
# Also a VM test (tests/vm/95-demo.sh runs it in `make check`).
# Settings: DEMO_READ_SECONDS, rounds of 1 s reads per target in the side-by-side (5);
# DEMO_COLOR=0, plain headings.
. /rthin/tests/lib.sh
set -u

READ_SECONDS=${DEMO_READ_SECONDS:-5}
META=/dev/ram0 DATA=/dev/ram1 # the demo's pool
BENCH_META=/dev/ram3 BENCH_DATA=/dev/ram2 # the side-by-side's (slices of them)
VOL_MIB=1024 # the thin volume: bigger than the pool's data device
BS_KIB=64    # pool block size
BENCH_MIB=64 # the side-by-side's volumes

STEP=0 STEP_NAME="setting up"
if [ "${DEMO_COLOR:-1}" = 1 ]; then B=$(printf '\033[1m') N=$(printf '\033[0m'); else B= N=; fi

# step NAME: a new numbered step (its name is what a failure reports).
step() {
	STEP=$((STEP + 1)) STEP_NAME=$*
	printf '\n%s==> %s. %s%s\n' "$B" "$STEP" "$*" "$N"
}
# fail (lib.sh's helpers call it too): the demo stops here.
fail() {
	printf '\n%sFAILED: %s%s\n' "$B" "$*" "$N"
	echo "DEMO FAILED at step $STEP ($STEP_NAME)"
	exit 1
}
# show CMD...: prints the command, runs it; its failure fails the step.
show() {
	echo "\$ $*"
	"$@" || fail "command failed (exit $?): $*"
}
# show_sh 'SHELL TEXT': the same for a pipeline.
show_sh() {
	echo "\$ $1"
	sh -c "set -o pipefail; $1" || fail "command failed (exit $?): $1"
}
# tell TEXT: an explanation, indented.
tell() { echo "    $*"; }
# expect WHAT GOT WANT: a claim this step makes, checked.
expect() {
	[ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
	echo "    ok: $1: $2"
}
# sum DEV SKIP COUNT [BS]: md5 of COUNT blocks of BS (1M) from block SKIP of DEV, read O_DIRECT.
sum() {
	dd if="$1" bs="${4:-1M}" skip="$2" count="$3" iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1
}
# fsum FILE SKIP COUNT [BS]: the same of a file.
fsum() {
	dd if="$1" bs="${4:-1M}" skip="$2" count="$3" 2>/dev/null | md5sum | cut -d' ' -f1
}
ZERO_MIB=$(dd if=/dev/zero bs=1M count=4 2>/dev/null | md5sum | cut -d' ' -f1)
used() { data_used "$1"; }
devno() { dmsetup info -c --noheadings -o major,minor "$1" | tr -d ' '; }
# counter FILE NAME: one of rthin's debugfs counters.
counter() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
status_legend() {
	tell "(pool status: <transaction id> <used>/<total metadata blocks> <used>/<total data blocks>"
	tell " <held metadata root> <mode> <discards> <when full> <needs_check> <metadata low water>, as dm-thin's)"
}

# ---------------------------------------------------------------------------
step "rthin's device-mapper targets are registered beside the kernel's"
show_sh "dmsetup targets | grep -E '^(rthin|linear)'"
dmsetup targets | grep -q '^rthin-pool ' || fail "no rthin-pool target (did dm-rthin.ko load?)"
dmsetup targets | grep -q '^rthin ' || fail "no rthin target"
version=$(dmsetup targets | awk '$1 == "rthin-pool" { print $2 }')

# ---------------------------------------------------------------------------
step "A pool (metadata on $META, data on $DATA, ${BS_KIB} KiB blocks) and a ${VOL_MIB} MiB thin volume"
dd if=/dev/urandom of=/tmp/old bs=1M count=16 2>/dev/null || fail "making test data"
dd if=/dev/urandom of=/tmp/new bs=1M count=4 2>/dev/null || fail "making test data"
wipe $META # a blank metadata device gets formatted
blkdiscard $DATA 2>/dev/null || true
size=$(sectors $DATA)
show dmsetup create pool --table "0 $size rthin-pool $META $DATA $((BS_KIB * 2)) 0"
show dmsetup message pool 0 "create_thin 1"
show dmsetup create thin --table "0 $((VOL_MIB * 2048)) rthin /dev/mapper/pool 1"
show dmsetup status pool
status_legend
total=$(data_total pool)
pool_mib=$((total * BS_KIB / 1024))
tell "the pool holds $total data blocks ($pool_mib MiB); the thin volume offers $VOL_MIB MiB"
expect "data blocks used by a new pool" "$(used pool)" 0

# ---------------------------------------------------------------------------
step "Provisioning on demand: writes take data blocks, reads of unwritten space do not"
used0=$(used pool)
show dd if=/tmp/old of=/dev/mapper/thin bs=1M count=16 oflag=direct
far=$((700 * 256)) # 4 KiB units: 700 MiB into the volume
show dd if=/tmp/old of=/dev/mapper/thin bs=4k count=1 seek=$far oflag=direct
show dd if=/dev/mapper/thin of=/dev/null bs=1M skip=100 count=64 iflag=direct
show dmsetup status pool thin
used1=$(used pool)
want=$((16 * 1024 / BS_KIB + 1))
tell "16 MiB in ${BS_KIB} KiB blocks is $((want - 1)) blocks, and the lone 4 KiB write at 700 MiB takes one more"
expect "data blocks used after the writes" "$used1" "$((used0 + want))"
expect "thin status (mapped sectors, highest mapped sector)" "$(info thin)" \
	"$((want * BS_KIB * 2)) $(((far / (BS_KIB / 4) + 1) * BS_KIB * 2 - 1))"
expect "16 MiB read back (md5)" "$(sum /dev/mapper/thin 0 16)" "$(fsum /tmp/old 0 16)"
expect "unwritten space reads as zeroes (md5 of 4 MiB at 100 MiB)" "$(sum /dev/mapper/thin 100 4)" "$ZERO_MIB"

# ---------------------------------------------------------------------------
step "A snapshot, taken as LVM takes it: the origin suspended around create_snap"
show dmsetup suspend thin
show dmsetup message pool 0 "create_snap 2 1"
show dmsetup resume thin
show dmsetup create snap --table "0 $((VOL_MIB * 2048)) rthin /dev/mapper/pool 2"
show dmsetup status pool
expect "data blocks used after the snapshot (it shares every block)" "$(used pool)" "$used1"
tell "(the same in one command: rthinctl create-snap pool 2 1; 'rthinctl -v' shows the steps)"

# ---------------------------------------------------------------------------
step "Writes to the origin break sharing; the snapshot keeps the old bytes"
origin_counters=/sys/kernel/debug/rthin-$(devno pool)/$(devno thin)
[ -r "$origin_counters" ] || fail "no debugfs counters at $origin_counters"
broken0=$(counter "$origin_counters" sharing_broken)
show dd if=/tmp/new of=/dev/mapper/thin bs=1M count=4 oflag=direct
show dmsetup status pool
show cat "$origin_counters"
tell "(rthin's counters for the origin since it was activated: bios remapped in the map call,"
tell " bios deferred to a worker, blocks provisioned, shared blocks replaced before a write)"
used2=$(used pool)
broken=$(($(counter "$origin_counters" sharing_broken) - broken0))
new_blocks=$((4 * 1024 / BS_KIB))
expect "shared blocks the origin replaced (sharing_broken)" "$broken" "$new_blocks"
expect "data blocks used: one new block for each" "$used2" "$((used1 + new_blocks))"
expect "the origin reads the new 4 MiB (md5)" "$(sum /dev/mapper/thin 0 4)" "$(fsum /tmp/new 0 4)"
expect "the snapshot still reads the old 16 MiB (md5)" "$(sum /dev/mapper/snap 0 16)" "$(fsum /tmp/old 0 16)"
expect "the snapshot still reads the old 4 KiB at 700 MiB (md5)" "$(sum /dev/mapper/snap $far 1 4k)" \
	"$(fsum /tmp/old 0 1 4k)"

# ---------------------------------------------------------------------------
step "A discard gives blocks back"
show blkdiscard -o 0 -l $((4 << 20)) /dev/mapper/thin
show dmsetup status pool
used3=$(used pool)
expect "data blocks used after discarding the origin's 4 MiB of its own blocks" "$used3" "$((used2 - new_blocks))"
expect "the discarded range of the origin reads as zeroes (md5)" "$(sum /dev/mapper/thin 0 4)" "$ZERO_MIB"
expect "the snapshot still reads the old 16 MiB (md5)" "$(sum /dev/mapper/snap 0 16)" "$(fsum /tmp/old 0 16)"

# ---------------------------------------------------------------------------
step "rthinctl, the userspace tool, on that pool"
show rthinctl status pool
show rthinctl ls pool
echo "\$ rthinctl --json status pool | grep -A8 '\"data\"'"
rthinctl --json status pool >/tmp/status.json || fail "rthinctl --json status pool"
grep -A8 '"data"' /tmp/status.json
json_used=$(grep -o '"used_blocks": [0-9]*' /tmp/status.json | head -1 | cut -d' ' -f2)
expect "used data blocks in rthinctl's JSON, as in the pool's status line" "$json_used" "$(used pool)"
grep -q '"schema": "rthinctl.status/1"' /tmp/status.json || fail "rthinctl's JSON has no schema rthinctl.status/1"

# ---------------------------------------------------------------------------
step "The pool deactivated; its metadata checked and dumped by thin-provisioning-tools"
rthin_status=$(info pool)
show dmsetup remove snap
show dmsetup remove thin
show dmsetup remove pool
show thin_check $META
echo "\$ thin_dump $META | head -12"
thin_dump $META >/tmp/dump.xml 2>/tmp/dump.err || fail "thin_dump: $(cat /tmp/dump.err)"
# (awk: thin_dump ends its last line without a newline)
awk 'NR <= 12' /tmp/dump.xml
lines=$(awk 'END { print NR }' /tmp/dump.xml)
[ "$lines" -le 12 ] || tell "... ($lines lines)"
mappings /tmp/dump.xml 1 >/tmp/map1
mappings /tmp/dump.xml 2 >/tmp/map2
n1=$(wc -l </tmp/map1) n2=$(wc -l </tmp/map2)
shared=$(awk 'NR == FNR { a[$2] = 1; next } $2 in a' /tmp/map1 /tmp/map2 | wc -l)
expect "blocks mapped by device 1 (the origin)" "$n1" "$((used1 - new_blocks))"
expect "blocks mapped by device 2 (the snapshot)" "$n2" "$used1"
expect "data blocks that both devices map (shared)" "$shared" "$((used1 - new_blocks))"

# ---------------------------------------------------------------------------
step "The same metadata and data under the kernel's C dm-thin, and back"
show modprobe dm-thin-pool
show dmsetup create pool --table "0 $size thin-pool $META $DATA $((BS_KIB * 2)) 0"
show dmsetup create thin --table "0 $((VOL_MIB * 2048)) thin /dev/mapper/pool 1"
show dmsetup create snap --table "0 $((VOL_MIB * 2048)) thin /dev/mapper/pool 2"
show dmsetup table
show dmsetup status pool
c_status=$(info pool)
expect "C dm-thin's pool status, as rthin's was at deactivation" "$c_status" "$rthin_status"
expect "the snapshot read through dm-thin: the old 16 MiB (md5)" "$(sum /dev/mapper/snap 0 16)" "$(fsum /tmp/old 0 16)"
expect "the origin read through dm-thin: discarded 4 MiB, then old 12 MiB (md5)" \
	"$(sum /dev/mapper/thin 0 4) $(sum /dev/mapper/thin 4 12)" "$ZERO_MIB $(fsum /tmp/old 4 12)"
show dd if=/tmp/new of=/dev/mapper/thin bs=1M count=1 oflag=direct
c_used=$(used pool)
expect "data blocks used after dm-thin's 1 MiB write" "$c_used" "$((used3 + 1024 / BS_KIB))"
show dmsetup remove snap
show dmsetup remove thin
show dmsetup remove pool
show thin_check $META
tell "... and back to rthin:"
show dmsetup create pool --table "0 $size rthin-pool $META $DATA $((BS_KIB * 2)) 0"
show dmsetup create thin --table "0 $((VOL_MIB * 2048)) rthin /dev/mapper/pool 1"
show dmsetup status pool
expect "data blocks used, as dm-thin left them" "$(used pool)" "$c_used"
expect "dm-thin's 1 MiB read through rthin (md5)" "$(sum /dev/mapper/thin 0 1)" "$(fsum /tmp/new 0 1)"
show dmsetup remove thin
show dmsetup remove pool

# ---------------------------------------------------------------------------
step "Side by side: 4 KiB random reads on dm-linear, the C dm-thin and rthin (a TCG toy figure)"
tell "three ${BENCH_MIB} MiB volumes, their data on slices of one RAM disk ($BENCH_DATA), pool metadata on"
tell "slices of $BENCH_META; each volume fully written first, then read in turns of 1 s each,"
tell "$READ_SECONDS rounds, so that a slow spell of the host falls on all three"
blkdiscard $BENCH_DATA 2>/dev/null || true
slice=$(((BENCH_MIB + 16) * 2048)) # a pool's data: the volume and 16 MiB spare
show dmsetup create lin --table "0 $((BENCH_MIB * 2048)) linear $BENCH_DATA 0"
for impl in dmthin rthin; do
	if [ $impl = rthin ]; then
		pool_t=rthin-pool thin_t=rthin off=$((BENCH_MIB * 2048 + slice)) moff=32768
	else
		pool_t=thin-pool thin_t=thin off=$((BENCH_MIB * 2048)) moff=0
	fi
	show dmsetup create ${impl}-meta --table "0 32768 linear $BENCH_META $moff"
	show dmsetup create ${impl}-data --table "0 $slice linear $BENCH_DATA $off"
	wipe /dev/mapper/${impl}-meta
	show dmsetup create ${impl}-pool --table \
		"0 $slice $pool_t /dev/mapper/${impl}-meta /dev/mapper/${impl}-data 128 0 1 skip_block_zeroing"
	show dmsetup message ${impl}-pool 0 "create_thin 1"
	show dmsetup create $impl --table "0 $((BENCH_MIB * 2048)) $thin_t /dev/mapper/${impl}-pool 1"
done
for t in lin dmthin rthin; do
	show dd if=/dev/urandom of=/dev/mapper/$t bs=1M count=$BENCH_MIB oflag=direct
done
for impl in dmthin rthin; do
	expect "$impl: data blocks provisioned" "$(used ${impl}-pool)" "$((BENCH_MIB * 1024 / BS_KIB))"
done
FIO="--rw=randread --bs=4k --ioengine=libaio --iodepth=32 --numjobs=2 --direct=1 --group_reporting"
FIO="$FIO --time_based --runtime=1 --size=${BENCH_MIB}M --output-format=terse --terse-version=3"
echo "\$ fio --name=NAME --filename=/dev/mapper/NAME $FIO   (NAME: lin, dmthin, rthin in turn)"
# read_run NAME: one 1 s fio run on /dev/mapper/NAME; its IOPS go to /tmp/iops.NAME.
read_run() {
	(cd /tmp && fio --name="$1" --filename=/dev/mapper/$1 $FIO) >/tmp/fio.$1 2>&1 || {
		cat /tmp/fio.$1
		fail "fio on $1"
	}
	iops=$(awk -F';' -v n="$1" '$3 == n { printf "%d", $8 }' /tmp/fio.$1)
	errs=$(awk -F';' -v n="$1" '$3 == n { print $5 }' /tmp/fio.$1)
	[ "$errs" = 0 ] || fail "$1: fio reports error '$errs': $(cat /tmp/fio.$1)"
	[ "${iops:-0}" -gt 0 ] || fail "$1: no IOPS in fio's output: $(cat /tmp/fio.$1)"
	printf ' %9s' "$iops"
	echo "$iops" >>/tmp/iops.$1
}
rm -f /tmp/iops.*
printf '    %-8s %9s %9s %9s\n' round lin dmthin rthin
r=1
while [ $r -le "$READ_SECONDS" ]; do
	printf '    %-8s' $r
	for t in lin dmthin rthin; do read_run $t; done
	echo
	r=$((r + 1))
done
median() {
	sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%d\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
IOPS_linear=$(median /tmp/iops.lin) IOPS_dmthin=$(median /tmp/iops.dmthin) IOPS_rthin=$(median /tmp/iops.rthin)
printf '    %-8s %9s %9s %9s\n' median "$IOPS_linear" "$IOPS_dmthin" "$IOPS_rthin"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
r_lin=$(ratio "$IOPS_rthin" "$IOPS_linear") r_c=$(ratio "$IOPS_rthin" "$IOPS_dmthin")
tell "rthin = $r_lin x dm-linear, $r_c x the C dm-thin (median IOPS)"
tell "A toy figure: ${READ_SECONDS} s per target in a VM under software emulation (TCG) on a shared"
tell "host. 'make bench' measures properly (repetitions, more cases; Documentation/performance.md)."
for d in lin dmthin rthin dmthin-pool rthin-pool dmthin-meta dmthin-data rthin-meta rthin-data; do
	dmsetup remove $d || fail "removing $d"
done

# ---------------------------------------------------------------------------
STEP_NAME="summary"
printf '\n%s==> What this run showed (every figure above was measured in it)%s\n' "$B" "$N"
cat <<TXT
    - dm-rthin.ko registered its targets rthin-pool and rthin ($version) beside the kernel's.
    - Provisioning on demand: 16 MiB and 4 KiB written to a $VOL_MIB MiB thin volume on a
      $pool_mib MiB pool took $((used1 - used0)) blocks of $BS_KIB KiB; reading 64 MiB of unwritten space took none.
    - A snapshot (suspend, create_snap, resume) took no data blocks. 4 MiB written to the
      origin broke the sharing of $broken blocks (rthin's sharing_broken counter; the pool
      went from $used1 to $used2 used blocks) and the snapshot still read its old bytes.
    - Discarding those 4 MiB gave $((used2 - used3)) blocks back ($used2 -> $used3 used).
    - rthinctl reported the pool's $json_used used blocks, as its status line did.
    - The deactivated metadata passed thin_check; thin_dump showed device 1 mapping $n1
      blocks and device 2 mapping $n2, $shared of them shared.
    - The C dm-thin opened the same pool (status as rthin's), read both devices back
      intact and wrote 1 MiB; rthin opened it again ($c_used used blocks) and read that back.
    - 4 KiB random reads, ${READ_SECONDS} s per target in 1 s turns (TCG toy figure, see 'make bench'):
      median dm-linear $IOPS_linear IOPS, dm-thin $IOPS_dmthin, rthin $IOPS_rthin: rthin = $r_lin x linear, $r_c x dm-thin.
TXT
echo "DEMO OK"
