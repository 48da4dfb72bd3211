#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Rewrites the core mount block of rust/rthin_main.rs from rust/core/src/lib.rs.

The kernel crate mounts each core module with #[path] at its own crate root;
this keeps that list in step with cargo's. scripts/check-core-mounts.sh
verifies the result in `make check`.
"""
import os
import re
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
lib = open(os.path.join(root, "rust/core/src/lib.rs")).read()
mods = re.findall(r"^pub mod ([a-z0-9_]+);", lib, re.M)
lines = []
for m in mods:
    flat = os.path.join(root, f"rust/core/src/{m}.rs")
    path = f"core/src/{m}.rs" if os.path.exists(flat) else f"core/src/{m}/mod.rs"
    lines.append(f'#[path = "{path}"]\npub mod {m};')
main_rs = os.path.join(root, "rust/rthin_main.rs")
src = open(main_rs).read()
begin = src.index("// ---- the pure core")
begin = src.index("\n", begin) + 1
end = src.index("// ---- end of core ----")
open(main_rs, "w").write(src[:begin] + "\n".join(lines) + "\n" + src[end:])
sys.exit(0)
