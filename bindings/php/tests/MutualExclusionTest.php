<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Tests\Support\LeaseholdTestCase;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\RedisServer;
use Leasehold\Tests\Support\TempDir;

/**
 * 8 PHP processes × 200 cycles on one key: no two critical sections overlap (by hrtime, one monotonic clock for
 * all processes), no increment of a racy shared counter is lost, and the fence strictly increases in the order
 * the sections ran.
 */
final class MutualExclusionTest extends LeaseholdTestCase
{
    private const PROCESSES = 8;
    private const CYCLES = 200;

    /** @return array<string, array{callable(TempDir): string}> */
    public static function backends(): array
    {
        return [
            'local' => [static fn (TempDir $dir): string => 'file://' . $dir->file('locks')],
            'redis' => [static fn (TempDir $dir): string => RedisServer::shared()->url()],
        ];
    }

    /** @dataProvider backends */
    public function testProcessesNeverOverlap(callable $url): void
    {
        $dir = new TempDir('mutex');
        $counter = $dir->file('counter');
        file_put_contents($counter, '0');
        $start = $dir->file('go');
        $key = self::uniqueKey('mutex');

        $runs = [];
        for ($p = 0; $p < self::PROCESSES; $p++) {
            $runs[] = Php::start(self::fixture('mutex-worker.php'), [
                $url($dir), $key, $counter, $dir->file("log-$p"), $start, (string) self::CYCLES,
            ]);
        }
        usleep(300_000); // let every worker connect before the race starts
        touch($start);
        $started = hrtime(true);

        $failures = [];
        foreach ($runs as $p => $run) {
            $result = Php::finish($run, 170.0);
            if ($result['exit'] !== 0) {
                $failures[] = "worker $p exited {$result['exit']}: {$result['stdout']}{$result['stderr']}";
            }
        }
        $elapsed = (hrtime(true) - $started) / 1e9;
        self::assertSame([], $failures);

        $sections = [];
        for ($p = 0; $p < self::PROCESSES; $p++) {
            foreach (file($dir->file("log-$p"), FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES) ?: [] as $line) {
                [$enter, $exit, $fence] = array_map('intval', explode(' ', $line));
                $sections[] = [$enter, $exit, $fence, $p];
            }
        }
        $total = self::PROCESSES * self::CYCLES;
        self::assertCount($total, $sections);
        usort($sections, static fn (array $a, array $b): int => $a[0] <=> $b[0]);

        $overlaps = 0;
        $fenceOutOfOrder = 0;
        for ($i = 1; $i < count($sections); $i++) {
            if ($sections[$i][0] < $sections[$i - 1][1]) {
                $overlaps++;
            }
            if ($sections[$i][2] <= $sections[$i - 1][2]) {
                $fenceOutOfOrder++;
            }
        }
        self::assertSame(0, $overlaps, 'overlapping critical sections');
        self::assertSame((string) $total, file_get_contents($counter), 'lost increments of the shared counter');
        self::assertSame(0, $fenceOutOfOrder, 'the fence must strictly increase in the order of the sections');

        fprintf(STDERR, "\n[mutual exclusion, %s] %d processes x %d cycles: %.2f s, %.0f cycles/s, %.0f us a cycle\n",
            $this->dataName(),
            self::PROCESSES, self::CYCLES, $elapsed, $total / $elapsed, $elapsed / $total * 1e6);
    }
}
