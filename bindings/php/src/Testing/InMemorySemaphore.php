<?php

declare(strict_types=1);

namespace Leasehold\Testing;

use Leasehold\Client;
use Leasehold\SemaphoreInterface;

/** Leasehold\Semaphore in memory: each permit is an InMemoryLock of its own. Create it with InMemoryClient. */
final class InMemorySemaphore implements SemaphoreInterface
{
    /** @internal use InMemoryClient::createSemaphore() */
    public function __construct(
        private readonly InMemoryBackend $backend,
        private readonly string $key,
        private readonly int $permits,
        private readonly int $ttlMs,
        private readonly ?InMemoryClient $client = null,
    ) {
    }

    public function tryAcquire(): ?InMemoryLock
    {
        $permit = $this->permit();
        return $permit->tryAcquire() ? $permit : null;
    }

    public function acquire(mixed $wait = Client::DEFAULT_WAIT): ?InMemoryLock
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

    private function permit(): InMemoryLock
    {
        return new InMemoryLock($this->backend, $this->key, $this->ttlMs, permits: $this->permits, client: $this->client);
    }
}
