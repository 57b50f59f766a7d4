<?php

declare(strict_types=1);

/*
 * Leasehold in a real php-fpm worker, the recommended deployment: Debian's php-fpm with ffi.enable=preload and
 * opcache.preload = bindings/php/preload.php, a persistent client (Client::connect($url, persistent: true)), Redis.
 * The script starts its own redis-server and php-fpm (pm = static, one worker, so every request meets the same
 * process) on free loopback ports, sends FastCGI requests to benchmarks/fpm/request.php, and writes the result as a
 * Markdown table (docs/perf/php-fpm.md):
 *
 *   cargo build --release -p leasehold-ffi
 *   php bindings/php/benchmarks/fpm.php [--quick] [--requests=500] [--out=docs/perf]
 *
 * - memory: the worker's VmRSS (/proc/self/status, read by the worker inside the request) in its first request,
 *   before Leasehold is touched and after one lock taken and released; then after more lock requests, to see
 *   whether it grows. Floor: the same worker before its first lock.
 * - first lock of a request: each later request times its first createLock() + tryAcquire() + release() on a fresh
 *   key, then a second one; medians over the requests. Floor: the second, warm lock of the same request. A third
 *   lock after a 1 ms pause tells a cost of the new request from a cost of the pause before it.
 *
 * Prints numbers and asserts nothing. Needs Debian's php-cli, php-fpm and redis-server. As root, php-fpm runs its
 * worker as root and the scope comes from ffi.preload (PHP refuses FFI::load() under opcache.preload_user), as the
 * README says for a root master. LEASEHOLD_LIBRARY picks the library (default: the workspace's target/release build).
 */

$here = __DIR__;
$package = dirname($here);
$workspace = dirname($package, 2);
require $package . '/autoload.php';
foreach (['Ports', 'TempDir', 'RedisServer', 'FastCgi'] as $support) {
    require_once "$package/tests/Support/$support.php";
}

use Leasehold\Library;
use Leasehold\Tests\Support\FastCgi;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\RedisServer;

/** What the finally-less paths (fail(), an exception, a signal) must still stop and remove. */
final class Running
{
    /** @var resource|null */
    public static $fpm = null;
    public static ?RedisServer $redis = null;
    public static ?string $dir = null;
}

function fail(string $message): never
{
    fwrite(STDERR, "fpm.php: $message\n");
    exit(1);
}

function parseArgs(array $argv): array
{
    $options = ['quick' => false, 'requests' => null, 'out' => null];
    foreach (array_slice($argv, 1) as $arg) {
        if ($arg === '--quick') {
            $options['quick'] = true;
        } elseif (preg_match('/^--(requests|out)=(.+)$/', $arg, $m) === 1) {
            $options[$m[1]] = $m[2];
        } else {
            fail("unknown argument $arg; usage: fpm.php [--quick] [--requests=N] [--out=DIR]");
        }
    }
    return $options;
}

function phpFpmBinary(): string
{
    foreach ([getenv('PHP_FPM') ?: '', '/usr/sbin/php-fpm' . PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION,
        '/usr/sbin/php-fpm'] as $candidate) {
        if ($candidate !== '' && is_file($candidate) && is_executable($candidate)) {
            return $candidate;
        }
    }
    fail('php-fpm is not installed (apt-get install php-fpm), or set PHP_FPM');
}

function removeTree(string $path): void
{
    if (is_dir($path) && !is_link($path)) {
        foreach (scandir($path) ?: [] as $entry) {
            if ($entry !== '.' && $entry !== '..') {
                removeTree("$path/$entry");
            }
        }
        @rmdir($path);
    } elseif (file_exists($path) || is_link($path)) {
        @unlink($path);
    }
}

function cleanUp(): void
{
    if (Running::$fpm !== null) {
        $pid = proc_get_status(Running::$fpm)['pid'];
        // The workers too, should the master have to be killed: they would outlive it.
        $children = preg_split('/\s+/', trim((string) @file_get_contents("/proc/$pid/task/$pid/children")),
            -1, PREG_SPLIT_NO_EMPTY) ?: [];
        proc_terminate(Running::$fpm, SIGTERM);
        $deadline = microtime(true) + 10.0;
        while (proc_get_status(Running::$fpm)['running'] && microtime(true) < $deadline) {
            usleep(50_000);
        }
        if (proc_get_status(Running::$fpm)['running']) {
            proc_terminate(Running::$fpm, SIGKILL);
            foreach ($children as $child) {
                posix_kill((int) $child, SIGKILL);
            }
        }
        proc_close(Running::$fpm);
        Running::$fpm = null;
    }
    Running::$redis?->stop();
    Running::$redis = null;
    if (Running::$dir !== null) {
        removeTree(Running::$dir);
        Running::$dir = null;
    }
}

function fpmLogs(): string
{
    $out = '';
    foreach (['php-fpm.log', 'php-errors.log', 'stdout', 'stderr'] as $name) {
        $file = Running::$dir . "/$name";
        if (is_file($file) && filesize($file) > 0) {
            $out .= "\n--- $name ---\n" . file_get_contents($file);
        }
    }
    return $out;
}

/**
 * php-fpm with one static worker, configured as the README's "Under php-fpm" section says.
 *
 * @return int the port it listens on
 */
function startFpm(string $dir, string $workspace, string $library, string $url): int
{
    $root = posix_geteuid() === 0;
    $port = Ports::free();
    $ini = [
        'opcache.enable=1',
        'ffi.enable=preload',
        'opcache.preload=' . $workspace . '/bindings/php/preload.php',
        'display_errors=stderr',
        'log_errors=1',
        "error_log=$dir/php-errors.log",
    ];
    if ($root) {
        // A root master preloads as opcache.preload_user, where PHP refuses FFI::load(): the header registers the
        // scope instead (what bin/leasehold-ffi-header prints).
        file_put_contents("$dir/leasehold.h", Library::preloadHeader((string) realpath($library)));
        $ini[] = "ffi.preload=$dir/leasehold.h";
        $ini[] = 'opcache.preload_user=' . (posix_getpwuid(0)['name'] ?? 'root');
    }
    file_put_contents("$dir/php.ini", implode("\n", $ini) . "\n");
    $user = (string) (posix_getpwuid(posix_geteuid())['name'] ?? 'root');
    $group = (string) (posix_getgrgid(posix_getegid())['name'] ?? 'root');
    file_put_contents("$dir/php-fpm.conf", implode("\n", [
        '[global]',
        "pid = $dir/php-fpm.pid",
        "error_log = $dir/php-fpm.log",
        'daemonize = no',
        '[fpmbench]',
        $root ? "user = $user" : '',
        $root ? "group = $group" : '',
        "listen = 127.0.0.1:$port",
        // One worker: every request meets the same process, its persistent client and its memory.
        'pm = static',
        'pm.max_children = 1',
        'catch_workers_output = yes',
        'env[LEASEHOLD_LIBRARY] = "' . $library . '"',
        'env[LEASEHOLD_URL] = "' . $url . '"',
        '',
    ]));
    $command = [phpFpmBinary(), '--nodaemonize', '--fpm-config', "$dir/php-fpm.conf", '-c', "$dir/php.ini"];
    if ($root) {
        $command[] = '--allow-to-run-as-root';
    }
    // preload.php reads LEASEHOLD_LIBRARY from the master's environment at start-up; env[] is for the requests.
    $env = array_merge(getenv(), ['LEASEHOLD_LIBRARY' => $library]);
    $process = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', "$dir/stdout", 'w'],
        2 => ['file', "$dir/stderr", 'w']], $pipes, null, $env);
    if ($process === false) {
        fail('cannot start php-fpm');
    }
    Running::$fpm = $process;
    $deadline = microtime(true) + 20.0;
    while (!Ports::answers($port)) {
        if (microtime(true) > $deadline || !proc_get_status($process)['running']) {
            fail('php-fpm did not start:' . fpmLogs());
        }
        usleep(50_000);
    }
    return $port;
}

/** One request to the worker; its JSON answer. */
function request(int $port, string $script, string $query): array
{
    try {
        $response = FastCgi::get("tcp://127.0.0.1:$port", $script, $query);
    } catch (\RuntimeException $e) {
        fail("request $query: " . $e->getMessage() . fpmLogs());
    }
    $json = json_decode($response['body'], true);
    if (!is_array($json) || isset($json['error']) || !str_contains($response['headers'], 'application/json')) {
        fail("request $query answered:\n" . $response['headers'] . "\n\n" . $response['body'] . $response['stderr']
            . fpmLogs());
    }
    if ($json['preloaded'] !== true) {
        fail('the worker did not use the preloaded FFI scope: the figures would not be the recommended deployment');
    }
    return $json;
}

/** @param list<int|float> $values */
function pct(array $values, float $q): float
{
    sort($values);
    $n = count($values);
    return $n === 0 ? NAN : (float) $values[(int) min($n - 1, max(0, round($q * ($n - 1))))];
}

function us(float $us): string
{
    return $us >= 10_000 ? sprintf('%.1f ms', $us / 1e3) : ($us >= 1000 ? sprintf('%.2f ms', $us / 1e3)
        : sprintf('%.0f µs', $us));
}

function mb(int $kb): string
{
    return sprintf('%.1f MB', $kb / 1024);
}

function signedMb(int $kb): string
{
    return sprintf('%s%.2f MB', $kb < 0 ? '−' : '+', abs($kb) / 1024);
}

// ---------------------------------------------------------------------------------------------------------------

$options = parseArgs($argv);
$quick = $options['quick'];
$requests = (int) ($options['requests'] ?? ($quick ? 100 : 500));
$requests >= 2 or fail('--requests must be at least 2');
$checkpoint = min(200, $requests);
$outDir = $options['out'] ?? "$workspace/docs/perf";
is_dir($outDir) || mkdir($outDir, 0777, true) || fail("cannot create $outDir");
extension_loaded('ffi') or fail('the PHP extension ffi is missing');
$library = Library::defaultPath();
is_file($library) or fail("no library at $library: cargo build --release -p leasehold-ffi, or set LEASEHOLD_LIBRARY");
$library = (string) realpath($library);
$build = match (true) {
    str_starts_with($library, "$workspace/target/release/") => 'release build',
    str_starts_with($library, "$workspace/target/debug/") => 'debug build, not the figures to publish',
    default => $library,
};

register_shutdown_function('cleanUp');
if (function_exists('pcntl_async_signals')) {
    // exit() runs the shutdown function; a signal's default action would not.
    pcntl_async_signals(true);
    pcntl_signal(SIGINT, static fn () => exit(130));
    pcntl_signal(SIGTERM, static fn () => exit(143));
}
$dir = sys_get_temp_dir() . '/fpmbench-' . getmypid() . '-' . bin2hex(random_bytes(4));
mkdir($dir, 0700) or fail("cannot create $dir");
Running::$dir = $dir;
Running::$redis = RedisServer::start();
$url = Running::$redis->url();
$port = startFpm($dir, $workspace, $library, $url);
$script = "$here/fpm/request.php";
fprintf(STDERR, "libleasehold at %s (%s), PHP %s, redis on :%d, php-fpm on :%d; 1 + %d requests\n", $library, $build,
    PHP_VERSION, Running::$redis->port, $port, $requests);

// Request 1: the worker's first, and its first lock.
$firstRequest = request($port, $script, 'n=1&memory=1');
$pid = $firstRequest['pid'];
$before = $firstRequest['before'];
$afterFirst = $firstRequest['after'];
// Requests 2 …: the first lock of each against a warm one in the same request.
$first = $warm = $paused = $connect = $pairRatios = [];
$second = $atCheckpoint = $last = null;
for ($i = 1; $i <= $requests; $i++) {
    $r = request($port, $script, 'n=' . ($i + 1));
    if ($r['pid'] !== $pid) {
        fail("request " . ($i + 1) . " met worker {$r['pid']}, not $pid: the pool must keep one worker");
    }
    $first[] = $r['first_ns'] / 1e3;
    $warm[] = $r['warm_ns'] / 1e3;
    $paused[] = $r['paused_ns'] / 1e3;
    $connect[] = $r['connect_ns'] / 1e3;
    $pairRatios[] = $r['first_ns'] / max(1, $r['warm_ns']);
    if ($i === 1) {
        $second = $r['after'];
    }
    if ($i === $checkpoint) {
        $atCheckpoint = $r['after'];
    }
    $last = $r['after'];
}
$load = sys_getloadavg()[0];
cleanUp();

$delta = $afterFirst['VmRSS'] - $before['VmRSS'];
$growth = $atCheckpoint['VmRSS'] - $afterFirst['VmRSS'];
$firstP50 = pct($first, 0.5);
$warmP50 = pct($warm, 0.5);
$breakdown = static fn (array $from, array $to): string => implode(', ', array_map(
    static fn (string $f): string => sprintf('%s %s', $f, signedMb($to[$f] - $from[$f])),
    ['RssAnon', 'RssFile', 'RssShmem']));

$md = [];
$md[] = '<!-- Generated by bindings/php/benchmarks/fpm.php; do not edit by hand. -->';
$md[] = 'Regenerate: `cargo build --release -p leasehold-ffi && php bindings/php/benchmarks/fpm.php` '
    . '(`--quick` for a short run),  ';
$md[] = 'with Debian\'s php-cli php-fpm redis-server; it starts its own redis-server and php-fpm (pm = static, one '
    . 'worker; ffi.enable=preload, opcache.preload = bindings/php/preload.php, LEASEHOLD_LIBRARY and LEASEHOLD_URL '
    . 'through the pool\'s env[]) on free loopback ports and rewrites docs/perf/php-fpm.md.';
$md[] = '';
$md[] = sprintf('libleasehold %s (%s), PHP %s (%s, opcache, Leasehold preloaded%s), redis-server %s, persistent '
    . 'client; %s, %d cores, load average %.1f at the end; %s.',
    $firstRequest['version'], $build, PHP_VERSION, basename(phpFpmBinary()),
    posix_geteuid() === 0 ? ', scope from ffi.preload: master as root' : '',
    trim((string) shell_exec("redis-server --version | sed -E 's/.*v=([^ ]+).*/\\1/'")),
    php_uname('m'), (int) trim((string) shell_exec('nproc')), $load, gmdate('Y-m-d H:i \U\T\C'));
$md[] = '';
$md[] = '| figure | measured | floor | ratio | goal |';
$md[] = '|---|---:|---:|---:|---|';
$md[] = sprintf('| worker RSS after its first lock | %s (%s) | %s, the same worker before it | %.2f | ≤ +8 MB |',
    mb($afterFirst['VmRSS']), signedMb($delta), mb($before['VmRSS']), $afterFirst['VmRSS'] / $before['VmRSS']);
$md[] = sprintf('| worker RSS after %d more lock requests | %s (%s) | %s, after its first lock | %.2f | no growth |',
    $checkpoint, mb($atCheckpoint['VmRSS']), signedMb($growth), mb($afterFirst['VmRSS']),
    $atCheckpoint['VmRSS'] / $afterFirst['VmRSS']);
$md[] = sprintf('| first lock of a request, median of %d | %s | %s, the warm lock of the same request | %.2f | ≤ 1.2 |',
    $requests, us($firstP50), us($warmP50), $firstP50 / $warmP50);
$md[] = '';
$md[] = sprintf('- Memory is VmRSS from /proc/self/status, read by the worker inside the request. The first lock '
    . '(Client::connect(persistent: true), which opens the connection, then createLock + tryAcquire + release): %s. '
    . 'RssFile is clean pages of mapped files (code, symbol tables), shared with the page cache and the other '
    . 'workers; RssAnon is the worker\'s own.', $breakdown($before, $afterFirst));
$md[] = sprintf('- Growth over %d requests: %.1f kB per request (%s); after all %d: %s (%s since the first lock). '
    . 'From the end of request 2, past the first request\'s shutdown, to the end of request %d: %s (%s).',
    $checkpoint, $growth / $checkpoint, $breakdown($afterFirst, $atCheckpoint), $requests, mb($last['VmRSS']),
    signedMb($last['VmRSS'] - $afterFirst['VmRSS']), $checkpoint + 1,
    signedMb($atCheckpoint['VmRSS'] - $second['VmRSS']), $breakdown($second, $atCheckpoint));
$md[] = sprintf('- Lock cycle = createLock + tryAcquire + release on a fresh key. p90: first %s, warm %s; median of '
    . 'the per-request ratio first ÷ warm: %.2f. A third lock after a 1 ms usleep() in the same request: median %s '
    . '(÷ warm: %.2f).', us(pct($first, 0.9)), us(pct($warm, 0.9)), pct($pairRatios, 0.5), us(pct($paused, 0.5)),
    pct($paused, 0.5) / $warmP50);
// Measured once with perf and pinned runs, not here: the gap is the first cycle meeting cold caches.
$md[] = '- Why the first lock costs more: it runs on cold CPU caches, in the library and in Redis alike. Pinned to one '
    . 'CPU with redis-server and php-fpm, every step of the first cycle (PHP, the library, Redis running the script) '
    . 'took 1.3–3× its warm time, none did extra work; reading 4 MB inside one request before a cycle reproduced the '
    . 'gap with no new request and no pause, and the file backend (no network) shows it too. The per-request work '
    . 'of the PHP package is 2–3 µs (the first `FFI::new` of a lease type, the first `createLock`). A pause in which '
    . 'the CPU halts (the 1 ms usleep() above, or the wait for the next request) widens the gap on this VM.';
$md[] = sprintf('- Client::connect(persistent: true): %s in the worker\'s first request (it connects), median %s in '
    . 'later ones (not in the lock figures).', us($firstRequest['connect_ns'] / 1e3), us(pct($connect, 0.5)));
file_put_contents("$outDir/php-fpm.md", implode("\n", $md) . "\n");
echo implode("\n", $md), "\n";
