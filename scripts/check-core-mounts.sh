#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The core crate's modules are declared twice: in rust/core/src/lib.rs (cargo)
# and in rust/rthin_main.rs (Kbuild, with #[path]). Both lists must agree, or a
# module tested on the host would be missing from the kernel (or the reverse).
. "$(dirname "$0")/lib.sh"
# Host-only modules (feature "checker", they need std) are not mounted.
cargo_mods=$(sed -nE '/^#\[cfg\(feature = "checker"\)\]$/{n;d};s/^pub mod ([a-z0-9_]+);/\1/p' "$RTHIN_ROOT/rust/core/src/lib.rs" | sort)
kernel_mods=$(sed -nE '/^#\[path = "core\/src\/[a-z0-9_\/]+\.rs"\]$/{n;s/^pub mod ([a-z0-9_]+);/\1/p}' "$RTHIN_ROOT/rust/rthin_main.rs" | sort)
bad_paths=$(sed -nE '/^#\[path = "core\/src\/([a-z0-9_\/]+)\.rs"\]$/{N;s/^#\[path = "core\/src\/([a-z0-9_]+)(\/mod)?\.rs"\]\npub mod ([a-z0-9_]+);$/\1 \3/p}' "$RTHIN_ROOT/rust/rthin_main.rs" | awk '$1 != $2')
if [ "$cargo_mods" != "$kernel_mods" ] || [ -n "$bad_paths" ]; then
	echo "core module lists differ (lib.rs vs rthin_main.rs):" >&2
	diff <(echo "$cargo_mods") <(echo "$kernel_mods") >&2 || true
	[ -z "$bad_paths" ] || echo "mounted at the wrong path: $bad_paths" >&2
	exit 1
fi

# Every shared scenario of the core must also run as a KUnit case in the kernel.
missing=$("$RTHIN_ROOT/scripts/list-core-selftests.sh" | while read -r f; do
	grep -qF "crate::$f()" "$RTHIN_ROOT/rust/kunit.rs" || echo "$f"
done)
if [ -n "$missing" ]; then
	echo "core selftest scenarios not run by KUnit (add them to rust/kunit.rs):" >&2
	echo "$missing" >&2
	exit 1
fi
