#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Where a VM suite run's time went, per test.

Usage: timing.py [--markdown] [--durations FILE] RESULTS_DIR [RESULTS_DIR ...]

Each RESULTS_DIR is one VM's results (build/results/shard-K). Per test:
  wall      host seconds from the test's start to the next one's (scripts/vm.sh
            sees "=== NAME" on the console; sampled once a second)
  host cpu  CPU seconds the QEMU process used meanwhile (all its threads)
  guest     seconds by the guest's clock, and the guest's busy CPU seconds
            (all vCPUs, /proc/stat; scripts/vm/init)
plus a line per VM for its boot (boot, module load, KUnit) and its end
(writing results). --durations FILE writes "NAME SECONDS" lines (the host
wall time, rounded up) for scripts/vm-suite.sh's shard balancing.
"""
import math
import pathlib
import sys


def load(results):
    """{name: row} for one VM's results folder."""
    rows = {}
    shard = results.name
    verdicts = {}
    if (results / "summary").exists():
        for line in (results / "summary").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                verdicts[parts[1]] = parts[0]
    if (results / "timing").exists():
        for line in (results / "timing").read_text().splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue
            name, wall_cs, busy, _idle = parts
            rows[name] = {"shard": shard, "verdict": verdicts.get(name, "?"),
                          "guest_wall": int(wall_cs) / 100, "guest_cpu": int(busy) / 100}
    host = results / "host-timing"
    if host.exists():
        marks, tck = [], 100
        for line in host.read_text().splitlines():
            parts = line.split()
            if len(parts) != 3:
                continue
            if parts[0] == "clk_tck":
                tck = int(parts[1])
                continue
            marks.append((parts[0], float(parts[1]), float(parts[2])))
        for (name, t0, c0), (_, t1, c1) in zip(marks, marks[1:]):
            if name == "boot":
                name = "(boot, insmod, KUnit)"
            elif name == "end":
                name = "(results, reboot)"
            row = rows.setdefault(name, {"shard": shard, "verdict": verdicts.get(name, "")})
            row["wall"] = t1 - t0
            row["host_cpu"] = (c1 - c0) / tck
        if marks:
            rows.setdefault("(VM total)", {"shard": shard, "verdict": ""})
            rows["(VM total)"]["wall"] = marks[-1][1] - marks[0][1]
            rows["(VM total)"]["host_cpu"] = (marks[-1][2] - marks[0][2]) / tck
    return rows


def fmt(v, digits=0):
    return "" if v is None else f"{v:.{digits}f}"


def main():
    args = sys.argv[1:]
    markdown = False
    durations = None
    while args and args[0].startswith("--"):
        if args[0] == "--markdown":
            markdown = True
            args = args[1:]
        elif args[0] == "--durations":
            durations = pathlib.Path(args[1])
            args = args[2:]
        else:
            sys.exit(f"unknown option {args[0]}")
    rows = []
    for d in args:
        for name, row in load(pathlib.Path(d)).items():
            rows.append((name, row))
    rows.sort(key=lambda r: (r[0].startswith("("), r[1]["shard"] if r[0].startswith("(") else "", r[0]))
    head = ["test", "VM", "result", "wall s", "host CPU s", "guest s", "guest CPU s"]
    table = []
    for name, r in rows:
        table.append([name, r["shard"], r["verdict"], fmt(r.get("wall")), fmt(r.get("host_cpu")),
                      fmt(r.get("guest_wall")), fmt(r.get("guest_cpu"))])
    tests = [r for n, r in rows if not n.startswith("(")]
    table.append(["(all tests)", "", "", fmt(sum(r.get("wall", 0) for r in tests)),
                  fmt(sum(r.get("host_cpu", 0) for r in tests)),
                  fmt(sum(r.get("guest_wall", 0) for r in tests)),
                  fmt(sum(r.get("guest_cpu", 0) for r in tests))])
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for row in table:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x[i])) for x in table + [head]) for i in range(len(head))]
        for row in [head] + table:
            print("  ".join(str(c).ljust(w) if i < 3 else str(c).rjust(w)
                            for i, (c, w) in enumerate(zip(row, widths))))
    if durations:
        lines = ["# Seconds of wall time per VM test in the last make check's VMs (written by",
                 f"# 'make vm-durations' from {len(args)} VMs' results). scripts/vm-suite.sh balances its",
                 "# shards with these; a test not listed counts 60 s."]
        for name, r in rows:
            if name.startswith("(") or "wall" not in r and "guest_wall" not in r:
                continue
            lines.append(f"{name} {math.ceil(r.get('wall', r.get('guest_wall', 0)))}")
        durations.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
