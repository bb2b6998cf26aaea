#!/usr/bin/env bash
# Packs everything `memq record` needs on a machine with no apt, no network and
# no LTTng (the lent GPU machines: x86-64, Python 3.12, root) into one
# directory that travels with the working tree (docs/GPU_CHECK.md):
#
#   DEST/libexec/   lttng, lttng-sessiond, lttng-consumerd (Debian's binaries)
#   DEST/bin/       wrappers for lttng and lttng-sessiond that find the rest of DEST
#   DEST/lib/       what the traced program loads: liblttng-ust*, liburcu*, libnuma
#   DEST/toolslib/  what only the LTTng tools link (libxml2, popt, kmod, ...): kept
#                   off the traced program's LD_LIBRARY_PATH so it never shadows the
#                   machine's own copies for PyTorch
#   DEST/python/    the ctf2perfetto package (pure Python, recording needs no
#                   third-party package) with lib/libmemq_preload.so
#   DEST/env.sh     `source` it: PATH, LD_LIBRARY_PATH, PYTHONPATH, LTTng paths
#   DEST/memq       `DEST/memq record -o DIR -- CMD` with that environment
#   DEST/MANIFEST   the Debian packages and versions inside
#
# Usage: scripts/gpu-bundle.sh [DEST]   (default .gpu-bundle; run from anywhere, needs
# apt-get download, dpkg-deb, ldd and a built preload library: `make native`)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$REPO/.gpu-bundle}
MAX_MIB=64
PRELOAD=$REPO/ctf2perfetto/lib/libmemq_preload.so
# The packages `memq record` uses directly; the libraries they link are found with ldd below.
CORE_PACKAGES=(lttng-tools liblttng-ust1 liblttng-ust-common1 liblttng-ust-ctl5 liblttng-ctl0 liburcu8)
# Every Linux machine has these, and newer copies of them must win: never bundled.
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|librt|libpthread|libresolv|libgcc_s|libstdc\+\+)\.so'
# What the traced process itself loads (LD_PRELOAD and their dependencies).
PROCESS_LIBS='^lib(lttng-ust|urcu|numa)'

die() { echo "gpu-bundle: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the GPU machines are x86_64"
[ -f "$PRELOAD" ] || die "$PRELOAD is missing: run make native first"
for tool in apt-get dpkg-deb dpkg ldd; do command -v $tool >/dev/null || die "$tool is missing"; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"

fetch() {  # fetch PACKAGE...: download and unpack into $work/root, once each
	local p
	for p in "$@"; do
		[ -e "$work/debs/$p.done" ] && continue
		(cd "$work/debs" && apt-get download -q "$p" >/dev/null 2>"$p.err") ||
			die "apt-get download $p failed: $(tail -1 "$work/debs/$p.err")"
		dpkg-deb -x "$work/debs/${p}"_*.deb "$work/root"
		echo "$p $(dpkg-deb -f "$work/debs/${p}"_*.deb Version)" >>"$work/MANIFEST"
		touch "$work/debs/$p.done"
	done
}

fetch "${CORE_PACKAGES[@]}"

# Close over the shared libraries: ldd every ELF unpacked so far, with the
# bundle's own directories first; whatever still resolves outside the bundle
# (and is not libc & co.) comes from a Debian package, fetched in turn.
arch_lib=usr/lib/x86_64-linux-gnu
while :; do
	libpath="$work/root/$arch_lib:$work/root/lib/x86_64-linux-gnu"
	missing=$(find "$work/root" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
		LD_LIBRARY_PATH="$libpath" xargs -0 -r sh -c 'ldd "$@" 2>/dev/null; true' ldd |
		awk -v root="$work/root" '$2 == "=>" && index($3, root) != 1 {print $1, $3}' | sort -u |
		grep -Ev "$SYSTEM_LIBS" || true)
	[ -z "$missing" ] && break
	packages=()
	while read -r name path; do
		[ "$path" = "not" ] && die "$name: not found on this machine either (install it, then rerun)"
		# dpkg knows a file under the path its package used: /lib or /usr/lib (merged /usr).
		real=$(readlink -f "$path")
		owner=$( { dpkg -S "$real" "/lib${real#/usr/lib}" "/usr/lib${real#/lib}" 2>/dev/null || true; } |
			head -1 | cut -d: -f1)
		[ -n "$owner" ] || die "$name ($path): no Debian package owns it"
		packages+=("$owner")
	done <<<"$missing"
	before=$(wc -l <"$work/MANIFEST")
	fetch "${packages[@]}"
	[ "$(wc -l <"$work/MANIFEST")" -gt "$before" ] || die "libraries still missing after fetching ${packages[*]}: $missing"
done

rm -rf "$DEST"
mkdir -p "$DEST"/{bin,libexec,lib,toolslib,python}
cp "$work/root/usr/bin/lttng" "$work/root/usr/bin/lttng-sessiond" "$DEST/libexec/"
cp "$work/root/$arch_lib/lttng/libexec/lttng-consumerd" "$DEST/libexec/"
# The session daemon validates session configurations against this schema at start-up
# and exits when it cannot read it (its compiled-in path is under /usr/share).
mkdir -p "$DEST/share/xml/lttng"
cp "$work/root/usr/share/xml/lttng/session.xsd" "$DEST/share/xml/lttng/"
# Shared libraries (real files and their soname links) from both library directories.
for dir in "$work/root/$arch_lib" "$work/root/lib/x86_64-linux-gnu"; do
	[ -d "$dir" ] || continue
	find "$dir" -maxdepth 1 \( -type f -o -type l \) -name 'lib*.so*' | while read -r f; do
		name=$(basename "$f")
		if [[ $name =~ $PROCESS_LIBS ]]; then cp -P "$f" "$DEST/lib/"; else cp -P "$f" "$DEST/toolslib/"; fi
	done
done
# Keep only what the tools and the traced program really load (the ICU and
# OpenSSL packages ship more libraries than libxml2 and libkmod link).
needed=$(LD_LIBRARY_PATH="$DEST/toolslib:$DEST/lib" ldd "$DEST"/libexec/* "$DEST"/lib/*.so.*.* 2>/dev/null |
	awk '$2 == "=>" {print $1}' | sort -u)
for f in "$DEST"/toolslib/*; do
	name=$(basename "$f")
	real=$(basename "$(readlink -f "$f")")
	keep=0
	for n in $needed; do
		{ [ "$n" = "$name" ] || [ "$(basename "$(readlink -f "$DEST/toolslib/$n" 2>/dev/null)")" = "$real" ]; } &&
			keep=1 && break
	done
	[ $keep = 1 ] || rm -f "$f"
done
# ctypes.util.find_library (record/preload.py) falls back to `ld -L$LD_LIBRARY_PATH -lNAME`,
# which needs the unversioned name that only the -dev packages ship.
for f in "$DEST"/lib/*.so.[0-9]; do
	ln -sf "$(basename "$f")" "${f%.so.*}.so"
done

# The recorder: the package's Python source and the preload library (recording
# imports only the standard library: checked by tests/test_gpu_check.py with python3 -S).
(cd "$REPO" && find ctf2perfetto -name '*.py' -not -path '*/__pycache__/*' -print0 |
	xargs -0 cp --parents -t "$DEST/python")
mkdir -p "$DEST/python/ctf2perfetto/lib"
cp "$PRELOAD" "$DEST/python/ctf2perfetto/lib/"
cp "$work/MANIFEST" "$DEST/MANIFEST"

cat >"$DEST/bin/lttng" <<'EOF'
#!/bin/sh
# The bundle's lttng client, with the libraries only the tools need.
B=$(cd "${0%/*}/.." && pwd)
LD_LIBRARY_PATH="$B/toolslib:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$B/libexec/lttng" "$@"
EOF
cat >"$DEST/bin/lttng-sessiond" <<'EOF'
#!/bin/sh
# The bundle's session daemon; it spawns the bundle's consumer daemon (its
# compiled-in path /usr/lib/.../lttng-consumerd does not exist on the target),
# with the bundle's session schema.
B=$(cd "${0%/*}/.." && pwd)
LTTNG_SESSION_CONFIG_XSD_PATH="$B/share/xml/lttng" LD_LIBRARY_PATH="$B/toolslib:$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$B/libexec/lttng-sessiond" \
	--consumerd64-path="$B/libexec/lttng-consumerd" --consumerd64-libdir="$B/lib" "$@"
EOF
cat >"$DEST/env.sh" <<'EOF'
# Source this (bash or sh): the bundle's LTTng and memq's recorder come first.
# LD_LIBRARY_PATH holds only LTTng-UST, urcu and numa: the traced program inherits it.
# (From a script that is not bash, set MEMQ_BUNDLE to the bundle's path first.)
MEMQ_BUNDLE=${MEMQ_BUNDLE:-$(cd "$(dirname "${BASH_SOURCE:-$0}")" && pwd)}
export MEMQ_BUNDLE
export PATH="$MEMQ_BUNDLE/bin:$PATH"
export LD_LIBRARY_PATH="$MEMQ_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$MEMQ_BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}"
export LTTNG_SESSIOND_PATH="$MEMQ_BUNDLE/bin/lttng-sessiond"
export LTTNG_CONSUMERD64_BIN="$MEMQ_BUNDLE/libexec/lttng-consumerd"
export LTTNG_CONSUMERD64_LIBDIR="$MEMQ_BUNDLE/lib"
EOF
cat >"$DEST/memq" <<'EOF'
#!/bin/sh
# `memq record` from the bundle (no other subcommand): .gpu-bundle/memq record -o trace/ -- python3 train.py
MEMQ_BUNDLE=$(cd "${0%/*}" && pwd)
. "$MEMQ_BUNDLE/env.sh"
# -P: the bundle's package, not a ctf2perfetto/ in the current directory (the repository
# root has one without its ignored lib/). PYTHON unquoted: it may carry options (python3 -S).
exec ${PYTHON:-python3} -P -m ctf2perfetto.cli.record "$@"
EOF
chmod +x "$DEST/bin/lttng" "$DEST/bin/lttng-sessiond" "$DEST/memq"

size=$(du -sbL "$DEST" | cut -f1)
[ "$size" -lt $((MAX_MIB << 20)) ] || die "$DEST is $((size >> 20)) MiB, over $MAX_MIB MiB"
echo "gpu-bundle: $DEST: $(wc -l <"$DEST/MANIFEST") packages, $((size >> 20)) MiB"
