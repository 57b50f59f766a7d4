#!/usr/bin/env bash
# Runs the PHP package's PHPUnit suite against libleasehold (already built: `cargo build --release -p
# leasehold-ffi`, or LEASEHOLD_LIBRARY=/path/to/libleasehold.so). The suite starts its own redis-server,
# PostgreSQL, MariaDB and php-fpm on free loopback ports. Exits non-zero on any failure, and when something it needs is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
workspace="$(cd "$here/../.." && pwd)"
export LEASEHOLD_LIBRARY="${LEASEHOLD_LIBRARY:-$workspace/target/release/libleasehold.so}"

fail() { echo "run-tests.sh: $*" >&2; exit 1; }
[[ -f "$LEASEHOLD_LIBRARY" ]] || fail "no library at $LEASEHOLD_LIBRARY; run: cargo build --release -p leasehold-ffi"
command -v php >/dev/null || fail "php is not installed (Debian: apt-get install php-cli)"
command -v phpunit >/dev/null || fail "phpunit is not installed (Debian: apt-get install phpunit)"
command -v redis-server >/dev/null || fail "redis-server is not installed (Debian: apt-get install redis-server)"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || [[ -n "${LEASEHOLD_TEST_PG_BIN:-}" ]] \
    || fail "PostgreSQL is not installed (Debian: apt-get install postgresql)"
{ [[ -x /usr/sbin/mariadbd ]] || [[ -x /usr/sbin/mysqld ]] || command -v mariadbd >/dev/null; } \
    && command -v mariadb-install-db >/dev/null && command -v mariadb >/dev/null \
    || fail "MariaDB is not installed (Debian: apt-get install mariadb-server mariadb-client)"
ls /usr/sbin/php-fpm* >/dev/null 2>&1 || command -v php-fpm >/dev/null || [[ -n "${PHP_FPM:-}" ]] \
    || fail "php-fpm is not installed (Debian: apt-get install php-fpm)"
for ext in ffi pcntl posix pdo_sqlite pdo_pgsql pdo_mysql redis; do
    php -r "exit(extension_loaded('$ext') ? 0 : 1);" || fail "the PHP extension $ext is missing"
done

# The framework adapters' tests load Debian's packages from PHP's include_path (no Composer registry needed).
php -r "exit(stream_resolve_include_path('Symfony/Component/Lock/autoload.php') ? 0 : 1);" \
    || fail "symfony/lock is not installed (Debian: apt-get install php-symfony-lock)"
for component in Semaphore Console Messenger; do
    php -r "exit(stream_resolve_include_path('Symfony/Component/$component/autoload.php') ? 0 : 1);" \
        || fail "symfony/${component,,} is not installed (Debian: apt-get install php-symfony-${component,,})"
done
php -r "exit(stream_resolve_include_path('Illuminate/autoload.php') ? 0 : 1);" \
    || fail "the Laravel framework is not installed (Debian: apt-get install php-laravel-framework)"

cd "$here"
exec phpunit --configuration phpunit.xml.dist "$@"
