<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

use Leasehold\ClientInterface;
use PHPUnit\Framework\TestCase;

abstract class LeaseholdTestCase extends TestCase
{
    private static int $keys = 0;

    /** A key no other test (or earlier run against the same backend) uses. */
    protected static function uniqueKey(string $label): string
    {
        return sprintf('php-test:%s:%d:%s:%d', $label, getmypid(), bin2hex(random_bytes(4)), ++self::$keys);
    }

    protected static function fixture(string $name): string
    {
        return dirname(__DIR__) . '/fixtures/' . $name;
    }

    /** Runs $action and returns how many seconds it took. */
    protected static function seconds(callable $action): float
    {
        $start = hrtime(true);
        $action();
        return (hrtime(true) - $start) / 1e9;
    }

    protected static function assertHeldElsewhere(ClientInterface $client, string $key, string $message = ''): void
    {
        $probe = $client->createLock($key, 5.0);
        self::assertFalse($probe->tryAcquire(), $message ?: 'the key should still be held');
    }
}
