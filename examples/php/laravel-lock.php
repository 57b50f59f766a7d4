<?php

declare(strict_types=1);

// Laravel's Cache::lock() with Leasehold underneath: register LeaseholdServiceProvider and make the default store
//   'leasehold' => ['driver' => 'leasehold', 'store' => 'redis', 'url' => env('LEASEHOLD_URL')],
// in config/cache.php: cache items stay in the redis store, every lock (Cache::lock(), WithoutOverlapping,
// ShouldBeUnique, the scheduler's mutexes) is a Leasehold lease. This script builds just enough of an application
// (container, config, cache; the array store instead of redis) to run:
//   LEASEHOLD_URL=redis://127.0.0.1:6379 php examples/php/laravel-lock.php

$root = dirname(__DIR__, 2);
if (is_file($root . '/vendor/autoload.php')) {
    require $root . '/vendor/autoload.php';
} else {
    require $root . '/bindings/php/autoload.php';
    require_once stream_resolve_include_path('Illuminate/autoload.php') ?: '/usr/share/php/Illuminate/autoload.php';
}

use Illuminate\Cache\CacheServiceProvider;
use Illuminate\Config\Repository;
use Illuminate\Container\Container;
use Illuminate\Support\Facades\Cache;
use Illuminate\Support\Facades\Facade;
use Leasehold\Laravel\LeaseholdServiceProvider;

$app = new Container();
Container::setInstance($app);
$app->instance('config', new Repository(['cache' => ['default' => 'leasehold', 'prefix' => 'example_', 'stores' => [
    'leasehold' => [
        'driver' => 'leasehold',
        'store' => 'array',
        'url' => getenv('LEASEHOLD_URL') ?: 'file://' . sys_get_temp_dir() . '/leasehold-example',
    ],
    'array' => ['driver' => 'array'],
]]]));
(new CacheServiceProvider($app))->register();
(new LeaseholdServiceProvider($app))->register();
Facade::setFacadeApplication($app);

$name = 'podcast:' . ($argv[1] ?? '42') . ':process';
$lock = Cache::lock($name, 120);                       // the lease's key is example_podcast:…:process
if (!$lock->get()) {
    echo "someone else is processing it\n";
    exit(1);
}
printf("acquired %s  fence %d  owner %s\n", $name, $lock->fence(), $lock->owner());
printf("a second lock on it: %s\n", Cache::lock($name, 120)->get() ? 'acquired (wrong!)' : 'refused');

// What a queued job does with the owner it was given at dispatch (here in the same script; any process works).
$owner = $lock->owner();
printf("restoreLock()->release(): %s\n", Cache::restoreLock($name, $owner)->release() ? 'released' : 'not ours');

$result = Cache::lock($name, 10)->block(5, fn () => 'ran under the lock');   // native wait, not 250 ms polling
echo $result, "\n";
Cache::put('last-podcast', $name, 60);                   // cache items: the wrapped store's
printf("cached: %s\n", Cache::get('last-podcast'));
