<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Cache\CacheManager;
use Illuminate\Console\Scheduling\EventMutex;
use Illuminate\Console\Scheduling\SchedulingMutex;
use Illuminate\Contracts\Cache\Store;
use Illuminate\Support\ServiceProvider;
use Leasehold\Client;
use Leasehold\ClientInterface;
use Leasehold\Testing\InMemoryClient;

/**
 * Registers the cache driver `leasehold`, and the scheduler mutexes that lock through it. In config/cache.php:
 *
 *     'default' => env('CACHE_DRIVER', 'leasehold'),
 *     'stores' => [
 *         'leasehold' => ['driver' => 'leasehold', 'store' => 'redis', 'url' => env('LEASEHOLD_URL')],
 *         'redis' => ['driver' => 'redis', 'connection' => 'cache'],
 *     ],
 *
 * 'store' names the cache store that holds cache items (without it the store only provides locks). Optional keys:
 * 'prefix' (put before lock names; default `cache.prefix`), 'keepalive_ttl' (seconds of a 0-second lock's lease,
 * renewed every third of it; default 60), 'persistent' (one library client per URL for the life of the worker
 * process, default true), 'library' (the libleasehold file; default: LEASEHOLD_LIBRARY, preloaded scope, system
 * library, the workspace build). The URL `memory:` uses Testing\InMemoryClient (no library, leases in this
 * process only) for an application's own tests.
 */
final class LeaseholdServiceProvider extends ServiceProvider
{
    public function register(): void
    {
        $this->app->afterResolving('cache', static function (CacheManager $cache): void {
            self::extend($cache);
        });
        if ($this->app->resolved('cache')) {
            self::extend($this->app->make('cache'));
        }
        // Laravel 8's scheduler keeps its mutexes as cache items (add/has/forget), which a wrapping store would
        // send to the wrapped store: these take them as leases when the store is a leasehold one, and behave as
        // Laravel's own mutexes on any other store. An application's own binding wins.
        if (interface_exists(EventMutex::class) && !$this->app->bound(EventMutex::class)) {
            $this->app->bind(EventMutex::class, LeaseholdEventMutex::class);
        }
        if (interface_exists(SchedulingMutex::class) && !$this->app->bound(SchedulingMutex::class)) {
            $this->app->bind(SchedulingMutex::class, LeaseholdSchedulingMutex::class);
        }
    }

    /** Adds the `leasehold` driver to $cache (what register() does once the cache manager exists). */
    public static function extend(CacheManager $cache): void
    {
        // CacheManager::extend() binds the closure to the manager, so it may not be static.
        $cache->extend('leasehold', function ($app, array $config) use ($cache) {
            $name = $config['store'] ?? null;
            if ($name !== null && (!is_string($name) || $name === '')) {
                throw new \InvalidArgumentException("the leasehold cache store's 'store' is the name of a cache store");
            }
            $items = null;
            if ($name !== null) {
                $driver = $app['config']["cache.stores.$name.driver"] ?? null;
                if ($driver === 'leasehold') {
                    throw new \InvalidArgumentException(
                        "the leasehold cache store's 'store' must hold cache items; '$name' is a leasehold store",
                    );
                }
                $items = $cache->store($name)->getStore();
            }
            $prefix = $config['prefix'] ?? $app['config']['cache.prefix'] ?? '';
            return $cache->repository(LeaseholdServiceProvider::createStore($config, $items, (string) $prefix));
        });
    }

    /**
     * @param array<string, mixed> $config     a cache store's configuration
     * @param Store|null           $cacheStore where cache items go; null: cache operations are refused
     * @param string               $prefix     put before every lock name
     */
    public static function createStore(array $config, ?Store $cacheStore = null, string $prefix = ''): LeaseholdStore
    {
        return new LeaseholdStore(
            self::client($config),
            (float) ($config['keepalive_ttl'] ?? 60.0),
            $cacheStore,
            $prefix,
        );
    }

    /** @param array<string, mixed> $config */
    private static function client(array $config): ClientInterface
    {
        $url = $config['url'] ?? null;
        if ($url === null || $url === '') {
            $url = getenv('LEASEHOLD_URL');
        }
        if (!is_string($url) || $url === '') {
            throw new \InvalidArgumentException(
                "the leasehold cache store needs a URL: 'url' => env('LEASEHOLD_URL') in its configuration",
            );
        }
        if ($url === 'memory:' || $url === 'memory://') {
            return new InMemoryClient();
        }
        $library = $config['library'] ?? null;
        return Client::connect(
            $url,
            is_string($library) && $library !== '' ? $library : null,
            (bool) ($config['persistent'] ?? true),
        );
    }
}
