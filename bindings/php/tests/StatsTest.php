<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\LockLostException;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Underneath;

/** Client::stats() and Client::metrics(): exact counts after a scripted sequence, and valid Prometheus text. */
final class StatsTest extends LeaseholdTestCase
{
    /** @return array<string, array{callable(): Backend}> */
    public static function backends(): array
    {
        return Backend::both();
    }

    /** @dataProvider backends */
    public function testAScriptedSequenceIsCountedExactly(callable $backend): void
    {
        $backend = $backend();
        $client = Client::connect($backend->url);
        $key = Underneath::key('st-seq');
        $lock = $client->createLock($key, 30.0);

        self::assertTrue($lock->tryAcquire());                                    // acquire
        self::assertFalse($client->createLock($key, 30.0)->tryAcquire());        // contention
        $backend->deleteUnderneath($key);                                        // loss
        try {
            $lock->release();
            self::fail('the lease was deleted underneath');
        } catch (LockLostException) {
        }
        self::assertTrue($lock->tryAcquire());
        $lock->extend();
        $lock->release();                                                        // release

        $stats = $client->stats();
        $counters = array_filter($stats, 'is_int');
        self::assertSame([
            'acquire_attempts' => 3,
            'acquired' => 2,
            'acquired_shared' => 0,
            'acquired_permit' => 0,
            'not_acquired' => 1,
            'releases_ok' => 1,
            'releases_lost' => 1,
            'extends_ok' => 1,
            'extends_lost' => 0,
            'expired' => 0,
            'keepalive_renewals' => 0,
            'keepalive_failures' => 0,
            'restored' => 0,
            'force_released' => 0,
            'retries' => 0,
        ], $counters);
        self::assertSame(['not_acquired' => 0, 'lost' => 0, 'unavailable' => 0, 'invalid_argument' => 0,
            'internal' => 0, 'interrupted' => 0, 'stale_fence' => 0, 'incomplete_attempt' => 0], $stats['errors']);
        self::assertSame(3, $stats['wait_seconds']['count']);
        self::assertSame(1, $stats['hold_seconds']['count']);
        self::assertSame(6, $stats['round_trip_seconds']['count'], '3 attempts, 2 releases, 1 extend');
        $buckets = $stats['round_trip_seconds']['buckets'];
        self::assertSame(['+Inf', 6], end($buckets));
        self::assertIsFloat($stats['round_trip_seconds']['sum'] + 0.0);

        // A second client counts on its own.
        self::assertSame(0, Client::connect($backend->url)->stats()['acquired']);
    }

    /** @dataProvider backends */
    public function testMetricsAreValidPrometheusText(callable $backend): void
    {
        $backend = $backend();
        $client = Client::connect($backend->url);
        $lock = $client->createLock(Underneath::key('st-metrics'), 30.0);
        self::assertTrue($lock->tryAcquire());
        $lock->release();

        $text = $client->metrics();
        self::assertStringEndsWith("\n", $text);
        $series = [];
        foreach (explode("\n", rtrim($text, "\n")) as $line) {
            if (str_starts_with($line, '#')) {
                self::assertMatchesRegularExpression('/^# (HELP|TYPE) leasehold_[a-z_]+ .+$/', $line);
                continue;
            }
            // name{labels} value, with the backend and prefix labels on every series.
            self::assertMatchesRegularExpression(
                '/^leasehold_[a-z_]+\{backend="' . $backend->name . '",prefix="leasehold:"(,[a-z_]+="[^"]*")*\} '
                . '[0-9.e+-]+$/',
                $line,
            );
            [$nameLabels, $value] = explode(' ', $line);
            $series[$nameLabels] = (float) $value;
        }
        $labels = '{backend="' . $backend->name . '",prefix="leasehold:"}';
        self::assertSame(1.0, $series["leasehold_acquired_total$labels"]);
        self::assertSame(1.0, $series["leasehold_releases_ok_total$labels"]);
        self::assertSame(0.0, $series["leasehold_releases_lost_total$labels"]);
        self::assertSame(1.0, $series["leasehold_hold_seconds_count$labels"]);
        self::assertArrayHasKey('leasehold_wait_seconds_bucket{backend="' . $backend->name
            . '",prefix="leasehold:",le="+Inf"}', $series);
        self::assertStringNotContainsString($lock->key(), $text, 'never a key in the metrics');
    }

    public function testPersistentClientsShareOneConnectionAcrossRequests(): void
    {
        // A URL of this test's own, so the process-wide client behind it has seen nothing else.
        $url = Backend::local()->url . '?prefix=' . Underneath::key('pc') . ':';
        $key = Underneath::key('pc-req');
        // "Request" one: its Client object dies at the end, with its lock released.
        (static function () use ($url, $key): void {
            $client = Client::connect($url, persistent: true);
            self::assertTrue($client->isPersistent());
            $lock = $client->createLock($key, 30.0);
            self::assertTrue($lock->tryAcquire());
            $lock->release();
        })();
        // "Request" two: a new Client object on the same underlying client, counters included.
        $first = Client::connect($url, persistent: true);
        self::assertSame(1, $first->stats()['acquired']);
        $second = Client::connect($url, null, true);
        $held = $first->createLock($key, 30.0);
        self::assertTrue($held->tryAcquire());
        self::assertFalse($second->createLock($key, 30.0)->tryAcquire(), 'both objects see one lock table');
        self::assertSame(2, $second->stats()['acquired']);
        unset($first); // frees one reference; the lock and the other object keep working
        $held->release();
        self::assertTrue($second->createLock($key, 30.0)->tryAcquire());
        // A non-persistent client is its own.
        $plain = Client::connect($url);
        self::assertFalse($plain->isPersistent());
        self::assertSame(0, $plain->stats()['acquired']);
    }
}
