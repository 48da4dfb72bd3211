#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Lists the core's shared scenarios (`pub fn NAME() -> bool` inside a
# `pub mod selftest`) as MODULE::selftest::NAME, one per line.
. "$(dirname "$0")/lib.sh"
find "$RTHIN_ROOT/rust/core/src" -name '*.rs' | sort | while read -r f; do
	rel=${f#"$RTHIN_ROOT"/rust/core/src/}
	mod=${rel%.rs}
	mod=${mod%/mod}
	mod=${mod//\//::}
	awk -v m="$mod" '
		/^ *pub mod selftest/ { s = 1 }
		s && /pub fn [a-z_0-9]+\(\) -> bool/ {
			match($0, /pub fn [a-z_0-9]+/)
			print m "::selftest::" substr($0, RSTART + 7, RLENGTH - 7)
		}' "$f"
done
