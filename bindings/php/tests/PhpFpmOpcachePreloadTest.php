<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Tests\Support\PhpFpmTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * php-fpm whose master is not root (the suite drops to "nobody" when it runs as root): opcache.preload alone is
 * enough, and preload.php registers the scope with FFI::load().
 */
final class PhpFpmOpcachePreloadTest extends PhpFpmTestCase
{
    protected static function iniLines(TempDir $dir): array
    {
        return [];
    }

    protected static function masterUser(): ?string
    {
        return posix_geteuid() === 0 ? 'nobody' : null;
    }
}
