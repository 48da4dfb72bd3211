#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Splits VM tests into shards of about equal time.

Usage: shards.py N DURATIONS DEFAULT_SECONDS < test names
Prints one line per shard: "ESTIMATED_SECONDS NAME NAME ..." (names in
suite order within a shard). Greedy: the longest test first, each to the
shard with the least estimated time so far. DURATIONS holds "NAME SECONDS"
lines (tests/vm/durations.txt); a test not in it counts DEFAULT_SECONDS.
Shards that would stay empty are not printed.
"""
import pathlib
import sys


def main():
    n, durations, default = int(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3])
    known = {}
    if durations.exists():
        for line in durations.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#"):
                known[parts[0]] = float(parts[1])
    names = sys.stdin.read().split()
    order = {name: i for i, name in enumerate(names)}
    shards = [[0.0, []] for _ in range(max(1, n))]
    for name in sorted(names, key=lambda t: (-known.get(t, default), order[t])):
        shard = min(shards, key=lambda s: s[0])
        shard[0] += known.get(name, default)
        shard[1].append(name)
    for total, members in shards:
        if members:
            print(f"{total:.0f} " + " ".join(sorted(members, key=order.get)))


if __name__ == "__main__":
    main()
