<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\ClientInterface;
use Leasehold\Symfony\LeaseholdSemaphoreStore;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Symfony\Component\Semaphore\Exception\InvalidArgumentException;
use Symfony\Component\Semaphore\Exception\SemaphoreAcquiringException;
use Symfony\Component\Semaphore\Exception\SemaphoreExpiredException;
use Symfony\Component\Semaphore\Key;
use Symfony\Component\Semaphore\PersistingStoreInterface;
use Symfony\Component\Semaphore\SemaphoreFactory;

/**
 * Symfony Semaphore (Debian's php-symfony-semaphore) over LeaseholdSemaphoreStore. The first cases are Symfony
 * 5.4's own store contract, Tests/Store/AbstractStoreTest.php, case for case (Debian does not ship Symfony's
 * tests); then what Symfony's Semaphore needs beyond it (expiry, weight given back, the factory end to end).
 * Each concrete class names a client.
 */
abstract class SemaphoreStoreTestCase extends LeaseholdTestCase
{
    abstract protected function client(): ClientInterface;

    /** Lets the permits of a short TTL run out: real time, or the in-memory client's manual clock. */
    abstract protected function elapse(float $seconds): void;

    public static function setUpBeforeClass(): void
    {
        Frameworks::symfonySemaphore();
    }

    protected function getStore(): PersistingStoreInterface
    {
        return new LeaseholdSemaphoreStore($this->client());
    }

    // --- Symfony 5.4's AbstractStoreTest -------------------------------------------------------------------

    public function testSaveExistAndDelete(): void
    {
        $store = $this->getStore();
        $key = new Key(self::uniqueKey('sem'), 1);

        self::assertFalse($store->exists($key));
        $store->save($key, 10);
        self::assertTrue($store->exists($key));
        $store->delete($key);
        self::assertFalse($store->exists($key));
    }

    public function testSaveWithDifferentResources(): void
    {
        $store = $this->getStore();
        $key1 = new Key(self::uniqueKey('sem1'), 1);
        $key2 = new Key(self::uniqueKey('sem2'), 1);

        $store->save($key1, 10);
        self::assertTrue($store->exists($key1));
        self::assertFalse($store->exists($key2));

        $store->save($key2, 10);
        self::assertTrue($store->exists($key1));
        self::assertTrue($store->exists($key2));

        $store->delete($key1);
        self::assertFalse($store->exists($key1));
        self::assertTrue($store->exists($key2));

        $store->delete($key2);
        self::assertFalse($store->exists($key1));
        self::assertFalse($store->exists($key2));
    }

    public function testSaveWithDifferentKeysOnSameResource(): void
    {
        $store = $this->getStore();
        $resource = self::uniqueKey('sem');
        $key1 = new Key($resource, 1);
        $key2 = new Key($resource, 1);

        $store->save($key1, 10);
        self::assertTrue($store->exists($key1));
        self::assertFalse($store->exists($key2));

        try {
            $store->save($key2, 10);
            self::fail('The store shouldn\'t save the second key');
        } catch (SemaphoreAcquiringException) {
        }

        // The failure of previous attempt should not impact the state of current semaphores
        self::assertTrue($store->exists($key1));
        self::assertFalse($store->exists($key2));

        $store->delete($key1);
        self::assertFalse($store->exists($key1));
        self::assertFalse($store->exists($key2));

        $store->save($key2, 10);
        self::assertFalse($store->exists($key1));
        self::assertTrue($store->exists($key2));

        $store->delete($key2);
        self::assertFalse($store->exists($key1));
        self::assertFalse($store->exists($key2));
    }

    public function testSaveWithLimitAt2(): void
    {
        $this->limitCase(2, 1);
    }

    public function testSaveWithWeightAndLimitAt3(): void
    {
        // Symfony's name; its keys have a limit of 4 and a weight of 2.
        $this->limitCase(4, 2);
    }

    public function testPutOffExpiration(): void
    {
        $store = $this->getStore();
        $key = new Key(self::uniqueKey('sem'), 4, 2);
        $store->save($key, 20);

        $store->putOffExpiration($key, 20);

        self::assertTrue($store->exists($key));
        self::assertGreaterThan(19.0, $key->getRemainingLifetime());
        $store->delete($key);
    }

    public function testPutOffExpirationWhenSaveHasNotBeenCalled(): void
    {
        // This test simulate the key has expired since it does not exist
        $store = $this->getStore();
        $resource = self::uniqueKey('sem');
        $key1 = new Key($resource, 4, 2);

        // Symfony's RedisStore words it "the script returns a positive number"; the kind and resource are the contract.
        $this->expectException(SemaphoreExpiredException::class);
        $this->expectExceptionMessage(sprintf('The semaphore "%s" has expired: ', $resource));

        $store->putOffExpiration($key1, 20);
    }

    public function testSaveTwice(): void
    {
        $store = $this->getStore();
        $key = new Key(self::uniqueKey('sem'), 1);

        $store->save($key, 10);
        $store->save($key, 10);
        self::assertTrue($store->exists($key), 'saving again refreshes, it does not take a second permit');

        $store->delete($key);
        self::assertFalse($store->exists($key));
    }

    // --- beyond Symfony's cases --------------------------------------------------------------------------

    public function testExpiredKeysFreeTheirPermitsAndCannotBePutOff(): void
    {
        $store = $this->getStore();
        $resource = self::uniqueKey('sem-expiry');
        $old = new Key($resource, 2, 2);
        $store->save($old, 0.3);
        self::assertLessThanOrEqual(0.3, $old->getRemainingLifetime());
        $this->elapse(0.45);

        self::assertFalse($store->exists($old));
        $new = new Key($resource, 2, 2);
        $store->save($new, 10);
        self::assertTrue($store->exists($new), 'expired permits come back');
        try {
            $store->putOffExpiration($old, 10);
            self::fail('putting off an expired Key must throw');
        } catch (SemaphoreExpiredException) {
        }
        $store->delete($old); // holds nothing: silent, and the new Key keeps its permits
        self::assertTrue($store->exists($new));
        $store->delete($new);
    }

    public function testAWeightThatDoesNotFitGivesBackWhatItTookAndKeysDoNotCrossStores(): void
    {
        $store = $this->getStore();
        $other = $this->getStore();
        $resource = self::uniqueKey('sem-weight');
        $light = new Key($resource, 3, 1);
        $other->save($light, 10);
        self::assertFalse($store->exists($light), 'a Key is held by the store that saved it');

        $heavy = new Key($resource, 3, 3);
        try {
            $store->save($heavy, 10);
            self::fail('3 permits do not fit beside 1 of 3');
        } catch (SemaphoreAcquiringException) {
        }
        self::assertFalse($store->exists($heavy));
        // The 2 permits taken on the way were given back: a Key of weight 2 fits at once.
        $two = new Key($resource, 3, 2);
        $store->save($two, 10);
        self::assertTrue($store->exists($two));
        self::assertCount(2, $store->fences($two));
        self::assertSame([], $store->fences($heavy));

        $store->delete($two);
        $other->delete($light);
        $store->save($heavy, 10);
        self::assertTrue($store->exists($heavy), 'the whole weight fits once the semaphore is empty');
        $store->delete($heavy);
    }

    public function testSymfonySemaphoreEndToEnd(): void
    {
        $factory = new SemaphoreFactory($this->getStore());
        $resource = self::uniqueKey('sem-factory');
        $first = $factory->createSemaphore($resource, 2, 1, 10.0);
        $second = $factory->createSemaphore($resource, 2, 1, 10.0);
        $third = $factory->createSemaphore($resource, 2, 1, 10.0);

        self::assertTrue($first->acquire());
        self::assertTrue($second->acquire());
        self::assertFalse($third->acquire(), 'the limit is 2');
        self::assertTrue($first->isAcquired());
        self::assertGreaterThan(9.0, $first->getRemainingLifetime());
        $first->refresh(20.0);
        self::assertGreaterThan(19.0, $first->getRemainingLifetime());

        $first->release();
        self::assertFalse($first->isAcquired());
        self::assertTrue($third->acquire(), 'a released slot is free at once');
        unset($second); // autoRelease
        self::assertTrue($factory->createSemaphore($resource, 2, 1, 10.0)->acquire());
    }

    public function testBadTtlsAndLimitsAreSymfonysInvalidArgument(): void
    {
        $store = $this->getStore();
        foreach ([0.0, -1.0, NAN, 1e9] as $ttl) {
            try {
                $store->save(new Key(self::uniqueKey('sem-bad'), 1), $ttl);
                self::fail("a TTL of $ttl must be refused");
            } catch (InvalidArgumentException) {
                $this->addToAssertionCount(1);
            }
        }
        try {
            $store->save(new Key(self::uniqueKey('sem-bad'), 70000), 10);
            self::fail('Leasehold semaphores have at most 65535 permits');
        } catch (InvalidArgumentException) {
            $this->addToAssertionCount(1);
        }
    }

    private function limitCase(int $limit, int $weight): void
    {
        $store = $this->getStore();
        $resource = self::uniqueKey('sem-limit');
        $key1 = new Key($resource, $limit, $weight);
        $key2 = new Key($resource, $limit, $weight);
        $key3 = new Key($resource, $limit, $weight);

        $store->save($key1, 10);
        self::assertTrue($store->exists($key1));
        self::assertFalse($store->exists($key2));
        self::assertFalse($store->exists($key3));

        $store->save($key2, 10);
        self::assertTrue($store->exists($key1));
        self::assertTrue($store->exists($key2));
        self::assertFalse($store->exists($key3));

        try {
            $store->save($key3, 10);
            self::fail('The store shouldn\'t save the third key');
        } catch (SemaphoreAcquiringException) {
        }

        // The failure of previous attempt should not impact the state of current semaphores
        self::assertTrue($store->exists($key1));
        self::assertTrue($store->exists($key2));
        self::assertFalse($store->exists($key3));

        $store->delete($key1);
        self::assertFalse($store->exists($key1));
        self::assertTrue($store->exists($key2));
        self::assertFalse($store->exists($key3));

        $store->save($key3, 10);
        self::assertFalse($store->exists($key1));
        self::assertTrue($store->exists($key2));
        self::assertTrue($store->exists($key3));

        $store->delete($key2);
        $store->delete($key3);
    }
}
