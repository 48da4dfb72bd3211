#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make install [DESTDIR=...] [PREFIX=/usr/local]`: rthinctl (stripped), the
# rthin_check link to it (LVM's checker), its man
# pages (section 8, one per subcommand) and bash/zsh/fish completions, generated
# from the command definition. Builds no kernel and no module.
#
# `make install-module KVER=RELEASE | KDIR=TREE [DESTDIR=...]` (scripts/install.sh
# --module): dm-rthin.ko without selftests, built against that kernel (scripts/module.sh)
# and installed by Kbuild's modules_install under /lib/modules/RELEASE; depmod runs
# when installing into / (with DESTDIR, a package's postinst or dkms runs it).
# Without KVER or KDIR, the module is for the test kernel.
# DESTDIR stages everything for a package; without it the files go to /.
. "$(dirname "$0")/lib.sh"
destdir=${DESTDIR:-}
cd "$RTHIN_ROOT"

if [ "${1:-}" != --module ]; then
	prefix=${PREFIX:-/usr/local}
	cargo build --release --quiet -p rthinctl || die "rthinctl build failed"
	docs=$RTHIN_OUT/install-docs
	rm -rf "$docs"
	target/release/rthinctl generate-docs "$docs" || die "man pages and completions"
	# Stripped: the release binary carries its symbol table (19 MB unstripped).
	install -Dm755 -s target/release/rthinctl "$destdir$prefix/sbin/rthinctl"
	# Called as rthin_check it is `rthinctl meta check`: the name LVM's
	# thin_check_executable can point at.
	ln -sf rthinctl "$destdir$prefix/sbin/rthin_check"
	install -d "$destdir$prefix/share/man/man8"
	install -m644 "$docs"/man8/*.8 "$destdir$prefix/share/man/man8/"
	install -Dm644 "$docs/completions/rthinctl.bash" "$destdir$prefix/share/bash-completion/completions/rthinctl"
	install -Dm644 "$docs/completions/_rthinctl" "$destdir$prefix/share/zsh/site-functions/_rthinctl"
	install -Dm644 "$docs/completions/rthinctl.fish" "$destdir$prefix/share/fish/vendor_completions.d/rthinctl.fish"
	log "installed rthinctl, rthin_check, $(ls "$docs"/man8 | wc -l) man pages and 3 completions under $destdir$prefix"
	exit 0
fi

# The module: staged in build/ by modules_install, then only dm-rthin.ko is
# copied (the staged tree's module index covers just this module and must not
# replace the system's).
stage=$RTHIN_OUT/install-module
rm -rf "$stage"
mkdir -p "$stage"
INSTALL_MOD_PATH=$stage SELFTEST=0 "$RTHIN_ROOT/scripts/module.sh"
kver=$(ls "$stage/lib/modules")
[ -n "$kver" ] || die "modules_install installed nothing under $stage/lib/modules"
ko=$(cd "$stage" && find "lib/modules/$kver" -name 'dm-rthin.ko*')
[ -n "$ko" ] || die "modules_install installed no dm-rthin.ko"
install -Dm644 "$stage/$ko" "$destdir/$ko"
if [ -z "$destdir" ]; then
	command -v depmod >/dev/null || die "installed /$ko, but there is no depmod here (kmod): run depmod $kver"
	depmod "$kver" || die "depmod $kver failed"
	log "installed /$ko (depmod done): modprobe dm-rthin"
else
	log "installed $destdir/$ko (run depmod $kver on the target)"
fi
