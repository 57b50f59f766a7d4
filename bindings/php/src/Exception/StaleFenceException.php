<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * The fence gate refused a write: a newer fence was already accepted for the resource, so the lease this fence came
 * from is stale (it expired or was taken over while its holder worked). Roll the transaction back: nothing of it may
 * commit. getCode() is the C status `LEASEHOLD_STALE_FENCE` (7).
 */
final class StaleFenceException extends \RuntimeException implements LeaseholdException
{
    /** The C status of a stale fence (docs/semantics.md §1). */
    public const STATUS = 7;

    public function __construct(
        private readonly string $resource,
        private readonly int $fence,
        private readonly int $storedFence,
        ?\Throwable $previous = null,
    ) {
        parent::__construct(
            sprintf('stale fence for %s: %d is older than %d, already accepted',
                json_encode($resource, JSON_INVALID_UTF8_SUBSTITUTE | JSON_UNESCAPED_SLASHES), $fence, $storedFence),
            self::STATUS,
            $previous,
        );
    }

    /** The resource whose write was refused. */
    public function resource(): string
    {
        return $this->resource;
    }

    /** The fence the write came with. */
    public function fence(): int
    {
        return $this->fence;
    }

    /** The newer fence the gate had already accepted for the resource. */
    public function storedFence(): int
    {
        return $this->storedFence;
    }
}
