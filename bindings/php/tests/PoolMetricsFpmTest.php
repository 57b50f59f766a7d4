<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Library;
use Leasehold\Metrics\PoolMetrics;
use Leasehold\Tests\Support\FastCgi;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\PhpFpm;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\TempDir;

/**
 * PoolMetrics under a real php-fpm pool of 4 workers (pm = static): requests spread over the workers each take a
 * lock and flush; the merged count is every acquisition of every request, whichever worker served it, also after a
 * worker is killed and replaced.
 */
final class PoolMetricsFpmTest extends LeaseholdTestCase
{
    private const REQUESTS = 240;
    private const IN_FLIGHT = 8;

    private TempDir $dir;
    /** @var resource|null */
    private $fpm = null;
    private int $port = 0;

    protected function setUp(): void
    {
        $this->dir = new TempDir('pool-metrics-fpm');
        $this->port = Ports::free();
        $root = posix_geteuid() === 0;
        file_put_contents($this->dir->file('php-fpm.conf'), implode("\n", [
            '[global]',
            'pid = ' . $this->dir->file('php-fpm.pid'),
            'error_log = ' . $this->dir->file('php-fpm.log'),
            'daemonize = no',
            '[metricspool]',
            $root ? 'user = ' . (posix_getpwuid(0)['name'] ?? 'root') : '',
            $root ? 'group = ' . (posix_getgrgid(0)['name'] ?? 'root') : '',
            'listen = 127.0.0.1:' . $this->port,
            'pm = static',
            'pm.max_children = 4',
            'clear_env = no',
            'catch_workers_output = yes',
            '',
        ]));
        file_put_contents($this->dir->file('php.ini'), implode("\n", ['ffi.enable=1', 'display_errors=stderr',
            'log_errors=1', 'error_log=' . $this->dir->file('php-errors.log'), '']));
        $command = [PhpFpm::binary(), '--nodaemonize', '--fpm-config', $this->dir->file('php-fpm.conf'),
            '-c', $this->dir->file('php.ini')];
        if ($root) {
            $command[] = '--allow-to-run-as-root';
        }
        $this->fpm = proc_open($command, [0 => ['file', '/dev/null', 'r'],
            1 => ['file', $this->dir->file('stdout'), 'w'], 2 => ['file', $this->dir->file('stderr'), 'w']],
            $pipes, null, array_merge(getenv(), [
                'LEASEHOLD_LIBRARY' => Library::defaultPath(),
                'LEASEHOLD_URL' => 'file://' . $this->dir->file('locks'),
                'LEASEHOLD_METRICS_DIR' => $this->dir->file('metrics'),
            ]));
        self::assertIsResource($this->fpm);
        $deadline = microtime(true) + 20.0;
        while (!Ports::answers($this->port)) {
            self::assertTrue(proc_get_status($this->fpm)['running'] && microtime(true) < $deadline,
                'php-fpm did not start' . $this->logs());
            usleep(50_000);
        }
    }

    protected function tearDown(): void
    {
        if ($this->fpm !== null) {
            PhpFpm::stop($this->fpm);
            $this->fpm = null;
        }
    }

    public function testEveryWorkersAcquisitionsAreSummedAndSurviveAWorkerThatDied(): void
    {
        // Half the requests use a persistent client (cumulative per worker), half a client per request (deltas).
        $pids = $this->requests(self::REQUESTS, 0);
        self::assertGreaterThan(1, count($pids), 'the requests must have spread over several workers');
        self::assertSame(self::REQUESTS, array_sum($pids));
        self::assertSame(self::REQUESTS, $this->acquired(), $this->logs());
        $files = glob($this->dir->file('metrics') . '/metricspool/*.json') ?: [];
        self::assertCount(count($pids), $files, 'one file per worker that served a request');

        // A worker killed: its file stays counted, and the worker php-fpm starts instead folds it into retired.json.
        $victim = array_key_first($pids);
        posix_kill($victim, SIGKILL);
        $deadline = microtime(true) + 20.0;
        // Only once the master has replaced it: a request sent before could reach the dying worker.
        while (preg_match("/child $victim exited on signal 9.*child \\d+ started/s",
            (string) file_get_contents($this->dir->file('php-fpm.log'))) !== 1) {
            self::assertLessThan($deadline, microtime(true), 'php-fpm did not replace the worker' . $this->logs());
            usleep(20_000);
        }
        $served = 0;
        $newcomer = false;
        while (!$newcomer) {
            self::assertLessThan($deadline, microtime(true), 'no replacement worker served a request');
            $round = $this->requests(self::IN_FLIGHT, 1000 + $served);
            $served += self::IN_FLIGHT;
            $newcomer = array_diff_key($round, $pids) !== [];
            $pids += $round;
        }
        self::assertSame(self::REQUESTS + $served, $this->acquired(), $this->logs());
        $names = array_map('basename', glob($this->dir->file('metrics') . '/metricspool/*.json') ?: []);
        self::assertContains(PoolMetrics::RETIRED, $names);
        self::assertSame([], preg_grep("/^$victim-/", $names), 'the dead worker was folded into retired.json');

        // The scrape endpoint, served by any worker, says the same as the test's own render.
        $scrape = FastCgi::get('tcp://127.0.0.1:' . $this->port, self::app(), 'page=metrics');
        self::assertStringContainsString('text/plain; version=0.0.4', $scrape['headers']);
        self::assertSame(PoolMetrics::render($this->dir->file('metrics')), $scrape['body']);
        self::assertStringNotContainsString('pool-metrics:', $scrape['body'], 'never a key');
        self::assertSame('', (string) @file_get_contents($this->dir->file('php-errors.log')), 'no PHP error');
        self::assertSame(1, preg_match_all('/exited on signal/', (string) file_get_contents(
            $this->dir->file('php-fpm.log'))), 'no worker died but the one killed' . $this->logs());

        // And so does the CLI, where it is built.
        $cli = self::cli();
        if ($cli !== null) {
            $output = shell_exec(escapeshellarg($cli) . ' metrics --dir ' . escapeshellarg($this->dir->file('metrics')));
            self::assertSame(PoolMetrics::render($this->dir->file('metrics')), $output);
        }
    }

    /**
     * Sends $count requests, IN_FLIGHT at a time, half persistent and half per-request.
     *
     * @return array<int, int> requests served per worker pid
     */
    private function requests(int $count, int $first): array
    {
        $address = 'tcp://127.0.0.1:' . $this->port;
        $pids = [];
        for ($i = 0; $i < $count; $i += self::IN_FLIGHT) {
            $sockets = [];
            for ($j = $i; $j < min($count, $i + self::IN_FLIGHT); $j++) {
                $mode = $j % 2 === 0 ? 'persistent' : 'per-request';
                $sockets[] = FastCgi::send($address, self::app(), 'mode=' . $mode . '&key=' . ($first + $j));
            }
            foreach ($sockets as $socket) {
                try {
                    $response = FastCgi::receive($socket);
                } catch (\RuntimeException $e) {
                    // A worker that died mid-request closes the connection before its master has logged why.
                    $this->awaitLog('/exited on signal/', 2.0);
                    throw new \RuntimeException($e->getMessage() . $this->logs(), 0, $e);
                }
                $json = json_decode($response['body'], true);
                self::assertIsArray($json, $response['headers'] . $response['body'] . $response['stderr']
                    . $this->logs());
                self::assertTrue($json['acquired']);
                $pids[$json['pid']] = ($pids[$json['pid']] ?? 0) + 1;
            }
        }
        return $pids;
    }

    /** leasehold_acquired_total of the pool, from the merged text. */
    private function acquired(): int
    {
        $text = PoolMetrics::render($this->dir->file('metrics'));
        self::assertSame(1, preg_match(
            '/^leasehold_acquired_total\{pool="metricspool",backend="local",prefix="leasehold:"\} (\d+)$/m',
            $text, $m), $text);
        return (int) $m[1];
    }

    private static function app(): string
    {
        return __DIR__ . '/fixtures/pool-metrics-app.php';
    }

    private static function cli(): ?string
    {
        $workspace = dirname(__DIR__, 3);
        foreach ([getenv('LEASEHOLD_CLI') ?: '', "$workspace/target/release/leasehold",
            "$workspace/target/debug/leasehold"] as $candidate) {
            if ($candidate !== '' && is_file($candidate) && is_executable($candidate)) {
                return $candidate;
            }
        }
        return null;
    }

    private function awaitLog(string $pattern, float $seconds): void
    {
        $deadline = microtime(true) + $seconds;
        while (preg_match($pattern, (string) @file_get_contents($this->dir->file('php-fpm.log'))) !== 1
            && microtime(true) < $deadline) {
            usleep(20_000);
        }
    }

    private function logs(): string
    {
        $out = '';
        foreach (['php-fpm.log', 'php-errors.log', 'stderr'] as $name) {
            $out .= "\n--- $name ---\n" . @file_get_contents($this->dir->file($name));
        }
        return $out;
    }
}
