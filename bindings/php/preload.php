<?php

declare(strict_types=1);

/*
 * opcache.preload script for php-fpm (and any SAPI where ffi.enable=preload, PHP's default, forbids FFI::cdef at
 * request time). It compiles Leasehold's classes into shared memory, and makes sure libleasehold is registered
 * as the FFI scope "LEASEHOLD", which Leasehold\Library::load() prefers:
 *
 * - if php.ini's ffi.preload already registered it (the header from bin/leasehold-ffi-header), nothing to do;
 * - otherwise it registers it with FFI::load(). PHP refuses FFI::load() when the preload runs under
 *   opcache.preload_user, i.e. when php-fpm's master runs as root: use ffi.preload there.
 *
 *   opcache.enable=1
 *   ffi.enable=preload
 *   opcache.preload=/path/to/bindings/php/preload.php
 *   ; only when php-fpm's master runs as root:
 *   opcache.preload_user=www-data
 *   ffi.preload=/etc/php/leasehold.h   ; php bindings/php/bin/leasehold-ffi-header > /etc/php/leasehold.h
 *
 * The library file for FFI::load(): LEASEHOLD_LIBRARY in php-fpm's environment (the master's, at start-up), else
 * the installed libleasehold.so.0 (the Debian package, scripts/install.sh), else the workspace's target/release build. Restart php-fpm after rebuilding the library or updating Leasehold.
 */

use Leasehold\Library;

foreach ([
    'Exception/LeaseholdException',
    'Exception/CallbackResult',
    'Exception/LockLostException',
    'Exception/LockTimeoutException',
    'Exception/BackendUnavailableException',
    'Exception/InvalidArgumentException',
    'Exception/InternalException',
    'Exception/LibraryException',
    'Key',
    'Seconds',
    'Events',
    'Library',
    'RequestLeases',
    // Interfaces first, then the classes whose return types they narrow (Client's need Lock and Semaphore).
    'LockInterface',
    'SemaphoreInterface',
    'ClientInterface',
    'Lock',
    'Semaphore',
    'Client',
] as $class) {
    require_once __DIR__ . '/src/' . $class . '.php';
}

(static function (): void {
    try {
        FFI::scope(Library::SCOPE);
        return; // registered by ffi.preload
    } catch (FFI\Exception) {
    }
    $library = Library::defaultPath();
    // A bare name (the installed libleasehold.so.0) is for the dynamic loader to find; anything else is a file.
    if (str_contains($library, '/') && !is_file($library)) {
        throw new RuntimeException("Leasehold preload: libleasehold not found at $library (set LEASEHOLD_LIBRARY)");
    }
    // FFI::load() reads FFI_SCOPE and FFI_LIB only from a file, so the header goes through a private temp file.
    $header = tempnam(sys_get_temp_dir(), 'leasehold-ffi-');
    if ($header === false) {
        throw new RuntimeException('Leasehold preload: cannot create a temporary header file');
    }
    try {
        file_put_contents($header, Library::preloadHeader(str_contains($library, '/') ? (realpath($library) ?: $library) : $library));
        if (FFI::load($header) === null) {
            throw new RuntimeException("Leasehold preload: FFI::load() failed for $library");
        }
    } catch (FFI\Exception $e) {
        throw new RuntimeException('Leasehold preload: ' . $e->getMessage() . ' Under opcache.preload_user '
            . '(php-fpm started as root), set ffi.preload to the header that bindings/php/bin/leasehold-ffi-header '
            . 'prints.', 0, $e);
    } finally {
        @unlink($header);
    }
})();
