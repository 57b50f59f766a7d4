<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * A counting semaphore: at most permits() leases on one key at once, each taken as a LockInterface of its own.
 * Semaphore implements it over the library, Testing\InMemorySemaphore in memory.
 */
interface SemaphoreInterface
{
    /**
     * One attempt at a permit; null when every permit is taken.
     *
     * @throws Exception\BackendUnavailableException
     */
    public function tryAcquire(): ?LockInterface;

    /**
     * Waits up to $wait seconds for a permit; null when the wait ran out.
     *
     * @param int|float $wait seconds; 0 makes a single attempt
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException
     */
    public function acquire(mixed $wait = Client::DEFAULT_WAIT): ?LockInterface;

    public function key(): string;

    public function permits(): int;
}
