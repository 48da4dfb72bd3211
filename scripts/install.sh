#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make install [DESTDIR=...] [PREFIX=/usr/local]`: rthinctl, its man pages
# (section 8, one per subcommand) and bash/zsh/fish completions, generated
# from the command definition, and dm-rthin.ko through Kbuild's
# modules_install against the test kernel's build tree (depmod included).
# DESTDIR stages everything for a package; without it the files go to /.
. "$(dirname "$0")/lib.sh"
destdir=${DESTDIR:-}
prefix=${PREFIX:-/usr/local}
cd "$RTHIN_ROOT"
cargo build --release --quiet -p rthinctl || die "rthinctl build failed"
docs=$RTHIN_OUT/install-docs
rm -rf "$docs"
target/release/rthinctl generate-docs "$docs" || die "man pages and completions"
install -Dm755 target/release/rthinctl "$destdir$prefix/sbin/rthinctl"
install -d "$destdir$prefix/share/man/man8"
install -m644 "$docs"/man8/*.8 "$destdir$prefix/share/man/man8/"
install -Dm644 "$docs/completions/rthinctl.bash" "$destdir$prefix/share/bash-completion/completions/rthinctl"
install -Dm644 "$docs/completions/_rthinctl" "$destdir$prefix/share/zsh/site-functions/_rthinctl"
install -Dm644 "$docs/completions/rthinctl.fish" "$destdir$prefix/share/fish/vendor_completions.d/rthinctl.fish"
log "installed rthinctl, $(ls "$docs"/man8 | wc -l) man pages and 3 completions under $destdir$prefix"

# The module: Kbuild's modules_install inside the sysroot (the build tree is
# there), staged in build/, then copied to DESTDIR and indexed by depmod.
[ "${RTHIN_INSTALL_MODULE:-1}" = 1 ] || exit 0
"$RTHIN_ROOT/scripts/module.sh"
stage=$RTHIN_OUT/install-module
rm -rf "$stage"
mkdir -p "$stage"
in_sysroot make -s -C "$RTHIN_KBUILD_IN" M="$RTHIN_SRC_IN" MO="$RTHIN_SRC_IN/build/module" \
	INSTALL_MOD_PATH="$RTHIN_SRC_IN/build/install-module" DEPMOD=true modules_install ||
	die "modules_install failed"
kver=$(ls "$stage/lib/modules")
[ -n "$kver" ] && [ -n "$(find "$stage/lib/modules/$kver" -name 'dm-rthin.ko*')" ] || die "modules_install installed no dm-rthin.ko"
# depmod from the sysroot's kmod (the host may have none), on the staged tree.
in_sysroot depmod -b "$RTHIN_SRC_IN/build/install-module" "$kver" || die "depmod $kver failed"
mkdir -p "$destdir/lib/modules"
cp -a "$stage/lib/modules/$kver" "$destdir/lib/modules/"
log "installed dm-rthin.ko for kernel $kver under ${destdir}/lib/modules/$kver (depmod done)"
