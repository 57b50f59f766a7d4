<?php

declare(strict_types=1);

namespace Leasehold\Tests\Symfony;

use Leasehold\ClientInterface;
use Leasehold\Testing\InMemoryClient;

/** The same cases on the in-memory client: how a Symfony application unit-tests code that uses semaphores. */
final class InMemorySemaphoreStoreTest extends SemaphoreStoreTestCase
{
    private ?InMemoryClient $client = null;

    protected function client(): ClientInterface
    {
        // One client per test: two stores of a test share its semaphores, as two processes share a backend.
        return $this->client ??= new InMemoryClient();
    }

    protected function elapse(float $seconds): void
    {
        // The permits follow the client's manual clock; Symfony's Key measures its own lifetime in real time.
        $this->client()->clock()->sleep($seconds);
    }
}
