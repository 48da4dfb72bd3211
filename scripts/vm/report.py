#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns a VM results folder into a verdict.

Usage: report.py [--suites "SUITE ..."] RESULTS_DIR [RESULTS_DIR ...]

Reads the KTAP that KUnit printed into the kernel log and the guest's test
summary, prints one line per KUnit case and per VM test, checks the kernel log
for oopses and warnings, and ends with `N passed, N failed`. Exits 1 on any
failure, including a KUnit suite that was expected (declared in the module
source) but never reported, so a module that fails to load cannot pass.

Several folders are the shards of one suite run (scripts/vm-suite.sh), one VM
each: each VM's kernel log is checked, its KUnit results too, but the cases
are counted once (from the first VM with results); a test named in a
folder's `expected-tests` without a result, and a VM that wrote no results,
count as failures, so a hung shard fails the run and names its tests.
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


def kunit_verdicts(dmesg, wanted):
    """[(status, text)] for every case and suite problem of one kernel log."""
    out = []
    cases, suites = parse_ktap(dmesg, wanted)
    for suite in sorted(wanted):
        if suite not in suites:
            out.append(("fail", f"kunit {suite}: suite never reported (module not loaded?)"))
            continue
        for name, status in cases.get(suite, []):
            out.append((status, f"kunit {suite}.{name}"))
        if suites[suite] == "fail" and not any(s == "fail" for _, s in cases.get(suite, [])):
            out.append(("fail", f"kunit {suite}: suite failed"))
    return out


def main():
    args = sys.argv[1:]
    wanted = set()
    if args and args[0] == "--suites":
        wanted = set(args[1].split())
        args = args[2:]
    dirs = [pathlib.Path(a) for a in args]
    sharded = len(dirs) > 1
    passed = failed = skipped = 0

    def tally(status, text):
        nonlocal passed, failed, skipped
        print(f"{status.upper():4} {text}")
        passed += status == "pass"
        failed += status == "fail"
        skipped += status == "skip"

    # Every VM loads the module, so KUnit runs in each. The first VM that
    # wrote results counts the cases; the others must agree (every suite
    # reported, nothing failed), or the difference is one failure each.
    kunit_counted = False
    for results in dirs:
        label = f"{results.name}: " if sharded else ""
        expected = []
        if (results / "expected-tests").exists():
            expected = (results / "expected-tests").read_text().split()
        if not (results / "vm-status").exists():
            tally("fail", f"{label}the VM wrote no results (crash, panic or timeout; "
                  f"console: {results / 'console.log'})")
            for name in expected:
                tally("fail", f"vm {name} (no result: its VM did not finish)")
            continue
        dmesg = (results / "dmesg.txt").read_text(errors="replace").splitlines() \
            if (results / "dmesg.txt").exists() else []

        verdicts = kunit_verdicts(dmesg, wanted)
        if not kunit_counted:
            for status, text in verdicts:
                tally(status, text)
            kunit_counted = True
        else:
            for status, text in verdicts:
                if status == "fail":
                    tally("fail", f"{label}{text}")

        seen = set()
        summary = results / "summary"
        if summary.exists():
            for line in summary.read_text().splitlines():
                verdict, name, *took = line.split()
                seen.add(name)
                tally("pass" if verdict == "PASS" else "fail", f"vm {name} {' '.join(took)}")
                if verdict != "PASS":
                    log = results / f"{name}.log"
                    if log.exists():
                        print(f"---- {name}.log (last 30 lines) ----")
                        print("\n".join(log.read_text(errors="replace").splitlines()[-30:]))
                        print("----")
        for name in expected:
            if name not in seen:
                tally("fail", f"vm {name} (no result in {results})")

        # The log is saved at the end of the run: if its ring buffer wrapped, its
        # first lines (and any report among them) are gone.
        if dmesg and not any(l.startswith("Linux version") for l in
                             (TIMESTAMP.sub("", x) for x in dmesg[:5])):
            tally("fail", f"{label}kernel log: it lost its beginning "
                  "(ring buffer too small: log_buf_len in vm.sh)")
        problems = [TIMESTAMP.sub("", l) for l in dmesg if KERNEL_PROBLEMS.search(l)]
        if problems:
            tally("fail", f"{label}kernel log: the kernel reported problems:")
            for line in problems[:20]:
                print(f"     {line}")
        if (results / "insmod-failed").exists():
            tally("fail", f"{label}insmod dm-rthin.ko")

    if not kunit_counted:
        # No VM wrote results: every expected suite is missing.
        for suite in sorted(wanted):
            tally("fail", f"kunit {suite}: suite never reported (no VM finished)")

    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
