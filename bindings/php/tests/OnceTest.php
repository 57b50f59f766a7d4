<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Client;
use Leasehold\ClientInterface;
use Leasehold\Exception\IncompleteAttemptException;
use Leasehold\LockInterface;
use Leasehold\Recovery;
use Leasehold\Testing\InMemoryClient;
use Leasehold\Tests\Support\Backend;
use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\Underneath;

/** Client::once(): an irreversible action runs at most once per key, and a died attempt is never rerun blindly. */
final class OnceTest extends LeaseholdTestCase
{
    /** @return array<string, array{callable(): array{ClientInterface, ClientInterface, ?string, ?Backend}}> */
    public static function clients(): array
    {
        $real = static fn (callable $backend): callable => static function () use ($backend): array {
            $backend = $backend();
            // The Backend goes along: it owns the local backend's directory, deleted with it.
            return [Client::connect($backend->url), Client::connect($backend->url), $backend->url, $backend];
        };
        return [
            'in memory' => [static function (): array {
                $client = new InMemoryClient();
                return [$client, $client, null, null];
            }],
            'local' => [$real([Backend::class, 'local'])],
            'redis' => [$real([Backend::class, 'redis'])],
            'postgres' => [$real([Backend::class, 'postgres'])],
            'mysql named' => [$real(static fn () => Backend::mysql('named'))],
        ];
    }

    /** @dataProvider clients */
    public function testTheActionRunsOnceAndEveryCallGetsItsResult(callable $make): void
    {
        [$a, $b, , $keep] = $make();
        $key = Underneath::key('once');
        $runs = 0;
        $charge = static function (LockInterface $lock) use (&$runs): array {
            $runs++;
            return ['charge' => 'ch_42', 'fence' => $lock->fence()];
        };
        $first = $a->once($key, $charge);
        $second = $b->once($key, $charge);
        self::assertSame(1, $runs);
        self::assertSame($first, $second);
        self::assertSame('ch_42', $second['charge']);
        // The once-key's lock is not the key's own lock.
        $lock = $a->createLock($key);
        self::assertTrue($lock->tryAcquire());
        $lock->release();
    }

    /** @dataProvider clients */
    public function testAFailedAttemptIsNotRerunBlindlyAndRecoveryDecides(callable $make): void
    {
        [$a, $b, , $keep] = $make();
        foreach (['done' => Recovery::done('found it'), 'rerun' => Recovery::rerun()] as $label => $decision) {
            $key = Underneath::key("once-$label");
            try {
                $a->once($key, static fn () => throw new \RuntimeException('the API timed out'));
                self::fail('the action threw');
            } catch (\RuntimeException $e) {
                self::assertSame('the API timed out', $e->getMessage());
            }
            try {
                $b->once($key, static fn () => self::fail('an incomplete attempt must not be rerun blindly'));
                self::fail('expected IncompleteAttemptException');
            } catch (IncompleteAttemptException $attempt) {
                self::assertSame($key, $attempt->key());
                self::assertGreaterThan(0, $attempt->fence());
                self::assertEqualsWithDelta(time(), $attempt->startedAt()->getTimestamp(), 60);
                self::assertSame(8, $attempt->getCode());
            }
            $seen = null;
            $result = $b->once($key, static fn () => 'ran again',
                recover: static function (IncompleteAttemptException $attempt, LockInterface $lock) use (&$seen, $decision): Recovery {
                    $seen = $attempt->fence();
                    return $decision;
                });
            self::assertNotNull($seen);
            $expected = $label === 'done' ? 'found it' : 'ran again';
            self::assertSame($expected, $result);
            self::assertSame($expected, $a->once($key, static fn () => self::fail('recorded: never runs')));
        }
    }

    /** @dataProvider clients */
    public function testAWorkerKilledMidActionLeavesItIncomplete(callable $make): void
    {
        [$a, , $url, $keep] = $make();
        if ($url === null) {
            self::assertTrue(true); // the in-memory double has no processes to kill
            return;
        }
        $key = Underneath::key('once-killed');
        $run = Php::start(__DIR__ . '/fixtures/once-worker.php', [$url, $key]);
        $deadline = microtime(true) + 30.0;
        $out = '';
        // The whole line: a read may end between "started " and the fence.
        while (preg_match('/started \d+\n/', $out) !== 1 && microtime(true) < $deadline) {
            $out .= (string) stream_get_contents($run['pipes'][1]);
            usleep(10_000);
        }
        self::assertMatchesRegularExpression('/started \d+\n/', $out);
        proc_terminate($run['process'], SIGKILL);
        Php::finish($run, 10.0);
        // Its lease runs out (2 s), and the next caller is told, not rerun.
        try {
            $a->once($key, static fn () => self::fail('must not run again blindly'), ttl: 10.0);
            self::fail('expected IncompleteAttemptException');
        } catch (IncompleteAttemptException $attempt) {
            self::assertStringContainsString('started ' . $attempt->fence(), $out);
        }
        // Another worker that finishes: its result is the one everyone gets afterwards.
        $result = $a->once($key, static fn () => 'recovered', recover: static fn () => Recovery::rerun());
        self::assertSame('recovered', $result);
        $finisher = Php::finish(Php::start(__DIR__ . '/fixtures/once-worker.php', [$url, $key, 'finish']), 60.0);
        self::assertSame(0, $finisher['exit'], $finisher['stderr']);
        self::assertStringContainsString('result recovered', $finisher['stdout']);
        self::assertStringNotContainsString('started', $finisher['stdout']);
    }
}
