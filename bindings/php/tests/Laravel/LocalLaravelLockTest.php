<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Leasehold\Tests\Support\Backend;

final class LocalLaravelLockTest extends LaravelLockTestCase
{
    protected function backend(): Backend
    {
        return Backend::local();
    }
}
