<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Client;
use Leasehold\ClientInterface;
use Leasehold\Tests\Support\Backend;

/** Symfony's semaphore store over MySQL named mode's semaphores (named locks, one per permit slot). */
final class MysqlNamedSemaphoreStoreTest extends SemaphoreStoreTestCase
{
    private static ?Backend $backend = null;

    protected function client(): ClientInterface
    {
        self::$backend ??= Backend::mysql('named');
        return Client::connect(self::$backend->url);
    }

    protected function elapse(float $seconds): void
    {
        usleep((int) ($seconds * 1e6));
    }
}
