<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * What code that takes locks needs from a client. Client implements it over libleasehold and a backend;
 * Testing\InMemoryClient implements it in pure PHP for unit tests (no FFI, no server, a clock the test moves).
 * Take a ClientInterface in your constructors, pass a Client in production and an InMemoryClient in tests.
 */
interface ClientInterface
{
    /**
     * A lock on $key, not yet acquired.
     *
     * @param string    $key 1 to 1024 bytes, binary-safe
     * @param int|float $ttl seconds the lease lasts after each acquire or extend
     *
     * @throws Exception\InvalidArgumentException a bad key or TTL
     */
    public function createLock(string $key, mixed $ttl = Client::DEFAULT_TTL): LockInterface;

    /**
     * A shared (read) lock on $key: any number of shared holders at once, or one exclusive holder.
     *
     * @throws Exception\InvalidArgumentException a bad key or TTL
     */
    public function createSharedLock(string $key, mixed $ttl = Client::DEFAULT_TTL): LockInterface;

    /**
     * A counting semaphore of $permits (1 to 65535) on $key; semaphore keys are separate from lock keys.
     *
     * @throws Exception\InvalidArgumentException a bad key, permits or TTL
     */
    public function createSemaphore(string $key, int $permits, mixed $ttl = Client::DEFAULT_TTL): SemaphoreInterface;

    /**
     * Picks up a lease taken elsewhere by its 32-hex token; the returned lock holds it.
     *
     * @throws Exception\LockLostException        the token no longer holds the key
     * @throws Exception\InvalidArgumentException a malformed key or token
     * @throws Exception\BackendUnavailableException
     */
    public function restoreLock(string $key, string $token, mixed $ttl = Client::DEFAULT_TTL): LockInterface;

    /**
     * Frees $key whoever holds it; the holder's next release() or extend() throws LockLostException.
     *
     * @throws Exception\InvalidArgumentException a malformed key
     * @throws Exception\BackendUnavailableException
     */
    public function forceRelease(string $key): void;

    /**
     * Runs $callback(LockInterface $lock) while holding $key, releases on every path, returns its result.
     *
     * @throws Exception\LockTimeoutException someone else held the key for all of $wait
     * @throws Exception\LockLostException    the lease was lost meanwhile (the result is in getCallbackResult())
     * @throws \Throwable                     whatever the callback threw (after the release)
     */
    public function synchronized(
        string $key,
        callable $callback,
        mixed $ttl = Client::DEFAULT_TTL,
        mixed $wait = Client::DEFAULT_WAIT,
    ): mixed;

    /**
     * Ends the leases of the request that just finished: every lease a lock of this client still holds is
     * released; one a framework adapter hands on is detached (its keep-alive stops; it lasts until its TTL). php-fpm
     * requests do this by themselves when they end, however they end; long-running workers (RoadRunner, FrankenPHP
     * worker mode, Octane, queue workers) call it after each request or job. Never throws.
     */
    public function endRequest(): void;

    /**
     * Runs $fn(LockInterface $lock) at most once per key within $keepFor; later calls return its recorded result.
     * See Client::once().
     *
     * @throws Exception\IncompleteAttemptException an earlier attempt never finished, and nothing recovered it
     * @throws Exception\LockTimeoutException another attempt held the key for all of $ttl
     */
    public function once(
        string $key,
        callable $fn,
        mixed $ttl = Client::DEFAULT_TTL,
        mixed $keepFor = 86400.0,
        ?callable $recover = null,
    ): mixed;
}
