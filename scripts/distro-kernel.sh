#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# `make distro-module`: builds dm-rthin.ko for a Debian kernel (default Debian's
# own 7.3.4+deb13-amd64; RTHIN_DISTRO_KVER=... for another) and checks that the
# kernel exports every symbol the module imports.
#
# Debian's linux-headers package has the kernel's .config, Module.symvers and
# the C side of its build tree, but not the Rust side (the kernel crate's
# metadata, the macros library). Rust symbols carry a hash of their crate, so
# that side must be rebuilt from the same source, the same .config and the same
# compiler. This script does that, inside the sysroot, under /build/distro (in
# the cache; nothing is installed into the sysroot, whose own rustc stays):
#   1. downloads (apt-get download) the kernel's headers, its config and its
#      kbuild tools, and the rustc, rust-src and pahole the kernel was built with
#      (read from its CONFIG_RUSTC_VERSION_TEXT, CONFIG_BINDGEN_VERSION_TEXT,
#      CONFIG_PAHOLE_VERSION), and unpacks them privately;
#   2. prepares a tree from linux-source of the same version, the kernel's .config
#      and Module.symvers: make olddefconfig (which must not change the config),
#      make prepare (which builds the Rust targets);
#   3. builds the module against it (scripts/module.sh KDIR=..., no selftests);
#   4. checks the module against the kernel (scripts/check-module-symbols.py).
# The tree is then usable by `make module KDIR=<tree>` and by dkms.
. "$(dirname "$0")/lib.sh"

kver=${RTHIN_DISTRO_KVER:-7.3.4+deb13-amd64}
dir_in=/build/distro
dir=$RTHIN_SYSROOT$dir_in
debs=$dir/debs
"$RTHIN_ROOT/scripts/sysroot.sh"
mkdir -p "$debs"

# deb_glob PKG[=VERSION] : the file name pattern of that package in $debs.
deb_glob() {
	local ver='*'
	[ "${1#*=}" = "$1" ] || ver=${1#*=}
	echo "$debs/${1%%=*}_${ver//:/%3a}_*.deb"
}
# download PKG[=VERSION]... : into $debs, once.
download() {
	local want=() p
	for p in "$@"; do
		compgen -G "$(deb_glob "$p")" >/dev/null || want+=("$p")
	done
	[ ${#want[@]} -eq 0 ] && return 0
	log "downloading ${want[*]}"
	# (apt's note that root downloads unsandboxed into a root-owned folder is noise here.)
	in_sysroot /bin/sh -c 'cd "$0" && apt-get download -q "$@" 2>&1' "$dir_in/debs" "${want[@]}" |
		grep -v '^W: Download is performed unsandboxed' >&2 || true
	for p in "${want[@]}"; do
		compgen -G "$(deb_glob "$p")" >/dev/null ||
			die "apt-get download did not fetch $p (is it in the sysroot's apt sources? see scripts/sysroot.sh)"
	done
}
# unpack DEST PKG[=VERSION]... : the packages' files under DEST (dpkg-deb -x, no install).
unpack() {
	local dest=$1 p
	shift
	mkdir -p "$dest"
	for p in "$@"; do dpkg-deb -x "$(compgen -G "$(deb_glob "$p")" | head -1)" "$dest"; done
}
# config_value NAME : the value of CONFIG_NAME in the kernel's .config, unquoted.
config_value() { sed -n "s/^CONFIG_$1=\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$config"; }

# 1. The kernel's headers, config and kbuild tools.
download "linux-headers-$kver" "linux-headers-${kver%-*}-common" "linux-kbuild-${kver%-*}"
kpkg=$dir/headers-$kver
kpkg_in=$dir_in/headers-$kver
[ -d "$kpkg" ] || unpack "$kpkg" "linux-headers-$kver" "linux-headers-${kver%-*}-common" "linux-kbuild-${kver%-*}"
headers=$kpkg/usr/src/linux-headers-$kver
config=$headers/.config
[ -f "$config" ] && [ -f "$headers/Module.symvers" ] || die "linux-headers-$kver has no .config or Module.symvers under $headers"
[ "$(config_value RUST)" = y ] || die "kernel $kver is built without Rust (CONFIG_RUST is not y): rthin cannot be built for it"
kernel_pkg_version=$(dpkg-deb -f "$(compgen -G "$debs/linux-headers-${kver}_*.deb")" Version)

# The compilers the kernel was built with.
rustc_text=$(config_value RUSTC_VERSION_TEXT)
bindgen_text=$(config_value BINDGEN_VERSION_TEXT)
cc_text=$(config_value CC_VERSION_TEXT)
pahole_version=$(config_value PAHOLE_VERSION)
rustc_version=$(awk '{print $2}' <<<"$rustc_text")
[ -n "$rustc_version" ] || die "kernel $kver's .config has no CONFIG_RUSTC_VERSION_TEXT"
log "kernel $kver ($kernel_pkg_version) was built by: $rustc_text; $bindgen_text; $cc_text; pahole $pahole_version"

# rustc and rust-src of that exact version, unpacked privately (rustc finds its
# standard library and rust-src relative to itself; its own libraries need
# LD_LIBRARY_PATH, hence a wrapper).
rust_deb_version=$(in_sysroot apt-cache madison rustc | awk -v v="$rustc_version" '$3 ~ "^" v "[+-]" {print $3; exit}')
[ -n "$rust_deb_version" ] ||
	die "kernel $kver needs $rustc_text (its modules must be built by the compiler that built the kernel), and the sysroot's apt sources have no rustc $rustc_version"
rust_minor=$(cut -d. -f1,2 <<<"$rustc_version")
download "rustc=$rust_deb_version" "libstd-rust-dev=$rust_deb_version" "libstd-rust-$rust_minor=$rust_deb_version" "rust-src=$rust_deb_version"
toolchain=$dir/rustc-$rustc_version
toolchain_in=$dir_in/rustc-$rustc_version
if [ ! -x "$toolchain/bin/rustc" ]; then
	rm -rf "$toolchain"
	unpack "$toolchain" "rustc=$rust_deb_version" "libstd-rust-dev=$rust_deb_version" \
		"libstd-rust-$rust_minor=$rust_deb_version" "rust-src=$rust_deb_version"
	mkdir -p "$toolchain/bin"
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/usr/lib/x86_64-linux-gnu exec %s/usr/bin/rustc "$@"\n' \
		"$toolchain_in" "$toolchain_in" >"$toolchain/bin/rustc"
	chmod +x "$toolchain/bin/rustc"
fi
got=$(in_sysroot "$toolchain_in/bin/rustc" --version)
[ "$got" = "$rustc_text" ] || die "kernel $kver was built by '$rustc_text', the downloaded rustc $rust_deb_version says '$got'"
got=$(in_sysroot bindgen --version 2>&1 | head -1)
[ "$got" = "$bindgen_text" ] || die "kernel $kver was built with '$bindgen_text', the sysroot has '$got': install that bindgen in the sysroot"

# pahole of the kernel's version: the module's BTF is generated against the
# kernel's, and a different pahole changes CONFIG_PAHOLE_VERSION.
pahole_in=$dir_in/pahole-$pahole_version
if [ "$pahole_version" != 0 ] && [ ! -x "$RTHIN_SYSROOT$pahole_in/bin/pahole" ]; then
	libelf=$(in_sysroot dpkg-query -W -f='${Version}' libelf1t64)
	download pahole libbpf1 "libdw1t64=$libelf"
	unpack "$RTHIN_SYSROOT$pahole_in" pahole libbpf1 "libdw1t64=$libelf"
	mkdir -p "$RTHIN_SYSROOT$pahole_in/bin"
	printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/usr/lib/x86_64-linux-gnu exec %s/usr/bin/pahole "$@"\n' \
		"$pahole_in" "$pahole_in" >"$RTHIN_SYSROOT$pahole_in/bin/pahole"
	chmod +x "$RTHIN_SYSROOT$pahole_in/bin/pahole"
fi
if [ "$pahole_version" != 0 ]; then
	got=$(in_sysroot "$pahole_in/bin/pahole" --version | tr -d 'v.')
	[ "$got" = "$pahole_version" ] || die "kernel $kver was built with pahole $pahole_version, the downloaded pahole is $got"
fi

# 2. The tree: linux-source of the same version.
series=$(cut -d. -f1,2 <<<"$kver")
src_version=$(in_sysroot dpkg-query -W -f='${Version}' "linux-source-$series" 2>/dev/null) ||
	die "the sysroot has no linux-source-$series (kernel $kver's source): add it to scripts/sysroot.sh"
[ "$src_version" = "$kernel_pkg_version" ] ||
	die "kernel $kver is package version $kernel_pkg_version, the sysroot's linux-source is $src_version: the Rust crate hashes need the same source"
tree_in=$dir_in/linux-$kver
tree=$RTHIN_SYSROOT$tree_in
cc=${cc_text%% *}
make_vars="CC=$cc HOSTCC=$cc RUSTC=$toolchain_in/bin/rustc HOSTRUSTC=$toolchain_in/bin/rustc KERNELRELEASE=$kver"
[ "$pahole_version" != 0 ] && make_vars+=" PAHOLE=$pahole_in/bin/pahole"
stamp=$tree/.rthin-prepared-$(printf "%s\n" "$src_version" "$make_vars" modules_prepare | cat - "$config" "$headers/Module.symvers" | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
	if [ ! -f "$tree/.rthin-source-$src_version" ]; then
		log "extracting linux-source $src_version into $tree_in"
		rm -rf "$tree"
		mkdir -p "$tree"
		tar -xJf "$RTHIN_SYSROOT"/usr/src/linux-source-$series.tar.xz -C "$tree" --strip-components=1
		touch "$tree/.rthin-source-$src_version"
	fi
	rm -f "$tree"/.rthin-prepared-*
	cp "$config" "$tree/.config"
	cp "$headers/Module.symvers" "$tree/Module.symvers"
	echo "$make_vars" >"$tree/rthin-make-vars"
	log "preparing $tree_in: make olddefconfig, make modules_prepare (with the Rust targets; several minutes)"
	preplog=$dir/prepare-$kver.log
	# shellcheck disable=SC2086 # make_vars is a list of words
	in_sysroot /bin/sh -ec "cd $tree_in && make -s $make_vars olddefconfig" >"$preplog" 2>&1 ||
		{ tail -30 "$preplog" >&2; die "make olddefconfig failed (log: $preplog)"; }
	# Options that describe the machine the kernel was built on, not the kernel:
	# whether that machine's OpenSSL can sign with ML-DSA (for sign-file).
	build_host_only='CONFIG_OPENSSL_SUPPORTS_ML_DSA='
	changed=$(diff <(grep '^CONFIG_' "$config" | sort) <(grep '^CONFIG_' "$tree/.config" | sort) |
		grep '^[<>]' | grep -vE "^[<>] ($build_host_only)" || true)
	[ -z "$changed" ] || die "make olddefconfig changed kernel $kver's config with this toolchain (the module would not match the kernel):
$changed"
	in_sysroot /bin/sh -ec "cd $tree_in && make -s -j$(($(nproc) + 1)) $make_vars modules_prepare" >>"$preplog" 2>&1 ||
		{ tail -30 "$preplog" >&2; die "make prepare failed (log: $preplog)"; }
	if grep -qi warning "$preplog"; then
		cat "$preplog" >&2
		die "make prepare warned (a compiler or tool differs from the kernel's?)"
	fi
	touch "$stamp"
fi
log "tree ready: $tree (make module KDIR=$tree)"

# 3. The module, without selftests (what a user installs).
KDIR=$tree KVER= SELFTEST=0 "$RTHIN_ROOT/scripts/module.sh"
ko=$RTHIN_OUT/module-$kver/dm-rthin.ko

# 4. Every imported symbol exported by the kernel, the vermagic the kernel's own modules carry.
download "linux-modules-$kver"
modules_deb=$(compgen -G "$debs/linux-modules-${kver}_*.deb")
"$RTHIN_ROOT/scripts/check-module-symbols.py" "$ko" "$headers/Module.symvers" "$config" "$modules_deb"
