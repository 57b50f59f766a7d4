<?php

declare(strict_types=1);

/*
 * Leasehold against the PHP locks people already use, on servers this script starts itself (one redis-server, one
 * PostgreSQL unless --no-postgres, one MariaDB unless --no-mariadb, on free loopback ports), and writes the result
 * as a Markdown table (docs/perf/php.md) and a chart of the latency distributions (docs/perf/php.png, gnuplot):
 *
 *   cargo build --release -p leasehold-ffi
 *   php bindings/php/benchmarks/compare.php [--quick] [--procs=8] [--seconds=3] [--out=docs/perf] [--no-postgres]
 *       [--no-mariadb] [--pin=CPU]
 *
 * - cycle: acquire + release of a free lock on a fresh key, one process; per-cycle latencies, in rounds that
 *   rotate the order of the contenders so that a noisy neighbour hurts them all alike. The C ABI (tests/c/bench.c,
 *   built here with cc), two raw PINGs (phpredis) and, on MariaDB, a bare GET_LOCK + RELEASE_LOCK (PDO) run in the
 *   same rounds as floors. With --pin=CPU (scripts/bench.sh passes it under PERF_PIN=1) this script, its servers
 *   and the C floor run on that one CPU for the cycle rounds: on a VM, a reply that has to wake another, idle CPU
 *   costs tens of µs per round trip (measured: the C floor took 30 µs a cycle on the server's CPU and 170 µs on the
 *   other one), and which process lands where is the scheduler's choice, so unpinned rows compare placements.
 * - handoff: N processes contend for one key, each holding it ~1 ms and asking again at once. Handoff = the
 *   holder starts releasing -> another process has it (CLOCK_MONOTONIC, shared by all processes); longest wait =
 *   from asking to having; share = acquisitions per process, fewest to most. Symfony Lock (RedisStore) and
 *   Laravel wait by polling (100 ms and 250 ms sleeps; PdoStore and the database driver too, and Leasehold on
 *   MariaDB, with pauses from 5 ms to 100 ms): that is what this measures.
 *
 * Needs Debian's php-cli, php-redis, php-symfony-lock, php-laravel-framework, redis-server, gnuplot-nox (the chart;
 * without it the table is still written), for the PostgreSQL rows postgresql and php-pgsql, and for the MariaDB rows
 * mariadb-server and php-mysql (Symfony's PdoStore and Laravel's database lock driver on their own tables, made as
 * their documentation says: PdoStore::createTable() and the cache_locks migration).
 * LEASEHOLD_LIBRARY picks the library (default: the workspace's target/release build).
 */

$here = __DIR__;
$package = dirname($here);
$workspace = dirname($package, 2);
require $package . '/autoload.php';
foreach (['Ports', 'TempDir', 'RedisServer', 'PostgresServer', 'MariaDbServer'] as $support) {
    require_once "$package/tests/Support/$support.php";
}

use Illuminate\Cache\DatabaseStore as LaravelDatabaseStore;
use Illuminate\Cache\RedisStore as LaravelRedisStore;
use Illuminate\Container\Container;
use Illuminate\Contracts\Cache\LockTimeoutException as LaravelLockTimeout;
use Illuminate\Database\Capsule\Manager as Capsule;
use Illuminate\Database\Connection as LaravelConnection;
use Illuminate\Database\Schema\Blueprint;
use Illuminate\Redis\RedisManager;
use Leasehold\Client;
use Leasehold\Laravel\LeaseholdStore as LaravelLeaseholdStore;
use Leasehold\Symfony\LeaseholdStore as SymfonyLeaseholdStore;
use Leasehold\Tests\Support\MariaDbServer;
use Leasehold\Tests\Support\PostgresServer;
use Leasehold\Tests\Support\RedisServer;
use Leasehold\Tests\Support\TempDir;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\PdoStore as SymfonyPdoStore;
use Symfony\Component\Lock\Store\PostgreSqlStore as SymfonyPostgreSqlStore;
use Symfony\Component\Lock\Store\RedisStore as SymfonyRedisStore;

const FLOORS = ['c' => 'floor: C ABI (benchmarks/c_cycle.c)', 'ping' => 'floor: two raw PINGs (phpredis)',
    'getlock' => 'floor: GET_LOCK + RELEASE_LOCK (PDO)'];
const FLOOR_BACKENDS = ['getlock' => 'MariaDB'];

function fail(string $message): never
{
    fwrite(STDERR, "compare.php: $message\n");
    exit(1);
}

function loadFrameworks(): void
{
    foreach (['Symfony/Component/Lock/autoload.php' => 'php-symfony-lock', 'Illuminate/autoload.php' => 'php-laravel-framework'] as $file => $deb) {
        $path = stream_resolve_include_path($file) ?: '/usr/share/php/' . $file;
        is_file($path) or fail("$file not found: apt-get install $deb");
        require_once $path;
    }
    class_exists(\Redis::class) or fail('the PHP extension redis is missing: apt-get install php-redis');
}

/**
 * The contenders. Each factory runs in the process that uses it and returns a function of a key name giving
 * [acquire(bool $blocking): bool, release(): void] on a fresh lock object; a blocking acquire waits at most 30 s.
 *
 * @param array{redis: int, postgres: ?string, mariadb: ?int} $servers
 * @return array<string, array{label: string, backend: string, make: callable(): callable(string): array}>
 */
function contenders(array $servers): array
{
    $redisUrl = 'redis://127.0.0.1:' . $servers['redis'];
    $phpredis = static function () use ($servers): \Redis {
        $redis = new \Redis();
        $redis->connect('127.0.0.1', $servers['redis'], 2.0) or fail('phpredis cannot connect');
        return $redis;
    };
    $leasehold = static fn (string $url): callable => static function () use ($url): callable {
        $client = Client::connect($url);
        return static function (string $name) use ($client): array {
            $lock = $client->createLock($name, 30.0);
            return [
                static fn (bool $blocking): bool => $blocking ? $lock->acquire(30.0) : $lock->tryAcquire(),
                static fn () => $lock->release(),
            ];
        };
    };
    $symfony = static fn (callable $store): callable => static function () use ($store): callable {
        $factory = new LockFactory($store());
        return static function (string $name) use ($factory): array {
            $lock = $factory->createLock($name, 30.0);
            return [static fn (bool $blocking): bool => $lock->acquire($blocking), static fn () => $lock->release()];
        };
    };
    $laravel = static fn (callable $store): callable => static function () use ($store): callable {
        $store = $store();
        return static function (string $name) use ($store): array {
            $lock = $store->lock($name, 30);
            return [
                static function (bool $blocking) use ($lock): bool {
                    if (!$blocking) {
                        return (bool) $lock->get();
                    }
                    try {
                        return (bool) $lock->block(30);
                    } catch (LaravelLockTimeout) {
                        return false;
                    }
                },
                static fn () => $lock->release(),
            ];
        };
    };

    $all = [
        'leasehold' => ['label' => 'Leasehold (PHP Lock)', 'backend' => 'Redis',
            'make' => $leasehold($redisUrl)],
        'leasehold-symfony' => ['label' => 'Symfony Lock + Leasehold store', 'backend' => 'Redis',
            'make' => $symfony(static fn () => new SymfonyLeaseholdStore(Client::connect($redisUrl), 300.0, 30.0))],
        'leasehold-laravel' => ['label' => 'Laravel lock + Leasehold driver', 'backend' => 'Redis',
            'make' => $laravel(static fn () => new LaravelLeaseholdStore(Client::connect($redisUrl)))],
        'symfony-redis' => ['label' => 'Symfony Lock + RedisStore (phpredis)', 'backend' => 'Redis',
            'make' => $symfony(static fn () => new SymfonyRedisStore($phpredis()))],
        'laravel-redis' => ['label' => 'Laravel lock + redis driver (phpredis)', 'backend' => 'Redis',
            'make' => $laravel(static fn () => new LaravelRedisStore(
                new RedisManager(new Container(), 'phpredis', [
                    'default' => ['host' => '127.0.0.1', 'port' => $servers['redis'], 'database' => 0],
                ]),
                'bench:',
                'default',
            ))],
    ];
    if ($servers['postgres'] !== null) {
        $pg = $servers['postgres'];
        $all['leasehold-pg'] = ['label' => 'Leasehold (PHP Lock), PostgreSQL advisory', 'backend' => 'PostgreSQL',
            'make' => $leasehold("$pg?lock=advisory")];
        $all['symfony-pg'] = ['label' => 'Symfony Lock + PostgreSqlStore (PDO)', 'backend' => 'PostgreSQL',
            'make' => $symfony(static function () use ($pg): SymfonyPostgreSqlStore {
                $parts = parse_url($pg);
                $pdo = new \PDO(sprintf('pgsql:host=%s;port=%d;dbname=postgres', $parts['host'], $parts['port']),
                    'postgres', null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
                return new SymfonyPostgreSqlStore($pdo);
            })];
    }
    if ($servers['mariadb'] !== null) {
        $my = mariaDbUrl($servers['mariadb']);
        $all['leasehold-my-named'] = ['label' => 'Leasehold (PHP Lock), MariaDB named (GET_LOCK)',
            'backend' => 'MariaDB', 'make' => $leasehold("$my?lock=named")];
        $all['leasehold-my-table'] = ['label' => 'Leasehold (PHP Lock), MariaDB table',
            'backend' => 'MariaDB', 'make' => $leasehold("$my?lock=table")];
        $all['symfony-my'] = ['label' => 'Symfony Lock + PdoStore (pdo_mysql)', 'backend' => 'MariaDB',
            'make' => $symfony(static fn (): SymfonyPdoStore => new SymfonyPdoStore(mariaDbPdo($servers['mariadb'])))];
        $all['laravel-my'] = ['label' => 'Laravel lock + database driver (pdo_mysql)', 'backend' => 'MariaDB',
            'make' => $laravel(static fn (): LaravelDatabaseStore => new LaravelDatabaseStore(
                laravelMariaDb($servers['mariadb']),
                'cache',
                'bench:',
            ))];
    }
    return $all;
}

function mariaDbUrl(int $port): string
{
    return sprintf('mysql://%s:%s@127.0.0.1:%d/%s', MariaDbServer::USER, MariaDbServer::PASSWORD, $port,
        MariaDbServer::DATABASE);
}

function mariaDbPdo(int $port): \PDO
{
    // Symfony's PdoStore insists on exceptions; the rest is PDO's default (emulated prepares: one round trip each).
    return new \PDO(sprintf('mysql:host=127.0.0.1;port=%d;dbname=%s', $port, MariaDbServer::DATABASE),
        MariaDbServer::USER, MariaDbServer::PASSWORD, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
}

/** A connection of Laravel's database layer outside an application, as Laravel documents it (Capsule). */
function laravelMariaDb(int $port): LaravelConnection
{
    $capsule = new Capsule();
    $capsule->addConnection([
        'driver' => 'mysql', 'host' => '127.0.0.1', 'port' => $port, 'database' => MariaDbServer::DATABASE,
        'username' => MariaDbServer::USER, 'password' => MariaDbServer::PASSWORD, 'charset' => 'utf8mb4',
        'collation' => 'utf8mb4_unicode_ci', 'prefix' => '',
    ]);
    return $capsule->getConnection();
}

/**
 * The tables of Symfony's PdoStore and Laravel's database lock driver, made once before any contender runs (the
 * handoff workers would race to make them). Leasehold makes its own on connect.
 */
function prepareMariaDb(int $port): void
{
    (new SymfonyPdoStore(mariaDbPdo($port)))->createTable();
    // Laravel's cache_locks migration (database/migrations/…_create_cache_table.php).
    laravelMariaDb($port)->getSchemaBuilder()->create('cache_locks', static function (Blueprint $table): void {
        $table->string('key')->primary();
        $table->string('owner');
        $table->integer('expiration');
    });
}

// ---------------------------------------------------------------------------------------------------------------
// A handoff worker (this script run again by the parent with --worker=BASE64-JSON).

function worker(array $job): void
{
    loadFrameworks();
    $make = contenders($job['servers'])[$job['contender']]['make'];
    $locks = $make();
    // Warm up on a key of our own: connections open, scripts loaded, classes autoloaded.
    [$acquire, $release] = $locks($job['key'] . ':warm:' . getmypid());
    $acquire(false) or fail('warm-up acquire failed');
    $release();
    $late = hrtime(true) > $job['start'];
    while (($now = hrtime(true)) < $job['start']) {
        usleep((int) max(1, min(100_000, ($job['start'] - $now) / 1000)));
    }
    $records = [];
    $timeouts = 0;
    while (hrtime(true) < $job['until']) {
        [$acquire, $release] = $locks($job['key']);
        $asked = hrtime(true);
        if (!$acquire(true)) {
            $timeouts++;
            continue;
        }
        $got = hrtime(true);
        usleep($job['hold_us']);
        $releasing = hrtime(true);
        $release();
        $records[] = [$asked, $got, $releasing];
    }
    echo json_encode(['pid' => getmypid(), 'late' => $late, 'timeouts' => $timeouts, 'records' => $records]);
}

function parseArgs(array $argv): array
{
    $options = ['quick' => false, 'procs' => null, 'seconds' => null, 'out' => null, 'postgres' => true,
        'mariadb' => true, 'worker' => null, 'pin' => null];
    foreach (array_slice($argv, 1) as $arg) {
        if ($arg === '--quick') {
            $options['quick'] = true;
        } elseif ($arg === '--no-postgres') {
            $options['postgres'] = false;
        } elseif ($arg === '--no-mariadb') {
            $options['mariadb'] = false;
        } elseif (preg_match('/^--(procs|seconds|out|worker|pin)=(.+)$/', $arg, $m) === 1) {
            $options[$m[1]] = $m[2];
        } else {
            fail("unknown argument $arg; usage: compare.php [--quick] [--procs=N] [--seconds=S] [--out=DIR] "
                . '[--no-postgres] [--no-mariadb] [--pin=CPU]');
        }
    }
    return $options;
}

// ---------------------------------------------------------------------------------------------------------------
// Statistics and measurements.

/** @param list<int|float> $sorted ascending */
function pct(array $sorted, float $q): float
{
    $n = count($sorted);
    if ($n === 0) {
        return NAN;
    }
    return (float) $sorted[(int) min($n - 1, max(0, round($q * ($n - 1))))];
}

function median(array $values): float
{
    sort($values);
    return pct($values, 0.5);
}

/** Per-cycle latencies in µs of $cycles acquire + release on fresh keys. */
function cycleRound(callable $locks, string $prefix, int $cycles): array
{
    for ($i = 0; $i < 20; $i++) { // warm-up: connections, scripts, autoloaded classes, opcode caches
        [$acquire, $release] = $locks("$prefix:warm:$i");
        $acquire(false) or fail("$prefix: warm-up acquire failed");
        $release();
    }
    $samples = [];
    for ($i = 0; $i < $cycles; $i++) {
        $start = hrtime(true);
        [$acquire, $release] = $locks("$prefix:$i");
        $acquire(false) or fail("$prefix: an uncontended acquire failed");
        $release();
        $samples[] = (hrtime(true) - $start) / 1e3;
    }
    return $samples;
}

/** Sets the CPUs of this process and of every process it started, all their threads (taskset). */
function setAffinity(string $cpus): void
{
    $pids = [getmypid()];
    for ($i = 0; $i < count($pids); $i++) {
        $children = trim((string) shell_exec('ps -o pid= --ppid ' . $pids[$i]));
        foreach ($children === '' ? [] : preg_split('/\s+/', $children) as $child) {
            $pids[] = (int) $child;
        }
    }
    foreach ($pids as $pid) {
        // A child may be gone by now (the ps above was one): its error is of no interest.
        exec('taskset -a -pc ' . escapeshellarg($cpus) . " $pid >/dev/null 2>&1");
    }
}

/** benchmarks/c_cycle.c built against the library in use, or null (with a note) without a C compiler. */
function buildCCycle(string $workspace, string $library, TempDir $dir): ?string
{
    if (trim((string) shell_exec('command -v cc')) === '') {
        fwrite(STDERR, "compare.php: no C compiler (apt-get install gcc): the C ABI row is left out\n");
        return null;
    }
    $binary = $dir->file('c_cycle');
    $command = sprintf('cc -std=c11 -O2 -Wall -I %s %s -o %s %s -Wl,-rpath,%s -lpthread 2>&1',
        escapeshellarg("$workspace/include"), escapeshellarg(__DIR__ . '/c_cycle.c'),
        escapeshellarg($binary), escapeshellarg($library), escapeshellarg(dirname($library)));
    exec($command, $lines, $exit);
    $exit === 0 or fail("cc failed on c_cycle.c:\n" . implode("\n", $lines));
    return $binary;
}

/** Per-cycle latencies in µs of the C ABI doing what the PHP rows do. */
function cCycleRound(string $binary, string $url, string $prefix, int $cycles): array
{
    $process = proc_open([$binary, $url, (string) $cycles, $prefix],
        [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
    $process !== false or fail('cannot run c_cycle');
    $out = (string) stream_get_contents($pipes[1]);
    $err = (string) stream_get_contents($pipes[2]);
    $exit = proc_close($process);
    $samples = array_map(static fn (string $ns): float => (int) $ns / 1e3, preg_split('/\s+/', trim($out)));
    if ($exit !== 0 || count($samples) !== $cycles) {
        fail("c_cycle failed ($exit): $err");
    }
    return $samples;
}

/** N worker processes contending for one key; their records merged. */
function handoff(string $contender, array $servers, int $procs, float $seconds, TempDir $dir): array
{
    $key = 'cmp:handoff:' . $contender . ':' . bin2hex(random_bytes(4));
    $start = hrtime(true) + 3_000_000_000; // time for every worker to start, bind FFI and connect
    $job = ['contender' => $contender, 'servers' => $servers, 'key' => $key, 'start' => $start,
        'until' => $start + (int) ($seconds * 1e9), 'hold_us' => 1000];
    $children = [];
    for ($w = 0; $w < $procs; $w++) {
        $out = $dir->file("$contender-$w.json");
        $err = $dir->file("$contender-$w.err");
        $command = [PHP_BINARY, __FILE__, '--worker=' . base64_encode(json_encode($job))];
        $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $out, 'w'],
            2 => ['file', $err, 'w']], $pipes);
        $process !== false or fail('cannot start a worker');
        $children[] = [$process, $out, $err];
    }
    $deadline = microtime(true) + 3.0 + $seconds + 45.0; // a blocking acquire waits at most 30 s
    $results = [];
    foreach ($children as [$process, $out, $err]) {
        // The first status that says "exited" is the only one that carries the exit code.
        while (($status = proc_get_status($process))['running'] && microtime(true) < $deadline) {
            usleep(20_000);
        }
        if ($status['running']) {
            proc_terminate($process, 9);
            fail("a $contender worker hung");
        }
        $exit = $status['exitcode'];
        proc_close($process);
        $result = json_decode((string) file_get_contents($out), true);
        if ($exit !== 0 || !is_array($result)) {
            fail("a $contender worker failed ($exit): " . file_get_contents($err));
        }
        $results[] = $result;
    }
    $events = [];
    $shares = [];
    $late = 0;
    $timeouts = 0;
    foreach ($results as $r) {
        $late += $r['late'] ? 1 : 0;
        $timeouts += $r['timeouts'];
        $shares[] = count($r['records']);
        foreach ($r['records'] as [$asked, $got, $releasing]) {
            $events[] = [$got, $releasing, $asked, $r['pid']];
        }
    }
    usort($events, static fn (array $a, array $b): int => $a[0] <=> $b[0]);
    $handoffs = [];
    $kept = 0;
    $overlaps = 0;
    $waits = [];
    foreach ($events as $i => [$got, $releasing, $asked, $pid]) {
        $waits[] = ($got - $asked) / 1e3;
        if ($i === 0) {
            continue;
        }
        [, $previousReleasing, , $previousPid] = $events[$i - 1];
        if ($got < $previousReleasing) {
            $overlaps++; // two holders at once: never expected with 30 s leases
        }
        if ($pid === $previousPid) {
            $kept++;
        } else {
            $handoffs[] = ($got - $previousReleasing) / 1e3;
        }
    }
    sort($handoffs);
    sort($waits);
    sort($shares);
    return [
        'handoffs' => $handoffs,
        'waits' => $waits,
        'acquisitions' => count($events),
        'kept' => $kept,
        'overlaps' => $overlaps,
        'longest_wait_us' => $waits === [] ? NAN : end($waits),
        'share' => [$shares[0] ?? 0, end($shares) ?: 0],
        'late' => $late,
        'timeouts' => $timeouts,
        'rate' => count($events) / $seconds,
    ];
}

// ---------------------------------------------------------------------------------------------------------------
// Output.

function us(float $us): string
{
    if (is_nan($us)) {
        return '–';
    }
    return $us >= 10_000 ? sprintf('%.1f ms', $us / 1e3) : ($us >= 1000 ? sprintf('%.2f ms', $us / 1e3) : sprintf('%.0f µs', $us));
}

function chart(string $png, array $cycle, array $handoff, array $wait, array $labels, TempDir $dir): ?string
{
    $gnuplot = trim((string) shell_exec('command -v gnuplot'));
    if ($gnuplot === '') {
        return 'gnuplot is not installed (apt-get install gnuplot-nox): no chart written';
    }
    // One row per contender: index, p5, p25, p50, p75, p95, p99, label, colour, max; whiskers p5-p95, box p25-p75.
    $rows = static function (array $series) use ($labels): string {
        $text = '';
        $i = 0;
        foreach ($series as $name => $sorted) {
            $i++;
            if ($sorted === []) {
                continue;
            }
            // Leasehold in blue, the others in orange, the floors in grey.
            $color = str_starts_with($name, 'leasehold') ? 0x3a7bd5 : (isset(FLOORS[$name]) ? 0x999999 : 0xe67e22);
            $text .= sprintf("%d %.3f %.3f %.3f %.3f %.3f %.3f \"%s\" %d %.3f\n", $i, pct($sorted, 0.05),
                pct($sorted, 0.25), pct($sorted, 0.5), pct($sorted, 0.75), pct($sorted, 0.95), pct($sorted, 0.99),
                str_replace('"', '', $labels[$name]), $color, end($sorted));
        }
        return $text;
    };
    file_put_contents($dir->file('cycle.dat'), $rows($cycle));
    file_put_contents($dir->file('handoff.dat'), $rows($handoff));
    file_put_contents($dir->file('wait.dat'), $rows($wait));
    $cycleDat = $dir->file('cycle.dat');
    $handoffDat = $dir->file('handoff.dat');
    $waitDat = $dir->file('wait.dat');
    $nCycle = count($cycle);
    $nHandoff = count($handoff);
    $script = <<<GP
        set terminal pngcairo size 2100,800 font "DejaVu Sans,10"
        set output '$png'
        set multiplot layout 1,3 title "Leasehold vs Symfony Lock and Laravel locks from PHP (box: p25–p75, line: median, whiskers: p5–p95, ×: p99, △: max)"
        set logscale y
        set format y "%.0f"
        set grid ytics mytics
        set style fill solid 0.35 border -1
        set boxwidth 0.5
        set xtics rotate by -35 left nomirror
        set bmargin 14
        unset key
        set title "uncontended cycle: acquire + release, fresh keys"
        set ylabel "µs per cycle (log)"
        set xrange [0.4:$nCycle+0.6]
        plot '$cycleDat' using 1:3:2:6:5:9:xtic(8) with candlesticks lc rgb variable whiskerbars, \
             '' using 1:4:4:4:4 with candlesticks lc rgb "black" lw 2, \
             '' using 1:7 with points pt 2 lc rgb "#c0392b", \
             '' using 1:10 with points pt 8 lc rgb "#7d3c98"
        set title "contended: holder starts releasing -> another process has it"
        set ylabel "handoff µs (log)"
        set xrange [0.4:$nHandoff+0.6]
        plot '$handoffDat' using 1:3:2:6:5:9:xtic(8) with candlesticks lc rgb variable whiskerbars, \
             '' using 1:4:4:4:4 with candlesticks lc rgb "black" lw 2, \
             '' using 1:7 with points pt 2 lc rgb "#c0392b", \
             '' using 1:10 with points pt 8 lc rgb "#7d3c98"
        set title "contended: from asking for the key to having it"
        set ylabel "wait µs (log)"
        plot '$waitDat' using 1:3:2:6:5:9:xtic(8) with candlesticks lc rgb variable whiskerbars, \
             '' using 1:4:4:4:4 with candlesticks lc rgb "black" lw 2, \
             '' using 1:7 with points pt 2 lc rgb "#c0392b", \
             '' using 1:10 with points pt 8 lc rgb "#7d3c98"
        unset multiplot
        GP;
    file_put_contents($dir->file('chart.gp'), $script);
    exec(escapeshellarg($gnuplot) . ' ' . escapeshellarg($dir->file('chart.gp')) . ' 2>&1', $lines, $exit);
    return $exit === 0 ? null : 'gnuplot failed: ' . implode("\n", $lines);
}

// ---------------------------------------------------------------------------------------------------------------

$options = parseArgs($argv);
if ($options['worker'] !== null) {
    worker(json_decode(base64_decode($options['worker']), true, 16, JSON_THROW_ON_ERROR));
    exit(0);
}
loadFrameworks();
extension_loaded('ffi') or fail('the PHP extension ffi is missing');
$quick = $options['quick'];
$procs = (int) ($options['procs'] ?? ($quick ? 4 : 8));
$seconds = (float) ($options['seconds'] ?? ($quick ? 1.0 : 3.0));
$rounds = $quick ? 3 : 8;
$cycles = $quick ? 100 : 250;
$outDir = $options['out'] ?? "$workspace/docs/perf";
is_dir($outDir) || mkdir($outDir, 0777, true) || fail("cannot create $outDir");
$library = \Leasehold\Library::defaultPath();
is_file($library) or fail("no library at $library: cargo build --release -p leasehold-ffi, or set LEASEHOLD_LIBRARY");
$version = \Leasehold\Library::load()->version();

$cores = (int) trim((string) shell_exec('nproc'));
$pin = $options['pin'];
if ($pin !== null) {
    ctype_digit($pin) or fail("--pin takes one CPU number, not $pin");
    // Before the servers start, so that they (and every PostgreSQL backend) inherit it.
    setAffinity($pin);
}
$redis = RedisServer::start();
$postgres = null;
if ($options['postgres']) {
    extension_loaded('pdo_pgsql') or fail('the PHP extension pdo_pgsql is missing (apt-get install php-pgsql), '
        . 'or pass --no-postgres');
    $postgres = PostgresServer::start();
}
$mariadb = null;
if ($options['mariadb']) {
    extension_loaded('pdo_mysql') or fail('the PHP extension pdo_mysql is missing (apt-get install php-mysql), '
        . 'or pass --no-mariadb');
    $mariadb = MariaDbServer::start();
    prepareMariaDb($mariadb->port);
}
$servers = ['redis' => $redis->port,
    'postgres' => $postgres === null ? null : 'postgres://postgres@127.0.0.1:' . $postgres->port . '/postgres',
    'mariadb' => $mariadb?->port];
$redisUrl = $redis->url();
$dir = new TempDir('compare');
$all = contenders($servers);
$labels = array_map(static fn (array $c): string => $c['label'], $all);
fprintf(STDERR, "libleasehold %s, PHP %s, redis on :%d%s%s; %d rounds x %d cycles, handoff %d procs x %.0f s\n",
    $version, PHP_VERSION, $redis->port, $postgres ? ', postgres on :' . $postgres->port : '',
    $mariadb ? ', mariadb on :' . $mariadb->port : '', $rounds, $cycles, $procs, $seconds);

// Cycle: each contender in every round, in an order rotated per round; the floors in the same rounds.
$made = array_map(static fn (array $c): callable => ($c['make'])(), $all);
$ping = new \Redis();
$ping->connect('127.0.0.1', $redis->port, 2.0);
$cBinary = buildCCycle($workspace, $library, $dir);
$floors = FLOORS;
if ($cBinary === null) {
    unset($floors['c']);
}
$getLock = null;
if ($mariadb === null) {
    unset($floors['getlock']);
} else {
    // The least a MariaDB lock can send: two statements, one round trip each, on a connection kept open.
    $floorPdo = mariaDbPdo($mariadb->port);
    $getLock = [$floorPdo->prepare('SELECT GET_LOCK(?, 0)'), $floorPdo->prepare('SELECT RELEASE_LOCK(?)')];
}
$names = array_keys($all);
$series = array_merge($names, array_keys($floors));
$samples = array_fill_keys($series, []);
for ($round = 0; $round < $rounds; $round++) {
    $shift = $round % count($series);
    foreach (array_merge(array_slice($series, $shift), array_slice($series, 0, $shift)) as $name) {
        $prefix = "cmp:cycle:$name:$round:" . getmypid();
        if ($name === 'c') {
            $s = cCycleRound($cBinary, $redisUrl, $prefix, $cycles);
        } elseif ($name === 'getlock') {
            $s = [];
            for ($i = 0; $i < $cycles; $i++) {
                $start = hrtime(true);
                $getLock[0]->execute(["$prefix:$i"]);
                $got = $getLock[0]->fetchColumn();
                $getLock[1]->execute(["$prefix:$i"]);
                $freed = $getLock[1]->fetchColumn();
                $s[] = (hrtime(true) - $start) / 1e3;
                ((int) $got === 1 && (int) $freed === 1) or fail('the bare GET_LOCK pair failed');
            }
        } elseif ($name === 'ping') {
            $s = [];
            for ($i = 0; $i < $cycles; $i++) {
                $start = hrtime(true);
                $ping->ping();
                $ping->ping();
                $s[] = (hrtime(true) - $start) / 1e3;
            }
        } else {
            $s = cycleRound($made[$name], $prefix, $cycles);
        }
        array_push($samples[$name], ...$s);
    }
    fprintf(STDERR, "cycle round %d/%d done\n", $round + 1, $rounds);
}
foreach ($samples as &$s) {
    sort($s);
}
unset($s);
$made = null; // close the connections before the handoff workers start
$getLock = $floorPdo = null;
$labels += $floors;
if ($pin !== null) {
    // Handoffs measure processes waking each other, as they do on a machine nobody pinned.
    setAffinity('0-' . ($cores - 1));
}

$handoffs = [];
foreach ($names as $name) {
    fprintf(STDERR, "handoff: %s\n", $all[$name]['label']);
    $handoffs[$name] = handoff($name, $servers, $procs, $seconds, $dir);
}

// The table.
$p50 = array_map(static fn (array $s): float => pct($s, 0.5), $samples);
$php = $p50['leasehold'];
$md = [];
$md[] = '<!-- Generated by bindings/php/benchmarks/compare.php; do not edit by hand. -->';
$md[] = 'Regenerate: `cargo build --release -p leasehold-ffi && php bindings/php/benchmarks/compare.php` '
    . '(`--quick` for a short run),  ';
$md[] = 'with Debian\'s php-cli php-redis php-pgsql php-mysql php-symfony-lock php-laravel-framework redis-server '
    . 'postgresql mariadb-server gnuplot-nox; it starts its own servers on free loopback ports and rewrites '
    . 'docs/perf/php.md and php.png.';
$md[] = '';
$md[] = sprintf('libleasehold %s, PHP %s (CLI, no opcache), Symfony Lock %s, Laravel %s, redis-server %s; '
    . '%s, %d cores, load average %.1f at the end; %s.',
    $version, PHP_VERSION, debVersion('php-symfony-lock'), debVersion('php-laravel-framework'),
    trim((string) shell_exec("redis-server --version | sed -E 's/.*v=([^ ]+).*/\\1/'")),
    php_uname('m'), $cores, sys_getloadavg()[0], gmdate('Y-m-d H:i \U\T\C'));
$md[] = '';
$md[] = sprintf('### Uncontended cycle (acquire + release, fresh keys; %d rounds × %d cycles, one process%s)',
    $rounds, $cycles, $pin === null ? ', unpinned: the scheduler placed client and server'
        : ", pinned to CPU $pin with the servers and the C floor");
$md[] = '';
$md[] = '| backend | library | p50 | p90 | p99 | mean | p50 ÷ Leasehold (PHP) |';
$md[] = '|---|---|---:|---:|---:|---:|---:|';
foreach ($series as $name) {
    $s = $samples[$name];
    $md[] = sprintf('| %s | %s | %s | %s | %s | %s | %.2f |',
        $all[$name]['backend'] ?? FLOOR_BACKENDS[$name] ?? 'Redis', $labels[$name],
        us($p50[$name]), us(pct($s, 0.9)), us(pct($s, 0.99)), us(array_sum($s) / count($s)), $p50[$name] / $php);
}
$md[] = '';
$md[] = 'Medians are the figures to compare: on a busy machine the mean mostly counts how often the scheduler '
    . 'stalled a process. Ratios (the README\'s goals), on medians:';
$md[] = '';
// Two round trips are the floor of any lock cycle, this library's or another's: the goal is a ratio to
// that floor; how Leasehold compares with Symfony Lock and Laravel is reported beside it.
$md[] = sprintf('- PHP cycle ÷ two raw PINGs: **%.2f** (%.1f µs ÷ %.1f µs; target ≤ 1.15)', $php / $p50['ping'], $php,
    $p50['ping']);
if (isset($p50['c'])) {
    $md[] = sprintf('- C cycle ÷ two raw PINGs: **%.2f** (%.1f µs ÷ %.1f µs; target ≤ 1.05)', $p50['c'] / $p50['ping'],
        $p50['c'], $p50['ping']);
    $md[] = sprintf('- PHP cycle ÷ C cycle: **%.2f** (%.1f µs ÷ %.1f µs; target ≤ 1.1)', $php / $p50['c'], $php,
        $p50['c']);
}
$md[] = sprintf('- PHP cycle ÷ Symfony Lock RedisStore: **%.2f** (%.1f µs ÷ %.1f µs); PHP cycle ÷ Laravel redis lock: '
    . '**%.2f**', $php / $p50['symfony-redis'], $php, $p50['symfony-redis'], $php / $p50['laravel-redis']);
if (isset($p50['getlock'])) {
    $named = $p50['leasehold-my-named'];
    $md[] = sprintf('- MariaDB: PHP named cycle ÷ bare GET_LOCK + RELEASE_LOCK: **%.2f** (%.1f µs ÷ %.1f µs); '
        . 'table cycle ÷ that floor: **%.2f**; named cycle ÷ Symfony Lock PdoStore: **%.2f**; named cycle ÷ Laravel '
        . 'database lock: **%.2f**', $named / $p50['getlock'], $named, $p50['getlock'],
        $p50['leasehold-my-table'] / $p50['getlock'], $named / $p50['symfony-my'], $named / $p50['laravel-my']);
}
$md[] = '';
$md[] = sprintf('### Cross-process handoff (%d processes, one key, each holds it ~1 ms and asks again at once; %.0f s)',
    $procs, $seconds);
$md[] = '';
$md[] = '| backend | library | handoffs | handoff p50 | p99 | max | wait p50 | longest wait | acquisitions per process (min–max) '
    . '| kept by the releaser | acquisitions/s |';
$md[] = '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
foreach ($names as $name) {
    $h = $handoffs[$name];
    $md[] = sprintf('| %s | %s | %d | %s | %s | %s | %s | %s | %d–%d | %.0f%% | %.0f |', $all[$name]['backend'],
        $all[$name]['label'], count($h['handoffs']), us(pct($h['handoffs'], 0.5)), us(pct($h['handoffs'], 0.99)),
        us($h['handoffs'] === [] ? NAN : end($h['handoffs'])), us(pct($h['waits'], 0.5)), us($h['longest_wait_us']), $h['share'][0],
        $h['share'][1], 100 * $h['kept'] / max(1, $h['acquisitions'] - 1), $h['rate']);
}
$md[] = '';
$md[] = 'Handoff counts only a change of holder; "kept by the releaser" is the share of acquisitions that went back '
    . 'to the process that had just released (it asked again at once). Symfony Lock\'s RedisStore and PdoStore retry '
    . 'every 100 ms, Laravel\'s block() (redis and database drivers) every 250 ms; Leasehold\'s waiters queue on '
    . 'the server and are woken by the release, except on MariaDB, where both modes retry too, after a pause '
    . 'that grows from 5 ms to 100 ms. '
    . 'Wait = from asking for the key to having it, over all acquisitions: with a queue every process waits its turn '
    . '(about N − 1 holds), with polling the releaser\'s own next ask succeeds at once while the others starve (see '
    . 'the longest wait and the share).';
$notes = [];
foreach ($handoffs as $name => $h) {
    if ($h['overlaps'] > 0) {
        $notes[] = sprintf('%s: %d acquisitions began before the previous holder released', $labels[$name],
            $h['overlaps']);
    }
    if ($h['late'] > 0 || $h['timeouts'] > 0) {
        $notes[] = sprintf('%s: %d workers started late, %d waits timed out', $labels[$name], $h['late'],
            $h['timeouts']);
    }
}
$chartError = chart("$outDir/php.png", array_filter($samples, static fn (array $s): bool => $s !== []),
    array_map(static fn (array $h): array => $h['handoffs'], $handoffs),
    array_map(static fn (array $h): array => $h['waits'], $handoffs), $labels, $dir);
if ($chartError !== null) {
    $notes[] = $chartError;
}
$md[] = '';
$md[] = '![Latency distributions](php.png)';
foreach ($notes as $note) {
    $md[] = '';
    $md[] = "Note: $note.";
    fwrite(STDERR, "compare.php: $note\n");
}
file_put_contents("$outDir/php.md", implode("\n", $md) . "\n");
echo implode("\n", $md), "\n";

function debVersion(string $package): string
{
    $version = trim((string) shell_exec("dpkg-query -W -f '\${Version}' " . escapeshellarg($package) . ' 2>/dev/null'));
    return $version === '' ? '?' : preg_replace('/\+.*$/', '', $version);
}
