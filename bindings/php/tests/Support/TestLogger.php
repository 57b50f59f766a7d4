<?php

declare(strict_types=1);

namespace Leasehold\Tests\Support;

/** A PSR-3 logger that keeps what it is told, for the event tests. */
final class TestLogger extends \Psr\Log\AbstractLogger
{
    /** @var list<array{level: string, message: string, context: array<string, mixed>}> */
    public array $records = [];

    /** @param array<string, mixed> $context */
    public function log($level, $message, array $context = []): void
    {
        $this->records[] = ['level' => (string) $level, 'message' => (string) $message, 'context' => $context];
    }

    /** @return list<array{level: string, message: string, context: array<string, mixed>}> the records of $event */
    public function of(string $event): array
    {
        return array_values(array_filter($this->records, static fn (array $r): bool =>
            ($r['context']['event'] ?? null) === $event));
    }

    /** Everything logged, as one string, to search for what must never appear. */
    public function dump(): string
    {
        return var_export($this->records, true);
    }
}
