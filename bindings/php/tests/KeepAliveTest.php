<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\Underneath;

/** Lock::keepAlive(): a 0.3 s lease kept for 3 s by the library's renewal thread, and a loss that is never silent. */
final class KeepAliveTest extends LeaseholdTestCase
{
    /** @return array<string, array{callable(): Backend}> */
    public static function backends(): array
    {
        return Backend::both();
    }

    /** @dataProvider backends */
    public function testAShortLeaseIsKeptWhilePhpWorks(callable $backend): void
    {
        $backend = $backend();
        $client = Client::connect($backend->url);
        $other = Client::connect($backend->url);
        $key = Underneath::key('ka-kept');
        $lock = $client->createLock($key, 0.3);
        self::assertTrue($lock->tryAcquire());
        self::assertFalse($lock->keepsAlive());
        $lock->keepAlive();
        self::assertTrue($lock->keepsAlive());
        $start = microtime(true);
        $probes = 0;
        while (microtime(true) - $start < 3.0) {
            self::assertTrue($lock->isAcquired(), sprintf('lost after %.2f s', microtime(true) - $start));
            self::assertFalse($other->createLock($key, 1.0)->tryAcquire(), 'another client took a kept lease');
            $probes++;
            usleep(100_000); // PHP "works": it never calls extend()
        }
        self::assertGreaterThanOrEqual(5, $probes);
        self::assertNull($lock->keepAliveError());
        self::assertGreaterThanOrEqual(5, $client->stats()['keepalive_renewals']);
        $lock->release();
        self::assertFalse($lock->keepsAlive());
        self::assertNull($lock->keepAliveError());
        self::assertTrue($other->createLock($key, 1.0)->tryAcquire(), 'released: free for others');
    }

    /** @dataProvider backends */
    public function testALossUnderneathIsDetectedAndNeverSilent(callable $backend): void
    {
        $backend = $backend();
        $client = Client::connect($backend->url);
        $key = Underneath::key('ka-lost');
        $lock = $client->createLock($key, 0.3);
        self::assertTrue($lock->tryAcquire());
        $lock->keepAlive(true);
        usleep(400_000);
        self::assertTrue($lock->isAcquired());
        $backend->deleteUnderneath($key);
        $deadline = microtime(true) + 20.0;
        while ($lock->isAcquired()) {
            self::assertLessThan($deadline, microtime(true), 'the renewal never noticed the loss');
            usleep(10_000);
        }
        self::assertLessThanOrEqual(0.0, $lock->remainingLifetime());
        $failure = $lock->keepAliveError();
        self::assertInstanceOf(LockLostException::class, $failure);
        self::assertSame(2, $failure->getCode());
        self::assertStringContainsString('lost', $failure->getMessage());
        try {
            $lock->release();
            self::fail('release() after a lost renewal must throw');
        } catch (LockLostException $e) {
            self::assertSame(2, $e->getCode());
        }
        self::assertInstanceOf(LockLostException::class, $lock->keepAliveError(), 'still readable after release');
        $stats = $client->stats();
        self::assertSame(1, $stats['keepalive_failures']);
        self::assertSame(1, $stats['extends_lost']);
        self::assertSame(1, $stats['releases_lost']);
        // Acquiring again starts afresh.
        self::assertTrue($lock->tryAcquire());
        self::assertNull($lock->keepAliveError());
        $lock->release();
    }

    /** @dataProvider backends */
    public function testSwitchedOffTheLeaseRunsOut(callable $backend): void
    {
        $backend = $backend();
        $client = Client::connect($backend->url);
        $key = Underneath::key('ka-off');
        $lock = $client->createLock($key, 0.3);
        self::assertTrue($lock->tryAcquire());
        $lock->keepAlive();
        usleep(500_000);
        self::assertTrue($lock->isAcquired());
        $lock->keepAlive(false);
        self::assertFalse($lock->keepsAlive());
        usleep(700_000);
        self::assertFalse($lock->isAcquired());
        $this->expectException(LockLostException::class);
        $lock->release();
    }

    /** @dataProvider backends */
    public function testAForkedChildTouchesNoRenewalButRenewsItsOwn(callable $backend): void
    {
        $result = Php::run(self::fixture('keepalive-fork.php'), [$backend()->url], [], 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true);
        self::assertIsArray($report, $result['stdout'] . $result['stderr']);
        foreach ($report as $check => $passed) {
            self::assertTrue($passed, "keep-alive fork check failed: $check\n" . $result['stdout'] . $result['stderr']);
        }
        self::assertCount(11, $report, $result['stdout']);
    }

    public function testKeepAliveOnALockNotHeldIsAnInvalidArgument(): void
    {
        $client = Client::connect(Backend::local()->url);
        $lock = $client->createLock(self::uniqueKey('ka-none'), 5.0);
        try {
            $lock->keepAlive();
            self::fail('keepAlive() on a lock not held must throw');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('does not hold it', $e->getMessage());
        }
        self::assertNull($lock->keepAliveError());
        self::assertTrue($lock->tryAcquire());
        $lock->release();
        $this->expectException(InvalidArgumentException::class);
        $lock->keepAlive(false);
    }
}
