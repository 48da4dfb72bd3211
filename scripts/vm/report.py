#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns a VM results folder into a verdict.

Reads the KTAP that KUnit printed into the kernel log and the guest's test
summary, prints one line per KUnit case and per VM test, checks the kernel log
for oopses and warnings, and ends with `N passed, N failed`. Exits 1 on any
failure, including a KUnit suite that was expected (declared in the module
source) but never reported, so a module that fails to load cannot pass.
"""
import pathlib
import re
import sys

# Most reports start with "BUG:" or "WARNING: " (KASAN, "BUG: KFENCE", lockdep, atomic
# sleep); the report kinds are also named so that a header printed without
# the prefix is still caught. Lockdep's "non-static key" and ODEBUG's object
# misuse are printed without either prefix. RCU stalls read "rcu: INFO:
# rcu_sched self-detected stall on CPU" or "... detected stalls on CPUs/tasks".
KERNEL_PROBLEMS = re.compile(
    r"(BUG:|Oops|WARNING: |Kernel panic|UBSAN:|KASAN:|kernel BUG|"
    r"rcu_\w+ (self-)?detected stall|INFO: task .* blocked|general protection fault|"
    r"possible circular locking|possible recursive locking|inconsistent lock state|"
    r"irq lock inversion|bad unlock balance|suspicious RCU usage|"
    r"sleeping function called|trying to register non-static key|ODEBUG:)"
)
TIMESTAMP = re.compile(r"^\[[^\]]*\]\s?")


def parse_ktap(lines, wanted):
    """Returns {suite: [(case, status)]} and {suite: status} for `wanted` suites."""
    cases, suites, current = {}, {}, None
    for raw in lines:
        line = TIMESTAMP.sub("", raw.rstrip("\n"))
        m = re.match(r"^\s*# Subtest: (\S+)", line)
        if m:
            current = m.group(1) if m.group(1) in wanted else None
            if current:
                cases[current] = []
            continue
        m = re.match(r"^(\s*)(not ok|ok) \d+ (\S+)(.*)$", line)
        if not m:
            continue
        indent, verdict, name, rest = m.groups()
        status = "skip" if "# SKIP" in rest else ("pass" if verdict == "ok" else "fail")
        if indent and current:
            cases[current].append((name, status))
        elif not indent and name in wanted:
            suites[name] = status
            current = None
    return cases, suites


def main():
    results = pathlib.Path(sys.argv[1])
    wanted = set(sys.argv[2:])
    passed = failed = skipped = 0
    dmesg = (results / "dmesg.txt").read_text(errors="replace").splitlines() \
        if (results / "dmesg.txt").exists() else []

    cases, suites = parse_ktap(dmesg, wanted)
    for suite in sorted(wanted):
        if suite not in suites:
            print(f"FAIL kunit {suite}: suite never reported (module not loaded?)")
            failed += 1
            continue
        for name, status in cases.get(suite, []):
            print(f"{status.upper():4} kunit {suite}.{name}")
            passed += status == "pass"
            failed += status == "fail"
            skipped += status == "skip"
        if suites[suite] == "fail" and not any(s == "fail" for _, s in cases.get(suite, [])):
            print(f"FAIL kunit {suite}: suite failed")
            failed += 1

    summary = results / "summary"
    if summary.exists():
        for line in summary.read_text().splitlines():
            verdict, name, *took = line.split()
            print(f"{verdict:4} vm {name} {' '.join(took)}")
            if verdict == "PASS":
                passed += 1
            else:
                failed += 1
                log = results / f"{name}.log"
                if log.exists():
                    print(f"---- {name}.log (last 30 lines) ----")
                    print("\n".join(log.read_text(errors="replace").splitlines()[-30:]))
                    print("----")

    # The log is saved at the end of the run: if its ring buffer wrapped, its
    # first lines (and any report among them) are gone.
    if dmesg and not any(l.startswith("Linux version") for l in
                         (TIMESTAMP.sub("", x) for x in dmesg[:5])):
        print("FAIL kernel log: it lost its beginning (ring buffer too small: log_buf_len in vm.sh)")
        failed += 1
    problems = [TIMESTAMP.sub("", l) for l in dmesg if KERNEL_PROBLEMS.search(l)]
    if problems:
        print("FAIL kernel log: the kernel reported problems:")
        for line in problems[:20]:
            print(f"     {line}")
        failed += 1
    if (results / "insmod-failed").exists():
        print("FAIL insmod dm-rthin.ko")
        failed += 1

    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
