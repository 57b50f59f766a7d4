<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\LockLostException;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\RedisServer;
use Leasehold\Tests\Support\TestLogger;
use Leasehold\Tests\Support\Underneath;

/** PSR-3 events from Client::connect(logger: …): one test per event kind, and never a password. */
final class EventsTest extends LeaseholdTestCase
{
    public function testThePsrLogInterfaceIsInstalled(): void
    {
        self::assertTrue(interface_exists(\Psr\Log\LoggerInterface::class),
            'the logger tests need Debian\'s php-psr-log (/usr/share/php/Psr/Log); the package itself does not');
    }

    public function testAcquiredAndReleasedAreDebugEvents(): void
    {
        $logger = new TestLogger();
        $client = Client::connect(Backend::local()->url, logger: $logger);
        $lock = $client->createLock(Underneath::key('ev-cycle'), 30.0);
        self::assertTrue($lock->tryAcquire());
        $fence = $lock->fence();
        self::assertFalse($client->createLock($lock->key(), 30.0)->tryAcquire()); // contention: no event
        $lock->release();

        [$acquired] = $logger->of('acquired');
        self::assertSame('debug', $acquired['level']);
        self::assertSame($fence, $acquired['context']['fence']);
        self::assertSame('"' . $lock->key() . '"', $acquired['context']['key']);
        self::assertIsFloat($acquired['context']['waited']);
        [$released] = $logger->of('released');
        self::assertSame('debug', $released['level']);
        self::assertSame($fence, $released['context']['fence']);
        self::assertCount(2, $logger->records, $logger->dump());
    }

    public function testALossIsAWarning(): void
    {
        $backend = Backend::local();
        $logger = new TestLogger();
        $client = Client::connect($backend->url, logger: $logger);
        $lock = $client->createLock(Underneath::key('ev-lost'), 30.0);
        self::assertTrue($lock->tryAcquire());
        $backend->deleteUnderneath($lock->key());
        $this->assertThrowsLost(static fn () => $lock->release());

        [$lost] = $logger->of('lost');
        self::assertSame('warning', $lost['level']);
        self::assertSame('release', $lost['context']['during']);
        self::assertStringContainsString('lost', $lost['context']['error']);
        self::assertSame([], $logger->of('expired_while_held'));
    }

    public function testALeaseFoundLostAfterItsLifetimeRanOutExpiredWhileHeld(): void
    {
        $logger = new TestLogger();
        $client = Client::connect(Backend::local()->url, logger: $logger);
        $lock = $client->createLock(Underneath::key('ev-expired'), 0.05);
        self::assertTrue($lock->tryAcquire());
        usleep(300_000); // the "work" outlived the TTL
        $this->assertThrowsLost(static fn () => $lock->extend(1.0));

        [$expired] = $logger->of('expired_while_held');
        self::assertSame('warning', $expired['level']);
        self::assertSame('extend', $expired['context']['during']);
        self::assertSame([], $logger->of('lost'));
    }

    public function testAKeepAliveLossIsOneWarning(): void
    {
        $backend = Backend::local();
        $logger = new TestLogger();
        $client = Client::connect($backend->url, logger: $logger);
        $lock = $client->createLock(Underneath::key('ev-keep'), 0.3);
        self::assertTrue($lock->tryAcquire());
        $lock->keepAlive();
        $backend->deleteUnderneath($lock->key());
        $deadline = microtime(true) + 20.0;
        while ($lock->isAcquired() && microtime(true) < $deadline) {
            usleep(10_000);
        }
        self::assertInstanceOf(LockLostException::class, $lock->keepAliveError());
        $this->assertThrowsLost(static fn () => $lock->release());

        self::assertCount(1, $logger->of('lost'), $logger->dump());
        self::assertSame('keep-alive', $logger->of('lost')[0]['context']['during']);
        self::assertSame([], $logger->of('expired_while_held'));
    }

    public function testABackendErrorIsAnErrorWithoutThePassword(): void
    {
        $logger = new TestLogger();
        $port = Ports::free(); // nothing listens there
        $url = "redis://:s3cr3t-pa55@127.0.0.1:$port?connect_timeout_ms=200&io_timeout_ms=200";
        try {
            $client = Client::connect($url, logger: $logger);
            $client->createLock(self::uniqueKey('ev-down'), 5.0)->tryAcquire();
            self::fail('a closed port must be unavailable');
        } catch (BackendUnavailableException $e) {
            self::assertStringNotContainsString('s3cr3t-pa55', $e->getMessage());
        }
        [$error] = $logger->of('backend_error');
        self::assertSame('error', $error['level']);
        self::assertSame(3, $error['context']['status']);
        self::assertContains($error['context']['during'], ['connect', 'acquire']);
        self::assertStringNotContainsString('s3cr3t-pa55', $logger->dump());
        self::assertStringNotContainsString($url, $logger->dump());
    }

    public function testRetriesInsideAWaitAreDebugEvents(): void
    {
        // Redlock counts its extra rounds as retries: hold the key, then wait for it a little.
        $servers = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
        $url = 'redlock://' . implode(',', array_map(static fn (RedisServer $s): string => '127.0.0.1:' . $s->port,
            $servers)) . '?connect_timeout_ms=2000&io_timeout_ms=2000';
        $key = self::uniqueKey('ev-retry');
        $holder = Client::connect($url)->createLock($key, 30.0);
        self::assertTrue($holder->tryAcquire());
        $logger = new TestLogger();
        $client = Client::connect($url, logger: $logger);
        self::assertFalse($client->createLock($key, 30.0)->acquire(0.5));
        $retries = $client->stats()['retries'];
        self::assertGreaterThan(0, $retries);

        [$retry] = $logger->of('retry');
        self::assertSame('debug', $retry['level']);
        self::assertSame($retries, $retry['context']['retries']);
        $holder->release();
    }

    public function testThePackageWorksWithoutPsrLog(): void
    {
        // A fresh PHP without the PSR-3 interface loaded: no logger, no need for it.
        $script = <<<'PHP'
            <?php
            require $argv[1];
            if (interface_exists('Psr\Log\LoggerInterface')) { echo "psr/log is loaded\n"; exit(2); }
            $client = Leasehold\Client::connect($argv[2], persistent: (bool) $argv[3]);
            $lock = $client->createLock('no-psr', 5.0);
            if (!$lock->tryAcquire()) { exit(3); }
            $lock->keepAlive();
            $lock->release();
            echo $client->stats()['releases_ok'], "\n";
            PHP;
        $file = tempnam(sys_get_temp_dir(), 'no-psr');
        file_put_contents($file, $script);
        try {
            foreach (['0', '1'] as $persistent) {
                $result = Php::run($file, [dirname(__DIR__) . '/autoload.php', Backend::local()->url, $persistent]);
                self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
                self::assertSame("1\n", $result['stdout'], $result['stderr']);
            }
        } finally {
            unlink($file);
        }
    }

    private function assertThrowsLost(callable $action): void
    {
        try {
            $action();
            self::fail('expected LockLostException');
        } catch (LeaseholdException $e) {
            self::assertInstanceOf(LockLostException::class, $e);
        }
    }
}
