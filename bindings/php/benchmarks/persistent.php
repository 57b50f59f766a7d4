<?php

declare(strict_types=1);

/*
 * What a persistent client saves per request: each "request" connects, takes a lock once, releases it and drops its
 * Client object, as a php-fpm request does; once with a new connection per request, once with
 * Client::connect(..., persistent: true), in the same run. Prints numbers; asserts nothing.
 *
 *   LEASEHOLD_LIBRARY=target/release/libleasehold.so php bindings/php/benchmarks/persistent.php URL [requests]
 */

require dirname(__DIR__) . '/autoload.php';

use Leasehold\Client;

$url = $argv[1] ?? 'file://' . sys_get_temp_dir() . '/leasehold-bench';
$requests = (int) ($argv[2] ?? 2000);

$request = static function (bool $persistent, int $i) use ($url): void {
    $client = Client::connect($url, persistent: $persistent);
    $lock = $client->createLock('bench:persistent:' . ($i % 16), 30.0);
    if (!$lock->tryAcquire()) {
        throw new RuntimeException('contention in a single-process benchmark');
    }
    $lock->release();
};

$results = [];
foreach ([false, true, false, true] as $round => $persistent) {
    $request($persistent, 0); // warm-up: the library is loaded, and the persistent client opened, once
    $start = hrtime(true);
    for ($i = 0; $i < $requests; $i++) {
        $request($persistent, $i);
    }
    $us = (hrtime(true) - $start) / 1e3 / $requests;
    $results[$persistent ? 'persistent' : 'new'][] = $us;
}
$new = min($results['new']);
$persistent = min($results['persistent']);
$scheme = (string) parse_url($url, PHP_URL_SCHEME);
printf("[persistent clients, %s] %d requests (connect + lock + release): new client %.1f us/request, "
    . "persistent %.1f us/request, saved %.1f us (%.0f%%)\n",
    $scheme, $requests, $new, $persistent, $new - $persistent, 100 * ($new - $persistent) / $new);
