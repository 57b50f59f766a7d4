<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Library;
use Leasehold\Tests\Support\FastCgi;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\PhpFpm;
use Leasehold\Tests\Support\Ports;
use Leasehold\Tests\Support\TempDir;

/**
 * The end of a php-fpm request ends its leases, however it ends, under a real php-fpm: a request takes a lock with a
 * 1 s TTL, turns keep-alive on, and dies of max_execution_time, of memory_limit, of exit() or of an uncaught
 * exception. The worker lives on (and with it the library's keep-alive thread), so the key must be free as soon as
 * the response is in. A script that goes on after fastcgi_finish_request() keeps its lease until it ends; a worker
 * killed by request_terminate_timeout leaves its lease to expire within one TTL; a Laravel lock of 0 seconds
 * (handed on) lives keepalive_ttl after its request, not for as long as the worker.
 */
final class PhpFpmRequestLifecycleTest extends LeaseholdTestCase
{
    private static ?TempDir $dir = null;
    /** @var resource|null */
    private static $fpm = null;
    private static int $port = 0;
    /** The pool whose workers request_terminate_timeout kills after 2 s. */
    private static int $terminatePort = 0;
    /** A pool of one worker, so that two requests meet the same worker. */
    private static int $singlePort = 0;
    private static ?Client $client = null;

    public static function setUpBeforeClass(): void
    {
        self::$dir = $dir = new TempDir('fpm-lifecycle');
        self::$port = Ports::free();
        do {
            self::$terminatePort = Ports::free();
            self::$singlePort = Ports::free();
        } while (count(array_unique([self::$port, self::$terminatePort, self::$singlePort])) !== 3);
        $root = posix_geteuid() === 0;
        $user = $root ? ['user = ' . (posix_getpwuid(0)['name'] ?? 'root'),
            'group = ' . (posix_getgrgid(0)['name'] ?? 'root')] : [];
        file_put_contents($dir->file('php-fpm.conf'), implode("\n", array_merge([
            '[global]',
            'pid = ' . $dir->file('php-fpm.pid'),
            'error_log = ' . $dir->file('php-fpm.log'),
            'daemonize = no',
            '[lifecycle]',
        ], $user, [
            'listen = 127.0.0.1:' . self::$port,
            'pm = static',
            'pm.max_children = 2',
            'clear_env = no',
            'catch_workers_output = yes',
            '[terminated]',
        ], $user, [
            'listen = 127.0.0.1:' . self::$terminatePort,
            'pm = static',
            'pm.max_children = 1',
            'request_terminate_timeout = 2s',
            'clear_env = no',
            'catch_workers_output = yes',
            '[single]',
        ], $user, [
            'listen = 127.0.0.1:' . self::$singlePort,
            'pm = static',
            'pm.max_children = 1',
            'clear_env = no',
            'catch_workers_output = yes',
            '',
        ])));
        file_put_contents($dir->file('php.ini'), implode("\n", ['ffi.enable=1', 'display_errors=stderr',
            'log_errors=1', 'error_log=' . $dir->file('php-errors.log'), '']));
        $command = [PhpFpm::binary(), '--nodaemonize', '--fpm-config', $dir->file('php-fpm.conf'),
            '-c', $dir->file('php.ini')];
        if ($root) {
            $command[] = '--allow-to-run-as-root';
        }
        $url = 'file://' . $dir->file('locks');
        self::$fpm = proc_open($command, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $dir->file('stdout'), 'w'],
            2 => ['file', $dir->file('stderr'), 'w']], $pipes, null, array_merge(getenv(), [
                'LEASEHOLD_LIBRARY' => Library::defaultPath(),
                'LEASEHOLD_URL' => $url,
            ]));
        if (self::$fpm === false) {
            self::$fpm = null;
            throw new \RuntimeException('cannot start php-fpm');
        }
        $deadline = microtime(true) + 20.0;
        while (!Ports::answers(self::$port) || !Ports::answers(self::$terminatePort)
            || !Ports::answers(self::$singlePort)) {
            if (microtime(true) > $deadline || !proc_get_status(self::$fpm)['running']) {
                throw new \RuntimeException('php-fpm did not start' . self::logs());
            }
            usleep(50_000);
        }
        self::$client = Client::connect($url);
    }

    public static function tearDownAfterClass(): void
    {
        self::$client = null;
        if (self::$fpm !== null) {
            PhpFpm::stop(self::$fpm);
            self::$fpm = null;
        }
        self::$dir = null;
    }

    public function testAFatalErrorByMaxExecutionTimeEndsTheLease(): void
    {
        $key = self::uniqueKey('time');
        $response = $this->request('time', $key);
        self::assertStringContainsString('Maximum execution time', $response['stderr'] . self::logs());
        self::assertFree($key, 'a request killed by max_execution_time must not leave its lease renewed');
    }

    public function testAFatalErrorByMemoryLimitEndsTheLease(): void
    {
        $key = self::uniqueKey('memory');
        $response = $this->request('memory', $key);
        self::assertStringContainsString('Allowed memory size', $response['stderr'] . self::logs());
        self::assertFree($key, 'a request killed by memory_limit must not leave its lease renewed');
    }

    public function testExitEndsTheLease(): void
    {
        $key = self::uniqueKey('exit');
        self::assertSame('exiting', $this->request('exit', $key)['body']);
        self::assertFree($key, 'exit() must end the lease');
    }

    public function testAnUncaughtExceptionEndsTheLease(): void
    {
        $key = self::uniqueKey('exception');
        $response = $this->request('exception', $key);
        self::assertStringContainsString('the request failed', $response['stderr'] . self::logs());
        self::assertFree($key, 'an uncaught exception must end the lease');
    }

    public function testAScriptGoingOnAfterFastcgiFinishRequestKeepsItsLeaseUntilItEnds(): void
    {
        $key = self::uniqueKey('finish');
        $start = microtime(true);
        $response = $this->request('finish', $key, '&after=3');
        self::assertIsArray(json_decode($response['body'], true), $response['body'] . self::logs());
        // Past the 1 s TTL: only keep-alive holds it now, in a script whose response is complete.
        usleep(1_500_000);
        self::assertHeldElsewhere(self::$client, $key, 'the script goes on after fastcgi_finish_request()');
        self::assertFreeWithin($key, 3.0 + 5.0 - (microtime(true) - $start), 'the script ended after 3 s');
    }

    public function testAWorkerKilledByRequestTerminateTimeoutLeavesNothingRenewed(): void
    {
        $key = self::uniqueKey('terminated');
        try {
            FastCgi::get('tcp://127.0.0.1:' . self::$terminatePort, self::app(), 'case=sleep&key=' . urlencode($key));
            self::fail('request_terminate_timeout should have killed the worker');
        } catch (\RuntimeException $e) {
            self::assertStringContainsString('closed the connection', $e->getMessage());
        }
        // Killed at 2 s, with its lease renewed at most a third of a TTL before: gone within one TTL (and a margin
        // for the master to notice and kill under load).
        self::assertFreeWithin($key, 1.0 + 1.0, 'a killed worker must leave its lease to expire within one TTL');
    }

    public function testALaravelLockOfZeroSecondsOutlivesItsRequestByKeepaliveTtlOnly(): void
    {
        $key = self::uniqueKey('laravel');
        $response = $this->request('laravel', $key);
        self::assertStringContainsString('Maximum execution time', $response['stderr'] . self::logs());
        // Handed on (ShouldBeUnique's dispatch-to-worker lock), so not released; but no longer renewed either: it
        // ends keepalive_ttl (1 s here) after its request, not when php-fpm recycles the worker.
        self::assertFreeWithin($key, 1.0 + 1.5, 'a lock(k, 0) must end keepalive_ttl after its request');
    }

    public function testALeaseARequestLeakedIsNoLongerRenewedOnceItsWorkerServesTheNextRequest(): void
    {
        $key = self::uniqueKey('leaked');
        $address = 'tcp://127.0.0.1:' . self::$singlePort;
        $response = FastCgi::get($address, self::app(), 'case=exit-first&key=' . urlencode($key));
        self::assertStringContainsString('Maximum execution time', $response['stderr'] . self::logs());
        // The application's shutdown function ended the request before Leasehold's could run: the lease leaked,
        // and the worker's keep-alive thread renews it past its 1 s TTL.
        usleep(1_500_000);
        self::assertHeldElsewhere(self::$client, $key, 'the case this backstop is for: a lease the request leaked');
        // The worker's next request that uses Leasehold stops renewing it: it ends within its TTL.
        self::assertSame('connected', FastCgi::get($address, self::app(), 'case=noop')['body'], self::logs());
        self::assertFreeWithin($key, 1.0 + 1.0, 'the next request must stop the renewal of a leaked lease');
    }

    /** @return array{headers: string, body: string, stderr: string} */
    private function request(string $case, string $key, string $more = ''): array
    {
        return FastCgi::get('tcp://127.0.0.1:' . self::$port, self::app(),
            'case=' . $case . '&key=' . urlencode($key) . $more);
    }

    private static function assertFree(string $key, string $message): void
    {
        $probe = self::$client?->createLock($key, 1.0);
        self::assertNotNull($probe);
        self::assertTrue($probe->tryAcquire(), $message . self::logs());
        $probe->release();
    }

    private static function assertFreeWithin(string $key, float $seconds, string $message): void
    {
        $probe = self::$client?->createLock($key, 1.0);
        self::assertNotNull($probe);
        $free = $probe->acquire(max(0.0, $seconds));
        self::assertTrue($free, $message . self::logs());
        $probe->release();
    }

    private static function app(): string
    {
        return __DIR__ . '/fixtures/request-lifecycle.php';
    }

    private static function logs(): string
    {
        $out = '';
        foreach (['php-fpm.log', 'php-errors.log', 'stderr'] as $name) {
            $out .= "\n--- $name ---\n" . @file_get_contents((string) self::$dir?->file($name));
        }
        return $out;
    }
}
