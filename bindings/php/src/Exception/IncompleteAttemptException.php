<?php

declare(strict_types=1);

namespace Leasehold\Exception;

/**
 * `Client::once()` found an earlier attempt of the action that started and never finished (its worker died, or
 * its callable threw): the action may or may not have happened, so it is not run again blindly. Check the
 * business result (did the charge go through? was the e-mail sent?), then call once() again with a `$recover`
 * callable that returns `Recovery::done($result)` or `Recovery::rerun()`. getCode() is the C status
 * `LEASEHOLD_INCOMPLETE_ATTEMPT` (8).
 */
final class IncompleteAttemptException extends \RuntimeException implements LeaseholdException
{
    public const STATUS = 8;

    public function __construct(
        private readonly string $key,
        private readonly int $fence,
        private readonly \DateTimeImmutable $startedAt,
    ) {
        parent::__construct(
            sprintf('once-key %s: an attempt with fence %d started at %s and never finished; check whether its '
                . 'action happened, then recover (Recovery::done($result) or Recovery::rerun())',
                json_encode($key, JSON_INVALID_UTF8_SUBSTITUTE | JSON_UNESCAPED_SLASHES), $fence,
                $startedAt->format('Y-m-d\TH:i:s.vP')),
            self::STATUS,
        );
    }

    /** The once-key. */
    public function key(): string
    {
        return $this->key;
    }

    /** The fence of the attempt that never finished (hand it to the store you check: it wrote with it). */
    public function fence(): int
    {
        return $this->fence;
    }

    /** When that attempt started (UTC). */
    public function startedAt(): \DateTimeImmutable
    {
        return $this->startedAt;
    }
}
