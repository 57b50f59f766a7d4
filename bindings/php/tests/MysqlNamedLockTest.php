<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\BackendLockTestCase;

/**
 * The whole PHP API against MySQL named mode (`GET_LOCK`). A named lock is exclusive and belongs to the session that
 * took it, so the backend refuses shared locks and restore, pointing at `lock=table`: the contract's tests of those
 * are replaced by tests of the refusal; every other contract test runs unchanged.
 */
final class MysqlNamedLockTest extends BackendLockTestCase
{
    protected function url(): string
    {
        return Backend::mysql('named')->url;
    }

    public function testSharedLocksCoexistAndExcludeWriters(): void
    {
        $client = $this->client();
        $key = self::uniqueKey('my-shared');
        $reader = $client->createSharedLock($key, 10.0);
        foreach (['tryAcquire', 'acquire'] as $call) {
            try {
                $call === 'tryAcquire' ? $reader->tryAcquire() : $reader->acquire(0.1);
                self::fail("a shared lock in named mode must be refused ($call)");
            } catch (InvalidArgumentException $e) {
                self::assertStringContainsString('lock=table', $e->getMessage());
            }
            self::assertFalse($reader->isAcquired());
        }
        $writer = $client->createLock($key, 10.0);
        self::assertTrue($writer->tryAcquire(), 'a refused reader left nothing behind');
        $writer->release();
    }

    public function testPromoteAndDemoteKeepTheToken(): void
    {
        // Named mode has no shared leases to promote; an exclusive one cannot be demoted to what it lacks.
        $lock = $this->client()->createLock(self::uniqueKey('my-demote'), 10.0);
        self::assertTrue($lock->tryAcquire());
        try {
            $lock->demote();
            self::fail('demote in named mode must be refused');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('cannot demote', $e->getMessage());
        }
        self::assertTrue($lock->isAcquired(), 'a refused demote keeps the lease');
        $lock->release();
    }

    public function testRestoreLockPicksUpALeaseByToken(): void
    {
        $client = $this->client();
        $key = self::uniqueKey('my-restore');
        $original = $client->createLock($key, 10.0);
        self::assertTrue($original->tryAcquire());
        try {
            $this->client()->restoreLock($key, (string) $original->token());
            self::fail('restore in named mode must be refused');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('lock=table', $e->getMessage());
        }
        self::assertHeldElsewhere($client, $key, 'the refused restore left the holder alone');
        $original->extend(10.0);
        $original->release();
    }

    public function testRestoreLockRefusesBadAndStaleTokens(): void
    {
        $client = $this->client();
        $key = self::uniqueKey('my-restore-bad');
        foreach (['', 'xyz', str_repeat('A', 32), str_repeat('0', 31), str_repeat('0', 32)] as $bad) {
            try {
                $client->restoreLock($key, $bad);
                self::fail("token '$bad' must be refused");
            } catch (InvalidArgumentException) {
                self::assertTrue(true);
            }
        }
    }

    /** Force-release ends the holder's session: the key is free at once and the holder finds its lease lost. */
    public function testForceReleaseFreesAnyHolderAndDetachKeepsTheKey(): void
    {
        $client = $this->client();
        $key = self::uniqueKey('my-force');
        $stuck = $client->createLock($key, 10.0);
        self::assertTrue($stuck->tryAcquire());
        $client->forceRelease($key);
        $next = $client->createLock($key, 10.0);
        self::assertTrue($next->tryAcquire());
        self::assertGreaterThan($stuck->fence(), $next->fence());
        $client->forceRelease($key);
        $client->forceRelease($key); // free: nothing to do
        self::assertTrue($client->createLock($key, 10.0)->tryAcquire());
        try {
            $next->extend(10.0);
            self::fail('a force-released lease must be lost');
        } catch (LockLostException) {
        }
        $this->expectException(LockLostException::class);
        $stuck->release();
    }
}
