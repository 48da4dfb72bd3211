# SPDX-License-Identifier: GPL-2.0
# Randomised table lines and pool messages (issue 7), each given to rthin
# and to the C dm-thin: pool and thin tables through `dmsetup create` and
# through `dmsetup reload` of a live device, and messages to a live pool.
# Words come from wrong argument counts, huge, negative and non-numeric
# numbers, missing devices, bad ids and features, odd block sizes and low
# water marks. Checks, per input:
#   - rthin accepts exactly what dm-thin accepts;
#   - a refusal has a kernel log line from the target and changes nothing:
#     the pool's status line is unchanged, a failed reload leaves the live
#     table loaded and working;
# and at the end the two pools' metadata (thin_dump) are identical: the
# accepted messages did the same on both.
# RTHIN_FUZZ_SEED picks the seed (printed), RTHIN_FUZZ_N the number of inputs.
. /rthin/tests/lib.sh

seed=${RTHIN_FUZZ_SEED:-82}
n=${RTHIN_FUZZ_N:-40}
echo "seed $seed, $n inputs (RTHIN_FUZZ_SEED / RTHIN_FUZZ_N to change)"
modprobe dm-thin-pool || fail "modprobe dm-thin-pool"

# Live pools: rthin's on ram1, dm-thin's on ram2, each with thin 1 active as
# live_<impl>; create attempts use ram3 and a third metadata area.
M=$((16 * 2048))
run dmsetup create meta_rthin --table "0 $M linear /dev/ram0 0"
run dmsetup create meta_c --table "0 $M linear /dev/ram0 $M"
run dmsetup create meta_new --table "0 $M linear /dev/ram0 $((2 * M))"
len=$(sectors /dev/ram1)
for impl in rthin c; do
	use_impl $impl
	wipe /dev/mapper/meta_$impl
	data=/dev/ram1
	[ $impl = c ] && data=/dev/ram2
	openpool pool_$impl /dev/mapper/meta_$impl $data $len
	run dmsetup message pool_$impl 0 "create_thin 1"
	run dmsetup message pool_$impl 0 "create_thin 2"
	mkthin live_$impl pool_$impl 1 2048
done

# The inputs, one a line: KIND WORDS... with @ placeholders filled in per
# implementation (@P pool target, @T thin target, @pool its live pool,
# @other the other implementation's pool, @meta/@data the device pair of
# the kind: fresh for create, the live pool's for reload).
awk -v seed="$seed" -v n="$n" -v len="$len" 'BEGIN {
	srand(seed)
	split("0 1 -1 7 64 127 128 129 192 256 1024 65536 2097152 2097280 4294967296 16777215 16777216 " \
		"9223372036854775807 9223372036854775808 18446744073709551615 18446744073709551616 " \
		"99999999999999999999999 abc 0x80 1e3 +5 12abc 007 -0", nums, " ")
	split("128 128 128 256 1024 2097152 0 64 127 192 129 2097280 4194304 -128 4294967424 abc 0x80", bss, " ")
	split("0 0 0 1 16384 " len " 4096 4097 18446744073709551615 18446744073709551616 -1 abc", lwms, " ")
	split("skip_block_zeroing ignore_discard no_discard_passdown read_only error_if_no_space " \
		"bogus Read_only error_if_no_space", feats, " ")
	split("create_thin create_snap delete set_transaction_id reserve_metadata_snap release_metadata_snap " \
		"create_thin create_snap delete set_transaction_id bogus CREATE_THIN create_thin_ delete", msgs, " ")
	split("1 2 3 4 5 6 7 0 3 4 5 6 16777215 16777216 -1 abc 18446744073709551616 99", ids, " ")
	nargs["create_thin"] = 1; nargs["create_snap"] = 2; nargs["delete"] = 1
	nargs["set_transaction_id"] = 2; nargs["reserve_metadata_snap"] = 0; nargs["release_metadata_snap"] = 0
	split("@meta @meta @meta @meta /dev/nonexistent @data 253:250 /dev/null", metas, " ")
	split("@data @data @data @data /dev/nonexistent @meta 7:250 /dev/null", datas, " ")
	split("@pool @pool @pool @pool @pool /dev/nonexistent @other /dev/ram3 @meta", pools, " ")
	for (i = 0; i < n; i++) {
		k = int(rand() * 6)
		if (k <= 1) {
			kind = k == 0 ? "pool-create" : "pool-reload"
			w = pick(metas) " " pick(datas) " " pick(bss) " " pick(lwms)
			nf = int(rand() * 4)
			cnt = nf
			if (rand() < 0.2) cnt = pick(nums)
			if (nf > 0 || rand() < 0.3) w = w " " cnt
			for (j = 0; j < nf; j++) w = w " " pick(feats)
			line = kind " 0 " len " @P " mangle(w)
		} else if (k <= 3) {
			kind = k == 2 ? "thin-create" : "thin-reload"
			w = pick(pools) " " pick(ids)
			r = rand()
			if (r < 0.15) w = w " /dev/ram3"
			else if (r < 0.25) w = w " /dev/nonexistent"
			else if (r < 0.3) w = w " @pool"
			line = kind " 0 2048 @T " mangle(w)
		} else {
			m = pick(msgs)
			# Mostly the right number of arguments, so that some messages
			# are valid and change the metadata (the same on both).
			na = int(rand() * 4)
			if (rand() < 0.6) na = (m in nargs) ? nargs[m] : 1
			w = m
			for (j = 0; j < na; j++) w = w " " pick(ids)
			line = "message " w
		}
		print line
	}
}
function pick(a,   c) { c = 0; for (x in a) c++; return a[1 + int(rand() * c)] }
# Sometimes one word too many or too few.
function mangle(w,   p, c) {
	r = rand()
	if (r < 0.1) return w " extra"
	if (r < 0.2) { c = split(w, p, " "); w = p[1]; for (x = 2; x < c; x++) w = w " " p[x]; return w }
	return w
}' >/tmp/fuzz.in

# fill IMPL KIND WORDS: sets IN to the input for IMPL.
fill() {
	local impl=$1 kind=$2 other=rthin meta=/dev/mapper/meta_$1 data=/dev/ram1
	shift 2
	# use_impl without its modprobe: this runs for every input.
	POOL_T=rthin-pool THIN_T=rthin
	[ $impl = rthin ] && other=c
	[ $impl = c ] && data=/dev/ram2 POOL_T=thin-pool THIN_T=thin
	[ $kind = pool-create ] && meta=/dev/mapper/meta_new data=/dev/ram3
	IN="$*"
	IN=${IN//@P/$POOL_T}
	IN=${IN//@T/$THIN_T}
	IN=${IN//@pool//dev/mapper/pool_$impl}
	IN=${IN//@other//dev/mapper/pool_$other}
	IN=${IN//@meta/$meta}
	IN=${IN//@data/$data}
}
# attempt IMPL KIND WORDS: runs the input on IMPL; sets RC to 0 (accepted,
# then the create or reload is undone) or 1 and IN to the input.
attempt() {
	local impl=$1 kind=$2 dev
	fill "$@"
	RC=1
	case $kind in
	pool-create)
		dd if=/dev/zero of=/dev/mapper/meta_new bs=4096 count=1 oflag=direct 2>/dev/null
		timeout 60 dmsetup create fz --table "$IN" 2>/dev/null || return 0
		dmsetup remove fz || fail "removing fz ($IN)"
		;;
	thin-create)
		timeout 60 dmsetup create fz --table "$IN" 2>/dev/null || return 0
		dmsetup remove fz || fail "removing fz ($IN)"
		;;
	pool-reload | thin-reload)
		dev=pool_$impl
		[ $kind = thin-reload ] && dev=live_$impl
		timeout 60 dmsetup reload $dev --table "$IN" 2>/dev/null || return 0
		dmsetup clear $dev || fail "clearing the inactive table of $dev ($IN)"
		;;
	message) timeout 60 dmsetup message pool_$impl 0 "$IN" 2>/dev/null || return 0 ;;
	esac
	RC=0
}

tables() { echo "$(dmsetup table pool_rthin)|$(dmsetup table live_rthin)"; }
# Writes to the live thins go to both, so that the final dumps compare.
dd if=/dev/urandom of=/tmp/blk bs=4k count=1 2>/dev/null
write_live() {
	for impl in rthin c; do
		dd if=/tmp/blk of=/dev/mapper/live_$impl bs=4k count=1 oflag=direct 2>/dev/null ||
			fail "$1: live_$impl does not take writes"
	done
}
verdict() { [ $1 = 0 ] && echo accepts || echo refuses; }
i=0 diffs=0 refused=0 accepted=0
while read -r kind words; do
	i=$((i + 1))
	before=$(info pool_rthin)
	case $kind in *reload) tbefore=$(tables) ;; esac
	echo "rthin-test: fuzz $i rthin" >/dev/kmsg
	attempt rthin $kind $words
	r=$RC in_r=$IN
	echo "rthin-test: fuzz $i c" >/dev/kmsg
	attempt c $kind $words
	if [ $r != $RC ]; then
		diffs=$((diffs + 1))
		echo "DIFF $i $kind '$in_r': rthin $(verdict $r), dm-thin $(verdict $RC) ('$IN')"
	fi
	if [ $r = 0 ]; then
		accepted=$((accepted + 1))
		echo "$i $kind '$in_r': accepted"
		continue
	fi
	refused=$((refused + 1))
	why=$(dmesg | tail -80 | awk -v a="rthin-test: fuzz $i rthin\$" -v b="rthin-test: fuzz $i c\$" '
		$0 ~ a { on = 1; next }
		$0 ~ b { exit }
		on { sub(/^\[[^]]*\] /, ""); print; exit }')
	echo "$i $kind '$in_r': refused: $why"
	[ -n "$why" ] || fail "input $i ($kind '$in_r'): refused without a kernel log line"
	after=$(info pool_rthin)
	[ "$before" = "$after" ] || fail "input $i ($kind '$in_r'): refused, but the pool status changed: '$before' -> '$after'"
	case $kind in
	*reload)
		[ "$tbefore" = "$(tables)" ] || fail "input $i ($kind '$in_r'): refused, but a live table changed: '$tbefore' -> '$(tables)'"
		write_live "input $i: after a failed reload"
		;;
	esac
done </tmp/fuzz.in
write_live "after the inputs"

# Same accepted messages, same metadata: compare the two pools' dumps.
for impl in rthin c; do
	run dmsetup remove live_$impl
	run dmsetup remove pool_$impl
	thin_dump /dev/mapper/meta_$impl >/tmp/dump.$impl 2>&1 || { cat /tmp/dump.$impl; fail "thin_dump of $impl's pool"; }
done
cmp /tmp/dump.rthin /tmp/dump.c >/dev/null || {
	diff /tmp/dump.rthin /tmp/dump.c | head -20
	fail "rthin's and dm-thin's metadata differ after the same messages"
}
echo "inputs $i: refused $refused, accepted $accepted, differences from dm-thin $diffs"
[ $i = "$n" ] || fail "ran $i inputs of $n"
[ $diffs = 0 ] || fail "$diffs inputs where rthin and dm-thin disagree"
