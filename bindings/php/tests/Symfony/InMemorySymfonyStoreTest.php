<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Symfony\LeaseholdStore;
use Leasehold\Testing\InMemoryClient;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\LockFactory;

/** Symfony's LockFactory over the store on the in-memory client: how a Symfony application unit-tests its locking. */
final class InMemorySymfonyStoreTest extends LeaseholdTestCase
{
    public static function setUpBeforeClass(): void
    {
        Frameworks::symfonyLock();
    }

    public function testSymfonyLocksOnTheInMemoryClientFollowItsClock(): void
    {
        $client = new InMemoryClient();
        $store = new LeaseholdStore($client, initialTtl: 300.0, maxWait: 10.0);
        $factory = new LockFactory($store);

        $lock = $factory->createLock('invoice:42', 30.0);
        self::assertTrue($lock->acquire());
        self::assertTrue($client->isLocked('invoice:42'));
        self::assertFalse($factory->createLock('invoice:42', 30.0)->acquire(), 'held by the first lock');
        // Symfony's Key measures its own lifetime in real time; the lease is the client's, on its manual clock.
        $client->clock()->sleep(31.0);
        self::assertFalse($client->isLocked('invoice:42'));
        $other = $factory->createLock('invoice:42', 30.0);
        self::assertTrue($other->acquire(), 'free once the 30 s ran out on the manual clock');
        $other->release();

        $reader = $factory->createLock('doc', 30.0);
        self::assertTrue($reader->acquireRead());
        self::assertTrue($factory->createLock('doc', 30.0)->acquireRead(), 'readers share');
        try {
            $factory->createLock('doc', 30.0)->acquire(true);
            self::fail('a writer waits at most maxWait behind the readers');
        } catch (LockConflictedException) {
            self::assertSame(10.0, $client->clock()->now() - 31.0, 'the wait ran on the manual clock');
        }
    }
}
