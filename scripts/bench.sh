#!/usr/bin/env bash
# The Rust benchmark suite in one command, from the repository root or anywhere:
#
#   scripts/bench.sh            # about 5 minutes after the release build
#   PERF_SECS=10 scripts/bench.sh   # longer handoff and load rows
#   PERF_PIN=1 scripts/bench.sh     # criterion benches and compare.php's cycle rounds pinned to CPU 0 with their servers
#   PERF_SCALING=1 scripts/bench.sh # also the scaling rows (keys held up to 1 M, waiters, permits: 30+ minutes)
#
# Builds in release, runs `cargo bench` of every backend crate (criterion: each figure and its floor in
# the same run), then examples/perf_run.rs (handoff across processes, `leasehold bench` under load next
# to redis-benchmark), then examples/perf_report.rs, which writes docs/perf/rust.md, the README's
# block between <!-- perf:rust:begin --> and <!-- perf:rust:end -->, and the chart docs/perf/rust.svg.
# The report draws the chart itself (the plotters crate's SVG backend), so no plotting program or font
# package has to be installed. Every server is started by the suite itself on free loopback ports; one
# that cannot start fails the run. Then bindings/php/benchmarks/compare.php measures PHP: the cycle
# beside the C ABI, two raw PINGs and the PHP locks people use (Symfony Lock, Laravel), and handoffs
# across 8 processes, into docs/perf/php.md (and php.png where gnuplot is installed). Last,
# bindings/php/benchmarks/fpm.php measures a real php-fpm pool (a worker's memory after its first
# lock, the first lock of a request beside a warm one) into docs/perf/php-fpm.md.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${PERF_SECS:-5}"
out=target/perf

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "bench.sh: \`$1\` not found: $2" >&2; exit 1; }
}
need redis-server "install redis-server (Debian: apt-get install redis-server)"
need redis-benchmark "install redis-tools (Debian: apt-get install redis-tools)"
# The MySQL bench starts its own MariaDB (mariadb-install-db, then mariadbd from /usr/sbin).
need mariadb-install-db "install mariadb-server (Debian: apt-get install mariadb-server)"
need php "install php-cli and php-fpm (Debian: apt-get install php-cli php-fpm)"
need etcd "install etcd-server (Debian: apt-get install etcd-server)"

# How busy the machine was goes into the report.
PERF_LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
export PERF_LOAD_START
export CRITERION_HOME="$PWD/target/criterion"
# Figures of an earlier run must not reach the report if a bench is skipped this time.
rm -rf "$CRITERION_HOME"/{redis,redlock5,topology,growth,postgres,mysql,local,etcd} "$out"
mkdir -p "$out" docs/perf

echo "== build (release)" >&2
cargo build --release --locked -p leasehold-cli --bin leasehold -p leasehold --example perf_run --example perf_report
cargo build --release --locked -p leasehold-ffi

echo "== cargo bench (criterion)" >&2
# Pinned, a server never waits to be woken on another CPU (on a VM that wake-up is 100 µs and more,
# and lands on some floors and not others): the ratios then compare the work done.
pin=()
if [ "${PERF_PIN:-0}" = 1 ]; then pin=(taskset -c 0); fi
"${pin[@]}" cargo bench --locked -p leasehold-redis -p leasehold-postgres -p leasehold-mysql -p leasehold-local -p leasehold-etcd --bench cycle

if [ "${PERF_SCALING:-0}" = 1 ]; then
    # Each backend's `scaling` bench prints its rows beside their floors and writes
    # target/criterion/scaling/<backend>.json; docs/perf/scaling.md says what they showed.
    echo "== scaling: keys held, waiters, permits (benches/scaling.rs)" >&2
    rm -rf "$CRITERION_HOME/scaling"
    for crate in redis postgres mysql local etcd; do
        cargo bench --locked -p "leasehold-$crate" --bench scaling
    done
fi

echo "== handoff and load (examples/perf_run.rs, ${secs} s per row)" >&2
LEASEHOLD_BIN=target/release/leasehold target/release/examples/perf_run "$out/custom.json" "$secs"

echo "== report" >&2
PERF_WHEN="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    target/release/examples/perf_report "$out/custom.json" docs/perf/rust.svg

echo "== PHP beside C, raw PINGs, Symfony Lock and Laravel (bindings/php/benchmarks/compare.php)" >&2
compare_pin=()
if [ "${PERF_PIN:-0}" = 1 ]; then compare_pin=(--pin=0); fi
LEASEHOLD_LIBRARY="$PWD/target/release/libleasehold.so" php bindings/php/benchmarks/compare.php --out=docs/perf "${compare_pin[@]}"

echo "== php-fpm (bindings/php/benchmarks/fpm.php)" >&2
LEASEHOLD_LIBRARY="$PWD/target/release/libleasehold.so" php bindings/php/benchmarks/fpm.php
echo "bench.sh: wrote docs/perf/rust.md, docs/perf/rust.svg, docs/perf/php.md, docs/perf/php-fpm.md and README.md's performance block" >&2
