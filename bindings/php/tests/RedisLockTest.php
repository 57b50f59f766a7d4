<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Tests\Support\BackendLockTestCase;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\RedisServer;

/** The whole PHP API against a real redis-server the suite starts on a free loopback port. */
final class RedisLockTest extends BackendLockTestCase
{
    protected function url(): string
    {
        return RedisServer::shared()->url(['connect_timeout_ms' => 2000, 'io_timeout_ms' => 2000]);
    }

    public function testAClosedPortIsUnavailableWithinTheTimeouts(): void
    {
        $port = Ports::free(); // free means closed: nothing listens there
        $url = "redis://127.0.0.1:$port?connect_timeout_ms=200&io_timeout_ms=200";
        $took = self::seconds(function () use ($url): void {
            try {
                $lock = Client::connect($url)->createLock(self::uniqueKey('closed'), 10.0);
                $lock->tryAcquire();
                self::fail('a closed port must give BackendUnavailableException');
            } catch (BackendUnavailableException $e) {
                self::assertSame(3, $e->getCode());
                self::assertInstanceOf(LeaseholdException::class, $e);
                self::assertNotSame('', $e->getMessage());
            }
        });
        self::assertLessThan(3.0, $took, 'connect_timeout 200 ms + io_timeout 200 ms, plus slack');
    }

    public function testAHostThatNeverAcceptsIsUnavailableWithinTheConnectTimeout(): void
    {
        // A listener whose accept queue is full: the kernel drops further SYNs, so connecting hangs like it does
        // to a host that does not answer, until the connect timeout.
        $context = stream_context_create(['socket' => ['backlog' => 0]]);
        $listener = stream_socket_server('tcp://127.0.0.1:0', $errno, $error,
            STREAM_SERVER_BIND | STREAM_SERVER_LISTEN, $context);
        self::assertNotFalse($listener, (string) $error);
        $name = (string) stream_socket_get_name($listener, false);
        $port = (int) substr($name, strrpos($name, ':') + 1);
        $fillers = [];
        for ($i = 0; $i < 4; $i++) {
            $filler = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $error, 0.2);
            if ($filler !== false) {
                $fillers[] = $filler;
            }
        }
        self::assertNotEmpty($fillers);

        $url = "redis://127.0.0.1:$port?connect_timeout_ms=300&io_timeout_ms=300";
        $took = self::seconds(function () use ($url): void {
            try {
                Client::connect($url)->createLock(self::uniqueKey('silent'), 10.0)->tryAcquire();
                self::fail('a host that does not answer must give BackendUnavailableException');
            } catch (BackendUnavailableException $e) {
                self::assertStringContainsString('127.0.0.1', $e->getMessage());
            }
        });
        self::assertGreaterThanOrEqual(0.25, $took, 'it waited for the connect timeout');
        self::assertLessThan(3.0, $took, 'connect_timeout 300 ms + io_timeout 300 ms, plus slack');
    }

    public function testAStoppedServerIsUnavailableWithinTheTimeouts(): void
    {
        $server = RedisServer::start();
        $client = Client::connect($server->url(['connect_timeout_ms' => 300, 'io_timeout_ms' => 300]));
        $held = $client->createLock(self::uniqueKey('paused'), 30.0);
        self::assertTrue($held->tryAcquire());
        $server->pause();
        try {
            foreach (['tryAcquire', 'acquire', 'extend', 'release'] as $operation) {
                $took = self::seconds(function () use ($client, $held, $operation): void {
                    try {
                        match ($operation) {
                            'tryAcquire' => $client->createLock(self::uniqueKey('p'), 10.0)->tryAcquire(),
                            'acquire' => $client->createLock(self::uniqueKey('p'), 10.0)->acquire(0.5),
                            'extend' => $held->extend(30.0),
                            'release' => $held->release(),
                        };
                        self::fail("$operation on a stopped server must throw");
                    } catch (BackendUnavailableException) {
                    }
                });
                // Bounded: wait (≤ 0.5 s) + connect (0.3 s) + I/O (0.3 s), with generous slack for a loaded CI.
                self::assertLessThan(5.0, $took, "$operation took {$took}s");
            }
            self::assertNotNull($held->fence(), 'after Unavailable the lease is kept so release() can be retried');
        } finally {
            $server->resume();
        }
        try {
            $held->release(); // the retry reaches the server once it answers again
        } catch (\Leasehold\Exception\LockLostException) {
            // The release sent while the server was stopped ran when it woke (a request that timed out may
            // still run, see the README's known limits): the key is free either way.
        }
        self::assertNull($held->fence());
        self::assertTrue($client->createLock((string) $held->key(), 1.0)->tryAcquire(), 'the key is free');
        $server->stop();
    }

    public function testSynchronizedKeepsTheResultWhenOnlyTheReleaseFails(): void
    {
        $server = RedisServer::start();
        $client = Client::connect($server->url(['connect_timeout_ms' => 300, 'io_timeout_ms' => 300]));
        try {
            $client->synchronized(self::uniqueKey('sync-down'), function () use ($server): string {
                $server->pause(); // the backend stops answering while the work runs
                return 'report written';
            }, ttl: 30.0, wait: 1.0);
            self::fail('a release that cannot reach the backend must throw');
        } catch (BackendUnavailableException $e) {
            self::assertTrue($e->hasCallbackResult());
            self::assertSame('report written', $e->getCallbackResult());
        } finally {
            $server->resume();
            $server->stop();
        }
    }

    public function testPasswordsNeverAppearInErrors(): void
    {
        $secret = 'hunter2-' . bin2hex(random_bytes(6));
        $port = Ports::free();
        $urls = [
            "redis://:$secret@127.0.0.1:$port?connect_timeout_ms=200&io_timeout_ms=200",
            "redis://user:$secret@127.0.0.1:$port?connect_timeout_ms=200&io_timeout_ms=200",
            // An unknown parameter on a URL with a password: the error names parameters, never the password.
            'redis://:' . $secret . '@127.0.0.1:' . RedisServer::shared()->port . '?bogus=1',
            // The shared server has no password: AUTH itself fails, and its error must not echo the secret.
            'redis://:' . $secret . '@127.0.0.1:' . RedisServer::shared()->port . '?connect_timeout_ms=2000',
            "redis://:$secret@127.0.0.1:notaport",
            "redis://:$secret@127.0.0.1:$port?unknown_parameter=$secret",
        ];
        foreach ($urls as $url) {
            try {
                $client = Client::connect($url);
                $lock = $client->createLock(self::uniqueKey('secret'), 10.0);
                $lock->tryAcquire();
                $lock->release();
            } catch (LeaseholdException $e) {
                self::assertStringNotContainsString($secret, $e->getMessage(), "for $url");
                continue;
            }
            self::fail("no error for $url");
        }
    }
}
