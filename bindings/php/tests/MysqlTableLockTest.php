<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\BackendLockTestCase;
use Leasehold\Tests\Support\MariaDbServer;

/** The whole PHP API against MySQL table mode, on a MariaDB the suite starts on a free loopback port. */
final class MysqlTableLockTest extends BackendLockTestCase
{
    protected function url(): string
    {
        return Backend::mysql('table')->url;
    }

    public function testALeaseSurvivesItsClientAndARowDeletedUnderneathIsLost(): void
    {
        $key = self::uniqueKey('my-underneath');
        $lock = $this->client()->createLock($key, 10.0);
        self::assertTrue($lock->tryAcquire());
        // A table lease keeps no session: a new client (new connections) sees it held.
        self::assertFalse(Client::connect($this->url())->createLock($key, 10.0)->tryAcquire());
        MariaDbServer::shared()->deleteLock($key);
        $this->expectException(\Leasehold\Exception\LockLostException::class);
        $lock->extend(10.0);
    }

    public function testAWrongPasswordIsRefusedWithoutShowingIt(): void
    {
        $secret = 'hunter2-' . bin2hex(random_bytes(6));
        $url = 'mysql://' . MariaDbServer::USER . ':' . $secret . '@127.0.0.1:' . MariaDbServer::shared()->port . '/'
            . MariaDbServer::DATABASE . '?lock=table&connect_timeout_ms=2000&io_timeout_ms=2000';
        try {
            Client::connect($url)->createLock(self::uniqueKey('my-secret'), 10.0)->tryAcquire();
            self::fail('a wrong password must be refused');
        } catch (LeaseholdException $e) {
            self::assertStringNotContainsString($secret, $e->getMessage());
            self::assertStringNotContainsString(MariaDbServer::PASSWORD, $e->getMessage());
        }
    }
}
