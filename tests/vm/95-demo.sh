# SPDX-License-Identifier: GPL-2.0
# `make demo`'s script (tests/vm/demo.sh) in the suite, so that it cannot rot:
# every step it shows must still hold. Its side-by-side reads run 2 rounds of
# 1 s per target here instead of 5 (their figures are shown, not checked).
. /rthin/tests/lib.sh

DEMO_COLOR=0 DEMO_READ_SECONDS=2 sh /rthin/demo.sh >/tmp/demo.out 2>&1
rc=$?
cat /tmp/demo.out
[ "$rc" = 0 ] || fail "the demo exited $rc: $(grep '^DEMO FAILED' /tmp/demo.out)"
[ "$(tail -1 /tmp/demo.out)" = "DEMO OK" ] || fail "the demo exited 0 without DEMO OK at the end"
