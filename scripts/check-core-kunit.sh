#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The kernel crate mounts the core as one module from its lib.rs (so the core
# keeps its forbid(unsafe_code) and its own module tree in the kernel), and
# every shared scenario of the core also runs as a KUnit case.
. "$(dirname "$0")/lib.sh"
mounts=$(grep -c '^#\[path = "core/src/' "$RTHIN_ROOT/rust/rthin_main.rs" || true)
if [ "$mounts" != 1 ] || ! grep -qx '#\[path = "core/src/lib.rs"\]' "$RTHIN_ROOT/rust/rthin_main.rs"; then
	echo "rust/rthin_main.rs must mount the core once, from core/src/lib.rs (found $mounts #[path] mounts of core files)" >&2
	exit 1
fi

missing=$("$RTHIN_ROOT/scripts/list-core-selftests.sh" | while read -r f; do
	grep -qF "crate::$f()" "$RTHIN_ROOT/rust/kunit.rs" || echo "$f"
done)
if [ -n "$missing" ]; then
	echo "core selftest scenarios not run by KUnit (add them to rust/kunit.rs):" >&2
	echo "$missing" >&2
	exit 1
fi
