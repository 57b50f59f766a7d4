<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * libleasehold could not be loaded: FFI is disabled (`ffi.enable`), the library file is missing, or under php-fpm
 * the preloaded scope is missing (see the README's php-fpm section).
 */
class LibraryException extends \RuntimeException implements LeaseholdException
{
}
