#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Runs one command inside the Debian sysroot, with this clone mounted at /src.
# Example: scripts/in-sysroot.sh thin_check /src/build/test-images/a.img
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || die "usage: $0 COMMAND [ARG...]"
in_sysroot "$@"
