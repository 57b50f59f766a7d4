<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Client;
use Leasehold\Symfony\LeaseholdStore;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\Underneath;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;

/**
 * Symfony Lock (Debian's php-symfony-lock) over LeaseholdStore: Symfony's own Lock and LockFactory end to end,
 * and each behaviour Symfony's Lock expects of a store. Each concrete class names a backend.
 */
abstract class SymfonyStoreTestCase extends LeaseholdTestCase
{
    protected Backend $backend;

    abstract protected function backend(): Backend;

    public static function setUpBeforeClass(): void
    {
        Frameworks::symfonyLock();
    }

    protected function setUp(): void
    {
        $this->backend = $this->backend();
    }

    private function store(float $initialTtl = 300.0, float $maxWait = 300.0): LeaseholdStore
    {
        return new LeaseholdStore(Client::connect($this->backend->url), $initialTtl, $maxWait);
    }

    public function testLockFactoryAcquireRefreshRelease(): void
    {
        $factory = new LockFactory($this->store());
        $rival = new LockFactory($this->store());
        $resource = self::uniqueKey('sf-cycle');

        $lock = $factory->createLock($resource, 10.0);
        self::assertTrue($lock->acquire());
        self::assertTrue($lock->isAcquired());
        self::assertFalse($lock->isExpired());
        self::assertGreaterThan(9.0, $lock->getRemainingLifetime());
        self::assertLessThanOrEqual(10.0, $lock->getRemainingLifetime());
        self::assertFalse($rival->createLock($resource, 10.0)->acquire(), 'another Lock on the resource is refused');

        $lock->refresh(20.0);
        self::assertGreaterThan(19.0, $lock->getRemainingLifetime());
        self::assertTrue($lock->isAcquired());

        $lock->release();
        self::assertFalse($lock->isAcquired());
        $next = $rival->createLock($resource, 10.0);
        self::assertTrue($next->acquire(), 'the resource is free after release()');
        $next->release();
    }

    public function testBlockingAcquireOfAFreeResourceAndAcquiringTwice(): void
    {
        $factory = new LockFactory($this->store());
        $lock = $factory->createLock(self::uniqueKey('sf-blocking'), 10.0);
        self::assertTrue($lock->acquire(true));
        self::assertTrue($lock->acquire(), 'acquiring a Lock it holds again succeeds (a refresh)');
        self::assertTrue($lock->acquire(true));
        self::assertTrue($lock->isAcquired());
        $lock->release();
        self::assertFalse($lock->isAcquired());
    }

    public function testExpiryIsSeenByIsExpiredAndTheResourceIsFreed(): void
    {
        $factory = new LockFactory($this->store());
        $resource = self::uniqueKey('sf-expiry');
        $lock = $factory->createLock($resource, 0.3);
        self::assertTrue($lock->acquire());
        usleep(450_000);
        self::assertTrue($lock->isExpired());
        self::assertFalse($lock->isAcquired());
        $other = $factory->createLock($resource, 5.0);
        self::assertTrue($other->acquire(), 'an expired lease frees the resource');
        try {
            $lock->refresh();
            self::fail('refreshing a lost lease must throw');
        } catch (LockConflictedException) {
            // What Symfony's stores throw.
        }
        $lock->release(); // not ours: silent, and the new holder keeps it
        self::assertTrue($other->isAcquired());
        $other->release();
    }

    public function testAutoReleaseOnDestructionAndNotWithoutIt(): void
    {
        $store = $this->store();
        $factory = new LockFactory($store);
        $probe = Client::connect($this->backend->url);

        $released = self::uniqueKey('sf-autorelease');
        $lock = $factory->createLock($released, 30.0);
        self::assertTrue($lock->acquire());
        unset($lock);
        self::assertTrue($probe->createLock($released, 1.0)->tryAcquire(), 'autoRelease frees the resource');

        $kept = self::uniqueKey('sf-kept');
        $lock = $factory->createLock($kept, 30.0, false);
        self::assertTrue($lock->acquire());
        unset($lock, $factory, $store);
        self::assertHeldElsewhere($probe, $kept, 'without autoRelease the lease stays until its TTL, like RedisStore');
        $probe->forceRelease($kept);
    }

    public function testSaveReducesTheLifetimeAndTwiceIsARefresh(): void
    {
        $store = $this->store(20.0);
        $key = new Key(self::uniqueKey('sf-save'));
        self::assertNull($store->fence($key));
        $store->save($key);
        $remaining = $key->getRemainingLifetime();
        self::assertNotNull($remaining);
        self::assertGreaterThan(19.0, $remaining);
        self::assertLessThanOrEqual(20.0, $remaining);
        self::assertTrue($store->exists($key));
        $fence = $store->fence($key);
        self::assertIsInt($fence);

        $store->save($key);
        self::assertTrue($store->exists($key), 'saving the same Key twice succeeds');
        self::assertSame($fence, $store->fence($key), 'and keeps its lease');

        $rival = new Key((string) $key);
        try {
            $this->store()->save($rival);
            self::fail('another Key on the same resource must conflict');
        } catch (LockConflictedException) {
        }
        try {
            $store->save($rival);
            self::fail('another Key on the same resource must conflict, through the same store too');
        } catch (LockConflictedException) {
        }
        self::assertFalse($store->exists($rival), 'exists() checks the Key\'s own token');
        self::assertFalse($store->exists(new Key((string) $key)));
        self::assertTrue($store->exists($key));

        $store->delete($rival); // holds nothing: silent, and the holder keeps the lock
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertFalse($store->exists($key));
        $store->delete($key); // twice: silent
        $store->delete(new Key(self::uniqueKey('sf-never'))); // never saved: silent

        $again = new Key((string) $key);
        $store->save($again);
        self::assertGreaterThan($fence, $store->fence($again), 'fences increase with each acquisition');
        $store->delete($again);
    }

    public function testALeaseThatEndsDuringSaveIsAnExpiredLockAndFreed(): void
    {
        $store = $this->store(0.001);
        $key = new Key(self::uniqueKey('sf-expired'));
        try {
            $store->save($key);
            self::fail('a 1 ms lease is over when save() returns');
        } catch (LockExpiredException) {
        }
        self::assertFalse($store->exists($key));
        $this->store()->save(new Key((string) $key)); // ExpiringStoreTrait deleted it
    }

    public function testPutOffExpirationOfALostOrUnsavedLeaseConflicts(): void
    {
        $store = $this->store(10.0);
        $key = new Key(Underneath::key('sf-putoff'));
        try {
            $store->putOffExpiration($key, 5.0);
            self::fail('putting off a Key never saved must conflict');
        } catch (LockConflictedException) {
        }
        $store->save($key);
        $key->resetLifetime();
        $store->putOffExpiration($key, 30.0);
        self::assertGreaterThan(29.0, $key->getRemainingLifetime());
        self::assertLessThanOrEqual(30.0, $key->getRemainingLifetime());

        $this->backend->deleteUnderneath((string) $key);
        self::assertFalse($store->exists($key), 'exists() asks the backend');
        try {
            $store->putOffExpiration($key, 30.0);
            self::fail('putting off a lost lease must conflict');
        } catch (LockConflictedException) {
        }
        self::assertFalse($store->exists($key));
    }

    public function testWaitAndSaveIsBoundedByMaxWait(): void
    {
        $holder = $this->store();
        $key = new Key(self::uniqueKey('sf-maxwait'));
        $holder->save($key);
        $waiter = $this->store(300.0, 0.3);
        $elapsed = self::seconds(function () use ($waiter, $key): void {
            try {
                $waiter->waitAndSave(new Key((string) $key));
                self::fail('waitAndSave must give up after maxWait');
            } catch (LockConflictedException $e) {
                self::assertStringContainsString('maxWait', $e->getMessage());
            }
        });
        self::assertGreaterThanOrEqual(0.29, $elapsed);
        self::assertLessThan(2.0, $elapsed);
        $holder->delete($key);
    }

    public function testSharedLocksReadTogetherAndKeepWritersOut(): void
    {
        $resource = self::uniqueKey('sf-read');
        $readers = [new LockFactory($this->store()), new LockFactory($this->store())];
        $r1 = $readers[0]->createLock($resource, 10.0);
        $r2 = $readers[1]->createLock($resource, 10.0);
        self::assertTrue($r1->acquireRead());
        self::assertTrue($r2->acquireRead(), 'two readers at once');
        self::assertTrue($r1->isAcquired());
        $store = $this->store();
        $writerKey = new Key($resource);
        try {
            $store->save($writerKey);
            self::fail('a writer must wait for the readers');
        } catch (LockConflictedException) {
            self::assertFalse($store->exists($writerKey));
        }
        $r1->refresh(20.0);
        self::assertGreaterThan(15.0, $r1->getRemainingLifetime());
        $r1->release();
        $r2->release();
        $store->save($writerKey);
        self::assertTrue($store->exists($writerKey));
        $reader = new Key($resource);
        try {
            $this->store()->saveRead($reader);
            self::fail('a reader must wait for the writer');
        } catch (LockConflictedException) {
            self::assertTrue(true);
        }
        $store->delete($writerKey);
    }

    public function testWaitAndSaveReadWakesWhenTheWriterLeavesAndThenPromotes(): void
    {
        $resource = self::uniqueKey('sf-read-wait');
        $writer = $this->store();
        $held = new Key($resource);
        $writer->save($held);
        $waiter = $this->store(300.0, 0.3);
        $elapsed = self::seconds(function () use ($waiter, $resource): void {
            try {
                $waiter->waitAndSaveRead(new Key($resource));
                self::fail('the wait must end at maxWait');
            } catch (LockConflictedException $e) {
                self::assertStringContainsString('maxWait', $e->getMessage());
            }
        });
        self::assertLessThan(2.0, $elapsed);
        $writer->delete($held);
        $read = new Key($resource);
        $waiter->waitAndSaveRead($read);
        self::assertTrue($waiter->exists($read));
        self::assertIsInt($waiter->fence($read));
        $readFence = $waiter->fence($read);
        $waiter->save($read);
        self::assertTrue($waiter->exists($read), 'the only reader is promoted');
        self::assertGreaterThan($readFence, $waiter->fence($read), 'with a new fence');
        try {
            $this->store()->saveRead(new Key($resource));
            self::fail('a reader must wait for the promoted writer');
        } catch (LockConflictedException) {
            self::assertTrue($waiter->exists($read));
        }
        $waiter->delete($read);
        self::assertFalse($waiter->exists($read));
    }

    /** Symfony 5.4's SharedLockStoreTestTrait::testSharedLockPromote, case for case. */
    public function testSharedLockPromote(): void
    {
        $store = $this->store();
        $resource = self::uniqueKey('sf-promote');
        $key1 = new Key($resource);
        $key2 = new Key($resource);
        $store->saveRead($key1);
        $store->saveRead($key2);
        try {
            $store->save($key1);
            self::fail('the Symfony contract says a shared lock with other readers cannot be promoted');
        } catch (LockConflictedException) {
            self::assertTrue($store->exists($key1), 'a refused promotion keeps the read lease');
        }
        $store->delete($key2);
        $store->save($key1);
        self::assertTrue($store->exists($key1), 'promoted once the other reader left');
        $store->delete($key1);
    }

    /** Symfony 5.4's SharedLockStoreTestTrait::testSharedLockPromoteAllowed. */
    public function testSharedLockPromoteAllowed(): void
    {
        $store = $this->store();
        $resource = self::uniqueKey('sf-promote-allowed');
        $key1 = new Key($resource);
        $key2 = new Key($resource);
        $store->saveRead($key1);
        $store->save($key1);
        try {
            $store->saveRead($key2);
            self::fail('the Symfony contract says a promoted lock refuses readers');
        } catch (LockConflictedException) {
            self::assertTrue(true);
        }
        self::assertTrue($store->exists($key1));
        self::assertFalse($store->exists($key2));
        $store->delete($key1);
    }

    /** Symfony 5.4's SharedLockStoreTestTrait::testSharedLockDemote. */
    public function testSharedLockDemote(): void
    {
        $store = $this->store();
        $resource = self::uniqueKey('sf-demote');
        $key1 = new Key($resource);
        $key2 = new Key($resource);
        $store->save($key1);
        $store->saveRead($key1);
        $store->saveRead($key2);
        self::assertTrue($store->exists($key1));
        self::assertTrue($store->exists($key2));
        $store->delete($key1);
        $store->delete($key2);
    }

    /** Symfony's Lock end to end: acquireRead(), then acquire() waits for the other reader, then promotes. */
    public function testALockReadThenAcquiredIsPromotedWhenTheOtherReaderLeaves(): void
    {
        $factory = new LockFactory($this->store(300.0, 5.0));
        $rival = new LockFactory($this->store());
        $resource = self::uniqueKey('sf-lock-promote');
        $lock = $factory->createLock($resource, 10.0);
        $other = $rival->createLock($resource, 10.0);
        self::assertTrue($lock->acquireRead());
        self::assertTrue($other->acquireRead());
        self::assertFalse($lock->acquire(), 'not while another reader holds it');
        self::assertTrue($lock->isAcquired(), 'still reading');
        $other->release();
        self::assertTrue($lock->acquire(true));
        self::assertFalse($rival->createLock($resource, 10.0)->acquireRead(), 'a writer now');
        $lock->acquireRead();
        self::assertTrue($rival->createLock($resource, 10.0)->acquireRead(), 'demoted: readers join');
        $lock->release();
    }

    public function testAForkedProcessBlocksInWaitAndSaveUntilTheOtherReleases(): void
    {
        $result = Php::run(self::fixture('symfony-fork-wait.php'), [$this->backend->url], [], 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true, 8, JSON_THROW_ON_ERROR);
        self::assertFalse($report['child_sees_parent_lock_as_its_own'], $result['stdout']);
        self::assertFalse($report['child_try_while_held'], $result['stdout']);
        self::assertTrue($report['child_acquired'], $result['stdout']);
        self::assertTrue($report['parent_still_held_after_child_exit_of_inherited_lock'], $result['stdout']);
        self::assertGreaterThanOrEqual($report['released_at'], $report['acquired_at'] + 0.002, $result['stdout']);
        self::assertLessThan(0.5, $report['acquired_at'] - $report['released_at'], 'woken by the release');
        self::assertGreaterThan(0.4, $report['child_waited'], 'it waited for the release');
    }

    public function testASerializedKeyIsRestoredInAnotherProcess(): void
    {
        $store = $this->store();
        $factory = new LockFactory($store);
        $key = new Key(self::uniqueKey('sf-serialized'));
        $lock = $factory->createLockFromKey($key, 30.0, false);
        self::assertTrue($lock->acquire());
        $fence = $store->fence($key);

        $result = Php::run(self::fixture('symfony-restore.php'), [$this->backend->url, base64_encode(serialize($key))],
            [], 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        $report = json_decode($result['stdout'], true, 8, JSON_THROW_ON_ERROR);
        self::assertTrue($report['acquired'], $result['stdout']);
        self::assertSame($fence, $report['fence'], 'the restored lease has the same fence');
        self::assertGreaterThan(59.0, $report['remaining_after_refresh']);
        self::assertTrue($report['released'], $result['stdout']);

        self::assertFalse($lock->isAcquired(), 'released by the other process');
        $next = $factory->createLock((string) $key, 5.0);
        self::assertTrue($next->acquire());
        self::assertGreaterThan($fence, $store->fence(self::keyOf($next)) ?? PHP_INT_MAX);
        $next->release();
    }

    private static function keyOf(\Symfony\Component\Lock\Lock $lock): Key
    {
        return (fn (): Key => $this->key)->call($lock);
    }
}
