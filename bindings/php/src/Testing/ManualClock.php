<?php

declare(strict_types=1);

namespace Leasehold\Testing;

use Leasehold\Exception\InvalidArgumentException;

/**
 * A clock that moves only when the test moves it: `$clock->advance(31.0)` makes a 30 s lease expire at once,
 * with no real waiting. acquire() on a held key advances it to the moment the key frees (or the wait ends),
 * as if the process had slept that long.
 */
final class ManualClock implements Clock
{
    public function __construct(private float $now = 0.0)
    {
    }

    public function now(): float
    {
        return $this->now;
    }

    /** Moves the clock $seconds forward (never back: leases and fences assume a monotonic clock). */
    public function advance(float $seconds): void
    {
        if (!($seconds >= 0.0) || is_infinite($seconds)) {
            throw new InvalidArgumentException(sprintf('a clock moves forward by finite seconds, got %s', $seconds));
        }
        $this->now += $seconds;
    }

    /** The same as advance(): nothing really waits. */
    public function sleep(float $seconds): void
    {
        $this->advance($seconds);
    }
}
