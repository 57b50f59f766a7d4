<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Testing\InMemoryBackend;
use Leasehold\Testing\InMemoryClient;
use Leasehold\Testing\ManualClock;
use Leasehold\Testing\SystemClock;
use Leasehold\Tests\Support\LockContractTestCase;
use Leasehold\Tests\Support\Php;

/**
 * The lock contract against Leasehold\Testing\InMemoryClient: the test double must behave like the real client.
 * Time is a ManualClock, so the contract's sleeps cost nothing; the library is never loaded here.
 */
final class InMemoryLockTest extends LockContractTestCase
{
    private InMemoryBackend $backend;
    private ManualClock $clock;

    protected function setUp(): void
    {
        $this->clock = new ManualClock(1000.0);
        $this->backend = new InMemoryBackend($this->clock);
    }

    protected function client(): InMemoryClient
    {
        return new InMemoryClient($this->backend);
    }

    protected function sleep(float $seconds): void
    {
        $this->clock->advance($seconds);
    }

    protected function took(callable $action): float
    {
        $start = $this->clock->now();
        $action();
        return $this->clock->now() - $start;
    }

    public function testItRunsWithoutFfiOrTheLibrary(): void
    {
        $result = Php::run(self::fixture('in-memory-without-ffi.php'), [],
            ['LEASEHOLD_LIBRARY' => '/nonexistent/libleasehold.so'], 30.0, ['-d', 'ffi.enable=0']);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        self::assertSame("ok\n", $result['stdout'], $result['stderr']);
    }

    public function testTheManualClockDecidesWhenLeasesExpire(): void
    {
        $client = new InMemoryClient();
        $lock = $client->createLock('report', 30.0);
        self::assertTrue($lock->tryAcquire());
        $client->clock()->sleep(29.9);
        self::assertTrue($lock->isAcquired());
        self::assertTrue($client->isLocked('report'));
        $client->clock()->sleep(0.1);
        self::assertFalse($lock->isAcquired());
        self::assertFalse($client->isLocked('report'));
        $this->expectException(LockLostException::class);
        $lock->extend();
    }

    public function testAWaitMovesTheClockToTheExpiryInsteadOfSleeping(): void
    {
        $client = $this->client();
        $held = $client->createLock('busy', 5.0);
        self::assertTrue($held->tryAcquire());
        $real = self::seconds(function () use ($client): void {
            self::assertFalse($client->createLock('busy')->acquire(4.0), 'still held after 4 s');
            self::assertTrue($client->createLock('busy')->acquire(4.0), 'free once the 5 s lease expired');
        });
        self::assertLessThan(0.5, $real, 'no real waiting');
        self::assertEqualsWithDelta(1005.0, $this->clock->now(), 1e-6);
    }

    public function testKeepAliveHoldsTheLeaseWhileTimePassesAndReportsALoss(): void
    {
        $client = $this->client();
        $lock = $client->createLock('long-job', 3.0);
        self::assertTrue($lock->tryAcquire());
        $lock->keepAlive();
        self::assertTrue($lock->keepsAlive());
        $this->clock->advance(60.0);
        self::assertTrue($lock->isAcquired(), 'renewed every second');
        self::assertGreaterThan(2.0, $lock->remainingLifetime());
        self::assertNull($lock->keepAliveError());
        self::assertFalse($client->createLock('long-job')->acquire(10.0), 'no one else gets it meanwhile');
        $client->forceRelease('long-job');
        self::assertFalse($lock->isAcquired(), 'the next renewal found the lease gone');
        self::assertInstanceOf(LockLostException::class, $lock->keepAliveError());
        try {
            $lock->release();
            self::fail('release() of a lease lost under keep-alive must throw');
        } catch (LockLostException) {
        }
        $other = $client->createLock('long-job', 3.0);
        self::assertTrue($other->tryAcquire());
        $other->keepAlive();
        $other->keepAlive(false);
        $this->clock->advance(3.0);
        self::assertFalse($other->isAcquired(), 'renewal stopped');
    }

    public function testSharedAndPermitLeasesAreNotRestoredAsLocks(): void
    {
        $client = $this->client();
        $reader = $client->createSharedLock('doc', 10.0);
        self::assertTrue($reader->tryAcquire());
        try {
            $client->restoreLock('doc', (string) $reader->token());
            self::fail('a shared lease is not an exclusive lock');
        } catch (LockLostException) {
        }
        self::assertTrue($reader->isAcquired());
        $this->expectException(InvalidArgumentException::class);
        $this->clock->advance(-1.0);
    }

    public function testASystemClockExpiresLeasesInRealTime(): void
    {
        $client = new InMemoryClient(new InMemoryBackend(new SystemClock()));
        $lock = $client->createLock('real-time', 0.05);
        self::assertTrue($lock->tryAcquire());
        $took = self::seconds(function () use ($client): void {
            self::assertTrue($client->createLock('real-time')->acquire(1.0));
        });
        self::assertGreaterThan(0.02, $took);
        self::assertLessThan(0.5, $took);
    }
}
