<?php

declare(strict_types=1);

namespace Leasehold\Tests\Laravel;

use Leasehold\Tests\Support\Backend;

/** MySQL table mode: named mode cannot restore a lease in another process, which these tests need. */
final class MysqlLaravelLockTest extends LaravelLockTestCase
{
    protected function backend(): Backend
    {
        return Backend::mysql('table');
    }
}
