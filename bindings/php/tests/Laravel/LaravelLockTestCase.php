<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Illuminate\Bus\UniqueLock;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Support\Facades\Cache;
use Leasehold\Client;
use Leasehold\Laravel\LeaseholdLock;
use Leasehold\Laravel\LeaseholdStore;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LaravelApp;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\TempDir;

/**
 * Laravel's cache locks (Debian's php-laravel-framework) over the `leasehold` driver, registered by
 * LeaseholdServiceProvider in a container with Laravel's CacheServiceProvider. Each concrete class names a
 * backend.
 */
abstract class LaravelLockTestCase extends LeaseholdTestCase
{
    protected Backend $backend;

    abstract protected function backend(): Backend;

    public static function setUpBeforeClass(): void
    {
        Frameworks::laravel();
    }

    protected function setUp(): void
    {
        $this->backend = $this->backend();
        LaravelApp::make($this->backend->url, ['keepalive_ttl' => 0.3]);
    }

    public function testTheProviderRegistersTheDriverAndLocksWorkEndToEnd(): void
    {
        $store = Cache::store('locks')->getStore();
        self::assertInstanceOf(LeaseholdStore::class, $store);
        $name = self::uniqueKey('lv-cycle');

        $lock = Cache::store('locks')->lock($name, 10);
        self::assertInstanceOf(LeaseholdLock::class, $lock);
        self::assertTrue($lock->get());
        self::assertMatchesRegularExpression('/^[0-9a-f]{32}$/', $lock->owner(), 'the owner is the lease token');
        self::assertSame($lock->token(), $lock->owner());
        self::assertIsInt($lock->fence());
        self::assertGreaterThan(9.0, $lock->remainingLifetime());
        $fence = $lock->fence();

        self::assertFalse(Cache::lock($name, 10)->get(), 'the facade\'s default store sees it held');
        self::assertHeldElsewhere(Client::connect($this->backend->url), $name);
        self::assertFalse(Cache::store('locks')->lock($name, 10)->release(), 'another owner cannot release it');

        self::assertTrue($lock->release());
        self::assertFalse($lock->release(), 'a second release finds nothing of ours');
        self::assertNull($lock->fence());

        self::assertSame('done', Cache::store('locks')->lock($name, 10)->get(static fn () => 'done'));
        $next = Cache::store('locks')->lock($name, 10);
        self::assertTrue($next->get(), 'get($callback) released after the callback');
        self::assertGreaterThan($fence, $next->fence());
        $next->release();
    }

    public function testALockOutlivesItsObjectAndRestoreLockReleasesIt(): void
    {
        $name = self::uniqueKey('lv-outlive');
        $owner = (static function () use ($name): string {
            $lock = Cache::store('locks')->lock($name, 10);
            self::assertTrue($lock->get());
            return $lock->owner();
        })();
        self::assertFalse(Cache::store('locks')->lock($name, 10)->get(), 'held after the lock object is gone');
        self::assertTrue(Cache::store('locks')->restoreLock($name, $owner)->release());
        self::assertTrue(Cache::store('locks')->lock($name, 10)->get());
        Cache::store('locks')->lock($name)->forceRelease();
    }

    public function testACustomOwnerWorksWithinTheProcess(): void
    {
        $name = self::uniqueKey('lv-owner');
        $lock = Cache::store('locks')->lock($name, 10, 'job-42');
        self::assertTrue($lock->get());
        self::assertSame('job-42', $lock->owner());
        self::assertFalse(Cache::store('locks')->lock($name, 10, 'job-43')->release());
        self::assertTrue(Cache::store('locks')->restoreLock($name, 'job-42')->release());
        self::assertFalse($lock->release());
    }

    public function testBlockTimesOutWithinItsSecondsAndRunsTheCallback(): void
    {
        $name = self::uniqueKey('lv-block');
        $held = Cache::store('locks')->lock($name, 10);
        self::assertTrue($held->get());
        $elapsed = self::seconds(static function () use ($name): void {
            try {
                Cache::store('locks')->lock($name, 10)->block(0.3);
                self::fail('block() must time out');
            } catch (LockTimeoutException) {
            }
        });
        self::assertGreaterThanOrEqual(0.29, $elapsed);
        self::assertLessThan(1.5, $elapsed);
        $held->release();
        self::assertSame(42, Cache::store('locks')->lock($name, 10)->block(1, static fn () => 42));
        self::assertTrue(Cache::store('locks')->lock($name, 10)->get(), 'block($s, $callback) released it');
        Cache::store('locks')->lock($name)->forceRelease();
    }

    public function testBlockIsWokenByAReleaseInAnotherProcess(): void
    {
        $name = self::uniqueKey('lv-wake');
        $held = Cache::store('locks')->lock($name, 30);
        self::assertTrue($held->get());
        $dir = new TempDir('lv-wake');
        $run = Php::start(self::fixture('laravel-block.php'), [$this->backend->url, $name, $dir->file('ready')]);
        $deadline = microtime(true) + 20.0;
        while (!is_file($dir->file('ready')) && microtime(true) < $deadline) {
            usleep(5_000);
        }
        usleep(400_000);
        $releasedAt = microtime(true);
        self::assertTrue($held->release());
        $result = Php::finish($run, 30.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true, 8, JSON_THROW_ON_ERROR);
        self::assertFalse($report['try_while_held']);
        self::assertSame('ran', $report['result']);
        self::assertGreaterThan(0.35, $report['waited']);
        // Laravel's own block() polls every 250 ms; the native wait is woken by the release.
        self::assertLessThan(0.2, $report['acquired_at'] - $releasedAt, $result['stdout']);
    }

    public function testZeroSecondsIsALeaseKeptAliveWhileTheProcessRuns(): void
    {
        $name = self::uniqueKey('lv-forever');
        $lock = Cache::store('locks')->lock($name); // 0 s: Laravel's "never expires"; a 0.3 s lease renewed here
        self::assertTrue($lock->get());
        $fence = $lock->fence();
        usleep(1_000_000);
        self::assertHeldElsewhere(Client::connect($this->backend->url), $name, 'renewed past 3 TTLs');
        self::assertSame($fence, $lock->fence());
        self::assertTrue($lock->release());
        self::assertTrue(Cache::store('locks')->lock($name, 1)->get());
    }

    /** After pcntl_fork() the store's lease is the parent's: the child can neither release nor restore it. */
    public function testAForkedChildLeavesTheParentsLockAlone(): void
    {
        $result = Php::run(self::fixture('laravel-fork.php'), [$this->backend->url, self::uniqueKey('lv-fork')], [],
            60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true);
        self::assertIsArray($report, $result['stdout'] . $result['stderr']);
        foreach ($report as $check => $passed) {
            self::assertTrue($passed, "fork check failed: $check\n" . $result['stdout'] . $result['stderr']);
        }
        self::assertGreaterThanOrEqual(9, count($report));
    }

    public function testRestoreLockReleasesFromAnotherProcess(): void
    {
        $name = self::uniqueKey('lv-restore');
        $lock = Cache::store('locks')->lock($name, 30);
        self::assertTrue($lock->get());
        $result = Php::run(self::fixture('laravel-release.php'), [$this->backend->url, 'restore', $name, $lock->owner()]);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true, 8, JSON_THROW_ON_ERROR);
        self::assertSame($lock->fence(), $report['fence']);
        self::assertTrue($report['released']);
        self::assertFalse($report['released_again']);
        self::assertTrue(Cache::store('locks')->lock($name, 5)->get(), 'free after the other process released it');
        self::assertFalse($lock->release(), 'the first owner\'s lease is gone');
    }

    public function testShouldBeUniqueDispatchThenReleaseInTheWorker(): void
    {
        $job = new UniqueTestJob(self::uniqueKey('lv-unique'));
        $unique = new UniqueLock(Cache::store('locks'));
        self::assertTrue($unique->acquire($job), 'the first dispatch takes the unique lock');
        self::assertFalse($unique->acquire(clone $job), 'a second dispatch of the same job is refused');
        // What Laravel's CallQueuedHandler does after the job ran, in the worker's process.
        $name = 'laravel_unique_job:' . UniqueTestJob::class . $job->uniqueId();
        $result = Php::run(self::fixture('laravel-release.php'), [$this->backend->url, 'force', $name]);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        self::assertTrue($unique->acquire($job), 'dispatchable again once the worker released it');
        Cache::store('locks')->lock($name)->forceRelease();
    }

    public function testWithoutOverlappingStyleMutex(): void
    {
        // The scheduler's event mutex in Laravel releases that use locks (newer than 8.x): lock(name, expiresAt
        // minutes)->acquire() to start, get() to probe, forceRelease() when the run ends. Two "servers".
        $mutex = 'framework' . DIRECTORY_SEPARATOR . 'schedule-' . sha1(self::uniqueKey('lv-schedule'));
        $serverA = new LeaseholdStore(Client::connect($this->backend->url));
        $serverB = new LeaseholdStore(Client::connect($this->backend->url));
        self::assertTrue($serverA->lock($mutex, 1440 * 60)->acquire(), 'server A runs the event');
        self::assertFalse($serverB->lock($mutex, 1440 * 60)->acquire(), 'server B skips the overlapping run');
        self::assertFalse($serverB->lock($mutex, 1440 * 60)->get(static fn () => true), 'exists');
        $serverA->lock($mutex)->forceRelease();
        self::assertTrue($serverB->lock($mutex, 1440 * 60)->get(static fn () => true), 'free once A finished');
    }

    public function testCacheOperationsRefuseClearly(): void
    {
        foreach ([
            static fn () => Cache::store('locks')->get('x'),
            static fn () => Cache::store('locks')->put('x', 1, 10),
            static fn () => Cache::store('locks')->increment('x'),
            static fn () => Cache::store('locks')->flush(),
        ] as $operation) {
            try {
                $operation();
                self::fail('a cache operation must refuse');
            } catch (\BadMethodCallException $e) {
                self::assertStringContainsString('only provides locks', $e->getMessage());
            }
        }
        self::assertSame('', Cache::store('locks')->getPrefix());
    }
}
