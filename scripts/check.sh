#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make check`: every test rthin has, host and VM, with one verdict.
#   host: cargo fmt and rustfmt --check, clippy -D warnings, cargo test, core mount list
#   kernel: dm-rthin.ko at W=1 without warnings
#   VM: boots the test kernel, loads the module (KUnit runs), runs tests/vm/*.sh
# Exits non-zero on any failure; the last line is `check: N passed, N failed`.
# Harness self-checks: RTHIN_SELFCHECK_FAIL=kunit or =vm must make it fail.
# Run one VM test: RTHIN_ONLY=<part of its name> make check
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

cd "$RTHIN_ROOT"
export CARGO_TERM_COLOR=never
step "cargo fmt --check" cargo fmt --all -- --check
step "rustfmt --check (kernel crate)" rustfmt --edition 2021 --check rust/rthin_main.rs
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo test" cargo test --workspace --quiet
step "core modules mounted identically in the kernel crate" "$RTHIN_ROOT/scripts/check-core-mounts.sh"

moddir=$RTHIN_OUT/module
[ "${RTHIN_SELFCHECK_FAIL:-}" = kunit ] && moddir=$RTHIN_OUT/module-selfcheck
if step "kernel module build (W=1, warning-free)" "$RTHIN_ROOT/scripts/module.sh" &&
	step "rthinctl release build" cargo build --release --quiet -p rthinctl &&
	step "VM initramfs" "$RTHIN_ROOT/scripts/initramfs.sh" "$RTHIN_OUT/initramfs-check.cpio.gz" "$moddir"; then
	vm_args=()
	[ -n "${RTHIN_ONLY:-}" ] && vm_args+=(--only "$RTHIN_ONLY")
	log "VM run: KUnit and tests/vm (TCG, a few minutes)"
	if "$RTHIN_ROOT/scripts/vm.sh" "${vm_args[@]}" --disk 4 --disk 4 "$RTHIN_OUT/initramfs-check.cpio.gz" "$RTHIN_OUT/results"; then
		suites=$(grep -rhoE 'kunit_tests\(([a-z0-9_]+)\)' rust --include='*.rs' | sed -E 's/kunit_tests\((.*)\)/\1/' | sort -u)
		# shellcheck disable=SC2086
		report=$(python3 "$RTHIN_ROOT/scripts/vm/report.py" "$RTHIN_OUT/results" $suites) && vm_ok=1 || vm_ok=0
		echo "$report" | sed '$d'
		vm_counts=$(echo "$report" | tail -1)
		vm_passed=$(echo "$vm_counts" | sed -nE 's/^([0-9]+) passed.*/\1/p')
		vm_failed=$(echo "$vm_counts" | sed -nE 's/.* ([0-9]+) failed.*/\1/p')
		passed=$((passed + ${vm_passed:-0}))
		failed=$((failed + ${vm_failed:-0}))
		[ "$vm_ok" = 1 ] || [ "${vm_failed:-0}" -gt 0 ] || failed=$((failed + 1))
		log "VM results and logs: $RTHIN_OUT/results"
	else
		failed=$((failed + 1))
		log "FAILED: the VM run produced no results (console: $RTHIN_OUT/results/console.log)"
	fi
fi

echo "check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
