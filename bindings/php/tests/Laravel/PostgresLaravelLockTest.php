<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Leasehold\Tests\Support\Backend;

/** PostgreSQL table mode: advisory mode cannot restore a lease in another process, which these tests need. */
final class PostgresLaravelLockTest extends LaravelLockTestCase
{
    protected function backend(): Backend
    {
        return Backend::postgres();
    }
}
