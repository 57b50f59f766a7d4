#!/usr/bin/env bash
# Builds the Debian packages into target/packages/:
#
#   libleasehold0       the shared library (/usr/lib/<multiarch>/libleasehold.so.0)
#   libleasehold-dev    header, static library, libleasehold.so, leasehold.pc
#   leasehold           the command line tool (/usr/bin/leasehold; needs no libleasehold0)
#   php-leasehold       the PHP package under /usr/share/php/Leasehold, on PHP's default include_path:
#                       `require 'Leasehold/autoload.php';` finds libleasehold.so.0 with no configuration
#
# The tree comes from scripts/install.sh (--prefix /usr, staged with --destdir); the packages follow
# cargo-deb's and Debian's conventions (shlibs, ldconfig trigger, copyright in /usr/share/doc). Each
# binary package's Depends lists the system libraries its ELF files need, read from their NEEDED entries
# and GLIBC symbol versions, so the glibc baseline is what the build really uses.
#
#   bash scripts/package.sh            # release build, then the four .deb files
#   bash scripts/package.sh --no-build # package what target/release already holds
set -euo pipefail
cd "$(dirname "$0")/.."

build_flag=()
[ "${1:-}" = "--no-build" ] && build_flag=(--no-build)

for tool in dpkg-deb dpkg-architecture objdump; do
    command -v "$tool" >/dev/null || { echo "package.sh: $tool not found (Debian: apt-get install dpkg-dev binutils)" >&2; exit 1; }
done

version="$(sed -n 's/^version = "\([0-9][0-9.]*\)"$/\1/p' Cargo.toml | head -n 1)"
arch="$(dpkg-architecture -qDEB_HOST_ARCH)"
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
out=target/packages
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$out"
rm -f "$out"/*.deb

bash scripts/install.sh "${build_flag[@]}" --prefix /usr --libdir "/usr/lib/$multiarch" --destdir "$stage/all" >/dev/null
all="$stage/all"
lib="usr/lib/$multiarch"
so="$lib/libleasehold.so.$version"
major="${version%%.*}"

# The Debian packages of the shared libraries an ELF file needs, with the glibc version it needs.
depends_of() {
    local elf="$1" glibc needed path pkg deps=()
    glibc="$(objdump -T "$elf" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)"
    for needed in $(objdump -p "$elf" | awk '$1 == "NEEDED" { print $2 }'); do
        path="$(ldconfig -p | awk -v lib="$needed" '$1 == lib { print $NF; exit }')"
        [ -n "$path" ] || { echo "package.sh: cannot find $needed, needed by $elf" >&2; exit 1; }
        pkg="$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1)" \
            || pkg="$(dpkg -S "$path" | head -n 1 | cut -d: -f1)"
        if [ "$pkg" = libc6 ]; then
            deps+=("libc6 (>= $glibc)")
        else
            deps+=("$pkg")
        fi
    done
    printf '%s\n' "${deps[@]}" | sort -u | paste -sd, | sed 's/,/, /g'
}

# make_package NAME ARCH DEPENDS DESCRIPTION PATH... : a package of those paths (relative to the staged tree).
make_package() {
    local name="$1" pkg_arch="$2" depends="$3" description="$4"
    shift 4
    local root="$stage/$name"
    mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
    for path in "$@"; do
        mkdir -p "$root/$(dirname "$path")"
        cp -a "$all/$path" "$root/$path"
    done
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: leasehold"
        echo
        echo "Files: *"
        echo "Copyright: 2026 The Leasehold developers"
        echo "License: MIT or Apache-2.0"
        echo " On Debian systems the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0."
        echo " The MIT license:"
        echo " ."
        sed -e 's/^$/./' -e 's/^/ /' LICENSE-MIT
    } > "$root/usr/share/doc/$name/copyright"
    gzip -9n -c CHANGELOG.md > "$root/usr/share/doc/$name/changelog.gz"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $pkg_arch"
        echo "Maintainer: The Leasehold developers <leasehold@localhost>"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Section: $( [ "$name" = php-leasehold ] && echo php || { [ "$name" = leasehold ] && echo utils || echo libs; } )"
        echo "Priority: optional"
        echo "Description: $description"
        echo " Leasehold: distributed locks as leases (tokens, fencing tokens, bounded waits)"
        echo " over local files, Redis (single, Sentinel, Cluster, Redlock), PostgreSQL and MySQL/MariaDB."
    } > "$root/DEBIAN/control"
    if [ "$name" = "libleasehold$major" ]; then
        # The SONAME, for dpkg-shlibdeps of packages that link against it; ldconfig refreshes the cache.
        echo "libleasehold $major libleasehold$major (>= $version)" > "$root/DEBIAN/shlibs"
        echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
    fi
    find "$root" -path "$root/DEBIAN" -prune -o -type f -printf '%P\n' | sort |
        (cd "$root" && xargs -r md5sum) > "$root/DEBIAN/md5sums"
    dpkg-deb --build --root-owner-group -Zxz "$root" "$out/${name}_${version}_${pkg_arch}.deb" >/dev/null
    echo "$out/${name}_${version}_${pkg_arch}.deb"
}


make_package "libleasehold$major" "$arch" "$(depends_of "$all/$so")" \
    "distributed locks as leases (shared library)" \
    "$so" "$lib/libleasehold.so.$major"

make_package libleasehold-dev "$arch" "libleasehold$major (= $version)" \
    "distributed locks as leases (C header, static library, pkg-config)" \
    "usr/include/leasehold.h" "$lib/libleasehold.so" "$lib/libleasehold.a" "$lib/pkgconfig/leasehold.pc"

make_package leasehold "$arch" "$(depends_of "$all/usr/bin/leasehold")" \
    "distributed locks as leases (command line: run a job under a lock, status, bench)" \
    "usr/bin/leasehold"

# FFI is built into Debian's PHP (php8.x-common); php-cli pulls it in.
# A library of the same SONAME and at least this version speaks this package's ABI (a newer minor only adds).
make_package php-leasehold all "php-cli (>= 2:8.1~), libleasehold$major (>= $version)" \
    "distributed locks as leases (PHP package over FFI)" \
    "usr/share/php/Leasehold"

ls -l "$out"/*.deb
echo "shared library: $(stat -c %s "$all/$so") bytes (stripped)"
