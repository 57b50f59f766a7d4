<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Leasehold\Tests\Support\Backend;

final class RedisLaravelLockTest extends LaravelLockTestCase
{
    protected function backend(): Backend
    {
        return Backend::redis();
    }
}
