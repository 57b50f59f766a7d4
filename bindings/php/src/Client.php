<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Exception\LockTimeoutException;

/**
 * A connection to one lock backend, chosen by URL (file:///dir, redis://…, redlock://…, postgres://…).
 *
 * Share one Client per process: it is cheap to keep and expensive to open. It keeps working in a child after
 * pcntl_fork() (the library opens the child's own connections), so php-fpm and forking queue workers may create
 * it before they fork.
 */
final class Client
{
    public const DEFAULT_TTL = 30.0;
    public const DEFAULT_WAIT = 10.0;

    private ?\FFI\CData $handle;

    private function __construct(private readonly Library $library, \FFI\CData $handle)
    {
        $this->handle = $handle;
    }

    /**
     * @param string      $url     the backend, e.g. file:///var/lib/leasehold or redis://127.0.0.1:6379
     *                             (query parameters: prefix, connect_timeout_ms, io_timeout_ms, pool_size)
     * @param string|null $library path of libleasehold; null for the preloaded scope, LEASEHOLD_LIBRARY or the
     *                             workspace's target/release build
     *
     * @throws Exception\InvalidArgumentException    a malformed URL, an unknown scheme or parameter
     * @throws Exception\BackendUnavailableException the backend does not answer within the timeouts
     * @throws Exception\LibraryException            libleasehold cannot be loaded
     */
    public static function connect(string $url, ?string $library = null): self
    {
        if (str_contains($url, "\0")) {
            throw new InvalidArgumentException('the URL contains a NUL byte');
        }
        $binding = Library::load($library);
        $ffi = $binding->ffi();
        $out = $ffi->new('leasehold_client*');
        $status = $ffi->leasehold_client_open($url, \FFI::addr($out));
        if ($status !== Library::OK) {
            throw $binding->error($status, 'cannot open the client');
        }
        return new self($binding, $out);
    }

    /**
     * A lock on $key, not yet acquired. Nothing is sent to the backend until tryAcquire() or acquire().
     *
     * @param string    $key 1 to 1024 bytes, binary-safe
     * @param int|float $ttl seconds the lease lasts after each acquire or extend (sub-milliseconds round up)
     */
    public function createLock(string $key, mixed $ttl = self::DEFAULT_TTL): Lock
    {
        Key::check($key);
        $ttlMs = Seconds::toMillis($ttl, 'ttl');
        if ($ttlMs === 0) {
            throw new InvalidArgumentException('ttl must be positive, got 0 s');
        }
        return new Lock($this, $key, $ttlMs);
    }

    /**
     * Runs $callback while holding $key, and releases it on every path.
     *
     * @template T
     * @param callable(Lock): T $callback gets the held Lock (for its fence(), extend(), remainingLifetime())
     * @param int|float         $ttl      seconds the lease lasts; extend() inside the callback for long work
     * @param int|float         $wait     seconds to wait for the key; 0 for a single attempt
     * @return T what the callback returned
     *
     * @throws LockTimeoutException someone else held the key for all of $wait
     * @throws LockLostException    the callback finished but the lease had been lost meanwhile; the callback's
     *                              result is in getCallbackResult()
     * @throws BackendUnavailableException the backend failed; if only the final release did, the callback's
     *                              result is in getCallbackResult()
     * @throws \Throwable           whatever the callback threw (after the release)
     */
    public function synchronized(
        string $key,
        callable $callback,
        mixed $ttl = self::DEFAULT_TTL,
        mixed $wait = self::DEFAULT_WAIT,
    ): mixed {
        $lock = $this->createLock($key, $ttl);
        if (!$lock->acquire($wait)) {
            throw new LockTimeoutException(sprintf(
                'lock %s is held elsewhere; gave up after waiting %s s',
                Key::describe($key),
                is_int($wait) || is_float($wait) ? $wait : '?',
            ), Library::NOT_ACQUIRED);
        }
        try {
            $result = $callback($lock);
        } catch (\Throwable $failure) {
            try {
                $lock->release();
            } catch (\Throwable) {
                // The callback's exception is the one the caller must see; a failed release here leaves the key
                // to expire on its own, and the destructor makes one more attempt.
            }
            throw $failure;
        }
        try {
            $lock->release();
        } catch (LockLostException | BackendUnavailableException $failure) {
            throw $failure->withCallbackResult($result);
        }
        return $result;
    }

    /** The version of libleasehold in use. */
    public function version(): string
    {
        return $this->library->version();
    }

    /** The FFI binding in use (isPreloaded() tells whether it came from opcache.preload). */
    public function library(): Library
    {
        return $this->library;
    }

    /** @internal the C handle, for Lock */
    public function handle(): \FFI\CData
    {
        if ($this->handle === null) {
            throw new InvalidArgumentException('the client is closed');
        }
        return $this->handle;
    }

    public function __destruct()
    {
        $handle = $this->handle;
        $this->handle = null;
        if ($handle === null || \FFI::isNull($handle)) {
            return;
        }
        try {
            // Leases hold their own reference to the client inside the library, so locks that outlive this
            // object (PHP's shutdown destroys objects in any order) stay valid.
            $this->library->ffi()->leasehold_client_free($handle);
        } catch (\Throwable) {
            // A destructor must never throw.
        }
    }

    /** Copying the handle would free it twice. */
    private function __clone()
    {
    }
}
