#!/usr/bin/env bash
# Installs Leasehold from this source tree the way a C library installs (cargo-c's layout):
#
#   scripts/install.sh [--prefix DIR] [--libdir DIR] [--destdir DIR] [--no-build]
#
#   DIR/lib/libleasehold.so.0.4.0        the shared library, SONAME libleasehold.so.0
#   DIR/lib/libleasehold.so.0            -> libleasehold.so.0.4.0 (what programs load)
#   DIR/lib/libleasehold.so              -> libleasehold.so.0 (what -lleasehold links against)
#   DIR/lib/libleasehold.a               the static library (also needs -lpthread -ldl -lm)
#   DIR/lib/pkgconfig/leasehold.pc       pkg-config --cflags --libs leasehold
#   DIR/include/leasehold.h              the C header
#   DIR/bin/leasehold                    the command line tool
#   DIR/share/php/Leasehold/             the PHP package (require 'Leasehold/autoload.php' with
#                                        DIR/share/php on PHP's include_path; /usr/share/php is by default)
#   DIR/share/doc/leasehold/             README, CHANGELOG, licenses
#
# --prefix defaults to /usr/local (root needed); a prefix in your home needs no root, e.g.
# `--prefix ~/.local`. --destdir stages the tree under another root (for packaging); the paths written
# into leasehold.pc are still the --prefix ones. --no-build installs what `cargo build --release -p
# leasehold-ffi -p leasehold-cli` already built. Needs Rust (cargo) to build, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
libdir=
destdir=
build=1
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --prefix=*) prefix="${1#*=}"; shift ;;
        --libdir) libdir="${2:?--libdir needs a directory}"; shift 2 ;;
        --libdir=*) libdir="${1#*=}"; shift ;;
        --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
        --destdir=*) destdir="${1#*=}"; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) usage 0 ;;
        *) echo "install.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
case "$prefix" in /*) ;; *) prefix="$(pwd -P)/$prefix" ;; esac
prefix="${prefix%/}"
libdir="${libdir:-$prefix/lib}"
case "$libdir" in /*) ;; *) echo "install.sh: --libdir must be absolute" >&2; exit 2 ;; esac
includedir="$prefix/include"
bindir="$prefix/bin"
phpdir="$prefix/share/php/Leasehold"
docdir="$prefix/share/doc/leasehold"

# The version is the workspace's (Cargo.toml's [workspace.package]), which every crate shares.
version="$(sed -n 's/^version = "\([0-9][0-9.]*\)"$/\1/p' Cargo.toml | head -n 1)"
major="${version%%.*}"
[ -n "$version" ] || { echo "install.sh: no version in Cargo.toml" >&2; exit 1; }

if [ "$build" = 1 ]; then
    command -v cargo >/dev/null || { echo "install.sh: cargo not found (Rust is needed to build; or install the .deb packages)" >&2; exit 1; }
    cargo build --release --locked -p leasehold-ffi -p leasehold-cli
fi
release=target/release
for built in "$release/libleasehold.so" "$release/libleasehold.a" "$release/leasehold"; do
    [ -f "$built" ] || { echo "install.sh: $built is missing (run without --no-build)" >&2; exit 1; }
done

d="$destdir"
install -d "$d$libdir/pkgconfig" "$d$includedir" "$d$bindir" "$d$phpdir" "$d$docdir"
install -m 0644 "$release/libleasehold.so" "$d$libdir/libleasehold.so.$version"
ln -sfn "libleasehold.so.$version" "$d$libdir/libleasehold.so.$major"
ln -sfn "libleasehold.so.$major" "$d$libdir/libleasehold.so"
install -m 0644 "$release/libleasehold.a" "$d$libdir/libleasehold.a"
# The release profile strips the shared library and the command; rustc leaves a static library's
# objects as they are, with the standard library's debug info (about 46 MB -> a fraction of it).
if command -v strip >/dev/null; then strip --strip-debug "$d$libdir/libleasehold.a"; fi
install -m 0644 include/leasehold.h "$d$includedir/leasehold.h"
install -m 0755 "$release/leasehold" "$d$bindir/leasehold"

cat > "$d$libdir/pkgconfig/leasehold.pc" <<EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: leasehold
Description: Distributed locks as leases: fencing tokens, bounded waits (local files, Redis, Redlock, PostgreSQL)
Version: $version
Libs: -L\${libdir} -lleasehold
Libs.private: -lpthread -ldl -lm
Cflags: -I\${includedir}
EOF

# The PHP package as Composer would lay it out (autoload.php, src/, resources/, the preload script), so
# its own paths stay the same wherever it is installed.
( cd bindings/php && find autoload.php preload.php composer.json README.md src resources bin -type f ) |
while read -r file; do
    mode=0644
    [ "${file#bin/}" != "$file" ] && mode=0755
    install -D -m "$mode" "bindings/php/$file" "$d$phpdir/$file"
done

install -m 0644 README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$d$docdir/"

echo "installed Leasehold $version under ${destdir:+$destdir}$prefix (libraries in ${destdir:+$destdir}$libdir)"
if [ -z "$destdir" ]; then
    case "$libdir" in
        /usr/lib|/usr/lib/*|/usr/local/lib|/usr/local/lib/*)
            if [ "$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi ;;
        *)
            echo "note: $libdir is not on the loader's default path: link with -Wl,-rpath,$libdir," \
                 "or add it to /etc/ld.so.conf.d/ (PHP finds the library by LEASEHOLD_LIBRARY=$libdir/libleasehold.so.$major)" ;;
    esac
    echo "pkg-config: PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs leasehold"
fi
