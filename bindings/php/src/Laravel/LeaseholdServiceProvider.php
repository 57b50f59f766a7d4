<?php

declare(strict_types=1);

namespace Leasehold\Laravel;

use Illuminate\Cache\CacheManager;
use Illuminate\Support\ServiceProvider;
use Leasehold\Client;

/**
 * Registers the cache driver `leasehold`. In config/cache.php:
 *
 *     'locks' => ['driver' => 'leasehold', 'url' => env('LEASEHOLD_URL')],
 *
 * Optional keys: 'keepalive_ttl' (seconds of a 0-second lock's lease, renewed every third of it; default 60),
 * 'persistent' (one library client per URL for the life of the worker process, default true), 'library' (the
 * libleasehold file; default: LEASEHOLD_LIBRARY, preloaded scope, system library, the workspace build).
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
    }

    /** Adds the `leasehold` driver to $cache (what register() does once the cache manager exists). */
    public static function extend(CacheManager $cache): void
    {
        // CacheManager::extend() binds the closure to the manager, so it may not be static.
        $cache->extend('leasehold', function ($app, array $config) use ($cache) {
            return $cache->repository(LeaseholdServiceProvider::createStore($config));
        });
    }

    /** @param array<string, mixed> $config a cache store's configuration */
    public static function createStore(array $config): LeaseholdStore
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
        $library = $config['library'] ?? null;
        $client = Client::connect(
            $url,
            is_string($library) && $library !== '' ? $library : null,
            (bool) ($config['persistent'] ?? true),
        );
        return new LeaseholdStore($client, (float) ($config['keepalive_ttl'] ?? 60.0));
    }
}
