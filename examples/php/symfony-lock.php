<?php

declare(strict_types=1);

// Symfony Lock with Leasehold underneath: the one line that changes is the store. Run:
//   LEASEHOLD_URL=redis://127.0.0.1:6379 php examples/php/symfony-lock.php
// (Composer projects: vendor/autoload.php; otherwise Debian's php-symfony-lock.)

$root = dirname(__DIR__, 2);
if (is_file($root . '/vendor/autoload.php')) {
    require $root . '/vendor/autoload.php';
} else {
    require $root . '/bindings/php/autoload.php';
    require_once stream_resolve_include_path('Symfony/Component/Lock/autoload.php')
        ?: '/usr/share/php/Symfony/Component/Lock/autoload.php';
}

use Leasehold\Client;
use Leasehold\Symfony\LeaseholdStore;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;

$client = Client::connect(getenv('LEASEHOLD_URL') ?: 'file://' . sys_get_temp_dir() . '/leasehold-example');
$store = new LeaseholdStore($client, maxWait: 10.0);           // was: new RedisStore($redis)
$factory = new LockFactory($store);

$resource = 'invoice:' . ($argv[1] ?? '2026-11');
$key = new Key($resource);
$lock = $factory->createLockFromKey($key, ttl: 30.0);
if (!$lock->acquire(blocking: true)) {                          // waits at most maxWait, woken by the release
    exit(1);
}
try {
    printf("acquired %s  fence %d  %.1f s left\n", $resource, $store->fence($key), $lock->getRemainingLifetime());
    $rival = $factory->createLock($resource);
    printf("a second lock on it: %s\n", $rival->acquire() ? 'acquired (wrong!)' : 'refused');
    $lock->refresh(60.0);
    printf("refreshed: %.1f s left, still ours: %s\n", $lock->getRemainingLifetime(), $lock->isAcquired() ? 'yes' : 'no');
} finally {
    $lock->release();
}
printf("released; held now: %s\n", $lock->isAcquired() ? 'yes' : 'no');
