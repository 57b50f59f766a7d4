<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Metrics\Exposition;
use Leasehold\Metrics\PoolMetrics;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\TempDir;

/** PoolMetrics without php-fpm: the shared hand-made files, per-request deltas, folding, and I/O errors. */
final class PoolMetricsTest extends LeaseholdTestCase
{
    /** crates/leasehold-cli/tests/metrics.rs prints the same expected text from the same files. */
    public function testTheHandMadeFilesRenderAsTheCliRendersThem(): void
    {
        $fixtures = __DIR__ . '/fixtures/pool-metrics';
        self::assertSame(file_get_contents("$fixtures/expected.prom"), PoolMetrics::render($fixtures));
        self::assertSame(file_get_contents("$fixtures/expected-per-worker.prom"), PoolMetrics::render($fixtures, true));
    }

    public function testNumbersPrintAsRustPrintsThem(): void
    {
        foreach (['0.1' => 0.1, '0.30000000000000004' => 0.1 + 0.2, '0.0000001' => 1e-7, '3' => 3.0, '0' => 0.0,
            '1000000000000000000000' => 1e21, '123456.789' => 123456.789, '42' => 42] as $text => $value) {
            self::assertSame((string) $text, Exposition::number($value));
        }
    }

    public function testPerRequestClientsAddTheirDeltasAndPersistentOnesTheirTotals(): void
    {
        $dir = new TempDir('pool-metrics');
        $url = 'file://' . $dir->file('locks');
        $persistent = Client::connect($url, persistent: true);
        $before = $persistent->stats()['acquired'];
        for ($request = 0; $request < 3; $request++) {
            $client = Client::connect($url);
            for ($i = 0; $i <= $request; $i++) {
                self::assertTrue($client->createLock("pm-$request-$i")->tryAcquire());
            }
            self::assertTrue(PoolMetrics::flush($client, $dir->file('m'), 'app'));
            self::assertTrue(PoolMetrics::flush($client, $dir->file('m'), 'app'), 'a second flush adds nothing');
        }
        self::assertTrue($persistent->createLock('pm-p')->tryAcquire());
        self::assertTrue(PoolMetrics::flush($persistent, $dir->file('m'), 'app'));
        $expected = 1 + 2 + 3 + $before + 1;
        self::assertStringContainsString(
            "leasehold_acquired_total{pool=\"app\",backend=\"local\",prefix=\"leasehold:\"} $expected\n",
            PoolMetrics::render($dir->file('m')));
        self::assertCount(1, glob($dir->file('m') . '/app/*.json') ?: [], 'one file for this process');
    }

    public function testAnExitedWorkersFileIsFoldedOnceAndTheSumStaysTheSame(): void
    {
        $dir = new TempDir('pool-metrics');
        $pool = $dir->file('m') . '/app';
        mkdir($pool, 0777, true);
        $boot = substr(str_replace('-', '', trim((string) file_get_contents('/proc/sys/kernel/random/boot_id'))), 0, 8);
        // pid 1 never has this start time; the other worker is of an earlier boot.
        $text = "# TYPE leasehold_acquired_total counter\nleasehold_acquired_total{backend=\"local\",prefix=\"x\"} %d\n";
        foreach (["1-3-$boot.json" => 5, '7-8-00000000.json' => 6] as $name => $count) {
            file_put_contents("$pool/$name", json_encode(['format' => 1, 'pid' => 1,
                'sources' => [['id' => 'persistent:1', 'text' => sprintf($text, $count)]]]));
        }
        $line = "leasehold_acquired_total{pool=\"app\",backend=\"local\",prefix=\"x\"} 11\n";
        self::assertStringContainsString($line, PoolMetrics::render($dir->file('m')));

        // This process's first flush in the pool folds them.
        self::assertTrue(PoolMetrics::flush(Client::connect('file://' . $dir->file('locks')), $dir->file('m'), 'app'));
        $names = array_map('basename', glob("$pool/*.json") ?: []);
        self::assertCount(2, $names, implode(', ', $names));
        self::assertContains(PoolMetrics::RETIRED, $names);
        self::assertStringContainsString($line, PoolMetrics::render($dir->file('m')));

        // A fold that stopped before removing a file: retired.json names it, so it is not counted twice.
        file_put_contents("$pool/1-3-$boot.json", json_encode(['format' => 1, 'pid' => 1,
            'sources' => [['id' => 'persistent:1', 'text' => sprintf($text, 5)]]]));
        self::assertStringContainsString($line, PoolMetrics::render($dir->file('m')));
    }

    public function testAnUnwritableDirectoryReturnsFalseAndNeverThrows(): void
    {
        $dir = new TempDir('pool-metrics');
        file_put_contents($dir->file('file'), 'not a directory');
        $log = $dir->file('php-errors.log');
        $previous = ini_set('error_log', $log);
        try {
            $client = Client::connect('file://' . $dir->file('locks'));
            self::assertFalse(PoolMetrics::flush($client, $dir->file('file'), 'app'));
            self::assertFalse(PoolMetrics::flush($client, $dir->file('file') . '/x', 'app'));
        } finally {
            ini_set('error_log', (string) $previous);
        }
        self::assertSame('', PoolMetrics::render($dir->file('missing')));
        self::assertLessThanOrEqual(1, substr_count((string) @file_get_contents($log), 'leasehold: cannot flush'),
            'logged once per process at most');
    }
}
