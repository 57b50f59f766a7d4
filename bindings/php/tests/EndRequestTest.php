<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Laravel\LeaseholdStore;
use Leasehold\Testing\InMemoryClient;
use Leasehold\Tests\Support\Frameworks;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * ClientInterface::endRequest(), the call a long-running worker (RoadRunner, FrankenPHP worker mode, Octane, a queue
 * worker) makes after each request: what the request's locks still hold is released, kept-alive leases included; a
 * lease a framework adapter hands on (Laravel's lock(k, 0)) is detached and ends keepalive_ttl later; other clients'
 * leases are untouched. The same on the in-memory double.
 */
final class EndRequestTest extends LeaseholdTestCase
{
    private TempDir $dir;

    protected function setUp(): void
    {
        $this->dir = new TempDir('end-request');
    }

    public function testEndRequestReleasesWhatTheRequestStillHolds(): void
    {
        $url = 'file://' . $this->dir->file('locks');
        $client = Client::connect($url);
        $other = Client::connect($url);
        $kept = $client->createLock(self::uniqueKey('kept'), 1.0);
        self::assertTrue($kept->tryAcquire());
        $kept->keepAlive();
        $plain = $client->createLock(self::uniqueKey('plain'), 30.0);
        self::assertTrue($plain->tryAcquire());
        $elsewhere = $other->createLock(self::uniqueKey('other-client'), 30.0);
        self::assertTrue($elsewhere->tryAcquire());

        $client->endRequest();

        self::assertFalse($kept->isAcquired());
        self::assertFalse($plain->isAcquired());
        $kept->release(); // holds nothing now: does nothing, as in `finally`
        foreach ([$kept, $plain] as $lock) {
            $probe = $other->createLock($lock->key(), 1.0);
            self::assertTrue($probe->tryAcquire(), 'endRequest() released ' . $lock->key());
            $probe->release();
        }
        self::assertTrue($elsewhere->isAcquired(), "another client's lease is not this request's");
        self::assertHeldElsewhere($client, $elsewhere->key());
        $client->endRequest(); // nothing left: harmless
        // The locks work on in the next request.
        self::assertTrue($kept->tryAcquire());
        $kept->release();
    }

    public function testALaravelLockOfZeroSecondsEndsKeepaliveTtlAfterTheRequest(): void
    {
        Frameworks::laravel();
        $client = Client::connect('file://' . $this->dir->file('locks'));
        $store = new LeaseholdStore($client, keepAliveTtl: 1.0);
        $name = self::uniqueKey('unique-job');
        $lock = $store->lock($name, 0);
        self::assertTrue($lock->get());
        usleep(1_500_000);
        self::assertHeldElsewhere($client, $name, 'kept alive past its TTL while the request runs');

        $client->endRequest();

        self::assertHeldElsewhere($client, $name, 'handed on: not released at the end of the request');
        $probe = $client->createLock($name, 1.0);
        self::assertTrue($probe->acquire(1.0 + 1.5), 'no longer renewed: ends keepalive_ttl after the request');
        $probe->release();
    }

    public function testALaravelLockOfTheApplicationsOwnerCanBeReleasedInALaterRequest(): void
    {
        Frameworks::laravel();
        $client = Client::connect('file://' . $this->dir->file('locks'));
        $store = new LeaseholdStore($client);
        $name = self::uniqueKey('octane');
        self::assertTrue($store->lock($name, 30, 'my-owner')->get());

        $client->endRequest(); // an Octane request ends; the lock outlives it, by Laravel's rule

        self::assertHeldElsewhere($client, $name);
        self::assertTrue($store->lock($name, 30, 'my-owner')->release(), 'a later request of the worker releases it');
        $probe = $client->createLock($name, 1.0);
        self::assertTrue($probe->tryAcquire());
        $probe->release();
    }

    public function testASymfonyLockIsHandedOnNotReleased(): void
    {
        Frameworks::symfonyLock();
        $client = Client::connect('file://' . $this->dir->file('locks'));
        $factory = new \Symfony\Component\Lock\LockFactory(new \Leasehold\Symfony\LeaseholdStore($client));
        $name = self::uniqueKey('symfony');
        $lock = $factory->createLock($name, 30.0, autoRelease: false);
        self::assertTrue($lock->acquire());

        $client->endRequest();

        self::assertHeldElsewhere($client, $name, "Symfony's rule: a lock outlives its request until its TTL");
        $lock->release();
        $probe = $client->createLock($name, 1.0);
        self::assertTrue($probe->tryAcquire(), "and Symfony's own release still frees it");
        $probe->release();
    }

    public function testTheInMemoryDoubleEndsARequestTheSameWay(): void
    {
        Frameworks::laravel();
        $client = new InMemoryClient();
        $lock = $client->createLock('report', 10.0);
        self::assertTrue($lock->tryAcquire());
        $lock->keepAlive();
        $permit = $client->createSemaphore('pool', 2, 10.0)->tryAcquire();
        self::assertNotNull($permit);
        $handedOn = (new LeaseholdStore($client, keepAliveTtl: 5.0))->lock('unique-job', 0);
        self::assertTrue($handedOn->get());

        $client->endRequest();

        self::assertFalse($lock->isAcquired());
        self::assertFalse($client->isLocked('report'));
        self::assertNull($permit->token());
        self::assertTrue($client->isLocked('unique-job'), 'handed on: not released');
        $client->clock()->sleep(5.1);
        self::assertFalse($client->isLocked('unique-job'), 'no longer renewed: ends keepalive_ttl later');
    }
}
