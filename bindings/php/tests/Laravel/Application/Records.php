<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel\Application;

use Leasehold\Client;
use Leasehold\Tests\Support\LaravelApplication;

/**
 * What the test application's jobs and commands did, one JSON line each in run/records (appended atomically),
 * and whether Leasehold itself saw their lock held while they ran.
 */
final class Records
{
    /** @param array<string, mixed> $record */
    public static function append(array $record): void
    {
        $dir = (string) getenv('LEASEHOLD_APP_RUN');
        file_put_contents($dir . 'records', json_encode($record) . "\n", FILE_APPEND | LOCK_EX);
    }

    /** Marks that $label has started (a test waits for it). */
    public static function enter(string $label): void
    {
        file_put_contents((string) getenv('LEASEHOLD_APP_RUN') . $label . '.entered', (string) getmypid());
    }

    /** @return list<array<string, mixed>> */
    public static function read(LaravelApplication $app): array
    {
        $file = $app->run('records');
        if (!is_file($file)) {
            return [];
        }
        $lines = array_filter(explode("\n", (string) file_get_contents($file)));
        return array_values(array_map(static fn (string $l) => json_decode($l, true, 8, JSON_THROW_ON_ERROR), $lines));
    }

    /** Whether Leasehold (asked directly, not through Laravel) sees $name held: one attempt, given back at once. */
    public static function heldInLeasehold(string $name): bool
    {
        $url = (string) config('cache.stores.leasehold.url');
        $probe = Client::connect($url)->createLock($name, 1.0);
        if ($probe->tryAcquire()) {
            $probe->release();
            return false;
        }
        return true;
    }
}
