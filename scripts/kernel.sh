#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds (once, then incrementally) the Rust-enabled Linux 7.3 test kernel from
# Debian's linux-source-7.3 inside the sysroot: tinyconfig plus our fragment
# (RTHIN_KERNEL_FLAVOR=debug: plus config-fragment-debug, in its own tree).
# The build is keyed on the exact linux-source version and the fragments, so a
# new package version re-extracts the tree and a fragment change reconfigures.
. "$(dirname "$0")/lib.sh"

fragments=("$RTHIN_ROOT/scripts/kernel/config-fragment")
[ "$RTHIN_KERNEL_FLAVOR" = debug ] && fragments+=("$RTHIN_ROOT/scripts/kernel/config-fragment-debug")
"$RTHIN_ROOT/scripts/sysroot.sh"

src_version=$(in_sysroot dpkg-query -W -f='${Version}' linux-source-7.3)
tree_stamp=$RTHIN_KBUILD/.rthin-source-$src_version
# Comments in the fragment do not change the kernel: key on the options only.
config_key=$(grep -hE '^CONFIG_' "${fragments[@]}" | sort | sha256sum | cut -c1-16)
config_stamp=$RTHIN_KBUILD/.rthin-config-$config_key
built_stamp=$RTHIN_KBUILD/.rthin-built-$config_key

# Each flavour extracts its own tree: the normal tree is built in place, and
# kbuild refuses a separate O= build directory from a source tree that is not clean.
if [ ! -f "$tree_stamp" ]; then
	log "extracting linux-source-7.3 $src_version"
	rm -rf "$RTHIN_KBUILD"
	mkdir -p "$RTHIN_KBUILD"
	tar -xJf "$RTHIN_SYSROOT"/usr/src/linux-source-7.3.tar.xz -C "$RTHIN_KBUILD" --strip-components=1
	echo "$src_version" >"$RTHIN_KBUILD/.rthin-linux-source-version"
	touch "$tree_stamp"
fi

if [ ! -f "$config_stamp" ]; then
	log "configuring: tinyconfig + ${fragments[*]##*/}"
	cat "${fragments[@]}" >"$RTHIN_KBUILD/rthin.config"
	in_sysroot /bin/sh -ec "
		cd $RTHIN_KBUILD_IN
		make -s ${RTHIN_KMAKE_ARGS[*]} tinyconfig
		scripts/kconfig/merge_config.sh -m -Q .config rthin.config >/dev/null
		make -s ${RTHIN_KMAKE_ARGS[*]} olddefconfig
		make -s ${RTHIN_KMAKE_ARGS[*]} rustavailable
	"
	# Every line of the fragment must have survived olddefconfig: a silently
	# dropped option would only show up as a confusing test failure much later.
	missing=$(grep -hE '^CONFIG_[A-Z0-9_]+=' "${fragments[@]}" | while read -r line; do
		grep -qxF "$line" "$RTHIN_KBUILD/.config" || echo "$line"
	done)
	[ -z "$missing" ] || die "kernel config lost these fragment options: $missing"
	rm -f "$RTHIN_KBUILD"/.rthin-config-* "$RTHIN_KBUILD"/.rthin-built-*
	touch "$config_stamp"
fi

if [ ! -f "$built_stamp" ]; then
	buildlog=$RTHIN_CACHE/kernel-build$RTHIN_FLAVOR_SUFFIX.log
	log "building linux $src_version, $RTHIN_KERNEL_FLAVOR flavour (vmlinux + modules; about 8 minutes the first time, debug: about 20)"
	jobs=$(($(nproc) + 1))
	in_sysroot /bin/sh -ec "
		cd $RTHIN_KBUILD_IN
		make -s -j$jobs ${RTHIN_KMAKE_ARGS[*]} vmlinux modules
		rm -rf $RTHIN_MODROOT_IN
		make -s ${RTHIN_KMAKE_ARGS[*]} INSTALL_MOD_PATH=$RTHIN_MODROOT_IN modules_install
	" >"$buildlog" 2>&1 || { tail -40 "$buildlog" >&2; die "kernel build failed (log: $buildlog)"; }
	touch "$built_stamp"
fi
log "kernel ($RTHIN_KERNEL_FLAVOR): linux-source-7.3 $(cat "$RTHIN_KBUILD/.rthin-linux-source-version"), $(in_sysroot rustc --version), $(in_sysroot bindgen --version 2>&1 | head -1)"
