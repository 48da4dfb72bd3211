#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Every `unsafe` of the module lives in rust/glue: the code above it (the
# targets, the I/O path, the pool) and the core use only safe APIs, which
# glue makes sound by construction. Fails on an `unsafe` (block, fn, impl,
# trait or attribute) in any other .rs file under rust/; comments are ignored.
. "$(dirname "$0")/lib.sh"
cd "$RTHIN_ROOT"
found=$(git ls-files -co --exclude-standard -- 'rust/*.rs' ':!rust/glue/**' |
	xargs -r grep -nE '\bunsafe\b' /dev/null |
	grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' |
	awk -F: '{ line = $0; sub(/^[^:]+:[0-9]+:/, "", line); sub(/\/\/.*/, "", line); if (line ~ /(^|[^A-Za-z0-9_])unsafe([^A-Za-z0-9_]|$)/) print }' || true)
if [ -n "$found" ]; then
	echo "unsafe outside rust/glue (move it into a glue wrapper with a safe API):" >&2
	echo "$found" >&2
	exit 1
fi
