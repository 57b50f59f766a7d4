<?php

declare(strict_types=1);

// PSR-4 autoloading of Leasehold\ for projects without Composer (and for this package's own tests and examples).
// With Composer, vendor/autoload.php does the same.
spl_autoload_register(static function (string $class): void {
    if (!str_starts_with($class, 'Leasehold\\')) {
        return;
    }
    $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, strlen('Leasehold\\'))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
