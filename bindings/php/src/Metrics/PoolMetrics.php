<?php

declare(strict_types=1);

namespace Leasehold\Metrics;

use Leasehold\Client;

/**
 * Leasehold's counters summed over every worker of a php-fpm pool (or any set of PHP processes), for one scrape.
 *
 * Each php-fpm worker has clients and counters of its own, so Client::metrics() answers for whichever worker took
 * the scrape. Instead, every worker calls flush() at the end of its requests: it writes that worker's counters to a
 * file of its own, `<dir>/<pool>/<pid>-<start>-<boot>.json` (the process's start time and the boot id, so a later
 * process with the same pid never takes over an earlier one's file), as a temporary file renamed over the old one.
 * render() (or `leasehold metrics --dir <dir>`) sums the files of each pool into Prometheus text with a `pool` label.
 *
 * Crash-safe: rename() replaces the file at once, so a worker killed mid-write leaves its previous file whole (and
 * a stray `.…tmp` that readers ignore). Monotonic: the file of a worker that exited stays and keeps counting in the
 * sum; the next worker that starts in the pool folds such files into `retired.json` (under a lock file, written
 * the same way before the folded files are removed, and naming them so a reader never counts one twice).
 *
 *     register_shutdown_function(static fn () => PoolMetrics::flush($client, '/run/leasehold-metrics'));
 *
 * No APCu and no shared memory: plain files, one small write per request (none when nothing was counted). A flush
 * never throws: on an I/O error it returns false and says why in PHP's error log (once per process).
 */
final class PoolMetrics
{
    public const RETIRED = 'retired.json';
    private const FORMAT = 1;

    /**
     * What this process last flushed from each non-persistent client, with the pid it was read in: such a client
     * counts only its own requests' work, which flush() adds to the worker's file.
     *
     * @var \WeakMap<Client, array{int, array<string, mixed>}>|null
     */
    private static ?\WeakMap $flushed = null;
    private static bool $complained = false;

    /**
     * Writes this worker's counters from $client to its file under $dir. Call it at the end of each request (after
     * the request's locks are released), e.g. from register_shutdown_function(); calling it more often is harmless.
     *
     * A persistent client (Client::connect(persistent: true)) counts the worker's whole life, and its totals are
     * written as they are; a client per request counts that request only, and what it counted since its last flush
     * is added to the worker's file. Use one or the other per URL.
     *
     * @param string      $dir  a local directory the pool's workers may write (created if missing), e.g.
     *                          /run/leasehold-metrics; keep it to one host (workers check each other's pids)
     * @param string|null $pool the series' `pool` label and the subdirectory: null for the php-fpm pool's name
     *                          (from the worker's process title, on Linux), or else the SAPI's name ("cli",
     *                          "fpm-fcgi")
     * @return bool false when the counters could not be read or written (logged once per process)
     */
    public static function flush(Client $client, string $dir, ?string $pool = null): bool
    {
        try {
            $worker = self::workerId();
            $poolDir = rtrim($dir, '/') . '/' . self::poolName($pool);
            $file = "$poolDir/$worker.json";
            $text = $client->metrics();

            $stored = @file_get_contents($file);
            $first = $stored === false;
            $sources = [];
            foreach ($first ? [] : (json_decode($stored, true)['sources'] ?? []) as $source) {
                if (is_array($source) && is_string($source['id'] ?? null)) {
                    $sources[$source['id']] = $source;
                }
            }
            if ($client->isPersistent()) {
                // The library keeps one client per URL for the process's life (the same pointer), counting since
                // the process (or the fork() child) started: its text is stored as it is, with no parsing here.
                $id = 'persistent:' . (string) $client->library()->ffi()->cast('uintptr_t', $client->handle())->cdata;
                $entry = ['id' => $id, 'text' => $text];
                if (!$first && ($sources[$id] ?? null) === $entry) {
                    return true; // nothing new: no write
                }
            } else {
                $id = 'per-request';
                $current = Exposition::parse($text);
                self::$flushed ??= new \WeakMap();
                [$pid, $last] = self::$flushed[$client] ?? [0, []];
                $delta = Exposition::delta($current, $pid === getmypid() ? $last : []);
                self::$flushed[$client] = [getmypid(), $current];
                if (!$first && isset($sources[$id]) && Exposition::isZero($delta)) {
                    return true;
                }
                $entry = ['id' => $id, 'families' => Exposition::toList(
                    Exposition::add(Exposition::fromList($sources[$id]['families'] ?? null), $delta))];
            }
            $sources[$id] = $entry;

            if ($first && !is_dir($poolDir) && !@mkdir($poolDir, 0775, true) && !is_dir($poolDir)) {
                throw new \RuntimeException("cannot create $poolDir");
            }
            self::write($file, ['format' => self::FORMAT, 'pid' => getmypid(), 'updated' => microtime(true),
                'sources' => array_values($sources)]);
            if ($first) {
                // A new worker: the one it replaced may have exited. Once per worker, not per request.
                self::retireExited($poolDir, "$worker.json");
            }
            return true;
        } catch (\Throwable $e) {
            if (!self::$complained) {
                self::$complained = true;
                error_log('leasehold: cannot flush the metrics to ' . $dir . ': ' . $e->getMessage());
            }
            return false;
        }
    }

    /**
     * The Prometheus text of every pool under $dir: each worker's counters summed per pool, with a `pool` label
     * first (`leasehold_acquired_total{pool="www",backend="redis",prefix="app:"} 1234`); with $perWorker, one
     * series per worker instead, labelled `worker` with its pid ("retired" for exited workers). Serve it with
     * `Content-Type: text/plain; version=0.0.4`. The same text as `leasehold metrics --dir $dir [--per-worker]`.
     * A missing or empty $dir gives "" and files that cannot be read are left out (logged).
     */
    public static function render(string $dir, bool $perWorker = false): string
    {
        $merged = [];
        $dir = rtrim($dir, '/');
        foreach (self::entries($dir) as $pool) {
            if (!is_dir("$dir/$pool")) {
                continue;
            }
            $lock = @fopen("$dir/$pool/.lock", 'r');
            // Shared: a fold in progress (exclusive) either has not started or has removed what it folded.
            $locked = $lock !== false && flock($lock, LOCK_SH);
            try {
                $retired = self::read("$dir/$pool/" . self::RETIRED);
                $folded = is_array($retired['folded'] ?? null) ? $retired['folded'] : [];
                foreach (self::entries("$dir/$pool") as $name) {
                    if (!str_ends_with($name, '.json') || in_array($name, $folded, true)) {
                        continue;
                    }
                    $data = $name === self::RETIRED ? $retired : self::read("$dir/$pool/$name");
                    if ($data === null) {
                        continue;
                    }
                    $labels = ['pool' => $pool];
                    if ($perWorker) {
                        $labels['worker'] = $name === self::RETIRED ? 'retired' : (string) ($data['pid'] ?? '?');
                    }
                    foreach (self::sources($data) as $families) {
                        foreach ($families as $familyName => $family) {
                            $series = [];
                            foreach ($family['series'] as $sample => $value) {
                                $series[Exposition::withLabels($sample, $labels)] = $value;
                            }
                            $merged = Exposition::add($merged, [$familyName => ['series' => $series] + $family]);
                        }
                    }
                }
            } finally {
                if ($locked) {
                    flock($lock, LOCK_UN);
                }
                if ($lock !== false) {
                    fclose($lock);
                }
            }
        }
        return Exposition::render($merged);
    }

    /**
     * Folds the files of exited workers into retired.json. Under an exclusive lock that nobody waits for: if another
     * worker is folding, it will have folded the same files.
     */
    private static function retireExited(string $poolDir, string $self): void
    {
        $lock = @fopen("$poolDir/.lock", 'c');
        if ($lock === false || !flock($lock, LOCK_EX | LOCK_NB)) {
            if ($lock !== false) {
                fclose($lock);
            }
            return;
        }
        try {
            $retired = self::read("$poolDir/" . self::RETIRED) ?? [];
            $total = self::sources($retired)['retired'] ?? [];
            // Names of files already folded whose removal a crash may have prevented: still not to be counted.
            $folded = array_values(array_filter(is_array($retired['folded'] ?? null) ? $retired['folded'] : [],
                static fn ($name): bool => is_string($name) && is_file("$poolDir/$name")));
            $exited = [];
            foreach (self::entries($poolDir) as $name) {
                if ($name === $self || $name === self::RETIRED || in_array($name, $folded, true)
                    || preg_match('/^(\d+)-(\d+)-([0-9a-f]+)\.json$/D', $name, $m) !== 1
                    || !self::exited((int) $m[1], $m[2], $m[3])) {
                    continue;
                }
                $data = self::read("$poolDir/$name");
                foreach ($data === null ? [] : self::sources($data) as $families) {
                    $total = Exposition::add($total, $families);
                }
                $exited[] = $name;
            }
            if ($exited === []) {
                return;
            }
            self::write("$poolDir/" . self::RETIRED, ['format' => self::FORMAT, 'pid' => 0,
                'updated' => microtime(true), 'folded' => array_merge($folded, $exited),
                'sources' => [['id' => 'retired', 'families' => Exposition::toList($total)]]]);
            foreach ($exited as $name) {
                @unlink("$poolDir/$name");
                @unlink("$poolDir/.$name.tmp");
            }
        } finally {
            flock($lock, LOCK_UN);
            fclose($lock);
        }
    }

    /** True when no process runs any more with this pid, start time and boot id (a reused pid is another process). */
    private static function exited(int $pid, string $start, string $boot): bool
    {
        if ($boot !== self::bootId()) {
            return true;
        }
        if ($start !== '0') {
            $stat = @file_get_contents("/proc/$pid/stat");
            return $stat === false || self::startTime($stat) !== $start;
        }
        // Without /proc, only a pid that is gone for sure counts as exited (EPERM: it runs as someone else).
        return function_exists('posix_kill') && !posix_kill($pid, 0) && posix_get_last_error() === 3;
    }

    /** `<pid>-<start time in clock ticks after boot>-<boot id>`: unique for the life of the directory. */
    private static function workerId(): string
    {
        $stat = @file_get_contents('/proc/self/stat');
        return getmypid() . '-' . ($stat === false ? '0' : self::startTime($stat)) . '-' . self::bootId();
    }

    private static function startTime(string $stat): string
    {
        // Field 22, counted after the command name, which may hold spaces and parentheses.
        $fields = explode(' ', substr($stat, (int) strrpos($stat, ')') + 2));
        return ctype_digit($fields[19] ?? '') ? $fields[19] : '0';
    }

    private static function bootId(): string
    {
        $id = @file_get_contents('/proc/sys/kernel/random/boot_id');
        return $id === false ? '0' : substr(str_replace('-', '', trim($id)), 0, 8);
    }

    private static function poolName(?string $pool): string
    {
        // Never fpm_get_status(): php-fpm 8.2 (and 8.3/8.4 before their fix) crashes the calling worker with
        // SIGSEGV when another worker holds its scoreboard slot at that moment (a request starting or ending),
        // which a busy pool does all the time. The worker's process title names the pool instead.
        $pool ??= self::fpmPool() ?? PHP_SAPI;
        // A directory name and a label value: no path separators, no hidden directory.
        $pool = preg_replace('/[^A-Za-z0-9_.-]/', '_', $pool) ?? '_';
        return $pool === '' || $pool[0] === '.' ? "_$pool" : $pool;
    }

    /** The pool of this php-fpm worker, from its process title ("php-fpm: pool NAME"); null elsewhere. */
    private static function fpmPool(): ?string
    {
        if (PHP_SAPI !== 'fpm-fcgi') {
            return null;
        }
        $title = @file_get_contents('/proc/self/cmdline');
        if ($title === false || preg_match('/^php-fpm: pool ([^\0]+)/', $title, $m) !== 1) {
            return null;
        }
        $name = rtrim($m[1], ' ');
        return $name === '' ? null : $name;
    }

    /**
     * The sources of a stored file, by id: a persistent client's text as the library printed it, or the families
     * that per-request clients added up.
     *
     * @return array<string, array<string, array{type: string, help: string, series: array<string, int|float>}>>
     */
    private static function sources(mixed $data): array
    {
        $sources = [];
        foreach (is_array($data) && is_array($data['sources'] ?? null) ? $data['sources'] : [] as $source) {
            if (is_array($source) && is_string($source['id'] ?? null)) {
                $sources[$source['id']] = is_string($source['text'] ?? null)
                    ? Exposition::parse($source['text'])
                    : Exposition::fromList($source['families'] ?? null);
            }
        }
        return $sources;
    }

    /** @return array<string, mixed>|null */
    private static function read(string $file): ?array
    {
        $text = @file_get_contents($file);
        if ($text === false) {
            return null;
        }
        $data = json_decode($text, true);
        if (!is_array($data) || ($data['format'] ?? null) !== self::FORMAT) {
            error_log("leasehold: $file is not a metrics file of this version; left out");
            return null;
        }
        return $data;
    }

    /** @param array<string, mixed> $data */
    private static function write(string $file, array $data): void
    {
        $json = json_encode($data, JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR);
        $temp = dirname($file) . '/.' . basename($file) . '.tmp';
        if (@file_put_contents($temp, $json) !== strlen($json)) {
            @unlink($temp);
            throw new \RuntimeException('cannot write ' . $temp . ': ' . (error_get_last()['message'] ?? '?'));
        }
        if (!@rename($temp, $file)) {
            @unlink($temp);
            throw new \RuntimeException('cannot rename ' . $temp . ': ' . (error_get_last()['message'] ?? '?'));
        }
    }

    /** @return list<string> names in $dir, by byte order, without hidden ones */
    private static function entries(string $dir): array
    {
        $names = @scandir($dir);
        if ($names === false) {
            return [];
        }
        $names = array_values(array_filter($names, static fn (string $name): bool => $name[0] !== '.'));
        sort($names, SORT_STRING);
        return $names;
    }
}
