#!/usr/bin/env bash
# The README's Install recipes, run as a new user would (called by scripts/test.sh; needs root for dpkg):
#
# 1. scripts/install.sh into a user prefix: a C program built with that prefix's pkg-config file, and the
#    PHP package from that prefix, each lock.
# 2. scripts/package.sh makes the four .deb files; `dpkg -i` of them on this machine, then with an empty
#    environment: `pkg-config --modversion leasehold`, a C program built with `pkg-config --cflags --libs
#    leasehold` (and one linked statically), a PHP script that requires 'Leasehold/autoload.php', and the
#    `leasehold` command each work. The packages are purged afterwards.
# 3. Composer: `composer validate --strict`, and a fresh project that requires leasehold/leasehold from a
#    path repository (copied, no symlinks) installs offline with the default minimum-stability and locks
#    through the installed system library.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok - $*"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $*"; }
# check NAME COMMAND...: runs the command, counts it, shows its output only when it fails.
check() {
    local name="$1" output
    shift
    if output="$("$@" 2>&1)"; then ok "$name"; else not_ok "$name"; printf '%s\n' "$output" | sed 's/^/    /'; fi
}

version="$(sed -n 's/^version = "\([0-9][0-9.]*\)"$/\1/p' Cargo.toml | head -n 1)"
major="${version%%.*}"
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
tmp="$(mktemp -d /tmp/leasehold-packages.XXXXXX)"
packages=(php-leasehold leasehold libleasehold-dev "libleasehold$major")
cleanup() {
    dpkg --purge "${packages[@]}" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
# A clean environment: what a user's shell has before they configure anything.
clean() { env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$tmp/home" LANG=C.UTF-8 "$@"; }
mkdir -p "$tmp/home"

echo "# packages: building (release) and packaging Leasehold $version"
bash scripts/package.sh
for name in "libleasehold${major}_${version}_" "libleasehold-dev_${version}_" "leasehold_${version}_" "php-leasehold_${version}_all"; do
    check "package.sh made ${name}*.deb" compgen -G "target/packages/${name}*.deb"
done

# --- 1. install.sh into a user prefix (no root, no packages) -------------------------------------------
prefix="$tmp/prefix"
check "install.sh --prefix (a user prefix)" bash scripts/install.sh --no-build --prefix "$prefix"
check "SONAME is libleasehold.so.$major" \
    sh -c "readelf -d '$prefix/lib/libleasehold.so.$version' | grep -q 'SONAME.*\[libleasehold.so.$major\]'"
check "libleasehold.so.$major and libleasehold.so are symlinks to the versioned file" \
    sh -c "[ \"\$(readlink -f '$prefix/lib/libleasehold.so')\" = '$prefix/lib/libleasehold.so.$version' ]"
check "C program built with the prefix's pkg-config file" clean sh -c "
    PKG_CONFIG_PATH='$prefix/lib/pkgconfig' && export PKG_CONFIG_PATH &&
    [ \"\$(pkg-config --modversion leasehold)\" = '$version' ] &&
    cc '$root/tests/packages/lock.c' \$(pkg-config --cflags --libs leasehold) -Wl,-rpath,'$prefix/lib' -o '$tmp/lock-prefix' &&
    '$tmp/lock-prefix' 'file://$tmp/locks'"
check "PHP package from the prefix (include_path, LEASEHOLD_LIBRARY as install.sh says)" clean \
    env LEASEHOLD_LIBRARY="$prefix/lib/libleasehold.so.$major" \
    php -d include_path=".:$prefix/share/php" "$root/tests/packages/lock.php" "file://$tmp/locks"

# --- 2. the Debian packages ------------------------------------------------------------------------------
check "dpkg -i of the four packages" dpkg -i target/packages/*.deb
so="/usr/lib/$multiarch/libleasehold.so.$major"
check "installed $so has SONAME libleasehold.so.$major" \
    sh -c "readelf -d '$so' | grep -q 'SONAME.*\[libleasehold.so.$major\]'"
check "the dynamic loader knows libleasehold.so.$major" sh -c "ldconfig -p | grep -q 'libleasehold.so.$major '"
check "pkg-config --modversion leasehold prints $version" \
    clean sh -c "[ \"\$(pkg-config --modversion leasehold)\" = '$version' ]"
check "C program: cc lock.c \$(pkg-config --cflags --libs leasehold)" clean sh -c "
    cc '$root/tests/packages/lock.c' \$(pkg-config --cflags --libs leasehold) -o '$tmp/lock' &&
    readelf -d '$tmp/lock' | grep -q 'NEEDED.*\[libleasehold.so.$major\]' &&
    '$tmp/lock' 'file://$tmp/locks' | grep -q '^version $version abi '"
check "C program linked statically (libleasehold.a)" clean sh -c "
    cc '$root/tests/packages/lock.c' \$(pkg-config --cflags leasehold) -Wl,-Bstatic -lleasehold -Wl,-Bdynamic \
        \$(pkg-config --static --libs-only-l leasehold | sed 's/-lleasehold//') -o '$tmp/lock-static' &&
    ! readelf -d '$tmp/lock-static' | grep -q 'libleasehold' &&
    '$tmp/lock-static' 'file://$tmp/locks'"
check "PHP: require 'Leasehold/autoload.php' with no configuration" clean sh -c "
    php '$root/tests/packages/lock.php' 'file://$tmp/locks' | grep -q '^php $version library $version fence '"
check "leasehold --version prints $version" clean sh -c "leasehold --version | grep -q '$version'"
check "leasehold run takes the lock and runs the job" \
    clean leasehold run --url "file://$tmp/locks" --ttl 10s package-test -- true

# --- 3. Composer (offline: a path repository, Packagist switched off) ----------------------------------
if command -v composer >/dev/null; then
    composer_env=(env COMPOSER_HOME="$tmp/composer-home" COMPOSER_ALLOW_SUPERUSER=1 COMPOSER_DISABLE_NETWORK=1 COMPOSER_NO_INTERACTION=1)
    check "composer validate --strict" clean "${composer_env[@]}" composer validate --strict --no-check-publish \
        --working-dir="$root/bindings/php"
    # A copy of the package outside this repository, as a project would vendor it (no symlinks anywhere).
    cp -r "$root/bindings/php" "$tmp/leasehold-php"
    rm -rf "$tmp/leasehold-php/vendor"
    mkdir -p "$tmp/app"
    cat > "$tmp/app/composer.json" <<EOF
{
    "name": "example/app",
    "require": { "leasehold/leasehold": "^$major.${version#*.}" },
    "repositories": [
        { "packagist.org": false },
        { "type": "path", "url": "$tmp/leasehold-php",
          "options": { "symlink": false, "versions": { "leasehold/leasehold": "$version" } } }
    ]
}
EOF
    check "composer install (default minimum-stability, path repository, copied)" \
        clean "${composer_env[@]}" composer install --no-progress --working-dir="$tmp/app"
    check "the Composer-installed package is a copy, not a symlink" test ! -L "$tmp/app/vendor/leasehold/leasehold"
    cat > "$tmp/app/main.php" <<'EOF'
<?php
require __DIR__ . '/vendor/autoload.php';
$client = Leasehold\Client::connect($argv[1]);
$lock = $client->createLock('composer-app', ttl: 10.0);
if (!$lock->tryAcquire()) { exit(1); }
echo Leasehold\Library::load()->path(), ' ', $lock->fence(), "\n";
$lock->release();
EOF
    check "PHP through Composer's autoloader finds the installed library by itself" clean sh -c "
        php '$tmp/app/main.php' 'file://$tmp/locks' | grep -q '^libleasehold.so.$major '"
else
    not_ok "composer is not installed (Debian: apt-get install composer)"
fi

check "dpkg --purge of the four packages" dpkg --purge "${packages[@]}"
check "after the purge, no libleasehold is left for the loader" sh -c "! ldconfig -p | grep -q 'libleasehold.so'"

echo "packages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
