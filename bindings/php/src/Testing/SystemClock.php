<?php

declare(strict_types=1);

namespace Leasehold\Testing;

/** Real monotonic time (hrtime), for in-memory tests that want leases to expire by themselves. */
final class SystemClock implements Clock
{
    public function now(): float
    {
        return hrtime(true) / 1e9;
    }

    public function sleep(float $seconds): void
    {
        if ($seconds > 0.0) {
            usleep((int) ceil($seconds * 1e6));
        }
    }
}
