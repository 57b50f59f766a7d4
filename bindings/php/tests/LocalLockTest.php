<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Tests\Support\BackendLockTestCase;
use Leasehold\Tests\Support\TempDir;

/** The whole PHP API against the local backend (file://) in a private temp dir. */
final class LocalLockTest extends BackendLockTestCase
{
    private static ?TempDir $dir = null;

    public static function setUpBeforeClass(): void
    {
        self::$dir = new TempDir('local');
    }

    public static function tearDownAfterClass(): void
    {
        self::$dir = null;
    }

    protected function url(): string
    {
        return 'file://' . self::$dir?->path;
    }

    public function testTheDirectoryIsCreatedWhenMissing(): void
    {
        $client = \Leasehold\Client::connect('file://' . self::$dir?->path . '/not/yet/there');
        $lock = $client->createLock(self::uniqueKey('mkdir'), 10.0);
        self::assertTrue($lock->tryAcquire());
        $lock->release();
        self::assertDirectoryExists(self::$dir?->path . '/not/yet/there');
    }
}
