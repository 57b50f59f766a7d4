<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Illuminate\Container\Container;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Support\Facades\Cache;
use Leasehold\Laravel\LeaseholdStore;
use Leasehold\Testing\InMemoryClient;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LaravelApp;
use Leasehold\Tests\Support\LeaseholdTestCase;

/**
 * The `leasehold` driver as the default store: cache operations delegated to the store it wraps, lock names under
 * the prefix. On the in-memory client (`'url' => 'memory:'`), the way an application's own tests run it.
 */
final class WrappingStoreTest extends LeaseholdTestCase
{
    public static function setUpBeforeClass(): void
    {
        Frameworks::laravel();
    }

    private static function app(array $store = [], string $prefix = 'app_'): Container
    {
        $app = LaravelApp::make('memory:', ['store' => 'array'] + $store);
        $app['config']->set('cache.prefix', $prefix);
        return $app;
    }

    public function testCacheOperationsAreTheWrappedStores(): void
    {
        self::app();
        $store = Cache::getStore();
        self::assertInstanceOf(LeaseholdStore::class, $store);
        self::assertInstanceOf(InMemoryClient::class, $store->client(), "'memory:' is the in-memory client");
        self::assertSame(Cache::store('array')->getStore(), $store->cacheStore());

        self::assertTrue(Cache::put('a', 1, 60));
        self::assertSame(['a' => 1, 'b' => null], Cache::many(['a', 'b']));
        self::assertTrue(Cache::putMany(['b' => 2, 'c' => 3], 60));
        self::assertFalse(Cache::add('a', 9, 60));
        self::assertTrue(Cache::add('d', 4, 60));
        self::assertSame(5, Cache::increment('d'));
        self::assertSame(3, Cache::decrement('d', 2));
        self::assertTrue(Cache::forever('e', 'kept'));
        self::assertSame('kept', Cache::store('array')->get('e'));
        self::assertTrue(Cache::forget('e'));
        self::assertSame('tagged', Cache::tags(['reports'])->remember('t', 60, static fn () => 'tagged'));
        self::assertSame('tagged', Cache::tags(['reports'])->get('t'));
        self::assertTrue(Cache::flush());
        self::assertNull(Cache::get('a'));
    }

    public function testLockNamesCarryThePrefix(): void
    {
        self::app();
        $client = Cache::getStore()->client();
        self::assertSame('app_', Cache::getPrefix());
        $lock = Cache::lock('report', 10);
        self::assertTrue($lock->get());
        self::assertTrue($client->isLocked('app_report'));
        self::assertFalse($client->isLocked('report'));
        self::assertFalse(Cache::lock('report', 10)->get());
        self::assertTrue(Cache::restoreLock('report', $lock->owner())->release());
        self::assertFalse($client->isLocked('app_report'));

        self::app(['prefix' => 'own_']);
        self::assertSame('own_', Cache::getPrefix(), "the store's own 'prefix' wins over cache.prefix");
        self::assertTrue(Cache::lock('report', 10)->get());
        self::assertTrue(Cache::getStore()->client()->isLocked('own_report'));
    }

    public function testLocksFollowTheInMemoryClock(): void
    {
        self::app();
        $client = Cache::getStore()->client();
        self::assertTrue(Cache::lock('nightly', 30)->get());
        $client->clock()->sleep(29.0);
        self::assertFalse(Cache::lock('nightly', 30)->get());
        self::assertSame('ran', Cache::lock('nightly', 30)->block(5, static fn () => 'ran'),
            'block() waited (on the manual clock) for the 30 s lease to end');
    }

    /** Every method of Illuminate\Cache\Lock, with Laravel's results. */
    public function testTheLaravelLockApi(): void
    {
        self::app();
        $lock = Cache::lock('api', 10);
        self::assertSame($lock, $lock->betweenBlockedAttemptsSleepFor(10), 'fluent, as Laravel\'s');
        self::assertTrue($lock->acquire());
        self::assertFalse($lock->acquire(), 'the key is held (by this very lock, as Laravel answers)');
        self::assertFalse(Cache::lock('api', 10)->get());
        self::assertFalse(Cache::lock('api', 10)->get(static fn () => self::fail('must not run')));
        foreach ([0, -1, 0.2] as $seconds) {
            try {
                Cache::lock('api', 10)->block($seconds);
                self::fail("block($seconds) on a held key must time out");
            } catch (LockTimeoutException) {
            }
        }
        self::assertTrue(Cache::lock('api')->isOwnedBy($lock->owner()));
        self::assertTrue($lock->release());
        self::assertFalse($lock->release());
        self::assertSame('x', Cache::lock('api', 10)->get(static fn () => 'x'));
        self::assertSame('y', Cache::lock('api', 10)->block(1, static fn () => 'y'));
        self::assertTrue(Cache::lock('api', 10)->block(1), 'block() without a callback keeps the lock');
        Cache::lock('api')->forceRelease();
        self::assertFalse(Cache::getStore()->client()->isLocked('app_api'));
        $mine = Cache::lock('api', 10, 'worker-7');
        self::assertSame('worker-7', $mine->owner());
        self::assertTrue($mine->get());
        self::assertSame('worker-7', $mine->owner());
        self::assertTrue(Cache::restoreLock('api', 'worker-7')->release());
    }

    public function testMisconfigurationsAreNamed(): void
    {
        $app = self::app();
        $app['config']->set('cache.stores.loop', ['driver' => 'leasehold', 'store' => 'loop', 'url' => 'memory:']);
        try {
            Cache::store('loop');
            self::fail('a leasehold store cannot hold cache items for itself');
        } catch (\InvalidArgumentException $e) {
            self::assertStringContainsString("'loop' is a leasehold store", $e->getMessage());
        }
        $app['config']->set('cache.stores.nothing',
            ['driver' => 'leasehold', 'store' => 'missing', 'url' => 'memory:']);
        try {
            Cache::store('nothing');
            self::fail('an unknown wrapped store must be refused');
        } catch (\InvalidArgumentException $e) {
            self::assertStringContainsString('missing', $e->getMessage());
        }
        $this->expectException(\BadMethodCallException::class);
        Cache::getStore()->noSuchMethod();
    }
}
