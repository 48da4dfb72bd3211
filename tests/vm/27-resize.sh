# SPDX-License-Identifier: GPL-2.0
# Resizing: a pool table shorter than the data space in the metadata fails
# to resume with EINVAL (L69); a longer one grows the data space, and the new
# blocks are used (L70); a thin table shrunk below a mapped block keeps its
# mappings, and grown back shows the old data (E37).
. /rthin/tests/lib.sh

use_impl rthin

meta=/dev/ram0
# bad WHY: a failed check that does not stop the test (it fails at the end).
failed=0
bad() {
	echo "FAIL: $*" >&2
	failed=$((failed + 1))
}
used() { dmsetup status pool | awk '{ print $6 }'; }

# 32 blocks of a 64-block linear data device.
run dmsetup create data --table "0 8192 linear /dev/ram1 0"
mkpool pool $meta /dev/mapper/data 4096
run dmsetup message pool 0 "create_thin 1"
mkthin thin pool 1 131072
run dd if=/dev/urandom of=/tmp/a bs=64k count=20 2>/dev/null
run dd if=/tmp/a of=/dev/mapper/thin bs=64k oflag=direct 2>/dev/null
[ "$(used)" = 20/32 ] || fail "expected 20/32: $(dmsetup status pool)"

# --- L69: 16 blocks < 32 recorded: resume fails, then the old length resumes.
run dmsetup load pool --table "$(pool_table $meta /dev/mapper/data 2048)"
run dmsetup suspend pool
expect_error "Invalid argument" dmsetup resume pool
expect_dmesg "pool target (16 blocks) too small: expected 32"
run dmsetup load pool --table "$(pool_table $meta /dev/mapper/data 4096)"
run dmsetup resume pool
[ "$(used)" = 20/32 ] || fail "L69: after the failed shrink: $(dmsetup status pool)"
got=$(dd if=/dev/mapper/thin bs=64k count=20 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "L69: data changed across the failed shrink"

# --- L70: fill, then grow the pool to the whole data device.
run dd if=/dev/urandom of=/tmp/b bs=64k count=12 2>/dev/null
run dd if=/tmp/b of=/dev/mapper/thin bs=64k seek=20 oflag=direct 2>/dev/null
[ "$(used)" = 32/32 ] || fail "expected a full pool: $(dmsetup status pool)"
reload_pool pool $meta /dev/mapper/data 8192
dmesg | grep -qF "growing the data device from 32 to 64 blocks" ||
	bad "L70: no log line 'growing the data device from 32 to 64 blocks' (dm-thin logs it)"
[ "$(used)" = 32/64 ] || fail "L70: after growing: $(dmsetup status pool)"
run dd if=/dev/urandom of=/tmp/c bs=64k count=24 2>/dev/null
run timeout 30 dd if=/tmp/c of=/dev/mapper/thin bs=64k seek=100 oflag=direct 2>/dev/null
[ "$(used)" = 56/64 ] || fail "L70: after writing 24 blocks more: $(dmsetup status pool)"
got=$(dd if=/dev/mapper/thin bs=64k skip=100 count=24 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/c)" ] || fail "L70: writes into the new space do not read back"
got=$(dd if=/dev/mapper/thin bs=64k count=20 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "L70: old data changed"
# Those 24 blocks can only lie past the old 32: the data device there holds them.
run dmsetup status pool >/dev/null # commits
run dd if=$meta of=/tmp/m.img bs=1M count=16 iflag=direct 2>/dev/null
run thin_dump /tmp/m.img >/tmp/d.xml
high=$(tr '"' ' ' </tmp/d.xml | awk '
	$1 == "<single_mapping" && $5 >= 32 { n++ }
	$1 == "<range_mapping" { for (i = 0; i < $7; i++) if ($5 + i >= 32) n++ }
	END { print n + 0 }')
[ "$high" = 24 ] || fail "L70: $high mappings to data blocks >= 32, expected 24"

# --- E37: shrink the thin's table below mapped blocks, then grow it back.
thin_before=$(dmsetup status thin)
pool_before=$(used)
want=$(dd if=/dev/mapper/thin bs=64k skip=100 count=24 iflag=direct 2>/dev/null | md5sum)
echo "before: $thin_before / $pool_before"
swap_table thin "$(thin_table pool 1 $((50 * 128)))"
s=$(dmsetup status thin)
echo "shrunk: $s"
[ "$s" = "0 $((50 * 128)) rthin ${thin_before#* * * }" ] || fail "E37: shrunk thin status '$s', before '$thin_before'"
[ "$(used)" = "$pool_before" ] || fail "E37: pool usage changed: $(used)"
swap_table thin "$(thin_table pool 1 131072)"
[ "$(dmsetup status thin)" = "$thin_before" ] || fail "E37: regrown thin status '$(dmsetup status thin)'"
got=$(dd if=/dev/mapper/thin bs=64k skip=100 count=24 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$want" ] || fail "E37: data past the shrunk end did not come back"
got=$(dd if=/dev/mapper/thin bs=64k count=20 iflag=direct 2>/dev/null | md5sum)
[ "$got" = "$(md5sum </tmp/a)" ] || fail "E37: data before the shrunk end changed"

run dmsetup remove thin
run dmsetup remove pool
run dmsetup remove data
run thin_check $meta
[ $failed = 0 ] || fail "$failed checks failed"
