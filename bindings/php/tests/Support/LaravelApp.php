<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

use Illuminate\Cache\CacheServiceProvider;
use Illuminate\Config\Repository as Config;
use Illuminate\Container\Container;
use Illuminate\Support\Facades\Facade;
use Leasehold\Laravel\LeaseholdServiceProvider;

/**
 * The part of a Laravel application that cache locks need: a container, the config repository, Laravel's cache
 * service provider and ours, and the facades pointed at the container. No full framework boot.
 */
final class LaravelApp
{
    /** @param array<string, mixed> $store extra keys of the `locks` store's configuration */
    public static function make(string $url, array $store = []): Container
    {
        Frameworks::laravel();
        $app = new Container();
        Container::setInstance($app);
        $app->instance('config', new Config(['cache' => [
            'default' => 'locks',
            'stores' => [
                'locks' => ['driver' => 'leasehold', 'url' => $url] + $store,
                'array' => ['driver' => 'array'],
            ],
        ]]));
        (new CacheServiceProvider($app))->register();
        (new LeaseholdServiceProvider($app))->register();
        Facade::clearResolvedInstances();
        Facade::setFacadeApplication($app);
        return $app;
    }
}
