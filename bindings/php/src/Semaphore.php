<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * A counting semaphore: at most permits() leases on one key at once. Create it with Client::createSemaphore().
 *
 * Each tryAcquire()/acquire() takes one permit and returns it as a Lock of its own (release(), extend(),
 * fence(), keepAlive(), the destructor releasing it), or null when every permit is taken. Expired permits (a
 * worker that died) come back at their TTL, judged by the backend's clock.
 */
final class Semaphore implements SemaphoreInterface
{
    /** @internal use Client::createSemaphore() */
    public function __construct(
        private readonly Client $client,
        private readonly string $key,
        private readonly int $permits,
        private readonly int $ttlMs,
    ) {
    }

    /**
     * One attempt at a permit.
     *
     * @throws Exception\BackendUnavailableException
     */
    public function tryAcquire(): ?Lock
    {
        $permit = $this->permit();
        return $permit->tryAcquire() ? $permit : null;
    }

    /**
     * Waits up to $wait seconds for a permit (first come, first served).
     *
     * @param int|float $wait seconds; 0 makes a single attempt
     *
     * @throws Exception\BackendUnavailableException
     * @throws Exception\InvalidArgumentException
     */
    public function acquire(mixed $wait = Client::DEFAULT_WAIT): ?Lock
    {
        $permit = $this->permit();
        return $permit->acquire($wait) ? $permit : null;
    }

    public function key(): string
    {
        return $this->key;
    }

    public function permits(): int
    {
        return $this->permits;
    }

    private function permit(): Lock
    {
        return new Lock($this->client, $this->key, $this->ttlMs, permits: $this->permits);
    }
}
