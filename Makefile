# SPDX-License-Identifier: GPL-2.0
# rthin: the commands people run. The kernel module itself is built by Kbuild
# (see Kbuild) inside the Debian sysroot, driven by scripts/module.sh.
#
#   make check      every test: host (fmt, clippy, cargo test) and VM (KUnit, tests/vm);
#                   the VM tests run in RTHIN_SHARDS VMs at once (default 4)
#   make vm-test T=NAME  the fast loop: rebuild the module, run the VM tests whose
#                   name contains NAME (comma-separated: several), no host steps
#   make check-debug  the module and the VM suite on a debug kernel (KASAN, KFENCE,
#                   lockdep, RCU and atomic-sleep checks; several times slower than check)
#   make demo       boots the VM and shows what rthin does (provisioning, snapshots, discards,
#                   rthinctl, the pool moving to the C dm-thin and back), every claim checked
#   make module     builds dm-rthin.ko without selftests for the test kernel (and, if
#                   missing, the sysroot and kernel) into build/module-noselftest;
#                   SELFTEST=1: with the KUnit suites, into build/module (what the test VM loads);
#                   KDIR=<prepared kernel tree> or KVER=<release> (KDIR=/lib/modules/KVER/build):
#                   against that kernel instead, into build/module-<release>
#   make distro-module  prepares a tree for Debian's own kernel (RTHIN_DISTRO_KVER, default
#                   7.3.4+deb13-amd64) from its packages, builds the module for it and
#                   checks it imports only symbols that kernel exports (scripts/distro-kernel.sh)
#   make vm-shell   boots the VM with a shell, module loaded
#   make soak       tests/vm/90-soak.sh for 20 minutes (mixed fio, snapshots, discards, suspends, reloads)
#   make torture    tests/vm/92-torture.sh's long run: TORTURE_SEQUENCES (1000) sequences on dm-thin
#                   and rthin (hours under TCG; results in build/results-torture)
#   make bench      dm-linear, C dm-thin and rthin side by side, every case (TCG: over an hour)
#   make bench-quick  cases 2 (4k randread), 7 (a 32 GiB volume) and 8 (first touches), a short case 4
#   make host-test  cargo fmt --check, clippy and cargo test only
#   make install    rthinctl (stripped), its man pages and completions; DESTDIR= and
#                   PREFIX= (default /usr/local) as packagers expect; no kernel, no module
#   make install-module KVER=<release> | KDIR=<tree>  dm-rthin.ko for that kernel (Kbuild
#                   modules_install; depmod unless DESTDIR=); without either, the test kernel's
#   make distro-check  boots Debian's own kernel (its vmlinuz and modules) in QEMU, loads
#                   the module make distro-module built for it, checks a pool, thin volume,
#                   snapshot, thin_check and the C dm-thin on it, then a subset of tests/vm
#                   (RTHIN_DISTRO_TESTS; opt-in, about 3.5 minutes; scripts/distro-boot.sh)
#   make deb        build/deb: the rthinctl and rthin-dkms Debian packages (scripts/deb.sh)
#   make dkms-check dkms build of rthin-dkms for Debian's kernel in the sysroot, then the
#                   symbol check (after make distro-module; scripts/dkms-check.sh)
#   make clean      removes this clone's build output (the cache stays)
#
# Slow artefacts are cached under $(RTHIN_CACHE) (default ~/.cache/rthin).

SHELL := /bin/bash

.PHONY: install install-module distro-module distro-check deb dkms-check check check-debug vm-test vm-durations soak torture demo module kernel sysroot vm-shell host-test clean bench bench-quick

check:
	scripts/check.sh

check-debug:
	RTHIN_KERNEL_FLAVOR=debug scripts/check.sh

vm-test:
	@[ -n "$(T)" ] || { echo "usage: make vm-test T=<part of a VM test's name>[,<another>...]" >&2; exit 2; }
	RTHIN_SKIP_HOST=1 RTHIN_ONLY="$(T)" scripts/check.sh

# tests/vm/durations.txt (shard balancing) from the last make check's VM results.
vm-durations:
	scripts/vm/timing.py --durations tests/vm/durations.txt build/results/shard-*/

soak:
	SELFTEST=1 scripts/module.sh
	cargo build --release -q -p rthinctl && scripts/initramfs.sh build/initramfs-soak.cpio.gz && scripts/vm.sh --only soak --env SOAK_SECONDS=1200 --test-timeout 1500 --timeout 2400 --disk 4 --disk 4 build/initramfs-soak.cpio.gz build/results-soak

# About 25 s a sequence under TCG: the limits leave room for 1,000 on a loaded host.
TORTURE_SEQUENCES ?= 1000
torture: module
	cargo build --release -q -p rthinctl -p rthin-torture && scripts/initramfs.sh build/initramfs-torture.cpio.gz && scripts/vm.sh --only torture --env TORTURE_SEQUENCES=$(TORTURE_SEQUENCES) --test-timeout 86400 --timeout 90000 build/initramfs-torture.cpio.gz build/results-torture

demo:
	scripts/demo.sh

module:
	SELFTEST="$(SELFTEST)" KDIR="$(KDIR)" KVER="$(KVER)" scripts/module.sh

distro-module:
	scripts/distro-kernel.sh

distro-check:
	scripts/distro-boot.sh

deb:
	scripts/deb.sh

dkms-check:
	scripts/dkms-check.sh

kernel:
	scripts/kernel.sh

sysroot:
	scripts/sysroot.sh

vm-shell:
	SELFTEST=1 scripts/module.sh
	scripts/initramfs.sh build/initramfs-shell.cpio.gz
	scripts/vm.sh --mode shell build/initramfs-shell.cpio.gz build/shell

bench:
	RTHIN_BENCH_COMMAND="make bench" scripts/bench.sh

bench-quick:
	RTHIN_BENCH_COMMAND="make bench-quick" scripts/bench.sh --quick

install:
	DESTDIR="$(DESTDIR)" PREFIX="$(or $(PREFIX),/usr/local)" scripts/install.sh

install-module:
	DESTDIR="$(DESTDIR)" KDIR="$(KDIR)" KVER="$(KVER)" scripts/install.sh --module

host-test:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo test --workspace

clean:
	rm -rf build target
