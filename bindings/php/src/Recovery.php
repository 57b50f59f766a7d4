<?php

declare(strict_types=1);

namespace Leasehold;

/**
 * What a `$recover` callable of `Client::once()` decided about an earlier attempt that never finished, after it
 * checked the business result: it did happen (`done($result)`: recorded as done, and once() returns $result), or
 * it did not (`rerun()`: once() runs the action now).
 */
final class Recovery
{
    private function __construct(private readonly bool $done, private readonly mixed $result)
    {
    }

    public static function done(mixed $result = null): self
    {
        return new self(true, $result);
    }

    public static function rerun(): self
    {
        return new self(false, null);
    }

    public function isDone(): bool
    {
        return $this->done;
    }

    public function result(): mixed
    {
        return $this->result;
    }
}
