# SPDX-License-Identifier: GPL-2.0
# rthinctl's pool messages against the C dm-thin (thin-pool/thin): every
# message, every errno it can get, the sentence and exit code for each, and
# create-snap's suspend/resume of the active origin (also when it fails).
# 50-rthinctl-rthin.sh runs the same script against rthin-pool/rthin by
# setting T_POOL and T_THIN.
. /rthin/tests/lib.sh
T_POOL=${T_POOL:-thin-pool}
T_THIN=${T_THIN:-thin}

state() { dmsetup info "$1" | sed -n 's/^State: *//p'; }
txn() { dmsetup status --noflush cpool | cut -d' ' -f4; }
held() { dmsetup status --noflush cpool | cut -d' ' -f7; }

[ "$T_POOL" = thin-pool ] && run modprobe dm-thin-pool
meta=/dev/ram2 data=/dev/ram3
wipe $meta
size=$(sectors $data)
run dmsetup create cpool --table "0 $size $T_POOL $meta $data 128 0 0"

expect_rc 0 "target $T_POOL" rthinctl version

# create-thin: explicit, kernel alias with positional id, duplicate, auto.
expect_rc 0 "created thin id 1 in pool cpool" rthinctl create-thin cpool --id 1
expect_rc 1 "thin device id 1 is already in use in pool cpool" rthinctl create_thin cpool 1
case $out in *'dmsetup message cpool 0 "create_thin 1"'*) ;; *) fail "no dmsetup equivalent: $out" ;; esac
expect_rc 0 "created thin id 2" rthinctl create-thin /dev/mapper/cpool --id auto
expect_rc 0 "created thin id 5" rthinctl create-thin cpool 5
# Client-side validation: never reaches the kernel.
expect_rc 2 "invalid thin id" rthinctl create-thin cpool --id 16777216
expect_rc 2 "Message received with 3 arguments instead of 2." rthinctl message cpool create_thin 1 2
expect_rc 2 "" rthinctl create-thin cpool

run dmsetup create thin1 --table "0 8192 $T_THIN /dev/mapper/cpool 1"
run dd if=/dev/urandom of=/dev/mapper/thin1 bs=64k count=4 conv=fsync 2>/dev/null
# --id auto starts above the active ids: 1 is active, so 2 (taken) then 3.
expect_rc 0 "created snapshot id 3 of thin id 1 in pool cpool (suspended and resumed thin1)" \
	rthinctl -v create-snap cpool --id auto --origin 1
case $out in *"dmsetup suspend thin1"*"dmsetup resume thin1"*) ;; *) fail "no suspend/resume shown: $out" ;; esac
[ "$(state thin1)" = ACTIVE ] || fail "thin1 left $(state thin1)"

# create-snap failures resume the origin too.
expect_rc 1 "thin device id 3 is already in use" rthinctl create_snap cpool 3 1
[ "$(state thin1)" = ACTIVE ] || fail "thin1 left $(state thin1) after a failed create_snap"
expect_rc 3 "origin thin id 99 does not exist in pool cpool" rthinctl create-snap cpool --id 20 --origin 99
expect_rc 0 "created snapshot id 4 of thin id 1 in pool cpool" rthinctl create-snap cpool --id 4 --origin 1 --no-suspend
[ "$(state thin1)" = ACTIVE ] || fail "thin1 left $(state thin1)"
expect_rc 0 "dmsetup suspend thin1" rthinctl create-snap cpool --id 6 --origin 1 --dry-run
dmsetup message cpool 0 "create_thin 6" || fail "--dry-run created id 6"

# delete: active, missing, fine.
expect_rc 1 "thin id 1 in pool cpool is active as thin1; remove it first (dmsetup remove thin1)" rthinctl delete cpool --id 1
expect_rc 3 "pool cpool has no thin device with id 77" rthinctl delete cpool 77
expect_rc 0 "deleted thin id 4 from pool cpool" rthinctl delete cpool --id 4

# set-transaction-id: guard before sending, the kernel's own EINVAL, bump.
expect_rc 0 "transaction id 0 -> 1" rthinctl set-transaction-id cpool 0 1
[ "$(txn)" = 1 ] || fail "transaction id $(txn), want 1"
expect_rc 1 "transaction id is 1, not 0" rthinctl set_transaction_id cpool 0 2
case $out in *"not sent"*) ;; *) fail "guard did not stop the message: $out" ;; esac
expect_rc 1 "transaction id is 1, not 0" rthinctl message cpool set_transaction_id 0 2
[ "$(txn)" = 1 ] || fail "transaction id changed to $(txn)"
expect_rc 0 "transaction id 1 -> 2" rthinctl set-transaction-id cpool --bump
expect_rc 1 "transaction id is 2, not 7 as --expect-txn requires" rthinctl create-thin cpool --id 30 --expect-txn 7
expect_rc 0 "created thin id 30" rthinctl create-thin cpool --id 30 --expect-txn 2

# Metadata snapshot: reserve, busy, show, release, nothing to release.
expect_rc 0 "holds no metadata snapshot" rthinctl metadata-snap show cpool
expect_rc 0 "now holds a metadata snapshot at block" rthinctl metadata-snap reserve cpool
root=$(held)
[ "$root" != - ] || fail "status shows no held root"
expect_rc 1 "already holds a metadata snapshot (at block $root)" rthinctl reserve_metadata_snap cpool
expect_rc 0 "at block $root" rthinctl metadata-snap show cpool
expect_rc 0 "\"held_metadata_root\": $root" rthinctl --json metadata-snap show cpool
expect_rc 0 "released its metadata snapshot" rthinctl metadata-snap release cpool
expect_rc 1 "holds no metadata snapshot, so there is nothing to release" rthinctl release_metadata_snap cpool

# Raw messages: output, unknown message, kernel names case-insensitively.
expect_rc 0 "" rthinctl message cpool CREATE_THIN 40
expect_rc 1 "unknown message" rthinctl message cpool frobnicate 1
expect_rc 0 '"schema": "rthinctl.result/1"' rthinctl --json delete cpool 40

# Wrong devices.
expect_rc 3 "there is no device-mapper device \"nopool\"" rthinctl create-thin nopool --id 1
expect_rc 3 "thin1 is a $T_THIN (thin volume) device, not a thin pool" rthinctl create-thin thin1 --id 1
run dmsetup create lin --table "0 100 linear $data 0"
expect_rc 3 "lin is a linear device, not a thin pool" rthinctl delete lin 1
run dmsetup create empty --notable
expect_rc 1 "has no live table" rthinctl delete empty 1
run dmsetup remove empty lin

# A read-only pool: refused before sending, and the kernel's EOPNOTSUPP
# through the raw message.
run dmsetup reload cpool --table "0 $size $T_POOL $meta $data 128 0 1 read_only"
run dmsetup suspend cpool
run dmsetup resume cpool
expect_rc 1 "not sent: the pool is read-only" rthinctl create-thin cpool --id 50
expect_rc 1 "pool cpool refuses all messages because it is read-only" rthinctl message cpool create_thin 50
case $out in *"(mode ro)"*) ;; *) fail "mode not named: $out" ;; esac

# Permission: device-mapper needs root.
grep -q '^root:' /etc/passwd 2>/dev/null || echo 'root:x:0:0:root:/root:/bin/sh' >>/etc/passwd
grep -q '^nobody:' /etc/passwd || echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
grep -q '^root:' /etc/group 2>/dev/null || echo 'root:x:0:' >>/etc/group
grep -q '^nogroup:' /etc/group || echo 'nogroup:x:65534:' >>/etc/group
# rthinctl itself is the "shell", so only it needs to be executable by nobody.
# The initramfs root may come out mode 0700 (a mktemp -d overlay): open it
# for the check and put the mode back.
rootmode=$(stat -c %a /)
chmod 755 /
if why=$(su -s /usr/sbin/rthinctl nobody help 2>&1 >/dev/null); then
	expect_rc 4 "need root (CAP_SYS_ADMIN)" su -s /usr/sbin/rthinctl nobody status
	expect_rc 3 "UNKNOWN" su -s /usr/sbin/rthinctl -- nobody status --check
else
	echo "SKIP permission test: cannot run rthinctl as user nobody: $why"
fi
chmod "$rootmode" /

# No control node: the errno of the failed open (not the text of another
# crate's error) says what to do.
mv /dev/mapper/control /dev/mapper/control.away
expect_rc 5 "does not exist: load device-mapper (modprobe dm-mod)" rthinctl status
mv /dev/mapper/control.away /dev/mapper/control

run dmsetup remove thin1
run dmsetup remove cpool
run thin_check $meta
