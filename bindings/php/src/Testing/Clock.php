<?php

declare(strict_types=1);

namespace Leasehold\Testing;

/**
 * The time an InMemoryBackend measures leases by. ManualClock (the default) moves only when told to, so a test
 * of code that locks decides when a TTL runs out; SystemClock follows real time.
 */
interface Clock
{
    /** Seconds since an arbitrary start, never decreasing. */
    public function now(): float;

    /**
     * Lets $seconds pass: a ManualClock jumps forward at once, a SystemClock really sleeps. Waits inside the
     * in-memory client (acquire() on a held key) use it, so they cost no real time on a ManualClock.
     */
    public function sleep(float $seconds): void;
}
