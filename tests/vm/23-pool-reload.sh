# SPDX-License-Identifier: GPL-2.0
# Reloading a live pool, as dm-thin: another block size is accepted and
# ignored (the table keeps showing the live size: compatibility.md, "Reload
# with another block size"); discards cannot
# be turned off once on; features such as skip_block_zeroing take effect for
# thin volumes that are already active; a grown metadata device grows the
# metadata space map, a shrunk one is refused.
. /rthin/tests/lib.sh

use_impl rthin
meta=/dev/ram0 data=/dev/ram1
size=$(sectors $data)
wipe $meta
run dd if=/dev/urandom of=$data bs=1M count=4 2>/dev/null
openpool pool $meta $data $size
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 $size

# Block size 256 on reload: accepted, ignored.
run dmsetup load pool --table "0 $size rthin-pool $meta $data 256 0"
run dmsetup suspend pool
run dmsetup resume pool
table=$(dmsetup table pool)
[ "$table" = "0 $size rthin-pool 1:0 1:1 128 0 0 " ] || fail "block size changed on reload: $table"
case $(dmsetup status pool) in *" 0/$((size / 128)) "*) ;; *) fail "data blocks resized: $(dmsetup status pool)" ;; esac

# Discards cannot be disabled once enabled.
expect_error "Invalid argument" dmsetup load pool --table "0 $size rthin-pool $meta $data 128 0 1 ignore_discard"
expect_dmesg "Discard support cannot be disabled once enabled"

# skip_block_zeroing on reload applies to the active thin: the rest of a
# block provisioned by a 4 KiB write shows the data device's old bytes.
reload_pool pool $meta $data $size skip_block_zeroing
run dd if=/dev/urandom of=/tmp/small bs=4k count=1 2>/dev/null
run dd if=/tmp/small of=/dev/mapper/thin bs=4k seek=$((7 * 16)) oflag=direct 2>/dev/null
# The waker commits within a second or two: wait for the mapping on disk
# (thin_dump opens its device exclusively: read a copy, with O_DIRECT, as
# the page cache would keep showing the first read's stale blocks). Each
# round copies the whole metadata device, seconds on a KASAN kernel under
# TCG on a busy host: the wait allows for a few rounds.
committed() {
	dd if=$meta of=/tmp/meta.img bs=1M iflag=direct 2>/dev/null && thin_dump /tmp/meta.img >/tmp/dump.xml &&
		grep -q 'origin_block="7" data_block=' /tmp/dump.xml
}
wait_for 30 committed || echo "no commit of block 7 within 30 s"
rm -f /tmp/meta.img
data_block=$(sed -n 's/.*origin_block="7" data_block="\([0-9]*\)".*/\1/p' /tmp/dump.xml)
[ -n "$data_block" ] || fail "no mapping for block 7: $(grep -A3 'dev_id="1"' /tmp/dump.xml)"
got=$(dd if=/dev/mapper/thin bs=4k skip=$((7 * 16 + 1)) count=15 iflag=direct 2>/dev/null | md5sum)
want=$(dd if=$data bs=4k skip=$((data_block * 16 + 1)) count=15 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$want" ] || fail "skip_block_zeroing did not apply to the active thin"

run dmsetup remove thin
run dmsetup remove pool
run thin_check $meta

# Metadata on a 4 MiB linear device (1024 blocks), grown to 8 MiB.
wipe $meta
run dmsetup create meta --table "0 8192 linear $meta 0"
openpool pool /dev/mapper/meta $data $size
run dmsetup message pool 0 "create_thin 1"
case $(dmsetup status pool) in *"/1024 "*) ;; *) fail "expected 1024 metadata blocks: $(dmsetup status pool)" ;; esac
run dmsetup suspend pool
run dmsetup suspend meta
run dmsetup load meta --table "0 16384 linear $meta 0"
run dmsetup resume meta
run dmsetup resume pool
status=$(dmsetup status pool)
echo "$status"
case $status in *"/2048 "*) ;; *) fail "metadata did not grow to 2048 blocks: $status" ;; esac
expect_dmesg "growing the metadata device from 1024 to 2048 blocks"
# Shrinking it back is refused at resume.
run dmsetup suspend pool
run dmsetup suspend meta
run dmsetup load meta --table "0 8192 linear $meta 0"
run dmsetup resume meta
expect_error "Invalid argument" dmsetup resume pool
expect_dmesg "metadata device (1024 blocks) too small: expected 2048"
run dmsetup suspend meta
run dmsetup load meta --table "0 16384 linear $meta 0"
run dmsetup resume meta
run dmsetup resume pool
run dmsetup remove pool
run dmsetup remove meta
run thin_check $meta
