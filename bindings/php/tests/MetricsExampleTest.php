<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Library;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\TempDir;

/**
 * examples/php/metrics.php served by PHP's built-in web server on a free port: requests take locks through one
 * persistent client that outlives each request, and /metrics serves its counters as Prometheus text.
 */
final class MetricsExampleTest extends LeaseholdTestCase
{
    public function testMetricsAreServedAndCountEveryRequest(): void
    {
        $dir = new TempDir('metrics-example');
        $port = Ports::free();
        $example = dirname(__DIR__, 3) . '/examples/php/metrics.php';
        $server = proc_open(
            [PHP_BINARY, '-d', 'ffi.enable=1', '-S', "127.0.0.1:$port", $example],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $dir->file('stdout'), 'w'],
                2 => ['file', $dir->file('stderr'), 'w']],
            $pipes,
            null,
            array_merge(getenv(), [
                'LEASEHOLD_URL' => 'file://' . $dir->file('locks'),
                'LEASEHOLD_LIBRARY' => Library::defaultPath(),
                'PHP_CLI_SERVER_WORKERS' => '1',
            ]),
        );
        self::assertIsResource($server);
        try {
            $deadline = microtime(true) + 20.0;
            while (!Ports::answers($port)) {
                self::assertLessThan($deadline, microtime(true), 'php -S did not start: ' . $this->logs($dir));
                usleep(50_000);
            }
            $pids = [];
            for ($i = 1; $i <= 3; $i++) {
                [$status, , $body] = self::get($port, "/report?date=2026-11-0$i");
                self::assertSame(200, $status, $body . $this->logs($dir));
                $json = json_decode($body, true);
                self::assertIsInt($json['fence'], $body);
                self::assertGreaterThan(0, $json['fence'], $body);
                $pids[] = $json['pid'];
            }
            self::assertCount(1, array_unique($pids), 'one server process: the persistent client outlives requests');

            [$status, $headers, $body] = self::get($port, '/metrics');
            self::assertSame(200, $status, $body . $this->logs($dir));
            self::assertStringContainsString('Content-Type: text/plain; version=0.0.4', $headers);
            foreach (explode("\n", rtrim($body, "\n")) as $line) {
                if (!str_starts_with($line, '#')) {
                    self::assertMatchesRegularExpression('/^[a-z_]+\{[^}]*\} [0-9.e+-]+$/', $line);
                }
            }
            // Three requests, three acquisitions and releases, counted by the one client they shared.
            self::assertStringContainsString(
                "leasehold_acquired_total{backend=\"local\",prefix=\"leasehold:\"} 3\n", $body);
            self::assertStringContainsString(
                "leasehold_releases_ok_total{backend=\"local\",prefix=\"leasehold:\"} 3\n", $body);
            self::assertStringNotContainsString('report:2026', $body, 'never a key');
        } finally {
            proc_terminate($server, SIGTERM);
            proc_close($server);
        }
    }

    /** @return array{int, string, string} status, headers, body */
    private static function get(int $port, string $path): array
    {
        $context = stream_context_create(['http' => ['ignore_errors' => true, 'timeout' => 30]]);
        $body = file_get_contents("http://127.0.0.1:$port$path", false, $context);
        $headers = implode("\n", $http_response_header ?? []);
        preg_match('{^HTTP/\S+ (\d+)}', $headers, $m);
        return [(int) ($m[1] ?? 0), $headers, (string) $body];
    }

    private function logs(TempDir $dir): string
    {
        return "\n--- php -S stderr ---\n" . @file_get_contents($dir->file('stderr'));
    }
}
