<?php

declare(strict_types=1);

// Symfony Lock and Laravel cache locks over Leasehold against their own Redis stores (phpredis), on one Redis:
// - cycle: acquire + release of a free lock, in one process (µs per cycle, mean of N);
// - handoff: one process holds the lock while another waits in a blocking acquire (Symfony acquire(true),
//   Laravel block()); the time from the holder's release to the waiter's acquisition (ms, median and max).
//
//   LEASEHOLD_LIBRARY=target/release/libleasehold.so php bindings/php/benchmarks/adapters.php 127.0.0.1:6379 [cycles] [handoffs]
//
// Needs Debian's php-symfony-lock and php-laravel-framework; the Redis-store rows need php-redis (skipped with a
// note without it).

require dirname(__DIR__) . '/autoload.php';
require_once stream_resolve_include_path('Symfony/Component/Lock/autoload.php')
    ?: '/usr/share/php/Symfony/Component/Lock/autoload.php';
require_once stream_resolve_include_path('Illuminate/autoload.php') ?: '/usr/share/php/Illuminate/autoload.php';

use Illuminate\Cache\RedisStore as LaravelRedisStore;
use Illuminate\Container\Container;
use Illuminate\Redis\RedisManager;
use Leasehold\Client;
use Leasehold\Laravel\LeaseholdStore as LaravelLeaseholdStore;
use Leasehold\Symfony\LeaseholdStore as SymfonyLeaseholdStore;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\RedisStore as SymfonyRedisStore;

[$host, $port] = explode(':', $argv[1] ?? '127.0.0.1:6379') + [1 => '6379'];
$port = (int) $port;
$cycles = (int) ($argv[2] ?? 2000);
$handoffs = (int) ($argv[3] ?? 15);
$url = "redis://$host:$port";

/**
 * Each adapter: a factory called in the process that uses it (after fork() too) returning
 * [acquire(bool $blocking): bool, release(): void] for a fresh lock object on $name.
 *
 * @var array<string, callable(): callable(string): array{callable(bool): bool, callable(): void}>
 */
$adapters = [
    'Symfony Lock + LeaseholdStore' => static function () use ($url): callable {
        $factory = new LockFactory(new SymfonyLeaseholdStore(Client::connect($url), 300.0, 30.0));
        return static function (string $name) use ($factory): array {
            $lock = $factory->createLock($name, 30.0);
            return [static fn (bool $blocking): bool => $lock->acquire($blocking), static fn () => $lock->release()];
        };
    },
    'Symfony Lock + RedisStore (phpredis)' => static function () use ($host, $port): ?callable {
        if (!class_exists(\Redis::class)) {
            return null;
        }
        $redis = new \Redis();
        $redis->connect($host, $port);
        $factory = new LockFactory(new SymfonyRedisStore($redis));
        return static function (string $name) use ($factory): array {
            $lock = $factory->createLock($name, 30.0);
            return [static fn (bool $blocking): bool => $lock->acquire($blocking), static fn () => $lock->release()];
        };
    },
    'Laravel lock + leasehold driver' => static function () use ($url): callable {
        $store = new LaravelLeaseholdStore(Client::connect($url));
        return static function (string $name) use ($store): array {
            $lock = $store->lock($name, 30);
            return [
                static fn (bool $blocking): bool => $blocking ? $lock->block(30) : $lock->get(),
                static fn () => $lock->release(),
            ];
        };
    },
    'Laravel lock + redis driver (phpredis)' => static function () use ($host, $port): ?callable {
        if (!class_exists(\Redis::class)) {
            return null;
        }
        $manager = new RedisManager(new Container(), 'phpredis', [
            'default' => ['host' => $host, 'port' => $port, 'database' => 0],
        ]);
        $store = new LaravelRedisStore($manager, 'bench:', 'default');
        return static function (string $name) use ($store): array {
            $lock = $store->lock($name, 30);
            return [
                static fn (bool $blocking): bool => $blocking ? $lock->block(30) : $lock->get(),
                static fn () => $lock->release(),
            ];
        };
    },
];

printf("libleasehold %s, %s, %d cycles, %d handoffs per adapter\n\n", Client::connect($url)->version(), $url,
    $cycles, $handoffs);
printf("%-42s %14s %26s\n", 'adapter', 'cycle (µs)', 'handoff median / max (ms)');
foreach ($adapters as $label => $make) {
    $locks = $make();
    if ($locks === null) {
        printf("%-42s %14s\n", $label, 'skipped: no php-redis (apt-get install php-redis)');
        continue;
    }
    $name = 'bench:adapters:' . getmypid() . ':' . bin2hex(random_bytes(4));
    for ($i = 0; $i < 50; $i++) { // warm-up: connections, scripts loaded
        [$acquire, $release] = $locks($name);
        $acquire(false) or throw new RuntimeException("$label: warm-up acquire failed");
        $release();
    }
    $start = hrtime(true);
    for ($i = 0; $i < $cycles; $i++) {
        [$acquire, $release] = $locks($name);
        $acquire(false) or throw new RuntimeException("$label: acquire failed");
        $release();
    }
    $cycle = (hrtime(true) - $start) / 1e3 / $cycles;

    $delays = [];
    for ($round = 0; $round < $handoffs; $round++) {
        [$acquire, $release] = $locks($name);
        $acquire(false) or throw new RuntimeException("$label: the holder cannot acquire");
        $out = tempnam(sys_get_temp_dir(), 'leasehold-bench-');
        $pid = pcntl_fork();
        if ($pid === 0) {
            // The waiter: its own connections (phpredis sockets must not be shared across fork()).
            $mine = $make();
            [$wait, $done] = $mine($name);
            file_put_contents("$out.ready", '1');
            $wait(true);
            $at = microtime(true);
            $done();
            file_put_contents($out, (string) $at);
            exit(0);
        }
        while (!is_file("$out.ready")) {
            usleep(1_000);
        }
        usleep(120_000 + random_int(0, 100_000)); // the waiter is blocked by now, at a random phase of any poll
        $releasedAt = microtime(true);
        $release();
        pcntl_waitpid($pid, $status);
        $delays[] = ((float) file_get_contents($out) - $releasedAt) * 1e3;
        @unlink($out);
        @unlink("$out.ready");
    }
    sort($delays);
    printf("%-42s %14.0f %18.1f / %.1f\n", $label, $cycle, $delays[intdiv(count($delays), 2)], max($delays));
}
