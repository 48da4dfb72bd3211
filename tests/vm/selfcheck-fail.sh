# SPDX-License-Identifier: GPL-2.0
# Harness self-check (RTHIN_SELFCHECK_FAIL=vm): this test must fail, and with
# it `make check`.
. /rthin/tests/lib.sh
fail "deliberate failure (RTHIN_SELFCHECK_FAIL=vm)"
