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
 * Which library is used, the first that applies: an explicit path; the file LEASEHOLD_LIBRARY names; a scope
 * preloaded under the name "LEASEHOLD" (php-fpm with ffi.enable=preload, see preload.php); the system library
 * `libleasehold.so.0` found by the dynamic loader (the Debian package, or `scripts/install.sh` into a directory
 * the loader searches); the build in this package's own workspace (`target/release`). No step needs the package's
 * files to be symlinks. Under php-fpm with ffi.enable=preload, only the preloaded scope can be used.
 *
 * Whatever is found must speak this package's ABI: the same major and the same or a newer minor, or loading
 * fails with a message naming both versions. Each binding is made once per process, because FFI::cdef parses
 * the header and dlopen()s the library every time.
 */
final class Library
{
    public const SCOPE = 'LEASEHOLD';

    /** The version of this PHP package; the library it loads may be newer within the same ABI major. */
    public const VERSION = '0.4.0';
    /** The ABI this package is written against, `major * 1000 + minor` (the C header's LEASEHOLD_ABI_VERSION). */
    public const ABI_VERSION = 4;
    /** The installed library's name for the dynamic loader (its SONAME). */
    public const SYSTEM_LIBRARY = 'libleasehold.so.0';

    public const OK = 0;
    public const NOT_ACQUIRED = 1;
    public const LOST = 2;
    public const UNAVAILABLE = 3;
    public const INVALID_ARGUMENT = 4;
    public const INTERNAL = 5;
    /** A wait ended early by `Client::interrupt()` or by SIGTERM/SIGINT: `acquire()` returns false. */
    public const INTERRUPTED = 6;
    public const STALE_FENCE = 7;
    public const INCOMPLETE_ATTEMPT = 8;

    /** What `leasehold_once_read` found: nothing, an attempt that never finished, a recorded result. */
    public const ONCE_NONE = 0;
    public const ONCE_STARTED = 1;
    public const ONCE_DONE = 2;

    /** @var array<string, self> */
    private static array $byPath = [];
    private static ?self $scoped = null;
    private static bool $scopeLookedUp = false;
    private static ?LibraryException $scopeRefused = null;

    /** `leasehold_lease*`, parsed once: FFI::new() with a type string parses the declaration on every call. */
    private ?\FFI\CType $leaseOutType = null;

    private function __construct(
        private readonly \FFI $ffi,
        private readonly ?string $path,
    ) {
    }

    /**
     * @param string|null $path the library file; null to look for it (see the class comment)
     *
     * @throws LibraryException when no library is found, or the one found speaks another ABI
     */
    public static function load(?string $path = null): self
    {
        if ($path !== null && $path !== '') {
            return self::$byPath[$path] ??= self::open($path);
        }
        $fromEnv = self::fromEnvironment();
        if ($fromEnv !== null && self::mayBindFiles()) {
            return self::$byPath[$fromEnv] ??= self::open($fromEnv);
        }
        $scoped = self::scoped();
        if ($scoped !== null) {
            return $scoped;
        }
        if (!self::mayBindFiles()) {
            throw new LibraryException('ffi.enable=preload allows no library but a preloaded one, and no FFI scope '
                . '"' . self::SCOPE . '" was preloaded: set opcache.preload to Leasehold\'s preload.php (see the README\'s '
                . 'php-fpm section)');
        }
        $path = self::defaultPath();
        return self::$byPath[$path] ??= self::open($path);
    }

    /**
     * The library file (or, for the system library, the loader's name for it) used when no path is given and
     * nothing was preloaded: LEASEHOLD_LIBRARY, then `libleasehold.so.0` if the dynamic loader finds it, then the
     * workspace's `target/release` build.
     */
    public static function defaultPath(): string
    {
        $fromEnv = self::fromEnvironment();
        if ($fromEnv !== null) {
            return $fromEnv;
        }
        $workspace = self::workspaceBuild();
        if (PHP_OS_FAMILY === 'Linux' && extension_loaded('ffi') && self::loaderFinds(self::SYSTEM_LIBRARY)) {
            return self::SYSTEM_LIBRARY;
        }
        return $workspace;
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
        if (self::$scopeRefused !== null) {
            throw self::$scopeRefused;
        }
        if (!self::$scopeLookedUp) {
            self::$scopeLookedUp = true;
            try {
                $ffi = \FFI::scope(self::SCOPE);
            } catch (\Throwable) {
                // Not preloaded (the CLI, or php-fpm without opcache.preload): bind the library file instead.
                return self::$scoped = null;
            }
            try {
                // The preloaded header declares leasehold_abi_version, so the library had it when it was bound.
                self::refuseIncompatible('the preloaded FFI scope', (string) $ffi->leasehold_version(),
                    (int) $ffi->leasehold_abi_version());
            } catch (LibraryException $e) {
                throw self::$scopeRefused = $e;
            }
            self::$scoped = new self($ffi, null);
        }
        return self::$scoped;
    }

    private static function fromEnvironment(): ?string
    {
        $fromEnv = getenv('LEASEHOLD_LIBRARY');
        return is_string($fromEnv) && $fromEnv !== '' ? $fromEnv : null;
    }

    private static function workspaceBuild(): string
    {
        $file = match (PHP_OS_FAMILY) {
            'Darwin' => 'libleasehold.dylib',
            'Windows' => 'leasehold.dll',
            default => 'libleasehold.so',
        };
        return dirname(__DIR__, 3) . '/target/release/' . $file;
    }

    /** Whether FFI::cdef may bind a library file here: ffi.enable=preload forbids it outside the CLI. */
    private static function mayBindFiles(): bool
    {
        $setting = strtolower((string) ini_get('ffi.enable'));
        return $setting !== 'preload' || PHP_SAPI === 'cli';
    }

    /** Whether the dynamic loader resolves `$name` (a bare SONAME: its search path, ld.so.cache, rpath). */
    private static function loaderFinds(string $name): bool
    {
        try {
            \FFI::cdef('const char *leasehold_version(void);', $name);
            return true;
        } catch (\Throwable) {
            return false;
        }
    }

    /** A bare name (no slash) goes to the dynamic loader's search; anything else is a file. */
    private static function isLoaderName(string $path): bool
    {
        return !str_contains($path, '/');
    }

    private static function open(string $path): self
    {
        if (!extension_loaded('ffi')) {
            throw new LibraryException('the PHP extension "ffi" is not loaded; Leasehold needs it');
        }
        if (!self::isLoaderName($path) && !is_file($path)) {
            throw new LibraryException(sprintf(
                'libleasehold not found at %s: install the libleasehold0 package or run scripts/install.sh, '
                . 'build it with `cargo build --release -p leasehold-ffi`, or set LEASEHOLD_LIBRARY to its path',
                $path,
            ));
        }
        self::checkAbi($path);
        try {
            $binding = new self(\FFI::cdef(self::header(), $path), $path);
        } catch (\FFI\Exception $e) {
            throw new LibraryException(sprintf(
                'cannot bind %s: %s (under php-fpm, where ffi.enable=preload, load it with opcache.preload: '
                . 'see bindings/php/README.md)',
                $path,
                $e->getMessage(),
            ), 0, $e);
        }
        return $binding;
    }

    /**
     * Refuses a library of another ABI major or an older minor before binding the whole header, so the message
     * names both versions instead of the first symbol an older library lacks.
     */
    private static function checkAbi(string $path): void
    {
        try {
            $version = (string) \FFI::cdef('const char *leasehold_version(void);', $path)->leasehold_version();
        } catch (\FFI\Exception $e) {
            throw new LibraryException(sprintf('cannot load %s: %s', $path, $e->getMessage()), 0, $e);
        }
        try {
            $abi = (int) \FFI::cdef('uint32_t leasehold_abi_version(void);', $path)->leasehold_abi_version();
        } catch (\FFI\Exception) {
            $abi = null; // libraries before 0.3 have no ABI number: older than any this package accepts
        }
        self::refuseIncompatible($path, $version, $abi);
    }

    /** @internal the ABI rule, public for the preloaded scope's check and for tests */
    public static function refuseIncompatible(string $where, string $version, ?int $abi): void
    {
        $wantMajor = intdiv(self::ABI_VERSION, 1000);
        $wantMinor = self::ABI_VERSION % 1000;
        if ($abi !== null && intdiv($abi, 1000) === $wantMajor && $abi % 1000 >= $wantMinor) {
            return;
        }
        $theirs = $abi === null ? 'no ABI number (a library before 0.3)'
            : sprintf('ABI %d.%d', intdiv($abi, 1000), $abi % 1000);
        throw new LibraryException(sprintf(
            'libleasehold %s at %s speaks %s, but the Leasehold PHP package %s needs ABI %d.%d (the same major, '
            . 'the same or a newer minor): install libleasehold %d.%d or newer of the same major, or the PHP '
            . 'package that matches the library',
            $version,
            $where,
            $theirs,
            self::VERSION,
            $wantMajor,
            $wantMinor,
            $wantMajor,
            $wantMinor,
        ));
    }
}
