# SPDX-License-Identifier: GPL-2.0
# rthin-pool on real metadata: formats a zeroed metadata device on first
# activation, serves dm-thin's six messages with dm-thin's errors and log
# lines, reports byte-exact status lines, commits durably (thin_check and
# thin_dump of the deactivated metadata).
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
wipe $meta
size=$(sectors $data)
openpool pool $meta $data $size

# Metadata blocks: 256 MiB / 4 KiB; reserve min(4096, T/10); low water min(1024, T/4).
T=65536 D=$((size / 128))
status() { dmsetup status pool | cut -d' ' -f4-; }
s=$(status)
echo "fresh: $s"
used=${s#* }
used=${used%%/*}
# Used metadata = blocks really used (a handful on a fresh pool) + the reserve.
[ "$used" -gt 4096 ] && [ "$used" -lt $((4096 + 32)) ] || fail "fresh metadata used $used"
U=$used
want="0 $U/$T 0/$D - rw discard_passdown queue_if_no_space - 1024 "
[ "$s" = "$want" ] || fail "fresh pool status '$s', want '$want'"
expect_dmesg "rthin"

msg() { dmsetup message pool 0 "$@"; }

# --- create_thin ---
run msg "create_thin 1"
expect_error "File exists" msg "create_thin 1"
expect_dmesg "Creation of new thinly-provisioned device with id 1 failed."
run msg "CREATE_THIN 16777215"
expect_error "Invalid argument" msg "create_thin 16777216"
expect_dmesg "Message received with invalid device id: 16777216"
expect_error "Invalid argument" msg "create_thin 0x10"
expect_dmesg "Message received with invalid device id: 0x10"
expect_error "Invalid argument" msg "create_thin"
expect_dmesg "Message received with 1 arguments instead of 2."
expect_error "Invalid argument" msg "create_thin 1 2"
expect_dmesg "Message received with 3 arguments instead of 2."
expect_error "Invalid argument" msg "frobnicate"
expect_dmesg "Unrecognised thin pool target message received: frobnicate"
s=$(status)
echo "after create_thin: $s"
case $s in "0 "*"/$T 0/$D - rw discard_passdown queue_if_no_space - 1024 ") ;;
*) fail "status after create_thin: '$s'" ;; esac

# --- create_snap ---
expect_error "No data available" msg "create_snap 2 7"
expect_dmesg "Creation of new snapshot 2 of device 7 failed."
expect_error "No data available" msg "create_snap 9 9"
expect_error "File exists" msg "create_snap 1 1"
expect_error "File exists" msg "create_snap 16777215 1"
run msg "create_snap 2 1"

# --- delete ---
expect_error "No data available" msg "delete 5"
expect_dmesg "Deletion of thin device 5 failed."
run msg "delete 16777215"
expect_error "No data available" msg "delete 16777215"
# An active thin cannot be deleted.
mkthin thin2 pool 2 2048
expect_error "Device or resource busy" msg "delete 2"
expect_dmesg "Deletion of thin device 2 failed."
ts=$(dmsetup status thin2 | cut -d' ' -f4-)
[ "$ts" = "0 -" ] || fail "thin status '$ts', want '0 -'"
run dmsetup remove thin2
# A thin on a device id the metadata does not have.
expect_error "No data available" dmsetup create thin5 --table "0 2048 rthin /dev/mapper/pool 5"
expect_dmesg "Couldn't open thin internal device"

# --- set_transaction_id ---
run msg "set_transaction_id 0 1"
s=$(status); [ "${s%% *}" = 1 ] || fail "transaction id not 1: $s"
expect_error "Invalid argument" msg "set_transaction_id 0 2"
expect_dmesg "mismatched transaction id"
expect_dmesg "Failed to change transaction id from 0 to 2."
s=$(status); [ "${s%% *}" = 1 ] || fail "transaction id changed by a failed swap: $s"
expect_error "Invalid argument" msg "set_transaction_id x 2"
expect_dmesg "set_transaction_id message: Unrecognised id x."
expect_error "Invalid argument" msg "set_transaction_id 1 y"
expect_dmesg "set_transaction_id message: Unrecognised new id y."
run msg "set_transaction_id 1 18446744073709551615"
run msg "set_transaction_id 18446744073709551615 7"

# --- reserve / release ---
expect_error "Invalid argument" msg "release_metadata_snap"
expect_dmesg "No pool metadata snapshot found: nothing to release."
run msg "reserve_metadata_snap"
s=$(status)
echo "held: $s"
held=$(echo "$s" | cut -d' ' -f4)
case $held in ''|-|*[!0-9]*) fail "no held root after reserve: $s" ;; esac
expect_error "Device or resource busy" msg "reserve_metadata_snap"
expect_dmesg "Pool metadata snapshot already exists: release this before taking another."
expect_error "Invalid argument" msg "reserve_metadata_snap 1"
# The held root survives deactivation.
run dmsetup remove pool
openpool pool $meta $data $size
s=$(status)
[ "$(echo "$s" | cut -d' ' -f4)" = "$held" ] || fail "held root lost over reactivation: $s"
[ "${s%% *}" = 7 ] || fail "transaction id lost over reactivation: $s"
run msg "release_metadata_snap"
s=$(status)
[ "$(echo "$s" | cut -d' ' -f4)" = "-" ] || fail "held root after release: $s"
expect_error "Invalid argument" msg "release_metadata_snap"

# Thin TABLE, and INFO of the snapshot.
mkthin thin1 pool 1 2048
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
[ "$(dmsetup table thin1)" = "0 2048 rthin $pool_dev 1" ] || fail "thin table: $(dmsetup table thin1)"
[ "$(dmsetup status thin1 | cut -d' ' -f4-)" = "0 -" ] || fail "thin1 status"
run dmsetup remove thin1

# A second pool on the same metadata device.
expect_error "Device or resource busy" dmsetup create pool2 --table "0 $size rthin-pool $meta $data 128 0"
expect_dmesg "metadata device already in use by a pool"
run dmsetup remove pool

# Block size other than the one formatted.
expect_error "Invalid argument" dmsetup create pool --table "0 $size rthin-pool $meta $data 256 0"
expect_dmesg "changing the data block size (from 128 to 256) is not supported"
expect_dmesg "Error creating metadata object"
dmsetup remove pool 2>/dev/null

# Durable, valid metadata that thin_dump reads.
run thin_check $meta
run thin_dump $meta >/tmp/dump.xml
cat /tmp/dump.xml
grep -q 'transaction="7"' /tmp/dump.xml || fail "thin_dump: transaction id"
grep -q 'dev_id="1"' /tmp/dump.xml || fail "thin_dump: device 1"
grep -q 'dev_id="2"' /tmp/dump.xml || fail "thin_dump: device 2"
grep -q 'dev_id="16777215"' /tmp/dump.xml && fail "thin_dump: deleted device 16777215 present"
grep -q 'data_block_size="128"' /tmp/dump.xml || fail "thin_dump: block size"
grep -q "nr_data_blocks=\"$D\"" /tmp/dump.xml || fail "thin_dump: nr_data_blocks"
exit 0
