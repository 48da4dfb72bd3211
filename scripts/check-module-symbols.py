#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Checks that a built dm-rthin.ko loads on a given kernel, from the kernel's files.

usage: check-module-symbols.py MODULE.ko MODULE.SYMVERS CONFIG [MODULES.deb]

  * every symbol the module imports (its undefined symbols) is exported by the
    kernel or one of its modules (Module.symvers), with the module importing the
    symbol's namespace if it has one;
  * with CONFIG_MODVERSIONS=y, the CRC the module records for each symbol
    (its __versions section) is the kernel's;
  * with MODULES.deb (the kernel's modules package), the module's vermagic is
    that of the kernel's own dm-thin-pool.ko, and every module it depends on is
    in the package.

Exits 1 naming each mismatch. Needs binutils (nm, objcopy) and, for the .deb,
dpkg-deb and xz.
"""

import lzma
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"[rthin] error: {msg}", file=sys.stderr)
    sys.exit(1)


def section(ko, name):
    """The raw bytes of one ELF section of ko (empty if it has none)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s")
        subprocess.run(
            ["objcopy", "-O", "binary", f"--only-section={name}", "--set-section-flags", f"{name}=alloc", ko, out],
            check=True,
        )
        with open(out, "rb") as f:
            return f.read()


def modinfo(ko_bytes_path):
    """The module's .modinfo as a list of (key, value)."""
    fields = []
    for entry in section(ko_bytes_path, ".modinfo").split(b"\0"):
        if b"=" in entry:
            k, v = entry.decode(errors="replace").split("=", 1)
            fields.append((k, v))
    return fields


def main():
    if len(sys.argv) not in (4, 5):
        fail(__doc__.strip().splitlines()[2])
    ko, symvers_path, config_path = sys.argv[1:4]
    modules_deb = sys.argv[4] if len(sys.argv) == 5 else None
    for path in (ko, symvers_path, config_path):
        if not os.path.isfile(path):
            fail(f"no such file: {path}")

    exports = {}  # symbol -> (crc, defining module, namespace)
    with open(symvers_path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 4:
                exports[cols[1]] = (int(cols[0], 16), cols[2], cols[4] if len(cols) > 4 else "")
    with open(config_path) as f:
        modversions = "CONFIG_MODVERSIONS=y\n" in f.readlines()

    nm = subprocess.run(["nm", "-u", ko], check=True, capture_output=True, text=True).stdout
    imports = sorted({line.split()[-1] for line in nm.splitlines() if line.strip()})
    info = modinfo(ko)
    imported_ns = {v for k, v in info if k == "import_ns"}
    problems = []
    missing = [s for s in imports if s not in exports]
    if missing:
        problems.append(
            f"{len(missing)} of the {len(imports)} symbols the module imports are not exported by this kernel: "
            + ", ".join(missing[:8])
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            + " (the module was built against another kernel or config, or needs an option this kernel lacks)"
        )
    for s in imports:
        ns = exports.get(s, (0, "", ""))[2]
        if ns and ns not in imported_ns:
            problems.append(f"{s} is in namespace {ns}, which the module does not import")

    if modversions:
        versions = section(ko, "__versions")
        # struct modversion_info: an unsigned long crc and a 56-byte name (x86-64).
        recorded = {}
        for off in range(0, len(versions) - 63, 64):
            crc = int.from_bytes(versions[off : off + 8], "little")
            name = versions[off + 8 : off + 64].split(b"\0", 1)[0].decode()
            recorded[name] = crc
        for s in imports:
            if s in exports and recorded.get(s) != exports[s][0]:
                got = "none" if s not in recorded else f"0x{recorded[s]:08x}"
                problems.append(f"CRC of {s}: the module has {got}, the kernel 0x{exports[s][0]:08x}")

    vermagic = next((v for k, v in info if k == "vermagic"), None)
    deps = [d for k, v in info if k == "depends" for d in v.split(",") if d]
    if modules_deb:
        listing = subprocess.run(["dpkg-deb", "-c", modules_deb], check=True, capture_output=True, text=True).stdout
        paths = [line.split()[-1] for line in listing.splitlines() if ".ko" in line]
        names = {os.path.basename(p).split(".ko")[0].replace("-", "_"): p for p in paths}
        for d in deps:
            if d.replace("-", "_") not in names:
                problems.append(f"the module depends on {d}, which is not in {os.path.basename(modules_deb)}")
        ref = names.get("dm_thin_pool")
        if ref is None:
            problems.append(f"no dm-thin-pool module in {os.path.basename(modules_deb)} to compare vermagic with")
        else:
            with tempfile.TemporaryDirectory() as d:
                tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", modules_deb], check=True, capture_output=True).stdout
                subprocess.run(["tar", "-x", "-C", d, ref], input=tar, check=True)
                path = os.path.join(d, ref)
                if path.endswith(".xz"):
                    with lzma.open(path) as src, open(path[:-3], "wb") as dst:
                        dst.write(src.read())
                    path = path[:-3]
                theirs = next((v for k, v in modinfo(path) if k == "vermagic"), None)
            if theirs != vermagic:
                problems.append(f"vermagic: the module has '{vermagic}', the kernel's dm-thin-pool '{theirs}'")

    if problems:
        for p in problems:
            print(f"[rthin] error: {ko}: {p}", file=sys.stderr)
        sys.exit(1)
    crcs = "CRCs match" if modversions else "no CRCs (CONFIG_MODVERSIONS is off)"
    print(
        f"[rthin] symbol check: {len(imports)} imported symbols, all exported by the kernel; {crcs}; "
        f"vermagic '{vermagic}'" + (", same as the kernel's dm-thin-pool" if modules_deb else "")
        + f"; depends: {','.join(deps) or 'none'}"
        + (", all in the kernel's modules package" if modules_deb else ""),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
