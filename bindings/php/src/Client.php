<?php

declare(strict_types=1);

namespace Leasehold;

use Leasehold\Exception\BackendUnavailableException;
use Leasehold\Exception\InvalidArgumentException;
use Leasehold\Exception\LockLostException;
use Leasehold\Exception\LockTimeoutException;

/**
 * A connection to one lock backend, chosen by URL (file:///dir, redis://…, redlock://…, postgres://…,
 * mysql://…).
 *
 * Share one Client per process: it is cheap to keep and expensive to open. It keeps working in a child after
 * pcntl_fork() (the library opens the child's own connections), so php-fpm and forking queue workers may create
 * it before they fork.
 */
final class Client implements ClientInterface
{
    public const DEFAULT_TTL = 30.0;
    public const DEFAULT_WAIT = 10.0;

    private ?\FFI\CData $handle;
    private readonly ?Events $events;

    private function __construct(
        private readonly Library $library,
        \FFI\CData $handle,
        private readonly bool $persistent,
        ?object $logger,
    ) {
        $this->handle = $handle;
        $this->events = $logger === null ? null : new Events($logger);
    }

    /**
     * @param string      $url        the backend, e.g. file:///var/lib/leasehold or redis://127.0.0.1:6379
     *                                (query parameters: prefix, connect_timeout_ms, io_timeout_ms, pool_size)
     * @param string|null $library    path of libleasehold; null for LEASEHOLD_LIBRARY, the preloaded scope, the
     *                                system's libleasehold.so.0 or the workspace's target/release build
     * @param bool        $persistent share one connection per URL for the life of the process (php-fpm worker):
     *                                the first connect() opens it, later ones (in later requests too) reuse it,
     *                                and so do its stats(); a pcntl_fork() child gets its own
     * @param \Psr\Log\LoggerInterface|null $logger receives PSR-3 events: acquired, released (debug); lost,
     *                                expired while held (warning); backend errors (error); retries (debug).
     *                                psr/log is only needed when a logger is given
     *
     * @throws Exception\InvalidArgumentException    a malformed URL, an unknown scheme or parameter
     * @throws Exception\BackendUnavailableException the backend does not answer within the timeouts
     * @throws Exception\LibraryException            libleasehold cannot be loaded
     */
    public static function connect(
        string $url,
        ?string $library = null,
        bool $persistent = false,
        ?\Psr\Log\LoggerInterface $logger = null,
    ): self {
        if (str_contains($url, "\0")) {
            throw new InvalidArgumentException('the URL contains a NUL byte');
        }
        $binding = Library::load($library);
        $ffi = $binding->ffi();
        $out = $ffi->new('leasehold_client*');
        $status = $persistent
            ? $ffi->leasehold_client_open_persistent($url, \FFI::addr($out))
            : $ffi->leasehold_client_open($url, \FFI::addr($out));
        if ($status !== Library::OK) {
            $error = $binding->error($status, 'cannot open the client');
            if ($logger !== null && ($status === Library::UNAVAILABLE || $status === Library::INTERNAL)) {
                // The library's message, never the URL: it may hold a password.
                (new Events($logger))->backendError('connect', $status, $error->getMessage());
            }
            throw $error;
        }
        // Here as well as at the first acquisition: the earlier a shutdown function is registered, the fewer others
        // run before it (one that calls exit() skips every later one).
        RequestLeases::watch($ffi);
        return new self($binding, $out, $persistent, $logger);
    }

    /**
     * Ends the leases of the request that just finished, as the end of a php-fpm request does by itself: every
     * lease a Lock of this client still holds is released, and a lease a framework adapter hands on (a Laravel or
     * Symfony lock, which outlives its request by their rules) is detached: its keep-alive stops and it lasts until
     * its TTL. For long-running workers that serve many requests in one PHP process — RoadRunner, FrankenPHP's
     * worker mode, Laravel Octane, a queue worker between jobs — call it after each request or job. Never throws.
     */
    public function endRequest(): void
    {
        RequestLeases::end($this);
    }

    /**
     * This client's counters, decoded from the library's JSON (one snapshot, no network call): acquire_attempts,
     * acquired, not_acquired (contention), releases_ok, releases_lost, extends_ok, extends_lost, expired,
     * keepalive_renewals, keepalive_failures, restored, force_released, retries (integers), errors (kind => count), and the histograms
     * wait_seconds, hold_seconds, round_trip_seconds (count, sum in seconds, cumulative buckets as
     * [upper bound in seconds or "+Inf", count] pairs). A persistent client's counts cover every request the worker
     * served with it; after pcntl_fork() the child's client counts from zero.
     *
     * @return array<string, mixed>
     *
     * @throws Exception\BackendUnavailableException in a forked child whose client cannot reconnect
     */
    public function stats(): array
    {
        $json = $this->library->ffi()->leasehold_client_stats_json($this->handle());
        if ($json === null) {
            throw $this->library->error(Library::UNAVAILABLE, 'cannot read the stats');
        }
        $stats = json_decode((string) $json, true, 16, JSON_THROW_ON_ERROR);
        if (!is_array($stats)) {
            throw new Exception\InternalException('the library returned stats that are not a JSON object');
        }
        return $stats;
    }

    /**
     * The same counters in the Prometheus text exposition format, labelled with the backend and the URL's key
     * prefix (never a key or a password): serve it on /metrics with
     * `header('Content-Type: text/plain; version=0.0.4')` (see examples/php/metrics.php).
     *
     * @throws Exception\BackendUnavailableException in a forked child whose client cannot reconnect
     */
    public function metrics(): string
    {
        $text = $this->library->ffi()->leasehold_client_metrics($this->handle());
        if ($text === null) {
            throw $this->library->error(Library::UNAVAILABLE, 'cannot read the metrics');
        }
        return (string) $text;
    }

    /** True when this client shares the process-wide connection for its URL (connect(persistent: true)). */
    public function isPersistent(): bool
    {
        return $this->persistent;
    }

    /** @internal the PSR-3 events, null without a logger */
    public function events(): ?Events
    {
        return $this->events;
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
     * A shared (read) lock on $key, not yet acquired: any number of shared holders at once, or one exclusive holder
     * (createLock() on the same key). While an exclusive request waits, new shared requests wait behind it, so a
     * stream of readers never starves a writer.
     *
     * @param string    $key 1 to 1024 bytes, binary-safe
     * @param int|float $ttl seconds the lease lasts after each acquire or extend
     */
    public function createSharedLock(string $key, mixed $ttl = self::DEFAULT_TTL): Lock
    {
        Key::check($key);
        return new Lock($this, $key, self::positiveTtl($ttl), shared: true);
    }

    /**
     * A counting semaphore: at most $permits leases on $key at once. Each acquire() on it takes one permit, as a
     * Lock of its own (token, fence, TTL, extend, release). Semaphore keys and lock keys are separate namespaces.
     *
     * @param string    $key     1 to 1024 bytes, binary-safe
     * @param int       $permits 1 to 65535; everyone using one semaphore should pass the same number
     * @param int|float $ttl     seconds each permit lasts after its acquire or extend
     */
    public function createSemaphore(string $key, int $permits, mixed $ttl = self::DEFAULT_TTL): Semaphore
    {
        Key::check($key);
        if ($permits < 1 || $permits > 65535) {
            throw new InvalidArgumentException(sprintf('permits must be 1 to 65535, got %d', $permits));
        }
        return new Semaphore($this, $key, $permits, self::positiveTtl($ttl));
    }

    private static function positiveTtl(mixed $ttl): int
    {
        $ttlMs = Seconds::toMillis($ttl, 'ttl');
        if ($ttlMs === 0) {
            throw new InvalidArgumentException('ttl must be positive, got 0 s');
        }
        return $ttlMs;
    }

    /**
     * Picks up a lease taken elsewhere — another process, or the dispatcher of a queued job that this job must
     * release — by its key and the token the acquiring process read from Lock::token(). One round trip confirms
     * the token still holds the key; the returned Lock holds it (fence(), extend(), release() as usual).
     *
     * @param string    $key   1 to 1024 bytes, binary-safe
     * @param string    $token 32 lowercase hexadecimal characters
     * @param int|float $ttl   seconds for later extend() calls without an argument and for keepAlive()
     *
     * @throws LockLostException           the token no longer holds the key (expired, released, taken over)
     * @throws InvalidArgumentException    a malformed key or token; PostgreSQL advisory mode (a session owns the
     *                                     lock there: use ?lock=table)
     * @throws BackendUnavailableException
     */
    public function restoreLock(string $key, string $token, mixed $ttl = self::DEFAULT_TTL): Lock
    {
        Key::check($key);
        if (preg_match('/^[0-9a-f]{32}$/D', $token) !== 1) {
            throw new InvalidArgumentException('a lease token is 32 lowercase hexadecimal characters');
        }
        $lock = $this->createLock($key, $ttl);
        $ffi = $this->library->ffi();
        $out = $this->library->newLeaseOut();
        $status = $ffi->leasehold_lease_restore($this->handle(), $key, strlen($key), $token, \FFI::addr($out));
        if ($status !== Library::OK) {
            throw $this->library->error($status, 'cannot restore the lock');
        }
        $lock->adopt($out);
        return $lock;
    }

    /**
     * Frees $key whoever holds it: the operator's escape hatch for a lock whose holder is known to be dead. The
     * holder's next release() or extend() throws LockLostException. Counted (stats()['force_released']) and
     * logged by the library. On PostgreSQL advisory it terminates the holding session (needs pg_signal_backend).
     *
     * @throws InvalidArgumentException    a malformed key
     * @throws BackendUnavailableException
     */
    public function forceRelease(string $key): void
    {
        Key::check($key);
        $status = $this->library->ffi()->leasehold_force_release($this->handle(), $key, strlen($key));
        if ($status !== Library::OK) {
            throw $this->library->error($status, 'cannot force the release');
        }
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

    /**
     * Runs an irreversible action at most once per key (an idempotency key): a charge, an e-mail, a call to a
     * partner's API, whatever number of times a job is retried. The first call takes the key's lease (waiting up to
     * $ttl while another attempt holds it), records that it starts (with its fence), runs `$fn(Lock)` with the
     * lease kept alive, records its result (serialize()d, at most 64 KiB) and releases. Later calls within
     * $keepFor return the recorded result without running $fn.
     *
     * An earlier attempt that started and never finished (its worker died, or $fn threw) is not run again blindly:
     * without $recover this throws IncompleteAttemptException (with its fence() and startedAt()). With $recover,
     * `$recover(IncompleteAttemptException $attempt, Lock $lock)` checks the business result and returns
     * `Recovery::done($result)` (recorded as done; once() returns $result) or `Recovery::rerun()` (run $fn now).
     *
     * @template T
     * @param callable(Lock): T $fn
     * @param int|float $ttl     seconds the lease lasts (kept alive while $fn runs); also how long to wait for it
     * @param int|float $keepFor seconds the record is kept after its last write (at most 7 days)
     * @param null|callable(Exception\IncompleteAttemptException, Lock): Recovery $recover
     * @return T what $fn returned, now or on the call that ran it
     *
     * @throws Exception\IncompleteAttemptException an earlier attempt never finished, and nothing recovered it
     * @throws LockTimeoutException another attempt held the key for all of $ttl
     * @throws LockLostException the lease was lost before the result was recorded
     * @throws \Throwable whatever $fn threw (the attempt then stays incomplete: it may have done part of its work)
     */
    public function once(
        string $key,
        callable $fn,
        mixed $ttl = self::DEFAULT_TTL,
        mixed $keepFor = 86400.0,
        ?callable $recover = null,
    ): mixed {
        Key::check($key);
        $keepMs = Seconds::toMillis($keepFor, 'keepFor');
        $lock = new Lock($this, $key, self::positiveTtl($ttl), once: true);
        if (!$lock->acquire($ttl)) {
            throw Once::timedOut($key, $ttl);
        }
        return Once::run(
            $lock,
            $key,
            $lock->onceRead(...),
            static function (int $state, string $result) use ($lock, $keepMs): void {
                $state === Library::ONCE_DONE ? $lock->onceDone($result, $keepMs) : $lock->onceStarted($keepMs);
            },
            $fn,
            $recover,
        );
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

    /**
     * @internal the `retries` counter of stats(), read alone (no JSON): Lock reads it around each acquire when it
     * reports events, so a logger costs two plain calls per acquire, not two snapshots of every counter
     */
    public function retriesSoFar(): int
    {
        return (int) $this->library->ffi()->leasehold_client_retries($this->handle());
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
            // object (PHP's shutdown destroys objects in any order) stay valid. For a persistent client this
            // drops only this object's reference: the process keeps the connection for the next request.
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
