<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\RedisServer;
use Leasehold\Tests\Support\TempDir;

/** examples/php: the report workers take turns, and the fence rejects the write of the one that stalled. */
final class ExamplesTest extends LeaseholdTestCase
{
    /** @return array<string, array{callable(TempDir): string}> */
    public static function backends(): array
    {
        return [
            'local' => [static fn (TempDir $dir): string => 'file://' . $dir->file('locks')],
            'redis' => [static fn (TempDir $dir): string => RedisServer::shared()->url()],
        ];
    }

    /** @dataProvider backends */
    public function testWorkersTakeTurnsAndTheFenceRejectsAStaleWrite(callable $url): void
    {
        $dir = new TempDir('examples');
        $db = $dir->file('reports.sqlite');
        $date = '2026-11-' . random_int(10, 28) . '-' . bin2hex(random_bytes(3));
        $result = Php::run(dirname(__DIR__, 3) . '/examples/php/run-workers.php', [
            '--workers=4', "--date=$date", '--ttl=1', '--work=0.3', '--stall=2', "--db=$db",
        ], ['LEASEHOLD_URL' => $url($dir)], 120.0);
        $output = $result['stdout'] . $result['stderr'];
        self::assertSame(0, $result['exit'], $output);

        self::assertSame(4, preg_match_all('/worker-\d  took report:' . preg_quote($date, '/') . '  fence (\d+)/',
            $output, $took), $output);
        $fences = array_map('intval', $took[1]);
        self::assertSame(count($fences), count(array_unique($fences)), $output);
        self::assertMatchesRegularExpression('/worker-1  took .*fence (\d+)/', $output);
        self::assertMatchesRegularExpression('/worker-1  REJECTED stale write/', $output);
        self::assertMatchesRegularExpression('/worker-1  lease had expired before release/', $output);
        self::assertSame(3, preg_match_all('/worker-[234]  wrote the report/', $output), $output);
        self::assertSame(3, preg_match_all('/worker-[234]  released/', $output), $output);

        $pdo = new \PDO('sqlite:' . $db);
        $row = $pdo->query("SELECT fence, written_by FROM reports WHERE id = '$date'")->fetch(\PDO::FETCH_ASSOC);
        self::assertSame(max($fences), (int) $row['fence'], 'the newest holder\'s write is the one stored');
        self::assertNotSame('worker-1', $row['written_by']);
    }

    public function testOneWorkerOnItsOwn(): void
    {
        $dir = new TempDir('worker');
        $result = Php::run(dirname(__DIR__, 3) . '/examples/php/worker.php', [
            '--date=2026-11-29', '--ttl=5', '--work=0', '--db=' . $dir->file('r.sqlite'), '--name=solo',
        ], ['LEASEHOLD_URL' => 'file://' . $dir->file('locks')], 60.0);
        self::assertSame(0, $result['exit'], $result['stdout'] . $result['stderr']);
        // Fences are large numbers (a hybrid logical clock: about the server's time in µs).
        self::assertMatchesRegularExpression('/solo  took report:2026-11-29  fence (\d+)  ttl 5.0 s/', $result['stdout']);
        preg_match('/fence (\d+)/', $result['stdout'], $m);
        self::assertStringContainsString('solo  wrote the report with fence ' . $m[1], $result['stdout']);
        self::assertStringContainsString('solo  released', $result['stdout']);
        self::assertSame('', $result['stderr']);
    }

    /** @dataProvider backends */
    public function testTheSymfonyLockExample(callable $url): void
    {
        $dir = new TempDir('example-symfony');
        $result = Php::run(dirname(__DIR__, 3) . '/examples/php/symfony-lock.php', ['2026-' . bin2hex(random_bytes(3))],
            ['LEASEHOLD_URL' => $url($dir)], 60.0);
        $output = $result['stdout'] . $result['stderr'];
        self::assertSame(0, $result['exit'], $output);
        self::assertMatchesRegularExpression('/acquired invoice:\S+  fence \d+  (29|30)\.\d s left/', $output);
        self::assertStringContainsString('a second lock on it: refused', $output);
        self::assertMatchesRegularExpression('/refreshed: (59|60)\.\d s left, still ours: yes/', $output);
        self::assertStringContainsString('released; held now: no', $output);
        self::assertSame('', $result['stderr']);
    }

    /** @dataProvider backends */
    public function testTheLaravelLockExample(callable $url): void
    {
        $dir = new TempDir('example-laravel');
        $result = Php::run(dirname(__DIR__, 3) . '/examples/php/laravel-lock.php', [bin2hex(random_bytes(3))],
            ['LEASEHOLD_URL' => $url($dir)], 60.0);
        $output = $result['stdout'] . $result['stderr'];
        self::assertSame(0, $result['exit'], $output);
        self::assertMatchesRegularExpression('/acquired podcast:\S+  fence \d+  owner [0-9a-f]{32}/', $output);
        self::assertStringContainsString('a second lock on it: refused', $output);
        self::assertStringContainsString('restoreLock()->release(): released', $output);
        self::assertStringContainsString('ran under the lock', $output);
        self::assertSame('', $result['stderr']);
    }
}
