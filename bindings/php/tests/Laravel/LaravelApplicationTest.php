<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Illuminate\Console\Scheduling\Schedule;
use Illuminate\Support\Facades\Cache;
use Illuminate\Support\Facades\Queue;
use Leasehold\Client;
use Leasehold\Laravel\LeaseholdStore;
use Leasehold\Tests\Laravel\Application\OverlapJob;
use Leasehold\Tests\Laravel\Application\Records;
use Leasehold\Tests\Laravel\Application\UniqueJob;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LaravelApplication;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\RedisServer;

/**
 * A real Laravel application (Illuminate\Foundation\Application, artisan, a Redis queue) whose default cache store
 * is `leasehold` wrapping the file store: Laravel's own locking — WithoutOverlapping, ShouldBeUnique, the
 * scheduler's onOneServer() and withoutOverlapping() — goes through Leasehold, with the cache prefix on lock
 * names, while cache items stay in the file store. Workers and schedulers are separate processes.
 */
final class LaravelApplicationTest extends LeaseholdTestCase
{
    private LaravelApplication $app;
    private string $url;

    public static function setUpBeforeClass(): void
    {
        Frameworks::laravel();
    }

    protected function setUp(): void
    {
        $redis = RedisServer::shared();
        $this->url = $redis->url(['connect_timeout_ms' => 2000, 'io_timeout_ms' => 2000,
            'prefix' => 'lv-app-' . bin2hex(random_bytes(4))]);
        $this->app = LaravelApplication::create($this->url, $redis->port);
    }

    public function testCacheItemsGoToTheWrappedStoreAndLocksToLeasehold(): void
    {
        $this->app->boot();
        $store = Cache::getStore();
        self::assertInstanceOf(LeaseholdStore::class, $store);
        self::assertSame(LaravelApplication::PREFIX, Cache::getPrefix());

        self::assertTrue(Cache::put('greeting', 'hello', 60));
        self::assertSame('hello', Cache::get('greeting'));
        self::assertFalse(Cache::add('greeting', 'again', 60), 'add() keeps an existing item');
        self::assertTrue(Cache::add('counter', 1, 60));
        self::assertSame(3, Cache::increment('counter', 2));
        self::assertSame('hello', Cache::store('file')->get('greeting'), 'the items are the file store\'s');
        self::assertSame('computed', Cache::remember('lazy', 60, static fn () => 'computed'));
        self::assertTrue(Cache::forget('greeting'));
        self::assertNull(Cache::get('greeting'));

        $lock = Cache::lock('invoice:42', 10);
        self::assertTrue($lock->get());
        self::assertHeldElsewhere(Client::connect($this->url), LaravelApplication::PREFIX . 'invoice:42',
            'the lock is a Leasehold lease under the cache prefix');
        self::assertFalse(Cache::lock('invoice:42', 10)->get());
        self::assertSame($lock->fence(), Cache::restoreLock('invoice:42', $lock->owner())->fence());
        self::assertTrue(Cache::lock('invoice:42')->isOwnedBy($lock->owner()));
        self::assertFalse(Cache::lock('invoice:42')->isOwnedBy('someone-else'));
        self::assertTrue(Cache::restoreLock('invoice:42', $lock->owner())->release());
        self::assertTrue(Cache::flush());
        self::assertNull(Cache::get('counter'));
    }

    /** Two queue workers take two jobs of one WithoutOverlapping key at the same moment. */
    public function testWithoutOverlappingJobsNeverRunTogetherOnTwoWorkers(): void
    {
        $this->app->boot();
        OverlapJob::dispatch('a');
        OverlapJob::dispatch('b');
        self::assertSame(2, Queue::size());

        $gate = $this->app->run('go');
        $worker = ['queue:work', 'redis', '--once', '--sleep=0'];
        $workers = [
            $this->app->artisan($worker, ['LEASEHOLD_START_FILE' => $gate]),
            $this->app->artisan($worker, ['LEASEHOLD_START_FILE' => $gate]),
        ];
        usleep(300_000);
        touch($gate);
        foreach ($workers as $run) {
            $result = Php::finish($run, 60.0);
            self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        }
        // The job the lock sent back (released with a 1 s delay) is run by a third worker once it is due.
        $result = Php::finish($this->app->artisan(['queue:work', 'redis', '--once', '--sleep=0']), 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);

        $records = Records::read($this->app);
        self::assertCount(2, $records, json_encode($records) . $result['stdout']);
        usort($records, static fn (array $x, array $y) => $x['start'] <=> $y['start']);
        self::assertSame(['a', 'b'], self::sorted(array_column($records, 'label')));
        self::assertSame([1, 2], array_column($records, 'attempt'),
            'the second job was sent back while the first held the lock');
        self::assertLessThanOrEqual($records[1]['start'], $records[0]['end'], 'no overlap');
        self::assertNotSame($records[0]['pid'], $records[1]['pid']);
        foreach ($records as $record) {
            self::assertTrue($record['lock_held_in_leasehold'], 'WithoutOverlapping locked through Leasehold');
        }
        $key = LaravelApplication::PREFIX . 'laravel-queue-overlap:' . OverlapJob::class . ':' . OverlapJob::KEY;
        self::assertTrue(Client::connect($this->url)->createLock($key, 1.0)->tryAcquire(), 'released after the job');
        self::assertSame(0, Queue::size());
    }

    public function testShouldBeUniqueJobDispatchedTwiceIsQueuedOnce(): void
    {
        $this->app->boot();
        UniqueJob::dispatch('42');
        UniqueJob::dispatch('42');
        self::assertSame(1, Queue::size(), 'the second dispatch was refused by the unique lock');
        $name = LaravelApplication::PREFIX . 'laravel_unique_job:' . UniqueJob::class . '42';
        self::assertHeldElsewhere(Client::connect($this->url), $name, 'the unique lock is a Leasehold lease');

        $result = Php::finish($this->app->artisan(['queue:work', 'redis', '--once', '--sleep=0']), 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        self::assertSame(['unique-42'], array_column(Records::read($this->app), 'label'));
        self::assertSame(0, Queue::size());

        UniqueJob::dispatch('42');
        self::assertSame(1, Queue::size(), 'the worker released the unique lock: dispatchable again');
        Cache::lock('laravel_unique_job:' . UniqueJob::class . '42')->forceRelease();
    }

    public function testOnOneServerRunsAScheduledCommandOnOneOfTwoSchedulers(): void
    {
        $gate = $this->app->run('go');
        // Both "servers" see the same minute (a random one, so earlier runs' hour-long mutexes do not matter).
        $env = ['LEASEHOLD_SCENARIO' => 'one-server', 'LEASEHOLD_START_FILE' => $gate,
            'LEASEHOLD_TEST_NOW' => sprintf('2026-12-03 %02d:%02d:05', random_int(0, 23), random_int(0, 59))];
        $schedulers = [$this->app->artisan(['schedule:run'], $env), $this->app->artisan(['schedule:run'], $env)];
        usleep(300_000);
        touch($gate);
        $outputs = '';
        foreach ($schedulers as $run) {
            $result = Php::finish($run, 60.0);
            self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
            $outputs .= $result['stdout'];
        }
        self::assertSame(1, substr_count($outputs, 'Running scheduled command'), $outputs);
        self::assertSame(1, substr_count($outputs, 'Skipping command (has already run on another server)'), $outputs);
        $records = Records::read($this->app);
        self::assertCount(1, $records, $outputs);
        self::assertSame('one-server', $records[0]['label']);
        self::assertTrue($records[0]['mutex_held_in_leasehold'], 'onOneServer() locked through Leasehold');
    }

    public function testWithoutOverlappingSkipsAScheduledCommandWhileItRuns(): void
    {
        $env = ['LEASEHOLD_SCENARIO' => 'overlap'];
        $first = $this->app->artisan(['schedule:run'], $env);
        $deadline = microtime(true) + 30.0;
        while (!is_file($this->app->run('overlap.entered')) && microtime(true) < $deadline) {
            usleep(10_000);
        }
        $second = Php::finish($this->app->artisan(['schedule:run'], $env), 60.0);
        $first = Php::finish($first, 60.0);
        self::assertSame(0, $first['exit'], $first['stdout'] . $first['stderr']);
        self::assertSame(0, $second['exit'], $second['stdout'] . $second['stderr']);
        self::assertStringContainsString('Running scheduled command', $first['stdout']);
        self::assertStringNotContainsString('Running scheduled command', $second['stdout'],
            'the run that overlapped was skipped');
        self::assertCount(1, Records::read($this->app));

        $third = Php::finish($this->app->artisan(['schedule:run'], $env), 60.0);
        self::assertStringContainsString('Running scheduled command', $third['stdout'], 'the mutex was released');
        $records = Records::read($this->app);
        self::assertCount(2, $records);
        self::assertLessThanOrEqual($records[1]['start'], $records[0]['end']);
        foreach ($records as $record) {
            self::assertTrue($record['mutex_held_in_leasehold'], 'withoutOverlapping() locked through Leasehold');
        }
    }

    public function testTheSchedulerMutexesKeepLaravelsBehaviourOnOtherStores(): void
    {
        $app = $this->app->boot();
        $schedule = $app->make(Schedule::class)->useCache('file');
        $event = $schedule->command('inspire')->withoutOverlapping();
        self::assertTrue($event->mutex->create($event));
        self::assertTrue(Cache::store('file')->has($event->mutexName()), 'a cache item, as Laravel keeps it');
        self::assertTrue($event->mutex->exists($event));
        $event->mutex->forget($event);
        self::assertFalse($event->mutex->exists($event));
        self::assertTrue($schedule->serverShouldRun($event, new \DateTimeImmutable('2026-12-03 10:00')));
        self::assertFalse($schedule->serverShouldRun($event, new \DateTimeImmutable('2026-12-03 10:00')));
    }

    /** @param list<string> $values */
    private static function sorted(array $values): array
    {
        sort($values);
        return $values;
    }
}
