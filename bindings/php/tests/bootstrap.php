<?php

declare(strict_types=1);

require dirname(__DIR__) . '/autoload.php';

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Leasehold\\Tests\\')) {
        $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen('Leasehold\\Tests\\'))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

// Debian's php-psr-log (the PSR-3 interface), for the logger tests only: the package itself runs without it. A
// missing interface fails those tests instead of skipping them.
$psrLog = stream_resolve_include_path('Psr/Log/autoload.php');
if ($psrLog !== false) {
    require_once $psrLog;
}

// A missing library is a failure of the whole run, not a reason to skip: say how to build it.
$library = Leasehold\Library::defaultPath();
if (str_contains($library, '/') && !is_file($library)) {
    fwrite(STDERR, "libleasehold not found at $library: run `cargo build --release -p leasehold-ffi` "
        . "or set LEASEHOLD_LIBRARY\n");
    exit(1);
}
