#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns a benchmark results folder into results.json, table.md and chart.png.

Usage: report.py RESULTS_DIR

RESULTS_DIR holds one vm-<N>cpu/ folder per VM boot (written by
scripts/bench/run.sh inside the VM: bench/manifest.tsv, bench/runs/**.json,
bench/env) and `host` (written by scripts/bench.sh). Standard library only;
the chart is drawn when matplotlib imports, and skipped otherwise.

Each row is one (case, variant, metric); each cell the median of the
repetitions with the min and max. A run that failed is reported as an
error, never as a number. The ratio columns are relative performance: above 1
means better than the reference (for throughput value/ref, for latency and
time ref/value), from the medians.
"""
import json
import pathlib
import re
import statistics
import sys

TARGETS = ["linear", "dm-thin", "rthin"]

CASE_TITLES = {
    "c1-seqread": "1. sequential 4k read, fully provisioned",
    "c2-randread": "2. 4k random read, iodepth 32, fully provisioned",
    "c3-snap-randread": "3. 4k random read right after a snapshot (all blocks shared)",
    "c4-provision": "4. first 4k writes to unprovisioned blocks (sequential, random-, random-qd1- at iodepth 1)",
    "c4-break-sharing": "4. 4k writes breaking sharing with N snapshots (sequential, random-, random-qd1- at iodepth 1)",
    "c5-fsync": "5. 4k random writes, fsync after each",
    "c6-discard": "6. discard of a fully provisioned volume",
    "c6-fstrim": "6. fstrim of an ext4 after 4,000 small files were deleted",
    "c6-snap-create": "6. snapshot create (suspend, message, resume)",
    "c6-snap-delete": "6. snapshot delete (message)",
    "c6-thin-delete": "6. delete of a thin that was active (message, as in lvremove)",
    "c6-dmsetup-floor": "6. floor: one `dmsetup info` of the pool (process start + ioctl)",
    "c7-fill": "7. provisioning fill: 1 MiB direct writes over a fresh large volume, zeroing off",
    "c7-large-randread": "7. 4k random read, iodepth 32, numjobs 2, large fully provisioned volume",
    "c8-cold-randread": "8. 4k random read, first touch after activation / after a thin reload",
    "c9-many-thins": "9. kernel memory per active idle 1 TiB thin (slab + vmalloc + per-CPU)",
    "c9-activate": "9. activating the thins (one dmsetup call)",
    "c9-randread": "9. 4k random read, iodepth 32, numjobs 2, spread over 100 of the thins",
    "c11-metadata-space": "11. metadata blocks in use after each workload (after a commit)",
    "c12-read-during-fsync": "12. 4k reads of one volume during another's 4k write + fsync stream",
    "c13-nvmeof-randread": "13. 4k random read, iodepth 32, numjobs 2: on the volume (local) and through NVMe/TCP "
                           "(nvmet + nvme-tcp on 127.0.0.1, same VM)",
    "c14-delete": "14. delete of a fully provisioned thin (message) while another thin of the pool writes new blocks",
    "c14-writer": "14. the other thin's 4k random writes to new blocks, iodepth 8: alone (quiet) and during the delete",
}
CASE_ORDER = list(CASE_TITLES)

# Where linear has no run of its own, the linear reference for the row.
LINEAR_REF = {
    "c3-snap-randread": lambda v: ("c2-randread", v),
    "c4-break-sharing": lambda v: ("c4-break-sharing", re.sub(r"snaps\d+$", "snaps0", v)),
}


def fio_jobs(path):
    text = path.read_text(errors="replace")
    # fio may print warning lines before the JSON document.
    data = json.loads(text[text.find("{"):] if "{" in text else text)
    jobs = data.get("jobs", [])
    bad = [j.get("error", 0) for j in jobs if j.get("error", 0)]
    if bad:
        raise ValueError(f"fio job error {bad[0]}")
    if not jobs:
        raise ValueError("fio wrote no jobs")
    return jobs


def pct(lat, p):
    """The p-th percentile (fio's keys look like '99.000000') of a lat_ns dict, in µs."""
    table = (lat or {}).get("percentile") or {}
    for key, val in table.items():
        if abs(float(key) - p) < 1e-6:
            return val / 1000.0
    return None


def metrics_from_fio(case, jobs):
    """{metric: (value, higher_is_better)} for one fio run."""
    def total(rw, field):
        return sum(j[rw][field] for j in jobs)

    if case in ("c2-randread", "c3-snap-randread", "c7-large-randread", "c8-cold-randread", "c9-randread",
                "c13-nvmeof-randread"):
        return {"IOPS": (total("read", "iops"), True)}
    if case == "c12-read-during-fsync":
        # The first job is the reader; the second writes and syncs.
        j = jobs[0]
        out = {"read IOPS": (j["read"]["iops"], True)}
        for p in (50, 99):
            v = pct(j["read"].get("clat_ns"), p)
            if v is not None:
                out[f"read p{p} µs"] = (v, False)
        return out
    if case == "c14-writer":
        j = jobs[0]
        out = {"IOPS": (j["write"]["iops"], True)}
        v = pct(j["write"].get("clat_ns"), 99)
        if v is not None:
            out["write p99 µs"] = (v, False)
        mx = (j["write"].get("clat_ns") or {}).get("max")
        if mx is not None:
            out["write max µs"] = (mx / 1000.0, False)
        return out
    if case == "c1-seqread":
        return {"MiB/s": (total("read", "bw_bytes") / 2**20, True)}
    if case in ("c4-provision", "c4-break-sharing", "c7-fill"):
        return {"MiB/s": (total("write", "bw_bytes") / 2**20, True)}
    if case == "c5-fsync":
        j = jobs[0]
        out = {}
        sync = j.get("sync", {}).get("lat_ns")
        for p in (50, 99):
            v = pct(sync, p)
            if v is not None:
                out[f"fsync p{p} µs"] = (v, False)
        for p in (50, 99):
            v = pct(j["write"].get("clat_ns"), p)
            if v is not None:
                out[f"write p{p} µs"] = (v, False)
        return out
    return {}


def load_boot(boot_dir, rows, notes, errors):
    bench = boot_dir / "bench"
    # A second boot without a target that froze the first: its rows stand apart.
    m = re.search(r"-without-(.*)$", boot_dir.name)
    suffix = f" (boot without {m.group(1)})" if m else ""
    manifest = bench / "manifest.tsv"
    env = {}
    if (bench / "env").exists():
        for line in (bench / "env").read_text(errors="replace").splitlines():
            k, _, v = line.partition("=")
            env.setdefault(k, v)
    status = (boot_dir / "vm-status").read_text().strip() if (boot_dir / "vm-status").exists() else "no results"
    req = boot_dir / "requested-cpus"
    if req.exists() and env.get("vcpus") and req.read_text().strip() != env["vcpus"]:
        notes.append(f"{boot_dir.name}: QEMU was given {req.read_text().strip()} vCPUs but the guest kernel brought "
                     f"up {env['vcpus']}; the variants are named by what the guest saw (vcpuN).")
    if env.get("clocksource") and not env["clocksource"].startswith("tsc"):
        notes.append(f"{boot_dir.name}: the guest clock was {env['clocksource']} (coarse steps): its latencies "
                     f"and ms timings are quantised and not comparable.")
    if status != "done":
        notes.append(f"{boot_dir.name}: the VM did not finish ({status}); what it measured before is below.")
    for hang in sorted(bench.glob("hang-*.txt")):
        first = hang.read_text(errors="replace").splitlines()[:1]
        notes.append(f"{boot_dir.name}: HANG, {first[0] if first else '?'} (kernel state in "
                     f"{boot_dir.name}/bench/{hang.name}); that target was skipped for the rest of the boot.")
    frozen = boot_dir / "frozen-at"
    if frozen.exists() and frozen.read_text().strip():
        f = frozen.read_text().strip().split("\t")
        if len(f) >= 4:
            errors.setdefault((f[0], f[1] + suffix, f[2]), []).append(
                f"the whole guest froze in this run (rep {f[3]}: {' '.join(f[4:])}); the host stopped the VM")
            notes.append(f"{boot_dir.name}: the guest FROZE (no output, no in-guest time limit firing) during "
                         f"{f[0]} {f[1]} {f[2]} rep {f[3]}: {' '.join(f[4:])}. Runs after it in that boot are missing.")
    if not manifest.exists():
        return env, status
    for line in manifest.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) < 6:
            continue
        case, variant, target, rep, kind, value = parts[:6]
        variant += suffix
        if kind == "pool":
            m = re.search(r"thin-pool \d+ \d+/\d+ (\d+)/(\d+)", value)
            if m:
                notes.append(f"{boot_dir.name} {case} {variant} {target}: after writing the whole volume the "
                             f"pool reports {m.group(1)}/{m.group(2)} data blocks used"
                             + (" - nothing was provisioned, so this target's I/O went unmapped"
                                if m.group(1) == "0" else ""))
            continue
        if kind == "error":
            errors.setdefault((case, variant, target), []).append(value)
            continue
        if rep == "fill":
            continue
        try:
            if kind == "fio":
                found = metrics_from_fio(case, fio_jobs(bench / value))
            elif kind == "ns":
                found = {"ms": (int(value) / 1e6, False)}
            elif kind == "kib":
                found = {"KiB": (int(value), False)}
            elif kind == "blocks":
                found = {"metadata blocks": (int(value), False)}
            else:
                continue
        except (OSError, ValueError, KeyError) as e:
            errors.setdefault((case, variant, target), []).append(f"unreadable result {value}: {e}")
            continue
        for metric, (v, hib) in found.items():
            rows.setdefault((case, variant, metric), {"higher_is_better": hib, "values": {}})
            rows[(case, variant, metric)]["values"].setdefault(target, []).append(v)
    return env, status


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "runs": values}


def rel(a, ref, hib):
    """Relative performance of a against ref (>1: a is better)."""
    if a is None or ref is None or a == 0 or ref == 0:
        return None
    return a / ref if hib else ref / a


def fmt(v):
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def variant_key(v):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", v)]


def main():
    out = pathlib.Path(sys.argv[1])
    host = {}
    if (out / "host").exists():
        for line in (out / "host").read_text().splitlines():
            k, _, v = line.partition("=")
            host[k] = v
    rows, notes, errors, boots = {}, [], {}, {}
    for boot in sorted(out.glob("vm-*cpu*"), key=lambda p: (int(re.sub(r"\D", "", p.name.split("cpu")[0]) or 0),
                                                             p.name)):
        env, status = load_boot(boot, rows, notes, errors)
        boots[boot.name] = {"status": status, "env": env,
                            "seconds": (boot / "boot-seconds").read_text().strip()
                            if (boot / "boot-seconds").exists() else None}

    # Every (case, variant) that was attempted: measured rows, plus error-only ones.
    keys = set(rows)
    for (case, variant, target) in errors:
        if not any(k[0] == case and k[1] == variant for k in rows):
            keys.add((case, variant, "error"))
    ordered = sorted(keys, key=lambda k: (CASE_ORDER.index(k[0]) if k[0] in CASE_ORDER else 99,
                                          variant_key(k[1]), k[2]))
    results = []
    for key in ordered:
        case, variant, metric = key
        row = rows.get(key, {"higher_is_better": True, "values": {}})
        hib = row["higher_is_better"]
        cells = {}
        for t in TARGETS:
            vals = row["values"].get(t)
            errs = errors.get((case, variant, t))
            cells[t] = {"summary": summary(vals) if vals else None, "errors": errs or []}
        lin = cells["linear"]["summary"]
        lin_from = None
        if lin is None and case in LINEAR_REF:
            rc, rv = LINEAR_REF[case](variant)
            ref_row = rows.get((rc, rv, metric))
            if ref_row and ref_row["values"].get("linear"):
                lin = summary(ref_row["values"]["linear"])
                lin_from = f"{rc} {rv}"
        med = {t: (cells[t]["summary"] or {}).get("median") for t in TARGETS}
        lin_med = lin["median"] if lin else None
        results.append({
            "case": case, "variant": variant, "metric": metric, "higher_is_better": hib,
            "targets": cells, "linear_reference_from": lin_from,
            "ratios": {
                "dm-thin/linear": rel(med["dm-thin"], lin_med, hib),
                "rthin/linear": rel(med["rthin"], lin_med, hib),
                "rthin/dm-thin": rel(med["rthin"], med["dm-thin"], hib),
            },
        })

    notes += export_cost(results)
    notes = list(dict.fromkeys(notes))
    doc = {"host": host, "boots": boots, "notes": notes, "rows": results}
    (out / "results.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    md = markdown(doc)
    (out / "table.md").write_text(md)
    chart(doc, out / "chart.png")
    print(md)


def export_cost(results):
    """Case 13: each target's IOPS through NVMe/TCP as a share of its IOPS on the volume itself."""
    med = {}
    for r in results:
        if r["case"] != "c13-nvmeof-randread":
            continue
        m = re.match(r"(.*)-(local|nvme-tcp)$", r["variant"])
        if not m:
            continue
        for t in TARGETS:
            s = r["targets"][t]["summary"]
            if s:
                med[(m.group(1), m.group(2), r["metric"], t)] = s["median"]
    out = []
    for (v, kind, metric, t), local in sorted(med.items()):
        if kind != "local" or (v, "nvme-tcp", metric, t) not in med or not local:
            continue
        out.append(f"c13 {v} {t}: through NVMe/TCP it keeps {med[(v, 'nvme-tcp', metric, t)] / local:.2f} of its "
                   f"local {metric} (medians)")
    return out


def cell(c):
    if c["summary"]:
        s = c["summary"]
        text = f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"
        if c["errors"]:
            text += f" + {len(c['errors'])} error(s)"
        return text
    if c["errors"]:
        return "ERROR"
    return "—"


def markdown(doc):
    h = doc["host"]
    lines = []
    lines.append(f"Host: {h.get('nproc', '?')} CPUs ({h.get('cpu', '?')}), {h.get('mem_gib', '?')} GiB, "
                 f"{h.get('qemu', 'qemu')}, {h.get('accel', 'TCG')}; harness {h.get('git', '?')}, dm-rthin.ko from "
                 f"{h.get('module', h.get('git', '?'))}; "
                 f"`{h.get('command', '')}`, {h.get('seconds', '?')} s in all; host load average "
                 f"{h.get('load_start', '?')} at the start, {h.get('load_end', '?')} at the end (2 cores, shared).")
    for name, b in doc["boots"].items():
        e = b["env"]
        lines.append(f"{name}: {e.get('vcpus', '?')} vCPUs, {int(e.get('mem_kib', 0)) // 1024} MiB, "
                     f"kernel {e.get('kernel', '?')}, clock {e.get('clocksource', '?')}, {e.get('fio', 'fio')}, data device {e.get('data', '?')} "
                     f"({e.get('data_mib', '?')} MiB), read volume {e.get('vol_mib', '?')} MiB, write volume "
                     f"{e.get('wvol_mib', '?')} MiB, {e.get('reps', '?')} repetitions, {e.get('runtime', '?')} s "
                     f"per timed run, status {b['status']}, {b['seconds'] or '?'} s.")
    lines.append("")
    lines.append("Cells: median (min–max) over the repetitions. Ratios: relative performance from the medians, "
                 "above 1 is better than the reference (throughput value/ref; latency and time ref/value).")
    lines.append("")
    unmapped = [t for t in ("dm-thin", "rthin")
                if any(f" {t}: after writing" in n and "nothing was provisioned" in n for n in doc["notes"])]
    head = {t: t + (" †" if t in unmapped else "") for t in ("dm-thin", "rthin")}
    if unmapped:
        lines.append(f"† {' and '.join(unmapped)}: its pool provisioned no block when the volume was written "
                     f"(see the notes): this build's thin I/O is not mapped, so these columns measure a "
                     f"pass-through, not thin provisioning.")
        lines.append("")
    lines.append(f"| case | variant | metric | dm-linear | C {head['dm-thin']} | {head['rthin']} | dm-thin vs linear "
                 f"| rthin vs linear | rthin vs dm-thin |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        c = r["targets"]
        lin = cell(c["linear"])
        if r["linear_reference_from"] and not c["linear"]["summary"]:
            lin = f"(as {r['linear_reference_from']})"
        arrow = "↑" if r["higher_is_better"] else "↓"
        metric = r["metric"] if r["metric"] != "error" else "—"
        lines.append(f"| {CASE_TITLES.get(r['case'], r['case'])} | {r['variant']} | {metric} {arrow if metric != '—' else ''} "
                     f"| {lin} | {cell(c['dm-thin'])} | {cell(c['rthin'])} "
                     f"| {fmt(r['ratios']['dm-thin/linear'])} | {fmt(r['ratios']['rthin/linear'])} "
                     f"| {fmt(r['ratios']['rthin/dm-thin'])} |")
    errs = [(r, t) for r in doc["rows"] for t in TARGETS if r["targets"][t]["errors"]]
    seen = set()
    if errs or doc["notes"]:
        lines.append("")
        lines.append("Notes and errors:")
        lines.append("")
        for n in doc["notes"]:
            lines.append(f"- {n}")
        for r, t in errs:
            k = (r["case"], r["variant"], t)
            if k in seen:
                continue
            seen.add(k)
            msg = r["targets"][t]["errors"][0].replace("|", "/")
            more = len(r["targets"][t]["errors"]) - 1
            lines.append(f"- {r['case']} {r['variant']} {t}: {msg}" + (f" (and {more} more)" if more else ""))
    return "\n".join(lines) + "\n"


def chart(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in doc["rows"] if r["metric"] != "error"]
    if not rows:
        return
    labels, series = [], {"dm-thin": [], "rthin": []}
    for r in rows:
        labels.append(f"{r['case']} {r['variant']} {r['metric']}")
        lin = r["ratios"]
        series["dm-thin"].append(lin["dm-thin/linear"] or 0)
        series["rthin"].append(lin["rthin/linear"] or 0)
    # Rows without a linear reference: show rthin against dm-thin instead (dm-thin = 1).
    for i, r in enumerate(rows):
        if r["ratios"]["dm-thin/linear"] is None and r["ratios"]["rthin/dm-thin"] is not None:
            series["dm-thin"][i] = 1.0
            series["rthin"][i] = r["ratios"]["rthin/dm-thin"]
            labels[i] += " (vs dm-thin)"
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.6))
    y = list(range(len(rows)))
    h = 0.38
    ax.barh([i - h / 2 for i in y], series["dm-thin"], h, label="C dm-thin", color="#888888")
    ax.barh([i + h / 2 for i in y], series["rthin"], h, label="rthin", color="#c8501e")
    for i, r in enumerate(rows):
        for t, off in (("dm-thin", -h / 2), ("rthin", h / 2)):
            if r["targets"][t]["errors"] and not r["targets"][t]["summary"]:
                ax.text(0.02, i + off, "error", va="center", fontsize=6, color="red")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("relative performance vs dm-linear (1 = linear; >1 better), median of repetitions")
    title = f"dm-linear, C dm-thin and rthin: {doc['host'].get('command', '')} ({doc['host'].get('git', '')})"
    if any("rthin" in n and "nothing was provisioned" in n for n in doc["notes"]):
        title += "\nrthin's thin I/O was not mapped in this build (pass-through): its bars are not thin-provisioning"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
