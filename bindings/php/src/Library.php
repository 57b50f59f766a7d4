<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\InternalException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LeaseholdException;
use Leasehold\Exception\LibraryException;
use Leasehold\Exception\LockLostException;

/**
 * libleasehold, bound through FFI.
 *
 * Which library is used: an explicit path wins (FFI::cdef on that file); otherwise a scope preloaded under the
 * name "LEASEHOLD" (php-fpm with ffi.enable=preload, see preload.php); otherwise FFI::cdef on LEASEHOLD_LIBRARY,
 * and failing that on the workspace's target/release build. Each binding is made once per process, because
 * FFI::cdef parses the header and dlopen()s the library every time.
 */
final class Library
{
    public const SCOPE = 'LEASEHOLD';

    public const OK = 0;
    public const NOT_ACQUIRED = 1;
    public const LOST = 2;
    public const UNAVAILABLE = 3;
    public const INVALID_ARGUMENT = 4;
    public const INTERNAL = 5;

    /** @var array<string, self> */
    private static array $byPath = [];
    private static ?self $scoped = null;
    private static bool $scopeLookedUp = false;

    /** `leasehold_lease*`, parsed once: FFI::new() with a type string parses the declaration on every call. */
    private ?\FFI\CType $leaseOutType = null;

    private function __construct(
        private readonly \FFI $ffi,
        private readonly ?string $path,
    ) {
    }

    /**
     * @param string|null $path the library file; null for the preloaded scope, LEASEHOLD_LIBRARY or the
     *                          workspace build, in that order
     */
    public static function load(?string $path = null): self
    {
        if ($path === null || $path === '') {
            $scoped = self::scoped();
            if ($scoped !== null) {
                return $scoped;
            }
            $path = self::defaultPath();
        }
        return self::$byPath[$path] ??= self::open($path);
    }

    /** The library file used when no path is given and nothing was preloaded. */
    public static function defaultPath(): string
    {
        $fromEnv = getenv('LEASEHOLD_LIBRARY');
        if (is_string($fromEnv) && $fromEnv !== '') {
            return $fromEnv;
        }
        $file = match (PHP_OS_FAMILY) {
            'Darwin' => 'libleasehold.dylib',
            'Windows' => 'leasehold.dll',
            default => 'libleasehold.so',
        };
        return dirname(__DIR__, 3) . '/target/release/' . $file;
    }

    /** The C declarations, in the form FFI::cdef() reads. */
    public static function header(): string
    {
        $header = file_get_contents(dirname(__DIR__) . '/resources/leasehold.h');
        if ($header === false) {
            throw new LibraryException('cannot read ' . dirname(__DIR__) . '/resources/leasehold.h');
        }
        return $header;
    }

    /** The header with the FFI_SCOPE and FFI_LIB lines that FFI::load() needs to preload a scope. */
    public static function preloadHeader(string $libraryPath): string
    {
        if (str_contains($libraryPath, '"') || str_contains($libraryPath, "\n")) {
            throw new LibraryException('the library path may not contain quotes or newlines: ' . $libraryPath);
        }
        return sprintf("#define FFI_SCOPE \"%s\"\n#define FFI_LIB \"%s\"\n", self::SCOPE, $libraryPath)
            . self::header();
    }

    /** True when this binding is the scope that opcache.preload registered. */
    public function isPreloaded(): bool
    {
        return $this->path === null;
    }

    /** The library file, or null for a preloaded scope. */
    public function path(): ?string
    {
        return $this->path;
    }

    public function version(): string
    {
        return (string) $this->ffi->leasehold_version();
    }

    /** @internal the raw binding, for Client and Lock */
    public function ffi(): \FFI
    {
        return $this->ffi;
    }

    /** @internal a fresh `leasehold_lease*` for an acquire to write its lease into */
    public function newLeaseOut(): \FFI\CData
    {
        return $this->ffi->new($this->leaseOutType ??= $this->ffi->type('leasehold_lease*'));
    }

    /**
     * @internal the exception for a failed call, with the library's message for it; call it right after the
     * failure, before any other leasehold call on this thread
     */
    public function error(int $status, string $fallback): LeaseholdException
    {
        $message = (string) $this->ffi->leasehold_last_error();
        if ($message === '') {
            $message = $fallback;
        }
        return match ($status) {
            self::LOST => new LockLostException($message, $status),
            self::UNAVAILABLE => new BackendUnavailableException($message, $status),
            self::INVALID_ARGUMENT => new InvalidArgumentException($message, $status),
            default => new InternalException($message, $status),
        };
    }

    private static function scoped(): ?self
    {
        if (!self::$scopeLookedUp) {
            self::$scopeLookedUp = true;
            try {
                self::$scoped = new self(\FFI::scope(self::SCOPE), null);
            } catch (\Throwable) {
                // Not preloaded (the CLI, or php-fpm without opcache.preload): bind the library file instead.
                self::$scoped = null;
            }
        }
        return self::$scoped;
    }

    private static function open(string $path): self
    {
        if (!extension_loaded('ffi')) {
            throw new LibraryException('the PHP extension "ffi" is not loaded; Leasehold needs it');
        }
        if (!is_file($path)) {
            throw new LibraryException(sprintf(
                'libleasehold not found at %s: build it with `cargo build --release -p leasehold-ffi`, '
                . 'or set LEASEHOLD_LIBRARY to its path',
                $path,
            ));
        }
        try {
            return new self(\FFI::cdef(self::header(), $path), $path);
        } catch (\FFI\Exception $e) {
            throw new LibraryException(sprintf(
                'cannot bind %s: %s (under php-fpm, where ffi.enable=preload, load it with opcache.preload: '
                . 'see bindings/php/README.md)',
                $path,
                $e->getMessage(),
            ), 0, $e);
        }
    }
}
