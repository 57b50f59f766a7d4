<?php

declare(strict_types=1);

/*
 * Prints what Leasehold costs from PHP, per operation, against the backend a URL names:
 *
 *   php bindings/php/benchmarks/bench.php file:///tmp/leasehold-bench [cycles]
 *   php bindings/php/benchmarks/bench.php redis://127.0.0.1:6379 [cycles]
 *
 * Numbers only, no thresholds: run it on the machine you care about.
 */

require dirname(__DIR__) . '/autoload.php';

use Leasehold\Client;

$url = $argv[1] ?? 'file://' . sys_get_temp_dir() . '/leasehold-bench';
$cycles = max(1, (int) ($argv[2] ?? 2000));

function measure(string $what, int $n, callable $body): void
{
    $body(); // warm-up: connections, caches
    $start = hrtime(true);
    for ($i = 0; $i < $n; $i++) {
        $body();
    }
    $ns = (hrtime(true) - $start) / $n;
    printf("%-48s %10.2f us   (%d runs)\n", $what, $ns / 1000, $n);
}

$client = Client::connect($url);
$key = 'bench:' . getmypid();
printf("libleasehold %s, PHP %s, %s\n", $client->version(), PHP_VERSION, preg_replace('/:[^:@\/]*@/', ':***@', $url));

measure('Client::connect', min($cycles, 200), static fn () => Client::connect($url));
measure('createLock', $cycles * 10, static fn () => $client->createLock($key, 30.0));
$lock = $client->createLock($key, 30.0);
measure('tryAcquire + release', $cycles, static function () use ($lock): void {
    $lock->tryAcquire() || throw new RuntimeException('busy');
    $lock->release();
});
measure('synchronized (empty callback)', $cycles, static fn () => $client->synchronized($key, static fn () => null));
$lock->tryAcquire();
measure('extend', $cycles, static fn () => $lock->extend(30.0));
measure('fence + token + remainingLifetime (local)', $cycles * 10, static function () use ($lock): void {
    $lock->fence();
    $lock->token();
    $lock->remainingLifetime();
});
$other = $client->createLock($key, 30.0);
measure('tryAcquire of a held key (refused)', $cycles, static fn () => $other->tryAcquire());
$lock->release();
