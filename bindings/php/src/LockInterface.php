<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * A lease on one key: what code that takes a lock needs. Lock implements it over the library; the in-memory
 * Testing\InMemoryLock implements it for unit tests. Type your own code against this interface (and
 * ClientInterface) to test it without the FFI library or a backend.
 *
 * One object holds at most one lease at a time; release() on an object that holds none does nothing, so it is
 * safe in `finally`.
 */
interface LockInterface
{
    /**
     * One attempt. True: this object now holds the lease. False: someone else holds the key.
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException this object already holds the lease, or the TTL is too large
     */
    public function tryAcquire(): bool;

    /**
     * Waits up to $wait seconds for the key; false when the wait ran out.
     *
     * @param int|float $wait seconds; 0 makes a single attempt
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException
     */
    public function acquire(mixed $wait = Client::DEFAULT_WAIT): bool;

    /**
     * Gives the key back if this object holds it (compare-and-delete); does nothing when it holds no lease.
     *
     * @throws Exception\LockLostException the lease had ended (expired or taken over)
     * @throws Exception\BackendUnavailableException
     */
    public function release(): void;

    /**
     * Makes the held lease end $ttl seconds from now (owner only).
     *
     * @param int|float|null $ttl seconds; null for this lock's TTL
     *
     * @throws Exception\LockLostException the lease had already ended
     * @throws Exception\InvalidArgumentException this object holds no lease, or a bad $ttl
     * @throws Exception\BackendUnavailableException
     */
    public function extend(mixed $ttl = null): void;

    /**
     * Background renewal of the held lease every third of its TTL, on or off.
     *
     * @throws Exception\InvalidArgumentException this object holds no lease
     */
    public function keepAlive(bool $enabled = true): void;

    /** Why background renewal failed (LockLostException: final), or null while it is fine. */
    public function keepAliveError(): ?Exception\LeaseholdException;

    /** Whether keepAlive() is on for the held lease. */
    public function keepsAlive(): bool;

    /** Local check, no network call: this object holds a lease whose conservative deadline has not passed. */
    public function isAcquired(): bool;

    /**
     * Turns the held shared lease exclusive, keeping its token: waits up to $wait seconds until no other reader is
     * left, then this lease is the key's only holder, with a new fence() and its TTL renewed. False when other
     * readers still hold the key at the end of the wait (the lease stays shared and held), and when SIGTERM or SIGINT
     * ends the wait early, as it ends an acquire's (the pcntl handler runs as this returns). Two holders promoting
     * at once wait for each other until one's wait ends.
     *
     * @param int|float $wait seconds; 0 makes a single attempt
     *
     * @throws Exception\InvalidArgumentException this object holds no shared lease, or the backend cannot promote
     * @throws Exception\LockLostException the lease is not ours any more
     * @throws Exception\BackendUnavailableException
     */
    public function promote(mixed $wait = 0.0): bool;

    /**
     * Turns the held exclusive lease shared, keeping its token and fence, at once: other readers may join from now
     * on, writers may not. Its TTL is renewed.
     *
     * @throws Exception\InvalidArgumentException this object holds no exclusive lease, or the backend cannot demote
     * @throws Exception\LockLostException the lease is not ours any more
     * @throws Exception\BackendUnavailableException
     */
    public function demote(): void;

    /**
     * Throws LockLostException unless this object holds its lease with at least $margin seconds left and no failed
     * keep-alive renewal: call it between the steps of a long job. No network call.
     */
    public function checkpoint(mixed $margin = 0.0): void;

    /** Seconds left on the held lease (0 or less once expired); null when this object holds none. */
    public function remainingLifetime(): ?float;

    /** The held lease's owner token (32 lowercase hex characters), or null. */
    public function token(): ?string;

    /** The held lease's fencing token (strictly increasing per key), or null. */
    public function fence(): ?int;

    public function key(): string;

    /** True for a shared (read) lock. */
    public function isShared(): bool;

    /** The semaphore's size for a permit; null for a lock. */
    public function permits(): ?int;

    /** The TTL in seconds that acquire() and extend() use. */
    public function ttl(): float;

    /**
     * Lets go of the held lease without releasing it: the key stays held until its TTL and can be picked up with
     * ClientInterface::restoreLock(). Does nothing when this object holds no lease.
     */
    public function detach(): void;
}
