<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\Underneath;

/**
 * A worker told to stop while it waits for a lock: SIGTERM (or SIGINT) ends the wait within 100 ms, acquire()
 * returns false, and the worker's own pcntl handler runs right after — on every backend, for every kind of wait.
 */
final class SignalTest extends LeaseholdTestCase
{
    /** @return array<string, array{callable(): Backend, string, int}> */
    public static function waits(): array
    {
        $cases = [];
        $backends = [
            'local' => [Backend::class, 'local'],
            'redis' => [Backend::class, 'redis'],
            'postgres-table' => [Backend::class, 'postgres'],
            'mysql-named' => static fn () => Backend::mysql('named'),
        ];
        foreach ($backends as $name => $backend) {
            $cases["$name lock SIGTERM"] = [$backend, 'lock', SIGTERM];
            $cases["$name permit SIGINT"] = [$backend, 'permit', SIGINT];
        }
        $cases['redis shared SIGTERM'] = [[Backend::class, 'redis'], 'shared', SIGTERM];
        $cases['redis promote SIGTERM'] = [[Backend::class, 'redis'], 'promote', SIGTERM];
        $cases['local promote SIGINT'] = [[Backend::class, 'local'], 'promote', SIGINT];
        return $cases;
    }

    /** @dataProvider waits */
    public function testASignalEndsTheWaitAndTheHandlerRuns(callable $backend, string $kind, int $signal): void
    {
        $backend = $backend();
        $holder = Client::connect($backend->url);
        $key = Underneath::key('signal');
        $held = $kind === 'permit'
            ? $holder->createSemaphore($key, 1, 30.0)->acquire(0)
            : ($kind === 'promote' ? $holder->createSharedLock($key, 30.0) : $holder->createLock($key, 30.0));
        if ($kind !== 'permit') {
            self::assertTrue($held->tryAcquire());
        }
        self::assertNotNull($held);

        $run = Php::start(__DIR__ . '/fixtures/signal-worker.php', [$backend->url, $key, (string) $signal, $kind]);
        $pid = proc_get_status($run['process'])['pid'];
        $deadline = microtime(true) + 30.0;
        $out = '';
        while (!str_contains($out, "waiting\n") && microtime(true) < $deadline) {
            $out .= (string) stream_get_contents($run['pipes'][1]);
            usleep(10_000);
        }
        self::assertStringContainsString("waiting\n", $out, 'the worker never started waiting');
        usleep(300_000); // well inside the 20 s wait
        $sent = microtime(true);
        posix_kill($pid, $signal);
        $result = Php::finish($run, 30.0);
        $took = microtime(true) - $sent;
        self::assertSame(0, $result['exit'], $result['stderr']);
        $lines = explode("\n", trim($out . $result['stdout']));
        $report = json_decode((string) end($lines), true, flags: JSON_THROW_ON_ERROR);
        fwrite(STDERR, sprintf("[%s %s] the worker's wait ended %.0f ms after the signal was sent (process exit %.0f ms)\n",
            $backend->name, $kind, $report['returned_ms'] - 300.0, $took * 1000));
        self::assertFalse($report['acquired'], 'a signal must end the wait, not acquire');
        self::assertTrue($report['handled'], "the worker's pcntl handler must run after the wait");
        if ($kind === 'promote') {
            self::assertTrue($report['still_shared'], 'an interrupted promote leaves the lease shared and held');
        }
        // The contract's bound is 100 ms; this only rules out a wait that ran on (the figure is printed above).
        self::assertLessThan(5000.0, $report['returned_ms'], 'the wait ran on after the signal');
        self::assertLessThan(5.0, $took);
        $held->release();
    }
}
