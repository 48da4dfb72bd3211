# SPDX-License-Identifier: GPL-2.0
# rthinctl status, ls, --json, --raw, status --check and watch against live
# C dm-thin pools: numbers agree with dmsetup's status lines, including an
# out-of-data-space pool with error_if_no_space and an ignore_discard pool.
. /rthin/tests/lib.sh

run modprobe dm-thin-pool
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size thin-pool $meta $data 128 0 1 ignore_discard"
run dmsetup message cpool 0 "create_thin 1"
run dmsetup create thin1 --table "0 16384 thin /dev/mapper/cpool 1"
run dd if=/dev/zero of=/dev/mapper/thin1 bs=64k count=5 seek=10 conv=fsync 2>/dev/null

# The pool line: rthinctl --raw must agree with dmsetup's numbers.
line=$(dmsetup status --noflush cpool)
echo "dmsetup: $line"
set -- $line
meta_used=${5%/*} meta_total=${5#*/} data_used=${6%/*} data_total=${6#*/}
[ "$data_used" = 5 ] || fail "expected 5 data blocks used: $line"
raw=$(rthinctl --raw status cpool | head -1) || fail "status --raw failed"
echo "rthinctl: $raw"
want="cpool:thin-pool:rw:0:$((data_used * 65536)):$((data_total * 65536)):"
case $raw in "$want"*) ;; *) fail "raw pool row '$raw' does not start with '$want'" ;; esac
case $raw in *":$((meta_used * 4096)):$((meta_total * 4096)):"*) ;; *) fail "metadata bytes wrong: $raw" ;; esac
case $raw in *"discard=ignore"*) ;; *) fail "ignore_discard not shown: $raw" ;; esac

# The thin line.
tl=$(dmsetup status thin1)
echo "dmsetup thin: $tl"
set -- $tl
[ "$4" = 640 ] && [ "$5" = 1919 ] || fail "unexpected thin status: $tl"
expect_rc 0 "thin1:cpool:1:8388608:327680:3.91:983040:ok" rthinctl --raw status thin1

# Default table, units, JSON, ls.
expect_rc 0 "DATA%" rthinctl status
expect_rc 0 "320.00k" rthinctl status --units k thin1
expect_rc 0 "327.68K" rthinctl status --units K thin1
expect_rc 0 '"schema": "rthinctl.status/1"' rthinctl status --json
case $out in *'"mapped_sectors": 640'*'"highest_mapped_sector": 1919'*) ;; *) fail "JSON thin numbers: $out" ;; esac
case $out in *'"discards": "ignore"'*) ;; *) fail "JSON discards: $out" ;; esac
case $out in *'"block_size_bytes": 65536'*) ;; *) fail "JSON block size: $out" ;; esac
expect_rc 0 "thin1" rthinctl ls
expect_rc 0 "pool" rthinctl ls cpool
expect_rc 0 '"dev_id": 1' rthinctl ls --json cpool
expect_rc 3 "no device-mapper device" rthinctl status nosuch
expect_rc 3 "no device-mapper device" rthinctl ls nosuch

# status --check: OK, then thresholds make it WARNING and CRITICAL.
expect_rc 0 "OK" rthinctl status --check
expect_rc 1 "WARNING: cpool: data 0.12% used" rthinctl status --check --warn 0.001 --crit 50
expect_rc 2 "CRITICAL: cpool: data" rthinctl status --check --warn 0.001 --crit 0.001
expect_rc 0 '"level": "OK"' rthinctl --json status --check
expect_rc 3 "UNKNOWN" rthinctl status --check nosuch

# watch: two samples, then JSON lines.
expect_rc 0 "cpool" rthinctl watch --interval 0.2 --count 2
[ "$(echo "$out" | grep -c cpool)" = 2 ] || fail "watch printed: $out"
expect_rc 0 '"schema":"rthinctl.watch/1"' rthinctl --json watch cpool --interval 0.2 --count 2
# A DM event (the pool switching to read-only) wakes watch before its 30 s
# interval; only the pool whose own event counter moved is marked (not a
# second, idle pool), and the time column is the local time of day.
wipe /dev/ram0
run dmsetup create opool --table "0 $(sectors /dev/ram1) thin-pool /dev/ram0 /dev/ram1 128 0"
start=$(date +%s)
(
	sleep 2
	dmsetup reload cpool --table "0 $size thin-pool $meta $data 128 0 2 ignore_discard read_only"
	dmsetup suspend cpool
	dmsetup resume cpool
) &
expect_rc 0 "yes" rthinctl watch cpool opool --interval 30 --count 2
wait
[ $(($(date +%s) - start)) -lt 20 ] || fail "watch did not wake on the DM event"
last_event() { echo "$out" | awk -v p="$1" '$2 == p { e = $NF } END { print e }'; }
[ "$(last_event cpool)" = yes ] || fail "cpool's event not marked: $out"
[ "$(last_event opool)" = - ] || fail "idle opool marked with an event: $out"
echo "$out" | awk '$2 == "opool" { print $1 }' | grep -qxE '[0-9]{2}:[0-9]{2}:[0-9]{2}' ||
	fail "time column is not HH:MM:SS: $out"
run dmsetup remove opool
expect_rc 2 "CRITICAL: cpool: pool is read-only" rthinctl status --check cpool

run dmsetup remove thin1
run dmsetup remove cpool

# A small pool (16 data blocks) with error_if_no_space runs out of space.
wipe $meta
run dmsetup create spool --table "0 2048 thin-pool $meta $data 128 4 1 error_if_no_space"
run dmsetup message spool 0 "create_thin 1"
run dmsetup create sthin --table "0 8192 thin /dev/mapper/spool 1"
dd if=/dev/zero of=/dev/mapper/sthin bs=64k count=32 oflag=direct 2>/dev/null && fail "writing past the pool's end succeeded"
dmsetup status spool
expect_rc 0 "out_of_data_space" rthinctl status spool
expect_rc 0 '"when_full": "error"' rthinctl --json status spool
expect_rc 2 "spool: pool is out of data space (erroring on new writes)" rthinctl status --check spool
case $out in *"low-water mark 4"*) ;; *) fail "low-water mark not reported: $out" ;; esac
# Messages are still accepted out of data space.
expect_rc 0 "created thin id 2" rthinctl create-thin spool --id 2
run dmsetup remove sthin
run dmsetup remove spool
run thin_check $meta
