# SPDX-License-Identifier: GPL-2.0
# rthin-pool modes and lifecycle: a read_only table never formats and
# refuses every message with EOPNOTSUPP; a suspended pool refuses new thins;
# a reload of the same pool keeps the pool object; an activation with only
# reads writes nothing; a damaged superblock is refused, not reformatted.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
wipe $meta
size=$(sectors $data)
info() { dmsetup status "$1" | cut -d' ' -f4-; }

# read_only does not format a zeroed metadata device.
expect_error "Operation not permitted" dmsetup create pool --table "0 $size rthin-pool $meta $data 128 0 1 read_only"
expect_dmesg "Error creating metadata object"
dmsetup remove pool 2>/dev/null
# (A2) and nothing was written: the first MiB is still zero.
zero=$(dd if=/dev/zero bs=1M count=1 2>/dev/null | md5sum)
[ "$(dd if=$meta bs=1M count=1 iflag=direct 2>/dev/null | md5sum)" = "$zero" ] ||
	fail "a read_only load wrote to the zeroed metadata device"

openpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"

# Suspended pool: no new thin.
run dmsetup suspend pool
expect_error "Invalid argument" dmsetup create thin --table "0 2048 rthin /dev/mapper/pool 1"
expect_dmesg "Unable to activate thin device while pool is suspended"
dmsetup remove thin 2>/dev/null
s=$(dmsetup status --noflush pool | cut -d' ' -f4-)
case $s in "0 "*" rw discard_passdown queue_if_no_space - 1024 ") ;; *) fail "suspended status '$s'" ;; esac
run dmsetup resume pool
mkthin thin pool 1 2048

# Reload with read_only: same pool object (the thin keeps working), mode ro.
reload_pool pool $meta $data $size read_only
s=$(info pool)
echo "read-only: $s"
case $s in "0 "*" - ro discard_passdown queue_if_no_space - 1024 ") ;; *) fail "read-only status '$s'" ;; esac
[ "$(dmsetup table pool)" = "0 $size rthin-pool 1:0 1:1 128 0 1 read_only " ] ||
	fail "read-only table: $(dmsetup table pool)"
expect_error "Operation not supported" dmsetup message pool 0 "create_thin 2"
pool_dev=$(dmsetup info -c --noheadings -o major,minor pool | tr -d ' ')
expect_dmesg "$pool_dev: unable to service pool target messages in READ_ONLY or FAIL mode"
expect_error "Operation not supported" dmsetup message pool 0 "frobnicate"
[ "$(info thin)" = "0 -" ] || fail "thin status under read-only pool: $(info thin)"

# Back to write mode with a reload without read_only.
reload_pool pool $meta $data $size
case $(info pool) in *" rw "*) ;; *) fail "not back to rw: $(info pool)" ;; esac
run dmsetup message pool 0 "create_thin 2"
# A reload cannot switch devices.
expect_error "Device or resource busy" dmsetup load pool --table "0 $size rthin-pool $meta /dev/ram3 128 0"
expect_dmesg "data device already in use by a pool"
run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta

# (I56) Activation, a thin, reads and status, with no writes: the metadata
# device is byte-identical afterwards.
md5meta() { dd if=$meta bs=1M iflag=direct 2>/dev/null | md5sum; }
before=$(md5meta)
openpool pool $meta $data $size
mkthin thin pool 1 2048
run dd if=/dev/mapper/thin of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null
run dmsetup status pool >/dev/null
run dmsetup status thin >/dev/null
run dmsetup remove thin
run dmsetup remove pool
[ "$(md5meta)" = "$before" ] || fail "activation with only reads changed the metadata device"

# (A12) One flipped byte in the superblock, or a garbage block 0: the load
# fails and block 0 is left as it is (no reformat).
byte=$(dd if=$meta bs=1 skip=100 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "\\$(printf %03o $(((byte + 1) % 256)))" | dd of=$meta bs=1 seek=100 count=1 conv=notrunc,fsync 2>/dev/null
blk0() { dd if=$meta bs=4k count=1 iflag=direct 2>/dev/null | md5sum; }
flipped=$(blk0)
[ "$(dd if=$meta bs=1 skip=100 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')" = $(((byte + 1) % 256)) ] ||
	fail "could not flip byte 100 of the superblock"
# (a checksum mismatch: EILSEQ, as dm-thin)
expect_error "Invalid or incomplete multibyte" dmsetup create pool --table "0 $size rthin-pool $meta $data 128 0"
dmsetup remove pool 2>/dev/null
[ "$(blk0)" = "$flipped" ] || fail "the failed load rewrote block 0 (flipped byte)"
run dd if=/dev/urandom of=$meta bs=4k count=1 conv=notrunc,fsync 2>/dev/null
garbage=$(blk0)
# (a checksum mismatch: EILSEQ, as dm-thin)
expect_error "Invalid or incomplete multibyte" dmsetup create pool --table "0 $size rthin-pool $meta $data 128 0"
dmsetup remove pool 2>/dev/null
[ "$(blk0)" = "$garbage" ] || fail "the failed load rewrote block 0 (garbage)"
exit 0
