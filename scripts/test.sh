#!/usr/bin/env bash
# Runs every test of Leasehold: the README's test command, and what .ci/run calls.
#
# On a fresh machine it installs what it lacks (redis-server, PostgreSQL, MariaDB, valgrind, luac5.1, PHP with
# FFI, phpunit, composer, pkg-config) with apt-get. It never uses the machine's shared servers: every test
# starts its own redis-server, PostgreSQL and MariaDB on free loopback ports. A missing server fails the
# run; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

# ---------------------------------------------------------------------------------------------------
step "tools"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db >/dev/null || missing+=(mariadb-server)
[ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
command -v valgrind >/dev/null || missing+=(valgrind)
# The Redis scripts are compiled with Lua 5.1's luac (crates/leasehold-redis/tests/scripts_compile.rs).
command -v luac5.1 >/dev/null || missing+=(lua5.1)
command -v cc >/dev/null || missing+=(gcc)
command -v make >/dev/null || missing+=(make)
command -v openssl >/dev/null || missing+=(openssl)
command -v php >/dev/null || missing+=(php-cli)
command -v phpunit >/dev/null || missing+=(phpunit)
ls /usr/sbin/php-fpm* >/dev/null 2>&1 || missing+=(php-fpm)
[ -d /usr/share/php/Psr/Log ] || missing+=(php-psr-log)
# The module list is read whole before it is searched: `php -m | grep -q` fails under pipefail when
# grep stops reading before php has written everything (php dies of SIGPIPE).
php_modules() { php -m 2>/dev/null || true; }
grep -qix pdo_sqlite <<<"$(php_modules)" || missing+=(php-sqlite3)
# The fence gate's tests (PdoGate) run on PostgreSQL and MariaDB through PDO too.
grep -qix pdo_pgsql <<<"$(php_modules)" || missing+=(php-pgsql)
grep -qix pdo_mysql <<<"$(php_modules)" || missing+=(php-mysql)
grep -qix redis <<<"$(php_modules)" || missing+=(php-redis)
[ -d /usr/share/php/Symfony/Component/Lock ] || missing+=(php-symfony-lock)
[ -d /usr/share/php/Symfony/Component/Semaphore ] || missing+=(php-symfony-semaphore)
[ -d /usr/share/php/Symfony/Component/Console ] || missing+=(php-symfony-console)
[ -d /usr/share/php/Symfony/Component/Messenger ] || missing+=(php-symfony-messenger)
[ -d /usr/share/php/Illuminate/Cache ] || missing+=(php-laravel-framework)
# Packaging and the install recipes (tests/packages/run.sh).
command -v composer >/dev/null || missing+=(composer)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v dpkg-architecture >/dev/null || missing+=(dpkg-dev)
command -v objdump >/dev/null || missing+=(binutils)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # etcd-server starts a member on the default ports (2379/2380) at install; the tests start their
  # own cluster, so that one is stopped.
  if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
    { $SUDO systemctl stop etcd || $SUDO service etcd stop; } >/dev/null 2>&1 || true
  fi
fi
# The Debian packages start their own services; the tests never use them, so stop what was just
# started by the install (the machine's pre-started servers, if any, are left alone).
redis-server --version
ls -d /usr/lib/postgresql/*/bin
/usr/sbin/mariadbd --version
etcd --version | sed -n 1p
php -v | sed -n 1p
grep -qx FFI <<<"$(php_modules)" || { echo "PHP lacks the FFI extension"; exit 1; }

# ---------------------------------------------------------------------------------------------------
step "format and lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# ---------------------------------------------------------------------------------------------------
step "Rust, C and header tests (each starts its own servers)"
# The C library first: it has no rlib (that would collide with the facade's libleasehold.rlib), so
# `cargo test` does not build it for the C tests by itself.
cargo build --locked -p leasehold-ffi
cargo test --workspace --locked -- --test-threads=4

# ---------------------------------------------------------------------------------------------------
step "PHP tests"
LEASEHOLD_LIBRARY="$PWD/target/debug/libleasehold.so" bash bindings/php/run-tests.sh

# ---------------------------------------------------------------------------------------------------
step "packages and install recipes (release build, .deb install and purge, Composer offline)"
bash tests/packages/run.sh

step "all tests passed"
