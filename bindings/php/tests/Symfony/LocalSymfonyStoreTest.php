<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\Tests\Support\Backend;

final class LocalSymfonyStoreTest extends SymfonyStoreTestCase
{
    protected function backend(): Backend
    {
        return Backend::local();
    }
}
