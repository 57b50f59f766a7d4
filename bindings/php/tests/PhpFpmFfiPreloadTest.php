<?php

declare(strict_types=1);

namespace Leasehold\Tests;

use Leasehold\Library;
use Leasehold\Tests\Support\Php;
use Leasehold\Tests\Support\PhpFpmTestCase;
use Leasehold\Tests\Support\TempDir;

/**
 * php-fpm started the usual way (as root, when the suite runs as root): opcache.preload_user is required, PHP then
 * refuses FFI::load() in the preload, so ffi.preload registers the scope from the header that
 * bin/leasehold-ffi-header prints. preload.php still preloads the classes.
 */
final class PhpFpmFfiPreloadTest extends PhpFpmTestCase
{
    protected static function iniLines(TempDir $dir): array
    {
        $header = Php::run(dirname(__DIR__) . '/bin/leasehold-ffi-header', [Library::defaultPath()]);
        if ($header['exit'] !== 0) {
            throw new \RuntimeException('bin/leasehold-ffi-header failed: ' . $header['stderr']);
        }
        file_put_contents($dir->file('leasehold.h'), $header['stdout']);
        $lines = ['ffi.preload=' . $dir->file('leasehold.h')];
        if (posix_geteuid() === 0) {
            $lines[] = 'opcache.preload_user=' . (posix_getpwuid(0)['name'] ?? 'root');
        }
        return $lines;
    }

    protected static function masterUser(): ?string
    {
        return null;
    }
}
