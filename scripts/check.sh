#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make check`: every test rthin has, host and VM, with one verdict.
#   host: cargo fmt and rustfmt --check, clippy -D warnings, cargo test, core mount list,
#         the metadata core against thin-provisioning-tools (scripts/core-oracle.sh)
#   kernel: dm-rthin.ko at W=1 without warnings
#   VM: boots the test kernel, loads the module (KUnit runs), runs tests/vm/*.sh
# Exits non-zero on any failure; the last line is `check: N passed, N failed`.
# Harness self-checks: RTHIN_SELFCHECK_FAIL=kunit or =vm must make it fail.
# `make check-debug` (RTHIN_KERNEL_FLAVOR=debug): the module build and the VM
# suite against the debug kernel (KASAN, KFENCE, lockdep, RCU and atomic-sleep
# checks), outputs with the suffix -debug; the host steps do not depend on the
# kernel and are left to `make check`.
# Run one VM test: RTHIN_ONLY=<part of its name> make check
# Pass settings to the VM tests: RTHIN_VM_ENV="NAME=VALUE ..." make check
# The VM suite runs in RTHIN_SHARDS VMs at once (default 4; scripts/vm-suite.sh).
# RTHIN_SKIP_HOST=1 leaves out the host steps (fmt, clippy, cargo test, core
# mounts, oracle): with RTHIN_ONLY, the fast loop for one module change
# (`make vm-test T=NAME`). RTHIN_HOST_PARALLEL=0 runs the host steps before
# the VM suite instead of while it runs.
# The output ends with how long each phase took, then the check line.
. "$(dirname "$0")/lib.sh"

passed=0 failed=0
step() {
	local name=$1
	shift
	log "$name"
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		log "FAILED: $name"
		return 1
	fi
}
# Phase times for the summary at the end: "NAME SECONDS" lines.
t_start=$(date +%s)
phases=()
phase_t0=
phase_begin() { phase_t0=$(date +%s); }
phase_end() { phases+=("$1|$(($(date +%s) - phase_t0))"); }

cd "$RTHIN_ROOT"
export CARGO_TERM_COLOR=never
# One run at a time per clone and flavour: runs share build/ (module, initramfs, results).
mkdir -p "$RTHIN_OUT"
exec 9>"$RTHIN_OUT/.check$RTHIN_FLAVOR_SUFFIX.lock"
flock 9
# Host packages the cargo build needs (libclang, libdevmapper for rthinctl).
"$RTHIN_ROOT/scripts/host-deps.sh"
host_steps=1
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && host_steps=0
[ "${RTHIN_SKIP_HOST:-0}" = 1 ] && host_steps=0
host_parallel=${RTHIN_HOST_PARALLEL:-1}

# Independent steps: a failure is counted and the run goes on, so one run
# reports everything that is wrong.
host_tests() {
	phase_begin
	step "cargo fmt --check" cargo fmt --all -- --check || true
	step "rustfmt --check (kernel crate)" rustfmt --edition 2021 --check rust/rthin_main.rs || true
	step "cargo clippy -D warnings" cargo clippy --workspace --all-targets --quiet -- -D warnings || true
	step "cargo test" cargo test --workspace --quiet || true
	step "core mounted from lib.rs, its scenarios run by KUnit" "$RTHIN_ROOT/scripts/check-core-kunit.sh" || true
	step "no unsafe outside rust/glue" "$RTHIN_ROOT/scripts/check-unsafe.sh" || true
	phase_end "host tests (fmt, clippy, cargo test, core mounts)"
}
# The metadata core against thin-provisioning-tools (needs the sysroot).
oracle() {
	local out=$RTHIN_OUT/core-oracle.log
	if "$RTHIN_ROOT/scripts/core-oracle.sh" >"$out" 2>&1; then
		tail -1 "$out"
	else
		cat "$out"
		return 1
	fi
}
meta_images() {
	local out=$RTHIN_OUT/meta-images.log
	if "$RTHIN_ROOT/scripts/meta-images.sh" >"$out" 2>&1; then
		tail -1 "$out"
	else
		cat "$out"
		return 1
	fi
}
# make install's files, staged: binary, rthin_check, man pages matching the subcommands, completions.
install_check() {
	local d rc=0
	d=$(mktemp -d)
	DESTDIR=$d PREFIX=/usr "$RTHIN_ROOT/scripts/install.sh" >/dev/null || rc=1
	for f in sbin/rthinctl share/man/man8/rthinctl.8 share/man/man8/rthinctl-meta-check.8 \
		share/bash-completion/completions/rthinctl share/zsh/site-functions/_rthinctl \
		share/fish/vendor_completions.d/rthinctl.fish; do
		[ -s "$d/usr/$f" ] || { echo "make install: no $f" >&2; rc=1; }
	done
	grep -q 'fB.-.-live' "$d/usr/share/man/man8/rthinctl-meta-check.8" || { echo "man page lacks --live" >&2; rc=1; }
	# LVM's checker name: meta check (exit 1 on what is not metadata; an
	# unknown command would exit 2).
	local r=0
	"$d/usr/sbin/rthin_check" -q /dev/null 2>/dev/null || r=$?
	[ "$r" = 1 ] || { echo "make install: no rthin_check that runs rthinctl meta check" >&2; rc=1; }
	if readelf -S --wide "$d/usr/sbin/rthinctl" | grep -q '\.symtab'; then
		echo "make install: rthinctl is not stripped" >&2
		rc=1
	fi
	[ ! -e "$d/lib/modules" ] || { echo "make install installed a module (make install-module does)" >&2; rc=1; }
	rm -rf "$d"
	return $rc
}
# make deb: both packages build and hold what they are for.
deb_check() {
	"$RTHIN_ROOT/scripts/deb.sh" >/dev/null || return 1
	local rc=0 v deb list
	v=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$RTHIN_ROOT/tools/rthinctl/Cargo.toml" | head -1)
	list=$(dpkg-deb -c "$RTHIN_OUT/deb/rthin-dkms_${v}_all.deb") || return 1
	for f in dkms.conf Kbuild rust/rthin_main.rs rust/core/src/lib.rs rust/shim/rthin_shim.c scripts/dkms-make.sh scripts/kdir-check.sh; do
		grep -q " \./usr/src/rthin-$v/$f\$" <<<"$list" || { echo "rthin-dkms: no /usr/src/rthin-$v/$f" >&2; rc=1; }
	done
	deb=$(compgen -G "$RTHIN_OUT/deb/rthinctl_${v}_*.deb") || { echo "make deb built no rthinctl package" >&2; return 1; }
	list=$(dpkg-deb -c "$deb") || return 1
	for f in sbin/rthinctl share/man/man8/rthinctl.8 share/doc/rthinctl/examples/modprobe.d/rthin.conf; do
		grep -q " \./usr/$f\$" <<<"$list" || { echo "rthinctl package: no /usr/$f" >&2; rc=1; }
	done
	return $rc
}
host_oracle() {
	phase_begin
	step "metadata core against thin_check/thin_dump/thin_restore" oracle || true
	step "rthinctl meta on images of thin-provisioning-tools 0.9.0 and 1.x" meta_images || true
	step "make install DESTDIR=(temporary): the tools, stripped, no module" install_check || true
	step "make deb: the rthinctl and rthin-dkms packages" deb_check || true
	phase_end "oracle (core against thin-provisioning-tools)"
}
[ "$host_steps" = 1 ] && [ "$host_parallel" != 1 ] && host_tests

moddir=$RTHIN_OUT/module
[ "${RTHIN_SELFCHECK_FAIL:-}" = kunit ] && moddir=$RTHIN_OUT/module-selfcheck
moddir+=$RTHIN_FLAVOR_SUFFIX
initramfs=$RTHIN_OUT/initramfs-check$RTHIN_FLAVOR_SUFFIX.cpio.gz
results=$RTHIN_OUT/results$RTHIN_FLAVOR_SUFFIX
vm_log=$RTHIN_OUT/vm-suite$RTHIN_FLAVOR_SUFFIX.log
# Dependent steps: the VM needs the module, rthinctl and the initramfs.
vm_pid=
phase_begin
if step "kernel module build (W=1, clippy, warning-free)" env SELFTEST=1 "$RTHIN_ROOT/scripts/module.sh"; then
	phase_end "module build"
	phase_begin
	if step "rthinctl, rthin-crashtest and rthin-torture release build" cargo build --release --quiet -p rthinctl -p rthin-crashtest -p rthin-torture &&
		step "VM test data (corrupted metadata images)" \
			cargo run --release --quiet -p rthin-core-support --bin corrupt_images "$RTHIN_OUT/vm-data/corrupt" &&
		step "VM initramfs" "$RTHIN_ROOT/scripts/initramfs.sh" "$initramfs" "$moddir"; then
		phase_end "tools, test data, initramfs"
		vm_args=()
		for kv in ${RTHIN_VM_ENV:-}; do vm_args+=(--env "$kv"); done
		if [ "$RTHIN_KERNEL_FLAVOR" = debug ]; then
			log "VM run, debug kernel: KUnit and tests/vm (TCG, several times slower than make check; limit 90 minutes)"
		else
			log "VM run: KUnit and tests/vm in ${RTHIN_SHARDS:-4} VMs at most (output in ${vm_log#"$RTHIN_ROOT"/} until it ends)"
		fi
		vm_t0=$(date +%s)
		# scripts/vm-suite.sh reads RTHIN_ONLY and RTHIN_SHARDS.
		"$RTHIN_ROOT/scripts/vm-suite.sh" "${vm_args[@]}" --disk 4 --disk 4 "$initramfs" "$results" >"$vm_log" 2>&1 &
		vm_pid=$!
	else
		phase_end "tools, test data, initramfs"
	fi
else
	phase_end "module build"
fi

# The host steps run while the VMs do: the VMs mostly wait (TCG guests idle
# in their tests' sleeps and device waits), see Documentation/testing.md.
if [ "$host_steps" = 1 ]; then
	[ "$host_parallel" = 1 ] && host_tests
	host_oracle
fi

if [ -n "$vm_pid" ]; then
	wait "$vm_pid" && vm_ok=1 || vm_ok=0
	vm_secs=$(($(date +%s) - vm_t0))
	vm_out=$(cat "$vm_log")
	echo "$vm_out" | sed '$d'
	counts=$(echo "$vm_out" | tail -1)
	vm_passed=$(echo "$counts" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1/p')
	vm_failed=$(echo "$counts" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\2/p')
	passed=$((passed + ${vm_passed:-0}))
	failed=$((failed + ${vm_failed:-0}))
	# A failed VM run must count as a failure even when it reported no counts.
	[ "$vm_ok" = 1 ] || [ "${vm_failed:-0}" -gt 0 ] || failed=$((failed + 1))
	shard_times=
	if [ -f "$results/shards.txt" ]; then
		while read -r k secs rc names; do
			[ "$k" = all ] && continue
			# shellcheck disable=SC2086
			shard_times+=", shard $k: ${secs}s for $(echo $names | wc -w) test(s)"
			[ "$rc" = 0 ] || shard_times+=" (VM exit $rc)"
		done <"$results/shards.txt"
	fi
	phases+=("VM suite (${shard_times#, })|$vm_secs")
	log "VM results and logs: $results (per-test times: $results/timing.txt)"
fi

log "time per phase:"
for p in "${phases[@]}"; do
	printf '    %5ss  %s\n' "${p##*|}" "${p%|*}" >&2
done
printf '    %5ss  %s\n' "$(($(date +%s) - t_start))" "total" >&2
[ "$host_steps" = 1 ] || log "host steps (fmt, clippy, cargo test, core mounts, oracle) not run (RTHIN_SKIP_HOST=1 or check-debug)"
echo "check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
