<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Tests\Support\Backend;

/** MySQL table mode: named mode has neither shared locks nor restore, which these tests need. */
final class MysqlSymfonyStoreTest extends SymfonyStoreTestCase
{
    protected function backend(): Backend
    {
        return Backend::mysql('table');
    }
}
